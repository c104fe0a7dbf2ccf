//! A plugin file is loaded only if it is a component, imports only what is granted and
//! speaks a compatible version of our WIT; each refusal says which rule it broke.
use hyperplug_runtime::{Limits, LoadError, Runtime};

use crate::support::plugin_path;

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

#[tokio::test]
async fn a_plugin_importing_sockets_is_refused_naming_the_import() {
    let err = load_error(&plugin_path("sockets")).await;
    match &err {
        LoadError::ImportNotGranted { import, .. } => {
            assert!(import.starts_with("wasi:sockets/"), "{err}")
        }
        other => panic!("expected ImportNotGranted, got {other}"),
    }
}

#[tokio::test]
async fn a_plugin_for_another_major_of_the_wit_is_refused_with_both_versions() {
    let err = load_error(&plugin_path("wrong-wit")).await;
    assert!(matches!(err, LoadError::IncompatibleWit { .. }), "{err}");
    let text = err.to_string();
    assert!(
        text.contains("hyperplug:provider@0.3.0") && text.contains("hyperplug:provider@0.2.0"),
        "{text}"
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
