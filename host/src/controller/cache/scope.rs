//! What one manager instance watches, by Cluster API's rules for several instances of a
//! provider: one namespace or all (`--namespace`), and of those the objects whose
//! `cluster.x-k8s.io/watch-filter` label has this instance's value, or all
//! (`--watch-filter`). Every watch of the controllers takes its API and list options
//! from here, and the finalizer webhook leaves alone what the scope excludes, so two
//! instances with different values share one API server without acting on each other's
//! objects.
//!
//! The filter is a label selector of the watches themselves: an object without the value
//! never reaches a cache, so no reconcile, event or write of this instance concerns it.
//! What a reconcile reads of an object it does own (its Machine, its Cluster) is read
//! whether or not that carries the label, as Cluster API's own controllers do.
use std::collections::BTreeMap;

use kube::api::{Api, ApiResource};
use kube::runtime::watcher;
use kube::{Client, Resource};

use super::watch::LIST_PAGE;

/// The label Cluster API's `--watch-filter` selects on.
pub const WATCH_FILTER_LABEL: &str = "cluster.x-k8s.io/watch-filter";

/// The namespace and label value one manager instance watches (none: all).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Scope {
    /// Watch only this namespace.
    pub namespace: Option<String>,
    /// Watch only objects labelled `cluster.x-k8s.io/watch-filter` with this value.
    pub watch_filter: Option<String>,
}

impl Scope {
    /// The objects of kind `ar` in the watched namespace, or in all.
    pub fn api<K>(&self, client: &Client, ar: &ApiResource) -> Api<K>
    where
        K: Resource<DynamicType = ApiResource, Scope = kube::core::DynamicResourceScope>,
    {
        match &self.namespace {
            Some(ns) => Api::namespaced_with(client.clone(), ns, ar),
            None => Api::all_with(client.clone(), ar),
        }
    }

    /// A namespaced kind with a static type (Secrets) in the watched namespace, or in all.
    pub fn typed_api<K>(&self, client: &Client) -> Api<K>
    where
        K: Resource<Scope = k8s_openapi::NamespaceResourceScope>,
        K::DynamicType: Default,
    {
        match &self.namespace {
            Some(ns) => Api::namespaced(client.clone(), ns),
            None => Api::all(client.clone()),
        }
    }

    /// A watch's list options: a page at a time (`LIST_PAGE`), and only the objects
    /// carrying this instance's filter value.
    pub fn watch_config(&self) -> watcher::Config {
        let config = watcher::Config::default().page_size(LIST_PAGE);
        match &self.watch_filter {
            Some(value) => config.labels(&format!("{WATCH_FILTER_LABEL}={value}")),
            None => config,
        }
    }

    /// Whether an object in `namespace` with `labels` is this instance's to act on.
    pub fn includes(
        &self,
        namespace: Option<&str>,
        labels: Option<&BTreeMap<String, String>>,
    ) -> bool {
        let in_namespace = self
            .namespace
            .as_deref()
            .is_none_or(|ns| namespace == Some(ns));
        let filtered_in = self.watch_filter.as_deref().is_none_or(|value| {
            labels
                .and_then(|l| l.get(WATCH_FILTER_LABEL))
                .is_some_and(|v| v == value)
        });
        in_namespace && filtered_in
    }
}

/// A `--watch-filter` value as Kubernetes accepts a label value (at most 63 characters,
/// alphanumerics with `-`, `_` or `.` inside), refused at start with the rule rather than
/// by every watch's request once running. Empty (as a Deployment's env may give) is no
/// filter.
pub fn parse_watch_filter(value: &str) -> Result<String, String> {
    let ends_ok = |c: Option<char>| c.is_some_and(|c| c.is_ascii_alphanumeric());
    let valid = value.is_empty()
        || value.len() <= 63
            && ends_ok(value.chars().next())
            && ends_ok(value.chars().last())
            && value
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'));
    if valid {
        Ok(value.to_string())
    } else {
        Err(format!(
            "{value:?} is not a label value: at most 63 characters, letters, digits, '-', '_' \
             or '.', starting and ending with a letter or digit (it selects objects by \
             their {WATCH_FILTER_LABEL} label)"
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn labels(value: &str) -> BTreeMap<String, String> {
        [(WATCH_FILTER_LABEL.to_string(), value.to_string())].into()
    }

    #[test]
    fn an_instance_includes_only_its_namespace_and_its_filter_value() {
        let all = Scope::default();
        assert!(all.includes(Some("a"), None));
        let scoped = Scope {
            namespace: Some("team-a".into()),
            watch_filter: Some("blue".into()),
        };
        assert!(scoped.includes(Some("team-a"), Some(&labels("blue"))));
        assert!(!scoped.includes(Some("team-a"), Some(&labels("green"))));
        assert!(!scoped.includes(Some("team-a"), None));
        assert!(!scoped.includes(Some("team-b"), Some(&labels("blue"))));
    }

    #[test]
    fn the_filter_selects_on_the_label_in_every_watch() {
        let scope = Scope {
            namespace: None,
            watch_filter: Some("blue".into()),
        };
        let config = scope.watch_config();
        assert_eq!(
            config.label_selector.as_deref(),
            Some("cluster.x-k8s.io/watch-filter=blue")
        );
        assert_eq!(config.page_size, Some(LIST_PAGE));
        assert_eq!(Scope::default().watch_config().label_selector, None);
    }

    #[test]
    fn a_filter_value_must_be_a_label_value() {
        assert_eq!(
            parse_watch_filter("team-a.blue_1").unwrap(),
            "team-a.blue_1"
        );
        assert_eq!(parse_watch_filter("").unwrap(), "", "no filter");
        for bad in ["-a", "a-", "a b", "a=b", &"x".repeat(64)] {
            let err = parse_watch_filter(bad).unwrap_err();
            assert!(err.contains("not a label value"), "{bad}: {err}");
        }
    }
}
