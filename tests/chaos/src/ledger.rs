//! What the run did to the API server, to judge the simulator's state against: every
//! machine with its UID (the plugin marks its VM with it) and when its deletion was asked.
use std::collections::BTreeMap;

/// One machine of the run.
#[derive(Debug, Clone)]
pub struct Machine {
    pub cluster: usize,
    pub index: usize,
    pub namespace: String,
    pub name: String,
    /// The ProxmoxMachine's UID.
    pub uid: String,
    pub created_ms: u64,
    /// When its Machine's deletion was sent (Unix ms): no VM of it may be destroyed
    /// before.
    pub delete_ms: Option<u64>,
    /// Deleted in the wave that created it, before it could be provisioned.
    pub early: bool,
}

impl Machine {
    pub fn key(&self) -> String {
        format!("{}/{}", self.namespace, self.name)
    }
}

#[derive(Debug, Default)]
pub struct Ledger {
    by_uid: BTreeMap<String, Machine>,
}

impl Ledger {
    pub fn add(&mut self, m: Machine) {
        self.by_uid.insert(m.uid.clone(), m);
    }

    pub fn by_uid(&self, uid: &str) -> Option<&Machine> {
        self.by_uid.get(uid)
    }

    pub fn find(&self, cluster: usize, index: usize) -> Option<&Machine> {
        self.by_uid
            .values()
            .find(|m| m.cluster == cluster && m.index == index)
    }

    /// Records that the machine's deletion is being sent now.
    pub fn deleting(&mut self, cluster: usize, index: usize, early: bool, now_ms: u64) {
        if let Some(m) = self
            .by_uid
            .values_mut()
            .find(|m| m.cluster == cluster && m.index == index)
        {
            m.delete_ms.get_or_insert(now_ms);
            m.early |= early;
        }
    }

    pub fn machines(&self) -> impl Iterator<Item = &Machine> {
        self.by_uid.values()
    }

    pub fn len(&self) -> usize {
        self.by_uid.len()
    }

    pub fn is_empty(&self) -> bool {
        self.by_uid.is_empty()
    }
}
