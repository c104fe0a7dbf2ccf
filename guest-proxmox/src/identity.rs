//! What this plugin serves: the four Proxmox kinds and their spec schemas, in the
//! version the host serves (`spec::SERVED`).
use guest_kit::identity::{KindRole, PluginInfo};
use guest_kit::kinds::{column, kind};

use crate::spec::SERVED;
use crate::spec::convert::Kind;
use crate::spec::schema::spec_schema;

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
    let schema = |k: Kind| spec_schema(k, SERVED).to_string();
    PluginInfo {
        name: "proxmox".into(),
        version: env!("CARGO_PKG_VERSION").into(),
        group: "infrastructure.cluster.x-k8s.io".into(),
        api_version: SERVED.as_str().into(),
        kinds: vec![
            kind(
                "ProxmoxCluster",
                KindRole::InfraCluster,
                schema(Kind::Cluster),
                vec![],
            ),
            kind(
                "ProxmoxClusterTemplate",
                KindRole::InfraClusterTemplate,
                schema(Kind::ClusterTemplate),
                vec![],
            ),
            kind(
                "ProxmoxMachine",
                KindRole::InfraMachine,
                schema(Kind::Machine),
                machine_columns,
            ),
            kind(
                "ProxmoxMachineTemplate",
                KindRole::InfraMachineTemplate,
                schema(Kind::MachineTemplate),
                vec![],
            ),
        ],
        capabilities: vec![
            "ip-pools".into(),
            "failure-domains".into(),
            "adoption".into(),
        ],
    }
}
