//! Plugin call overhead: instantiate a fresh sandbox, call a function that does no I/O,
//! drop it. Prints a table of percentiles in microseconds; asserts nothing.
//!
//! `cargo bench -p hyperplug --bench plugin_call` (set `HYPERPLUG_BENCH_ITERS` to change
//! the sample count; `scripts/build-plugins.sh --test-out DIR` builds the test plugin,
//! which this bench does itself).
use std::path::PathBuf;

use hyperplug_runtime::bindings::machine::MachineRequest;
use hyperplug_runtime::{Credentials, Limits, ObjectRef, Runtime, overhead};

fn test_plugin() -> PathBuf {
    let out = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("bench-plugins");
    let status = std::process::Command::new("bash")
        .arg(PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../scripts/build-plugins.sh"))
        .arg("--test-out")
        .arg(&out)
        .stdout(std::process::Stdio::null())
        .status()
        .expect("run build-plugins.sh");
    assert!(status.success(), "building the plugins failed");
    out.join("hostile.wasm")
}

fn request() -> MachineRequest {
    let object = |name: &str| ObjectRef {
        namespace: "bench".into(),
        name: name.into(),
        uid: format!("uid-{name}"),
    };
    MachineRequest {
        machine: object("m"),
        cluster: object("c"),
        spec: r#"{"attack":"noop"}"#.into(),
        cluster_spec: "{}".into(),
        state: None,
        bootstrap: None,
        failure_domain: None,
        addresses: vec![],
        credentials: Credentials {
            endpoint: "https://127.0.0.1:8006".into(),
            token: "bench@pve!t".into(),
            secret: "s".into(),
            ca_bundle: None,
            fingerprint: None,
            insecure: false,
        },
        more_credentials: vec![],
    }
}

fn main() {
    let iters: usize = std::env::var("HYPERPLUG_BENCH_ITERS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(20_000);
    let path = test_plugin();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let runtime = Runtime::new(Limits::default(), None).expect("runtime");
        let plugin = runtime.load(&path).await.expect("load");
        let req = request();
        let o = overhead::measure(iters, move || {
            let (plugin, req) = (plugin.clone(), req.clone());
            async move {
                let status = plugin.describe_machine(&req).await.unwrap().unwrap();
                std::hint::black_box(status);
            }
        })
        .await;
        println!("plugin call overhead: instantiate + describe (no I/O) + drop, {iters} calls");
        println!(
            "| wasmtime | p50 µs | p90 µs | p99 µs | max µs | calls/s at {} in flight |",
            overhead::CONCURRENT_CALLS
        );
        println!("|---|---|---|---|---|---|");
        println!(
            "| {} | {:.1} | {:.1} | {:.1} | {:.1} | {:.0} |",
            wasmtime_version(),
            overhead::micros(o.p50),
            overhead::micros(o.p90),
            overhead::micros(o.p99),
            overhead::micros(o.max),
            o.per_sec_concurrent
        );
    });
}

fn wasmtime_version() -> &'static str {
    env!("HYPERPLUG_WASMTIME_VERSION")
}
