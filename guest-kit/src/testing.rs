//! Requests as the host sends them, for a plugin's unit tests of what it decides from
//! them (natively, where the WIT imports are stubs: nothing here calls one).
use crate::machine::{AllocatedAddress, MachineRequest};
use crate::types::{Credentials, ObjectRef};

/// Credentials for the endpoint `endpoint`, with a token and secret no test should log.
pub fn credentials(endpoint: &str) -> Credentials {
    Credentials {
        endpoint: endpoint.into(),
        token: "test-token".into(),
        secret: "test-secret".into(),
        ca_bundle: None,
        fingerprint: None,
        insecure: false,
    }
}

/// Object `default/<name>` with this UID.
pub fn object(name: &str, uid: &str) -> ObjectRef {
    ObjectRef {
        namespace: "default".into(),
        name: name.into(),
        uid: uid.into(),
    }
}

/// A first call for machine `default/m1` (UID `uid`) of cluster `default/c1`, with
/// these specs (JSON) and the credentials of `endpoint`: no state, no bootstrap data,
/// no failure domain, no addresses yet.
pub fn machine_request(
    uid: &str,
    spec: &str,
    cluster_spec: &str,
    endpoint: &str,
) -> MachineRequest {
    MachineRequest {
        machine: object("m1", uid),
        cluster: object("c1", "c1-uid"),
        spec: spec.into(),
        cluster_spec: cluster_spec.into(),
        plugin_status: None,
        state: None,
        bootstrap: None,
        failure_domain: None,
        addresses: vec![],
        credentials: credentials(endpoint),
        more_credentials: vec![],
    }
}

/// An address the host allocated through IPAM for `device`.
pub fn allocated(
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
