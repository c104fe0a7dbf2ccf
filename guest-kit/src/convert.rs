//! `conversion.convert` for a plugin whose kinds have one API version each: there is
//! nothing to convert, so a request names that version on both sides (the object comes
//! back as it is) or is refused with a typed error.
use crate::conversion::{ConversionRequest, Converted};
use crate::errors::terminal;
use crate::identity::PluginInfo;
use crate::types::PluginError;

/// Reason of the terminal error for a kind the plugin does not serve.
pub const UNKNOWN_KIND: &str = "UnknownKind";
/// Reason of the terminal error for a version the kind does not have.
pub const UNKNOWN_VERSION: &str = "UnknownVersion";

/// Checks that `req` names a kind of `info` and versions it declares: `Ok(false)` when
/// both versions are the same (nothing to do), `Ok(true)` when they differ (the plugin
/// converts), a terminal `UnknownKind` / `UnknownVersion` error otherwise.
pub fn check(info: &PluginInfo, req: &ConversionRequest) -> Result<bool, PluginError> {
    let Some(kind) = info.kinds.iter().find(|k| k.kind == req.kind) else {
        return Err(terminal(
            UNKNOWN_KIND,
            format!("this plugin serves no kind `{}`", req.kind),
        ));
    };
    for version in [&req.from_version, &req.to_version] {
        if !kind.versions.iter().any(|v| &v.name == version) {
            let known: Vec<&str> = kind.versions.iter().map(|v| v.name.as_str()).collect();
            return Err(terminal(
                UNKNOWN_VERSION,
                format!(
                    "{} has no version `{version}` (it has {})",
                    req.kind,
                    known.join(", ")
                ),
            ));
        }
    }
    Ok(req.from_version != req.to_version)
}

/// The conversion of a plugin whose every kind has one version: the object unchanged
/// (with what was preserved), after [`check`].
pub fn single_version(info: &PluginInfo, req: ConversionRequest) -> Result<Converted, PluginError> {
    check(info, &req)?;
    Ok(Converted {
        object: req.object,
        preserved: req.preserved,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::identity::KindRole;
    use crate::kinds::{kind, version};
    use crate::types::TerminalError;

    fn info() -> PluginInfo {
        PluginInfo {
            name: "example".into(),
            version: "1".into(),
            group: "infrastructure.cluster.x-k8s.io".into(),
            api_version: "v1".into(),
            kinds: vec![kind(
                "ExampleMachine",
                KindRole::InfraMachine,
                vec![version("v1", "{}".into())],
                vec![],
            )],
            capabilities: vec![],
        }
    }

    fn request(kind: &str, from: &str, to: &str) -> ConversionRequest {
        ConversionRequest {
            kind: kind.into(),
            from_version: from.into(),
            to_version: to.into(),
            object: r#"{"spec":{"size":1}}"#.into(),
            preserved: None,
        }
    }

    fn reason(e: PluginError) -> String {
        match e {
            PluginError::Terminal(TerminalError { reason, .. }) => reason,
            other => panic!("not terminal: {other:?}"),
        }
    }

    #[test]
    fn an_object_in_its_only_version_comes_back_as_it_is() {
        let out = single_version(&info(), request("ExampleMachine", "v1", "v1")).unwrap();
        assert_eq!(out.object, r#"{"spec":{"size":1}}"#);
        assert_eq!(out.preserved, None);
    }

    #[test]
    fn an_unknown_kind_or_version_is_a_typed_error() {
        let e = single_version(&info(), request("ExampleCluster", "v1", "v1")).unwrap_err();
        assert_eq!(reason(e), UNKNOWN_KIND);
        let e = single_version(&info(), request("ExampleMachine", "v1", "v2")).unwrap_err();
        assert_eq!(reason(e), UNKNOWN_VERSION);
    }
}
