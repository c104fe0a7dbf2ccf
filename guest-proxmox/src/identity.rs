//! What this plugin serves: the four Proxmox kinds in both API versions, `v1alpha1`
//! (served) and `v1alpha2` (served and stored, as CAPMOX stores it), with their spec
//! and status schemas; calls speak `spec::SERVED`.
use guest_kit::identity::{KindRole, KindVersion, PluginInfo};
use guest_kit::kinds::{column, kind, version};

use crate::spec::SERVED;
use crate::spec::convert::{Kind, Version};
use crate::spec::schema::{spec_schema, status_schema};

/// Every version of `kind`, oldest first.
fn versions(kind: Kind) -> Vec<KindVersion> {
    [Version::V1alpha1, Version::V1alpha2]
        .into_iter()
        .map(|v| KindVersion {
            status_schema: status_schema(kind, v).map(|s| s.to_string()),
            storage: v == Version::V1alpha2,
            ..version(v.as_str(), spec_schema(kind, v).to_string())
        })
        .collect()
}

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
        api_version: SERVED.as_str().into(),
        kinds: vec![
            kind(
                "ProxmoxCluster",
                KindRole::InfraCluster,
                versions(Kind::Cluster),
                vec![],
            ),
            kind(
                "ProxmoxClusterTemplate",
                KindRole::InfraClusterTemplate,
                versions(Kind::ClusterTemplate),
                vec![],
            ),
            kind(
                "ProxmoxMachine",
                KindRole::InfraMachine,
                versions(Kind::Machine),
                machine_columns,
            ),
            kind(
                "ProxmoxMachineTemplate",
                KindRole::InfraMachineTemplate,
                versions(Kind::MachineTemplate),
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
