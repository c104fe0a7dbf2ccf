//! The `reservations` import: short-lived, process-local holds on plugin-chosen keys,
//! so that of the concurrent calls of one manager only one object at a time proposes
//! a thing (e.g. an identifier about to be created). Advisory: nothing is stored
//! anywhere but here, nothing survives a restart, and the infrastructure's own checks
//! stay the arbiter. Bounded: a hold lasts at most [`MAX_TTL`], a plugin holds at
//! most [`MAX_HELD_PER_PLUGIN`] keys at once, a call makes at most
//! [`MAX_CALLS_PER_CALL`] reservation calls.
use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// Longest a hold lasts, whatever the plugin asks.
pub const MAX_TTL: Duration = Duration::from_secs(60);
/// Keys one plugin may hold at once (expired holds do not count).
pub const MAX_HELD_PER_PLUGIN: usize = 4_096;
/// `reservations` calls one plugin call may make.
pub const MAX_CALLS_PER_CALL: u32 = 1_000;
/// Longest key.
pub const MAX_KEY: usize = 253;

/// Who holds a key, until when.
struct Hold {
    uid: String,
    until: Instant,
}

/// Every plugin's holds, by plugin then key.
#[derive(Default)]
pub struct Reservations {
    held: Mutex<HashMap<String, HashMap<String, Hold>>>,
}

/// Why a reservation could not even be judged.
#[derive(Debug, PartialEq, Eq)]
pub enum Refusal {
    /// The key is empty or longer than [`MAX_KEY`].
    BadKey,
    /// The plugin holds [`MAX_HELD_PER_PLUGIN`] live keys already.
    Full,
}

impl Reservations {
    /// Hold `key` of `plugin` for the object `uid` for `ttl` (capped): true when held
    /// (also when `uid` held it already: the hold is renewed), false when another
    /// object holds it.
    pub fn reserve(
        &self,
        plugin: &str,
        key: &str,
        uid: &str,
        ttl: Duration,
    ) -> Result<bool, Refusal> {
        if key.is_empty() || key.len() > MAX_KEY {
            return Err(Refusal::BadKey);
        }
        let now = Instant::now();
        let until = now + ttl.min(MAX_TTL);
        let mut all = self.held.lock().expect("reservations");
        let held = all.entry(plugin.to_string()).or_default();
        match held.get_mut(key) {
            Some(h) if h.until > now && h.uid != uid => return Ok(false),
            Some(h) => {
                *h = Hold {
                    uid: uid.into(),
                    until,
                };
                return Ok(true);
            }
            None => {}
        }
        if held.len() >= MAX_HELD_PER_PLUGIN {
            held.retain(|_, h| h.until > now);
            if held.len() >= MAX_HELD_PER_PLUGIN {
                return Err(Refusal::Full);
            }
        }
        held.insert(
            key.into(),
            Hold {
                uid: uid.into(),
                until,
            },
        );
        Ok(true)
    }

    /// Let `key` go if `uid` holds it.
    pub fn release(&self, plugin: &str, key: &str, uid: &str) {
        let mut all = self.held.lock().expect("reservations");
        if let Some(held) = all.get_mut(plugin) {
            if held.get(key).is_some_and(|h| h.uid == uid) {
                held.remove(key);
            }
            if held.is_empty() {
                all.remove(plugin);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const LONG: Duration = Duration::from_secs(30);

    #[test]
    fn of_two_objects_only_the_first_holds_a_key_until_it_lets_go() {
        let r = Reservations::default();
        assert_eq!(r.reserve("p", "vmid:101", "a", LONG), Ok(true));
        assert_eq!(r.reserve("p", "vmid:101", "a", LONG), Ok(true));
        assert_eq!(r.reserve("p", "vmid:101", "b", LONG), Ok(false));
        r.release("p", "vmid:101", "b");
        assert_eq!(r.reserve("p", "vmid:101", "b", LONG), Ok(false));
        r.release("p", "vmid:101", "a");
        assert_eq!(r.reserve("p", "vmid:101", "b", LONG), Ok(true));
    }

    #[test]
    fn an_expired_hold_is_free_and_plugins_do_not_share_keys() {
        let r = Reservations::default();
        assert_eq!(r.reserve("p", "k", "a", Duration::ZERO), Ok(true));
        assert_eq!(r.reserve("p", "k", "b", LONG), Ok(true));
        assert_eq!(r.reserve("q", "k", "a", LONG), Ok(true));
    }

    #[test]
    fn a_plugin_holds_a_bounded_number_of_keys_and_keys_are_bounded() {
        let r = Reservations::default();
        for i in 0..MAX_HELD_PER_PLUGIN {
            assert_eq!(r.reserve("p", &format!("k{i}"), "a", LONG), Ok(true));
        }
        assert_eq!(r.reserve("p", "one-more", "a", LONG), Err(Refusal::Full));
        assert_eq!(r.reserve("p", "", "a", LONG), Err(Refusal::BadKey));
        assert_eq!(
            r.reserve("p", &"x".repeat(MAX_KEY + 1), "a", LONG),
            Err(Refusal::BadKey)
        );
    }
}
