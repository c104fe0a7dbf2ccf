//! The versions of `wit/` this host speaks: the current contract, which the whole host
//! uses, and 0.2, whose plugins still load and are called through `compat`
//! (`exports.rs` is where a call tells them apart).

/// The version of `wit/` this host was built against.
pub const WIT_PACKAGE: &str = "hyperplug:provider";
pub const WIT_VERSION: &str = "0.3.1";
/// The previous version (`wit/v0.2/`), whose plugins still load through `compat`.
pub const WIT_COMPAT_VERSION: &str = "0.2.0";

/// Which contract a plugin speaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WitMajor {
    /// `WIT_VERSION`'s (0.3.x).
    Current,
    /// `WIT_COMPAT_VERSION`'s (0.2.x).
    V0_2,
}

impl WitMajor {
    /// The version of the contract, as `inspect` shows it.
    pub fn version(self) -> &'static str {
        match self {
            WitMajor::Current => WIT_VERSION,
            WitMajor::V0_2 => WIT_COMPAT_VERSION,
        }
    }

    /// Interfaces a plugin of this contract must export.
    pub(crate) fn required_exports(self) -> &'static [&'static str] {
        match self {
            WitMajor::Current => &["identity", "cluster", "machine", "conversion", "observer"],
            WitMajor::V0_2 => &["identity", "cluster", "machine"],
        }
    }
}
