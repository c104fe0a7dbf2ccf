//! A test plugin that misbehaves on request. `machine.create` reads the attack from
//! the spec (`{"attack": "...", ...}`); every other call behaves. The host's tests use
//! it to show each misbehaviour is contained with a specific error while the same host
//! keeps serving other calls.
use guest_kit::types::{PluginError, Progress, TransientError};
use guest_kit::{cluster, identity, machine};

struct Hostile;
guest_kit::export!(Hostile);

fn status(message: String) -> machine::MachineStatus {
    machine::MachineStatus {
        progress: Progress {
            state: String::new(),
            phase: "Done".into(),
            message,
            requeue_after_ms: None,
        },
        ready: true,
        provider_id: Some("hostile://1".into()),
        addresses: vec![],
        failure_domain: None,
        address_requests: vec![],
        needs_bootstrap: false,
        drift: None,
        details: vec![],
    }
}

fn failed(message: String) -> PluginError {
    PluginError::Transient(TransientError {
        message,
        retry_after_ms: None,
    })
}

impl identity::Guest for Hostile {
    fn info() -> identity::PluginInfo {
        identity::PluginInfo {
            name: "hostile".into(),
            version: "0.0.1".into(),
            group: "infrastructure.cluster.x-k8s.io".into(),
            api_version: "v1alpha1".into(),
            kinds: vec![identity::KindInfo {
                kind: "HostileMachine".into(),
                role: identity::KindRole::InfraMachine,
                spec_schema: r#"{"type":"object","x-kubernetes-preserve-unknown-fields":true}"#
                    .into(),
                columns: vec![],
            }],
            capabilities: vec![],
        }
    }
}

impl machine::Guest for Hostile {
    fn create(req: machine::MachineRequest) -> Result<machine::MachineStatus, PluginError> {
        let spec: serde_json::Value = serde_json::from_str(&req.spec).unwrap_or_default();
        let arg = |k: &str| {
            spec.get(k)
                .and_then(|v| v.as_str())
                .unwrap_or_default()
                .to_string()
        };
        match arg("attack").as_str() {
            "noop" => Ok(status("ok".into())),
            "read-file" => match std::fs::read(arg("path")) {
                Ok(bytes) => Ok(status(format!("read {} bytes", bytes.len()))),
                Err(e) => Err(failed(format!("read-file failed: {e}"))),
            },
            "read-env" => {
                let vars: Vec<String> = std::env::vars().map(|(k, _)| k).collect();
                Ok(status(format!(
                    "saw {} environment variables: {}",
                    vars.len(),
                    vars.join(",")
                )))
            }
            "connect" => {
                let req =
                    wasip2::http::types::OutgoingRequest::new(wasip2::http::types::Fields::new());
                let _ = req.set_scheme(Some(&wasip2::http::types::Scheme::Http));
                let _ = req.set_authority(Some(&arg("authority")));
                let _ = req.set_path_with_query(Some("/"));
                match wasip2::http::outgoing_handler::handle(req, None) {
                    Err(code) => Err(failed(format!("connect failed: {code:?}"))),
                    Ok(pending) => {
                        pending.subscribe().block();
                        match pending.get() {
                            Some(Ok(Ok(resp))) => {
                                Ok(status(format!("connected: HTTP {}", resp.status())))
                            }
                            Some(Ok(Err(code))) => Err(failed(format!("connect failed: {code:?}"))),
                            other => Err(failed(format!("connect failed: {other:?}"))),
                        }
                    }
                }
            }
            "grow-memory" => {
                let mut hoard: Vec<Vec<u8>> = Vec::new();
                loop {
                    hoard.push(vec![1u8; 16 << 20]);
                    if hoard.len() > 1024 {
                        return Ok(status("memory was never capped".into()));
                    }
                }
            }
            "loop" => {
                let mut n: u64 = 0;
                loop {
                    n = std::hint::black_box(n.wrapping_add(1));
                }
            }
            "big-string" => Ok(status("x".repeat(8 << 20))),
            "panic" => panic!("hostile plugin panics on purpose"),
            other => Err(failed(format!("unknown attack `{other}`"))),
        }
    }

    fn describe(_req: machine::MachineRequest) -> Result<machine::MachineStatus, PluginError> {
        Ok(status("fine".into()))
    }

    fn delete(_req: machine::MachineRequest) -> Result<Option<Progress>, PluginError> {
        Ok(None)
    }

    fn describe_template(
        _req: machine::TemplateRequest,
    ) -> Result<machine::TemplateStatus, PluginError> {
        Ok(machine::TemplateStatus {
            capacity: vec![],
            node_info: vec![],
        })
    }
}

impl cluster::Guest for Hostile {
    fn reconcile(_req: cluster::ClusterRequest) -> Result<cluster::ClusterStatus, PluginError> {
        Err(failed("hostile plugin has no clusters".into()))
    }
    fn delete(_req: cluster::ClusterRequest) -> Result<Option<Progress>, PluginError> {
        Ok(None)
    }
}
