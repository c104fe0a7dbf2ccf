//! Requests as the host sends them, for unit tests of what a call plans from them.
use guest_kit::machine::MachineRequest;
use guest_kit::testing::machine_request;
use serde_json::{Value, json};

use super::context::Ctx;
use super::nics::plan_nics;
use super::validate::validate;
use crate::api::Pve;
use crate::spec::{ClusterSpec, MachineSpec};

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

/// The context of a call whose specs are `v1alpha2` (what the host will pass once it
/// stores that version), which must plan and validate.
pub(super) fn ctx_v2(req: &MachineRequest, spec: Value, cluster: Value) -> Ctx<'_> {
    let spec: MachineSpec = serde_json::from_value(spec).expect("a v1alpha2 machine spec");
    let cluster: ClusterSpec = serde_json::from_value(cluster).expect("a v1alpha2 cluster spec");
    let nics = plan_nics(&spec, &cluster).expect("the NICs plan");
    if let Err(e) = validate(&spec, &cluster, &nics) {
        panic!("the test spec is not valid: {e:?}");
    }
    Ctx {
        req,
        spec,
        cluster,
        nics,
        pve: Pve::new(&req.credentials),
        resources: Default::default(),
    }
}
