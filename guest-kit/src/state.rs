//! The opaque state a call hands back in its progress, and reading it on the next call.
//!
//! The host persists the string (in `status.pluginState`) before anything else and hands
//! it back verbatim. It can be lost (a crash between a side effect and the host's write,
//! a restored backup): a plugin that finds none starts from its default and finds what
//! it made by its ownership marker. A state it cannot read is another matter: something
//! wrote it that this plugin did not (an edit, another version of the plugin), so the
//! call stops with a terminal [`STATE_UNREADABLE`] error naming what does not read and
//! how to start over, which the host shows on the object, rather than acting on a guess.
use serde::Serialize;
use serde::de::DeserializeOwned;

use crate::errors::terminal;
use crate::types::PluginError;

/// The reason of a terminal error for a state that does not read.
pub const STATE_UNREADABLE: &str = "StateUnreadable";

/// The state `save` wrote; `T::default()` when there is none. A state that does not
/// parse as `T` is a terminal `StateUnreadable` error: the object shows it, and removing
/// `status.pluginState` (and `status.failedGeneration`) lets the plugin start over from
/// what it finds by its ownership marker.
pub fn load<T: DeserializeOwned + Default>(state: Option<&str>) -> Result<T, PluginError> {
    let Some(text) = state.filter(|s| !s.trim().is_empty()) else {
        return Ok(T::default());
    };
    serde_json::from_str(text).map_err(|e| {
        terminal(
            STATE_UNREADABLE,
            format!(
                "status.pluginState is not a state this plugin wrote ({e}); nothing was done. \
                 To start over from what the infrastructure shows (the plugin finds what it made by its ownership marker), \
                 remove status.pluginState and status.failedGeneration"
            ),
        )
    })
}

/// The state as the string to hand back (`progress.state`).
pub fn save<T: Serialize>(state: &T) -> String {
    serde_json::to_string(state).unwrap_or_default()
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
        for state in ["{not json", r#"{"step":"x"}"#] {
            match load::<Steps>(Some(state)) {
                Err(PluginError::Terminal(TerminalError { reason, message })) => {
                    assert_eq!(reason, STATE_UNREADABLE);
                    assert!(message.contains("remove status.pluginState"), "{message}");
                }
                other => panic!("{state}: {other:?}"),
            }
        }
    }
}
