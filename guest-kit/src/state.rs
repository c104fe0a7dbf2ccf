//! The opaque state a call hands back in its progress, and reading it on the next call.
//!
//! The host persists the string before anything else and hands it back verbatim. It can
//! be lost (a crash between a side effect and the host's write, a restored backup), so
//! a plugin that finds none, or one it cannot read, starts from its default and finds
//! what it made by its ownership marker.
use serde::Serialize;
use serde::de::DeserializeOwned;

/// The state `save` wrote, or `T::default()` when there is none or it does not parse.
pub fn load<T: DeserializeOwned + Default>(state: Option<&str>) -> T {
    state
        .filter(|s| !s.trim().is_empty())
        .and_then(|s| serde_json::from_str(s).ok())
        .unwrap_or_default()
}

/// The state as the string to hand back (`progress.state`).
pub fn save<T: Serialize>(state: &T) -> String {
    serde_json::to_string(state).unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use serde::Deserialize;

    use super::*;

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
        let loaded: Steps = load(Some(&saved));
        assert_eq!(
            loaded,
            Steps {
                step: 3,
                vm: Some("100".into())
            }
        );
    }

    #[test]
    fn no_state_blank_state_and_unreadable_state_start_from_the_default() {
        for state in [
            None,
            Some(""),
            Some("  "),
            Some("{not json"),
            Some(r#"{"step":"x"}"#),
        ] {
            assert_eq!(load::<Steps>(state), Steps::default(), "state {state:?}");
        }
    }
}
