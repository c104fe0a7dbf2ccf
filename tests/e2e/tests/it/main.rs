//! The end-to-end tests, one binary: each module was a test file of its own, and its
//! tests keep their names (`cargo test -p e2e --test it quickstart_`).
mod a_capmox_management_cluster_is_taken_over_in_place;
mod clusterctl_move_to_a_second_management_cluster;
mod every_capmox_flavor_provisions_on_pve_sim;
mod quickstart_with_real_cluster_api;
mod the_demo_driver_brings_up_the_quickstart;

/// Two flows at a time: each brings up whole management clusters (and workload API
/// servers), yet spends most of its time waiting on Cluster API's requeues (the suite
/// ran at about a third of one core's worth of CPU one flow at a time); two at once is
/// what this kind of machine (2 cores, the other test binaries running beside) runs
/// without stretching any flow's waits.
static FLOWS: tokio::sync::Semaphore = tokio::sync::Semaphore::const_new(2);
