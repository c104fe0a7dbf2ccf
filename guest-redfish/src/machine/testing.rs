//! Requests as the host sends them, for unit tests of what a call decides from them.
use guest_kit::machine::{AllocatedAddress, MachineRequest};
use guest_kit::types::{Credentials, NamedCredentials, ObjectRef};
use serde_json::Value;

use crate::inventory::Host;

/// Credentials of the BMC at `endpoint`.
pub(crate) fn bmc(endpoint: &str) -> Credentials {
    Credentials {
        endpoint: endpoint.into(),
        token: "admin".into(),
        secret: "not-a-secret".into(),
        ca_bundle: None,
        fingerprint: None,
        insecure: false,
    }
}

/// `more-credentials` naming the BMCs at `endpoints`.
pub(crate) fn more(endpoints: &[&str]) -> Vec<NamedCredentials> {
    endpoints
        .iter()
        .enumerate()
        .map(|(i, e)| NamedCredentials {
            name: format!("default/bmc-{i}"),
            credentials: bmc(e),
        })
        .collect()
}

/// A machine `m1` with this spec, of a cluster with this spec, on one BMC.
pub(crate) fn request(spec: Value, cluster: Value) -> MachineRequest {
    MachineRequest {
        machine: ObjectRef {
            namespace: "default".into(),
            name: "m1".into(),
            uid: "m1-uid".into(),
        },
        cluster: ObjectRef {
            namespace: "default".into(),
            name: "metal".into(),
            uid: "metal-uid".into(),
        },
        spec: spec.to_string(),
        cluster_spec: cluster.to_string(),
        state: None,
        bootstrap: None,
        failure_domain: None,
        addresses: vec![],
        credentials: bmc("https://bmc1.test"),
        more_credentials: vec![],
    }
}

pub(crate) fn allocated(device: &str, address: &str) -> AllocatedAddress {
    AllocatedAddress {
        device: device.into(),
        address: address.into(),
        prefix: 24,
        gateway: Some("10.0.0.1".into()),
    }
}

/// Host `name` of the BMC at `endpoint`, with this UUID.
pub(crate) fn host(endpoint: &str, name: &str, uuid: &str) -> Host {
    Host {
        endpoint: endpoint.into(),
        path: format!("/redfish/v1/Systems/{name}"),
        uuid: uuid.into(),
        name: name.into(),
    }
}
