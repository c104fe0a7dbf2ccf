//! Plugins named by reference (`oci://…`), through the real binary against a real
//! registry (distribution), pushed with the real oras and signed with the real cosign:
//! a tag is pinned to its digest and served from the cache when the registry is gone; a
//! moved tag, an unsigned, wrongly signed or tampered artifact is refused, each naming
//! the check that failed; a pulled and verified plugin passes the conformance kit;
//! `hyperplug run` keeps its pins in the API, so a restart with an empty cache still
//! refuses a moved tag.
use std::io::Read as _;
use std::path::{Path, PathBuf};
use std::process::{Output, Stdio};
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::ConfigMap;
use kube::Api;
use kube_world::{CosignKeys, OciRegistry};
use pve_sim::Config;

use crate::conformance_kit::Against;
use crate::support::manager::Manager;
use crate::support::plugin_path;
use crate::support::world::World;

/// `hyperplug <args>` with the OCI cache in `cache` and `registry` over plain HTTP.
fn hyperplug(cache: &Path, registry: &OciRegistry, args: &[&str]) -> Output {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_hyperplug"))
        .args(args)
        .args(["--plugin-plain-http", &registry.host()])
        .arg("--plugin-oci-cache")
        .arg(cache)
        .arg("--plugin-cache")
        .arg(PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("plugin-cache"))
        .output()
        .expect("run hyperplug");
    eprintln!("{}", String::from_utf8_lossy(&out.stderr));
    out
}

/// `hyperplug inspect --json SOURCE [more]`: the document, or the error it printed.
fn inspect(
    cache: &Path,
    registry: &OciRegistry,
    source: &str,
    more: &[&str],
) -> Result<serde_json::Value, String> {
    let mut args = vec!["inspect", "--json", source];
    args.extend(more);
    let out = hyperplug(cache, registry, &args);
    if out.status.success() {
        Ok(serde_json::from_slice(&out.stdout).expect("inspect --json prints JSON"))
    } else {
        Err(String::from_utf8_lossy(&out.stderr).to_string())
    }
}

/// The Proxmox plugin pushed as `repository:tag` and signed with a new key pair: the
/// keys and the digest.
fn push_signed(registry: &OciRegistry, repository: &str, tag: &str) -> (CosignKeys, String) {
    let keys = CosignKeys::generate().unwrap();
    let digest = registry
        .push(&plugin_path("proxmox"), &format!("{repository}:{tag}"))
        .unwrap();
    registry.sign(&keys, repository, &digest).unwrap();
    (keys, digest)
}

fn reference(registry: &OciRegistry, repo: &str) -> String {
    format!("oci://{}/{repo}", registry.host())
}

#[test]
fn a_tag_is_pinned_to_its_digest_and_loads_from_the_cache_when_the_registry_is_gone() {
    let mut registry = OciRegistry::start().unwrap();
    let cache = tempfile::tempdir().unwrap();
    let digest = registry
        .push(&plugin_path("proxmox"), "team/proxmox:0.3.0")
        .unwrap();
    let by_tag = reference(&registry, "team/proxmox:0.3.0");
    let doc = inspect(cache.path(), &registry, &by_tag, &[]).unwrap();
    assert_eq!(doc["name"], "proxmox");
    assert_eq!(doc["digest"], digest.as_str());
    assert_eq!(doc["reference"], by_tag.as_str());
    assert_eq!(doc["signature"], "not checked (no --plugin-verify-key)");
    // The component itself is what oras pushed, byte for byte.
    let file = std::fs::read(plugin_path("proxmox")).unwrap();
    assert_eq!(std::fs::read(doc["path"].as_str().unwrap()).unwrap(), file);

    let by_digest = reference(&registry, &format!("team/proxmox@{digest}"));
    assert_eq!(
        inspect(cache.path(), &registry, &by_digest, &[]).unwrap()["digest"],
        digest.as_str()
    );

    registry.stop();
    for source in [&by_tag, &by_digest] {
        let doc = inspect(cache.path(), &registry, source, &[]).unwrap();
        assert_eq!(doc["digest"], digest.as_str(), "{source} offline");
    }
    // A tag never pulled cannot be served offline, and the error says why.
    let never = reference(&registry, "team/proxmox:0.4.0");
    let err = inspect(cache.path(), &registry, &never, &[]).unwrap_err();
    assert!(err.contains("registry unreachable"), "{err}");
}

#[test]
fn a_tag_that_moved_to_another_digest_is_refused_unless_asked_for() {
    let registry = OciRegistry::start().unwrap();
    let cache = tempfile::tempdir().unwrap();
    let first = registry
        .push(&plugin_path("proxmox"), "team/plugin:stable")
        .unwrap();
    let tag = reference(&registry, "team/plugin:stable");
    assert_eq!(
        inspect(cache.path(), &registry, &tag, &[]).unwrap()["name"],
        "proxmox"
    );

    let second = registry
        .push(&plugin_path("redfish"), "team/plugin:stable")
        .unwrap();
    let err = inspect(cache.path(), &registry, &tag, &[]).unwrap_err();
    assert!(
        err.contains(&format!("the tag now names {second}"))
            && err.contains(&format!("pinned to {first}"))
            && err.contains("--plugin-accept-new-digest"),
        "{err}"
    );
    // Naming the new digest takes it, and so does the flag, which moves the pin.
    let by_digest = reference(&registry, &format!("team/plugin@{second}"));
    assert_eq!(
        inspect(cache.path(), &registry, &by_digest, &[]).unwrap()["name"],
        "redfish"
    );
    let doc = inspect(
        cache.path(),
        &registry,
        &tag,
        &["--plugin-accept-new-digest"],
    )
    .unwrap();
    assert_eq!(
        (doc["name"].as_str(), doc["digest"].as_str()),
        (Some("redfish"), Some(second.as_str()))
    );
    assert_eq!(
        inspect(cache.path(), &registry, &tag, &[]).unwrap()["name"],
        "redfish"
    );
}

#[test]
fn only_a_plugin_signed_with_the_key_loads_and_each_refusal_names_its_check() {
    let registry = OciRegistry::start().unwrap();
    let cache = tempfile::tempdir().unwrap();
    let (ours, theirs) = (
        CosignKeys::generate().unwrap(),
        CosignKeys::generate().unwrap(),
    );
    let key = ours.public();
    let key = key.to_str().unwrap();
    let digest = registry
        .push(&plugin_path("proxmox"), "team/proxmox:1.0")
        .unwrap();
    let tag = reference(&registry, "team/proxmox:1.0");
    let verify = ["--plugin-verify-key", key];

    let err = inspect(cache.path(), &registry, &tag, &verify).unwrap_err();
    assert!(
        err.contains("signature check failed (unsigned)") && err.contains(&digest),
        "{err}"
    );

    registry.sign(&theirs, "team/proxmox", &digest).unwrap();
    let err = inspect(cache.path(), &registry, &tag, &verify).unwrap_err();
    assert!(
        err.contains("signature check failed (not signed by the key)"),
        "{err}"
    );

    registry.sign(&ours, "team/proxmox", &digest).unwrap();
    let doc = inspect(cache.path(), &registry, &tag, &verify).unwrap();
    assert!(
        doc["signature"]
            .as_str()
            .unwrap()
            .starts_with("verified (cosign, key "),
        "{doc}"
    );
    // With a key, a plain file is refused: it carries no signature.
    let file = plugin_path("proxmox");
    let err = inspect(cache.path(), &registry, file.to_str().unwrap(), &verify).unwrap_err();
    assert!(err.contains("a file carries no signature"), "{err}");
    // A key that is not a key fails at start, naming the flag.
    let err = inspect(
        cache.path(),
        &registry,
        &tag,
        &["--plugin-verify-key", file.to_str().unwrap()],
    )
    .unwrap_err();
    assert!(
        err.contains("--plugin-verify-key") && err.contains("not a public key"),
        "{err}"
    );
}

#[test]
fn a_tampered_or_foreign_artifact_is_refused_naming_what_failed() {
    let registry = OciRegistry::start().unwrap();
    let cache = tempfile::tempdir().unwrap();
    let plugin = plugin_path("proxmox");
    let digest = registry.push(&plugin, "team/proxmox:1.0").unwrap();
    // The component layer's bytes changed in the registry's storage.
    let bytes = std::fs::read(&plugin).unwrap();
    let layer = format!("sha256:{}", hex_sha256(&bytes));
    let mut changed = bytes.clone();
    let last = changed.len() - 1;
    changed[last] ^= 0xff;
    std::fs::write(registry.blob_file(&layer), &changed).unwrap();
    let source = reference(&registry, &format!("team/proxmox@{digest}"));
    let err = inspect(cache.path(), &registry, &source, &[]).unwrap_err();
    assert!(
        err.contains("tampered: the component layer has digest"),
        "{err}"
    );

    // An artifact without a Wasm layer is not a plugin.
    let dir = tempfile::tempdir().unwrap();
    let readme = dir.path().join("README.md");
    std::fs::write(&readme, "not a plugin").unwrap();
    registry
        .push_as(&readme, "text/markdown", "team/readme:1.0")
        .unwrap();
    let err = inspect(
        cache.path(),
        &registry,
        &reference(&registry, "team/readme:1.0"),
        &[],
    )
    .unwrap_err();
    assert!(
        err.contains("not a plugin artifact") && err.contains("[text/markdown]"),
        "{err}"
    );
}

fn hex_sha256(bytes: &[u8]) -> String {
    use sha2::Digest as _;
    hex::encode(sha2::Sha256::digest(bytes))
}

/// The Proxmox plugin pulled from the registry and verified passes the conformance kit
/// against pve-sim, as the file does.
#[tokio::test]
async fn a_pulled_and_verified_plugin_passes_the_conformance_kit() {
    let registry = OciRegistry::start().unwrap();
    let cache = tempfile::tempdir().unwrap();
    let (keys, _) = push_signed(&registry, "hyperplug/proxmox", "0.3.0");
    let target = Against::start(Config::fast()).await;
    let fixtures = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../tests/conformance/proxmox");
    let source = reference(&registry, "hyperplug/proxmox:0.3.0");
    let (spec, cluster, key, host) = (
        fixtures.join("machine.yaml"),
        fixtures.join("cluster.yaml"),
        keys.public(),
        registry.host(),
    );
    let (out, stdout) = target
        .conformance_of(
            &source,
            &[
                "--spec",
                spec.to_str().unwrap(),
                "--cluster-spec",
                cluster.to_str().unwrap(),
                "--plugin-verify-key",
                key.to_str().unwrap(),
                "--plugin-plain-http",
                &host,
                "--plugin-oci-cache",
                cache.path().to_str().unwrap(),
            ],
        )
        .await;
    assert!(out.status.success(), "conformance failed:\n{stdout}");
    assert!(stdout.contains(" passed, 0 failed, "), "{stdout}");
    let junit = std::fs::read_to_string(target.junit_path()).unwrap();
    assert!(
        junit.contains(&source),
        "the report names the reference: {junit}"
    );
}

/// A private registry: refused without credentials (the error says which flag), pulled
/// and verified with those of a Docker config file, which no output repeats.
#[test]
fn a_private_registry_is_pulled_from_with_a_docker_config_and_the_password_is_never_shown() {
    let registry = OciRegistry::start_with_login("team", "s3cret-pw").unwrap();
    let cache = tempfile::tempdir().unwrap();
    let (keys, digest) = push_signed(&registry, "team/proxmox", "1.0");
    let tag = reference(&registry, "team/proxmox:1.0");
    let key = keys.public();
    let verify = ["--plugin-verify-key", key.to_str().unwrap()];

    let err = inspect(cache.path(), &registry, &tag, &verify).unwrap_err();
    assert!(
        err.contains("the registry refused") && err.contains("--plugin-registry-auth"),
        "{err}"
    );
    let config = cache.path().join("docker-config.json");
    std::fs::write(&config, registry.docker_config().unwrap()).unwrap();
    let mut args = verify.to_vec();
    args.extend(["--plugin-registry-auth", config.to_str().unwrap()]);
    let out = hyperplug(
        cache.path(),
        &registry,
        &[&["inspect", "--json", &tag][..], &args[..]].concat(),
    );
    let (stdout, stderr) = (
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
    );
    assert!(out.status.success(), "{stderr}");
    let doc: serde_json::Value = serde_json::from_str(&stdout).unwrap();
    assert_eq!(doc["digest"], digest.as_str());
    assert!(
        doc["signature"].as_str().unwrap().starts_with("verified"),
        "{doc}"
    );
    assert!(!stdout.contains("s3cret-pw") && !stderr.contains("s3cret-pw"));
}

/// `hyperplug run` keeps a tag's pin in a ConfigMap of its namespace, not in its cache
/// directory (the release's is an emptyDir): restarted with an empty cache, as a new
/// pod is, it still refuses the tag re-pointed to another digest, though that one is
/// signed by the same key, with the error `inspect` gives for a moved tag.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tag_pin_outlives_the_managers_cache() {
    let world = World::start_with(Config::fast(), false).await;
    let registry = OciRegistry::start().unwrap();
    let (keys, first) = push_signed(&registry, "team/proxmox", "stable");
    let (tag, key) = (reference(&registry, "team/proxmox:stable"), keys.public());
    let run = |cache: &Path| {
        let mut run = world.hyperplug_run(&[]);
        run.arg("--plugin")
            .arg(&tag)
            .args(["--plugin-plain-http", &registry.host()])
            .arg("--plugin-verify-key")
            .arg(&key)
            .arg("--plugin-oci-cache")
            .arg(cache);
        run
    };

    let cache = tempfile::tempdir().unwrap();
    let manager = Manager(run(cache.path()).spawn().expect("start hyperplug run"));
    let pins: Api<ConfigMap> = Api::namespaced(world.plane.client(), &world.ns);
    let line = format!("{tag} {first}");
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        let map = pins.get_opt("hyperplug-plugin-pins").await.unwrap();
        let text = map.and_then(|m| m.data?.get("pins").cloned());
        if text
            .as_deref()
            .is_some_and(|t| t.lines().any(|l| l == line))
        {
            break;
        }
        assert!(Instant::now() < deadline, "no pin `{line}`: {text:?}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    drop(manager);

    // The tag re-pointed to another plugin, signed with the same key for this
    // repository: every check but the pin passes.
    let second = registry
        .push(&plugin_path("redfish"), "team/proxmox:stable")
        .unwrap();
    registry.sign(&keys, "team/proxmox", &second).unwrap();
    let empty = tempfile::tempdir().unwrap();
    let mut restarted = Manager(
        run(empty.path())
            .stderr(Stdio::piped())
            .spawn()
            .expect("start hyperplug run"),
    );
    let deadline = Instant::now() + Duration::from_secs(120);
    let status = loop {
        if let Some(status) = restarted.0.try_wait().unwrap() {
            break status;
        }
        assert!(Instant::now() < deadline, "the moved tag was not refused");
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    let mut err = String::new();
    let stderr = restarted.0.stderr.as_mut().unwrap();
    stderr.read_to_string(&mut err).unwrap();
    assert!(!status.success(), "{err}");
    assert!(
        err.contains(&format!("the tag now names {second}"))
            && err.contains(&format!("pinned to {first}"))
            && err.contains("--plugin-accept-new-digest"),
        "{err}"
    );
    // Nothing of the new digest was pulled: the pin refused it first.
    let pulled = std::fs::read_dir(empty.path().join("sha256")).map_or(0, |d| d.count());
    assert_eq!(pulled, 0);
}
