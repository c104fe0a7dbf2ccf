//! Prometheus metrics, all under the `hyperplug_` prefix.
//!
//! Label values a plugin chooses (the method and path of its requests) are bounded:
//! a plugin cannot grow the host's metrics without limit.
use std::collections::{HashMap, HashSet};
use std::sync::Mutex;
use std::time::Instant;

use hyperplug_runtime::{CallError, PluginError};
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ReconcileLabels {
    pub kind: String,
    pub result: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct KindLabels {
    pub kind: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct CallLabels {
    pub plugin: String,
    pub call: String,
    pub result: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct HttpLabels {
    pub plugin: String,
    pub method: String,
    /// The path with IDs folded (`/v1/hosts/{id}/machines/{id}/status`).
    pub path: String,
}

pub struct Metrics {
    pub registry: Registry,
    pub infrastructure_requests: Family<HttpLabels, Counter>,
    pub reconciles: Family<ReconcileLabels, Counter>,
    pub reconcile_seconds: Family<KindLabels, Histogram>,
    pub plugin_calls: Family<CallLabels, Counter>,
    pub plugin_call_seconds: Family<CallLabels, Histogram>,
    /// Heap bytes in use and their peak (see `heap`), read when encoded.
    heap_bytes: Gauge,
    heap_peak_bytes: Gauge,
    /// The request paths seen per plugin, up to [`MAX_PATHS_PER_PLUGIN`].
    paths: Mutex<HashMap<String, HashSet<String>>>,
}

/// Distinct request paths counted per plugin; later new ones count as `{other}`.
pub const MAX_PATHS_PER_PLUGIN: usize = 200;
/// Path segments kept; deeper paths end in `{more}`.
const MAX_SEGMENTS: usize = 8;
/// Methods counted by name; any other counts as `OTHER`.
const METHODS: &[&str] = &[
    "GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS", "CONNECT", "TRACE",
];

impl Default for Metrics {
    fn default() -> Self {
        let mut registry = Registry::with_prefix("hyperplug");
        let reconciles = Family::<ReconcileLabels, Counter>::default();
        let reconcile_seconds = Family::<KindLabels, Histogram>::new_with_constructor(|| {
            Histogram::new(exponential_buckets(0.001, 2.0, 16))
        });
        let plugin_calls = Family::<CallLabels, Counter>::default();
        let plugin_call_seconds = Family::<CallLabels, Histogram>::new_with_constructor(|| {
            Histogram::new(exponential_buckets(0.0001, 2.0, 18))
        });
        let infrastructure_requests = Family::<HttpLabels, Counter>::default();
        registry.register(
            "infrastructure_api_requests",
            "HTTP requests plugins sent to their infrastructure APIs",
            infrastructure_requests.clone(),
        );
        registry.register(
            "reconciles",
            "Reconciles by kind and result",
            reconciles.clone(),
        );
        registry.register(
            "reconcile_duration_seconds",
            "Reconcile duration by kind",
            reconcile_seconds.clone(),
        );
        registry.register(
            "plugin_calls",
            "Plugin calls by plugin, call and result",
            plugin_calls.clone(),
        );
        registry.register(
            "plugin_call_duration_seconds",
            "Plugin call duration",
            plugin_call_seconds.clone(),
        );
        let (heap_bytes, heap_peak_bytes) = (Gauge::default(), Gauge::default());
        registry.register(
            "heap_bytes",
            "Heap bytes the manager has allocated now",
            heap_bytes.clone(),
        );
        registry.register(
            "heap_peak_bytes",
            "The most heap bytes the manager had allocated at once",
            heap_peak_bytes.clone(),
        );
        Metrics {
            registry,
            heap_bytes,
            heap_peak_bytes,
            infrastructure_requests,
            reconciles,
            reconcile_seconds,
            plugin_calls,
            plugin_call_seconds,
            paths: Mutex::default(),
        }
    }
}

impl Metrics {
    /// Time and count one plugin call by its outcome.
    pub async fn plugin_call<T>(
        &self,
        plugin: &str,
        call: &str,
        fut: impl Future<Output = Result<Result<T, PluginError>, CallError>>,
    ) -> Result<Result<T, PluginError>, CallError> {
        let start = Instant::now();
        let result = fut.await;
        let outcome = match &result {
            Ok(Ok(_)) => "ok",
            Ok(Err(PluginError::Transient(_))) => "transient",
            Ok(Err(PluginError::Terminal(_))) => "terminal",
            Ok(Err(PluginError::InvalidSpec(_))) => "invalid_spec",
            Err(e) => e.kind(),
        };
        let labels = CallLabels {
            plugin: plugin.into(),
            call: call.into(),
            result: outcome.into(),
        };
        self.plugin_calls.get_or_create(&labels).inc();
        self.plugin_call_seconds
            .get_or_create(&labels)
            .observe(start.elapsed().as_secs_f64());
        result
    }

    pub fn reconciled(&self, kind: &str, result: &str, started: Instant) {
        self.reconciles
            .get_or_create(&ReconcileLabels {
                kind: kind.into(),
                result: result.into(),
            })
            .inc();
        self.reconcile_seconds
            .get_or_create(&KindLabels { kind: kind.into() })
            .observe(started.elapsed().as_secs_f64());
    }

    /// Count one request a plugin sent, keeping label cardinality bounded: standard
    /// methods only, identifiers folded out of paths, and at most
    /// [`MAX_PATHS_PER_PLUGIN`] distinct paths per plugin.
    pub fn infrastructure_request(&self, plugin: &str, method: &str, path: &str) {
        let method = METHODS
            .iter()
            .find(|m| m.eq_ignore_ascii_case(method))
            .copied()
            .unwrap_or("OTHER");
        let mut path = fold_ids(path);
        {
            let mut paths = self.paths.lock().expect("metric paths");
            let seen = paths.entry(plugin.to_string()).or_default();
            if !seen.contains(&path) {
                if seen.len() < MAX_PATHS_PER_PLUGIN {
                    seen.insert(path.clone());
                } else {
                    path = "{other}".into();
                }
            }
        }
        let labels = HttpLabels {
            plugin: plugin.into(),
            method: method.into(),
            path,
        };
        self.infrastructure_requests.get_or_create(&labels).inc();
    }

    pub fn encode(&self) -> String {
        self.heap_bytes.set(crate::heap::in_use() as i64);
        self.heap_peak_bytes.set(crate::heap::peak() as i64);
        let mut out = String::new();
        prometheus_client::encoding::text::encode(&mut out, &self.registry)
            .expect("encode metrics");
        out
    }
}

/// Replace path segments that look like per-object identifiers (numbers, task IDs,
/// UUIDs) with `{id}`, so metrics stay bounded whatever the API.
fn fold_ids(path: &str) -> String {
    let mut segments: Vec<&str> = path
        .split('/')
        .take(MAX_SEGMENTS + 1)
        .map(|seg| {
            let numeric = !seg.is_empty() && seg.chars().all(|c| c.is_ascii_digit());
            let odd = !seg
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'));
            let id_like = numeric || odd || seg.len() > 24;
            if id_like { "{id}" } else { seg }
        })
        .collect();
    if segments.len() > MAX_SEGMENTS {
        segments[MAX_SEGMENTS] = "{more}";
    }
    segments.join("/")
}

#[cfg(test)]
mod tests {
    #[test]
    fn ids_are_folded_out_of_paths() {
        assert_eq!(
            super::fold_ids("/v1/hosts/node1/machines/104/status"),
            "/v1/hosts/node1/machines/{id}/status"
        );
        assert_eq!(
            super::fold_ids("/v1/tasks/job:abc:1/log"),
            "/v1/tasks/{id}/log"
        );
        assert_eq!(super::fold_ids("/v1/version"), "/v1/version");
        assert_eq!(super::fold_ids("/a/b c/%41"), "/a/{id}/{id}");
        assert_eq!(
            super::fold_ids("/1/2/3/4/5/6/7/8/9/10/11"),
            "/{id}/{id}/{id}/{id}/{id}/{id}/{id}/{more}"
        );
    }

    #[test]
    fn a_plugin_cannot_grow_the_label_sets_without_bound() {
        let metrics = super::Metrics::default();
        for i in 0..10_000 {
            metrics.infrastructure_request("p", &format!("X{i}"), &format!("/words/w{i}x"));
        }
        metrics.infrastructure_request("q", "get", "/fine");
        let text = metrics.encode();
        let series = text
            .lines()
            .filter(|l| l.starts_with("hyperplug_infrastructure_api_requests_total{"))
            .count();
        assert_eq!(series, super::MAX_PATHS_PER_PLUGIN + 1 + 1, "{text}");
        assert!(text.contains(r#"method="OTHER""#));
        assert!(text.contains(r#"path="{other}""#));
        assert!(text.contains(r#"plugin="q",method="GET",path="/fine""#));
    }
}
