//! Any label and files: an image that reads back exactly, or an error; and a seed
//! whose meta-data YAML gives its values back.
#![no_main]
use libfuzzer_sys::fuzz_target;

fuzz_target!(|input: &[u8]| {
    hyperplug_fuzz::nocloud::run(input);
});
