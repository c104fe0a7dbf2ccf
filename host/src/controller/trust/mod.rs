pub mod adoption;
pub mod ownership;
pub(crate) mod unverified;
