//! The Kubernetes shapes of the kinds a plugin declares, shared by the host, the
//! conformance kit and the tests: the CustomResourceDefinitions made from the plugin's
//! schemas (`crds`, with the finalizer webhook's configuration) and the typed `status`
//! the controllers write, whose schema the CRDs carry. Plain JSON and serde types: no
//! client, no controller, no plugin calls (the runtime runs plugins and knows no
//! Kubernetes; it only supplies the declared kinds' types).
pub mod crds;
pub mod status;
