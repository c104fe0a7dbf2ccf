//! The Proxmox plugin through a cluster and a machine's whole life against PVE replies
//! the input makes up (`hyperplug_fuzz::script` describes the format).
#![no_main]
use libfuzzer_sys::fuzz_target;

fuzz_target!(|input: &[u8]| {
    hyperplug_fuzz::lifecycle::run::<hyperplug_fuzz::Proxmox>(input);
});
