//! Requests as the host sends them, for unit tests of what a call plans from them.
use guest_kit::machine::{AllocatedAddress, MachineRequest};
use guest_kit::types::{Credentials, ObjectRef};
use serde_json::{Value, json};

use super::context::Ctx;

pub(super) const UID: &str = "7F3A9C2E-1B4D-4E5F-8A6B-0C1D2E3F4A5B";

/// The smallest valid machine spec: clone template 9000 of node pve1.
pub(super) fn template_spec() -> Value {
    json!({"templateID": 9000, "sourceNode": "pve1"})
}

/// A machine `m1` of cluster `c1` with this spec and cluster spec.
pub(super) fn request(spec: Value, cluster: Value) -> MachineRequest {
    MachineRequest {
        machine: ObjectRef {
            namespace: "default".into(),
            name: "m1".into(),
            uid: UID.into(),
        },
        cluster: ObjectRef {
            namespace: "default".into(),
            name: "c1".into(),
            uid: "c1-uid".into(),
        },
        spec: spec.to_string(),
        cluster_spec: cluster.to_string(),
        state: None,
        bootstrap: None,
        failure_domain: None,
        addresses: vec![],
        credentials: Credentials {
            endpoint: "https://pve.test:8006".into(),
            token: "capi@pve!test".into(),
            secret: "not-a-secret".into(),
            ca_bundle: None,
            fingerprint: None,
            insecure: false,
        },
        more_credentials: vec![],
    }
}

/// The context of a call, which must parse and validate.
pub(super) fn ctx(req: &MachineRequest) -> Ctx<'_> {
    match Ctx::new(req) {
        Ok(cx) => cx,
        Err(e) => panic!("the test request is not valid: {e:?}"),
    }
}

/// An address the host allocated for `device`.
pub(super) fn allocated(
    device: &str,
    address: &str,
    prefix: u8,
    gateway: Option<&str>,
) -> AllocatedAddress {
    AllocatedAddress {
        device: device.into(),
        address: address.into(),
        prefix,
        gateway: gateway.map(str::to_string),
    }
}
