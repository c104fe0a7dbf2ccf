//! Turning a plugin file into a checked, compiled component: the file is a component,
//! its imports are all granted, it speaks a compatible version of our WIT, and its
//! machine code is cached by content hash and engine compatibility.
use std::hash::{Hash, Hasher};
use std::path::{Path, PathBuf};

use sha2::{Digest, Sha256};
use wasmtime::Engine;
use wasmtime::component::Component;
use wasmtime::component::types::ComponentItem;

use super::error::LoadError;

/// The version of `wit/` this host was built against.
pub const WIT_PACKAGE: &str = "hyperplug:provider";
pub const WIT_VERSION: &str = "0.2.0";

/// Interfaces a plugin may import. WASI 0.2's cli, filesystem and random interfaces
/// are linked because Rust's standard library imports them, but they grant nothing:
/// no directories, no environment, no arguments (see `state.rs`). Sockets are not
/// linked at all.
const GRANTED: &[&str] = &[
    "wasi:io/",
    "wasi:clocks/",
    "wasi:random/",
    "wasi:cli/",
    "wasi:filesystem/",
    "wasi:http/types",
    "wasi:http/outgoing-handler",
    "hyperplug:provider/log",
    "hyperplug:provider/blobs",
    "hyperplug:provider/claims",
    "hyperplug:provider/types",
];

/// Interfaces a plugin must export.
const REQUIRED_EXPORTS: &[&str] = &["identity", "cluster", "machine"];

/// Read, check and compile a plugin file, using the precompiled cache when it can.
pub fn load_component(
    engine: &Engine,
    path: &Path,
    cache_dir: Option<&Path>,
) -> Result<(Component, String), LoadError> {
    let bytes = std::fs::read(path).map_err(|source| LoadError::Read {
        path: path.into(),
        source,
    })?;
    check_is_component(path, &bytes)?;
    let digest = hex::encode(Sha256::digest(&bytes));
    let component = compile_cached(engine, path, &bytes, &digest, cache_dir)?;
    check_imports(engine, path, &component)?;
    check_exports(engine, path, &component)?;
    Ok((component, digest))
}

fn check_is_component(path: &Path, bytes: &[u8]) -> Result<(), LoadError> {
    let not = |detail: &str| LoadError::NotAComponent {
        path: path.into(),
        detail: detail.into(),
    };
    if bytes.len() < 8 || &bytes[0..4] != b"\0asm" {
        return Err(not("no WebAssembly header"));
    }
    // Bytes 4..8: version and layer. A core module is version 1, layer 0; a component
    // is layer 1.
    match (
        bytes[4..6] == [1, 0],
        bytes[6..8] == [0, 0],
        bytes[6..8] == [1, 0],
    ) {
        (true, true, _) => Err(not("it is a core WebAssembly module")),
        (_, _, true) => Ok(()),
        _ => Err(not("unknown WebAssembly version or layer")),
    }
}

fn compile_cached(
    engine: &Engine,
    path: &Path,
    bytes: &[u8],
    digest: &str,
    cache_dir: Option<&Path>,
) -> Result<Component, LoadError> {
    let cached =
        cache_dir.map(|dir| dir.join(format!("{digest}-{:016x}.cwasm", engine_hash(engine))));
    if let Some(cached) = &cached
        && cached.exists()
    {
        // Read, not mmap: a file rewritten in place under a mapping would crash us.
        let loaded = std::fs::read(cached)
            .map_err(wasmtime::Error::from)
            .and_then(|bytes| {
                // SAFETY: the file was written by `precompile_component` of an engine with
                // the same compatibility hash, into our own cache directory, under its
                // content hash; wasmtime also checks the header before using it.
                unsafe { Component::deserialize(engine, &bytes) }
            });
        match loaded {
            Ok(component) => return Ok(component),
            Err(e) => {
                tracing::warn!(cache = %cached.display(), error = %e, "ignoring unusable cached plugin")
            }
        }
    }
    let invalid = |e: wasmtime::Error| LoadError::Invalid {
        path: path.into(),
        detail: format!("{e:#}"),
    };
    let Some(cached) = cached else {
        return Component::new(engine, bytes).map_err(invalid);
    };
    let compiled = engine.precompile_component(bytes).map_err(invalid)?;
    if let Err(e) = write_atomically(&cached, &compiled) {
        tracing::warn!(cache = %cached.display(), error = %e, "cannot cache compiled plugin");
    }
    // SAFETY: `compiled` was produced just now by this engine.
    unsafe { Component::deserialize(engine, &compiled) }.map_err(invalid)
}

fn engine_hash(engine: &Engine) -> u64 {
    let mut hasher = std::collections::hash_map::DefaultHasher::new();
    engine.precompile_compatibility_hash().hash(&mut hasher);
    hasher.finish()
}

fn write_atomically(path: &PathBuf, data: &[u8]) -> std::io::Result<()> {
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir)?;
    }
    let tmp = path.with_extension(format!("tmp{}", std::process::id()));
    std::fs::write(&tmp, data)?;
    std::fs::rename(tmp, path)
}

/// `name@1.2.3` → (`name`, `1.2.3`).
fn split_version(name: &str) -> (&str, Option<&str>) {
    match name.rsplit_once('@') {
        Some((n, v)) => (n, Some(v)),
        None => (name, None),
    }
}

/// Semver compatibility as Cargo reads it: same major, or same minor while major is 0.
fn compatible(found: &str, supported: &str) -> bool {
    let parts = |v: &str| -> Vec<u64> {
        v.split(['.', '-', '+'])
            .take(3)
            .map(|p| p.parse().unwrap_or(u64::MAX))
            .collect()
    };
    let (f, s) = (parts(found), parts(supported));
    if f.len() < 2 || s.len() < 2 {
        return false;
    }
    if s[0] == 0 {
        f[0] == 0 && f[1] == s[1]
    } else {
        f[0] == s[0]
    }
}

fn check_imports(engine: &Engine, path: &Path, component: &Component) -> Result<(), LoadError> {
    let ty = component.component_type();
    for (name, _) in ty.imports(engine) {
        let (iface, version) = split_version(name);
        if iface.starts_with(WIT_PACKAGE) {
            check_wit_version(path, version)?;
        } else if iface.starts_with("wasi:") && !version.is_some_and(|v| compatible(v, "0.2.0")) {
            return Err(LoadError::ImportNotGranted {
                path: path.into(),
                import: name.into(),
                granted: "WASI 0.2.x only".into(),
            });
        }
        if !GRANTED.iter().any(|g| iface.starts_with(g)) {
            return Err(LoadError::ImportNotGranted {
                path: path.into(),
                import: name.into(),
                granted: GRANTED.join(", "),
            });
        }
    }
    Ok(())
}

fn check_wit_version(path: &Path, version: Option<&str>) -> Result<(), LoadError> {
    let found = version.unwrap_or("unversioned");
    if compatible(found, WIT_VERSION) {
        Ok(())
    } else {
        Err(LoadError::IncompatibleWit {
            path: path.into(),
            found: found.into(),
            supported: WIT_VERSION.into(),
        })
    }
}

fn check_exports(engine: &Engine, path: &Path, component: &Component) -> Result<(), LoadError> {
    let ty = component.component_type();
    let exports: Vec<(String, Option<String>)> = ty
        .exports(engine)
        .filter(|(_, item)| matches!(item.ty, ComponentItem::ComponentInstance(_)))
        .map(|(name, _)| {
            let (iface, version) = split_version(name);
            (iface.to_string(), version.map(str::to_string))
        })
        .collect();
    for required in REQUIRED_EXPORTS {
        let want = format!("{WIT_PACKAGE}/{required}");
        match exports.iter().find(|(iface, _)| *iface == want) {
            Some((_, version)) => check_wit_version(path, version.as_deref())?,
            None => {
                return Err(LoadError::MissingExport {
                    path: path.into(),
                    export: want,
                });
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn versions_are_compatible_within_a_zero_minor() {
        assert!(compatible("0.1.0", "0.1.0"));
        assert!(compatible("0.1.7", "0.1.0"));
        assert!(!compatible("0.2.0", "0.1.0"));
        assert!(!compatible("1.0.0", "0.1.0"));
        assert!(compatible("1.4.0", "1.0.0"));
        assert!(!compatible("2.0.0", "1.0.0"));
        assert!(!compatible("unversioned", "0.1.0"));
        // A plugin of the previous contract (0.1) is refused by a 0.2 host.
        assert!(!compatible("0.1.0", "0.2.0"));
    }

    #[test]
    fn a_core_module_is_not_a_component() {
        let core = b"\0asm\x01\0\0\0";
        let err = check_is_component(Path::new("x.wasm"), core).unwrap_err();
        assert!(err.to_string().contains("core WebAssembly module"), "{err}");
    }

    #[test]
    fn text_is_not_a_component() {
        let err = check_is_component(Path::new("x.wasm"), b"hello world").unwrap_err();
        assert!(err.to_string().contains("no WebAssembly header"), "{err}");
    }
}
