//! Natively and with the `fuzzing` feature only: the imports a plugin's calls use (HTTP
//! and logs) answer from a [`Host`] the calling thread installs, instead of the stubs
//! that panic, so a fuzzer (`fuzz/`) runs a plugin's `Guest` functions natively against
//! replies it makes up. Without an installed host the imports behave as without the
//! feature. Never part of a plugin build (`wasm32` ignores the feature).
use std::cell::RefCell;

use crate::http::{HttpError, Request, Response};
use crate::log::Level;

/// What answers a plugin's imports on this thread. To see what it was asked after the
/// calls, keep a shared handle (`Rc<RefCell<_>>`) in it.
pub trait Host {
    /// The reply to an HTTP request (what `wasi:http` would bring back).
    fn http(&mut self, request: &Request<'_>) -> Result<Response, HttpError>;
    /// A log line the plugin wrote.
    fn log(&mut self, level: Level, message: &str, fields: &[(&str, String)]);
}

thread_local! {
    static HOST: RefCell<Option<Box<dyn Host>>> = RefCell::new(None);
}

/// Install `host` for this thread's plugin calls until the guard is dropped.
#[must_use = "the host is uninstalled when the guard is dropped"]
pub fn install(host: impl Host + 'static) -> Installed {
    HOST.with(|h| *h.borrow_mut() = Some(Box::new(host)));
    Installed(())
}

/// An installed [`Host`]: dropping it uninstalls the host.
pub struct Installed(());

impl Drop for Installed {
    fn drop(&mut self) {
        HOST.with(|h| h.borrow_mut().take());
    }
}

/// Whether a host is installed on this thread.
pub(crate) fn installed() -> bool {
    HOST.with(|h| h.borrow().is_some())
}

/// The installed host's reply, or None (no host: the real import is called).
pub(crate) fn http(request: &Request<'_>) -> Option<Result<Response, HttpError>> {
    HOST.with(|h| h.borrow_mut().as_mut().map(|host| host.http(request)))
}

/// Whether the installed host took the log line (false: no host).
pub(crate) fn log(level: Level, message: &str, fields: &[(&str, String)]) -> bool {
    HOST.with(|h| {
        h.borrow_mut()
            .as_mut()
            .map(|host| host.log(level, message, fields))
            .is_some()
    })
}
