//! Running `hyperplug conformance`, the real binary, and judging its JUnit report.
use std::path::PathBuf;
use std::process::Output;

/// Run the binary with `args` without blocking the runtime that serves the endpoint;
/// requeue hints capped at `max_requeue_ms`. Its output, and its stdout as text.
pub async fn run(args: &[&str], max_requeue_ms: u64) -> (Output, String) {
    let cache = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("plugin-cache");
    let out = tokio::process::Command::new(env!("CARGO_BIN_EXE_hyperplug"))
        .arg("conformance")
        .args(args)
        .arg("--plugin-cache")
        .arg(cache)
        .args(["--max-requeue-ms", &max_requeue_ms.to_string()])
        .args(["--log", "warn"])
        .output()
        .await
        .expect("run hyperplug conformance");
    let stdout = String::from_utf8_lossy(&out.stdout).to_string();
    println!("{stdout}");
    eprintln!("{}", String::from_utf8_lossy(&out.stderr));
    (out, stdout)
}

/// Every case of a JUnit report passed or was skipped with its reason, and each of
/// `must_pass` passed.
pub fn all_pass_or_say_why_not(cases: &[(String, &'static str, String)], must_pass: &[&str]) {
    for (name, verdict, message) in cases {
        match *verdict {
            "pass" => {}
            "skip" => assert!(!message.is_empty(), "{name} skipped without a reason"),
            _ => panic!("{name} failed: {message}"),
        }
    }
    for must_pass in must_pass {
        assert!(
            cases.iter().any(|c| c.0 == *must_pass && c.1 == "pass"),
            "{must_pass} did not pass: {cases:?}"
        );
    }
}
