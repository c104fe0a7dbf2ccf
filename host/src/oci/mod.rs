//! Plugins named by reference (`oci://REGISTRY/REPO:TAG` or `oci://REGISTRY/REPO@sha256:…`):
//! the fetcher. It turns a reference into a local component file the loader reads like
//! any other: the tag is resolved to a digest and pinned, the component is pulled once
//! into a cache keyed by that digest, and its cosign signature is checked against the
//! operator's key before anything is loaded. Everything after this module sees a file
//! and a digest; nothing here knows what a plugin does.
//!
//! - `pull`: the registry (OCI distribution API, through `oci-client`).
//! - `cache`: the on-disk cache (components by digest, signature checks done, and the
//!   tag pins of commands that run without a cluster).
//! - `pins`: where tag pins are kept (`hyperplug run`: a ConfigMap, across restarts).
//! - `signature`: the signature policy (cosign key pairs, through `sigstore`).
//! - `auth`: registry credentials (a Docker config file).
mod auth;
mod cache;
mod error;
mod pins;
mod pull;
mod signature;

use std::fmt;
use std::path::{Path, PathBuf};
use std::str::FromStr;

pub use error::{FetchError, SignatureCheck};
pub use pins::{ConfigMapPins, DEFAULT_PINS_CONFIGMAP, Pins};
pub use signature::SignatureStatus;

/// Where a plugin comes from: a file, or an OCI artifact in a registry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PluginSource {
    File(PathBuf),
    Oci(OciRef),
}

/// An `oci://` reference as the user wrote it, parsed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OciRef {
    reference: oci_client::Reference,
}

const SCHEME: &str = "oci://";

impl FromStr for PluginSource {
    type Err = String;

    fn from_str(value: &str) -> Result<Self, String> {
        let Some(rest) = value.strip_prefix(SCHEME) else {
            if value.contains("://") {
                return Err(format!(
                    "`{value}` is neither a file nor an oci:// reference (e.g. oci://registry.example/team/plugin:1.0)"
                ));
            }
            return Ok(PluginSource::File(PathBuf::from(value)));
        };
        let reference = oci_client::Reference::from_str(rest).map_err(|e| {
            format!("`{value}` is not an OCI reference ({e}); write oci://REGISTRY/REPOSITORY:TAG or oci://REGISTRY/REPOSITORY@sha256:DIGEST")
        })?;
        // Without a registry the parser would assume Docker Hub; a plugin's origin is
        // never guessed.
        let first = rest.split('/').next().unwrap_or_default();
        if reference.registry() != first {
            return Err(format!(
                "`{value}` names no registry; write oci://REGISTRY/REPOSITORY:TAG (e.g. oci://ghcr.io/team/plugin:1.0)"
            ));
        }
        if let Some(digest) = reference.digest()
            && !is_sha256(digest)
        {
            return Err(format!(
                "`{value}`: the digest must be sha256:<64 hex digits>, found `{digest}`"
            ));
        }
        Ok(PluginSource::Oci(OciRef { reference }))
    }
}

impl fmt::Display for PluginSource {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            PluginSource::File(path) => write!(f, "{}", path.display()),
            PluginSource::Oci(r) => write!(f, "{r}"),
        }
    }
}

impl fmt::Display for OciRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{SCHEME}{}", self.reference.whole())
    }
}

impl OciRef {
    fn registry(&self) -> &str {
        self.reference.registry()
    }
    fn repository(&self) -> &str {
        self.reference.repository()
    }
    /// The tag, when the reference names one and no digest.
    fn tag_only(&self) -> Option<&str> {
        match self.reference.digest() {
            Some(_) => None,
            None => Some(self.reference.tag().unwrap_or("latest")),
        }
    }
    /// The same repository at `digest`.
    fn at(&self, digest: &str) -> oci_client::Reference {
        oci_client::Reference::with_digest(
            self.registry().to_string(),
            self.repository().to_string(),
            digest.to_string(),
        )
    }
}

pub(crate) fn is_sha256(digest: &str) -> bool {
    digest.strip_prefix("sha256:").is_some_and(|hex| {
        hex.len() == 64
            && hex
                .bytes()
                .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
    })
}

/// How plugins named by reference are fetched and checked (flags of every subcommand
/// that loads plugins).
#[derive(Debug, Clone, Default, clap::Args)]
pub struct FetchArgs {
    /// Public key (PEM, as `cosign generate-key-pair` writes cosign.pub) that every
    /// plugin must be signed with. Set, an oci:// plugin loads only with a cosign
    /// signature of its digest by this key, and a plugin file is refused (a file carries
    /// no signature). Unset, signatures are not checked.
    #[arg(long, value_name = "PEM", env = "HYPERPLUG_PLUGIN_VERIFY_KEY")]
    pub plugin_verify_key: Option<PathBuf>,
    /// Load an oci:// tag even when it now names another digest than the one pinned
    /// when it was first pulled (and pin the new one). Without it, a moved tag is
    /// refused: name the digest (oci://…@sha256:…) to take the new version.
    #[arg(long)]
    pub plugin_accept_new_digest: bool,
    /// A registry (HOST[:PORT]) reached over plain HTTP instead of HTTPS, e.g. a registry
    /// on loopback; repeat for several.
    #[arg(long = "plugin-plain-http", value_name = "REGISTRY")]
    pub plugin_plain_http: Vec<String>,
    /// Registry credentials: a Docker config file (`{"auths": {"REGISTRY": {"auth":
    /// base64(USER:PASSWORD)}}}`, as `docker login` or `oras login` write it, or a
    /// mounted `kubernetes.io/dockerconfigjson` Secret's `.dockerconfigjson`). Registries
    /// without an entry are pulled from anonymously.
    #[arg(long, value_name = "FILE", env = "HYPERPLUG_PLUGIN_REGISTRY_AUTH")]
    pub plugin_registry_auth: Option<PathBuf>,
    /// Directory of pulled plugins (by digest) and signature checks, and of tag pins
    /// for every subcommand but `run` (which keeps them in --plugin-pins-configmap).
    /// Defaults to $XDG_CACHE_HOME/hyperplug/oci or ~/.cache/hyperplug/oci.
    #[arg(long, value_name = "DIR", env = "HYPERPLUG_OCI_CACHE")]
    pub plugin_oci_cache: Option<PathBuf>,
}

/// A plugin ready to load: its file, and for a pulled one, where it came from.
#[derive(Debug, Clone)]
pub struct Fetched {
    pub path: PathBuf,
    /// `oci://…` as given, for pulled plugins.
    pub reference: Option<String>,
    /// The manifest digest a pulled plugin was loaded at.
    pub digest: Option<String>,
    pub signature: SignatureStatus,
}

/// Make `source` a local file, pulling and checking it if it is a reference; a tag's
/// pin is read from and kept in `pins`.
pub async fn fetch(
    source: &PluginSource,
    args: &FetchArgs,
    pins: &Pins,
) -> Result<Fetched, FetchError> {
    let key = match &args.plugin_verify_key {
        Some(path) => Some(signature::Key::read(path)?),
        None => None,
    };
    let oci = match source {
        PluginSource::File(path) => {
            if let Some(key) = key {
                return Err(FetchError::FileNotSigned {
                    path: path.clone(),
                    key: key.path().to_path_buf(),
                });
            }
            return Ok(Fetched {
                path: path.clone(),
                reference: None,
                digest: None,
                signature: SignatureStatus::NotChecked,
            });
        }
        PluginSource::Oci(oci) => oci,
    };
    let cache = cache::Cache::open(&cache_dir(args)?)?;
    let credentials = match &args.plugin_registry_auth {
        Some(path) => auth::for_registry(path, oci.registry())?,
        None => None,
    };
    let registry = pull::Registry::new(&args.plugin_plain_http, credentials);
    let digest = resolve(oci, &registry, &cache, pins, args.plugin_accept_new_digest).await?;
    let path = match cache.component(&digest)? {
        Some(path) => path,
        None => {
            let component = registry.pull_component(oci, &digest).await?;
            cache.store_component(&digest, &component)?
        }
    };
    let signature = match &key {
        None => SignatureStatus::NotChecked,
        Some(key) if cache.verified(&digest, key.fingerprint()) => key.status(),
        Some(key) => {
            signature::verify(&registry, oci, &digest, key).await?;
            cache.mark_verified(&digest, key.fingerprint())?;
            key.status()
        }
    };
    tracing::info!(reference = %oci, %digest, %signature, path = %path.display(), "plugin fetched");
    Ok(Fetched {
        path,
        reference: Some(oci.to_string()),
        digest: Some(digest),
        signature,
    })
}

/// The digest to load `oci` at: the one it names, or its tag's, pinned the first time
/// and held to after that. Offline, a pinned tag is served from the pin.
async fn resolve(
    oci: &OciRef,
    registry: &pull::Registry,
    cache: &cache::Cache,
    pins: &Pins,
    accept_new: bool,
) -> Result<String, FetchError> {
    let Some(tag) = oci.tag_only() else {
        let digest = oci.reference.digest().unwrap_or_default();
        return Ok(digest.to_string());
    };
    let mut pinned = pins.get(cache, oci, tag).await?;
    let now = match registry.digest_of(oci).await {
        Ok(now) => now,
        Err(FetchError::Unreachable { detail, .. }) if pinned.is_some() => {
            let pinned = pinned.unwrap_or_default();
            tracing::warn!(reference = %oci, %pinned, %detail, "registry unreachable; loading the digest pinned for this tag");
            return Ok(pinned);
        }
        Err(e) => return Err(e),
    };
    // A pin written by another replica since it was read is judged like the first; a
    // write lost to another writer is tried again after a fresh read.
    for _ in 0..PIN_WRITES {
        match pinned {
            Some(pinned) if pinned == now => return Ok(now),
            Some(pinned) if !accept_new => {
                return Err(FetchError::TagMoved {
                    reference: oci.to_string(),
                    pinned,
                    now,
                });
            }
            _ => {}
        }
        match pins.set(cache, oci, tag, pinned.as_deref(), &now).await? {
            pins::Set::Written => return Ok(now),
            pins::Set::Changed(current) => pinned = current,
            pins::Set::Lost => {}
        }
    }
    Err(FetchError::Pins {
        reference: oci.to_string(),
        detail: format!(
            "{PIN_WRITES} writes of the pin in a row lost to other writers (other managers pulling this tag with --plugin-accept-new-digest?)"
        ),
    })
}

/// Tries at writing a tag's pin before giving up, the one bound on its retries: a try
/// lost to another writer (who pinned this tag or another since the pins were read) or
/// finding the pin changed is followed by one that reads the pins afresh. Replicas
/// starting together settle in a try or two.
const PIN_WRITES: usize = 5;

/// `--plugin-oci-cache`, or the default beside the compiled-plugin cache.
fn cache_dir(args: &FetchArgs) -> Result<PathBuf, FetchError> {
    if let Some(dir) = &args.plugin_oci_cache {
        return Ok(dir.clone());
    }
    let base = std::env::var_os("XDG_CACHE_HOME")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| Path::new(&h).join(".cache")))
        .ok_or(FetchError::NoCacheDir)?;
    Ok(base.join("hyperplug").join("oci"))
}

#[cfg(test)]
mod tests {
    use super::*;

    const DIGEST: &str = "sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";

    #[test]
    fn a_path_is_a_file_and_oci_names_registry_repository_and_tag_or_digest() {
        assert_eq!(
            "plugins/example.wasm".parse::<PluginSource>(),
            Ok(PluginSource::File("plugins/example.wasm".into()))
        );
        let PluginSource::Oci(r) = "oci://127.0.0.1:5000/team/plugin:0.3.0"
            .parse::<PluginSource>()
            .unwrap()
        else {
            panic!("not oci")
        };
        assert_eq!(
            (r.registry(), r.repository(), r.tag_only()),
            ("127.0.0.1:5000", "team/plugin", Some("0.3.0"))
        );
        let PluginSource::Oci(r) = format!("oci://ghcr.io/team/plugin@{DIGEST}")
            .parse::<PluginSource>()
            .unwrap()
        else {
            panic!("not oci")
        };
        assert_eq!(r.tag_only(), None);
        assert_eq!(r.to_string(), format!("oci://ghcr.io/team/plugin@{DIGEST}"));
    }

    #[test]
    fn a_reference_without_registry_or_with_a_bad_digest_is_refused_saying_what_to_write() {
        let err = "oci://plugin:1.0".parse::<PluginSource>().unwrap_err();
        assert!(err.contains("names no registry"), "{err}");
        let err = "oci://ghcr.io/team/p@sha256:abc"
            .parse::<PluginSource>()
            .unwrap_err();
        assert!(
            err.contains("not an OCI reference") || err.contains("digest"),
            "{err}"
        );
        let err = "https://ghcr.io/team/p"
            .parse::<PluginSource>()
            .unwrap_err();
        assert!(err.contains("oci://"), "{err}");
    }
}
