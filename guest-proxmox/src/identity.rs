//! What this plugin serves: the four Proxmox kinds and their spec schemas.
use guest_kit::identity::PluginInfo;
use guest_kit::kinds::{column, kinds};

use crate::spec::{ClusterSpec, MachineSpec};

pub fn info() -> PluginInfo {
    let machine_columns = vec![
        column(
            "Node",
            "string",
            ".status.details.node",
            "Proxmox node running the VM",
        ),
        column("VMID", "string", ".status.details.vmid", "Proxmox VM ID"),
    ];
    PluginInfo {
        name: "proxmox".into(),
        version: env!("CARGO_PKG_VERSION").into(),
        group: "infrastructure.cluster.x-k8s.io".into(),
        api_version: "v1alpha1".into(),
        kinds: kinds::<ClusterSpec, MachineSpec>("Proxmox", vec![], machine_columns),
        capabilities: vec![
            "ip-pools".into(),
            "failure-domains".into(),
            "adoption".into(),
        ],
    }
}
