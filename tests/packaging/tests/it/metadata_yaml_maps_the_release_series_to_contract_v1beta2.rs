//! `metadata.yaml` parses strictly (every field known, nothing missing) as clusterctl's
//! `Metadata` v1alpha3, and maps the workspace version's release series to the v1beta2
//! contract. (clusterctl reading it is proven in the `clusterctl_generate_provider_*`
//! tests, which fail when the series does not match.)
use serde::Deserialize;

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct Metadata {
    api_version: String,
    kind: String,
    release_series: Vec<ReleaseSeries>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct ReleaseSeries {
    major: u32,
    minor: u32,
    contract: String,
}

fn workspace_version() -> (u32, u32) {
    let cargo = std::fs::read_to_string(packaging::repo_root().join("Cargo.toml")).unwrap();
    let line = cargo
        .lines()
        .find(|l| l.starts_with("version = "))
        .expect("workspace version");
    let v = line.trim_start_matches("version = ").trim_matches('"');
    let mut parts = v.split('.').map(|p| p.parse::<u32>().unwrap());
    (parts.next().unwrap(), parts.next().unwrap())
}

#[test]
fn metadata_yaml_parses_strictly_and_maps_the_workspace_release_series_to_v1beta2() {
    let text = std::fs::read_to_string(packaging::repo_root().join("metadata.yaml")).unwrap();
    let meta: Metadata = serde_yaml::from_str(&text).expect("metadata.yaml parses strictly");
    assert_eq!(meta.api_version, "clusterctl.cluster.x-k8s.io/v1alpha3");
    assert_eq!(meta.kind, "Metadata");
    assert!(!meta.release_series.is_empty());
    for s in &meta.release_series {
        assert_eq!(s.contract, "v1beta2", "series {}.{}", s.major, s.minor);
    }
    let (major, minor) = workspace_version();
    assert!(
        meta.release_series
            .iter()
            .any(|s| s.major == major && s.minor == minor),
        "no release series for the workspace version {major}.{minor}"
    );
    let mut series: Vec<_> = meta
        .release_series
        .iter()
        .map(|s| (s.major, s.minor))
        .collect();
    series.sort();
    series.dedup();
    assert_eq!(
        series.len(),
        meta.release_series.len(),
        "duplicate release series"
    );
}
