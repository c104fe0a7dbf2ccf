//! What this plugin serves: the four Redfish kinds and their spec schemas, in one API
//! version.
use guest_kit::identity::PluginInfo;
use guest_kit::kinds::{column, kinds};

use crate::spec::{ClusterSpec, MachineSpec};

/// The one API version of the Redfish kinds (so `conversion` has nothing to convert).
const API_VERSION: &str = "v1alpha1";

pub fn info() -> PluginInfo {
    let machine_columns = vec![
        column(
            "BMC",
            "string",
            ".status.details.bmc",
            "BMC serving the host",
        ),
        column(
            "Host",
            "string",
            ".status.details.host",
            "Name of the claimed host",
        ),
        column(
            "Power",
            "string",
            ".status.details.power",
            "Host power state",
        ),
    ];
    let cluster_columns = vec![column(
        "Hosts",
        "string",
        ".status.details.hosts",
        "Hosts in the inventory",
    )];
    PluginInfo {
        name: "redfish".into(),
        version: env!("CARGO_PKG_VERSION").into(),
        group: "infrastructure.cluster.x-k8s.io".into(),
        api_version: API_VERSION.into(),
        kinds: kinds::<ClusterSpec, MachineSpec>(
            "Redfish",
            API_VERSION,
            cluster_columns,
            machine_columns,
        ),
        capabilities: vec![
            "ip-pools".into(),
            "adoption".into(),
            "exclusive-hosts".into(),
        ],
    }
}
