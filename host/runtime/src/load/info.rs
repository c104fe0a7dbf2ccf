//! What a plugin says of itself (`identity.info`), checked at load: a name fit for
//! object names, kinds declared once, and each kind's versions complete, so the host
//! can make CRDs and route calls from it without checking again.
use crate::bindings::identity::{KindInfo, PluginInfo};
use crate::bindings::plural;

/// The plugin's name, kinds and their versions (see `validate_versions`).
pub(super) fn validate(info: &PluginInfo) -> Result<(), String> {
    let name_ok = !info.name.is_empty()
        && info
            .name
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-');
    if !name_ok {
        return Err(format!(
            "plugin name `{}` must be lower-case letters, digits and dashes",
            info.name
        ));
    }
    if info.kinds.is_empty() {
        return Err("plugin declares no kinds".into());
    }
    for (i, kind) in info.kinds.iter().enumerate() {
        let own = plural(&kind.kind);
        if info.kinds[..i].iter().any(|k| plural(&k.kind) == own) {
            return Err(format!("plugin declares kind {} twice", kind.kind));
        }
    }
    for kind in &info.kinds {
        validate_versions(info, kind)?;
    }
    Ok(())
}

/// A kind's versions: each named once with object schemas, exactly one stored, and the
/// plugin's `api-version` among the served ones.
fn validate_versions(info: &PluginInfo, kind: &KindInfo) -> Result<(), String> {
    let object_schema = |what: &str, version: &str, json: &str| {
        let schema: serde_json::Value = serde_json::from_str(json).map_err(|e| {
            format!(
                "kind {} version {version}: {what} is not JSON: {e}",
                kind.kind
            )
        })?;
        if schema.get("type").and_then(|t| t.as_str()) != Some("object") {
            return Err(format!(
                "kind {} version {version}: {what} must be an object schema",
                kind.kind
            ));
        }
        Ok(())
    };
    for (i, v) in kind.versions.iter().enumerate() {
        if kind.versions[..i].iter().any(|o| o.name == v.name) {
            return Err(format!(
                "kind {} declares version {} twice",
                kind.kind, v.name
            ));
        }
        object_schema("spec-schema", &v.name, &v.spec_schema)?;
        if let Some(status) = &v.status_schema {
            object_schema("status-schema", &v.name, status)?;
        }
    }
    let stored = kind.versions.iter().filter(|v| v.storage).count();
    if stored != 1 {
        return Err(format!(
            "kind {} must store exactly one version (it marks {stored} as storage)",
            kind.kind
        ));
    }
    if !kind.version(&info.api_version).is_some_and(|v| v.served) {
        return Err(format!(
            "kind {} does not serve the plugin's api-version {}",
            kind.kind, info.api_version
        ));
    }
    Ok(())
}
