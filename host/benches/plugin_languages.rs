//! The Proxmox plugin in Rust and in Python side by side: component size, compile time
//! (uncached), instantiate-and-call overhead (`describe-template`, which does no I/O, in a
//! fresh sandbox per call) and the linear memory a call starts with. Prints a table;
//! asserts nothing.
//!
//! `cargo bench -p hyperplug --bench plugin_languages` (`HYPERPLUG_BENCH_ITERS` sets the
//! calls per plugin). It builds the plugins first (scripts/build-plugins.sh).
//!
//! The default limits but one: a Python call starts with about 12 MiB of linear memory,
//! so the default 128 MiB a plugin's calls share would refuse some of the 16 calls the
//! default concurrency lets in at once (the host retries those later); the bench gives
//! each plugin 16 × 16 MiB so it times calls, not refusals.
use std::path::PathBuf;
use std::time::Instant;

use hyperplug_runtime::bindings::machine::TemplateRequest;
use hyperplug_runtime::{Limits, ObjectRef, Runtime, overhead};

const SPEC: &str = r#"{"sourceNode":"pve1","templateID":9000,"numCores":2,"memoryMiB":2048}"#;

fn plugins() -> Vec<(&'static str, PathBuf)> {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..");
    let status = std::process::Command::new("bash")
        .arg(root.join("scripts/build-plugins.sh"))
        .stdout(std::process::Stdio::null())
        .status()
        .expect("run build-plugins.sh");
    assert!(status.success(), "building the plugins failed");
    vec![
        ("Rust (guest-proxmox)", root.join("plugins/proxmox.wasm")),
        (
            "Python (guest-proxmox-py)",
            root.join("plugins/proxmox-py.wasm"),
        ),
    ]
}

fn main() {
    let iters: usize = std::env::var("HYPERPLUG_BENCH_ITERS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(2_000);
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    println!(
        "the Proxmox plugin by language: instantiate + describe-template + drop, {iters} calls"
    );
    println!(
        "| plugin | size MiB | compile s | p50 µs | p90 µs | p99 µs | calls/s at {} in flight |",
        overhead::CONCURRENT_CALLS
    );
    println!("|---|---|---|---|---|---|---|");
    for (name, path) in plugins() {
        let size = std::fs::metadata(&path).expect("plugin built").len() as f64;
        rt.block_on(async {
            let limits = Limits {
                memory_per_plugin_mib: 256,
                ..Limits::default()
            };
            let runtime = Runtime::new(limits, None).expect("runtime");
            let start = Instant::now();
            let plugin = runtime.load(&path).await.expect("load");
            let compile = start.elapsed().as_secs_f64();
            let req = TemplateRequest {
                template: ObjectRef {
                    namespace: "bench".into(),
                    name: "t".into(),
                    uid: "uid-t".into(),
                },
                spec: SPEC.into(),
                credentials: None,
            };
            let o = overhead::measure(iters, move || {
                let (plugin, req) = (plugin.clone(), req.clone());
                async move {
                    let status = plugin.describe_template(&req).await.unwrap().unwrap();
                    std::hint::black_box(status);
                }
            })
            .await;
            println!(
                "| {name} | {:.1} | {compile:.1} | {:.0} | {:.0} | {:.0} | {:.0} |",
                size / (1 << 20) as f64,
                overhead::micros(o.p50),
                overhead::micros(o.p90),
                overhead::micros(o.p99),
                o.per_sec_concurrent
            );
        });
    }
}
