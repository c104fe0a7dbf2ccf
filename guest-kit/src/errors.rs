//! The three error classes the host's retry policy branches on, and spec parsing that
//! names the offending field.
use crate::types::{InvalidSpec, PluginError, TerminalError, TransientError};

/// Will not pass until the spec (or the infrastructure) changes; `reason` is the
/// CamelCase condition reason, e.g. `TemplateNotFound`.
pub fn terminal(reason: &str, message: impl Into<String>) -> PluginError {
    PluginError::Terminal(TerminalError {
        reason: reason.into(),
        message: message.into(),
    })
}

/// Worth retrying as is (network, 5xx, a busy lock); `retry_after_ms` is a hint.
pub fn transient(message: impl Into<String>, retry_after_ms: Option<u64>) -> PluginError {
    PluginError::Transient(TransientError {
        message: message.into(),
        retry_after_ms,
    })
}

/// The spec is wrong at `field`, a path such as `spec.network.default.bridge`.
pub fn invalid(field: &str, message: impl Into<String>) -> PluginError {
    PluginError::InvalidSpec(InvalidSpec {
        field: field.into(),
        message: message.into(),
    })
}

/// Parse a spec, naming the field that does not fit: an invalid-spec error whose
/// `field` is a path under `root` (e.g. `spec.network.bridge`).
pub fn parse_spec<T: serde::de::DeserializeOwned>(
    json: &str,
    root: &str,
) -> Result<T, PluginError> {
    let de = &mut serde_json::Deserializer::from_str(json);
    serde_path_to_error::deserialize(de).map_err(|e| {
        let path = e.path().to_string();
        let field = if path == "." || path.is_empty() {
            root.to_string()
        } else {
            format!("{root}.{path}")
        };
        invalid(&field, e.into_inner().to_string())
    })
}

#[cfg(test)]
mod tests {
    use serde::Deserialize;

    use super::*;

    #[derive(Debug, Deserialize)]
    #[allow(dead_code)]
    struct Spec {
        network: Network,
    }

    #[derive(Debug, Deserialize)]
    #[allow(dead_code)]
    struct Network {
        mtu: u32,
    }

    fn field_and_message(error: PluginError) -> (String, String) {
        match error {
            PluginError::InvalidSpec(i) => (i.field, i.message),
            other => panic!("expected an invalid-spec error, got {other:?}"),
        }
    }

    #[test]
    fn a_mistyped_field_is_named_by_its_path_under_the_root() {
        let error = parse_spec::<Spec>(r#"{"network": {"mtu": "big"}}"#, "spec").unwrap_err();
        let (field, message) = field_and_message(error);
        assert_eq!(field, "spec.network.mtu");
        assert!(message.contains("invalid type"), "{message}");
    }

    #[test]
    fn a_missing_field_is_reported_at_its_parent_naming_the_field() {
        let error = parse_spec::<Spec>(r#"{"network": {}}"#, "cluster.spec").unwrap_err();
        let (field, message) = field_and_message(error);
        assert_eq!(field, "cluster.spec.network");
        assert!(message.contains("missing field `mtu`"), "{message}");
    }

    #[test]
    fn a_spec_that_is_not_an_object_is_reported_at_the_root() {
        let error = parse_spec::<Spec>("[]", "spec").unwrap_err();
        assert_eq!(field_and_message(error).0, "spec");
    }

    #[test]
    fn the_constructors_fill_the_class_they_name() {
        assert!(matches!(
            terminal("TemplateNotFound", "no template 9000"),
            PluginError::Terminal(TerminalError { reason, message })
                if reason == "TemplateNotFound" && message == "no template 9000"
        ));
        assert!(matches!(
            transient("busy", Some(5_000)),
            PluginError::Transient(TransientError { message, retry_after_ms: Some(5_000) })
                if message == "busy"
        ));
        assert!(matches!(
            invalid("spec.pool", "no such pool"),
            PluginError::InvalidSpec(InvalidSpec { field, .. }) if field == "spec.pool"
        ));
    }
}
