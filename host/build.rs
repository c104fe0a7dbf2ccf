//! Records the wasmtime version in use, for `hyperplug --version` and the benchmarks.
fn main() {
    let lock = std::fs::read_to_string("../Cargo.lock").unwrap_or_default();
    let version = lock
        .split("[[package]]")
        .find(|p| p.contains("name = \"wasmtime\"\n"))
        .and_then(|p| p.lines().find_map(|l| l.strip_prefix("version = \"")))
        .map(|v| v.trim_end_matches('"').to_string())
        .unwrap_or_else(|| "unknown".into());
    println!("cargo:rustc-env=HYPERPLUG_WASMTIME_VERSION={version}");
    println!("cargo:rerun-if-changed=../Cargo.lock");
}
