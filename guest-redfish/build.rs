//! Link-time settings of the plugin component.
fn main() {
    // A 256 KiB shadow stack instead of Rust's default 1 MiB: it sits at the bottom of
    // linear memory, so fewer pages are touched per call and the host's pooled memory
    // slot resets cheaply between calls.
    if std::env::var("CARGO_CFG_TARGET_ARCH").as_deref() == Ok("wasm32") {
        println!("cargo:rustc-link-arg=-zstack-size=262144");
    }
}
