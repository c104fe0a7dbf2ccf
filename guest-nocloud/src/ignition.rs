//! Adding files and units to an Ignition config (the bootstrap data of Flatcar
//! machines), in spec 2.x (what Cluster API's kubeadm bootstrap provider produces) or
//! 3.x. What the config had stays as it was, unknown fields included; the additions go
//! after it, so where both write a path the config's own entry comes first.
use serde_json::{Map, Value, json};

/// A file to write on the guest.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct File {
    pub path: String,
    /// The file's bytes as text (put into a `data:` URL).
    pub contents: String,
    /// Unix permissions, e.g. `0o644`.
    pub mode: u32,
}

/// What to add to an Ignition config.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Additions {
    pub files: Vec<File>,
    /// systemd units to enable (by name, e.g. `systemd-resolved.service`).
    pub enable_units: Vec<String>,
    /// systemd-networkd units `(file name, contents)`: spec 2.x has a section for
    /// them, spec 3.x gets them as files under `/etc/systemd/network/`.
    pub networkd_units: Vec<(String, String)>,
}

/// Why a config cannot be extended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IgnitionError(pub String);

impl std::fmt::Display for IgnitionError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}", self.0)
    }
}

impl std::error::Error for IgnitionError {}

/// `config` (Ignition JSON) with `additions`, as compact JSON.
pub fn append(config: &[u8], additions: &Additions) -> Result<Vec<u8>, IgnitionError> {
    let mut doc: Value = serde_json::from_slice(config)
        .map_err(|e| IgnitionError(format!("the bootstrap data is not Ignition JSON: {e}")))?;
    let version = doc
        .pointer("/ignition/version")
        .and_then(Value::as_str)
        .ok_or_else(|| IgnitionError("the Ignition config has no ignition.version".into()))?
        .to_string();
    let major = version.split('.').next().unwrap_or_default();
    let v2 = match major {
        "2" => true,
        "3" => false,
        _ => {
            return Err(IgnitionError(format!(
                "Ignition spec {version} is not supported (2.x or 3.x)"
            )));
        }
    };
    let root = doc
        .as_object_mut()
        .ok_or_else(|| IgnitionError("the Ignition config is not a JSON object".into()))?;
    let file = |path: &str, contents: &str, mode: u32| {
        let mut f = json!({
            "path": path,
            "overwrite": true,
            "mode": mode,
            "contents": {"source": data_url(contents)},
        });
        if v2 {
            f["filesystem"] = json!("root");
        }
        f
    };
    let mut files: Vec<Value> = additions
        .files
        .iter()
        .map(|f| file(&f.path, &f.contents, f.mode))
        .collect();
    // Spec 2.0 spells it `enable`; 2.1 and later `enabled`.
    let enable_key = if version.starts_with("2.0") {
        "enable"
    } else {
        "enabled"
    };
    let units: Vec<Value> = additions
        .enable_units
        .iter()
        .map(|u| json!({"name": u, enable_key: true}))
        .collect();
    let mut networkd = vec![];
    for (name, contents) in &additions.networkd_units {
        if v2 {
            networkd.push(json!({"name": name, "contents": contents}));
        } else {
            files.push(file(
                &format!("/etc/systemd/network/{name}"),
                contents,
                0o644,
            ));
        }
    }
    push_all(root, &["storage", "files"], files)?;
    push_all(root, &["systemd", "units"], units)?;
    if !networkd.is_empty() {
        push_all(root, &["networkd", "units"], networkd)?;
    }
    serde_json::to_vec(&doc).map_err(|e| IgnitionError(e.to_string()))
}

/// Append `items` to the array at `path`, making the objects on the way.
fn push_all(
    root: &mut Map<String, Value>,
    path: &[&str],
    items: Vec<Value>,
) -> Result<(), IgnitionError> {
    let (last, parents) = path.split_last().expect("a path");
    let mut map = root;
    for key in parents {
        map = map
            .entry(*key)
            .or_insert_with(|| json!({}))
            .as_object_mut()
            .ok_or_else(|| {
                IgnitionError(format!("the Ignition config's `{key}` is not an object"))
            })?;
    }
    let list = map
        .entry(*last)
        .or_insert_with(|| json!([]))
        .as_array_mut()
        .ok_or_else(|| {
            IgnitionError(format!(
                "the Ignition config's `{}` is not a list",
                path.join(".")
            ))
        })?;
    list.extend(items);
    Ok(())
}

/// A `data:` URL of `text`, escaped like a URL path segment (every byte but the
/// unreserved ones and `$&+:=@` is percent-encoded).
pub fn data_url(text: &str) -> String {
    let mut out = String::from("data:,");
    for b in text.bytes() {
        if b.is_ascii_alphanumeric() || b"-_.~$&+:=@".contains(&b) {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn additions() -> Additions {
        Additions {
            files: vec![File {
                path: "/etc/hostname".into(),
                contents: "m1".into(),
                mode: 0o644,
            }],
            enable_units: vec!["systemd-resolved.service".into()],
            networkd_units: vec![("00-eth0.network".into(), "[Match]\nMACAddress=X\n".into())],
        }
    }

    fn appended(config: &str) -> Value {
        serde_json::from_slice(&append(config.as_bytes(), &additions()).unwrap()).unwrap()
    }

    #[test]
    fn a_spec_2_config_gets_root_files_units_and_networkd_units_after_its_own() {
        let doc = appended(
            r#"{"ignition":{"version":"2.3.0"},"storage":{"files":[{"filesystem":"root","path":"/etc/kubeadm.yml"}]},"passwd":{"users":[{"name":"core"}]}}"#,
        );
        let files = doc["storage"]["files"].as_array().unwrap();
        assert_eq!(files[0]["path"], "/etc/kubeadm.yml");
        assert_eq!(
            files[1],
            json!({"filesystem": "root", "path": "/etc/hostname", "overwrite": true, "mode": 420,
                   "contents": {"source": "data:,m1"}})
        );
        assert_eq!(
            doc["systemd"]["units"],
            json!([{"name": "systemd-resolved.service", "enabled": true}])
        );
        assert_eq!(
            doc["networkd"]["units"],
            json!([{"name": "00-eth0.network", "contents": "[Match]\nMACAddress=X\n"}])
        );
        assert_eq!(
            doc["passwd"]["users"][0]["name"], "core",
            "the rest is kept"
        );
    }

    #[test]
    fn a_spec_3_config_gets_networkd_units_as_files() {
        let doc = appended(r#"{"ignition":{"version":"3.4.0"}}"#);
        let files = doc["storage"]["files"].as_array().unwrap();
        assert!(files.iter().all(|f| f.get("filesystem").is_none()));
        assert_eq!(files[1]["path"], "/etc/systemd/network/00-eth0.network");
        assert_eq!(
            files[1]["contents"]["source"],
            "data:,%5BMatch%5D%0AMACAddress=X%0A"
        );
        assert!(doc.get("networkd").is_none());
    }

    #[test]
    fn what_is_not_ignition_is_refused_saying_why() {
        for (config, says) in [
            ("#cloud-config\n", "not Ignition JSON"),
            ("{}", "no ignition.version"),
            (r#"{"ignition":{"version":"1.0.0"}}"#, "not supported"),
            (
                r#"{"ignition":{"version":"2.3.0"},"storage":[]}"#,
                "not an object",
            ),
        ] {
            let err = append(config.as_bytes(), &additions()).unwrap_err();
            assert!(err.0.contains(says), "{config}: {err}");
        }
    }

    #[test]
    fn data_urls_escape_like_a_path_segment() {
        assert_eq!(
            data_url("A=b\nC=proxmox://u/1"),
            "data:,A=b%0AC=proxmox:%2F%2Fu%2F1"
        );
    }
}
