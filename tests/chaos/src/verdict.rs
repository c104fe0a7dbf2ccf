//! The invariants, judged from the simulator's state and records and from the API
//! server at the end of a run, as one table. Every row must read 0 or yes.
use std::collections::{BTreeMap, BTreeSet};
use std::fmt;

use serde_json::Value;

use crate::ledger::Ledger;

/// The marker line the plugin ends a VM's description with.
const MARKER: &str = "hyperplug.machine-uid=";
/// The name pve-sim gives the VM a competing client makes when a clone loses its VMID.
const RACE_WINNER: &str = "vmid-race-";

/// The machine UID a VM's config marks it with (a line of its description that is
/// exactly the marker).
pub fn marker_of(config: &Value) -> Option<&str> {
    config["description"]
        .as_str()?
        .lines()
        .find_map(|l| l.trim().strip_prefix(MARKER))
}

fn smbios_uuid(config: &Value) -> Option<&str> {
    config["smbios1"]
        .as_str()?
        .split(',')
        .find_map(|kv| kv.strip_prefix("uuid="))
}

fn vmid(vm: &Value) -> u64 {
    vm["vmid"].as_u64().unwrap_or_default()
}

/// The VM planted out of band in the managed VMID range, as it was made.
#[derive(Debug, Clone)]
pub struct Foreign {
    pub vmid: u32,
    pub digest: String,
}

/// What the run saw at its end.
#[derive(Debug, Default)]
pub struct Evidence {
    /// Every VM the simulator has (`/_sim/vms`).
    pub final_vms: Vec<Value>,
    /// Every VM a destroy task removed (`/_sim/destroyed`).
    pub destroyed: Vec<Value>,
    /// The principal the manager's credentials authenticate as.
    pub manager_user: String,
    pub foreign: Option<Foreign>,
    /// Infrastructure objects still carrying our finalizer.
    pub stuck: Vec<String>,
    /// Machines that were to be provisioned and were not.
    pub not_provisioned: Vec<String>,
    /// Each out-of-band change to a machine's VM, and whether drift was reported for it.
    pub drift: Vec<(String, bool)>,
}

#[derive(Debug, Clone)]
pub struct Row {
    pub invariant: &'static str,
    pub value: String,
    pub expected: &'static str,
    /// What makes the value what it is, when it is not the expected one.
    pub details: Vec<String>,
}

impl Row {
    fn count(invariant: &'static str, details: Vec<String>) -> Row {
        Row {
            invariant,
            value: details.len().to_string(),
            expected: "0",
            details,
        }
    }

    fn yes(invariant: &'static str, details: Vec<String>) -> Row {
        Row {
            invariant,
            value: if details.is_empty() { "yes" } else { "no" }.into(),
            expected: "yes",
            details,
        }
    }

    pub fn holds(&self) -> bool {
        self.value == self.expected
    }
}

#[derive(Debug, Clone)]
pub struct Table {
    pub rows: Vec<Row>,
}

impl Table {
    pub fn holds(&self) -> bool {
        self.rows.iter().all(Row::holds)
    }

    /// `(invariant, value)` per row, for a test to compare with what it expects.
    pub fn values(&self) -> Vec<(&'static str, String)> {
        self.rows
            .iter()
            .map(|r| (r.invariant, r.value.clone()))
            .collect()
    }
}

impl fmt::Display for Table {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(f, "| invariant | value | expected |")?;
        writeln!(f, "|---|---:|---:|")?;
        for r in &self.rows {
            writeln!(f, "| {} | {} | {} |", r.invariant, r.value, r.expected)?;
        }
        for r in self.rows.iter().filter(|r| !r.holds()) {
            writeln!(f, "\n{} ({}):", r.invariant, r.value)?;
            for d in &r.details {
                writeln!(f, "  - {d}")?;
            }
        }
        Ok(())
    }
}

pub const ORPHAN_VMS: &str = "orphan VMs";
pub const DOUBLE_VMS: &str = "machines with more than one VM";
pub const NOT_OWNED_DESTROYED: &str = "VMs destroyed that the deleting machine did not own";
pub const STUCK: &str = "objects stuck with our finalizer";
pub const NOT_PROVISIONED: &str = "machines not provisioned";
pub const FOREIGN_UNTOUCHED: &str = "foreign VM untouched";
pub const DRIFT_REPORTED: &str = "drift reported for the out-of-band changes";

pub fn judge(ledger: &Ledger, e: &Evidence) -> Table {
    Table {
        rows: vec![
            Row::count(ORPHAN_VMS, orphans(ledger, e)),
            Row::count(DOUBLE_VMS, doubles(ledger, e)),
            Row::count(NOT_OWNED_DESTROYED, destroyed_not_owned(ledger, e)),
            Row::count(STUCK, e.stuck.clone()),
            Row::count(NOT_PROVISIONED, e.not_provisioned.clone()),
            Row::yes(FOREIGN_UNTOUCHED, foreign_touched(e)),
            Row::yes(
                DRIFT_REPORTED,
                e.drift
                    .iter()
                    .filter(|(_, reported)| !reported)
                    .map(|(what, _)| format!("no drift reported: {what}"))
                    .collect(),
            ),
        ],
    }
}

fn is_template(vm: &Value) -> bool {
    vm["template"] == true || vm["config"]["template"] == "1" || vm["config"]["template"] == 1
}

/// Made by someone else: the VM planted out of band, or one a competing client made
/// when a clone lost its VMID.
fn is_foreign(vm: &Value, e: &Evidence) -> bool {
    e.foreign
        .as_ref()
        .is_some_and(|f| vmid(vm) == u64::from(f.vmid))
        || vm["config"]["name"]
            .as_str()
            .is_some_and(|n| n.starts_with(RACE_WINNER))
}

fn describe(ledger: &Ledger, vm: &Value) -> String {
    let owner = match marker_of(&vm["config"]) {
        Some(uid) => match ledger.by_uid(uid) {
            Some(m) => format!("of {}", m.key()),
            None => format!("marked for an unknown machine {uid}"),
        },
        None if vm["config"]["lock"] == "clone" => "an unfinished clone".into(),
        None => "with no marker".into(),
    };
    format!(
        "VM {} ({}) on {}, {owner}",
        vmid(vm),
        vm["config"]["name"].as_str().unwrap_or("-"),
        vm["node"].as_str().unwrap_or("-"),
    )
}

/// VMs left at the end (every machine is deleted by then) that are not templates and
/// not someone else's.
fn orphans(ledger: &Ledger, e: &Evidence) -> Vec<String> {
    e.final_vms
        .iter()
        .filter(|vm| !is_template(vm) && !is_foreign(vm, e))
        .map(|vm| describe(ledger, vm))
        .collect()
}

/// Machines whose marker was on more than one VM over the run (a VM is its VMID and
/// SMBIOS UUID: a migration keeps both). A failed clone removes its VM itself and is
/// never destroyed, so it does not count.
fn doubles(ledger: &Ledger, e: &Evidence) -> Vec<String> {
    let mut vms: BTreeMap<&str, BTreeSet<(u64, &str)>> = BTreeMap::new();
    let finished = e
        .final_vms
        .iter()
        .filter(|vm| vm["config"]["lock"] != "clone")
        .chain(e.destroyed.iter());
    for vm in finished {
        if let Some(uid) = marker_of(&vm["config"]) {
            vms.entry(uid)
                .or_default()
                .insert((vmid(vm), smbios_uuid(&vm["config"]).unwrap_or_default()));
        }
    }
    vms.into_iter()
        .filter(|(_, set)| set.len() > 1)
        .map(|(uid, set)| {
            let who = ledger.by_uid(uid).map_or(uid.to_string(), |m| m.key());
            let ids: Vec<String> = set.iter().map(|(id, _)| id.to_string()).collect();
            format!("{who}: VMs {}", ids.join(", "))
        })
        .collect()
}

/// VMs the manager destroyed that carried no marker of a machine whose deletion had
/// been asked for by then.
fn destroyed_not_owned(ledger: &Ledger, e: &Evidence) -> Vec<String> {
    e.destroyed
        .iter()
        .filter(|d| d["user"] == e.manager_user.as_str())
        .filter_map(|d| {
            let at = d["at_ms"].as_u64().unwrap_or_default();
            let owner = marker_of(&d["config"]).and_then(|uid| ledger.by_uid(uid));
            match owner {
                Some(m) if m.delete_ms.is_some_and(|t| t <= at) => None,
                Some(m) => Some(format!(
                    "{}: destroyed while {} was not being deleted",
                    describe(ledger, d),
                    m.key()
                )),
                None => Some(describe(ledger, d)),
            }
        })
        .collect()
}

/// What happened to someone else's VMs: the planted one must be there as it was made,
/// and no foreign VM may have been destroyed by the manager.
fn foreign_touched(e: &Evidence) -> Vec<String> {
    let mut out = vec![];
    if let Some(f) = &e.foreign {
        match e.final_vms.iter().find(|vm| vmid(vm) == u64::from(f.vmid)) {
            None => out.push(format!("the foreign VM {} is gone", f.vmid)),
            Some(vm) if vm["digest"] != f.digest.as_str() => out.push(format!(
                "the foreign VM {} was changed: {}",
                f.vmid, vm["config"]
            )),
            Some(_) => {}
        }
    } else {
        out.push("no foreign VM was planted".into());
    }
    out.extend(
        e.destroyed
            .iter()
            .filter(|d| d["user"] == e.manager_user.as_str() && is_foreign(d, e))
            .map(|d| format!("the manager destroyed foreign VM {}", vmid(d))),
    );
    out
}
