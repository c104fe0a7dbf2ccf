//! The signature policy: a pulled plugin loads only if a cosign signature of its digest,
//! made with the operator's key pair, is in the registry. The signatures are read and
//! checked by the `sigstore` crate, in both layouts cosign writes (the
//! `sha256-<digest>.sig` tag, and bundles attached as OCI referrers).
use std::fmt;
use std::path::{Path, PathBuf};

use sha2::{Digest, Sha256};
use sigstore::cosign::verification_constraint::{PublicKeyVerifier, VerificationConstraintVec};
use sigstore::cosign::{ClientBuilder, CosignCapabilities as _, verify_constraints};
use sigstore::registry::{Auth, ClientConfig, ClientProtocol, OciReference};

use super::pull::Registry;
use super::{FetchError, OciRef, SignatureCheck};

const READ_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(60);

/// What is known of a loaded plugin's signature.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SignatureStatus {
    /// No key was given, so nothing was checked.
    NotChecked,
    /// Signed by the key with this fingerprint (sha256 of its PEM, 16 hex digits).
    Verified { key: String },
}

impl fmt::Display for SignatureStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SignatureStatus::NotChecked => write!(f, "not checked (no --plugin-verify-key)"),
            SignatureStatus::Verified { key } => write!(f, "verified (cosign, key {key})"),
        }
    }
}

/// The operator's public key, read and parsed once.
pub struct Key {
    path: PathBuf,
    pem: Vec<u8>,
    fingerprint: String,
}

impl Key {
    pub fn read(path: &Path) -> Result<Key, FetchError> {
        let err = |detail: String| FetchError::Key {
            path: path.into(),
            detail,
        };
        let pem = std::fs::read(path).map_err(|e| err(e.to_string()))?;
        // Parsed here so a wrong file fails at start, not at the first pull.
        PublicKeyVerifier::try_from(&pem)
            .map_err(|e| err(format!("not a public key cosign signs for ({e})")))?;
        let fingerprint = hex::encode(&Sha256::digest(&pem)[..8]);
        Ok(Key {
            path: path.into(),
            pem,
            fingerprint,
        })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    pub fn fingerprint(&self) -> &str {
        &self.fingerprint
    }

    pub fn status(&self) -> SignatureStatus {
        SignatureStatus::Verified {
            key: self.fingerprint.clone(),
        }
    }
}

/// A signature of `digest` (the manifest `oci` was resolved to) by `key` is in the
/// registry, or the error names the check that failed.
pub async fn verify(
    registry: &Registry,
    oci: &OciRef,
    digest: &str,
    key: &Key,
) -> Result<(), FetchError> {
    let failed = |check: SignatureCheck, detail: String| FetchError::Signature {
        reference: oci.to_string(),
        digest: digest.into(),
        check,
        detail,
    };
    let config = ClientConfig {
        protocol: ClientProtocol::HttpsExcept(registry.plain_http().to_vec()),
        ..ClientConfig::default()
    };
    let mut client = ClientBuilder::default()
        .with_oci_client_config(config)
        .build()
        .map_err(|e| failed(SignatureCheck::Unreadable, e.to_string()))?;
    let image: OciReference = format!("{}/{}@{digest}", oci.registry(), oci.repository())
        .parse()
        .map_err(|e| failed(SignatureCheck::Unreadable, format!("{e}")))?;
    let auth = match registry.credentials() {
        Some(b) => Auth::Basic(b.username.clone(), b.password.clone()),
        None => Auth::Anonymous,
    };
    // The signature client has no timeouts of its own; a registry that hangs fails here.
    let layers = tokio::time::timeout(READ_TIMEOUT, client.trusted_signature_layers(&auth, &image))
        .await
        .map_err(|_| {
            failed(
                SignatureCheck::Unreadable,
                format!("no answer within {READ_TIMEOUT:?}"),
            )
        })?
        .map_err(|e| failed(SignatureCheck::Unreadable, e.to_string()))?;
    // The crate checks each signed payload names this digest; checked again here
    // because the whole policy rests on it.
    let layers: Vec<_> = layers
        .into_iter()
        .filter(|l| l.simple_signing.critical.image.docker_manifest_digest == digest)
        .collect();
    if layers.is_empty() {
        return Err(failed(
            SignatureCheck::Unsigned,
            format!(
                "no cosign signature of this digest in {}/{}; sign it with `cosign sign --key cosign.key {}/{}@{digest}`",
                oci.registry(),
                oci.repository(),
                oci.registry(),
                oci.repository()
            ),
        ));
    }
    // A signature names the repository it was made for (cosign's `docker-reference`):
    // one copied next to the same digest in another repository does not count there.
    let repository = format!("{}/{}", oci.registry(), oci.repository());
    let (here, elsewhere): (Vec<_>, Vec<_>) = layers.into_iter().partition(|l| {
        same_repository(
            &l.simple_signing.critical.identity.docker_reference,
            &repository,
        )
    });
    if here.is_empty() {
        let named: Vec<String> = elsewhere
            .iter()
            .map(|l| l.simple_signing.critical.identity.docker_reference.clone())
            .collect();
        return Err(failed(
            SignatureCheck::OtherRepository,
            format!(
                "the signatures of this digest were made for {}, not {repository}; sign it where it is loaded from",
                named.join(", ")
            ),
        ));
    }
    let layers = here;
    let verifier = PublicKeyVerifier::try_from(&key.pem)
        .map_err(|e| failed(SignatureCheck::WrongKey, e.to_string()))?;
    let constraints: VerificationConstraintVec = vec![Box::new(verifier)];
    verify_constraints(&layers, constraints.iter()).map_err(|_| {
        failed(
            SignatureCheck::WrongKey,
            format!(
                "{} signature(s) found, none made with the key {} ({})",
                layers.len(),
                key.path.display(),
                key.fingerprint
            ),
        )
    })
}

/// Whether a signature's `docker-reference` names `repository` (`registry/path`):
/// equal, or equal once Docker Hub's spellings are made one and a tag is dropped.
fn same_repository(signed: &str, repository: &str) -> bool {
    let plain = |r: &str| -> String {
        let r = r.split('@').next().unwrap_or(r);
        // A tag follows the last `:` after the last `/` (a registry's port comes before).
        let r = match r.rsplit_once('/') {
            Some((head, last)) => match last.split_once(':') {
                Some((name, _tag)) => format!("{head}/{name}"),
                None => r.to_string(),
            },
            None => r.to_string(),
        };
        r.strip_prefix("docker.io/")
            .map(|rest| format!("index.docker.io/{rest}"))
            .unwrap_or(r)
    };
    plain(signed) == plain(repository)
}

#[cfg(test)]
mod tests {
    use super::same_repository;

    #[test]
    fn a_signature_counts_only_for_the_repository_it_names() {
        let here = "127.0.0.1:5000/team/proxmox";
        assert!(same_repository(here, here));
        assert!(same_repository("127.0.0.1:5000/team/proxmox:0.3.1", here));
        assert!(same_repository(
            "127.0.0.1:5000/team/proxmox@sha256:ab",
            here
        ));
        assert!(!same_repository("127.0.0.1:5000/other/proxmox", here));
        assert!(!same_repository("127.0.0.1:5001/team/proxmox", here));
        assert!(same_repository(
            "docker.io/acme/plugin",
            "index.docker.io/acme/plugin"
        ));
    }
}
