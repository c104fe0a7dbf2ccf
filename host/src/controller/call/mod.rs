//! The plugin call: what a call is made with and what it came to. The credentials it
//! carries (`credentials`, within the operator's `grants`), the spec in the plugin's
//! version (`versions`), the result checked before any of it is written (`output`), and
//! the outcome in the controllers' terms, shown on the object when the call failed
//! (`outcome`).
//!
//! May import: `trust` (the keys that vouch for kept conversion data), `write`,
//! `schedule`, `objects`, `error`. Never `reconcile`: what a call needs is handed to it
//! (`credentials::Sources`, `versions::Converter`, the plugin itself).
pub mod credentials;
pub(crate) mod grants;
pub(crate) mod outcome;
pub(crate) mod output;
pub(crate) mod versions;
