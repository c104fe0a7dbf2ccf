//! The benchmark at its smallest (`scale-bench --smoke`: 1 cluster × 2 machines, tiny task
//! durations; with `--slow-tenant`, the fast tenant's 2 machines beside a hanging tenant)
//! with the debug build the other tests use. Asserts nothing about speed, only that each
//! runs to the end and prints its table; `scripts/bench.sh --smoke [--slow-tenant]` are the
//! same runs.
use std::io::Write;
use std::process::Command;
use std::sync::Mutex;

/// One run at a time: each starts a management plane of its own, and two at once on a
/// CI machine's 2 cores would only slow both.
static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());

/// `scale-bench --smoke` with `extra` arguments; its table (stdout), once it succeeded.
fn smoke(extra: &[&str]) -> String {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let hyperplug = fleet::binaries::build_hyperplug().unwrap();
    let plugin = fleet::binaries::bundled_plugin().unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_scale-bench"))
        .arg("--smoke")
        .args(extra)
        .arg("--hyperplug")
        .arg(&hyperplug)
        .arg("--plugin")
        .arg(&plugin)
        .args(["--build", "debug (smoke run)"])
        .output()
        .unwrap();
    let table = String::from_utf8_lossy(&out.stdout).into_owned();
    // The table is the run's report: written past the test harness's capture, so CI's
    // log shows it when the run passes too (`eprintln!` would be captured).
    #[expect(
        clippy::explicit_write,
        reason = "eprintln! is captured by the test harness"
    )]
    writeln!(std::io::stderr(), "{table}").unwrap();
    assert!(
        out.status.success(),
        "scale-bench --smoke {extra:?} failed:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    table
}

#[test]
fn the_smallest_benchmark_runs_to_the_end_and_prints_its_table() {
    let table = smoke(&[]);
    assert!(table.contains("| figure | value | goal |"), "no table");
}

/// `--slow-tenant` at its smallest (the fast tenant's 2 machines, the slow tenant's 32
/// hanging): it runs to the end and prints its row, whatever the times and their ratio.
#[test]
fn the_slow_tenant_run_gets_to_its_row() {
    let table = smoke(&["--slow-tenant"]);
    assert!(
        table.contains("| fast tenant's machines | alone | beside the slow tenant |"),
        "no table"
    );
    assert!(
        table.contains("\n| 2 | "),
        "no row for the fast tenant's 2 machines"
    );
}
