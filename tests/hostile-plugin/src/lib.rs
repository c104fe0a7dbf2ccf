//! A test plugin that misbehaves on request. `machine.create` reads the attack from
//! the spec (`{"attack": "...", ...}`): a flood or escape (`attacks`), or a result
//! shaped wrong (`outputs`); so do `cluster.reconcile` and
//! `machine.describe-template` for the attacks that make sense there; every other call
//! behaves. The host's tests use it to show each misbehaviour is contained with a
//! specific error while the same host keeps serving other calls.
//!
//! Built with the `impostor` feature it claims another plugin's kinds (the Proxmox
//! ones) under its own name, to show the host refuses to load both.
mod attacks;
mod outputs;

use guest_kit::types::{PluginError, Progress, TransientError};
use guest_kit::{blobs, claims, cluster, conversion, identity, machine, observer};

struct Hostile;
guest_kit::export!(Hostile);

pub(crate) fn status(message: String) -> machine::MachineStatus {
    machine::MachineStatus {
        progress: Progress {
            state: String::new(),
            phase: "Done".into(),
            message,
            requeue_after_ms: None,
            waits: vec![],
            durable: true,
        },
        ready: true,
        provider_id: Some("hostile://1".into()),
        addresses: vec![],
        failure_domain: None,
        address_requests: vec![],
        needs_bootstrap: false,
        drift: None,
        details: vec![],
        plugin_status: None,
    }
}

pub(crate) fn failed(message: String) -> PluginError {
    PluginError::Transient(TransientError {
        message,
        retry_after_ms: None,
    })
}

/// The spec's string field `k` (empty when absent).
pub(crate) struct Spec(serde_json::Value);

impl Spec {
    fn parse(json: &str) -> Spec {
        Spec(serde_json::from_str(json).unwrap_or_default())
    }
    pub(crate) fn str(&self, k: &str) -> String {
        self.0
            .get(k)
            .and_then(|v| v.as_str())
            .unwrap_or_default()
            .to_string()
    }
    pub(crate) fn num(&self, k: &str, default: u64) -> u64 {
        self.0.get(k).and_then(|v| v.as_u64()).unwrap_or(default)
    }
}

fn kind(name: &str, role: identity::KindRole) -> identity::KindInfo {
    identity::KindInfo {
        kind: name.into(),
        role,
        versions: vec![guest_kit::kinds::version(
            "v1alpha1",
            r#"{"type":"object","x-kubernetes-preserve-unknown-fields":true}"#.into(),
        )],
        columns: vec![],
    }
}

impl identity::Guest for Hostile {
    fn info() -> identity::PluginInfo {
        let (name, prefix) = if cfg!(feature = "impostor") {
            ("impostor", "Proxmox")
        } else {
            ("hostile", "Hostile")
        };
        identity::PluginInfo {
            name: name.into(),
            version: "0.0.1".into(),
            group: "infrastructure.cluster.x-k8s.io".into(),
            api_version: "v1alpha1".into(),
            kinds: vec![
                kind(
                    &format!("{prefix}Cluster"),
                    identity::KindRole::InfraCluster,
                ),
                kind(
                    &format!("{prefix}Machine"),
                    identity::KindRole::InfraMachine,
                ),
            ],
            capabilities: vec![],
        }
    }
}

impl machine::Guest for Hostile {
    fn create(req: machine::MachineRequest) -> Result<machine::MachineStatus, PluginError> {
        // Its state is read as every plugin reads its own (`bad-state` writes one that
        // does not read, `newer-state` one of a layout it does not read).
        let _: serde_json::Value = guest_kit::state::load(req.state.as_deref())?;
        attacks::run(&Spec::parse(&req.spec))
    }

    /// Reports the claims the object holds, so a test can see whose claims a call
    /// works with.
    fn describe(_req: machine::MachineRequest) -> Result<machine::MachineStatus, PluginError> {
        let mut s = status("fine".into());
        let held = claims::held().unwrap_or_default();
        s.details = vec![("claims".into(), held.join(","))];
        Ok(s)
    }

    /// Gives up everything the object holds, as an honest plugin's delete would.
    fn delete(_req: machine::MachineRequest) -> Result<Option<Progress>, PluginError> {
        for key in claims::held().unwrap_or_default() {
            let _ = claims::release(&key);
        }
        blobs::withdraw(attacks::SEED);
        Ok(None)
    }

    /// Tries to take a claim and publish a blob for the template: nothing would ever
    /// release them, so the host must refuse. The capacity reports what happened.
    fn describe_template(
        req: machine::TemplateRequest,
    ) -> Result<machine::TemplateStatus, PluginError> {
        let spec = Spec::parse(&req.spec);
        let mut capacity = vec![];
        if spec.str("attack") == "claim-and-publish" {
            let (claim, blob) = attacks::claim_and_publish(&spec);
            capacity.push(("claim".into(), claim));
            capacity.push(("blob".into(), blob));
        }
        Ok(machine::TemplateStatus {
            capacity,
            node_info: vec![],
        })
    }
}

impl cluster::Guest for Hostile {
    fn reconcile(req: cluster::ClusterRequest) -> Result<cluster::ClusterStatus, PluginError> {
        let spec = Spec::parse(&req.spec);
        let mut details = vec![];
        if spec.str("attack") == "claim-and-publish" {
            let (claim, blob) = attacks::claim_and_publish(&spec);
            details.push(("claim".into(), claim));
            details.push(("blob".into(), blob));
        }
        Ok(cluster::ClusterStatus {
            progress: Progress {
                state: String::new(),
                phase: "Ready".into(),
                message: "hostile cluster".into(),
                requeue_after_ms: None,
                waits: vec![],
                durable: true,
            },
            ready: true,
            control_plane_endpoint: None,
            failure_domains: vec![],
            ip_pools: vec![],
            details,
            plugin_status: None,
        })
    }

    /// Forgets what it took: the host must release it.
    fn delete(_req: cluster::ClusterRequest) -> Result<Option<Progress>, PluginError> {
        Ok(None)
    }
}

/// One version per kind: nothing to convert.
impl conversion::Guest for Hostile {
    fn convert(req: conversion::ConversionRequest) -> Result<conversion::Converted, PluginError> {
        guest_kit::convert::single_version(&<Hostile as identity::Guest>::info(), req)
    }
}

/// Names no waits: nothing to observe.
impl observer::Guest for Hostile {
    fn observe(req: observer::ObserveRequest) -> Result<observer::Observation, PluginError> {
        guest_kit::observe::nothing(req)
    }
}
