//! The opaque state a call hands back in its progress, and reading it on the next call.
//!
//! The host persists the string (in `status.pluginState`) before anything else and hands
//! it back verbatim. It can be lost (a crash between a side effect and the host's write,
//! a restored backup): a plugin that finds none starts from its default and finds what
//! it made by its ownership marker. A state it cannot read is another matter: something
//! wrote it that this plugin did not (an edit, another version of the plugin), so the
//! call stops with a terminal [`STATE_UNREADABLE`] error naming what does not read and
//! how to start over, which the host shows on the object, rather than acting on a guess.
//!
//! Plugins are upgraded (and rolled back) while machines are mid-way, so a state
//! carries the version of its layout (`stateVersion`, [`Versioned::VERSION`]; a state
//! without one is version 1, what plugins wrote before versions). A build reads the
//! versions from [`Versioned::OLDEST_READ`] to its own; any other is a terminal
//! [`STATE_INCOMPATIBLE`] error saying which version wrote it and which this one reads,
//! so a rollback past a layout change stops with a clear condition instead of dropping
//! what it does not know.
use serde::Serialize;
use serde::de::DeserializeOwned;

use crate::errors::terminal;
use crate::types::PluginError;

/// The reason of a terminal error for a state that does not read.
pub const STATE_UNREADABLE: &str = "StateUnreadable";
/// The reason of a terminal error for a state of a version this build does not read.
pub const STATE_INCOMPATIBLE: &str = "StateIncompatible";

/// The key of the layout version in a saved state.
const VERSION_KEY: &str = "stateVersion";

/// A plugin's state type and the layout versions this build of the plugin reads.
pub trait Versioned: Serialize + DeserializeOwned + Default {
    /// The layout this build writes. Raise it when a state of the previous layout would
    /// mean something else to this build, or this build's to the previous one; keep
    /// `OLDEST_READ` where this build still reads the old layout.
    const VERSION: u32 = 1;
    /// The oldest layout this build reads.
    const OLDEST_READ: u32 = 1;
}

/// A state kept as plain JSON, of one layout.
impl Versioned for serde_json::Value {}

const START_OVER: &str = "To start over from what the infrastructure shows (the plugin finds what it made by its ownership marker), \
     remove status.pluginState and status.failedGeneration";

/// The state `save` wrote; `T::default()` when there is none. A state that does not
/// parse as `T` is a terminal `StateUnreadable` error, one of a layout version this build
/// does not read a terminal `StateIncompatible` error: the object shows it, and removing
/// `status.pluginState` (and `status.failedGeneration`) lets the plugin start over from
/// what it finds by its ownership marker.
pub fn load<T: Versioned>(state: Option<&str>) -> Result<T, PluginError> {
    let Some(text) = state.filter(|s| !s.trim().is_empty()) else {
        return Ok(T::default());
    };
    let unreadable = |e: serde_json::Error| {
        terminal(
            STATE_UNREADABLE,
            format!(
                "status.pluginState is not a state this plugin wrote ({e}); nothing was done. {START_OVER}"
            ),
        )
    };
    let mut value: serde_json::Value = serde_json::from_str(text).map_err(unreadable)?;
    let version = match value.as_object_mut().and_then(|o| o.remove(VERSION_KEY)) {
        None => 1,
        Some(v) => v
            .as_u64()
            .and_then(|v| u32::try_from(v).ok())
            .ok_or_else(|| {
                terminal(
                    STATE_UNREADABLE,
                    format!("status.pluginState has {VERSION_KEY} {v}, not a version number; nothing was done. {START_OVER}"),
                )
            })?,
    };
    if !(T::OLDEST_READ..=T::VERSION).contains(&version) {
        let which = if version > T::VERSION {
            "a newer version of this plugin wrote it (was the plugin rolled back?)"
        } else {
            "an older version of this plugin wrote it, and this one no longer reads that layout"
        };
        return Err(terminal(
            STATE_INCOMPATIBLE,
            format!(
                "status.pluginState has layout version {version}, this plugin reads versions {}..={}: {which}; nothing was done. \
                 Run a plugin version that reads it, or: {START_OVER}",
                T::OLDEST_READ,
                T::VERSION
            ),
        ));
    }
    serde_json::from_value(value).map_err(unreadable)
}

/// The state as the string to hand back (`progress.state`), with its layout version.
pub fn save<T: Versioned>(state: &T) -> String {
    let mut value = serde_json::to_value(state).unwrap_or_default();
    if let Some(object) = value.as_object_mut() {
        object.insert(VERSION_KEY.into(), T::VERSION.into());
    }
    value.to_string()
}

#[cfg(test)]
mod tests {
    use serde::Deserialize;

    use super::*;
    use crate::types::TerminalError;

    #[derive(Debug, Default, PartialEq, Serialize, Deserialize)]
    struct Steps {
        step: u32,
        vm: Option<String>,
    }

    impl Versioned for Steps {
        const VERSION: u32 = 3;
        const OLDEST_READ: u32 = 2;
    }

    /// The same layout, as version 1 (what plugins wrote before versions).
    #[derive(Debug, Default, PartialEq, Serialize, Deserialize)]
    struct Unversioned {
        step: u32,
    }

    impl Versioned for Unversioned {}

    #[test]
    fn a_saved_state_loads_back_as_it_was() {
        let saved = save(&Steps {
            step: 3,
            vm: Some("100".into()),
        });
        let loaded: Steps = load(Some(&saved)).unwrap();
        assert_eq!(
            loaded,
            Steps {
                step: 3,
                vm: Some("100".into())
            }
        );
    }

    #[test]
    fn no_state_and_a_blank_state_start_from_the_default() {
        for state in [None, Some(""), Some("  ")] {
            assert_eq!(load::<Steps>(state).unwrap(), Steps::default(), "{state:?}");
        }
    }

    #[test]
    fn an_unreadable_state_is_a_terminal_error_that_says_how_to_start_over() {
        for state in ["{not json", r#"{"step":"x","stateVersion":3}"#] {
            match load::<Steps>(Some(state)) {
                Err(PluginError::Terminal(TerminalError { reason, message })) => {
                    assert_eq!(reason, STATE_UNREADABLE);
                    assert!(message.contains("remove status.pluginState"), "{message}");
                }
                other => panic!("{state}: {other:?}"),
            }
        }
    }

    #[test]
    fn a_state_carries_its_layout_version_and_one_without_is_version_1() {
        let saved = save(&Steps::default());
        assert!(saved.contains(r#""stateVersion":3"#), "{saved}");
        let old: Unversioned = load(Some(r#"{"step":2}"#)).unwrap();
        assert_eq!(old, Unversioned { step: 2 });
        let v2: Steps = load(Some(r#"{"step":2,"stateVersion":2}"#)).unwrap();
        assert_eq!(v2.step, 2);
    }

    #[test]
    fn a_layout_this_build_does_not_read_is_a_terminal_error_naming_both_versions() {
        for (state, says) in [
            (
                r#"{"step":1,"stateVersion":4}"#,
                "a newer version of this plugin wrote it",
            ),
            (r#"{"step":1}"#, "no longer reads that layout"),
            (
                r#"{"step":1,"stateVersion":1}"#,
                "no longer reads that layout",
            ),
        ] {
            match load::<Steps>(Some(state)) {
                Err(PluginError::Terminal(TerminalError { reason, message })) => {
                    assert_eq!(reason, STATE_INCOMPATIBLE);
                    assert!(
                        message.contains("reads versions 2..=3") && message.contains(says),
                        "{message}"
                    );
                    assert!(message.contains("remove status.pluginState"), "{message}");
                }
                other => panic!("{state}: {other:?}"),
            }
        }
    }
}
