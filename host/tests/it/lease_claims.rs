//! Claims kept as Leases on a real API server: of many objects claiming one key at
//! once exactly one is granted, across separate clients (as separate replicas would
//! be); holders find, release and lose their claims as the `claims` import promises.
use std::sync::Arc;

use hyperplug::lease_claims::LeaseClaims;
use hyperplug_runtime::{ClaimStore, ObjectRef};
use kube_world::{Plane, PlaneOpts};

fn holder(i: usize) -> ObjectRef {
    ObjectRef {
        namespace: "default".into(),
        name: format!("m{i}"),
        uid: format!("00000000-0000-4000-8000-{i:012}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_claimant_of_many_wins_and_claims_end_with_their_holder() {
    let plane = Plane::start(PlaneOpts::default()).await.expect("plane");
    let ns = plane.namespace("claims").await.expect("namespace");
    // One store per claimant, each with its own client: nothing is shared in-process.
    let stores: Vec<Arc<LeaseClaims>> = (0..8)
        .map(|_| Arc::new(LeaseClaims::new(plane.client(), &ns)))
        .collect();
    let attempts = stores.iter().enumerate().map(|(i, store)| {
        let store = store.clone();
        async move {
            let me = holder(i);
            (
                i,
                store
                    .acquire("redfish", "host/a", &me)
                    .await
                    .expect("acquire"),
            )
        }
    });
    let results = futures::future::join_all(attempts).await;
    let winners: Vec<usize> = results
        .iter()
        .filter(|(_, r)| r.is_none())
        .map(|(i, _)| *i)
        .collect();
    assert_eq!(winners.len(), 1, "{results:?}");
    let winner = holder(winners[0]);
    for (_, r) in results.iter().filter(|(_, r)| r.is_some()) {
        assert_eq!(
            r.as_deref(),
            Some(winner.uid.as_str()),
            "losers are told who holds it"
        );
    }
    let store = &stores[0];
    // Claiming again is granted to the holder; keys are per plugin.
    assert_eq!(
        store.acquire("redfish", "host/a", &winner).await.unwrap(),
        None
    );
    assert_eq!(
        store.acquire("other", "host/a", &holder(99)).await.unwrap(),
        None
    );
    assert_eq!(
        store.holder("redfish", "host/a").await.unwrap().as_deref(),
        Some(winner.uid.as_str())
    );
    assert_eq!(
        store.held("redfish", &winner.uid).await.unwrap(),
        ["host/a"]
    );
    // Only the holder releases.
    let loser = holder((winners[0] + 1) % 8);
    store
        .release("redfish", "host/a", &loser.uid)
        .await
        .unwrap();
    assert!(store.holder("redfish", "host/a").await.unwrap().is_some());
    store
        .release("redfish", "host/a", &winner.uid)
        .await
        .unwrap();
    assert_eq!(store.holder("redfish", "host/a").await.unwrap(), None);
    // An object's claims all go with it.
    store.acquire("redfish", "host/b", &loser).await.unwrap();
    store.acquire("redfish", "host/c", &loser).await.unwrap();
    assert_eq!(store.release_all(&loser.uid).await.unwrap(), 2);
    assert!(store.held("redfish", &loser.uid).await.unwrap().is_empty());
}
