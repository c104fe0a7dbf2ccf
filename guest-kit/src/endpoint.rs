//! The control-plane endpoint every InfraCluster spec carries (`spec.controlPlaneEndpoint`),
//! unless the control plane's endpoint is managed elsewhere.
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::cluster::Endpoint;
use crate::errors::invalid;
use crate::types::PluginError;

/// `host:port` of the workload cluster's API server (e.g. a kube-vip address).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct ApiEndpoint {
    pub host: String,
    #[schemars(range(min = 1, max = 65535))]
    pub port: u16,
}

/// The endpoint to report from `spec.controlPlaneEndpoint`: required unless
/// `spec.externalManagedControlPlane` is true, in which case none is reported.
pub fn control_plane_endpoint(
    endpoint: Option<&ApiEndpoint>,
    externally_managed: Option<bool>,
) -> Result<Option<Endpoint>, PluginError> {
    match endpoint {
        Some(ep) if !ep.host.is_empty() => Ok(Some(Endpoint {
            host: ep.host.clone(),
            port: ep.port,
        })),
        _ if externally_managed == Some(true) => Ok(None),
        _ => Err(invalid(
            "spec.controlPlaneEndpoint",
            "a host and port are required (e.g. the kube-vip address)",
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn endpoint(host: &str) -> ApiEndpoint {
        ApiEndpoint {
            host: host.into(),
            port: 6443,
        }
    }

    #[test]
    fn a_set_endpoint_is_reported_as_given() {
        let reported = control_plane_endpoint(Some(&endpoint("10.0.0.5")), None).unwrap();
        let reported = reported.expect("an endpoint");
        assert_eq!((reported.host.as_str(), reported.port), ("10.0.0.5", 6443));
    }

    #[test]
    fn a_missing_or_empty_endpoint_is_an_invalid_spec_naming_the_field() {
        for given in [None, Some(endpoint(""))] {
            match control_plane_endpoint(given.as_ref(), Some(false)) {
                Err(PluginError::InvalidSpec(i)) => {
                    assert_eq!(i.field, "spec.controlPlaneEndpoint")
                }
                other => panic!("expected invalid-spec, got {other:?}"),
            }
        }
    }

    #[test]
    fn an_externally_managed_control_plane_needs_no_endpoint() {
        assert!(control_plane_endpoint(None, Some(true)).unwrap().is_none());
    }
}
