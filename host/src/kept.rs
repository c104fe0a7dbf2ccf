//! The objects the manager keeps for itself (the ownership key Secret, the OCI pins
//! ConfigMap): one way to name them, so an administrator who lists the cluster's
//! objects finds every one by its label and reads what it is for in its annotation.
use kube::api::ObjectMeta;

/// The label every object the manager keeps for itself carries.
pub const PART_OF: (&str, &str) = ("app.kubernetes.io/part-of", "hyperplug");
/// The annotation that says what such an object is for.
pub const WHAT: &str = "hyperplug.dev/what";

/// The metadata of an object the manager keeps: its name, [`PART_OF`], and `what` it
/// is for under [`WHAT`].
pub fn meta(name: &str, what: &str) -> ObjectMeta {
    ObjectMeta {
        name: Some(name.into()),
        labels: Some([(PART_OF.0.into(), PART_OF.1.into())].into()),
        annotations: Some([(WHAT.into(), what.into())].into()),
        ..Default::default()
    }
}
