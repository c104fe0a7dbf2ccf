//! Requests as the host sends them, for unit tests of what a call decides from them.
use guest_kit::machine::MachineRequest;
use guest_kit::testing::{credentials, machine_request};
use guest_kit::types::NamedCredentials;
use serde_json::Value;

use crate::inventory::Host;

/// `more-credentials` naming the BMCs at `endpoints`.
pub(crate) fn more(endpoints: &[&str]) -> Vec<NamedCredentials> {
    endpoints
        .iter()
        .enumerate()
        .map(|(i, e)| NamedCredentials {
            name: format!("default/bmc-{i}"),
            credentials: credentials(e),
        })
        .collect()
}

/// A first create of machine `m1` with this spec, of a cluster with this spec, on the
/// BMC at `https://bmc1.test`.
pub(crate) fn request(spec: Value, cluster: Value) -> MachineRequest {
    machine_request(
        "m1-uid",
        &spec.to_string(),
        &cluster.to_string(),
        "https://bmc1.test",
    )
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
