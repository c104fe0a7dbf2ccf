//! The chaos crate's one test binary: the judge of the invariants on made-up evidence,
//! and the chaos run at the size CI affords.
mod judging;
mod run_at_ci_size;
