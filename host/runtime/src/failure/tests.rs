//! Every class of failure, produced by real Wasm in a store set up as a call's is (the
//! call's limiter and meter, the production epoch callback), and classified. Each test
//! also says how the class was recognised: only the fallbacks `cause::by_message`
//! documents may read text, so a wasmtime upgrade that renames a message fails here
//! rather than turning a retried failure terminal.
use std::sync::Arc;
use std::time::Duration;

use wasmtime::component::{Component, ResourceTable};
use wasmtime::{
    Caller, Config, Engine, InstanceAllocationStrategy, Linker, Module, PoolingAllocationConfig,
    Store, Trap, UpdateDeadline,
};

use super::cause::{self, Cause, Seen, Via};
use super::{at_epoch, instantiating, word};
use crate::error::CallError;
use crate::limits::{Breach, Limits};
use crate::memory::{CallLimiter, MemoryCapReached, PluginBudget};
use crate::meter::CallMeter;

/// What a test call's store holds of a `CallState`: what classification reads.
struct Call {
    limiter: CallLimiter,
    meter: Arc<CallMeter>,
    table: ResourceTable,
}

const LOOP: &str = r#"(module (func (export "run") (loop (br 0))))"#;

fn engine(configure: impl FnOnce(&mut Config)) -> Engine {
    let mut config = Config::new();
    configure(&mut config);
    Engine::new(&config).expect("engine")
}

/// A store as a call's: memory limits (MiB) for the call and its plugin, a CPU budget.
fn store(engine: &Engine, call_mib: usize, plugin_mib: usize, cpu: Duration) -> Store<Call> {
    let call = Call {
        limiter: CallLimiter::new(call_mib << 20, PluginBudget::new(plugin_mib << 20)),
        meter: CallMeter::new(cpu),
        table: ResourceTable::new(),
    };
    let mut store = Store::new(engine, call);
    store.limiter(|call| &mut call.limiter);
    store
}

/// The host imports of the test modules: a host error, a broken limit, a handle flood.
fn linker(engine: &Engine) -> Linker<Call> {
    let mut linker = Linker::new(engine);
    linker
        .func_wrap(
            "host",
            "fail",
            |_: Caller<'_, Call>| -> wasmtime::Result<()> {
                Err(wasmtime::Error::msg("the host could not do it"))
            },
        )
        .unwrap()
        .func_wrap(
            "host",
            "breach",
            |_: Caller<'_, Call>| -> wasmtime::Result<()> {
                Err(wasmtime::Error::new(Breach::new("1 test", "--test")))
            },
        )
        .unwrap()
        .func_wrap(
            "host",
            "handles",
            |mut caller: Caller<'_, Call>| -> wasmtime::Result<()> {
                // As a WASI import does: a handle per call, until the table is full.
                loop {
                    caller.data_mut().table.push(0u8)?;
                }
            },
        )
        .unwrap();
    linker
}

/// Run `run` of the module `wat` in `store`: the error it fails with.
fn fail(store: &mut Store<Call>, wat: &str) -> wasmtime::Error {
    let engine = store.engine().clone();
    let module = Module::new(&engine, wat::parse_str(wat).unwrap()).unwrap();
    let instance = linker(&engine)
        .instantiate(&mut *store, &module)
        .map_err(instantiating)
        .unwrap();
    let run = instance
        .get_typed_func::<(), ()>(&mut *store, "run")
        .unwrap();
    run.call(&mut *store, ()).unwrap_err()
}

/// Classify `err` as `failure::classify` does for a call's store.
fn classify(store: &Store<Call>, err: &wasmtime::Error, stderr: &str) -> (Cause, Via, CallError) {
    let seen = Seen::of(&store.data().meter, &store.data().limiter);
    let (cause, via) = cause::identify(err, &seen);
    let limits = Limits::default();
    let error = word(
        "p",
        &limits,
        "machine.create",
        err,
        cause.clone(),
        stderr,
        store.hostcall_fuel(),
    );
    (cause, via, error)
}

fn plain(engine: &Engine) -> Store<Call> {
    store(engine, 64, 128, Duration::from_secs(60))
}

#[test]
fn the_cpu_budget_spent_at_an_epoch_tick() {
    let engine = engine(|c| {
        c.epoch_interruption(true);
    });
    // No CPU left: the production callback stops the call at the first tick.
    let mut store = store(&engine, 64, 128, Duration::ZERO);
    store.set_epoch_deadline(1);
    store.epoch_deadline_callback(|ctx| {
        at_epoch(&ctx.data().meter).map(|()| UpdateDeadline::Continue(1))
    });
    engine.increment_epoch();
    let err = fail(&mut store, LOOP);
    let (cause, via, error) = classify(&store, &err, "");
    assert_eq!((cause, via), (Cause::Cpu, Via::Type));
    assert!(matches!(error, CallError::CpuBudget { .. }), "{error}");
}

#[test]
fn an_epoch_interrupt_is_the_cpu_budget() {
    // wasmtime's own interrupt, as a store without the callback gets it.
    let engine = engine(|c| {
        c.epoch_interruption(true);
    });
    let mut store = plain(&engine);
    store.set_epoch_deadline(1);
    engine.increment_epoch();
    let err = fail(&mut store, LOOP);
    assert_eq!(err.downcast_ref::<Trap>(), Some(&Trap::Interrupt));
    let (cause, via, error) = classify(&store, &err, "");
    assert_eq!((cause, via), (Cause::Cpu, Via::Type));
    assert!(matches!(error, CallError::CpuBudget { .. }), "{error}");
}

#[test]
fn fuel_exhaustion_is_the_cpu_budget() {
    let engine = engine(|c| {
        c.consume_fuel(true);
    });
    let mut store = plain(&engine);
    store.set_fuel(10_000).unwrap();
    let err = fail(&mut store, LOOP);
    assert_eq!(err.downcast_ref::<Trap>(), Some(&Trap::OutOfFuel));
    let (cause, via, error) = classify(&store, &err, "");
    assert_eq!((cause, via), (Cause::Cpu, Via::Type));
    assert!(matches!(error, CallError::CpuBudget { .. }), "{error}");
}

/// Grows its memory by 2 MiB.
const GROW: &str = r#"(module (memory 0)
    (func (export "run") (drop (memory.grow (i32.const 32)))))"#;

#[test]
fn memory_past_the_calls_limit_is_the_memory_limit() {
    let engine = engine(|_| {});
    let mut store = store(&engine, 1, 128, Duration::from_secs(60));
    let err = fail(&mut store, GROW);
    let (cause, via, error) = classify(&store, &err, "");
    assert_eq!(
        (cause, via),
        (Cause::Memory(MemoryCapReached::Call(2 << 20)), Via::State)
    );
    assert!(matches!(error, CallError::MemoryLimit { .. }), "{error}");
}

#[test]
fn memory_past_the_plugins_budget_is_crowded_and_retried() {
    let engine = engine(|_| {});
    let mut store = store(&engine, 64, 1, Duration::from_secs(60));
    let err = fail(&mut store, GROW);
    let (cause, via, error) = classify(&store, &err, "");
    assert_eq!(
        (cause, via),
        (Cause::Memory(MemoryCapReached::Plugin(1 << 20)), Via::State)
    );
    assert!(matches!(error, CallError::Crowded { .. }), "{error}");
}

#[test]
fn a_stack_overflow_is_a_trap_that_says_so() {
    let engine = engine(|_| {});
    let mut store = plain(&engine);
    let err = fail(
        &mut store,
        r#"(module (func $run (export "run") (call $run)))"#,
    );
    let (cause, via, error) = classify(&store, &err, "");
    assert_eq!(
        (cause, via),
        (Cause::Trap(Some(Trap::StackOverflow)), Via::Type)
    );
    let CallError::Trap { message, .. } = error else {
        panic!("{error}")
    };
    assert!(
        message.contains(&Trap::StackOverflow.to_string()),
        "{message}"
    );
}

#[test]
fn unreachable_is_a_trap_and_a_panic_before_it_is_a_panic() {
    let engine = engine(|_| {});
    let mut store = plain(&engine);
    let err = fail(
        &mut store,
        r#"(module (func $boom (unreachable)) (func (export "run") (call $boom)))"#,
    );
    let (cause, via, error) = classify(&store, &err, "");
    assert_eq!(
        (cause, via),
        (Cause::Trap(Some(Trap::UnreachableCodeReached)), Via::Type)
    );
    let CallError::Trap { message, .. } = &error else {
        panic!("{error}")
    };
    assert!(message.contains("unreachable"), "{message}");
    assert!(message.contains("(in boom)"), "{message}");
    // A Rust guest's panic prints, then traps the same way.
    let stderr = "thread '<unnamed>' panicked at src/lib.rs:1:1:\nno luck\n";
    let (_, _, error) = classify(&store, &err, stderr);
    assert!(
        matches!(&error, CallError::Panic { message, .. } if message.ends_with("no luck")),
        "{error}"
    );
}

const CALLS: &str =
    r#"(module (import "host" "IMPORT" (func $f)) (func (export "run") (call $f)))"#;

#[test]
fn a_host_error_is_a_trap_with_the_hosts_words() {
    let engine = engine(|_| {});
    let mut store = plain(&engine);
    let err = fail(&mut store, &CALLS.replace("IMPORT", "fail"));
    let (cause, via, error) = classify(&store, &err, "");
    assert_eq!((cause, via), (Cause::Trap(None), Via::Nothing));
    let CallError::Trap { message, .. } = error else {
        panic!("{error}")
    };
    assert!(message.starts_with("the host could not do it"), "{message}");
}

#[test]
fn a_limit_a_host_import_counted_is_that_limit() {
    let engine = engine(|_| {});
    let mut store = plain(&engine);
    let err = fail(&mut store, &CALLS.replace("IMPORT", "breach"));
    let (cause, via, error) = classify(&store, &err, "");
    assert_eq!(
        (cause, via),
        (Cause::Breach(Breach::new("1 test", "--test")), Via::Type)
    );
    assert!(matches!(error, CallError::Limit { .. }), "{error}");
    // Recorded by the meter (a limit broken where the error is not the call's).
    let mut store = plain(&engine);
    store.data().meter.breach(Breach::new("1 test", "--test"));
    let err = fail(&mut store, &CALLS.replace("IMPORT", "fail"));
    let (_, via, error) = classify(&store, &err, "");
    assert_eq!(via, Via::State);
    assert!(matches!(error, CallError::Limit { .. }), "{error}");
}

#[test]
fn a_full_resource_table_is_the_handles_limit() {
    let engine = engine(|_| {});
    let mut store = plain(&engine);
    store.data_mut().table.set_max_capacity(64);
    let err = fail(&mut store, &CALLS.replace("IMPORT", "handles"));
    let (cause, via, error) = classify(&store, &err, "");
    assert_eq!((cause, via), (Cause::Handles, Via::Type));
    assert!(
        matches!(&error, CallError::Limit { breach, .. } if breach.flag.starts_with("fixed")),
        "{error}"
    );
}

#[test]
fn a_full_instance_pool_is_busy_and_retried() {
    let mut pool = PoolingAllocationConfig::default();
    pool.total_core_instances(1).total_memories(1);
    let engine = engine(|c| {
        c.allocation_strategy(InstanceAllocationStrategy::Pooling(pool));
    });
    let module = Module::new(&engine, wat::parse_str(GROW).unwrap()).unwrap();
    let mut first = plain(&engine);
    linker(&engine).instantiate(&mut first, &module).unwrap();
    let mut second = plain(&engine);
    let err = linker(&engine)
        .instantiate(&mut second, &module)
        .map_err(instantiating)
        .unwrap_err();
    let (cause, via, error) = classify(&second, &err, "");
    assert_eq!((cause, via), (Cause::PoolFull, Via::Type));
    assert!(matches!(error, CallError::Busy { .. }), "{error}");
}

#[test]
fn a_component_that_cannot_start_is_an_instantiation_failure() {
    let engine = engine(|_| {});
    let mut store = plain(&engine);
    let module = Module::new(
        &engine,
        wat::parse_str(CALLS.replace("IMPORT", "absent")).unwrap(),
    )
    .unwrap();
    let err = linker(&engine)
        .instantiate(&mut store, &module)
        .map_err(instantiating)
        .unwrap_err();
    let (cause, via, error) = classify(&store, &err, "");
    assert_eq!((cause, via), (Cause::Instantiate, Via::Type));
    assert!(matches!(error, CallError::Instantiate { .. }), "{error}");
}

/// A component whose `run` returns a 1,000-byte string.
const BIG_RESULT: &str = r#"(component
    (core module $m
        (memory (export "memory") 1)
        (func (export "run") (result i32)
            (i32.store (i32.const 16) (i32.const 64))
            (i32.store (i32.const 20) (i32.const 1000))
            (i32.const 16)))
    (core instance $i (instantiate $m))
    (func (export "run") (result string)
        (canon lift (core func $i "run") (memory (core memory $i "memory")))))"#;

#[test]
fn more_out_of_the_sandbox_than_the_hostcall_fuel_is_that_limit() {
    let engine = engine(|_| {});
    let mut store = plain(&engine);
    store.set_hostcall_fuel(100);
    let component = Component::new(&engine, wat::parse_str(BIG_RESULT).unwrap()).unwrap();
    let linker = wasmtime::component::Linker::<Call>::new(&engine);
    let instance = linker.instantiate(&mut store, &component).unwrap();
    let run = instance
        .get_typed_func::<(), (String,)>(&mut store, "run")
        .unwrap();
    let err = run.call(&mut store, ()).unwrap_err();
    let (cause, via, error) = classify(&store, &err, "");
    // wasmtime's error type for it is private: this is the one class its words carry.
    assert_eq!((cause, via), (Cause::HostcallFuel, Via::Message));
    assert!(
        matches!(&error, CallError::Limit { breach, .. } if breach.limit == "100 bytes passed out of the sandbox at once"),
        "{error}"
    );
}
