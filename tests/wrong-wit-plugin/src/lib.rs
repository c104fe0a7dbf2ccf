//! Exports hyperplug:provider@0.9.0: loading it must fail with "incompatible WIT".
mod bindings {
    wit_bindgen::generate!({ path: "wit", world: "plugin" });
}
use bindings::exports::hyperplug::provider::{cluster, identity, machine};
struct Future;
bindings::export!(Future with_types_in bindings);
impl identity::Guest for Future {
    fn info() -> String {
        "future".into()
    }
}
impl cluster::Guest for Future {
    fn ping() {}
}
impl machine::Guest for Future {
    fn ping() {}
}
