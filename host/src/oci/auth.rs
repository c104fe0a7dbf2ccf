//! Registry credentials, from a Docker config file: the `~/.docker/config.json` that
//! `docker login` and `oras login` write, or the `.dockerconfigjson` of a Kubernetes
//! `kubernetes.io/dockerconfigjson` Secret mounted into the manager. Only the
//! credentials of the registry a reference names are used; without an entry for it the
//! pull is anonymous. Credential values never reach a log or an error.
use std::collections::BTreeMap;
use std::path::Path;

use base64::Engine as _;
use serde::Deserialize;

use super::FetchError;

/// User name and password (or token) for one registry.
#[derive(Clone, PartialEq, Eq)]
pub struct Basic {
    pub username: String,
    pub password: String,
}

impl std::fmt::Debug for Basic {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Basic({}, <redacted>)", self.username)
    }
}

#[derive(Deserialize)]
struct DockerConfig {
    #[serde(default)]
    auths: BTreeMap<String, Entry>,
}

#[derive(Deserialize)]
struct Entry {
    auth: Option<String>,
    username: Option<String>,
    password: Option<String>,
}

/// The credentials `path` holds for `registry` (`HOST[:PORT]`), if any.
pub fn for_registry(path: &Path, registry: &str) -> Result<Option<Basic>, FetchError> {
    let err = |detail: String| FetchError::Auth {
        path: path.into(),
        detail,
    };
    let text = std::fs::read_to_string(path).map_err(|e| err(e.to_string()))?;
    let config: DockerConfig = serde_json::from_str(&text).map_err(|e| {
        err(format!(
            "not a Docker config ({{\"auths\": {{\"REGISTRY\": {{\"auth\": \"…\"}}}}}}): {}",
            e.to_string().split(" at line").next().unwrap_or_default()
        ))
    })?;
    // `docker login` keys Docker Hub and some registries by URL; the host is what counts.
    let Some((key, entry)) = config
        .auths
        .iter()
        .find(|(key, _)| host_of(key) == registry)
    else {
        return Ok(None);
    };
    let field = |name: &str, detail: &str| err(format!("auths.\"{key}\".{name} {detail}"));
    match (&entry.auth, &entry.username, &entry.password) {
        (_, Some(username), Some(password)) => Ok(Some(Basic {
            username: username.clone(),
            password: password.clone(),
        })),
        (Some(auth), _, _) => {
            let decoded = base64::engine::general_purpose::STANDARD
                .decode(auth.trim())
                .ok()
                .and_then(|bytes| String::from_utf8(bytes).ok())
                .ok_or_else(|| field("auth", "is not base64 of USER:PASSWORD"))?;
            let (username, password) = decoded
                .split_once(':')
                .ok_or_else(|| field("auth", "decodes to no USER:PASSWORD pair"))?;
            Ok(Some(Basic {
                username: username.into(),
                password: password.into(),
            }))
        }
        _ => Err(field(
            "auth",
            "is missing (and username/password are not both given); credential helpers are not read",
        )),
    }
}

/// `https://ghcr.io/v1/` → `ghcr.io`; `ghcr.io` stays.
fn host_of(key: &str) -> &str {
    let rest = key
        .strip_prefix("https://")
        .or_else(|| key.strip_prefix("http://"))
        .unwrap_or(key);
    rest.split('/').next().unwrap_or(rest)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(text: &str) -> tempfile::NamedTempFile {
        let file = tempfile::NamedTempFile::new().unwrap();
        std::fs::write(file.path(), text).unwrap();
        file
    }

    #[test]
    fn the_entry_of_the_registry_is_used_in_either_form() {
        // "dXNlcjpwYXNz" is base64 of "user:pass".
        let file = config(
            r#"{"auths": {"https://ghcr.io/v1/": {"auth": "dXNlcjpwYXNz"},
                         "127.0.0.1:5000": {"username": "u", "password": "p"}}}"#,
        );
        let basic = |u: &str, p: &str| {
            Some(Basic {
                username: u.into(),
                password: p.into(),
            })
        };
        assert_eq!(
            for_registry(file.path(), "ghcr.io").unwrap(),
            basic("user", "pass")
        );
        assert_eq!(
            for_registry(file.path(), "127.0.0.1:5000").unwrap(),
            basic("u", "p")
        );
        assert_eq!(for_registry(file.path(), "quay.io").unwrap(), None);
    }

    #[test]
    fn a_bad_entry_names_its_field_and_shows_no_secret() {
        let file = config(r#"{"auths": {"ghcr.io": {"auth": "bm8tY29sb24="}}}"#);
        let err = for_registry(file.path(), "ghcr.io")
            .unwrap_err()
            .to_string();
        assert!(
            err.contains(r#"auths."ghcr.io".auth decodes to no USER:PASSWORD"#),
            "{err}"
        );
        assert!(!err.contains("no-colon"), "{err}");
        let file = config("not json");
        let err = for_registry(file.path(), "ghcr.io")
            .unwrap_err()
            .to_string();
        assert!(err.contains("not a Docker config"), "{err}");
        let redacted = format!(
            "{:?}",
            Basic {
                username: "u".into(),
                password: "hunter2".into()
            }
        );
        assert!(!redacted.contains("hunter2"), "{redacted}");
    }
}
