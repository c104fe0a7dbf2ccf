//! 50 machines across 5 clusters, created and deleted in waves while PVE fails like PVE,
//! the leading manager is SIGKILLed once, writers conflict and VMs change out of band:
//! every invariant holds. `CHAOS_SEED` repeats a run's choices (the seed is printed).
//! About two minutes on two cores, in the debug build the other tests use;
//! `scripts/chaos.sh --ci` is the same run.
use std::io::Write;

use chaos::verdict::{
    DOUBLE_VMS, DRIFT_REPORTED, FOREIGN_UNTOUCHED, NOT_OWNED_DESTROYED, NOT_PROVISIONED,
    ORPHAN_VMS, STUCK,
};

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn fifty_machines_keep_every_invariant_through_faults_kills_conflicts_and_out_of_band_changes()
 {
    let hyperplug = fleet::binaries::build_hyperplug().unwrap();
    let plugin = fleet::binaries::bundled_plugin().unwrap();
    let outcome = chaos::run(&chaos::Args::ci(hyperplug, plugin))
        .await
        .unwrap();
    // The table is the run's report: written past the test harness's capture, so CI's
    // log shows it when the run passes too.
    writeln!(std::io::stderr(), "{outcome}").unwrap();
    let expected = vec![
        (ORPHAN_VMS, "0".to_string()),
        (DOUBLE_VMS, "0".into()),
        (NOT_OWNED_DESTROYED, "0".into()),
        (STUCK, "0".into()),
        (NOT_PROVISIONED, "0".into()),
        (FOREIGN_UNTOUCHED, "yes".into()),
        (DRIFT_REPORTED, "yes".into()),
    ];
    assert_eq!(outcome.table.values(), expected, "\n{outcome}");
}
