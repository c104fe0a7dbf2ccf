//! The typed status of our kinds (defined in `hyperplug-kinds`, whose CRDs carry its
//! schema), read off an object.
use kube::api::DynamicObject;

pub use hyperplug_kinds::status::*;

/// A status type's view of an object's `status`.
pub trait Status: hyperplug_kinds::status::Status {
    /// The object's status as this type reads it (see [`from_status`]).
    ///
    /// [`from_status`]: hyperplug_kinds::status::Status::from_status
    fn of(obj: &DynamicObject) -> Self {
        Self::from_status(obj.data.get("status"))
    }
}

impl<T: hyperplug_kinds::status::Status> Status for T {}
