//! The cache of pulled plugins, under one directory:
//!
//! - `sha256/<hex>.wasm`: the component of the manifest with digest `sha256:<hex>`, and
//!   `sha256/<hex>.layer`, the component's own digest. The component is hashed again
//!   each time it is used, so a changed file is noticed and pulled again.
//! - `tags/<registry>/<repository>/<tag>`: the digest the tag named when first pulled,
//!   for commands that run without a cluster (`hyperplug run` keeps its pins in a
//!   ConfigMap, `pins.rs`: the release's cache is an emptyDir).
//! - `verified/<hex>.<key fingerprint>`: the signature of that digest verified with
//!   that key, so a start without the registry needs no signature download.
//!
//! Like the compiled-plugin cache, it is trusted only as far as it is private: the
//! directory belongs to this user and no one else may write it.
use std::io::Write as _;
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

use sha2::{Digest, Sha256};

use super::FetchError;
use super::pull::Component;

pub struct Cache {
    dir: PathBuf,
}

impl Cache {
    pub fn open(dir: &Path) -> Result<Cache, FetchError> {
        let err = |detail: String| FetchError::Cache {
            path: dir.to_path_buf(),
            detail,
        };
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(dir)
            .map_err(|e| err(e.to_string()))?;
        // Others able to write here could replace a plugin after its checks.
        hyperplug_runtime::private(dir, 0o022).map_err(err)?;
        Ok(Cache { dir: dir.into() })
    }

    /// The cached component of manifest `digest`, if it is there and unchanged.
    pub fn component(&self, digest: &str) -> Result<Option<PathBuf>, FetchError> {
        let (wasm, layer) = self.component_paths(digest);
        let (Ok(bytes), Ok(want)) = (std::fs::read(&wasm), std::fs::read_to_string(&layer)) else {
            return Ok(None);
        };
        if sha256(&bytes) != want.trim() {
            tracing::warn!(path = %wasm.display(), "a cached plugin changed on disk; pulling it again");
            return Ok(None);
        }
        Ok(Some(wasm))
    }

    pub fn store_component(
        &self,
        digest: &str,
        component: &Component,
    ) -> Result<PathBuf, FetchError> {
        let (wasm, layer) = self.component_paths(digest);
        self.write(&wasm, &component.bytes)?;
        self.write(&layer, component.digest.as_bytes())?;
        Ok(wasm)
    }

    /// The digest `registry/repository:tag` was pinned to.
    pub fn pin(
        &self,
        registry: &str,
        repository: &str,
        tag: &str,
    ) -> Result<Option<String>, FetchError> {
        let path = self.pin_path(registry, repository, tag);
        match std::fs::read_to_string(&path) {
            Ok(text) if super::is_sha256(text.trim()) => Ok(Some(text.trim().to_string())),
            Ok(_) => Err(self.error(&path, "not a sha256 digest; remove the file to pin again")),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(self.error(&path, &e.to_string())),
        }
    }

    pub fn set_pin(
        &self,
        registry: &str,
        repository: &str,
        tag: &str,
        digest: &str,
    ) -> Result<(), FetchError> {
        self.write(&self.pin_path(registry, repository, tag), digest.as_bytes())
    }

    pub fn verified(&self, digest: &str, key: &str) -> bool {
        self.verified_path(digest, key).is_file()
    }

    pub fn mark_verified(&self, digest: &str, key: &str) -> Result<(), FetchError> {
        self.write(&self.verified_path(digest, key), b"")
    }

    fn component_paths(&self, digest: &str) -> (PathBuf, PathBuf) {
        let hex = hex_of(digest);
        let dir = self.dir.join("sha256");
        (
            dir.join(format!("{hex}.wasm")),
            dir.join(format!("{hex}.layer")),
        )
    }

    /// Registry and repository names are checked by the reference grammar (no `..`,
    /// no empty segment), so they are safe as path segments; a port's `:` is kept.
    fn pin_path(&self, registry: &str, repository: &str, tag: &str) -> PathBuf {
        self.dir
            .join("tags")
            .join(registry)
            .join(repository)
            .join(tag)
    }

    fn verified_path(&self, digest: &str, key: &str) -> PathBuf {
        self.dir
            .join("verified")
            .join(format!("{}.{key}", hex_of(digest)))
    }

    /// Write through a private temporary file and rename, so a reader never sees half a
    /// file and a crash leaves none.
    fn write(&self, path: &Path, bytes: &[u8]) -> Result<(), FetchError> {
        let dir = path.parent().unwrap_or(&self.dir);
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(dir)
            .map_err(|e| self.error(dir, &e.to_string()))?;
        let tmp = path.with_extension(format!("tmp.{}", std::process::id()));
        let written = std::fs::OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .mode(0o600)
            .open(&tmp)
            .and_then(|mut f| f.write_all(bytes).and_then(|()| f.sync_all()))
            .and_then(|()| std::fs::rename(&tmp, path));
        written.map_err(|e| {
            let _ = std::fs::remove_file(&tmp);
            self.error(path, &e.to_string())
        })
    }

    fn error(&self, path: &Path, detail: &str) -> FetchError {
        FetchError::Cache {
            path: path.to_path_buf(),
            detail: detail.to_string(),
        }
    }
}

fn hex_of(digest: &str) -> &str {
    digest.strip_prefix("sha256:").unwrap_or(digest)
}

pub fn sha256(bytes: &[u8]) -> String {
    format!("sha256:{}", hex::encode(Sha256::digest(bytes)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    const DIGEST: &str = "sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";

    #[test]
    fn a_component_changed_in_the_cache_is_not_served() {
        let dir = tempfile::tempdir().unwrap();
        let cache = Cache::open(dir.path()).unwrap();
        let bytes = b"\0asm\x0d\0\x01\0".to_vec();
        let component = Component {
            digest: sha256(&bytes),
            bytes,
        };
        let path = cache.store_component(DIGEST, &component).unwrap();
        assert_eq!(cache.component(DIGEST).unwrap(), Some(path.clone()));
        std::fs::write(&path, b"\0asm\x0d\0\x01\0changed").unwrap();
        assert_eq!(cache.component(DIGEST).unwrap(), None);
    }

    #[test]
    fn pins_and_checks_are_kept_per_tag_and_key() {
        let dir = tempfile::tempdir().unwrap();
        let cache = Cache::open(dir.path()).unwrap();
        assert_eq!(cache.pin("127.0.0.1:5000", "team/p", "1.0").unwrap(), None);
        cache
            .set_pin("127.0.0.1:5000", "team/p", "1.0", DIGEST)
            .unwrap();
        assert_eq!(
            cache
                .pin("127.0.0.1:5000", "team/p", "1.0")
                .unwrap()
                .as_deref(),
            Some(DIGEST)
        );
        assert_eq!(cache.pin("127.0.0.1:5000", "team/p", "1.1").unwrap(), None);
        assert!(!cache.verified(DIGEST, "k1"));
        cache.mark_verified(DIGEST, "k1").unwrap();
        assert!(cache.verified(DIGEST, "k1") && !cache.verified(DIGEST, "k2"));
    }

    #[test]
    fn a_cache_others_may_write_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o777)).unwrap();
        let err = Cache::open(dir.path()).err().unwrap().to_string();
        assert!(err.contains("others could change it"), "{err}");
    }
}
