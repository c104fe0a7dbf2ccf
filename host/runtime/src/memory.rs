//! The memory of one call, and of all calls of one plugin: a component may have several
//! memories, and all of them share the call's limit; every call of a plugin in flight
//! draws from the plugin's budget, so concurrent calls cannot add up past it.
use std::sync::Arc;

use wasmtime::ResourceLimiter;

/// Memory and tables of one call's instances, counted together: a component may have
/// several memories, and all of them share the call's memory limit. What the call
/// holds is also drawn from its plugin's budget, shared by its calls in flight, and
/// given back when the call's store is dropped.
pub struct CallLimiter {
    /// The limit growth was refused at, kept for `failure` to read (the error itself
    /// may reach it through the guest's trap, typed or not).
    reached: Option<MemoryCapReached>,
    memory_limit: usize,
    memory_used: usize,
    plugin_memory: Arc<PluginBudget>,
    table_elements_limit: usize,
    table_elements_used: usize,
}

/// Bytes all calls of one plugin in flight hold together (linear memory, buffered
/// request bodies): taken as they are used, given back when they are freed.
pub struct PluginBudget {
    pub limit: usize,
    pub used: std::sync::atomic::AtomicUsize,
}

impl PluginBudget {
    pub fn new(limit: usize) -> Arc<PluginBudget> {
        Arc::new(PluginBudget {
            limit,
            used: Default::default(),
        })
    }

    /// Take `bytes` more from the budget, if it has them.
    pub fn take(&self, bytes: usize) -> bool {
        use std::sync::atomic::Ordering;
        self.used
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |used| {
                used.checked_add(bytes).filter(|total| *total <= self.limit)
            })
            .is_ok()
    }

    pub fn give_back(&self, bytes: usize) {
        self.used
            .fetch_sub(bytes, std::sync::atomic::Ordering::AcqRel);
    }
}

/// A call's memories tried to grow past a limit; the call fails.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum MemoryCapReached {
    #[error("plugin memory limit reached growing to {0} bytes")]
    Call(usize),
    #[error("the plugin's calls together hold {0} bytes of memory, all they may")]
    Plugin(usize),
    /// wasmtime could not grow a memory the limiter allowed (the pool's per-memory
    /// size, which is the call's limit, or the host's mappings).
    #[error("{GROWTH_FAILED}")]
    GrowthFailed,
}

/// How a failed growth reads in the call's error.
pub const GROWTH_FAILED: &str = "forcing a memory growth failure to be a trap";

/// Core instances one call's component may create. A Rust plugin makes a handful; a
/// Python one (componentize-py: the interpreter, libc and the shims linking them) about
/// 75. Bounded because each takes host memory for its context; the pool is sized by it.
pub const CORE_INSTANCES_PER_CALL: usize = 128;

/// Table elements all of a call's tables may hold (a pointer each).
const TABLE_ELEMENTS: usize = 1 << 20;

impl CallLimiter {
    pub fn new(memory_limit: usize, plugin_memory: Arc<PluginBudget>) -> CallLimiter {
        CallLimiter {
            reached: None,
            memory_limit,
            memory_used: 0,
            plugin_memory,
            table_elements_limit: TABLE_ELEMENTS,
            table_elements_used: 0,
        }
    }
}

impl CallLimiter {
    /// The limit this call's memory growth was refused at, if it was.
    pub fn reached(&self) -> Option<MemoryCapReached> {
        self.reached
    }

    fn refuse(&mut self, reached: MemoryCapReached) -> wasmtime::Error {
        self.reached = Some(reached);
        wasmtime::Error::new(reached)
    }
}

impl Drop for CallLimiter {
    fn drop(&mut self) {
        self.plugin_memory.give_back(self.memory_used);
    }
}

impl ResourceLimiter for CallLimiter {
    fn memory_growing(
        &mut self,
        current: usize,
        desired: usize,
        maximum: Option<usize>,
    ) -> wasmtime::Result<bool> {
        let total = self.memory_used - current.min(self.memory_used) + desired;
        if total > self.memory_limit {
            return Err(self.refuse(MemoryCapReached::Call(total)));
        }
        if maximum.is_some_and(|max| desired > max) {
            return Ok(false);
        }
        let more = total.saturating_sub(self.memory_used);
        if !self.plugin_memory.take(more) {
            let limit = self.plugin_memory.limit;
            return Err(self.refuse(MemoryCapReached::Plugin(limit)));
        }
        self.memory_used = total;
        Ok(true)
    }

    fn memory_grow_failed(&mut self, error: wasmtime::Error) -> wasmtime::Result<()> {
        self.reached = Some(MemoryCapReached::GrowthFailed);
        Err(error.context(GROWTH_FAILED))
    }

    fn table_growing(
        &mut self,
        current: usize,
        desired: usize,
        maximum: Option<usize>,
    ) -> wasmtime::Result<bool> {
        let total = self.table_elements_used - current.min(self.table_elements_used) + desired;
        if total > self.table_elements_limit || maximum.is_some_and(|max| desired > max) {
            return Ok(false);
        }
        self.table_elements_used = total;
        Ok(true)
    }

    fn instances(&self) -> usize {
        CORE_INSTANCES_PER_CALL
    }

    fn tables(&self) -> usize {
        16
    }

    fn memories(&self) -> usize {
        4
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use wasmtime::{Engine, Instance, Module, Store};

    /// A module with four memories, each of which grows by 16 pages (1 MiB) per call.
    const FOUR_MEMORIES: &str = r#"(module
        (memory $a 0) (memory $b 0) (memory $c 0) (memory $d 0)
        (func (export "grow") (result i32)
            (drop (memory.grow $a (i32.const 16)))
            (drop (memory.grow $b (i32.const 16)))
            (drop (memory.grow $c (i32.const 16)))
            (memory.grow $d (i32.const 16))))"#;

    fn store(call_mib: usize, plugin: &Arc<PluginBudget>) -> (Store<CallLimiter>, Instance) {
        let engine = Engine::default();
        let module = Module::new(&engine, wat::parse_str(FOUR_MEMORIES).unwrap()).unwrap();
        let mut store = Store::new(&engine, CallLimiter::new(call_mib << 20, plugin.clone()));
        store.limiter(|l| l);
        let instance = Instance::new(&mut store, &module, &[]).unwrap();
        (store, instance)
    }

    fn grow(store: &mut Store<CallLimiter>, instance: &Instance) -> wasmtime::Result<i32> {
        let f = instance.get_typed_func::<(), i32>(&mut *store, "grow")?;
        f.call(&mut *store, ())
    }

    #[test]
    fn all_memories_of_a_call_share_its_limit() {
        let plugin = PluginBudget::new(1 << 30);
        let (mut store, instance) = store(6, &plugin);
        // Four memories of 1 MiB: 4 MiB of the call's 6.
        assert!(grow(&mut store, &instance).is_ok());
        // Four more would make 8 MiB: each memory alone is under 6, together they are not.
        let err = grow(&mut store, &instance).unwrap_err();
        assert!(err.downcast_ref::<MemoryCapReached>().is_some(), "{err:?}");
        assert_eq!(
            plugin.used.load(std::sync::atomic::Ordering::Relaxed),
            6 << 20
        );
        drop(store);
        assert_eq!(plugin.used.load(std::sync::atomic::Ordering::Relaxed), 0);
    }

    #[test]
    fn calls_of_one_plugin_share_its_budget() {
        let plugin = PluginBudget::new(6 << 20);
        let (mut first, a) = store(64, &plugin);
        let (mut second, b) = store(64, &plugin);
        assert!(grow(&mut first, &a).is_ok());
        let err = grow(&mut second, &b).unwrap_err();
        assert!(
            matches!(
                err.downcast_ref::<MemoryCapReached>(),
                Some(MemoryCapReached::Plugin(_))
            ),
            "{err:?}"
        );
        drop(first);
        let (mut third, c) = store(64, &plugin);
        assert!(grow(&mut third, &c).is_ok());
    }
}
