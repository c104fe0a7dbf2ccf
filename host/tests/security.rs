//! The attacks of issue 13, each tried and each refused, with the host serving other
//! calls, objects and plugins afterwards. The hostile test plugin (`tests/hostile-plugin`)
//! performs them, with the production defaults unless a test says why not. See
//! docs/security.md for the threat model.
mod support;

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use hyperplug::runtime::{
    BlobLimits, BlobStore, CallError, Limits, ObjectRef, Plugin, PluginError, Runtime,
};
use serde_json::{Value, json};
use support::{credentials, machine_request};

/// A runtime with production limits and the hostile plugin.
async fn hostile() -> (Runtime, Plugin) {
    support::load("hostile", Limits::default()).await
}

fn object(name: &str) -> ObjectRef {
    ObjectRef {
        namespace: "default".into(),
        name: name.into(),
        uid: format!("uid-{name}"),
    }
}

/// `machine.create` of the hostile plugin for `object` with `spec` against `endpoint`:
/// the plugin's message, or the error as a person reads it.
async fn attack_as(
    plugin: &Plugin,
    object: &str,
    spec: Value,
    endpoint: &str,
) -> Result<String, String> {
    let mut req = machine_request(spec, credentials(endpoint));
    req.machine = self::object(object);
    match plugin.create_machine(&req).await {
        Ok(Ok(status)) => Ok(status.progress.message),
        Ok(Err(PluginError::Transient(e))) => Err(format!("plugin: {}", e.message)),
        Ok(Err(other)) => Err(format!("plugin: {other:?}")),
        Err(call_error) => Err(format!("host: {call_error}")),
    }
}

async fn attack(plugin: &Plugin, spec: Value, endpoint: &str) -> Result<String, String> {
    attack_as(plugin, "m1", spec, endpoint).await
}

/// The raw call error of an attack that must fail in the host.
async fn call_error(plugin: &Plugin, spec: Value, endpoint: &str) -> CallError {
    let req = machine_request(spec, credentials(endpoint));
    match plugin.create_machine(&req).await {
        Err(e) => e,
        Ok(other) => panic!("the attack was not stopped by the host: {other:?}"),
    }
}

/// After an attack, an honest call on the same plugin and runtime still works.
async fn still_serves(plugin: &Plugin) {
    let ok = attack_as(
        plugin,
        "honest",
        json!({"attack": "noop"}),
        "http://127.0.0.1:1",
    )
    .await;
    assert_eq!(ok, Ok("ok".to_string()));
}

/// Serve blobs for `runtime` with the default limits (on a port nothing reads).
fn serve_blobs(runtime: &Runtime) -> Arc<BlobStore> {
    let store = Arc::new(BlobStore::new(
        url::Url::parse("http://127.0.0.1:9").unwrap(),
        BlobLimits::default(),
    ));
    runtime.serve_blobs(store.clone());
    store
}

/// An endpoint that accepts connections and never answers; counts what it accepted.
async fn silent_endpoint() -> (SocketAddr, Arc<std::sync::atomic::AtomicUsize>) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let accepted = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let count = accepted.clone();
    tokio::spawn(async move {
        let mut held = Vec::new();
        while let Ok((socket, _)) = listener.accept().await {
            count.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            held.push(socket);
        }
    });
    (addr, accepted)
}

/// An endpoint that answers every request `200 OK` with an empty body.
async fn answering_endpoint() -> SocketAddr {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        while let Ok((mut socket, _)) = listener.accept().await {
            tokio::spawn(async move {
                let mut buf = vec![0u8; 64 << 10];
                let mut seen = Vec::new();
                loop {
                    let Ok(n) = socket.read(&mut buf).await else {
                        return;
                    };
                    if n == 0 {
                        return;
                    }
                    seen.extend_from_slice(&buf[..n]);
                    while let Some(end) = seen.windows(4).position(|w| w == b"\r\n\r\n") {
                        seen.drain(..end + 4);
                        let reply = b"HTTP/1.1 200 OK\r\ncontent-length: 0\r\n\r\n";
                        if socket.write_all(reply).await.is_err() {
                            return;
                        }
                    }
                }
            });
        }
    });
    addr
}

fn limit_flag(err: &CallError) -> &'static str {
    match err {
        CallError::Limit { breach, .. } => breach.flag,
        other => panic!("expected a limit error, got: {other}"),
    }
}

/// The attacks on the sandbox's host side: each one used to make the host spend without
/// bound; each now fails its call naming the limit and its flag.
mod sandbox {
    use super::*;

    #[tokio::test]
    async fn a_blob_flood_is_bounded_per_object_and_per_plugin() {
        let (runtime, plugin) = hostile().await;
        let store = serve_blobs(&runtime);
        let flood = json!({"attack": "blob-flood", "count": 64, "mib": 16});
        // One object: one blob of the largest size, then refusals naming the limit.
        let first = attack_as(&plugin, "a", flood.clone(), "http://127.0.0.1:1")
            .await
            .unwrap_err();
        assert!(first.starts_with("plugin: published 1 blobs"), "{first}");
        assert!(first.contains("--blob-object-mib"), "{first}");
        // More objects: the plugin as a whole stops at its budget.
        for name in ["b", "c", "d"] {
            attack_as(&plugin, name, flood.clone(), "http://127.0.0.1:1")
                .await
                .unwrap_err();
        }
        let last = attack_as(&plugin, "e", flood, "http://127.0.0.1:1")
            .await
            .unwrap_err();
        assert!(last.starts_with("plugin: published 0 blobs"), "{last}");
        assert!(last.contains("--blob-plugin-mib"), "{last}");
        assert_eq!(store.len(), 4, "64 MiB held, no more");
        // Another plugin publishes as before.
        store
            .publish("other", &object("x"), "seed.iso", vec![1; 1 << 20], 60)
            .unwrap();
        still_serves(&plugin).await;
    }

    #[tokio::test]
    async fn an_endless_request_body_fails_the_call_at_the_limit() {
        let (plugin_runtime, plugin) = hostile().await;
        let (addr, _) = silent_endpoint().await;
        let endpoint = format!("http://{addr}");
        let err = call_error(
            &plugin,
            json!({"attack": "body-flood", "authority": addr.to_string()}),
            &endpoint,
        )
        .await;
        assert_eq!(limit_flag(&err), "--plugin-request-body-mib", "{err}");
        assert!(
            err.to_string().contains("16 MiB of HTTP request body"),
            "{err}"
        );
        still_serves(&plugin).await;
        drop(plugin_runtime);
    }

    #[tokio::test]
    async fn an_aliased_result_is_refused_while_it_is_copied_out() {
        let (_rt, plugin) = hostile().await;
        // 120 details pointing at one 1 MiB string: 120 MiB once copied out.
        let err = call_error(
            &plugin,
            json!({"attack": "alias-output", "count": 120, "mib": 1}),
            "http://127.0.0.1:1",
        )
        .await;
        let text = err.to_string();
        assert!(text.contains("passed out of the sandbox at once"), "{text}");
        assert!(text.contains("--plugin-output-kib"), "{text}");
        still_serves(&plugin).await;
    }

    #[tokio::test]
    async fn a_log_flood_fails_the_call_at_the_log_limit() {
        let logs = support::world::logs();
        let (_rt, plugin) = hostile().await;
        let before = logs.lock().unwrap().len();
        let err = call_error(
            &plugin,
            json!({"attack": "log-flood", "count": 100_000}),
            "http://127.0.0.1:1",
        )
        .await;
        assert_eq!(limit_flag(&err), "--plugin-log-kib", "{err}");
        let written = logs.lock().unwrap().len() - before;
        // 64 KiB of plugin log, plus the host's own lines of other tests running.
        assert!(written < 1 << 20, "{written} bytes of log");
        still_serves(&plugin).await;
    }

    #[tokio::test]
    async fn a_log_line_cannot_forge_another_line() {
        let logs = support::world::logs();
        let (_rt, plugin) = hostile().await;
        attack(
            &plugin,
            json!({"attack": "log-inject"}),
            "http://127.0.0.1:1",
        )
        .await
        .unwrap();
        let text = String::from_utf8_lossy(&logs.lock().unwrap()).to_string();
        assert!(
            text.contains(r"innocent\n2030-01-01T00:00:00Z ERROR"),
            "escaped"
        );
        assert!(
            !text.lines().any(|l| l.starts_with("2030-01-01T00:00:00Z")),
            "a forged line made it into the log"
        );
        assert!(
            text.contains(r"key\nforged=value\r\u{1b}[31mred"),
            "fields too"
        );
    }

    #[tokio::test]
    async fn refused_egress_is_logged_a_bounded_number_of_times() {
        let logs = support::world::logs();
        let (_rt, plugin) = hostile().await;
        let err = call_error(
            &plugin,
            json!({"attack": "denied-flood", "count": 100_000}),
            "http://127.0.0.1:1",
        )
        .await;
        assert_eq!(limit_flag(&err), "--plugin-egress-denials", "{err}");
        let text = String::from_utf8_lossy(&logs.lock().unwrap()).to_string();
        let warnings = text
            .lines()
            .filter(|l| l.contains("plugin egress denied") && l.contains("denied.invalid"))
            .count();
        assert_eq!(warnings, 16);
        still_serves(&plugin).await;
    }

    #[tokio::test]
    async fn a_connection_flood_fails_the_call_at_its_in_flight_limit() {
        let (_rt, plugin) = hostile().await;
        let (addr, accepted) = silent_endpoint().await;
        let err = call_error(
            &plugin,
            json!({"attack": "connection-flood", "authority": addr.to_string(), "count": 20_000}),
            &format!("http://{addr}"),
        )
        .await;
        assert_eq!(limit_flag(&err), "--plugin-http-in-flight", "{err}");
        let connections = accepted.load(std::sync::atomic::Ordering::Relaxed);
        assert!(connections <= 16, "{connections} connections opened");
        still_serves(&plugin).await;
        // The call's slots went with it: the same endpoint is reachable again.
        let answering = answering_endpoint().await;
        let ok = attack(
            &plugin,
            json!({"attack": "connect", "authority": answering.to_string()}),
            &format!("http://{answering}"),
        )
        .await;
        assert_eq!(ok, Ok("connected: HTTP 200".into()));
    }

    #[tokio::test]
    async fn a_claim_flood_holds_at_most_the_claims_per_object() {
        let (runtime, plugin) = hostile().await;
        let err = call_error(
            &plugin,
            json!({"attack": "claim-flood", "count": 300_000}),
            "http://127.0.0.1:1",
        )
        .await;
        assert_eq!(limit_flag(&err), "--plugin-claim-calls", "{err}");
        let held = runtime.claims().held("hostile", "uid-m1").await.unwrap();
        assert_eq!(held.len(), 8, "claims per object");
        still_serves(&plugin).await;
    }

    #[tokio::test]
    async fn host_work_on_a_calls_behalf_counts_against_its_cpu_budget() {
        let (runtime, plugin) = hostile().await;
        serve_blobs(&runtime);
        // The plugin does nothing but make the host copy 16 MiB, again and again.
        let err = call_error(
            &plugin,
            json!({"attack": "host-cpu", "mib": 16}),
            "http://127.0.0.1:1",
        )
        .await;
        assert!(
            matches!(
                err,
                CallError::CpuBudget {
                    limit_ms: 2_000,
                    ..
                }
            ),
            "stopped by the CPU budget, not the wall clock: {err}"
        );
        assert!(err.to_string().contains("--plugin-cpu-ms"), "{err}");
        still_serves(&plugin).await;
    }

    #[tokio::test]
    async fn a_trap_says_what_trapped() {
        let (_rt, plugin) = hostile().await;
        let err = attack(&plugin, json!({"attack": "trap"}), "http://127.0.0.1:1")
            .await
            .unwrap_err();
        assert!(err.contains("unreachable"), "{err}");
        assert!(!err.contains("error while executing"), "{err}");
        still_serves(&plugin).await;
    }

    #[tokio::test]
    async fn dot_and_dot_dot_are_not_blob_names() {
        let (runtime, plugin) = hostile().await;
        serve_blobs(&runtime);
        for name in [".", "..", ".hidden"] {
            let err = attack(
                &plugin,
                json!({"attack": "publish", "name": name}),
                "http://127.0.0.1:1",
            )
            .await
            .unwrap_err();
            assert!(err.contains("must be 1-64 letters"), "{name}: {err}");
        }
        let ok = attack(
            &plugin,
            json!({"attack": "publish", "name": "seed.iso"}),
            "http://127.0.0.1:1",
        )
        .await;
        assert_eq!(ok, Ok("published".into()));
    }

    #[tokio::test]
    async fn a_template_call_can_take_no_blobs_or_claims() {
        let (runtime, plugin) = hostile().await;
        let store = serve_blobs(&runtime);
        let req = hyperplug::runtime::bindings::machine::TemplateRequest {
            template: object("tmpl"),
            spec: json!({"attack": "claim-and-publish"}).to_string(),
            credentials: None,
        };
        let status = plugin.describe_template(&req).await.unwrap().unwrap();
        for (what, result) in &status.capacity {
            assert!(
                result.starts_with("refused: this call is about no object"),
                "{what}: {result}"
            );
        }
        assert_eq!(status.capacity.len(), 2);
        assert!(store.is_empty());
        assert!(
            runtime
                .claims()
                .held("hostile", "uid-tmpl")
                .await
                .unwrap()
                .is_empty()
        );
    }

    #[tokio::test]
    async fn a_plugin_cannot_grow_the_metrics_without_bound() {
        let (runtime, plugin) = hostile().await;
        let metrics = Arc::new(hyperplug::metrics::Metrics::default());
        let observed = metrics.clone();
        runtime.observe_http(Arc::new(move |p, m, path| {
            observed.infrastructure_request(p, m, path)
        }));
        let addr = answering_endpoint().await;
        let ok = attack(
            &plugin,
            json!({"attack": "metrics-flood", "authority": addr.to_string(), "count": 300}),
            &format!("http://{addr}"),
        )
        .await;
        assert_eq!(ok, Ok("300 answered".into()));
        let series = metrics
            .encode()
            .lines()
            .filter(|l| l.starts_with("hyperplug_infrastructure_api_requests_total{"))
            .count();
        assert_eq!(series, hyperplug::metrics::MAX_PATHS_PER_PLUGIN + 1);
    }

    #[tokio::test]
    async fn a_swapped_or_planted_compile_cache_entry_is_not_run() {
        let cache = tempfile::tempdir().unwrap();
        let load = |name: &'static str| {
            let dir = cache.path().to_path_buf();
            async move {
                let runtime = Runtime::new(Limits::default(), Some(dir)).unwrap();
                runtime
                    .load(&support::plugin_path(name))
                    .await
                    .expect("load")
            }
        };
        let proxmox = load("proxmox").await;
        let hostile = load("hostile").await;
        let entry = |p: &Plugin| {
            std::fs::read_dir(cache.path())
                .unwrap()
                .map(|e| e.unwrap().path())
                .find(|f| f.to_string_lossy().contains(p.digest()))
                .expect("cached")
        };
        let (p, h) = (entry(&proxmox), entry(&hostile));
        // The hostile plugin's code under the Proxmox plugin's name.
        std::fs::copy(&h, &p).unwrap();
        assert_eq!(load("proxmox").await.name(), "proxmox");
        // Code planted without the cache's HMAC (what a cache entry was before).
        let code = std::fs::read(&h).unwrap()[32..].to_vec();
        std::fs::write(&p, code).unwrap();
        assert_eq!(load("proxmox").await.name(), "proxmox");
        // A cache others may write is not used at all.
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(cache.path(), std::fs::Permissions::from_mode(0o777)).unwrap();
        std::fs::copy(&h, &p).unwrap();
        assert_eq!(load("proxmox").await.name(), "proxmox");
    }
}

/// Plugins cannot pass for one another.
mod identity {
    use std::process::Command;

    fn hyperplug(args: &[&str]) -> (bool, String) {
        let out = Command::new(env!("CARGO_BIN_EXE_hyperplug"))
            .args(args)
            .env("KUBECONFIG", "/nonexistent")
            .output()
            .unwrap();
        (
            out.status.success(),
            String::from_utf8_lossy(&out.stderr).to_string(),
        )
    }

    fn path(name: &str) -> String {
        super::support::plugin_path(name).display().to_string()
    }

    #[test]
    fn a_plugin_declaring_another_plugins_kinds_is_refused_naming_both_files() {
        let (proxmox, impostor) = (path("proxmox"), path("impostor"));
        let (ok, stderr) = hyperplug(&["crds", &proxmox, &impostor]);
        assert!(!ok);
        assert!(
            stderr.contains(&impostor) && stderr.contains(&proxmox),
            "{stderr}"
        );
        assert!(stderr.contains("kind ProxmoxCluster"), "{stderr}");
        let (ok, stderr) = hyperplug(&["run", "--plugin", &proxmox, "--plugin", &impostor]);
        assert!(!ok);
        assert!(stderr.contains("kind ProxmoxCluster"), "{stderr}");
        // Each alone is fine.
        assert!(hyperplug(&["crds", &impostor]).0);
    }

    #[test]
    fn two_plugins_of_one_name_are_refused_naming_both_files() {
        let dir = tempfile::tempdir().unwrap();
        let copy = dir.path().join("proxmox-again.wasm");
        std::fs::copy(path("proxmox"), &copy).unwrap();
        let copy = copy.display().to_string();
        let (ok, stderr) = hyperplug(&["run", "--plugin", &path("proxmox"), "--plugin", &copy]);
        assert!(!ok);
        assert!(
            stderr.contains(&copy) && stderr.contains(&path("proxmox")),
            "{stderr}"
        );
        assert!(stderr.contains("the plugin name `proxmox`"), "{stderr}");
    }

    #[test]
    fn default_credentials_must_name_their_plugin_when_several_are_loaded() {
        let (ok, stderr) = hyperplug(&[
            "run",
            "--plugin",
            &path("proxmox"),
            "--plugin",
            &path("redfish"),
            "--default-credentials-secret",
            "ns/creds",
        ]);
        assert!(!ok);
        assert!(stderr.contains("PLUGIN=NAMESPACE/NAME"), "{stderr}");
    }
}
