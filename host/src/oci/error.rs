//! Why a plugin named by reference was not loaded. Each error names the reference and
//! the check that failed, and says what to do.
use std::path::PathBuf;

/// Which part of the signature policy refused an artifact.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SignatureCheck {
    /// No cosign signature of the digest in the registry.
    Unsigned,
    /// Signatures exist, none verifies with the key.
    WrongKey,
    /// The signatures could not be read from the registry.
    Unreadable,
    /// Signed by the key, but for another repository (a signature copied next to a
    /// plugin it was not made for).
    OtherRepository,
}

impl SignatureCheck {
    pub fn name(self) -> &'static str {
        match self {
            SignatureCheck::Unsigned => "unsigned",
            SignatureCheck::WrongKey => "not signed by the key",
            SignatureCheck::Unreadable => "signatures unreadable",
            SignatureCheck::OtherRepository => "signed for another repository",
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum FetchError {
    #[error(
        "plugin file {path}: --plugin-verify-key {key} is set and a file carries no signature; push it to a registry, sign it with cosign and name it oci://…"
    )]
    FileNotSigned { path: PathBuf, key: PathBuf },
    #[error("--plugin-verify-key {path}: {detail}")]
    Key { path: PathBuf, detail: String },
    #[error("--plugin-registry-auth {path}: {detail}")]
    Auth { path: PathBuf, detail: String },
    #[error(
        "no directory for pulled plugins: neither HOME nor XDG_CACHE_HOME is set; pass --plugin-oci-cache"
    )]
    NoCacheDir,
    #[error("plugin cache {path}: {detail}")]
    Cache { path: PathBuf, detail: String },
    #[error(
        "{reference}: registry unreachable ({detail}), and no digest of it is in the cache to load offline"
    )]
    Unreachable { reference: String, detail: String },
    #[error(
        "{reference}: the registry refused: {detail} (a private registry needs --plugin-registry-auth)"
    )]
    Registry { reference: String, detail: String },
    #[error("{reference}: not a plugin artifact: {detail}")]
    NotAPlugin { reference: String, detail: String },
    #[error(
        "{reference}: tampered: {what} has digest {got}, but {expected} was asked for; the artifact is refused"
    )]
    Tampered {
        reference: String,
        what: String,
        expected: String,
        got: String,
    },
    #[error(
        "{reference}: the tag now names {now}, but it was pinned to {pinned} when first pulled; name the digest you want (…@{now}) or pass --plugin-accept-new-digest"
    )]
    TagMoved {
        reference: String,
        pinned: String,
        now: String,
    },
    #[error("{reference}: the tag's pin cannot be read or kept: {detail}")]
    Pins { reference: String, detail: String },
    #[error("{reference}@{digest}: signature check failed ({}): {detail}", check.name())]
    Signature {
        reference: String,
        digest: String,
        check: SignatureCheck,
        detail: String,
    },
}
