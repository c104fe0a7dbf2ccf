//! The end-to-end tests, one binary: each module was a test file of its own, and its
//! tests keep their names (`cargo test -p e2e --test it quickstart_`).
mod a_capmox_management_cluster_is_taken_over_in_place;
mod clusterctl_move_to_a_second_management_cluster;
mod every_capmox_flavor_provisions_on_pve_sim;
mod quickstart_with_real_cluster_api;
mod the_demo_driver_brings_up_the_quickstart;

/// One flow at a time: each brings up whole management clusters (and a workload API
/// server), as much as this kind of machine runs well at once; as separate binaries
/// they ran one after another.
static FLOWS: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());
