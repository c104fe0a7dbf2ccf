//! Turning a plugin file into a checked, compiled component: the file is a component,
//! its imports are all granted, it speaks a version of our WIT this host loads (the
//! current one, or 0.2 through `compat`), and its machine code is cached by content
//! hash and engine compatibility.
//!
//! Cached machine code runs unchecked in the host's process, so the cache is trusted
//! only as far as it proves itself: its directory and key file belong to this user and
//! no one else may write them, and every entry carries an HMAC (under the cache's own
//! key) of the plugin's digest, the engine and the code. Anything else is ignored and
//! compiled again.
use std::hash::{Hash, Hasher};
use std::io::{Read as _, Write as _};
use std::os::unix::fs::{MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

use ring::hmac;

use sha2::{Digest, Sha256};
use wasmtime::Engine;
use wasmtime::component::Component;
use wasmtime::component::types::ComponentItem;

use crate::error::LoadError;
use crate::wit::{WIT_COMPAT_VERSION, WIT_PACKAGE, WIT_VERSION, WitMajor};

/// Interfaces a plugin may import. WASI 0.2's cli, filesystem, random and sockets
/// interfaces are linked because language runtimes import them (Rust's standard
/// library the first three, the C library under Python all four), but they grant
/// nothing: no directories, no environment, no arguments, and no socket: creating one,
/// resolving a name or passing an address check is refused before the host opens
/// anything (see `state.rs`). The only way out is `wasi:http`, to the call's endpoints.
const GRANTED: &[&str] = &[
    "wasi:io/",
    "wasi:clocks/",
    "wasi:random/",
    "wasi:cli/",
    "wasi:filesystem/",
    "wasi:sockets/",
    "wasi:http/types",
    "wasi:http/outgoing-handler",
    "hyperplug:provider/log",
    "hyperplug:provider/blobs",
    "hyperplug:provider/claims",
    "hyperplug:provider/reservations",
    "hyperplug:provider/grants",
    "hyperplug:provider/types",
];

/// Read, check and compile a plugin file, using the precompiled cache when it can.
pub fn load_component(
    engine: &Engine,
    path: &Path,
    cache_dir: Option<&Path>,
) -> Result<(Component, String, WitMajor), LoadError> {
    let bytes = std::fs::read(path).map_err(|source| LoadError::Read {
        path: path.into(),
        source,
    })?;
    check_is_component(path, &bytes)?;
    let digest = hex::encode(Sha256::digest(&bytes));
    let component = compile_cached(engine, path, &bytes, &digest, cache_dir)?;
    let mut major = None;
    check_imports(engine, path, &component, &mut major)?;
    let major = check_exports(engine, path, &component, major)?;
    Ok((component, digest, major))
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
    let invalid = |e: wasmtime::Error| LoadError::Invalid {
        path: path.into(),
        detail: format!("{e:#}"),
    };
    let cache = cache_dir.and_then(|dir| match CodeCache::open(dir) {
        Ok(cache) => Some(cache),
        Err(why) => {
            tracing::warn!(cache = %dir.display(), %why, "not using the plugin compile cache");
            None
        }
    });
    let Some(cache) = cache else {
        return Component::new(engine, bytes).map_err(invalid);
    };
    let entry = cache.entry(digest, engine_hash(engine));
    if let Some(component) = cache.load(engine, &entry) {
        return Ok(component);
    }
    // One compile per entry at a time, across threads and processes sharing the cache
    // (test binaries, replicas on one volume): the others wait for its result instead of
    // compiling the same plugin too (tens of seconds of CPU each).
    let _compiling = cache.compiling(&entry);
    if let Some(component) = cache.load(engine, &entry) {
        return Ok(component);
    }
    let compiled = engine.precompile_component(bytes).map_err(invalid)?;
    if let Err(e) = cache.write(&entry, &compiled) {
        tracing::warn!(cache = %entry.path.display(), error = %e, "cannot cache compiled plugin");
    }
    // SAFETY: `compiled` was produced just now by this engine.
    unsafe { Component::deserialize(engine, &compiled) }.map_err(invalid)
}

fn engine_hash(engine: &Engine) -> u64 {
    let mut hasher = std::collections::hash_map::DefaultHasher::new();
    engine.precompile_compatibility_hash().hash(&mut hasher);
    hasher.finish()
}

/// How long a load waits for another thread's or process's compile of the same plugin
/// before compiling it too: a compile takes seconds to a minute on a busy machine, and
/// a stuck one must not stop this load.
const COMPILE_WAIT: std::time::Duration = std::time::Duration::from_secs(300);

/// A held compile lock. Dropped once the entry is written (or the compile failed), it
/// removes its file before unlocking: whoever waits on it finds the entry when it
/// looks again, and whoever comes later finds the entry before any lock, so the
/// directory keeps only entries.
struct CompileLock {
    path: PathBuf,
    _file: std::fs::File,
}

impl Drop for CompileLock {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.path);
    }
}

/// The on-disk cache of compiled plugins, with the key that authenticates its entries.
struct CodeCache {
    dir: PathBuf,
    key: hmac::Key,
}

/// One cached plugin: where it is and what its HMAC binds it to.
struct Entry {
    path: PathBuf,
    binding: Vec<u8>,
}

/// An entry's code as read, after the binding its HMAC covers.
struct CachedCode {
    signed: Vec<u8>,
    start: usize,
}

impl CachedCode {
    fn code(&self) -> &[u8] {
        &self.signed[self.start..]
    }
}

/// File of the cache's HMAC key, in the cache directory.
const KEY_FILE: &str = ".hmac-key";
/// What an entry's HMAC covers before the code: the format, the digest, the engine.
const ENTRY_DOMAIN: &str = "hyperplug compiled plugin v1";

impl CodeCache {
    /// The cache in `dir`, created if missing, if only this user can write it.
    fn open(dir: &Path) -> Result<CodeCache, String> {
        std::fs::create_dir_all(dir).map_err(|e| format!("cannot create it: {e}"))?;
        private(dir, 0o022)?;
        let key_path = dir.join(KEY_FILE);
        let key = match std::fs::read(&key_path) {
            Ok(key) => {
                private(&key_path, 0o077)?;
                key
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                let key: [u8; 32] = rand::random();
                let created = std::fs::OpenOptions::new()
                    .write(true)
                    .create_new(true)
                    .mode(0o600)
                    .open(&key_path)
                    .and_then(|mut f| f.write_all(&key));
                match created {
                    Ok(()) => key.to_vec(),
                    // Another process created it first: use theirs.
                    Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
                        private(&key_path, 0o077)?;
                        std::fs::read(&key_path).map_err(|e| format!("{KEY_FILE}: {e}"))?
                    }
                    Err(e) => return Err(format!("cannot create {KEY_FILE}: {e}")),
                }
            }
            Err(e) => return Err(format!("{KEY_FILE}: {e}")),
        };
        if key.len() < 32 {
            return Err(format!("{KEY_FILE} is shorter than 32 bytes"));
        }
        Ok(CodeCache {
            dir: dir.to_path_buf(),
            key: hmac::Key::new(hmac::HMAC_SHA256, &key),
        })
    }

    fn entry(&self, digest: &str, engine: u64) -> Entry {
        Entry {
            path: self.dir.join(format!("{digest}-{engine:016x}.cwasm")),
            binding: format!("{ENTRY_DOMAIN}\n{digest}\n{engine:016x}\n").into_bytes(),
        }
    }

    fn tag(&self, entry: &Entry, code: &[u8]) -> hmac::Tag {
        let mut ctx = hmac::Context::with_key(&self.key);
        ctx.update(&entry.binding);
        ctx.update(code);
        ctx.sign()
    }

    /// The component cached as `entry`, if it is there, authentic and usable.
    fn load(&self, engine: &Engine, entry: &Entry) -> Option<Component> {
        let code = self.read(entry)?;
        // SAFETY: `code` carries a valid HMAC under this cache's key, which only this
        // user can read: this host's `precompile_component` wrote it for exactly this
        // plugin digest and engine. wasmtime also checks the header before using it.
        match unsafe { Component::deserialize(engine, code.code()) } {
            Ok(component) => Some(component),
            Err(e) => {
                tracing::warn!(cache = %entry.path.display(), error = %e, "ignoring unusable cached plugin");
                None
            }
        }
    }

    /// The lock on compiling `entry` (an advisory lock on `<entry>.lock`, released when
    /// dropped or when its process ends), once no one else holds it or after
    /// [`COMPILE_WAIT`]; `None` (compile anyway) when the lock file cannot be opened.
    fn compiling(&self, entry: &Entry) -> Option<CompileLock> {
        let path = entry.path.with_extension("lock");
        let file = std::fs::OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(false)
            .mode(0o600)
            .open(&path)
            .inspect_err(|e| tracing::warn!(lock = %path.display(), error = %e, "compiling without the cache's lock"))
            .ok()?;
        let deadline = std::time::Instant::now() + COMPILE_WAIT;
        loop {
            match file.try_lock() {
                Ok(()) => return Some(CompileLock { path, _file: file }),
                Err(std::fs::TryLockError::WouldBlock) if std::time::Instant::now() < deadline => {
                    std::thread::sleep(std::time::Duration::from_millis(50));
                }
                Err(e) => {
                    tracing::warn!(lock = %path.display(), error = %e, "compiling without waiting for another compile of this plugin");
                    return None;
                }
            }
        }
    }

    /// The cached code of `entry`, if it is there and authentic. Read into one buffer
    /// after the HMAC's binding, the tag moved out in place: the code (megabytes) is
    /// never copied, where a copy for the HMAC and another to return it were the
    /// manager's heap peak on a small fleet.
    fn read(&self, entry: &Entry) -> Option<CachedCode> {
        // Read, not mmap: a file rewritten in place under a mapping would crash us.
        let mut signed = entry.binding.clone();
        std::fs::File::open(&entry.path)
            .and_then(|mut f| f.read_to_end(&mut signed))
            .ok()?;
        let start = entry.binding.len();
        let tag_len = hmac::HMAC_SHA256.digest_algorithm().output_len();
        if signed.len() < start + tag_len {
            tracing::warn!(cache = %entry.path.display(), "ignoring a cached plugin without its HMAC");
            return None;
        }
        let tag: Vec<u8> = signed.drain(start..start + tag_len).collect();
        // `verify` compares in constant time.
        if hmac::verify(&self.key, &signed, &tag).is_err() {
            tracing::warn!(cache = %entry.path.display(), "ignoring a cached plugin whose HMAC does not verify (not written by this host for this plugin)");
            return None;
        }
        Some(CachedCode { signed, start })
    }

    fn write(&self, entry: &Entry, code: &[u8]) -> std::io::Result<()> {
        let tag = self.tag(entry, code);
        let tmp = entry
            .path
            .with_extension(format!("tmp{}", std::process::id()));
        let mut file = std::fs::OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .mode(0o600)
            .open(&tmp)?;
        file.write_all(tag.as_ref())?;
        file.write_all(code)?;
        drop(file);
        std::fs::rename(tmp, &entry.path)
    }
}

/// `path` belongs to this user and no one in `forbidden` (mode bits) may write it: what
/// makes a cache directory trustworthy (also the cache of pulled plugins, in the host).
pub fn private(path: &Path, forbidden: u32) -> Result<(), String> {
    let meta = std::fs::symlink_metadata(path).map_err(|e| format!("{}: {e}", path.display()))?;
    // SAFETY: geteuid has no preconditions.
    let me = unsafe { libc::geteuid() };
    if meta.uid() != me {
        return Err(format!(
            "{} belongs to uid {}, not to this user ({me})",
            path.display(),
            meta.uid()
        ));
    }
    let mode = meta.permissions().mode();
    if mode & forbidden != 0 {
        return Err(format!(
            "{} has mode {:o}; others could change it",
            path.display(),
            mode & 0o777
        ));
    }
    Ok(())
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

/// Every import granted; `major` is the contract of its `hyperplug:provider` imports.
fn check_imports(
    engine: &Engine,
    path: &Path,
    component: &Component,
    major: &mut Option<WitMajor>,
) -> Result<(), LoadError> {
    let ty = component.component_type();
    for (name, _) in ty.imports(engine) {
        let (iface, version) = split_version(name);
        if iface.starts_with(WIT_PACKAGE) {
            *major = Some(same_major(path, *major, version)?);
            let newer = [
                "hyperplug:provider/reservations",
                "hyperplug:provider/grants",
            ];
            if *major == Some(WitMajor::V0_2) && newer.contains(&iface) {
                return Err(incompatible(path, version.unwrap_or("unversioned")));
            }
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

/// The contract `version` (of one of a plugin's `hyperplug:provider` interfaces)
/// belongs to, which must be that of the plugin's other ones (`so_far`).
fn same_major(
    path: &Path,
    so_far: Option<WitMajor>,
    version: Option<&str>,
) -> Result<WitMajor, LoadError> {
    let found = version.unwrap_or("unversioned");
    let major = if compatible(found, WIT_VERSION) {
        WitMajor::Current
    } else if compatible(found, WIT_COMPAT_VERSION) {
        WitMajor::V0_2
    } else {
        return Err(incompatible(path, found));
    };
    match so_far {
        Some(other) if other != major => Err(LoadError::Invalid {
            path: path.into(),
            detail: format!(
                "it mixes hyperplug:provider@{found} with interfaces of another version; build it against one"
            ),
        }),
        _ => Ok(major),
    }
}

fn incompatible(path: &Path, found: &str) -> LoadError {
    LoadError::IncompatibleWit {
        path: path.into(),
        found: found.into(),
        supported: format!(
            "{WIT_VERSION} (and still loads plugins of {WIT_PACKAGE}@{WIT_COMPAT_VERSION})"
        ),
    }
}

/// The plugin exports every interface its contract requires, all of one version.
fn check_exports(
    engine: &Engine,
    path: &Path,
    component: &Component,
    mut major: Option<WitMajor>,
) -> Result<WitMajor, LoadError> {
    let ty = component.component_type();
    let exports: Vec<(String, Option<String>)> = ty
        .exports(engine)
        .filter(|(_, item)| matches!(item.ty, ComponentItem::ComponentInstance(_)))
        .map(|(name, _)| {
            let (iface, version) = split_version(name);
            (iface.to_string(), version.map(str::to_string))
        })
        .collect();
    for (iface, version) in &exports {
        if iface.starts_with(WIT_PACKAGE) {
            major = Some(same_major(path, major, version.as_deref())?);
        }
    }
    let Some(major) = major else {
        return Err(LoadError::MissingExport {
            path: path.into(),
            export: format!("{WIT_PACKAGE}/identity"),
        });
    };
    for required in major.required_exports() {
        let want = format!("{WIT_PACKAGE}/{required}");
        if !exports.iter().any(|(iface, _)| *iface == want) {
            return Err(LoadError::MissingExport {
                path: path.into(),
                export: want,
            });
        }
    }
    Ok(major)
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
    fn this_host_loads_0_3_and_0_2_plugins_and_names_both_when_it_refuses_one() {
        let path = Path::new("x.wasm");
        for current in ["0.3.0", "0.3.1"] {
            assert_eq!(
                same_major(path, None, Some(current)).unwrap(),
                WitMajor::Current
            );
        }
        assert_eq!(
            same_major(path, None, Some("0.2.0")).unwrap(),
            WitMajor::V0_2
        );
        let mixed = same_major(path, Some(WitMajor::Current), Some("0.2.0")).unwrap_err();
        assert!(mixed.to_string().contains("mixes"), "{mixed}");
        let err = same_major(path, None, Some("0.9.0"))
            .unwrap_err()
            .to_string();
        for v in ["@0.9.0", "@0.3.1", "@0.2.0"] {
            assert!(err.contains(&format!("hyperplug:provider{v}")), "{err}");
        }
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
