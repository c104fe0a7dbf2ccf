pub(crate) mod coalesce;
pub mod conditions;
pub(crate) mod events;
pub(crate) mod patch;
pub(crate) mod written;
