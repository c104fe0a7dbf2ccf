//! The hyperplug plugin kit: what every plugin (a `wasm32-wasip2` component) needs
//! besides its own knowledge of one kind of infrastructure. Nothing here knows any.
//!
//! - [`bindings`]: the bindings of `wit/provider.wit`, generated once here; a plugin
//!   implements the five `Guest` traits on one type and exports it with
//!   [`export!`]. [`types`], [`identity`], [`cluster`], [`machine`], [`conversion`],
//!   [`observer`], [`blobs`], [`claims`] and [`reservations`] are short names for
//!   their interfaces.
//! - [`errors`]: the three error classes ([`terminal`], [`transient`], [`invalid`]) and
//!   [`parse_spec`], which names the field that does not fit.
//! - [`log`]: structured logs through the host.
//! - [`state`]: the opaque state a call hands back, and reading it on the next call (a
//!   state that does not read is a terminal `StateUnreadable` error).
//! - [`drift`]: a describe's report of infrastructure that is gone, someone else's or
//!   changed, named by a CamelCase reason.
//! - [`kinds`]: the four kinds of a plugin, their API versions and printer columns;
//!   [`convert`]: conversion for plugins whose kinds have one version, and
//!   [`observe`]: the observer of a plugin that names no waits.
//! - [`endpoint`]: the control-plane endpoint every InfraCluster spec carries.
//! - [`http`]: the one HTTP helper over `wasi:http`; [`schema`]: CRD-ready schemas;
//!   [`hold`]: the `reservations` import (answered by the fuzzing host too);
//!   [`grants`]: what an administrator granted the call's object (adoption).
//! - [`testing`]: requests as the host sends them, for unit tests.
//! - `fuzzing` (feature `fuzzing`, native builds only): the calling thread answers the
//!   HTTP and log imports, so `fuzz/` runs a plugin's calls natively.
//!
//! The imports compile natively as stubs that panic when called, so a plugin's pure
//! logic (parsing, planning, scoring) is unit-tested with a plain `cargo test`.

/// The bindings of the `plugin` world of `hyperplug:provider`.
pub mod bindings {
    wit_bindgen::generate!({
        path: "../wit",
        world: "plugin",
        generate_all,
        pub_export_macro: true,
        default_bindings_module: "guest_kit::bindings",
    });
}

/// The plugin authors' guide (`docs/plugin-authors.md`): its example plugin compiles
/// as a doc test, so the guide stays true to the kit.
#[cfg(doctest)]
#[doc = include_str!("../../docs/plugin-authors.md")]
pub struct PluginAuthorsGuide;

pub mod convert;
pub mod drift;
pub mod endpoint;
pub mod errors;
#[cfg(all(feature = "fuzzing", not(target_arch = "wasm32")))]
#[doc(hidden)]
pub mod fuzzing;
pub mod grants;
pub mod hold;
pub mod http;
pub mod kinds;
pub mod log;
pub mod observe;
pub mod schema;
pub mod state;
pub mod testing;

pub use bindings::exports::hyperplug::provider::{
    cluster, conversion, identity, machine, observer,
};
pub use bindings::hyperplug::provider::{blobs, claims, reservations, types};
pub use errors::{invalid, parse_spec, terminal, transient};

/// Export `$ty`, which implements the `Guest` traits of [`identity`], [`cluster`],
/// [`machine`], [`conversion`] and [`observer`], as the plugin component: `guest_kit::export!(Plugin);` once in the
/// plugin crate. Only a `wasm32` build exports anything: natively the plugin is a plain
/// library, so its unit tests build and link like any other crate's.
#[macro_export]
macro_rules! export {
    ($ty:ident) => {
        #[cfg(target_arch = "wasm32")]
        $crate::bindings::export!($ty with_types_in $crate::bindings);
        /// What a `wasm32` build exports. Natively this alias keeps the type, and so its
        /// `Guest` impls and all they call, reachable, as the export does in wasm.
        #[cfg(not(target_arch = "wasm32"))]
        pub type ExportedPlugin = $ty;
    };
}

/// FNV-1a: a stable, non-cryptographic spread (VMID offsets, inventory starting
/// points, multipart boundaries) that is the same in every plugin and every build.
pub fn fnv1a(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |h, b| {
        (h ^ u64::from(*b)).wrapping_mul(0x0000_0100_0000_01b3)
    })
}
