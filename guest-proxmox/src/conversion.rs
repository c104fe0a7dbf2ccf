//! The `conversion` export: the host's request (kind and versions by name, the object
//! as JSON) checked against what `identity` declares, then `spec::convert`.
use guest_kit::conversion::{ConversionRequest, Converted};
use guest_kit::types::PluginError;
use guest_kit::{convert as kit, invalid, terminal};
use serde_json::Value;

use crate::identity;
use crate::spec::convert::{self, Kind, Version};

pub fn convert(req: ConversionRequest) -> Result<Converted, PluginError> {
    if !kit::check(&identity::info(), &req)? {
        return Ok(Converted {
            object: req.object,
            preserved: req.preserved,
        });
    }
    let (Some(kind), Some(from), Some(to)) = (
        Kind::from_name(&req.kind),
        Version::parse(&req.from_version),
        Version::parse(&req.to_version),
    ) else {
        // `check` accepted what `identity` declares; this is the same list.
        return Err(terminal(
            kit::UNKNOWN_VERSION,
            format!(
                "no conversion of {} from {} to {}",
                req.kind, req.from_version, req.to_version
            ),
        ));
    };
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
}
