//! Implements our world but also tries raw sockets, which the host never grants: the
//! `wasi:sockets` imports link (language runtimes import them), and every use is refused
//! before anything is opened. `create` reports what each attempt got, against the
//! `host:port` of its credentials' endpoint.
use guest_kit::types::{PluginError, Progress, TransientError};
use guest_kit::{cluster, conversion, identity, machine, observer};
struct Sockets;
guest_kit::export!(Sockets);

fn refuse() -> PluginError {
    attempt("127.0.0.1:1")
}

/// Connect over TCP, send over UDP and resolve a name; the outcome of each.
fn attempt(target: &str) -> PluginError {
    use std::net::{TcpStream, ToSocketAddrs, UdpSocket};
    let tcp = TcpStream::connect(target).map(|_| "connected".to_string());
    let udp = UdpSocket::bind("0.0.0.0:0")
        .and_then(|s| s.send_to(b"x", target))
        .map(|_| "sent".to_string());
    let lookup = ("localhost", 80)
        .to_socket_addrs()
        .map(|_| "resolved".to_string());
    let show = |r: std::io::Result<String>| r.unwrap_or_else(|e| format!("refused ({e})"));
    PluginError::Transient(TransientError {
        message: format!(
            "tcp: {}; udp: {}; lookup: {}",
            show(tcp),
            show(udp),
            show(lookup)
        ),
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
            kinds: vec![identity::KindInfo {
                kind: "SocketsMachine".into(),
                role: identity::KindRole::InfraMachine,
                versions: vec![guest_kit::kinds::version(
                    "v1alpha1",
                    r#"{"type":"object","x-kubernetes-preserve-unknown-fields":true}"#.into(),
                )],
                columns: vec![],
            }],
            capabilities: vec![],
        }
    }
}
impl machine::Guest for Sockets {
    fn create(req: machine::MachineRequest) -> Result<machine::MachineStatus, PluginError> {
        let endpoint = req.credentials.endpoint;
        Err(attempt(endpoint.rsplit("//").next().unwrap_or(&endpoint)))
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
