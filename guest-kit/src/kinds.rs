//! What `identity.info` declares: the kinds a plugin serves, their API versions and
//! their printer columns.
use schemars::JsonSchema;

use crate::identity::{KindInfo, KindRole, KindVersion, PrinterColumn};
use crate::schema::crd_schema;

/// The four kinds of a plugin named `prefix` (e.g. `Example`), each in the one API
/// version `api_version`: `ExampleCluster` and `ExampleClusterTemplate` with spec `C`,
/// `ExampleMachine` and `ExampleMachineTemplate` with spec `M`. The columns go on the
/// cluster and machine kinds (templates get the host's only).
pub fn kinds<C: JsonSchema, M: JsonSchema>(
    prefix: &str,
    api_version: &str,
    cluster_columns: Vec<PrinterColumn>,
    machine_columns: Vec<PrinterColumn>,
) -> Vec<KindInfo> {
    let only = |schema: String| vec![version(api_version, schema)];
    vec![
        kind(
            &format!("{prefix}Cluster"),
            KindRole::InfraCluster,
            only(crd_schema::<C>()),
            cluster_columns,
        ),
        kind(
            &format!("{prefix}ClusterTemplate"),
            KindRole::InfraClusterTemplate,
            only(crd_schema::<C>()),
            vec![],
        ),
        kind(
            &format!("{prefix}Machine"),
            KindRole::InfraMachine,
            only(crd_schema::<M>()),
            machine_columns,
        ),
        kind(
            &format!("{prefix}MachineTemplate"),
            KindRole::InfraMachineTemplate,
            only(crd_schema::<M>()),
            vec![],
        ),
    ]
}

/// One kind of `role` in `versions` (oldest first).
pub fn kind(
    name: &str,
    role: KindRole,
    versions: Vec<KindVersion>,
    columns: Vec<PrinterColumn>,
) -> KindInfo {
    KindInfo {
        kind: name.into(),
        role,
        versions,
        columns,
    }
}

/// API version `name` whose `spec` has the schema `spec_schema`: served and stored (a
/// kind's only version), no status fields of the plugin's own. Set `storage`, `served`,
/// `status_schema` on the result for a kind of several versions.
pub fn version(name: &str, spec_schema: String) -> KindVersion {
    KindVersion {
        name: name.into(),
        spec_schema,
        status_schema: None,
        served: true,
        storage: true,
        deprecation_warning: None,
    }
}

/// A `kubectl get` column: `column_type` is a CRD printer column type (`string`,
/// `integer`, `boolean`, `date`), `json_path` points into the object (what a plugin
/// reports in `details` is at `.status.details.<key>`).
pub fn column(name: &str, column_type: &str, json_path: &str, description: &str) -> PrinterColumn {
    PrinterColumn {
        name: name.into(),
        column_type: column_type.into(),
        json_path: json_path.into(),
        description: description.into(),
    }
}

#[cfg(test)]
mod tests {
    use serde_json::Value;

    use super::*;

    #[derive(JsonSchema)]
    #[allow(dead_code)]
    struct ClusterSpec {
        region: String,
    }

    #[derive(JsonSchema)]
    #[allow(dead_code)]
    struct MachineSpec {
        size: u32,
    }

    #[test]
    fn the_four_kinds_are_named_after_the_prefix_one_per_role() {
        let kinds = kinds::<ClusterSpec, MachineSpec>("Example", "v1", vec![], vec![]);
        let named: Vec<(&str, KindRole)> =
            kinds.iter().map(|k| (k.kind.as_str(), k.role)).collect();
        assert_eq!(
            named,
            [
                ("ExampleCluster", KindRole::InfraCluster),
                ("ExampleClusterTemplate", KindRole::InfraClusterTemplate),
                ("ExampleMachine", KindRole::InfraMachine),
                ("ExampleMachineTemplate", KindRole::InfraMachineTemplate),
            ]
        );
    }

    #[test]
    fn clusters_and_machines_get_their_own_spec_schema_and_columns() {
        let size = column("Size", "integer", ".status.details.size", "Size");
        let kinds = kinds::<ClusterSpec, MachineSpec>("Example", "v1", vec![], vec![size]);
        let properties = |k: &KindInfo| {
            assert_eq!(k.versions.len(), 1);
            assert!(k.versions[0].served && k.versions[0].storage);
            assert_eq!(k.versions[0].name, "v1");
            let schema: Value = serde_json::from_str(&k.versions[0].spec_schema).unwrap();
            schema["properties"]
                .as_object()
                .unwrap()
                .keys()
                .cloned()
                .collect::<Vec<_>>()
        };
        assert_eq!(properties(&kinds[0]), ["region"]);
        assert_eq!(properties(&kinds[1]), ["region"]);
        assert_eq!(properties(&kinds[2]), ["size"]);
        assert_eq!(properties(&kinds[3]), ["size"]);
        let columns: Vec<usize> = kinds.iter().map(|k| k.columns.len()).collect();
        assert_eq!(columns, [0, 0, 1, 0]);
    }
}
