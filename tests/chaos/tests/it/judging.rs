//! The judge counts what breaks an invariant, from the simulator's records and state.
use chaos::ledger::{Ledger, Machine};
use chaos::verdict::{Evidence, Foreign, judge};
use serde_json::{Value, json};

const MANAGER: &str = "capmox@pve!capi";

fn machine(name: &str, uid: &str, delete_ms: Option<u64>) -> Machine {
    Machine {
        cluster: 0,
        index: 0,
        namespace: "ns".into(),
        name: name.into(),
        uid: uid.into(),
        created_ms: 1,
        delete_ms,
        early: false,
    }
}

fn vm(vmid: u32, name: &str, uid: Option<&str>, uuid: &str) -> Value {
    let mut config = json!({"name": name, "smbios1": format!("uuid={uuid}")});
    if let Some(uid) = uid {
        config["description"] = json!(format!("Managed by hyperplug\nhyperplug.machine-uid={uid}"));
    }
    json!({"vmid": vmid, "node": "pve1", "template": false, "digest": "d0", "config": config})
}

fn destroyed(vm: Value, user: &str, at_ms: u64) -> Value {
    let mut d = vm;
    d["user"] = json!(user);
    d["at_ms"] = json!(at_ms);
    d
}

fn evidence() -> Evidence {
    Evidence {
        final_vms: vec![vm(1500, "theirs", Some("foreign-1"), "f")],
        manager_user: MANAGER.into(),
        foreign: Some(Foreign {
            vmid: 1500,
            digest: "d0".into(),
        }),
        ..Evidence::default()
    }
}

fn value(ev: &Evidence, ledger: &Ledger, row: &str) -> String {
    judge(ledger, ev)
        .values()
        .into_iter()
        .find(|(r, _)| *r == row)
        .unwrap()
        .1
}

#[test]
fn a_clean_end_reads_zero_and_yes_everywhere() {
    let mut ledger = Ledger::default();
    ledger.add(machine("m1", "u1", Some(100)));
    let mut ev = evidence();
    ev.destroyed = vec![destroyed(vm(1001, "m1", Some("u1"), "a"), MANAGER, 200)];
    assert!(judge(&ledger, &ev).holds(), "{}", judge(&ledger, &ev));
}

#[test]
fn a_vm_left_with_our_marker_is_an_orphan_and_a_race_winners_vm_is_not() {
    let mut ledger = Ledger::default();
    ledger.add(machine("m1", "u1", Some(100)));
    let mut ev = evidence();
    ev.final_vms.push(vm(1001, "m1", Some("u1"), "a"));
    ev.final_vms.push(vm(1002, "vmid-race-1002", None, "b"));
    assert_eq!(value(&ev, &ledger, "orphan VMs"), "1");
}

#[test]
fn two_vms_with_one_machines_marker_are_a_double_even_one_after_the_other() {
    let mut ledger = Ledger::default();
    ledger.add(machine("m1", "u1", Some(100)));
    let mut ev = evidence();
    ev.destroyed = vec![
        destroyed(vm(1001, "m1", Some("u1"), "a"), MANAGER, 200),
        destroyed(vm(1003, "m1", Some("u1"), "c"), MANAGER, 300),
    ];
    assert_eq!(value(&ev, &ledger, "machines with more than one VM"), "1");
}

#[test]
fn destroying_a_vm_before_its_machine_is_deleted_or_without_our_marker_is_counted() {
    let mut ledger = Ledger::default();
    ledger.add(machine("m1", "u1", Some(500)));
    let mut ev = evidence();
    ev.destroyed = vec![
        destroyed(vm(1001, "m1", Some("u1"), "a"), MANAGER, 200),
        destroyed(vm(1002, "someone", None, "b"), MANAGER, 600),
        // The administrator's own destroy is not the manager's doing.
        destroyed(vm(1004, "m9", None, "d"), "root@pam!chaos", 50),
    ];
    assert_eq!(
        value(
            &ev,
            &ledger,
            "VMs destroyed that the deleting machine did not own"
        ),
        "2"
    );
}

#[test]
fn a_foreign_vm_changed_or_gone_is_not_untouched() {
    let ledger = Ledger::default();
    let mut changed = evidence();
    changed.final_vms[0]["digest"] = json!("d1");
    assert_eq!(value(&changed, &ledger, "foreign VM untouched"), "no");
    let mut gone = evidence();
    gone.final_vms.clear();
    assert_eq!(value(&gone, &ledger, "foreign VM untouched"), "no");
}

#[test]
fn an_out_of_band_change_without_a_drift_report_says_no() {
    let ledger = Ledger::default();
    let mut ev = evidence();
    ev.drift = vec![
        ("VM 1 destroyed".into(), true),
        ("VM 2 powered off".into(), false),
    ];
    assert_eq!(
        value(&ev, &ledger, "drift reported for the out-of-band changes"),
        "no"
    );
}
