//! What this plugin serves: the four Proxmox kinds and their spec schemas.
use crate::bindings::exports::hyperplug::provider::identity::{
    KindInfo, KindRole, PluginInfo, PrinterColumn,
};
use crate::schema::crd_schema;
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
        kinds: vec![
            kind(
                "ProxmoxCluster",
                KindRole::InfraCluster,
                crd_schema::<ClusterSpec>(),
                vec![],
            ),
            kind(
                "ProxmoxClusterTemplate",
                KindRole::InfraClusterTemplate,
                crd_schema::<ClusterSpec>(),
                vec![],
            ),
            kind(
                "ProxmoxMachine",
                KindRole::InfraMachine,
                crd_schema::<MachineSpec>(),
                machine_columns,
            ),
            kind(
                "ProxmoxMachineTemplate",
                KindRole::InfraMachineTemplate,
                crd_schema::<MachineSpec>(),
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

fn kind(name: &str, role: KindRole, spec_schema: String, columns: Vec<PrinterColumn>) -> KindInfo {
    KindInfo {
        kind: name.into(),
        role,
        spec_schema,
        columns,
    }
}

fn column(name: &str, column_type: &str, json_path: &str, description: &str) -> PrinterColumn {
    PrinterColumn {
        name: name.into(),
        column_type: column_type.into(),
        json_path: json_path.into(),
        description: description.into(),
    }
}
