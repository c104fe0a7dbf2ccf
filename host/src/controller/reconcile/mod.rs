//! The reconcilers, one per role a kind plays in the Cluster API contract: `machine`
//! (InfraMachine: observe, call, report, claim addresses, delete), `cluster`
//! (InfraCluster) and `template` (InfraMachineTemplate); the entry checks a machine's
//! and an InfraCluster's reconcile both pass first (`gate`), and what they are handed
//! (`context`: the shared `Context`, the InfraMachine controller's `MachineContext`, the
//! manager's options).
//!
//! The top room: it may import every room below it (`call`, `trust`, `cache`, `write`,
//! `schedule`, `ipam`, `objects`, `error`); none of them imports it. Only the wiring
//! above it (`controller::run`) does.
pub(crate) mod cluster;
pub(crate) mod context;
pub(crate) mod gate;
pub(crate) mod machine;
pub(crate) mod template;
