//! The attacks of issue 13, each tried and each refused, with the host serving other
//! calls, objects and plugins afterwards. The hostile test plugin (`tests/hostile-plugin`)
//! performs them, with the production defaults unless a test says why not. See
//! docs/security.md for the threat model.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use crate::support::{self, credentials, machine_request};
use hyperplug_runtime::{BlobStore, CallError, Limits, ObjectRef, Plugin, PluginError, Runtime};
use serde_json::{Value, json};

/// The hostile plugin in a runtime with production limits that serves blobs.
async fn hostile_serving_blobs() -> (Runtime, Plugin, Arc<BlobStore>) {
    let store = support::blob_store();
    let runtime = Runtime::builder(Limits::default()).blobs(store.clone());
    let (runtime, plugin) = support::load_with("hostile", runtime).await;
    (runtime, plugin, store)
}

/// A runtime with production limits and the hostile plugin.
async fn hostile() -> (Runtime, Plugin) {
    support::load("hostile", Limits::default()).await
}

/// The object `name`, or `namespace/name`, in namespace `default` unless named.
fn object(name: &str) -> ObjectRef {
    let (namespace, name) = name.split_once('/').unwrap_or(("default", name));
    ObjectRef {
        namespace: namespace.into(),
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
    async fn a_blob_flood_is_bounded_per_object_namespace_and_plugin() {
        let (_runtime, plugin, store) = hostile_serving_blobs().await;
        let flood = json!({"attack": "blob-flood", "count": 8, "mib": 8});
        // One object: one blob of the largest size, then refusals naming the limit.
        let first = attack_as(&plugin, "a", flood.clone(), "http://127.0.0.1:1")
            .await
            .unwrap_err();
        assert!(first.starts_with("plugin: published 1 blobs"), "{first}");
        assert!(first.contains("--blob-object-mib"), "{first}");
        // More objects of the namespace: it stops at its budget (16 MiB).
        attack_as(&plugin, "b", flood.clone(), "http://127.0.0.1:1")
            .await
            .unwrap_err();
        let third = attack_as(&plugin, "c", flood.clone(), "http://127.0.0.1:1")
            .await
            .unwrap_err();
        assert!(third.starts_with("plugin: published 0 blobs"), "{third}");
        assert!(third.contains("--blob-namespace-mib"), "{third}");
        // Objects of other namespaces: the plugin as a whole stops at its budget.
        for name in ["team-b/d", "team-b/e"] {
            attack_as(&plugin, name, flood.clone(), "http://127.0.0.1:1")
                .await
                .unwrap_err();
        }
        let last = attack_as(&plugin, "team-c/f", flood, "http://127.0.0.1:1")
            .await
            .unwrap_err();
        assert!(last.starts_with("plugin: published 0 blobs"), "{last}");
        assert!(last.contains("--blob-plugin-mib"), "{last}");
        assert_eq!(store.len(), 4, "32 MiB held, no more");
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
            err.to_string()
                .contains("16 MiB of HTTP request bodies per call"),
            "{err}"
        );
        still_serves(&plugin).await;
        drop(plugin_runtime);
    }

    #[tokio::test]
    async fn request_bodies_count_together_for_the_call() {
        // Four bodies of 400 KiB at once: each is under 1 MiB, together they are not.
        let limits = Limits {
            request_body_mib: 1,
            ..Limits::default()
        };
        let (_rt, plugin) = support::load("hostile", limits).await;
        let (addr, _) = silent_endpoint().await;
        let err = call_error(
            &plugin,
            json!({"attack": "bodies", "authority": addr.to_string(), "count": 4, "kib": 400}),
            &format!("http://{addr}"),
        )
        .await;
        assert_eq!(limit_flag(&err), "--plugin-request-body-mib", "{err}");
        still_serves(&plugin).await;
    }

    #[tokio::test]
    async fn request_bodies_buffered_for_a_plugins_calls_count_together() {
        // Two calls at once, each with two bodies of 400 KiB waiting on an endpoint that
        // never answers: each call is under its 1 MiB, the two together are not.
        let limits = Limits {
            request_body_mib: 1,
            request_body_per_plugin_mib: 1,
            timeout_ms: 5_000,
            ..Limits::default()
        };
        let (_rt, plugin) = support::load("hostile", limits).await;
        let (addr, _) = silent_endpoint().await;
        let spec =
            json!({"attack": "bodies", "authority": addr.to_string(), "count": 2, "kib": 400});
        let endpoint = format!("http://{addr}");
        let (a, b) = tokio::join!(
            attack_as(&plugin, "a", spec.clone(), &endpoint),
            attack_as(&plugin, "b", spec, &endpoint)
        );
        let errors = [a.unwrap_err(), b.unwrap_err()];
        assert!(
            errors
                .iter()
                .any(|e| e.contains("--plugin-request-body-per-plugin-mib")),
            "{errors:?}"
        );
        still_serves(&plugin).await;
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
        // Lines of 16 fields of 32 KiB: each passes out of the sandbox, together they
        // are past the log limit. (Fields of 256 KiB do not even pass out: a line of 4 MiB
        // is more than a call may hand the host at once.)
        let err = call_error(
            &plugin,
            json!({"attack": "log-flood", "count": 100_000, "kib": 32}),
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
        let (_runtime, plugin, _) = hostile_serving_blobs().await;
        // The plugin does nothing but make the host copy 8 MiB, again and again.
        let err = call_error(
            &plugin,
            json!({"attack": "host-cpu", "mib": 8}),
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
    async fn a_call_that_keeps_host_handles_is_stopped_at_the_handles_per_call() {
        let (_rt, plugin) = hostile().await;
        let err = call_error(
            &plugin,
            json!({"attack": "handle-flood", "count": 1_000_000}),
            "http://127.0.0.1:1",
        )
        .await;
        assert!(
            err.to_string().contains("4096 host handles held at once"),
            "{err}"
        );
        assert_eq!(limit_flag(&err), "fixed: drop handles when done with them");
        // A plugin's ordinary use stays well inside it.
        let ok = attack(
            &plugin,
            json!({"attack": "handle-flood", "count": 100}),
            "http://127.0.0.1:1",
        )
        .await;
        assert_eq!(ok, Ok("held 100 handles".into()));
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
        let (_runtime, plugin, _) = hostile_serving_blobs().await;
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
        let (runtime, plugin, store) = hostile_serving_blobs().await;
        let req = hyperplug_runtime::bindings::machine::TemplateRequest {
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
        let metrics = Arc::new(hyperplug::metrics::Metrics::default());
        let observed = metrics.clone();
        let runtime =
            Runtime::builder(Limits::default()).observe_http(Arc::new(move |p, m, path| {
                observed.infrastructure_request(p, m, path)
            }));
        let (_runtime, plugin) = support::load_with("hostile", runtime).await;
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
        crate::support::plugin_path(name).display().to_string()
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

/// Tenants against each other, through the controllers and a real API server: an
/// ownership id copied or edited proves nothing, credentials stay in their namespace,
/// and what a cluster took is released with it.
mod tenants {
    use std::collections::BTreeMap;

    use k8s_openapi::api::coordination::v1::Lease;
    use kube::ResourceExt;
    use kube::api::{Api, DeleteParams, DynamicObject, ListParams, Patch, PatchParams};

    use super::*;
    use crate::support::controllers::{
        PROXMOX_SPEC, hostile_cluster, hostile_world, machine, managed, options, proxmox_cluster,
        start, warning_events,
    };
    use crate::support::world::{World, condition, ready_reason};

    const OWNERSHIP: &str = "infrastructure.hyperplug.dev/ownership-id";
    const V1ALPHA1: &str = "infrastructure.cluster.x-k8s.io/v1alpha1";

    fn provisioned(o: &DynamicObject) -> bool {
        o.data["status"]["initialization"]["provisioned"] == true
    }

    async fn set_annotation(api: &Api<DynamicObject>, name: &str, value: &str) {
        api.patch(
            name,
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"annotations": {OWNERSHIP: value}}})),
        )
        .await
        .unwrap();
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_copied_or_edited_ownership_id_adopts_nothing_and_deletes_nothing() {
        let world = World::start(pve_sim::Config::fast()).await;
        world
            .apply(&proxmox_cluster("demo", Some("{name: pve-credentials}")))
            .await;
        let pms = world.api(V1ALPHA1, "ProxmoxMachine").await;
        machine(
            &world,
            "demo",
            "ProxmoxMachine",
            "victim",
            "{}",
            PROXMOX_SPEC,
        )
        .await;
        let victim = world
            .wait_for(&pms, "victim", "provisioned", provisioned)
            .await;
        let id = victim.annotations()[OWNERSHIP].clone();
        let (uid, mac) = id.split_once('.').expect("a signed id");
        assert_eq!(uid, victim.uid().unwrap(), "minted from its own UID");
        assert!(!mac.is_empty());
        let vms = world.sim.state().vms().len();

        // A tenant copies the victim's id onto a machine of its own.
        let copied = format!("{{{OWNERSHIP}: \"{id}\"}}");
        machine(
            &world,
            "demo",
            "ProxmoxMachine",
            "thief",
            &copied,
            PROXMOX_SPEC,
        )
        .await;
        let thief = world
            .wait_for(&pms, "thief", "refused", |o| {
                ready_reason(o).as_deref() == Some("OwnershipUnverified")
            })
            .await;
        let message = condition(&thief, "Ready").unwrap()["message"].to_string();
        assert!(message.contains("does not verify"), "{message}");
        assert!(
            message.contains("clusterctl move"),
            "says what to do: {message}"
        );
        assert!(
            thief.data["spec"]["providerID"].is_null(),
            "nothing adopted"
        );
        assert!(thief.finalizers().is_empty(), "never taken");
        assert_eq!(
            warning_events(&world, "thief", "OwnershipUnverified").await,
            1
        );
        pms.delete("thief", &DeleteParams::default()).await.unwrap();
        world.wait_gone(&pms, "thief").await;
        assert_eq!(
            world.sim.state().vms().len(),
            vms,
            "no VM made or destroyed"
        );

        // An edited id on the victim itself: its deletion destroys nothing and waits.
        let edited = format!("00000000-0000-0000-0000-000000000000.{mac}");
        set_annotation(&pms, "victim", &edited).await;
        pms.delete("victim", &DeleteParams::default())
            .await
            .unwrap();
        let waiting = world
            .wait_for(&pms, "victim", "deletion held", |o| {
                condition(o, "Ready").is_some_and(|c| {
                    c["reason"] == "OwnershipUnverified"
                        && c["message"].to_string().contains("being deleted")
                })
            })
            .await;
        let message = condition(&waiting, "Ready").unwrap()["message"].to_string();
        assert!(message.contains("remove the finalizer"), "{message}");
        assert_eq!(world.sim.state().vms().len(), vms, "the VM is still there");
        // Restored, the deletion goes on and the VM goes with it.
        set_annotation(&pms, "victim", &id).await;
        world.wait_gone(&pms, "victim").await;
        assert_eq!(world.sim.state().vms().len(), vms - 1);

        // The host serves other machines as before.
        machine(
            &world,
            "demo",
            "ProxmoxMachine",
            "honest",
            "{}",
            PROXMOX_SPEC,
        )
        .await;
        world
            .wait_for(&pms, "honest", "provisioned", provisioned)
            .await;
    }

    /// The world's credentials Secret, copied into `namespace` as `name`.
    async fn copy_credentials(world: &World, namespace: &str, name: &str) {
        let secret =
            Api::<k8s_openapi::api::core::v1::Secret>::namespaced(world.plane.client(), &world.ns)
                .get("pve-credentials")
                .await
                .unwrap();
        let copy = json!({
            "apiVersion": "v1", "kind": "Secret",
            "metadata": {"name": name},
            "data": secret.data,
        });
        world
            .plane
            .apply_yaml_in(namespace, &serde_yaml::to_string(&copy).unwrap())
            .await
            .unwrap();
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn credentials_of_another_namespace_are_refused_unless_granted() {
        let world = World::start_with(pve_sim::Config::fast(), false).await;
        let other = world.plane.namespace("team-b").await.unwrap();
        copy_credentials(&world, &other, "team-b-token").await;
        // The manager's default belongs to another plugin: the Proxmox clusters never
        // get it.
        let mut opts = options();
        opts.default_credentials = BTreeMap::from([(
            "redfish".to_string(),
            (world.ns.clone(), "pve-credentials".to_string()),
        )]);
        let (_rt, proxmox) = support::load_with("proxmox", managed(&world)).await;
        let _controllers = start(&world, proxmox, opts);
        world
            .apply(&proxmox_cluster(
                "borrower",
                Some(&format!("{{name: team-b-token, namespace: {other}}}")),
            ))
            .await;
        world.apply(&proxmox_cluster("nothing", None)).await;
        world
            .apply(&proxmox_cluster("own", Some("{name: pve-credentials}")))
            .await;
        let pcs = world.api(V1ALPHA1, "ProxmoxCluster").await;
        let borrower = world
            .wait_for(&pcs, "borrower", "refused", |o| {
                ready_reason(o).as_deref() == Some("CredentialsNotAllowed")
            })
            .await;
        let message = condition(&borrower, "Ready").unwrap()["message"].to_string();
        assert!(
            message.contains(&format!(
                "--cross-namespace-credentials {}={other}",
                world.ns
            )),
            "{message}"
        );
        assert!(!provisioned(&borrower));
        let nothing = world
            .wait_for(&pcs, "nothing", "no credentials", |o| {
                ready_reason(o).as_deref() == Some("NoCredentials")
            })
            .await;
        assert!(!provisioned(&nothing));
        world
            .wait_for(&pcs, "own", "provisioned", provisioned)
            .await;
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_granted_namespace_may_hold_the_credentials() {
        let world = World::start_with(pve_sim::Config::fast(), false).await;
        let shared = world.plane.namespace("shared").await.unwrap();
        copy_credentials(&world, &shared, "infra-token").await;
        let mut opts = options();
        opts.credentials_grants = vec![format!("*={shared}").parse().unwrap()];
        let (_rt, proxmox) = support::load_with("proxmox", managed(&world)).await;
        let _controllers = start(&world, proxmox, opts);
        world
            .apply(&proxmox_cluster(
                "granted",
                Some(&format!("{{name: infra-token, namespace: {shared}}}")),
            ))
            .await;
        let pcs = world.api(V1ALPHA1, "ProxmoxCluster").await;
        world
            .wait_for(&pcs, "granted", "provisioned", provisioned)
            .await;
    }

    async fn leases(world: &World) -> Vec<Lease> {
        Api::<Lease>::namespaced(world.plane.client(), &world.ns)
            .list(&ListParams::default().labels("hyperplug.dev/claim-plugin=hostile"))
            .await
            .unwrap()
            .items
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn what_a_cluster_took_is_released_when_it_is_deleted() {
        let (world, _controllers, _runtime, store) = hostile_world().await;
        world
            .apply(&hostile_cluster(
                "taker",
                "{attack: claim-and-publish, key: cluster-key, credentialsRef: {name: hostile-credentials}}",
            ))
            .await;
        let hcs = world.api(V1ALPHA1, "HostileCluster").await;
        let taker = world
            .wait_for(&hcs, "taker", "provisioned", provisioned)
            .await;
        assert_eq!(taker.data["status"]["details"]["claim"], "held");
        assert_eq!(taker.data["status"]["details"]["blob"], "published");
        assert_eq!(leases(&world).await.len(), 1);
        assert_eq!(store.len(), 1);
        // Its delete forgets both; the host releases them.
        hcs.delete("taker", &DeleteParams::default()).await.unwrap();
        world.wait_gone(&hcs, "taker").await;
        assert!(leases(&world).await.is_empty(), "the claim is released");
        assert!(store.is_empty(), "the blob is withdrawn");
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_copied_ownership_id_releases_and_withdraws_nothing_of_the_victim() {
        let (world, _controllers, _runtime, store) = hostile_world().await;
        world
            .apply(&hostile_cluster(
                "demo",
                "{credentialsRef: {name: hostile-credentials}}",
            ))
            .await;
        let hms = world.api(V1ALPHA1, "HostileMachine").await;
        let took = |o: &DynamicObject| {
            o.data["status"]["phase"] == "Done"
                && condition(o, "Ready")
                    .is_some_and(|c| c["message"] == "claim: held; blob: published")
        };
        let spec = "{attack: claim-and-publish, key: host-1}";
        machine(&world, "demo", "HostileMachine", "victim", "{}", spec).await;
        let victim = world.wait_for(&hms, "victim", "took", took).await;
        let id = victim.annotations()[OWNERSHIP].clone();
        assert_eq!(leases(&world).await.len(), 1);
        assert_eq!(store.len(), 1);

        let copied = format!("{{{OWNERSHIP}: \"{id}\"}}");
        machine(&world, "demo", "HostileMachine", "thief", &copied, spec).await;
        world
            .wait_for(&hms, "thief", "refused", |o| {
                ready_reason(o).as_deref() == Some("OwnershipUnverified")
            })
            .await;
        hms.delete("thief", &DeleteParams::default()).await.unwrap();
        world.wait_gone(&hms, "thief").await;
        let left = leases(&world).await;
        assert_eq!(left.len(), 1, "the victim's claim is still there");
        assert_eq!(
            left[0].spec.as_ref().unwrap().holder_identity.as_deref(),
            id.split_once('.').map(|(uid, _)| uid)
        );
        assert_eq!(store.len(), 1, "the victim's blob is still there");
        // Another machine takes its own claim as before.
        let other = "{attack: claim-and-publish, key: host-2}";
        machine(&world, "demo", "HostileMachine", "other", "{}", other).await;
        world.wait_for(&hms, "other", "took", took).await;
    }
}

/// The manager's peak memory under each flood, with the default limits: `hyperplug run`
/// as its own process (one per flood, so each peak is its own), the flood's objects in a
/// namespace of their own. Prints a table; every peak stays under 256 MiB.
pub(crate) mod floods {
    use futures::StreamExt;
    use kube::api::DynamicObject;

    use super::*;
    pub(crate) use crate::support::manager::PEAK_RSS_GOAL_MIB;
    use crate::support::manager::{Manager, in_namespace, rss_table};
    use crate::support::world::{World, condition};

    struct Flood {
        name: &'static str,
        spec: Value,
        /// Objects flooding at once.
        objects: usize,
    }

    fn start_manager(world: &World, ns: &str) -> Manager {
        let port = |_| kube_world::free_port().unwrap();
        let (health, metrics, blobs) = (port(0), port(1), port(2));
        let child = in_namespace(world, "hostile", ns, ns)
            .args(["--health-addr", &format!("127.0.0.1:{health}")])
            .args(["--metrics-addr", &format!("127.0.0.1:{metrics}")])
            .args(["--blob-listen-addr", &format!("127.0.0.1:{blobs}")])
            .args(["--blob-advertise-url", &format!("http://127.0.0.1:{blobs}")])
            .spawn()
            .expect("start hyperplug run");
        Manager(child)
    }

    fn failed(o: &DynamicObject) -> bool {
        condition(o, "Ready").is_some_and(|c| {
            ["TransientError", "PluginFailure"].contains(&c["reason"].as_str().unwrap_or(""))
        })
    }

    /// Floods running at once, each with its manager.
    const FLOODS_AT_ONCE: usize = 4;

    /// `flood`'s objects in a namespace of their own, served by a manager of their own
    /// until each is done (provisioned or failed) and retried a few times: the row of
    /// the table (name, objects, the manager's peak RSS, what the last object got).
    async fn run_flood(
        world: &World,
        flood: &Flood,
        silent: SocketAddr,
    ) -> (&'static str, usize, u64, String) {
        let ns = world.plane.namespace("flood").await.unwrap();
        world
            .plane
            .apply_yaml_in(
                &ns,
                &format!(
                    r#"
apiVersion: v1
kind: Secret
metadata:
  name: hostile-credentials
stringData: {{url: "http://{silent}", token: t, secret: s}}
---
apiVersion: cluster.x-k8s.io/v1beta2
kind: Cluster
metadata:
  name: flood
spec:
  infrastructureRef:
    apiGroup: infrastructure.cluster.x-k8s.io
    kind: HostileCluster
    name: flood
---
apiVersion: infrastructure.cluster.x-k8s.io/v1alpha1
kind: HostileCluster
metadata:
  name: flood
  labels:
    cluster.x-k8s.io/cluster-name: flood
spec: {{credentialsRef: {{name: hostile-credentials}}}}
"#
                ),
            )
            .await
            .unwrap();
        for i in 0..flood.objects {
            let name = format!("m{i}");
            world
                .plane
                .apply_yaml_in(
                    &ns,
                    &format!(
                        "apiVersion: cluster.x-k8s.io/v1beta2\nkind: Machine\nmetadata: {{name: {name}, labels: {{cluster.x-k8s.io/cluster-name: flood}}}}\nspec: {{clusterName: flood, bootstrap: {{dataSecretName: none}}, infrastructureRef: {{apiGroup: infrastructure.cluster.x-k8s.io, kind: HostileMachine, name: {name}}}}}\n"
                    ),
                )
                .await
                .unwrap();
            let machines = world
                .plane
                .dynamic_api("cluster.x-k8s.io/v1beta2", "Machine", Some(&ns))
                .await
                .unwrap();
            let uid = kube::ResourceExt::uid(&machines.get(&name).await.unwrap()).unwrap();
            let hm = json!({
                "apiVersion": "infrastructure.cluster.x-k8s.io/v1alpha1",
                "kind": "HostileMachine",
                "metadata": {
                    "name": name,
                    "labels": {"cluster.x-k8s.io/cluster-name": "flood"},
                    "ownerReferences": [{"apiVersion": "cluster.x-k8s.io/v1beta2", "kind": "Machine", "name": name, "uid": uid}],
                },
                "spec": flood.spec,
            });
            world
                .plane
                .apply_yaml_in(&ns, &serde_yaml::to_string(&hm).unwrap())
                .await
                .unwrap();
        }
        let manager = start_manager(world, &ns);
        let hms = world
            .plane
            .dynamic_api(
                "infrastructure.cluster.x-k8s.io/v1alpha1",
                "HostileMachine",
                Some(&ns),
            )
            .await
            .unwrap();
        let mut outcome = String::new();
        for i in 0..flood.objects {
            let done = |o: &DynamicObject| {
                failed(o) || o.data["status"]["initialization"]["provisioned"] == true
            };
            let o = world
                .wait_for(&hms, &format!("m{i}"), flood.name, done)
                .await;
            outcome = condition(&o, "Ready").unwrap()["message"]
                .as_str()
                .unwrap_or_default()
                .to_string();
        }
        // Let transient failures come back a few times (backoff 0.5, 1, 2 s).
        tokio::time::sleep(Duration::from_secs(4)).await;
        (flood.name, flood.objects, manager.peak_rss_mib(), outcome)
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn every_flood_leaves_the_manager_under_its_memory_goal() {
        let world = World::start_with(pve_sim::Config::fast(), false).await;
        let (_rt, plugin) = hostile().await;
        let crds = hyperplug_kinds::crds::crds_yaml(plugin.info()).unwrap();
        world.plane.install_crds_yaml(&crds).await.unwrap();
        let (silent, _) = silent_endpoint().await;
        let floods = [
            Flood {
                name: "none (one object, behaving)",
                spec: json!({"attack": "noop"}),
                objects: 1,
            },
            Flood {
                name: "blobs",
                spec: json!({"attack": "blob-flood", "count": 8, "mib": 8}),
                objects: 6,
            },
            Flood {
                name: "request body",
                spec: json!({"attack": "body-flood", "authority": silent.to_string()}),
                objects: 1,
            },
            Flood {
                name: "aliased result",
                spec: json!({"attack": "alias-output", "count": 120, "mib": 1}),
                objects: 1,
            },
            Flood {
                name: "log",
                spec: json!({"attack": "log-flood", "count": 1_000_000}),
                objects: 1,
            },
            Flood {
                name: "refused egress",
                spec: json!({"attack": "denied-flood", "count": 1_000_000}),
                objects: 1,
            },
            Flood {
                name: "connections",
                spec: json!({"attack": "connection-flood", "authority": silent.to_string(), "count": 20_000}),
                objects: 1,
            },
            Flood {
                name: "claims",
                spec: json!({"attack": "claim-flood", "count": 300_000}),
                objects: 1,
            },
            Flood {
                name: "host CPU",
                spec: json!({"attack": "host-cpu", "mib": 8}),
                objects: 1,
            },
            Flood {
                name: "linear memory",
                spec: json!({"attack": "grow-memory"}),
                objects: 4,
            },
            Flood {
                name: "aliased result, 16 objects at once",
                spec: json!({"attack": "alias-output", "count": 120, "mib": 1}),
                objects: 16,
            },
            Flood {
                name: "request body, 16 objects at once",
                spec: json!({"attack": "body-flood", "authority": silent.to_string()}),
                objects: 16,
            },
            Flood {
                name: "big result",
                spec: json!({"attack": "big-string"}),
                objects: 1,
            },
        ];
        // Each flood has its own namespace and manager, so they run side by side
        // (FLOODS_AT_ONCE at a time): most of a flood's time is its manager starting and
        // the wait for retries; the rows keep the order of the table.
        let rows: Vec<_> = futures::stream::iter(&floods)
            .map(|flood| run_flood(&world, flood, silent))
            .buffered(FLOODS_AT_ONCE)
            .collect()
            .await;
        println!(
            "\nPeak RSS of `hyperplug run` under each flood (default limits; goal {PEAK_RSS_GOAL_MIB} MiB)\n"
        );
        println!("| flood | objects | peak RSS (MiB) | what the flood got |");
        println!("|---|---:|---:|---|");
        for (name, objects, rss, outcome) in &rows {
            let outcome: String = outcome.chars().take(160).collect();
            println!("| {name} | {objects} | {rss} | {outcome} |");
        }
        for (name, _, rss, _) in &rows {
            assert!(*rss <= PEAK_RSS_GOAL_MIB, "{name}: {rss} MiB");
        }
    }

    /// The manager's servers under floods of their own ports (issue 40, item 7): every
    /// server is bounded by the one accept loop (`hyperplug::listen`).
    mod listeners {
        use std::net::SocketAddr;
        use std::os::unix::process::CommandExt as _;

        use kube::api::PostParams;
        use kube::core::DynamicObject;
        use kube_world::{Plane, PlaneOpts};

        use super::*;
        use crate::support::controllers::{PROXMOX_SPEC, machine, proxmox_cluster};

        const V1: &str = "infrastructure.cluster.x-k8s.io/v1alpha1";
        const V2: &str = "infrastructure.cluster.x-k8s.io/v1alpha2";

        /// Where a manager started by [`proxmox_manager`] listens.
        struct Ports {
            health: u16,
            metrics: u16,
            webhook: u16,
        }

        /// `hyperplug run` with the Proxmox plugin (its kinds have two versions, so the
        /// webhook server runs) against `world`, watching the world's namespace, each
        /// server on a port of its own; its open-files limit set to `nofile` (soft and
        /// hard) before it starts, if given.
        fn proxmox_manager(world: &World, nofile: Option<u64>) -> (Manager, Ports) {
            let port = || kube_world::free_port().unwrap();
            let ports = Ports {
                health: port(),
                metrics: port(),
                webhook: port(),
            };
            let certs = world.plane.webhook_cert_dir("listeners").unwrap();
            let mut run = in_namespace(world, "proxmox", &world.ns, "listeners");
            run.args(["--health-addr", &format!("127.0.0.1:{}", ports.health)])
                .args(["--metrics-addr", &format!("127.0.0.1:{}", ports.metrics)])
                .args(["--webhook-addr", &format!("127.0.0.1:{}", ports.webhook)])
                .arg("--webhook-cert-dir")
                .arg(certs)
                .args(["--resync-seconds", "5"]);
            if let Some(limit) = nofile {
                let limit = libc::rlimit {
                    rlim_cur: limit,
                    rlim_max: limit,
                };
                // SAFETY: only setrlimit runs between fork and exec, on a struct copied
                // into the closure.
                unsafe {
                    run.pre_exec(move || {
                        if libc::setrlimit(libc::RLIMIT_NOFILE, &limit) == 0 {
                            Ok(())
                        } else {
                            Err(std::io::Error::last_os_error())
                        }
                    });
                }
            }
            let manager = Manager(run.spawn().expect("start hyperplug run"));
            (manager, ports)
        }

        fn http() -> reqwest::Client {
            reqwest::Client::builder()
                .no_proxy()
                // The plane's CA signed the webhook's certificate; what is tested here
                // is not who the server is.
                .danger_accept_invalid_certs(true)
                .timeout(Duration::from_secs(30))
                .build()
                .unwrap()
        }

        /// Poll `url` until it answers 200 (at most a minute).
        async fn until_ok(http: &reqwest::Client, url: &str) {
            for _ in 0..300 {
                if let Ok(r) = http.get(url).send().await
                    && r.status() == reqwest::StatusCode::OK
                {
                    return;
                }
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
            panic!("{url} never answered 200");
        }

        /// `n` TCP connections to `addr` that send nothing.
        async fn idle_sockets(addr: SocketAddr, n: usize) -> Vec<tokio::net::TcpStream> {
            let mut held = Vec::with_capacity(n);
            for _ in 0..n {
                held.push(tokio::net::TcpStream::connect(addr).await.unwrap());
            }
            held
        }

        /// A ConversionReview of one ProxmoxMachine whose spec holds `filler` (a JSON
        /// value), from v1alpha1 to v1alpha2.
        fn review(uid: &str, filler: &str) -> Vec<u8> {
            format!(
                r#"{{"apiVersion":"apiextensions.k8s.io/v1","kind":"ConversionReview","request":{{"uid":"{uid}","desiredAPIVersion":"{V2}","objects":[{{"apiVersion":"{V1}","kind":"ProxmoxMachine","metadata":{{"name":"m","namespace":"ns"}},"spec":{{"sourceNode":"pve1","templateID":9000,"x":{filler}}}}}]}}}}"#
            )
            .into_bytes()
        }

        /// `[0,0,…]` of `n` values.
        fn zeros(n: usize) -> String {
            format!("[{}0]", "0,".repeat(n - 1))
        }

        /// `{"0":0,"1":0,…}` of `n` keys.
        fn keys(n: usize) -> String {
            let members: Vec<String> = (0..n).map(|i| format!(r#""{i:x}":0"#)).collect();
            format!("{{{}}}", members.join(","))
        }

        /// Post `reviews` at once; each one's answer: the review refused or answered
        /// (its result's status and message), or the HTTP status it was refused with.
        async fn post_at_once(
            http: &reqwest::Client,
            url: &str,
            reviews: Vec<Vec<u8>>,
        ) -> Vec<String> {
            let posts = reviews.into_iter().enumerate().map(|(i, body)| {
                let http = http.clone();
                async move {
                    let answer = http
                        .post(url)
                        .header("content-type", "application/json")
                        .body(body)
                        .send()
                        .await
                        .unwrap_or_else(|e| panic!("review {i} got no answer: {e}"));
                    let status = answer.status();
                    let body = answer.bytes().await.unwrap();
                    if status != reqwest::StatusCode::OK {
                        assert_eq!(
                            status,
                            reqwest::StatusCode::SERVICE_UNAVAILABLE,
                            "review {i}"
                        );
                        return format!("HTTP {status}");
                    }
                    let review: Value = serde_json::from_slice(&body).unwrap();
                    let response = &review["response"];
                    assert_eq!(response["uid"], format!("r{i}"), "review {i}: {response}");
                    let result = &response["result"];
                    let message: String = result["message"]
                        .as_str()
                        .unwrap_or_default()
                        .chars()
                        .take(100)
                        .collect();
                    format!(
                        "{} {message}",
                        result["status"].as_str().unwrap_or_default()
                    )
                }
            });
            futures::future::join_all(posts).await
        }

        /// Eight reviews of 8 MiB of tiny JSON values at once are refused before they
        /// are parsed, and eight at the limit of values are answered: the manager's
        /// peak RSS stays under its goal.
        #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
        async fn parallel_reviews_of_tiny_values_leave_the_manager_under_its_memory_goal() {
            let world = World::start_with(pve_sim::Config::fast(), false).await;
            let (manager, ports) = proxmox_manager(&world, None);
            let http = http();
            until_ok(&http, &format!("http://127.0.0.1:{}/readyz", ports.health)).await;
            let url = format!("https://127.0.0.1:{}/convert", ports.webhook);
            let mut rows = vec![("started".to_string(), manager.peak_rss_mib(), String::new())];
            const LIMIT: usize = hyperplug::webhook::MAX_REVIEW_VALUES;
            // Each review: the object's other values (about 20) and the filler.
            let waves: [(&str, String); 3] = [
                ("8 MiB of zeros", zeros((8 << 20) / 2 - 512)),
                ("zeros, at the limit", zeros(LIMIT - 64)),
                ("keys, at the limit", keys(LIMIT / 2 - 64)),
            ];
            for (name, filler) in &waves {
                let reviews: Vec<Vec<u8>> =
                    (0..8).map(|i| review(&format!("r{i}"), filler)).collect();
                let size = reviews[0].len();
                assert!(size <= 8 << 20, "{name}: {size} bytes");
                let answers = post_at_once(&http, &url, reviews).await;
                let mut seen: Vec<&String> = answers.iter().collect();
                seen.sort();
                seen.dedup();
                let seen: Vec<&str> = seen.iter().map(|s| s.as_str()).collect();
                rows.push((
                    format!("8 × {name} ({size} bytes)"),
                    manager.peak_rss_mib(),
                    seen.join("; "),
                ));
            }
            // Refused before parsing: the reviews of 8 MiB of zeros.
            assert!(rows[1].2.contains("JSON values"), "{}", rows[1].2);
            rss_table(
                "Peak RSS of `hyperplug run` under parallel conversion reviews",
                "after",
                &rows,
            );
        }

        /// `n` TLS connections to `addr` (a server with a certificate of `plane`'s CA),
        /// the handshake done, that send nothing more.
        async fn idle_tls(
            plane: &Plane,
            addr: SocketAddr,
            n: usize,
        ) -> Vec<tokio_rustls::client::TlsStream<tokio::net::TcpStream>> {
            use rustls_pki_types::pem::PemObject as _;
            let ca = plane.dir().join("pki/ca.crt");
            let mut roots = rustls::RootCertStore::empty();
            for cert in rustls_pki_types::CertificateDer::pem_file_iter(&ca).unwrap() {
                roots.add(cert.unwrap()).unwrap();
            }
            let provider = Arc::new(rustls::crypto::ring::default_provider());
            let config = rustls::ClientConfig::builder_with_provider(provider)
                .with_safe_default_protocol_versions()
                .unwrap()
                .with_root_certificates(roots)
                .with_no_client_auth();
            let tls = tokio_rustls::TlsConnector::from(Arc::new(config));
            let mut held = Vec::with_capacity(n);
            for _ in 0..n {
                let tcp = tokio::net::TcpStream::connect(addr).await.unwrap();
                let name = rustls_pki_types::ServerName::try_from("127.0.0.1").unwrap();
                held.push(tls.connect(name, tcp).await.expect("TLS handshake"));
            }
            held
        }

        /// Which of `sockets` the server closes first (a read of it ends: end of file or
        /// an error; the server sends nothing unasked on an idle connection).
        async fn first_closed<S: tokio::io::AsyncRead + Unpin>(sockets: &mut [S]) -> usize {
            use tokio::io::AsyncReadExt as _;
            let reads = sockets.iter_mut().map(|s| {
                Box::pin(async move {
                    let mut buf = [0u8; 64];
                    while let Ok(1..) = s.read(&mut buf).await {}
                })
            });
            futures::future::select_all(reads).await.1
        }

        /// A v1alpha1 create of `name` through `v1` (converted by the webhook server) that
        /// must go through before `closed`, the server closing one of some idle sockets.
        /// No clock: a server whose slots idle sockets could hold would answer only once
        /// one of its timeouts (handshake 10 s, idle 60 s) closed one of them, and nothing
        /// else the write waits on closes them. So the write is also never awaited past
        /// those timeouts.
        async fn write_before(
            v1: &kube::Api<DynamicObject>,
            name: &str,
            closed: impl std::future::Future<Output = usize>,
        ) {
            let object: DynamicObject = serde_json::from_value(json!({
                "apiVersion": V1, "kind": "ProxmoxMachine",
                "metadata": {"name": name},
                "spec": {"sourceNode": "pve1", "templateID": 9000, "numCores": 2},
            }))
            .unwrap();
            let params = PostParams::default();
            tokio::select! {
                biased;
                created = v1.create(&params, &object) => {
                    created.unwrap_or_else(|e| panic!("{name}: {e}"));
                }
                i = closed => panic!(
                    "{name}: the server closed idle socket {i} before the write went through"
                ),
            }
        }

        /// Idle sockets on the webhook port (64 past their TLS handshake, as in the
        /// report, then twice its connection cap more that never begin one) do not keep
        /// the API server from converting a write.
        #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
        async fn idle_sockets_on_the_webhook_port_do_not_hold_up_a_conversion() {
            let plane = Plane::start(PlaneOpts::default()).await.expect("plane");
            let (_rt, plugin) = support::load("proxmox", Limits::default()).await;
            let crds = hyperplug_kinds::crds::crds_yaml(plugin.info()).unwrap();
            // The webhook server as `hyperplug run` serves it, with its default bounds.
            let url = crate::support::world::serve_conversion(&plane, &[plugin]).await;
            plane
                .install_crds_yaml_converted_at(&crds, &url)
                .await
                .unwrap();
            let ns = plane.namespace("idle").await.unwrap();
            let addr: SocketAddr = url
                .trim_start_matches("https://")
                .trim_end_matches(hyperplug_kinds::crds::CONVERSION_PATH)
                .parse()
                .unwrap();
            let v1 = plane
                .dynamic_api(V1, "ProxmoxMachine", Some(&ns))
                .await
                .unwrap();
            let v2 = plane
                .dynamic_api(V2, "ProxmoxMachine", Some(&ns))
                .await
                .unwrap();
            let mut kept = idle_tls(&plane, addr, 64).await;
            // Under the cap: nothing but a timeout closes any of them.
            write_before(&v1, "after-64-idle", first_closed(&mut kept)).await;
            let cap = hyperplug::listen::WEBHOOK_MAX_CONNECTIONS;
            let mut silent = idle_sockets(addr, 2 * cap).await;
            // Past the cap, each new connection (the API server's included) closes the
            // one idle longest: the server now holds the newest `cap` silent sockets, and
            // the write's connections take the place of the oldest of those, never of
            // the newest half.
            let newest = &mut silent[cap + cap / 2..];
            write_before(&v1, "past-the-cap", first_closed(newest)).await;
            for name in ["after-64-idle", "past-the-cap"] {
                let stored = v2.get(name).await.unwrap();
                assert_eq!(stored.data["spec"]["numCores"], 2, "{name}");
                let back = v1.get(name).await.unwrap();
                assert_eq!(back.data["spec"]["templateID"], 9000, "{name}");
            }
            drop((kept, silent));
        }

        /// The manager's conversion calls so far, as its `/metrics` counts them.
        async fn conversions(http: &reqwest::Client, metrics: &str) -> u64 {
            let text = http
                .get(metrics)
                .send()
                .await
                .unwrap()
                .text()
                .await
                .unwrap();
            text.lines()
                .filter(|l| {
                    l.starts_with("hyperplug_plugin_calls_total{")
                        && l.contains(r#"call="conversion.convert""#)
                })
                .filter_map(|l| l.rsplit(' ').next()?.parse::<u64>().ok())
                .sum()
        }

        /// 64 idle sockets past their TLS handshake on the webhook port of `hyperplug
        /// run` itself, the API server converting through it: a v1alpha1 write goes
        /// through, converted by the manager, whose peak RSS stays under its goal.
        #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
        async fn idle_sockets_on_a_managers_webhook_port_leave_it_under_its_memory_goal() {
            let world = World::start_with(pve_sim::Config::fast(), false).await;
            let (manager, ports) = proxmox_manager(&world, None);
            let http = http();
            until_ok(&http, &format!("http://127.0.0.1:{}/readyz", ports.health)).await;
            // From now on the API server converts through the manager's webhook server.
            let (_rt, plugin) = support::load("proxmox", Limits::default()).await;
            let crds = hyperplug_kinds::crds::crds_yaml(plugin.info()).unwrap();
            let addr: SocketAddr = format!("127.0.0.1:{}", ports.webhook).parse().unwrap();
            let url = format!("https://{addr}{}", hyperplug_kinds::crds::CONVERSION_PATH);
            world
                .plane
                .install_crds_yaml_converted_at(&crds, &url)
                .await
                .unwrap();
            let metrics = format!("http://127.0.0.1:{}/metrics", ports.metrics);
            let v1 = world.api(V1, "ProxmoxMachine").await;
            // Writes until one is converted by the manager (the API server takes up the
            // CRDs' new webhook within moments).
            for probe in 0.. {
                assert!(probe < 50, "no write was converted by the manager");
                let before = conversions(&http, &metrics).await;
                let never = std::future::pending::<usize>();
                write_before(&v1, &format!("probe-{probe}"), never).await;
                if conversions(&http, &metrics).await > before {
                    break;
                }
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
            let mut kept = idle_tls(&world.plane, addr, 64).await;
            let before = conversions(&http, &metrics).await;
            write_before(&v1, "after-64-idle", first_closed(&mut kept)).await;
            assert!(
                conversions(&http, &metrics).await > before,
                "the manager converted the write"
            );
            let rss = manager.peak_rss_mib();
            println!(
                "peak RSS of `hyperplug run` with 64 idle sockets on its webhook port while a v1alpha1 write went through: {rss} MiB (goal {PEAK_RSS_GOAL_MIB} MiB)"
            );
            assert!(rss <= PEAK_RSS_GOAL_MIB, "{rss} MiB");
            let stored = world.api(V2, "ProxmoxMachine").await;
            let stored = stored.get("after-64-idle").await.unwrap();
            assert_eq!(stored.data["spec"]["numCores"], 2);
            drop(kept);
        }

        /// 1,100 idle connections to the metrics port of a manager whose open-files
        /// limit is 1,024 (soft and hard, so it cannot raise it): `/readyz` and
        /// `/metrics` keep answering, and a machine provisions.
        #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
        async fn idle_connections_to_the_metrics_port_leave_the_manager_its_descriptors() {
            // This process holds the 1,100 sockets.
            hyperplug::listen::raise_fd_limit();
            let world = World::start_with(pve_sim::Config::fast(), false).await;
            let (manager, ports) = proxmox_manager(&world, Some(1024));
            let http = http();
            let readyz = format!("http://127.0.0.1:{}/readyz", ports.health);
            until_ok(&http, &readyz).await;
            let metrics_addr: SocketAddr = format!("127.0.0.1:{}", ports.metrics).parse().unwrap();
            let held = idle_sockets(metrics_addr, 1100).await;
            let fds = std::fs::read_dir(format!("/proc/{}/fd", manager.0.id()))
                .unwrap()
                .count();
            println!(
                "the manager holds {fds} descriptors with 1,100 idle connections to its metrics port"
            );
            for _ in 0..5 {
                let answer = http.get(&readyz).send().await.expect("/readyz answers");
                assert_eq!(answer.status(), reqwest::StatusCode::OK);
                let answer = http
                    .get(format!("http://127.0.0.1:{}/metrics", ports.metrics))
                    .send()
                    .await
                    .expect("/metrics answers");
                assert_eq!(answer.status(), reqwest::StatusCode::OK);
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
            world
                .apply(&proxmox_cluster("demo", Some("{name: pve-credentials}")))
                .await;
            machine(&world, "demo", "ProxmoxMachine", "m-0", "{}", PROXMOX_SPEC).await;
            let pms = world.api(V1, "ProxmoxMachine").await;
            world
                .wait_for(&pms, "m-0", "provisioned", |o| {
                    o.data["status"]["initialization"]["provisioned"] == true
                })
                .await;
            let rss = manager.peak_rss_mib();
            println!(
                "peak RSS of `hyperplug run` with 1,100 idle connections to its metrics port while a machine provisioned: {rss} MiB (goal {PEAK_RSS_GOAL_MIB} MiB)"
            );
            assert!(rss <= PEAK_RSS_GOAL_MIB, "{rss} MiB");
            drop(held);
            let log =
                std::fs::read_to_string(world.plane.dir().join("hyperplug-listeners.log")).unwrap();
            assert!(log.contains("the soft limit is the hard limit"), "{log}");
            assert!(!log.contains("Too many open files"), "{log}");
        }
    }
}
