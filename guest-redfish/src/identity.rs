//! What this plugin serves: the four Redfish kinds and their spec schemas.
use guest_kit::schema::crd_schema;

use crate::bindings::exports::hyperplug::provider::identity::{
    KindInfo, KindRole, PluginInfo, PrinterColumn,
};
use crate::spec::{ClusterSpec, MachineSpec};

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
        api_version: "v1alpha1".into(),
        kinds: vec![
            kind(
                "RedfishCluster",
                KindRole::InfraCluster,
                crd_schema::<ClusterSpec>(),
                cluster_columns,
            ),
            kind(
                "RedfishClusterTemplate",
                KindRole::InfraClusterTemplate,
                crd_schema::<ClusterSpec>(),
                vec![],
            ),
            kind(
                "RedfishMachine",
                KindRole::InfraMachine,
                crd_schema::<MachineSpec>(),
                machine_columns,
            ),
            kind(
                "RedfishMachineTemplate",
                KindRole::InfraMachineTemplate,
                crd_schema::<MachineSpec>(),
                vec![],
            ),
        ],
        capabilities: vec![
            "ip-pools".into(),
            "adoption".into(),
            "exclusive-hosts".into(),
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
