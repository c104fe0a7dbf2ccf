pub mod credentials;
pub(crate) mod grants;
pub(crate) mod outcome;
pub(crate) mod output;
pub(crate) mod versions;
