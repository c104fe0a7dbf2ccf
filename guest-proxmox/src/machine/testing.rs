//! Requests as the host sends them, for unit tests of what a call plans from them.
use guest_kit::machine::MachineRequest;
use guest_kit::testing::machine_request;
use serde_json::{Value, json};

use super::context::Ctx;

pub(super) const UID: &str = "7F3A9C2E-1B4D-4E5F-8A6B-0C1D2E3F4A5B";

/// The smallest valid machine spec: clone template 9000 of node pve1.
pub(super) fn template_spec() -> Value {
    json!({"templateID": 9000, "sourceNode": "pve1"})
}

/// A first create of machine `m1` (UID [`UID`]) of cluster `c1` with these specs.
pub(super) fn request(spec: Value, cluster: Value) -> MachineRequest {
    machine_request(
        UID,
        &spec.to_string(),
        &cluster.to_string(),
        "https://pve.test:8006",
    )
}

/// The context of a call, which must parse and validate.
pub(super) fn ctx(req: &MachineRequest) -> Ctx<'_> {
    match Ctx::new(req) {
        Ok(cx) => cx,
        Err(e) => panic!("the test request is not valid: {e:?}"),
    }
}
