//! Which machines' plugin asked for addresses at its last step. The others have no
//! claims to read: a DHCP machine's every reconcile listed IPAddressClaims for nothing
//! (16,000 LISTs at 10,000 machines, on the API server that bounded that run).
use std::collections::HashMap;
use std::sync::Mutex;

use crate::controller::objects::Uid;

#[derive(Default)]
pub struct AskedAddresses {
    /// By object UID: whether its last step asked for addresses.
    asked: Mutex<HashMap<Uid, bool>>,
}

impl AskedAddresses {
    /// Whether machine `uid` may have claims to read. Not `owned` (no finalizer of ours
    /// yet): nothing was claimed for it, claims are made after the finalizer. Owned but
    /// not seen since this manager started: maybe.
    pub fn may_have_claims(&self, uid: &Uid, owned: bool) -> bool {
        owned
            && self
                .asked
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .get(uid)
                .copied()
                .unwrap_or(true)
    }

    /// Remember whether machine `uid`'s last step asked for addresses.
    pub fn record(&self, uid: &Uid, asked: bool) {
        self.asked
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(uid.clone(), asked);
    }

    /// Its deletion completed.
    pub fn forget(&self, uid: &Uid) {
        self.asked
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(uid);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_machine_that_asked_or_is_unknown_since_a_restart_reads_its_claims() {
        let asked = AskedAddresses::default();
        assert!(
            !asked.may_have_claims(&"new".into(), false),
            "never owned: none"
        );
        assert!(
            asked.may_have_claims(&"restart".into(), true),
            "owned, unknown: read"
        );
        asked.record(&"dhcp".into(), false);
        assert!(!asked.may_have_claims(&"dhcp".into(), true));
        asked.record(&"static".into(), true);
        assert!(asked.may_have_claims(&"static".into(), true));
        asked.forget(&"static".into());
        assert!(asked.may_have_claims(&"static".into(), true));
    }
}
