//! Property tests of the host's handling of a plugin's machine result (issue 15's fuzzing
//! of plugin results, with proptest: the inputs are structured, and a libFuzzer build of
//! the host would instrument wasmtime and kube). Whatever an untrusted plugin returns
//! goes the way a reconcile takes it — checked ([`crate::controller::call::output`]), then either written
//! as the status ([`super::report::after_call`]) or shown as a terminal
//! failure ([`crate::controller::call::outcome::failure_report`]) — and must end as a status the API server
//! stores: no panic, CamelCase reasons, bounded messages, and a size that fits in an
//! object.
use proptest::collection::vec;
use proptest::prelude::*;

use super::report::after_call;
use crate::controller::call::outcome::{self, Outcome, failure_report};
use crate::controller::call::output::{
    MAX_ENTRIES, MAX_KEY_BYTES, MAX_STATE_BYTES, MAX_VALUE_BYTES,
};
use crate::controller::write::conditions::{self, MAX_MESSAGE, reasons};
use crate::status::InfraMachineStatus;
use hyperplug_runtime::bindings::machine::{
    AddressPool, AddressRequest, AddressType, Drift, MachineAddress, MachineStatus,
};
use hyperplug_runtime::bindings::types::Progress;

/// What a status written by a reconcile may take at most, encoded as the API server
/// stores it: etcd refuses a whole object beyond 1.5 MiB, and the spec and metadata
/// need their share.
const MAX_STATUS_JSON: usize = 1 << 20;

/// Text as a plugin might return it: short and odd (any characters, empty), or one
/// character repeated to about `bound` bytes — control characters and quotes take six
/// or two bytes once JSON-encoded.
fn text(bound: usize) -> BoxedStrategy<String> {
    let repeated = (
        prop_oneof![
            Just('x'),
            Just('\u{1}'),
            Just('"'),
            Just('\u{7f}'),
            Just('é'),
            Just('🙂'),
            any::<char>()
        ],
        prop_oneof![
            Just(bound.saturating_sub(1)),
            Just(bound),
            Just(bound + 1),
            0..bound + 2,
        ],
    )
        .prop_map(|(c, bytes)| std::iter::repeat_n(c, bytes / c.len_utf8()).collect());
    prop_oneof![3 => any::<String>(), 1 => repeated].boxed()
}

/// A list of a few entries, or about as many as the host keeps.
fn list<T: std::fmt::Debug + 'static>(item: BoxedStrategy<T>) -> BoxedStrategy<Vec<T>> {
    prop_oneof![
        3 => vec(item.clone(), 0..4),
        1 => vec(item, MAX_ENTRIES - 1..=MAX_ENTRIES + 1),
    ]
    .boxed()
}

fn address_type() -> impl Strategy<Value = AddressType> {
    prop_oneof![
        Just(AddressType::InternalIp),
        Just(AddressType::ExternalIp),
        Just(AddressType::Hostname),
        Just(AddressType::InternalDns),
        Just(AddressType::ExternalDns),
    ]
}

fn drift() -> impl Strategy<Value = Option<Drift>> {
    let message = text(MAX_MESSAGE);
    prop_oneof![
        2 => Just(None),
        1 => message.clone().prop_map(|m| Some(Drift::Missing(m))),
        1 => message.clone().prop_map(|m| Some(Drift::Foreign(m))),
        1 => message.prop_map(|m| Some(Drift::Changed(m))),
    ]
}

prop_compose! {
    fn progress()(
        state in text(MAX_STATE_BYTES),
        phase in prop_oneof![Just("Cloning".to_string()), Just("VMMissing".to_string()), text(MAX_VALUE_BYTES)],
        message in text(MAX_MESSAGE),
        requeue_after_ms in any::<Option<u64>>(),
    ) -> Progress {
        Progress { state, phase, message, requeue_after_ms, waits: vec![], durable: true }
    }
}

prop_compose! {
    fn machine_status()(
        progress in progress(),
        ready in any::<bool>(),
        provider_id in proptest::option::of(text(MAX_VALUE_BYTES)),
        addresses in list((address_type(), text(MAX_VALUE_BYTES))
            .prop_map(|(address_type, address)| MachineAddress { address_type, address }).boxed()),
        failure_domain in proptest::option::of(text(MAX_KEY_BYTES)),
        address_requests in list((text(MAX_KEY_BYTES), text(MAX_KEY_BYTES))
            .prop_map(|(device, pool)| AddressRequest {
                device,
                pool: AddressPool::Reported(pool),
                claim_suffix: None,
            }).boxed()),
        needs_bootstrap in any::<bool>(),
        drift in drift(),
        details in list((text(MAX_KEY_BYTES), text(MAX_VALUE_BYTES)).boxed()),
    ) -> MachineStatus {
        MachineStatus {
            progress, ready, provider_id, addresses, failure_domain, address_requests,
            needs_bootstrap, drift, details, plugin_status: None,
        }
    }
}

/// The status a machine may have before the call: new, or provisioned and ready.
fn previous() -> impl Strategy<Value = (InfraMachineStatus, bool)> {
    prop_oneof![
        Just((InfraMachineStatus::default(), false)),
        Just((
            serde_json::from_value(serde_json::json!({
                "ready": true,
                "initialization": {"provisioned": true},
                "phase": "Ready",
                "conditions": [{"type": "Ready", "status": "True", "reason": "Provisioned",
                                "message": "", "lastTransitionTime": "t0"}],
            }))
            .expect("a status"),
            true,
        )),
    ]
}

/// Every condition has a reason the API server and Cluster API accept and a message cut
/// to the bound; the whole status fits in an object.
fn assert_writable(status: &InfraMachineStatus) -> Result<(), TestCaseError> {
    for c in &status.progress.conditions {
        prop_assert!(conditions::is_reason(&c.reason), "reason {:?}", c.reason);
        prop_assert!(
            c.message.len() <= MAX_MESSAGE + '…'.len_utf8(),
            "{} message of {} bytes",
            c.type_,
            c.message.len()
        );
    }
    let json = serde_json::to_string(status).expect("a status serializes");
    prop_assert!(
        json.len() <= MAX_STATUS_JSON,
        "a status of {} bytes as JSON (at most {MAX_STATUS_JSON} fit in an object)",
        json.len()
    );
    Ok(())
}

proptest! {
    // No regression files (a failing input holds up to megabytes of text): a failure
    // found here gets a unit test next to the code it fixes (output.rs has one).
    #![proptest_config(ProptestConfig {
        cases: 512,
        failure_persistence: None,
        ..ProptestConfig::default()
    })]

    /// A result the host accepts becomes a status it can write; one it refuses becomes a
    /// terminal InvalidPluginOutput on the Ready condition, naming what was wrong.
    #[test]
    fn any_machine_result_is_written_or_refused_with_a_clear_condition(
        result in machine_status(),
        (prev, provisioned) in previous(),
    ) {
        match outcome::of("p", "create", Ok(Ok(result))) {
            Outcome::Done(result) => {
                let report = after_call(&prev, &result, provisioned, 2, "t1");
                assert_writable(&report.status)?;
                for e in &report.events {
                    prop_assert!(conditions::is_reason(&e.reason), "event reason {:?}", e.reason);
                }
            }
            Outcome::Failed(err) => {
                let (next, event, terminal) = failure_report(&prev.progress, &err, 2, None, "t1");
                prop_assert!(terminal);
                let ready = conditions::find(&next.conditions, conditions::READY).expect("Ready");
                prop_assert_eq!(&ready.reason, reasons::INVALID_PLUGIN_OUTPUT);
                prop_assert!(ready.message.starts_with("plugin p returned from create: "), "{}", ready.message);
                prop_assert!(event.is_some());
                let mut status = prev.clone();
                status.progress = next;
                assert_writable(&status)?;
            }
        }
    }
}
