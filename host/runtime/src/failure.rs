//! What stopped a call, as the specific error a person can act on: a limit named with
//! its flag, the CPU budget, memory, a panic's message, or a trap's cause and place.
use wasmtime::Store;

use super::error::CallError;
use super::limits::{Breach, Limits, size};
use super::memory::MemoryCapReached;
use super::state::{CallState, HANDLES_PER_CALL};

/// Turn a trap or host failure into the specific error a person can act on.
pub(super) fn classify(
    plugin: &str,
    limits: &Limits,
    call: &'static str,
    err: wasmtime::Error,
    store: &Store<CallState>,
) -> CallError {
    let plugin = plugin.to_string();
    if let Some(breach) = err
        .downcast_ref::<Breach>()
        .cloned()
        .or_else(|| store.data().meter.breached())
    {
        return CallError::Limit {
            plugin,
            call,
            breach,
        };
    }
    let chain = format!("{err:#}");
    if err.downcast_ref::<CpuBudgetSpent>().is_some() || chain.contains(CPU_BUDGET_SPENT) {
        return CallError::CpuBudget {
            plugin,
            call,
            limit_ms: limits.cpu_ms,
        };
    }
    // A call stops at its own memory limit (`--plugin-memory-mib`) before the plugin's:
    // the plugin's is reached only by calls at once, and frees up as they end.
    if let Some(MemoryCapReached::Plugin(limit)) = err.downcast_ref::<MemoryCapReached>() {
        return CallError::Crowded {
            plugin,
            call,
            limit: format!("{} of memory", size(*limit)),
            flag: "--plugin-memory-per-plugin-mib",
        };
    }
    if err.downcast_ref::<MemoryCapReached>().is_some()
        || chain.contains("forcing a memory growth failure")
    {
        return CallError::MemoryLimit {
            plugin,
            call,
            limit_mib: limits.memory_mib,
        };
    }
    if chain.contains("fuel allocated for hostcalls has been exhausted") {
        let transfer = store.hostcall_fuel();
        return CallError::Limit {
            plugin,
            call,
            breach: Breach::new(
                format!("{} passed out of the sandbox at once", size(transfer)),
                "the larger of --plugin-output-kib and --blob-max-mib",
            ),
        };
    }
    // wasmtime's words for a resource table at its capacity (`HANDLES_PER_CALL`).
    if chain.contains("resource table has no free keys") {
        return CallError::Limit {
            plugin,
            call,
            breach: Breach::new(
                format!("{HANDLES_PER_CALL} host handles held at once"),
                "fixed: drop handles when done with them",
            ),
        };
    }
    let stderr = String::from_utf8_lossy(&store.data().stderr.contents()).to_string();
    if let Some(at) = stderr.find("panicked at") {
        let message = stderr[at..].lines().take(2).collect::<Vec<_>>().join(": ");
        return CallError::Panic {
            plugin,
            call,
            message,
        };
    }
    // The instance pool is full (the slot semaphore keeps calls within it; a component
    // with several memories or tables can still fill one kind of slot first).
    if chain.contains("maximum concurrent") {
        return CallError::Busy {
            plugin,
            call,
            message: err.root_cause().to_string(),
        };
    }
    if chain.contains("instantiat") {
        return CallError::Instantiate {
            plugin,
            message: chain,
        };
    }
    CallError::Trap {
        plugin,
        call,
        message: trap_message(&err),
    }
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

const CPU_BUDGET_SPENT: &str = "plugin CPU budget spent";

#[derive(Debug)]
pub(super) struct CpuBudgetSpent;

impl std::fmt::Display for CpuBudgetSpent {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(CPU_BUDGET_SPENT)
    }
}

impl std::error::Error for CpuBudgetSpent {}
