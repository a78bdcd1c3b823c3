//! Per-namespace delivery figures people alert on: outcomes written and
//! first-attempt lateness, labelled by namespace. Cardinality is bounded:
//! a worker keeps series for at most `NAMESPACES_MAX` namespaces and counts
//! the rest under `_other`. Per-job figures are not exported (a million
//! jobs would be a million series); a job is watched through alert rules,
//! which the cluster evaluates on the ledger itself.

use std::collections::HashMap;
use std::sync::Mutex;

use domain::slot::Status;

/// Namespaces a worker labels series with; the rest are `_other`.
pub const NAMESPACES_MAX: usize = 1_000;
/// The label of the namespaces past the bound.
pub const OTHER: &str = "_other";

struct Series {
    lateness: metrics::Histogram,
    outcomes: HashMap<&'static str, metrics::Counter>,
}

#[derive(Default)]
pub struct NamespaceMetrics {
    series: Mutex<HashMap<String, Series>>,
}

impl NamespaceMetrics {
    fn with<T>(&self, namespace: &str, f: impl FnOnce(&mut Series, &str) -> T) -> T {
        let mut series = self.series.lock().expect("namespace metrics lock");
        let key = if series.contains_key(namespace) || series.len() < NAMESPACES_MAX {
            if namespace.is_empty() { "default" } else { namespace }
        } else {
            OTHER
        };
        let entry = series.entry(key.to_owned()).or_insert_with(|| Series {
            lateness: metrics::histogram!(runtime::metrics::NAMESPACE_LATENESS_SECONDS, "namespace" => key.to_owned()),
            outcomes: HashMap::new(),
        });
        f(entry, key)
    }

    /// A slot's first attempt started `seconds` after it was due.
    pub fn late(&self, namespace: &str, seconds: f64) {
        self.with(namespace, |s, _| s.lateness.record(seconds));
    }

    /// An outcome was written.
    pub fn outcome(&self, namespace: &str, status: Status) {
        let outcome = status.as_str();
        self.with(namespace, |s, key| {
            s.outcomes
                .entry(outcome)
                .or_insert_with(|| {
                    metrics::counter!(runtime::metrics::NAMESPACE_DELIVERIES_TOTAL, "namespace" => key.to_owned(), "outcome" => outcome)
                })
                .increment(1)
        });
    }
}
