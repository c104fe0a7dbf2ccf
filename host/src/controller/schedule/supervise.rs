//! The controllers' tasks, and what happens when one ends.
use std::collections::HashMap;

use futures::future::BoxFuture;

/// Each controller on its own task, on the runtime's workers: its watches' decoding and
/// its queue no longer share the one thread that started the runtime with every other
/// controller's (kube already runs each reconcile as a task of its own). Returns when
/// the first one ends, with an error naming it: a controller never ends by itself, so
/// the manager stops rather than run on without it. Dropping the future aborts them all
/// (leader lost, interrupted).
pub async fn until_one_ends(running: Vec<(String, BoxFuture<'static, ()>)>) -> anyhow::Result<()> {
    let mut controllers = tokio::task::JoinSet::new();
    let mut names = HashMap::new();
    for (name, c) in running {
        names.insert(controllers.spawn(c).id(), name);
    }
    let name = |id| names.get(&id).cloned().unwrap_or_default();
    match controllers.join_next_with_id().await {
        None => Ok(()),
        Some(Ok((id, ()))) => {
            anyhow::bail!("the controller of {} stopped: its watch ended", name(id))
        }
        Some(Err(e)) => anyhow::bail!("the controller of {} stopped: {e}", name(e.id())),
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicBool, Ordering};

    use super::*;

    /// Sets its flag when dropped: a task aborted drops its future.
    struct Dropped(Arc<AtomicBool>);
    impl Drop for Dropped {
        fn drop(&mut self) {
            self.0.store(true, Ordering::SeqCst);
        }
    }

    /// Never ends; its flag is set when it is dropped, polled or not (the guard is made
    /// before the task is spawned, so an abort before its first poll counts too).
    fn forever(flag: Arc<AtomicBool>) -> BoxFuture<'static, ()> {
        let guard = Dropped(flag);
        Box::pin(async move {
            let _guard = guard;
            std::future::pending::<()>().await
        })
    }

    /// `ending` as the machines' controller, beside a clusters' one that never ends
    /// (its flag tells whether it was aborted).
    fn beside_one_that_never_ends(
        ending: BoxFuture<'static, ()>,
    ) -> (Arc<AtomicBool>, Vec<(String, BoxFuture<'static, ()>)>) {
        let other = Arc::new(AtomicBool::new(false));
        let running = vec![
            (
                "ExampleCluster (plugin p)".to_string(),
                forever(other.clone()),
            ),
            ("ExampleMachine (plugin p)".to_string(), ending),
        ];
        (other, running)
    }

    // `#[tokio::test]` runs on one thread: after `yield_now`, the aborted tasks have been
    // cancelled (their futures dropped).

    #[tokio::test]
    async fn a_controller_that_ends_stops_the_manager_and_names_itself() {
        let (other, running) = beside_one_that_never_ends(Box::pin(async {}));
        let err = until_one_ends(running).await.unwrap_err().to_string();
        assert_eq!(
            err,
            "the controller of ExampleMachine (plugin p) stopped: its watch ended"
        );
        // The set went with the call: the others were aborted, not left running.
        tokio::task::yield_now().await;
        assert!(other.load(Ordering::SeqCst));
    }

    #[tokio::test]
    async fn a_controller_that_panics_stops_the_manager() {
        let (other, running) = beside_one_that_never_ends(Box::pin(async {
            if std::hint::black_box(true) {
                panic!("boom")
            }
        }));
        let err = until_one_ends(running).await.unwrap_err().to_string();
        assert!(
            err.starts_with("the controller of ExampleMachine (plugin p) stopped: task"),
            "{err}"
        );
        tokio::task::yield_now().await;
        assert!(other.load(Ordering::SeqCst), "the others are aborted");
    }

    #[tokio::test]
    async fn dropping_the_manager_aborts_every_controller() {
        let flags: Vec<_> = (0..3).map(|_| Arc::new(AtomicBool::new(false))).collect();
        let running = flags
            .iter()
            .enumerate()
            .map(|(i, f)| (format!("kind {i}"), forever(f.clone())))
            .collect();
        let run = tokio::spawn(until_one_ends(running));
        // Let it spawn the controllers into its set (it then waits for one to end).
        tokio::task::yield_now().await;
        assert!(!run.is_finished());
        assert!(
            flags.iter().all(|f| !f.load(Ordering::SeqCst)),
            "all running"
        );
        run.abort();
        let _ = run.await;
        tokio::task::yield_now().await;
        assert!(flags.iter().all(|f| f.load(Ordering::SeqCst)));
    }
}
