//! Shadow versions: a candidate build of a plugin runs beside the serving one on every
//! reconcile, with the same request against the same cache, and **nothing it returns is
//! executed**; its outcome is compared with the serving version's.
//!
//! - The candidate never delays the serving version: it runs on its own blocking thread, and the
//!   comparison waits for it on a task of its own after the serving outcome went on to
//!   admission. Its share is bounded: at most [`Shadow::slots`] candidate calls at once per
//!   plugin; a reconcile that finds no free slot is not shadowed (`result="skipped"`).
//! - Outcomes are compared after normalisation ([`Summary`]): the actions as a multiset of their
//!   JSON (order does not matter, a repeated action does), the requeue, the error and its retry.
//! - Every comparison is counted per plugin (`wasmloop_shadow_reconciles_total{result}`); the
//!   last [`RECENT`] differences of each plugin are kept in the [`ShadowLog`] (served as JSON
//!   on the host's `/shadow`, shown by `wasmloop diff`), and each is broadcast (the hot-load
//!   manager samples them into Events on the candidate's ConfigMap).

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use parking_lot::Mutex;
use serde::{Deserialize, Serialize};
use tokio::sync::{OwnedSemaphorePermit, Semaphore, broadcast};

use super::{Outcome, ReconcileError, Reconciler, Retry};
use crate::kinds::ObjectKey;

/// The differences kept per plugin (the oldest is dropped first).
pub const RECENT: usize = 50;

/// A candidate version shadowing a plugin's serving one.
pub struct Shadow {
    reconciler: Arc<dyn Reconciler>,
    slots: Arc<Semaphore>,
    concurrency: usize,
}

impl Shadow {
    /// Shadow with `reconciler`, at most `concurrency` of its calls at once (at least 1).
    pub fn new(reconciler: Arc<dyn Reconciler>, concurrency: usize) -> Self {
        let concurrency = concurrency.max(1);
        Self { reconciler, slots: Arc::new(Semaphore::new(concurrency)), concurrency }
    }

    /// The candidate.
    pub fn reconciler(&self) -> &Arc<dyn Reconciler> {
        &self.reconciler
    }

    /// How many candidate calls may run at once.
    pub fn slots(&self) -> usize {
        self.concurrency
    }

    /// A slot for one candidate call, if one is free now.
    pub(super) fn try_slot(&self) -> Option<OwnedSemaphorePermit> {
        self.slots.clone().try_acquire_owned().ok()
    }
}

/// One reconcile's result, reduced to what comparing two versions looks at.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Summary {
    /// Each action as compact JSON, sorted.
    pub actions: Vec<String>,
    /// `requeue_after`, in milliseconds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub requeue_after_ms: Option<u64>,
    /// The error, if the reconcile failed (with its retry: `backoff` or `when-changed`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

impl Summary {
    /// The summary of a reconcile's result.
    pub fn of(result: &Result<Outcome, ReconcileError>) -> Self {
        let json = |a: &crate::actions::Planned| serde_json::to_string(a).unwrap_or_else(|e| format!("(unprintable action: {e})"));
        let mut summary = match result {
            Ok(outcome) => Summary {
                actions: outcome.actions.iter().map(json).collect(),
                requeue_after_ms: outcome.requeue_after.map(millis),
                error: None,
            },
            Err(e) => {
                let retry = match e.retry {
                    Retry::Backoff => "backoff",
                    Retry::WhenChanged => "when-changed",
                };
                Summary {
                    actions: e.actions.iter().map(json).collect(),
                    requeue_after_ms: None,
                    error: Some(format!("{retry}: {}", e.cause)),
                }
            }
        };
        summary.actions.sort();
        summary
    }
}

fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

/// A reconcile where the candidate's outcome differs from the serving version's.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Difference {
    /// The plugin.
    pub plugin: String,
    /// The reconciled key (`<apiVersion>/<kind>/<namespace>/<name>`).
    pub key: String,
    /// When (seconds since the Unix epoch).
    pub at: u64,
    /// The serving version's digest.
    pub serving_digest: String,
    /// The candidate's digest.
    pub candidate_digest: String,
    /// What the serving version returned (and the host executed).
    pub serving: Summary,
    /// What the candidate returned (never executed).
    pub candidate: Summary,
}

impl Difference {
    /// Actions only the serving version returned (as many times as it has more of them).
    pub fn only_serving(&self) -> Vec<&str> {
        minus(&self.serving.actions, &self.candidate.actions)
    }

    /// Actions only the candidate returned.
    pub fn only_candidate(&self) -> Vec<&str> {
        minus(&self.candidate.actions, &self.serving.actions)
    }
}

/// `a` minus `b`, as multisets.
fn minus<'a>(a: &'a [String], b: &[String]) -> Vec<&'a str> {
    let mut left: BTreeMap<&str, usize> = BTreeMap::new();
    for s in b {
        *left.entry(s.as_str()).or_default() += 1;
    }
    a.iter()
        .filter(|s| match left.get_mut(s.as_str()) {
            Some(n) if *n > 0 => {
                *n -= 1;
                false
            }
            _ => true,
        })
        .map(String::as_str)
        .collect()
}

/// How one shadowed reconcile compared: the `result` label of `wasmloop_shadow_reconciles_total`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Compared {
    /// Same outcome.
    Same,
    /// Different outcomes (a [`Difference`] is recorded).
    Different,
    /// Not shadowed: every candidate slot was busy, or the candidate's thread failed.
    Skipped,
}

impl Compared {
    /// The label value.
    pub fn as_str(self) -> &'static str {
        match self {
            Compared::Same => "same",
            Compared::Different => "different",
            Compared::Skipped => "skipped",
        }
    }
}

/// What the log holds of one plugin: counts since it was first shadowed, the last differences.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PluginReport {
    /// The plugin.
    pub plugin: String,
    /// Reconciles where both versions returned the same.
    pub same: u64,
    /// Reconciles where they differed.
    pub different: u64,
    /// Reconciles not shadowed.
    pub skipped: u64,
    /// The last differences, oldest first.
    pub differences: Vec<Difference>,
}

/// Every plugin's shadow comparisons, shared by the controllers of a host.
pub struct ShadowLog {
    plugins: Mutex<HashMap<String, PluginReport>>,
    differences: broadcast::Sender<Difference>,
}

impl Default for ShadowLog {
    fn default() -> Self {
        Self { plugins: Mutex::new(HashMap::new()), differences: broadcast::channel(64).0 }
    }
}

impl ShadowLog {
    /// Record one comparison of `plugin` (and its difference, when `compared` is `Different`).
    pub fn record(&self, plugin: &str, compared: Compared, difference: Option<Difference>) {
        let mut plugins = self.plugins.lock();
        let report = plugins.entry(plugin.to_owned()).or_insert_with(|| PluginReport { plugin: plugin.to_owned(), ..Default::default() });
        match compared {
            Compared::Same => report.same += 1,
            Compared::Different => report.different += 1,
            Compared::Skipped => report.skipped += 1,
        }
        if let Some(d) = difference {
            let mut recent = VecDeque::from(std::mem::take(&mut report.differences));
            if recent.len() == RECENT {
                recent.pop_front();
            }
            recent.push_back(d.clone());
            report.differences = recent.into();
            let _ = self.differences.send(d);
        }
    }

    /// The reports of every plugin (or of `plugin`), by name.
    pub fn reports(&self, plugin: Option<&str>) -> Vec<PluginReport> {
        let plugins = self.plugins.lock();
        let mut out: Vec<PluginReport> = plugins.values().filter(|r| plugin.is_none_or(|p| r.plugin == p)).cloned().collect();
        out.sort_by(|a, b| a.plugin.cmp(&b.plugin));
        out
    }

    /// Every difference from now on, as it is recorded.
    pub fn subscribe(&self) -> broadcast::Receiver<Difference> {
        self.differences.subscribe()
    }
}

/// One version's side of a comparison: its digest and what it returned.
pub struct Side {
    /// The version's digest (`native` for a native reconciler).
    pub digest: String,
    /// What it returned.
    pub summary: Summary,
}

impl Side {
    /// The side of `reconciler`, which returned `result`.
    pub fn of(reconciler: &dyn Reconciler, result: &Result<Outcome, ReconcileError>) -> Self {
        Self { digest: reconciler.digest().unwrap_or("native").to_owned(), summary: Summary::of(result) }
    }
}

/// Compare the serving version's side with the candidate's: how they compared, and the
/// difference if they differ.
pub fn compare(plugin: &str, key: &ObjectKey, serving: Side, candidate: Side) -> (Compared, Option<Difference>) {
    if serving.summary == candidate.summary {
        return (Compared::Same, None);
    }
    let difference = Difference {
        plugin: plugin.to_owned(),
        key: key.to_string(),
        at: SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_secs()).unwrap_or_default(),
        serving_digest: serving.digest,
        candidate_digest: candidate.digest,
        serving: serving.summary,
        candidate: candidate.summary,
    };
    (Compared::Different, Some(difference))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::actions::{Action, Planned};
    use crate::kinds::KindRef;
    use crate::reconciler::Cause;

    fn delete(name: &str) -> Planned {
        Planned::new(Action::delete(KindRef::new("v1", "Pod").key(Some("ns"), name))).expect("a valid delete")
    }

    fn outcome(actions: Vec<Planned>) -> Result<Outcome, ReconcileError> {
        Ok(Outcome { actions, requeue_after: None })
    }

    #[test]
    fn summaries_ignore_order_but_not_repeats_requeues_or_errors() {
        let (a, b) = (delete("a"), delete("b"));
        assert_eq!(Summary::of(&outcome(vec![a.clone(), b.clone()])), Summary::of(&outcome(vec![b.clone(), a.clone()])));
        assert_ne!(Summary::of(&outcome(vec![a.clone()])), Summary::of(&outcome(vec![a.clone(), a.clone()])));
        let requeued = Ok(Outcome { actions: vec![], requeue_after: Some(Duration::from_secs(1)) });
        assert_ne!(Summary::of(&outcome(vec![])), Summary::of(&requeued));
        let failed = Err(ReconcileError::transient(Cause::Reconciler("boom".into())));
        assert_eq!(Summary::of(&failed).error.as_deref(), Some("backoff: boom"));
    }

    #[test]
    fn a_difference_names_what_only_each_side_returned() {
        let d = Difference {
            plugin: "p".into(),
            key: "k".into(),
            at: 0,
            serving_digest: "s".into(),
            candidate_digest: "c".into(),
            serving: Summary::of(&outcome(vec![delete("a"), delete("a")])),
            candidate: Summary::of(&outcome(vec![delete("a"), delete("b")])),
        };
        assert_eq!(d.only_serving().len(), 1);
        assert!(d.only_serving()[0].contains("\"a\""), "{:?}", d.only_serving());
        assert!(d.only_candidate()[0].contains("\"b\""), "{:?}", d.only_candidate());
    }

    #[test]
    fn the_log_counts_and_keeps_the_last_differences() {
        let log = ShadowLog::default();
        let mut rx = log.subscribe();
        let d = |i: u64| Difference { plugin: "p".into(), key: format!("k{i}"), at: i, ..difference_template() };
        log.record("p", Compared::Same, None);
        log.record("q", Compared::Skipped, None);
        for i in 0..(RECENT as u64 + 3) {
            log.record("p", Compared::Different, Some(d(i)));
        }
        let p = &log.reports(Some("p"))[0];
        assert_eq!((p.same, p.different, p.skipped), (1, RECENT as u64 + 3, 0));
        assert_eq!(p.differences.len(), RECENT);
        assert_eq!(p.differences[0].key, "k3", "the oldest went first");
        assert_eq!(log.reports(None).iter().map(|r| r.plugin.as_str()).collect::<Vec<_>>(), ["p", "q"]);
        assert_eq!(rx.try_recv().expect("broadcast").key, "k0");
    }

    fn difference_template() -> Difference {
        Difference {
            plugin: String::new(),
            key: String::new(),
            at: 0,
            serving_digest: String::new(),
            candidate_digest: String::new(),
            serving: Summary::default(),
            candidate: Summary::default(),
        }
    }
}
