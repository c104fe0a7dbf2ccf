//! A plugin file is loaded only if it is a component, imports only what is granted and
//! speaks a compatible version of our WIT; each refusal says which rule it broke.
use hyperplug_runtime::bindings::conversion::ConversionRequest;
use hyperplug_runtime::{Limits, LoadError, PluginError, Runtime, WitMajor};

use crate::support::{load, plugin_path};

fn runtime(cache: Option<std::path::PathBuf>) -> Runtime {
    Runtime::new(Limits::default(), cache).expect("runtime")
}

async fn load_error(path: &std::path::Path) -> LoadError {
    match runtime(None).load(path).await {
        Ok(_) => panic!("{} loaded but should not", path.display()),
        Err(e) => e,
    }
}

#[tokio::test]
async fn the_proxmox_plugin_loads_and_declares_its_four_kinds() {
    let plugin = runtime(None)
        .load(&plugin_path("proxmox"))
        .await
        .expect("load");
    let info = plugin.info();
    assert_eq!(info.name, "proxmox");
    assert_eq!(info.group, "infrastructure.cluster.x-k8s.io");
    let kinds: Vec<_> = info.kinds.iter().map(|k| k.kind.as_str()).collect();
    assert_eq!(
        kinds,
        [
            "ProxmoxCluster",
            "ProxmoxClusterTemplate",
            "ProxmoxMachine",
            "ProxmoxMachineTemplate"
        ]
    );
    assert!(
        plugin
            .imports()
            .iter()
            .any(|i| i.starts_with("wasi:http/outgoing-handler@0.2"))
    );
}

#[tokio::test]
async fn a_text_file_is_not_a_component() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("notes.wasm");
    std::fs::write(&path, "just some text").unwrap();
    let err = load_error(&path).await;
    assert!(matches!(err, LoadError::NotAComponent { .. }), "{err}");
    assert!(err.to_string().contains("no WebAssembly header"), "{err}");
}

#[tokio::test]
async fn a_core_module_is_refused_as_not_a_component() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("core.wasm");
    std::fs::write(&path, b"\0asm\x01\0\0\0").unwrap();
    let err = load_error(&path).await;
    assert!(
        err.to_string().contains("it is a core WebAssembly module"),
        "{err}"
    );
    assert!(
        err.to_string().contains("wasm32-wasip2"),
        "says what to do: {err}"
    );
}

#[tokio::test]
async fn a_missing_file_names_the_path() {
    let err = load_error(std::path::Path::new("/nonexistent/plugin.wasm")).await;
    assert!(
        err.to_string()
            .starts_with("cannot read plugin file /nonexistent/plugin.wasm"),
        "{err}"
    );
}

/// `wasi:sockets` links (the C library under Python imports it) but grants nothing: a
/// plugin's TCP connect, UDP send and name lookup are each refused, and the listener it
/// aimed at never sees a connection.
#[tokio::test]
async fn a_plugin_using_sockets_loads_but_every_socket_is_refused() {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    listener.set_nonblocking(true).unwrap();
    let target = format!("http://{}", listener.local_addr().unwrap());
    let (_rt, plugin) = load("sockets", Limits::default()).await;
    let req = crate::support::machine_request(
        serde_json::json!({}),
        crate::support::credentials(&target),
    );
    let err = plugin
        .create_machine(&req)
        .await
        .expect("the call completes")
        .expect_err("refused");
    let PluginError::Transient(t) = &err else {
        panic!("expected the attempts' report, got {err:?}")
    };
    let text = &t.message;
    for what in ["tcp: refused", "udp: refused", "lookup: refused"] {
        assert!(text.contains(what), "{what}: {text}");
    }
    assert!(
        matches!(listener.accept(), Err(e) if e.kind() == std::io::ErrorKind::WouldBlock),
        "the plugin's connection reached the listener"
    );
}

#[tokio::test]
async fn a_plugin_for_another_major_of_the_wit_is_refused_naming_the_versions_this_host_loads() {
    let err = load_error(&plugin_path("wrong-wit")).await;
    assert!(matches!(err, LoadError::IncompatibleWit { .. }), "{err}");
    let text = err.to_string();
    for version in ["0.9.0", "0.3.1", "0.2.0"] {
        assert!(
            text.contains(&format!("hyperplug:provider@{version}")),
            "{text}"
        );
    }
}

#[tokio::test]
async fn a_plugin_built_against_wit_0_2_loads_with_one_version_per_kind_and_nothing_to_convert() {
    let (_, plugin) = load("proxmox-wit-0.2", Limits::default()).await;
    assert_eq!(plugin.wit(), WitMajor::V0_2);
    let info = plugin.info();
    assert_eq!(info.name, "proxmox");
    for kind in &info.kinds {
        let versions: Vec<(&str, bool, bool)> = kind
            .versions
            .iter()
            .map(|v| (v.name.as_str(), v.served, v.storage))
            .collect();
        assert_eq!(versions, [("v1alpha1", true, true)], "{}", kind.kind);
    }
    let convert = |to: &str| ConversionRequest {
        kind: "ProxmoxMachine".into(),
        from_version: "v1alpha1".into(),
        to_version: to.into(),
        object: r#"{"spec":{"sourceNode":"pve1"}}"#.into(),
        preserved: None,
    };
    let same = plugin.convert(&convert("v1alpha1")).await.unwrap().unwrap();
    assert_eq!(same.object, r#"{"spec":{"sourceNode":"pve1"}}"#);
    let other = plugin.convert(&convert("v1alpha2")).await.unwrap();
    assert!(
        matches!(&other, Err(PluginError::Terminal(t)) if t.reason == "UnknownVersion"),
        "{other:?}"
    );
}

#[tokio::test]
async fn the_current_proxmox_plugin_speaks_0_3_and_converts_between_its_versions() {
    let (_, plugin) = load("proxmox", Limits::default()).await;
    assert_eq!(plugin.wit(), WitMajor::Current);
    let machine = plugin
        .info()
        .kinds
        .iter()
        .find(|k| k.kind == "ProxmoxMachine")
        .unwrap();
    let stored: Vec<&str> = machine
        .versions
        .iter()
        .filter(|v| v.storage)
        .map(|v| v.name.as_str())
        .collect();
    assert_eq!(stored, ["v1alpha2"]);
    let object = r#"{"spec":{"sourceNode":"pve1","templateID":9000}}"#;
    let up = plugin
        .convert(&ConversionRequest {
            kind: "ProxmoxMachine".into(),
            from_version: "v1alpha1".into(),
            to_version: "v1alpha2".into(),
            object: object.into(),
            preserved: None,
        })
        .await
        .unwrap()
        .unwrap();
    let back = plugin
        .convert(&ConversionRequest {
            kind: "ProxmoxMachine".into(),
            from_version: "v1alpha2".into(),
            to_version: "v1alpha1".into(),
            object: up.object,
            preserved: up.preserved,
        })
        .await
        .unwrap()
        .unwrap();
    let json = |s: &str| serde_json::from_str::<serde_json::Value>(s).unwrap();
    assert_eq!(json(&back.object), json(object));
}

/// Runtimes loading one plugin at once into an empty cache (test binaries, replicas on
/// one volume) take turns: one compiles, the others wait and load its entry. All loads
/// work and the directory keeps the one entry, no lock file.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn loads_of_one_plugin_at_once_share_one_compile() {
    let dir = tempfile::tempdir().unwrap();
    let loads: Vec<_> = (0..4)
        .map(|_| {
            let rt = runtime(Some(dir.path().to_path_buf()));
            tokio::spawn(async move {
                rt.load(&plugin_path("proxmox"))
                    .await
                    .map(|p| p.digest().to_string())
            })
        })
        .collect();
    let mut digests = Vec::new();
    for load in loads {
        digests.push(load.await.unwrap().expect("load"));
    }
    digests.dedup();
    assert_eq!(digests.len(), 1, "{digests:?}");
    let mut names: Vec<String> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().to_string())
        .collect();
    names.sort();
    assert_eq!(names.len(), 2, "the key and one entry: {names:?}");
    assert!(
        names
            .iter()
            .any(|n| n.starts_with(&digests[0]) && n.ends_with(".cwasm")),
        "{names:?}"
    );
}

#[tokio::test]
async fn compiled_plugins_are_cached_by_content_hash_and_reused() {
    let dir = tempfile::tempdir().unwrap();
    let rt = runtime(Some(dir.path().to_path_buf()));
    let first = rt.load(&plugin_path("proxmox")).await.expect("first load");
    // Compiled code, beside the key that authenticates it.
    let cached: Vec<_> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .filter(|n| n != ".hmac-key")
        .collect();
    assert_eq!(cached.len(), 1, "{cached:?}");
    let name = cached[0].to_string_lossy().to_string();
    assert!(
        name.starts_with(first.digest()) && name.ends_with(".cwasm"),
        "{name}"
    );
    // A second runtime (as after a restart) loads from the cache and works the same.
    let second = runtime(Some(dir.path().to_path_buf()))
        .load(&plugin_path("proxmox"))
        .await
        .expect("cached load");
    assert_eq!(second.info().kinds.len(), 4);
    // A corrupt cache entry is ignored, not fatal.
    std::fs::write(dir.path().join(&name), b"garbage").unwrap();
    let third = runtime(Some(dir.path().to_path_buf()))
        .load(&plugin_path("proxmox"))
        .await
        .expect("recompiled");
    assert_eq!(third.digest(), first.digest());
}
