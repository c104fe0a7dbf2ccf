//! The benchmark at its smallest (`scale-bench --smoke`: 1 cluster × 2 machines, tiny task
//! durations) with the debug build the other tests use. Asserts nothing about speed, only
//! that it runs to the end and prints its table; `scripts/bench.sh --smoke` is the same run.
use std::io::Write;
use std::process::Command;

#[test]
fn the_smallest_benchmark_runs_to_the_end_and_prints_its_table() {
    let hyperplug = fleet::binaries::build_hyperplug().unwrap();
    let plugin = fleet::binaries::bundled_plugin().unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_scale-bench"))
        .arg("--smoke")
        .arg("--hyperplug")
        .arg(&hyperplug)
        .arg("--plugin")
        .arg(&plugin)
        .args(["--build", "debug (smoke run)"])
        .output()
        .unwrap();
    let table = String::from_utf8_lossy(&out.stdout);
    // The table is the run's report: written past the test harness's capture, so CI's
    // log shows it when the run passes too.
    writeln!(std::io::stderr(), "{table}").unwrap();
    assert!(
        out.status.success(),
        "scale-bench --smoke failed:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(table.contains("| figure | value | goal |"), "no table");
}
