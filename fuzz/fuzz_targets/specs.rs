//! Any text as every spec of both plugins: a result, or an error naming a field.
#![no_main]
use libfuzzer_sys::fuzz_target;

fuzz_target!(|input: &[u8]| {
    hyperplug_fuzz::specs::run(input);
});
