//! Results shaped wrong on request (`spec.attack`): what an untrusted plugin can hand
//! the host to write into an object. The host must refuse or repair each with a clear
//! condition, never panic, never leave the object stuck.
use crate::{Spec, status};
use guest_kit::machine::{AddressType, MachineAddress, MachineStatus};
use guest_kit::types::{PluginError, TerminalError};

/// The status or error of output attack `attack`, if it is one.
pub fn run(attack: &str, spec: &Spec) -> Option<Result<MachineStatus, PluginError>> {
    let count = spec.num("count", 100_000) as usize;
    let mut s = status(String::new());
    s.ready = false;
    s.provider_id = None;
    match attack {
        // A state larger than an object's status should hold.
        "huge-state" => s.progress.state = "x".repeat(spec.num("kib", 512) as usize * 1024),
        // A state the next call cannot read (it reads its state with guest-kit).
        "bad-state" => {
            s.progress.state = "{not json".into();
            s.progress.phase = "Pending".into();
            s.progress.requeue_after_ms = Some(100);
        }
        // A state of a layout this build does not read, as a newer release of the plugin
        // would leave it for a rolled-back one.
        "newer-state" => {
            s.progress.state = r#"{"stateVersion":2}"#.into();
            s.progress.phase = "Pending".into();
            s.progress.requeue_after_ms = Some(100);
        }
        "empty-status" => {
            s.progress.phase = String::new();
            s.progress.message = String::new();
        }
        "empty-error" => {
            return Some(Err(PluginError::Terminal(TerminalError {
                reason: String::new(),
                message: String::new(),
            })));
        }
        // A phase that is no condition reason, and a drift message that is no message.
        "bad-reason" => {
            s.progress.phase = "cloning the vm!".into();
            s.progress.message = "still going".into();
        }
        "huge-details" => {
            s.details = (0..count)
                .map(|i| (format!("key{i}"), "v".repeat(16)))
                .collect();
        }
        // An enum value no honest bindings can write: the host must refuse the result
        // when it lifts it out of the sandbox.
        "bad-variant" => {
            s.addresses = vec![MachineAddress {
                address_type: out_of_range(),
                address: "10.0.0.1".into(),
            }];
        }
        _ => return None,
    }
    Some(Ok(s))
}

/// An `address-type` with a discriminant past its last case. This breaks Rust's rules on
/// purpose (an invalid enum value): the bindings lower it as `value as i32`, so the
/// canonical ABI carries the bad discriminant out, which is what this plugin is for.
fn out_of_range() -> AddressType {
    const PAST_THE_LAST: u8 = 9;
    // SAFETY: none; the value is only ever lowered (`as i32`) by the bindings, never
    // matched on, and a wrong value is the point (see above).
    unsafe { std::mem::transmute::<u8, AddressType>(PAST_THE_LAST) }
}
