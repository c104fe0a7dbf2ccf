//! Implements our world but also opens raw TCP sockets, which the host never grants:
//! loading it must fail naming the `wasi:sockets` import.
use guest_kit::types::{PluginError, Progress, TransientError};
use guest_kit::{cluster, conversion, identity, machine, observer};
struct Sockets;
guest_kit::export!(Sockets);

fn refuse() -> PluginError {
    let reached = std::net::TcpStream::connect("127.0.0.1:1").is_ok();
    PluginError::Transient(TransientError {
        message: format!("reached: {reached}"),
        retry_after_ms: None,
    })
}

impl identity::Guest for Sockets {
    fn info() -> identity::PluginInfo {
        identity::PluginInfo {
            name: "sockets".into(),
            version: "0.0.1".into(),
            group: "infrastructure.cluster.x-k8s.io".into(),
            api_version: "v1alpha1".into(),
            kinds: vec![],
            capabilities: vec![],
        }
    }
}
impl machine::Guest for Sockets {
    fn create(_: machine::MachineRequest) -> Result<machine::MachineStatus, PluginError> {
        Err(refuse())
    }
    fn describe(_: machine::MachineRequest) -> Result<machine::MachineStatus, PluginError> {
        Err(refuse())
    }
    fn delete(_: machine::MachineRequest) -> Result<Option<Progress>, PluginError> {
        Err(refuse())
    }
    fn describe_template(
        _: machine::TemplateRequest,
    ) -> Result<machine::TemplateStatus, PluginError> {
        Err(refuse())
    }
}
impl cluster::Guest for Sockets {
    fn reconcile(_: cluster::ClusterRequest) -> Result<cluster::ClusterStatus, PluginError> {
        Err(refuse())
    }
    fn delete(_: cluster::ClusterRequest) -> Result<Option<Progress>, PluginError> {
        Err(refuse())
    }
}
impl conversion::Guest for Sockets {
    fn convert(_: conversion::ConversionRequest) -> Result<conversion::Converted, PluginError> {
        Err(refuse())
    }
}
impl observer::Guest for Sockets {
    fn observe(_: observer::ObserveRequest) -> Result<observer::Observation, PluginError> {
        Err(refuse())
    }
}
