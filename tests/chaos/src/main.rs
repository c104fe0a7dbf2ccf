//! `chaos`: see the crate docs and `scripts/chaos.sh`. Exits 1 unless every invariant
//! holds.
use std::process::ExitCode;

use clap::Parser;

#[tokio::main]
async fn main() -> anyhow::Result<ExitCode> {
    let args = chaos::Args::parse().sized();
    let outcome = chaos::run(&args).await?;
    println!("{outcome}");
    Ok(if outcome.table.holds() {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}
