//! The `conversion` export: the host's request (kind and versions by name, the object
//! as JSON) checked against the names `identity` declares, then `spec::convert`.
use guest_kit::conversion::{ConversionRequest, Converted};
use guest_kit::types::PluginError;
use guest_kit::{convert as kit, invalid, terminal};
use serde_json::Value;

use crate::spec::convert::{self, Kind, Version};

pub fn convert(req: ConversionRequest) -> Result<Converted, PluginError> {
    // The names `identity` declares (every kind in both versions), checked without
    // building its schemas: the API server calls this for every object it reads or
    // writes in the other version.
    let Some(kind) = Kind::from_name(&req.kind) else {
        return Err(terminal(
            kit::UNKNOWN_KIND,
            format!("this plugin serves no kind `{}`", req.kind),
        ));
    };
    let version = |name: &str| {
        Version::parse(name).ok_or_else(|| {
            terminal(
                kit::UNKNOWN_VERSION,
                format!(
                    "{} has no version `{name}` (it has {}, {})",
                    req.kind,
                    Version::V1alpha1.as_str(),
                    Version::V1alpha2.as_str()
                ),
            )
        })
    };
    let (from, to) = (version(&req.from_version)?, version(&req.to_version)?);
    if from == to {
        return Ok(Converted {
            object: req.object,
            preserved: req.preserved,
        });
    }
    let object: Value = serde_json::from_str(&req.object)
        .map_err(|e| invalid("object", format!("the object is not JSON: {e}")))?;
    let out = convert::convert(kind, from, to, &object, req.preserved.as_deref())?;
    Ok(Converted {
        object: out.object.to_string(),
        preserved: out.preserved,
    })
}

#[cfg(test)]
mod tests {
    use guest_kit::types::{InvalidSpec, TerminalError};
    use serde_json::json;

    use super::*;

    fn request(kind: &str, from: &str, to: &str, object: Value) -> ConversionRequest {
        ConversionRequest {
            kind: kind.into(),
            from_version: from.into(),
            to_version: to.into(),
            object: object.to_string(),
            preserved: None,
        }
    }

    fn machine_v1() -> Value {
        json!({"spec": {
            "sourceNode": "pve1",
            "templateID": 9000,
            "network": {"default": {"bridge": "vmbr0"}},
        }})
    }

    #[test]
    fn a_machine_goes_to_v1alpha2_and_back_unchanged() {
        let up = convert(request(
            "ProxmoxMachine",
            "v1alpha1",
            "v1alpha2",
            machine_v1(),
        ))
        .unwrap();
        let v2: Value = serde_json::from_str(&up.object).unwrap();
        assert_ne!(
            v2,
            machine_v1(),
            "the network has another shape in v1alpha2"
        );
        let mut back = request("ProxmoxMachine", "v1alpha2", "v1alpha1", v2);
        back.preserved = up.preserved;
        let down = convert(back).unwrap();
        let v1: Value = serde_json::from_str(&down.object).unwrap();
        assert_eq!(v1, machine_v1());
    }

    #[test]
    fn an_unknown_version_and_a_spec_that_does_not_parse_are_typed_errors() {
        let e = convert(request(
            "ProxmoxMachine",
            "v1alpha1",
            "v1beta9",
            machine_v1(),
        ));
        assert!(
            matches!(e, Err(PluginError::Terminal(TerminalError { reason, .. })) if reason == "UnknownVersion")
        );
        let bad = json!({"spec": {"templateID": "nine"}});
        let e = convert(request("ProxmoxMachine", "v1alpha1", "v1alpha2", bad));
        assert!(
            matches!(e, Err(PluginError::InvalidSpec(InvalidSpec { field, .. })) if field.starts_with("spec.templateID"))
        );
    }

    #[test]
    fn the_names_checked_are_those_identity_declares() {
        let info = crate::identity::info();
        for kind in &info.kinds {
            assert!(Kind::from_name(&kind.kind).is_some(), "{}", kind.kind);
            let names: Vec<&str> = kind.versions.iter().map(|v| v.name.as_str()).collect();
            assert_eq!(
                names,
                [Version::V1alpha1.as_str(), Version::V1alpha2.as_str()]
            );
        }
        let e = convert(request(
            "ProxmoxThing",
            "v1alpha1",
            "v1alpha2",
            machine_v1(),
        ));
        assert!(
            matches!(e, Err(PluginError::Terminal(TerminalError { reason, .. })) if reason == "UnknownKind")
        );
    }
}
