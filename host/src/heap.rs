//! The manager's heap, counted: every allocation goes through a counting wrapper of the
//! system allocator, so the bytes in use and their peak are known exactly (RSS also
//! counts the allocator's free lists, code and the plugins' engine). Exported as the
//! `hyperplug_heap_*` metrics; the scale benchmark prints them.
use peak_alloc::PeakAlloc;

#[global_allocator]
static HEAP: PeakAlloc = PeakAlloc;

/// Bytes allocated now.
pub fn in_use() -> usize {
    HEAP.current_usage()
}

/// The most bytes allocated at once since the manager started.
pub fn peak() -> usize {
    HEAP.peak_usage()
}
