pub(crate) mod cluster;
pub(crate) mod context;
pub(crate) mod machine;
pub(crate) mod template;
