//! What stopped a call, as the specific error a person can act on: a limit named with
//! its flag, the CPU budget, memory, a panic's message, or a trap's cause and place.
//! `cause` finds what stopped it from types and the store's records; this module words
//! it.
mod cause;
#[cfg(test)]
mod tests;

use wasmtime::Store;

use cause::{Cause, Instantiating, Seen};

use super::error::CallError;
use super::limits::{Breach, Limits, size};
use super::memory::MemoryCapReached;
use super::meter::{CallMeter, Stop};
use super::state::{CallState, HANDLES_PER_CALL};

/// Turn a trap or host failure into the specific error a person can act on.
pub(super) fn classify(
    plugin: &str,
    limits: &Limits,
    call: &'static str,
    err: wasmtime::Error,
    store: &Store<CallState>,
) -> CallError {
    let state = store.data();
    let seen = Seen::of(&state.meter, &state.limiter);
    let stderr = String::from_utf8_lossy(&state.stderr.contents()).to_string();
    let (cause, _) = cause::identify(&err, &seen);
    word(
        plugin,
        limits,
        call,
        &err,
        cause,
        &stderr,
        store.hostcall_fuel(),
    )
}

/// At an epoch tick inside Wasm: stop the call, with an error `classify` knows by type,
/// once its meter says so (a limit broken, or the CPU budget spent).
pub(super) fn at_epoch(meter: &CallMeter) -> wasmtime::Result<()> {
    match meter.check(true) {
        Some(Stop::Cpu) => Err(wasmtime::Error::new(CpuBudgetSpent)),
        Some(Stop::Breach(b)) => Err(wasmtime::Error::new(b)),
        None => Ok(()),
    }
}

/// An error of instantiating a call's component, marked as such.
pub(super) fn instantiating(err: wasmtime::Error) -> wasmtime::Error {
    err.context(Instantiating)
}

/// The error a person reads for `cause`. A Rust guest's panic prints its message to
/// stderr, then traps: its message wins over the trap it ends in.
fn word(
    plugin: &str,
    limits: &Limits,
    call: &'static str,
    err: &wasmtime::Error,
    cause: Cause,
    stderr: &str,
    hostcall_fuel: usize,
) -> CallError {
    let plugin = plugin.to_string();
    let unnamed = matches!(cause, Cause::PoolFull | Cause::Instantiate | Cause::Trap(_));
    if let Some(message) = panic_message(stderr).filter(|_| unnamed) {
        return CallError::Panic {
            plugin,
            call,
            message,
        };
    }
    match cause {
        Cause::Breach(breach) => CallError::Limit {
            plugin,
            call,
            breach,
        },
        Cause::Cpu => CallError::CpuBudget {
            plugin,
            call,
            limit_ms: limits.cpu_ms,
        },
        // A call stops at its own memory limit (`--plugin-memory-mib`) before the
        // plugin's: the plugin's is reached only by calls at once, and frees up as they
        // end.
        Cause::Memory(MemoryCapReached::Plugin(limit)) => CallError::Crowded {
            plugin,
            call,
            limit: format!("{} of memory", size(limit)),
            flag: "--plugin-memory-per-plugin-mib",
        },
        Cause::Memory(_) => CallError::MemoryLimit {
            plugin,
            call,
            limit_mib: limits.memory_mib,
        },
        Cause::HostcallFuel => CallError::Limit {
            plugin,
            call,
            breach: Breach::new(
                format!("{} passed out of the sandbox at once", size(hostcall_fuel)),
                "the larger of --plugin-output-kib and --blob-max-mib",
            ),
        },
        Cause::Handles => CallError::Limit {
            plugin,
            call,
            breach: Breach::new(
                format!("{HANDLES_PER_CALL} host handles held at once"),
                "fixed: drop handles when done with them",
            ),
        },
        // The instance pool is full (the slot semaphore keeps calls within it; a
        // component with several memories or tables can still fill one kind of slot
        // first).
        Cause::PoolFull => CallError::Busy {
            plugin,
            call,
            message: err.root_cause().to_string(),
        },
        Cause::Instantiate => CallError::Instantiate {
            plugin,
            message: format!("{err:#}"),
        },
        Cause::Trap(_) => CallError::Trap {
            plugin,
            call,
            message: trap_message(err),
        },
    }
}

/// A Rust panic's message and place, from the guest's stderr.
fn panic_message(stderr: &str) -> Option<String> {
    let at = stderr.find("panicked at")?;
    Some(stderr[at..].lines().take(2).collect::<Vec<_>>().join(": "))
}

/// What a trap was, and where: the root cause (e.g. `wasm trap: wasm `unreachable`
/// instruction executed`) and the innermost named function of the backtrace, rather
/// than the backtrace's heading.
fn trap_message(err: &wasmtime::Error) -> String {
    let cause = err.root_cause().to_string();
    let cause = cause.lines().next().unwrap_or("unknown trap").trim();
    let frame = err
        .downcast_ref::<wasmtime::WasmBacktrace>()
        .and_then(|bt| {
            bt.frames()
                .iter()
                .find_map(|f| f.func_name().map(str::to_string))
        });
    match frame {
        Some(name) => format!("{cause} (in {name})"),
        None => cause.to_string(),
    }
}

/// Whether `value` serialises to at most `limit` bytes of JSON, found by counting
/// while serialising (nothing is kept, and counting stops at the limit); else the
/// size reached.
pub(super) fn json_size_within<T: serde::Serialize>(value: &T, limit: usize) -> Result<(), usize> {
    struct Count {
        bytes: usize,
        limit: usize,
    }
    impl std::io::Write for Count {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.bytes += buf.len();
            if self.bytes > self.limit {
                return Err(std::io::Error::other("over the limit"));
            }
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    let mut count = Count { bytes: 0, limit };
    match serde_json::to_writer(&mut count, value) {
        Ok(()) => Ok(()),
        Err(_) => Err(count.bytes),
    }
}

/// How [`CpuBudgetSpent`] reads.
const CPU_BUDGET_SPENT: &str = "plugin CPU budget spent";

/// The epoch callback's error for a call past its CPU budget.
#[derive(Debug)]
struct CpuBudgetSpent;

impl std::fmt::Display for CpuBudgetSpent {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(CPU_BUDGET_SPENT)
    }
}

impl std::error::Error for CpuBudgetSpent {}
