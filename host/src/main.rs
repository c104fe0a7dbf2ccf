//! `hyperplug`: the command line. Each subcommand lives in `cli/`.
use clap::Parser;

fn main() -> std::process::ExitCode {
    hyperplug::heap::tune();
    let cli = hyperplug::cli::Cli::parse();
    hyperplug::telemetry::init(&cli.log);
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("tokio runtime");
    match runtime.block_on(cli.command.run()) {
        Ok(code) => code,
        Err(err) => {
            eprintln!("error: {err:#}");
            std::process::ExitCode::FAILURE
        }
    }
}
