//! What the kit reads from files: specs, credentials, address pools, bootstrap data.
//! YAML or JSON everywhere (JSON is YAML).
use std::collections::BTreeMap;
use std::path::Path;

use anyhow::{Context as _, anyhow, bail};
use hyperplug_runtime::bindings::machine::BootstrapData;
use hyperplug_runtime::{Credentials, credentials};
use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::Secret;
use serde_json::Value;

use super::addresses::PoolFile;

/// Bootstrap data handed to a plugin that asks for it when no `--bootstrap` file is given.
pub const DUMMY_CLOUD_CONFIG: &str = "#cloud-config\n# hyperplug conformance: dummy bootstrap data; nothing joins a cluster\nruncmd:\n  - [echo, hyperplug-conformance]\n";

fn read_doc(path: &Path) -> anyhow::Result<Value> {
    let text =
        std::fs::read_to_string(path).with_context(|| format!("cannot read {}", path.display()))?;
    serde_yaml::from_str(&text).with_context(|| format!("{} is not YAML or JSON", path.display()))
}

/// A spec file holds the object's `spec`; a whole manifest (with `kind` and `spec`) works
/// too, so an example from the plugin's docs can be used as is.
pub fn read_spec(path: &Path) -> anyhow::Result<Value> {
    let doc = read_doc(path)?;
    let spec = match (doc.get("kind"), doc.get("spec")) {
        (Some(_), Some(spec)) => spec.clone(),
        _ => doc,
    };
    if !spec.is_object() {
        bail!(
            "{}: a spec must be a mapping of the kind's spec fields",
            path.display()
        );
    }
    Ok(spec)
}

/// The credentials file has the keys of a credentials Secret (`url`, `token`, `secret`,
/// `ca.crt`, `fingerprint`, `insecure`) as a plain mapping, or is a Secret manifest
/// (`data` base64, or `stringData`). `--target` gives `url`.
pub fn read_credentials(path: &Path, target: &str) -> anyhow::Result<Credentials> {
    let doc = read_doc(path)?;
    let mut data: BTreeMap<String, ByteString> = BTreeMap::new();
    if doc.get("kind").and_then(Value::as_str) == Some("Secret") {
        let secret: Secret = serde_json::from_value(doc)
            .with_context(|| format!("{} is not a valid Secret", path.display()))?;
        data.extend(secret.data.unwrap_or_default());
        // The API server merges stringData into data; so does the kit.
        for (k, v) in secret.string_data.unwrap_or_default() {
            data.insert(k, ByteString(v.into_bytes()));
        }
    } else {
        let map = doc.as_object().with_context(|| {
            format!(
                "{}: credentials must be a mapping with keys url, token, secret, ca.crt, fingerprint, insecure",
                path.display()
            )
        })?;
        for (k, v) in map {
            let text = match v {
                Value::String(s) => s.clone(),
                Value::Null => continue,
                other => other.to_string(),
            };
            data.insert(k.clone(), ByteString(text.into_bytes()));
        }
    }
    data.insert(
        credentials::URL.into(),
        ByteString(target.as_bytes().to_vec()),
    );
    credentials::from_keys(&path.display().to_string(), |key| {
        data.get(key).map(|v| v.0.as_slice())
    })
    .map_err(|e| anyhow!("InvalidCredentials: {e}"))
}

/// `--addresses FILE`: a list of pools (`name`, `addresses`, `prefix`, `gateway`), or a
/// mapping with such a list under `pools`.
pub fn read_pools(path: &Path) -> anyhow::Result<Vec<PoolFile>> {
    let doc = read_doc(path)?;
    let list = doc.get("pools").cloned().unwrap_or(doc);
    serde_json::from_value(list).with_context(|| {
        format!(
            "{}: expected a list of pools with name, addresses, prefix and optional gateway",
            path.display()
        )
    })
}

/// `--bootstrap FILE`, or the dummy cloud-config. A file starting with `{` is ignition.
pub fn read_bootstrap(path: Option<&Path>) -> anyhow::Result<BootstrapData> {
    let value = match path {
        Some(p) => std::fs::read(p).with_context(|| format!("cannot read {}", p.display()))?,
        None => DUMMY_CLOUD_CONFIG.as_bytes().to_vec(),
    };
    let format = if value.trim_ascii_start().starts_with(b"{") {
        "ignition"
    } else {
        "cloud-config"
    };
    Ok(BootstrapData {
        format: format.into(),
        value,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn file(text: &str) -> tempfile::NamedTempFile {
        let f = tempfile::NamedTempFile::new().unwrap();
        std::fs::write(f.path(), text).unwrap();
        f
    }

    #[test]
    fn credentials_read_the_secret_keys_and_target_gives_the_url() {
        let f = file("token: t\nsecret: s3cret\ninsecure: true\n");
        let c = read_credentials(f.path(), "https://10.0.0.1:8443").unwrap();
        assert_eq!(c.endpoint, "https://10.0.0.1:8443");
        assert_eq!(c.token, "t");
        assert!(c.insecure);
    }

    #[test]
    fn a_secret_manifest_works_and_missing_keys_are_named() {
        let f = file(
            "apiVersion: v1\nkind: Secret\nmetadata: {name: c}\nstringData:\n  token: t\n  secret: s\n  fingerprint: AA:BB\n",
        );
        let c = read_credentials(f.path(), "https://h:1").unwrap();
        assert_eq!(c.fingerprint.as_deref(), Some("AA:BB"));
        let f = file("token: t\n");
        let err = read_credentials(f.path(), "https://h:1")
            .unwrap_err()
            .to_string();
        assert!(err.contains("`secret`"), "{err}");
    }

    #[test]
    fn a_manifest_gives_its_spec() {
        let f = file("kind: FooMachine\nspec:\n  size: 3\n");
        assert_eq!(read_spec(f.path()).unwrap(), serde_json::json!({"size": 3}));
    }
}
