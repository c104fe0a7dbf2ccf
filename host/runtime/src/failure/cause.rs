//! What stopped a call, read from wasmtime's error types and from what the call's store
//! recorded, never from wasmtime's wording: a message renamed by a wasmtime upgrade must
//! not turn a retried failure (a full instance pool) into a terminal one.
//!
//! Text is read only where no type exists, in [`by_message`], each match saying why; the
//! tests (`failure/tests.rs`) produce every class from real Wasm and check how it was
//! recognised, so an upgrade that breaks a fallback fails a test.
use wasmtime::component::ResourceTableError;
use wasmtime::{PoolConcurrencyLimitError, Trap};

use super::CpuBudgetSpent;
use crate::limits::Breach;
use crate::memory::{CallLimiter, MemoryCapReached};
use crate::meter::CallMeter;

/// What stopped a call, before it is worded for a person (`CallError`).
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Cause {
    /// A limit the host counts (log, claims, egress, bodies...): the host's own error,
    /// or the first one the call's meter recorded.
    Breach(Breach),
    /// The CPU budget: the epoch callback stopped the call ([`CpuBudgetSpent`]), or
    /// wasmtime interrupted it itself (`Trap::Interrupt`, `Trap::OutOfFuel`).
    Cpu,
    /// Linear memory refused by the call's limiter.
    Memory(MemoryCapReached),
    /// More bytes copied out of the sandbox in one host call than its hostcall fuel.
    HostcallFuel,
    /// The call's resource table at its capacity (`HANDLES_PER_CALL`).
    Handles,
    /// The pooling allocator had no free slot of some kind (worth retrying).
    PoolFull,
    /// The component could not be instantiated (no Wasm trap involved).
    Instantiate,
    /// A trap of the guest (`Some` when wasmtime says which), or a host error.
    Trap(Option<Trap>),
}

/// How a cause was recognised.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Via {
    /// An error type in the chain.
    Type,
    /// What the store recorded (the limiter, the meter).
    State,
    /// The error's text: the documented fallbacks of [`by_message`].
    Message,
    /// Nothing matched: an unnamed trap or host error.
    Nothing,
}

/// What the call's store recorded about its end, read after the failure.
#[derive(Debug, Default)]
pub(crate) struct Seen {
    /// The first limit the call's meter recorded.
    pub breach: Option<Breach>,
    /// The memory limit the call's limiter refused growth at.
    pub memory: Option<MemoryCapReached>,
}

impl Seen {
    pub fn of(meter: &CallMeter, limiter: &CallLimiter) -> Seen {
        Seen {
            breach: meter.breached(),
            memory: limiter.reached(),
        }
    }
}

/// Marks an error of instantiating a call's component (see `Plugin::invoke`), so its
/// class does not depend on wasmtime's wording.
#[derive(Debug)]
pub(crate) struct Instantiating;

impl std::fmt::Display for Instantiating {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("instantiating the plugin")
    }
}

/// Why `err` stopped the call, and how that was found: types and state first, text
/// only as the fallback.
pub(crate) fn identify(err: &wasmtime::Error, seen: &Seen) -> (Cause, Via) {
    if let Some(found) = by_type_or_state(err, seen) {
        return found;
    }
    if let Some(cause) = by_message(&format!("{err:#}")) {
        return (cause, Via::Message);
    }
    (Cause::Trap(None), Via::Nothing)
}

/// The causes wasmtime's types and the store's records name, in the order the host
/// reports them (a limit the host counted before the trap it led to).
fn by_type_or_state(err: &wasmtime::Error, seen: &Seen) -> Option<(Cause, Via)> {
    if let Some(breach) = err.downcast_ref::<Breach>() {
        return Some((Cause::Breach(breach.clone()), Via::Type));
    }
    if let Some(breach) = &seen.breach {
        return Some((Cause::Breach(breach.clone()), Via::State));
    }
    let trap = err.downcast_ref::<Trap>().copied();
    if err.is::<CpuBudgetSpent>() || matches!(trap, Some(Trap::Interrupt | Trap::OutOfFuel)) {
        return Some((Cause::Cpu, Via::Type));
    }
    // The limiter's record outlives whatever a guest or adapter makes of its error.
    if let Some(reached) = seen.memory {
        return Some((Cause::Memory(reached), Via::State));
    }
    if let Some(reached) = err.downcast_ref::<MemoryCapReached>() {
        return Some((Cause::Memory(*reached), Via::Type));
    }
    if matches!(
        err.downcast_ref::<ResourceTableError>(),
        Some(ResourceTableError::Full)
    ) {
        return Some((Cause::Handles, Via::Type));
    }
    if err.is::<PoolConcurrencyLimitError>() {
        return Some((Cause::PoolFull, Via::Type));
    }
    if trap.is_some() {
        return Some((Cause::Trap(trap), Via::Type));
    }
    if err.is::<Instantiating>() {
        return Some((Cause::Instantiate, Via::Type));
    }
    None
}

/// The fallback: causes recognised by their text. Each is here because no type
/// reaches us, or in case a layer flattened a typed error into its message.
fn by_message(chain: &str) -> Option<Cause> {
    // Ours (`CpuBudgetSpent`), should a layer keep only its text.
    if chain.contains(super::CPU_BUDGET_SPENT) {
        return Some(Cause::Cpu);
    }
    // Ours (`CallLimiter::memory_grow_failed`), likewise.
    if chain.contains(crate::memory::GROWTH_FAILED) {
        return Some(Cause::Memory(MemoryCapReached::GrowthFailed));
    }
    // wasmtime's `HostcallFuelExhausted` is private: its message is all we get.
    if chain.contains("fuel allocated for hostcalls has been exhausted") {
        return Some(Cause::HostcallFuel);
    }
    // `ResourceTableError::Full` and `PoolConcurrencyLimitError`, should they reach us
    // as text only.
    if chain.contains("resource table has no free keys") {
        return Some(Cause::Handles);
    }
    if chain.contains("maximum concurrent") {
        return Some(Cause::PoolFull);
    }
    // Kept from before `Instantiating` marked the step: an instantiation error no
    // other cause claims.
    if chain.contains("instantiat") {
        return Some(Cause::Instantiate);
    }
    None
}
