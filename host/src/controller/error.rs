//! The controllers' errors, typed so the error policy can branch on them.
use hyperplug_runtime::CallError;

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("Kubernetes API: {0}")]
    Kube(#[from] kube::Error),
    /// Worth retrying as is (with backoff).
    #[error("{0}")]
    Transient(String),
    /// Will not pass until the object's spec changes; recorded as a condition.
    #[error("{reason}: {message}")]
    Terminal { reason: String, message: String },
    /// The plugin call failed in the sandbox (timeout, trap, limits).
    #[error(transparent)]
    Call(#[from] CallError),
    /// Something the object refers to is missing or malformed.
    #[error("{0}")]
    Dependency(String),
    /// The object's credentials cannot be used as they are (none named, a Secret missing,
    /// incomplete or not allowed): shown as a condition with `reason`, and retried with
    /// backoff (no plugin is called, and fixing a Secret changes no generation).
    #[error("{reason}: {message}")]
    Credentials { reason: String, message: String },
}

impl Error {
    /// Label for metrics.
    pub fn metric_label(&self) -> &'static str {
        match self {
            Error::Kube(_) => "kube",
            Error::Transient(_) => "transient",
            Error::Terminal { .. } => "terminal",
            Error::Call(_) => "plugin_call",
            Error::Dependency(_) => "dependency",
            Error::Credentials { .. } => "credentials",
        }
    }
}

pub type Result<T> = std::result::Result<T, Error>;
