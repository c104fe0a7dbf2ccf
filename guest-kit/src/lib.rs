//! Shared by hyperplug's plugins (wasm32-wasip2 components): the one HTTP helper over
//! the host's `wasi:http/outgoing-handler`, CRD-ready schemas of spec types, and spec
//! parsing that names the offending field. Nothing here knows any infrastructure.
pub mod http;
pub mod schema;

/// Parse a spec, naming the field that does not fit: `Err((field, message))`, with
/// `field` a path under `root` (e.g. `spec.network.bridge`).
pub fn parse_spec<T: serde::de::DeserializeOwned>(
    json: &str,
    root: &str,
) -> Result<T, (String, String)> {
    let de = &mut serde_json::Deserializer::from_str(json);
    serde_path_to_error::deserialize(de).map_err(|e| {
        let path = e.path().to_string();
        let field = if path == "." || path.is_empty() {
            root.to_string()
        } else {
            format!("{root}.{path}")
        };
        (field, e.into_inner().to_string())
    })
}

/// FNV-1a: a stable, non-cryptographic spread (VMID offsets, inventory starting
/// points, multipart boundaries) that is the same in every plugin and every build.
pub fn fnv1a(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |h, b| {
        (h ^ u64::from(*b)).wrapping_mul(0x0000_0100_0000_01b3)
    })
}
