//! What a plugin call came to, in the controllers' terms, and how a failure (of the call
//! or of what a reconcile read before it) shows on the object. Shared by every kind.
use std::time::Duration;

use hyperplug_runtime::{CallError, Plugin, PluginError};
use kube::Api;
use kube::api::DynamicObject;
use kube::runtime::controller::Action;

use super::output::Check;
use crate::controller::error::{Error, Result};
use crate::controller::schedule::requeue;
use crate::controller::write::Writes;
use crate::controller::write::conditions::{self, Condition, READY, reasons};
use crate::controller::write::events::Event;
use crate::status::{Progressing, Status};

pub enum Outcome<T> {
    Done(T),
    Failed(Error),
}

/// A call's result as the controllers act on it. Sandbox failures that are
/// deterministic for the same input (a trap, a panic, a limit) are terminal until the
/// spec changes, and so is a result the host will not write (`InvalidPluginOutput`); a
/// timeout may pass on its own. A terminal error without a reason or message of its own
/// gets one that says so.
pub fn of<T: Check>(
    plugin: &str,
    call: &str,
    result: std::result::Result<std::result::Result<T, PluginError>, CallError>,
) -> Outcome<T> {
    let silent = || format!("plugin {plugin} gave no message from {call}");
    match result {
        Ok(Ok(value)) => match value.check() {
            Ok(()) => Outcome::Done(value),
            Err(invalid) => Outcome::Failed(Error::Terminal {
                reason: reasons::INVALID_PLUGIN_OUTPUT.into(),
                message: format!("plugin {plugin} returned from {call}: {}", invalid.0),
            }),
        },
        Ok(Err(PluginError::Transient(e))) => {
            Outcome::Failed(Error::Transient(if e.message.is_empty() {
                silent()
            } else {
                e.message
            }))
        }
        Ok(Err(PluginError::Terminal(e))) => Outcome::Failed(Error::Terminal {
            reason: conditions::reason_or(&e.reason, reasons::PLUGIN_FAILURE),
            message: if e.message.is_empty() {
                silent()
            } else {
                e.message
            },
        }),
        Ok(Err(PluginError::InvalidSpec(e))) => Outcome::Failed(Error::Terminal {
            reason: reasons::INVALID_SPEC.into(),
            message: match (e.field.is_empty(), e.message.is_empty()) {
                (true, true) => format!("plugin {plugin} found the spec invalid, naming no field"),
                (true, false) => format!("spec: {}", e.message),
                (false, true) => format!("{}: invalid", e.field),
                (false, false) => format!("{}: {}", e.field, e.message),
            },
        }),
        Err(
            e @ (CallError::Timeout { .. }
            | CallError::Busy { .. }
            | CallError::Crowded { .. }
            | CallError::TenantAtShare { .. }),
        ) => Outcome::Failed(Error::Call(e)),
        Err(e @ CallError::Credentials { .. }) => Outcome::Failed(Error::Terminal {
            reason: reasons::CREDENTIALS_ERROR.into(),
            message: e.to_string(),
        }),
        Err(e) => Outcome::Failed(Error::Terminal {
            reason: reasons::PLUGIN_FAILURE.into(),
            message: e.to_string(),
        }),
    }
}

/// How `err` shows on an object: the `Ready` condition says it; a terminal one also
/// becomes the phase and `failedGeneration` (no retry until the spec changes) with a
/// Warning event. The rest go to the error policy's backoff. Whether it is terminal.
pub fn failure_report(
    prev: &Progressing,
    err: &Error,
    generation: i64,
    credentials: Option<&str>,
    now: &str,
) -> (Progressing, Option<Event>, bool) {
    let (reason, message, terminal) = match err {
        Error::Terminal { reason, message } => (reason.clone(), message.clone(), true),
        Error::Credentials { reason, message } => (reason.clone(), message.clone(), false),
        other => (
            reasons::TRANSIENT_ERROR.to_string(),
            other.to_string(),
            false,
        ),
    };
    let mut next = prev.clone();
    next.conditions = conditions::merge(
        &prev.conditions,
        &[Condition::new(READY, false, &reason, &message)],
        generation,
        now,
    );
    if !terminal {
        return (next, None, false);
    }
    next.failed_generation = Some(generation);
    next.failed_credentials = credentials.map(str::to_string);
    next.phase = Some(reason.clone());
    let event = Event::warning(&reason, &message);
    (next, Some(event), true)
}

/// Show `err` on the object (see [`failure_report`]); the rest are returned for the
/// error policy to back off. A terminal error ends the reconcile: nothing is retried
/// until the spec changes or, when the call had `credentials` (their version, see
/// `credentials::CallCredentials`), until they change, looked at every resync period
/// ([`still_failing`]): a user who fixes a token fixes a Secret, not the spec.
pub async fn fail(
    writes: &Writes,
    resync: Duration,
    own: &Api<DynamicObject>,
    obj: &DynamicObject,
    err: Error,
    credentials: Option<&str>,
) -> Result<Action> {
    if let Some(action) = at_share(&err) {
        return Ok(action);
    }
    let generation = obj.metadata.generation.unwrap_or(0);
    let (next, event, terminal) = failure_report(
        &Progressing::of(obj),
        &err,
        generation,
        credentials,
        &conditions::now(),
    );
    if let Some(event) = event {
        writes.events.publish(obj, &event).await;
    }
    writes.status(own, obj, &next).await?;
    match (terminal, credentials) {
        (true, Some(_)) => Ok(Action::requeue(resync)),
        (true, None) => Ok(Action::await_change()),
        (false, _) => Err(err),
    }
}

/// A call not started because its tenant's calls hold or wait for all the plugin slots
/// it may have: nothing failed, so nothing is shown on the object (no condition, no
/// event) and no backoff grows; the reconcile ends, its worker free for other tenants'
/// objects, and the object comes back shortly ([`requeue::TENANT_AT_SHARE`]).
pub fn at_share(err: &Error) -> Option<Action> {
    matches!(err, Error::Call(CallError::TenantAtShare { .. }))
        .then(|| Action::requeue(requeue::TENANT_AT_SHARE))
}

/// Before a reconcile reads anything for a plugin call of an object in `namespace`: if
/// the call would be refused ([`at_share`]), the reconcile ends at once instead.
pub fn tenant_at_share(plugin: &Plugin, namespace: &str) -> Option<Action> {
    plugin
        .runtime()
        .tenant_at_share(namespace)
        .then(|| Action::requeue(requeue::TENANT_AT_SHARE))
}

/// How a reconcile of an object that failed for good goes on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Failed {
    /// It did not fail on this generation: go on.
    No,
    /// It did, with no credentials to watch: stop here.
    Stop,
    /// It did, with these credentials: go on only if they changed since.
    UnlessChanged(String),
}

/// Whether `status` records a terminal failure of `generation` (a deleting object is
/// always tried: deletion must go on).
pub fn still_failing(status: &Progressing, generation: Option<i64>, deleting: bool) -> Failed {
    if deleting || status.failed_generation.is_none() || status.failed_generation != generation {
        return Failed::No;
    }
    match &status.failed_credentials {
        Some(version) => Failed::UnlessChanged(version.clone()),
        None => Failed::Stop,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use hyperplug_runtime::bindings::types::{InvalidSpec, TerminalError, TransientError};

    fn outcome(
        result: std::result::Result<
            Option<hyperplug_runtime::bindings::types::Progress>,
            PluginError,
        >,
    ) -> String {
        match of("p", "machine.delete", Ok(result)) {
            Outcome::Done(_) => "done".into(),
            Outcome::Failed(e) => format!("{} | {e}", e.metric_label()),
        }
    }

    #[test]
    fn errors_without_words_get_some_that_say_so() {
        let terminal = PluginError::Terminal(TerminalError {
            reason: String::new(),
            message: String::new(),
        });
        assert_eq!(
            outcome(Err(terminal)),
            "terminal | PluginFailure: plugin p gave no message from machine.delete"
        );
        let odd = PluginError::Terminal(TerminalError {
            reason: "not camel case".into(),
            message: "m".into(),
        });
        assert_eq!(outcome(Err(odd)), "terminal | PluginFailure: m");
        let transient = PluginError::Transient(TransientError {
            message: String::new(),
            retry_after_ms: None,
        });
        assert_eq!(
            outcome(Err(transient)),
            "transient | plugin p gave no message from machine.delete"
        );
        let invalid = PluginError::InvalidSpec(InvalidSpec {
            field: String::new(),
            message: String::new(),
        });
        assert_eq!(
            outcome(Err(invalid)),
            "terminal | InvalidSpec: plugin p found the spec invalid, naming no field"
        );
    }

    #[test]
    fn a_result_out_of_bounds_is_terminal_naming_the_call() {
        let big = hyperplug_runtime::bindings::types::Progress {
            state: "x".repeat(crate::controller::call::output::MAX_STATE_BYTES + 1),
            phase: "Deleting".into(),
            message: String::new(),
            requeue_after_ms: None,
            waits: vec![],
            durable: true,
        };
        let text = outcome(Ok(Some(big)));
        assert!(
            text.starts_with("terminal | InvalidPluginOutput: plugin p returned from machine.delete: progress.state is"),
            "{text}"
        );
    }

    #[test]
    fn a_terminal_failure_stops_retries_with_one_warning_and_a_transient_one_does_not() {
        let err = Error::Terminal {
            reason: "TemplateNotFound".into(),
            message: "no template 4242".into(),
        };
        let (next, event, terminal) =
            failure_report(&Progressing::default(), &err, 3, Some("v1"), "t");
        assert!(terminal);
        assert_eq!(next.failed_generation, Some(3));
        assert_eq!(next.failed_credentials.as_deref(), Some("v1"));
        assert_eq!(
            still_failing(&next, Some(3), false),
            Failed::UnlessChanged("v1".into())
        );
        assert_eq!(
            still_failing(&next, Some(4), false),
            Failed::No,
            "a new spec"
        );
        assert_eq!(still_failing(&next, Some(3), true), Failed::No, "deleting");
        assert_eq!(next.phase.as_deref(), Some("TemplateNotFound"));
        assert_eq!(next.conditions[0].reason, "TemplateNotFound");
        let event = event.unwrap();
        assert!(event.warning && event.reason == "TemplateNotFound");
        let (next, event, terminal) = failure_report(
            &Progressing::default(),
            &Error::Transient("503".into()),
            3,
            Some("v1"),
            "t",
        );
        assert!(!terminal && event.is_none() && next.failed_generation.is_none());
        assert_eq!(next.conditions[0].reason, "TransientError");
        assert_eq!(next.conditions[0].message, "503");
        assert_eq!(still_failing(&next, Some(3), false), Failed::No);
    }

    #[test]
    fn credentials_that_cannot_be_used_show_their_reason_and_are_retried() {
        let err = Error::Credentials {
            reason: "CredentialsNotFound".into(),
            message: "credentials Secret hp/pve not found".into(),
        };
        let (next, event, terminal) = failure_report(&Progressing::default(), &err, 1, None, "t");
        assert!(!terminal && event.is_none() && next.failed_generation.is_none());
        assert_eq!(next.conditions[0].reason, "CredentialsNotFound");
        assert_eq!(
            next.conditions[0].message,
            "credentials Secret hp/pve not found"
        );
    }

    #[test]
    fn a_call_that_found_every_slot_busy_is_retried() {
        let busy = CallError::Busy {
            plugin: "p".into(),
            call: "machine.delete",
            message: "maximum concurrent component instance limit of 9 reached".into(),
        };
        match of::<Option<hyperplug_runtime::bindings::types::Progress>>(
            "p",
            "machine.delete",
            Err(busy),
        ) {
            Outcome::Failed(e @ Error::Call(_)) => assert_eq!(e.metric_label(), "plugin_call"),
            _ => panic!("a busy pool is not terminal"),
        }
    }

    #[test]
    fn a_call_its_tenant_had_no_room_for_is_no_failure_and_comes_back_soon() {
        let refused = CallError::TenantAtShare {
            plugin: "p".into(),
            call: "machine.create",
            tenant: "slow".into(),
            held: 12,
            share: 12,
        };
        let Outcome::Failed(err) = of::<Option<hyperplug_runtime::bindings::types::Progress>>(
            "p",
            "machine.create",
            Err(refused),
        ) else {
            panic!("not started is not done");
        };
        assert_eq!(
            at_share(&err),
            Some(Action::requeue(requeue::TENANT_AT_SHARE))
        );
        assert_eq!(at_share(&Error::Transient("503".into())), None);
    }

    /// Found at 10,000 machines: 16 first steps at once, each reading a listing of
    /// 10,000 resources, held the plugin's memory budget, and the calls refused were failed
    /// for good.
    #[test]
    fn a_call_refused_by_the_plugins_shared_memory_budget_is_retried() {
        let crowded = CallError::Crowded {
            plugin: "p".into(),
            call: "machine.create",
            limit: "128 MiB of memory".into(),
            flag: "--plugin-memory-per-plugin-mib",
        };
        assert!(
            crowded
                .to_string()
                .contains("--plugin-memory-per-plugin-mib")
        );
        match of::<Option<hyperplug_runtime::bindings::types::Progress>>(
            "p",
            "machine.create",
            Err(crowded),
        ) {
            Outcome::Failed(Error::Call(_)) => {}
            _ => panic!("calls at once filling a shared budget are not terminal"),
        }
    }
}
