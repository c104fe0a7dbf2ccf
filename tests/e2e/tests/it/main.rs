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
/// without stretching any flow's waits. The flavors flow, the longest by far (about
/// 6 min alone, each other flow 1 to 3), does not queue for one of the two: it starts at
/// once ([`LongestFlow`]) while the others take the one permit here in turn, and its
/// permit joins them when it ends. With two permits for all five, it waited behind two
/// shorter flows and ended the suite. (A run without it takes one flow at a time.)
static FLOWS: tokio::sync::Semaphore = tokio::sync::Semaphore::const_new(1);

/// The flavors flow's place among the [`FLOWS`]: held from its start, handed to the
/// other flows when it ends, however it ends.
struct LongestFlow;

impl Drop for LongestFlow {
    fn drop(&mut self) {
        FLOWS.add_permits(1);
    }
}
