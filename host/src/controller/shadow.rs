//! Shadow versions: a candidate build of a plugin runs after the serving one on every
//! reconcile, with the same request against the same cache, and **nothing it returns is
//! executed**; its outcome is compared with the serving version's.
//!
//! - The candidate never delays the serving version and never runs beside it: the serving
//!   call's cache answers are kept ([`Kept`]: the cache's own shared objects, no copy), and the
//!   candidate is given them **later**, once no serving call of any plugin is in flight, on
//!   the guest pool's lowest-priority lane ([`CANDIDATE_NICE`]); a serving call that starts
//!   while it runs pauses it. Replaying the reads makes the comparison independent of when the
//!   candidate runs: both versions saw the same objects (what the candidate reads beyond them
//!   comes from the cache as it is then; clocks are its own). The comparison waits for it
//!   on a task of its own after the serving outcome went on to admission. Its share is
//!   bounded: at most [`Shadow::slots`] candidate calls at once per plugin, taken before the
//!   serving call; a reconcile that finds no free slot, or whose candidate finds no idle
//!   moment within [`IDLE_WAIT`], is not shadowed (`result="skipped"`): under a sustained
//!   load a shadow samples fewer reconciles instead of slowing them.
//! - Outcomes are compared after normalisation ([`Summary`]): the actions as a multiset of their
//!   JSON (order does not matter, a repeated action does), the requeue, the error and its retry.
//! - Every comparison is counted per plugin (`wasmloop_shadow_reconciles_total{result}`); the
//!   last [`RECENT`] differences of each plugin are kept in the [`ShadowLog`] (served as JSON
//!   on the host's `/shadow`, shown by `wasmloop diff`), and each is broadcast (the hot-load
//!   manager samples them into Events on the candidate's ConfigMap).

use std::collections::{BTreeMap, BTreeSet, HashMap, VecDeque};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use parking_lot::Mutex;
use serde::{Deserialize, Serialize};
use tokio::sync::{OwnedSemaphorePermit, Semaphore, broadcast, oneshot};

use super::invalid::InvalidSetting;
use super::{Outcome, ReconcileError, Reconciler, Retry};
use crate::cache::{Kept, SharedCache};
use crate::executor::Executor;
use crate::grants::Grants;
use crate::kinds::ObjectKey;
use crate::plugin::guest_threads::{self, Lane};
use crate::reconciler::Request;

/// The differences kept per plugin (the oldest is dropped first).
pub const RECENT: usize = 50;

/// Where candidate versions run: the guest pool's lowest-priority lane.
pub use crate::plugin::guest_threads::CANDIDATE_NICE;

/// A candidate version beside a plugin's serving version: a shadow everywhere, and optionally
/// the version that serves the keys of some shards (a [`Canary`]).
pub struct Shadow {
    reconciler: Arc<dyn Reconciler>,
    /// What its own manifest grants it (admission of its outcomes where it serves).
    grants: Arc<Grants>,
    slots: Arc<Semaphore>,
    concurrency: usize,
    canary: Option<Canary>,
    /// Who its canary writes are sent as: the candidate's own identity (`None`: the host's,
    /// with `--plugin-identity host`).
    executor: Option<Executor>,
    /// Canary reconciles that succeeded / failed (an error, a refused or failed action).
    canary_ok: AtomicU64,
    canary_failed: AtomicU64,
    /// Set once the canary is rolled back: it shadows only from then on.
    rolled_back: AtomicBool,
}

/// Where a candidate serves instead of shadowing, and when it is rolled back by itself.
#[derive(Clone, Debug, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Canary {
    /// The shards (of the plugin's `shards:`, by index from 0) whose keys the candidate serves.
    pub shards: BTreeSet<usize>,
    /// Rolled back when more than this share of its reconciles fail (default 0.1)…
    #[serde(default = "default_max_failure_rate")]
    pub max_failure_rate: f64,
    /// …once it has served at least this many (default 10).
    #[serde(default = "default_min_reconciles")]
    pub min_reconciles: u64,
}

fn default_max_failure_rate() -> f64 {
    0.1
}

fn default_min_reconciles() -> u64 {
    10
}

impl Canary {
    /// Check the rates; `shards` is the plugin's shard count (every index must be below it).
    pub fn validate(&self, shards: usize) -> Result<(), InvalidSetting> {
        if !(0.0..=1.0).contains(&self.max_failure_rate) {
            return Err(InvalidSetting::new("canary.maxFailureRate", format!("must be between 0 and 1, got {}", self.max_failure_rate)));
        }
        if self.min_reconciles == 0 {
            return Err(InvalidSetting::new("canary.minReconciles", "must be at least 1"));
        }
        if let Some(s) = self.shards.iter().find(|s| **s >= shards) {
            return Err(InvalidSetting::new(
                "canary.shards",
                format!("names shard {s}, which does not exist: the plugin has {shards} shard(s), 0 to {}", shards - 1),
            ));
        }
        Ok(())
    }
}

/// A canary rolled back by itself.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RolledBack {
    /// The plugin.
    pub plugin: String,
    /// The candidate's digest.
    pub digest: String,
    /// Its canary reconciles that failed, of `total`.
    pub failed: u64,
    /// Its canary reconciles.
    pub total: u64,
}

impl Shadow {
    /// Shadow with `reconciler` (granted `grants`), at most `concurrency` of its calls at once
    /// (at least 1).
    pub fn new(reconciler: Arc<dyn Reconciler>, grants: Arc<Grants>, concurrency: usize) -> Self {
        let concurrency = concurrency.max(1);
        Self {
            reconciler,
            grants,
            slots: Arc::new(Semaphore::new(concurrency)),
            concurrency,
            canary: None,
            executor: None,
            canary_ok: AtomicU64::new(0),
            canary_failed: AtomicU64::new(0),
            rolled_back: AtomicBool::new(false),
        }
    }

    /// The same, serving the keys of `canary`'s shards.
    #[must_use]
    pub fn with_canary(mut self, canary: Option<Canary>) -> Self {
        self.canary = canary;
        self
    }

    /// The same, its canary's writes sent with `executor` (acting as the candidate's own
    /// identity), not with the serving version's.
    #[must_use]
    pub fn with_executor(mut self, executor: Option<Executor>) -> Self {
        self.executor = executor;
        self
    }

    /// Who its canary's writes go out as (`None`: the serving controller's executor, only with
    /// `--plugin-identity host`, where every plugin writes as the host).
    pub fn executor(&self) -> Option<&Executor> {
        self.executor.as_ref()
    }

    /// The candidate.
    pub fn reconciler(&self) -> &Arc<dyn Reconciler> {
        &self.reconciler
    }

    /// Its canary, if it has one.
    pub fn canary(&self) -> Option<&Canary> {
        self.canary.as_ref()
    }

    /// What the candidate is granted.
    pub fn grants(&self) -> &Arc<Grants> {
        &self.grants
    }

    /// Whether the candidate serves `key` (its shard, of `shards`, is a canary shard and the
    /// canary is not rolled back).
    pub fn serves(&self, key: &ObjectKey, shards: usize) -> bool {
        self.canary.as_ref().is_some_and(|c| c.shards.contains(&crate::shard::shard_of(key, shards)))
            && !self.rolled_back.load(Ordering::Acquire)
    }

    /// Whether the canary was rolled back.
    pub fn rolled_back(&self) -> bool {
        self.rolled_back.load(Ordering::Acquire)
    }

    /// Count one canary reconcile of `plugin`; the roll-back, the first time the failure rate
    /// goes over the canary's bound.
    pub fn canary_settled(&self, plugin: &str, failed: bool) -> Option<RolledBack> {
        let canary = self.canary.as_ref()?;
        let counter = if failed { &self.canary_failed } else { &self.canary_ok };
        counter.fetch_add(1, Ordering::AcqRel);
        let (bad, good) = (self.canary_failed.load(Ordering::Acquire), self.canary_ok.load(Ordering::Acquire));
        let total = bad + good;
        let over = total >= canary.min_reconciles && bad as f64 > canary.max_failure_rate * total as f64;
        (over && !self.rolled_back.swap(true, Ordering::AcqRel)).then(|| RolledBack {
            plugin: plugin.to_owned(),
            digest: self.reconciler.digest().unwrap_or("native").to_owned(),
            failed: bad,
            total,
        })
    }

    /// How many candidate calls may run at once.
    pub fn slots(&self) -> usize {
        self.concurrency
    }

    /// Take one of the candidate's slots if one is free now (`None`: every slot is busy, this
    /// reconcile is not shadowed). Taken before the serving call, which then keeps its reads
    /// for the candidate.
    pub fn reserve(&self) -> Option<Slot> {
        self.slots.clone().try_acquire_owned().ok().map(|permit| Slot { _permit: permit })
    }

    /// Start the candidate's reconcile of `request` in `slot` on one of its lowest-priority
    /// threads: it waits there until no serving call is in flight (at most [`IDLE_WAIT`]), then
    /// reads `kept` (the serving call's reads; what they lack from the cache as it is then) and
    /// pauses whenever a serving call starts. Its answer, when it comes; the sender is dropped
    /// unanswered (counted as skipped) if the serving lane was not idle in time or no thread
    /// could be started.
    pub fn start(
        &self,
        slot: Slot,
        request: &Request,
        kept: &Arc<Kept>,
        view: &SharedCache,
    ) -> oneshot::Receiver<Result<Outcome, ReconcileError>> {
        let (reconciler, request, cache) = (self.reconciler.clone(), request.clone(), kept.replaying(view.clone()));
        let (tx, rx) = oneshot::channel();
        let job = move || {
            let _slot = slot;
            if guest_threads::wait_until_serving_quiet(IDLE_WAIT) {
                let _ = tx.send(reconciler.reconcile_as_candidate(&request, &cache));
            }
        };
        guest_threads::start(Lane::Candidate, job);
        rx
    }
}

/// One of a candidate's slots, held from before the serving call until the candidate's call
/// ends.
pub struct Slot {
    _permit: OwnedSemaphorePermit,
}

/// How long a candidate waits for no serving call to be in flight before it gives up (the
/// reconcile counts as skipped): a candidate never runs beside a serving call.
pub const IDLE_WAIT: Duration = Duration::from_secs(2);

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
    /// Not shadowed: every candidate slot was busy, the serving lane was not idle within
    /// [`IDLE_WAIT`], or the candidate's thread failed.
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
    /// Times its canary was rolled back by itself.
    #[serde(default)]
    pub rollbacks: u64,
    /// The last differences, oldest first.
    pub differences: Vec<Difference>,
}

/// Every plugin's shadow comparisons, shared by the controllers of a host.
pub struct ShadowLog {
    plugins: Mutex<HashMap<String, PluginReport>>,
    differences: broadcast::Sender<Difference>,
    rollbacks: broadcast::Sender<RolledBack>,
}

impl Default for ShadowLog {
    fn default() -> Self {
        Self { plugins: Mutex::new(HashMap::new()), differences: broadcast::channel(64).0, rollbacks: broadcast::channel(16).0 }
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

    /// Record that a canary rolled back (and tell the subscribers).
    pub fn rolled_back(&self, rollback: RolledBack) {
        let mut plugins = self.plugins.lock();
        let name = rollback.plugin.clone();
        let report = plugins.entry(name.clone()).or_insert_with(|| PluginReport { plugin: name, ..Default::default() });
        report.rollbacks += 1;
        drop(plugins);
        let _ = self.rollbacks.send(rollback);
    }

    /// Every canary roll-back from now on.
    pub fn subscribe_rollbacks(&self) -> broadcast::Receiver<RolledBack> {
        self.rollbacks.subscribe()
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

    #[test]
    fn a_canary_serves_its_shards_and_rolls_back_once_over_its_failure_rate() {
        let canary: Canary =
            serde_json::from_value(serde_json::json!({"shards": [0, 2], "maxFailureRate": 0.5, "minReconciles": 4})).unwrap();
        assert!(canary.validate(3).is_ok());
        assert!(canary.validate(2).unwrap_err().to_string().contains("shard 2, which does not exist"));
        let native = crate::native::SdkReconciler::<Never>::new().expect("a native reconciler");
        let shadow = Shadow::new(Arc::new(native), Arc::new(Grants::all()), 1).with_canary(Some(canary));
        let kind = KindRef::new("v1", "ConfigMap");
        let keys: Vec<ObjectKey> = (0..30).map(|i| kind.key(Some(&format!("ns-{i}")), "x")).collect();
        let served: Vec<usize> = keys.iter().filter(|k| shadow.serves(k, 3)).map(|k| crate::shard::shard_of(k, 3)).collect();
        assert!(!served.is_empty() && served.iter().all(|s| *s == 0 || *s == 2), "{served:?}");
        assert!(keys.iter().any(|k| !shadow.serves(k, 3)), "shard 1 is not served");
        // 2 of 3 failed: below minReconciles; the 4th (3 of 4 failed) is over 50%: rolled back, once.
        assert_eq!(shadow.canary_settled("p", true), None);
        assert_eq!(shadow.canary_settled("p", false), None);
        assert_eq!(shadow.canary_settled("p", true), None);
        let rb = shadow.canary_settled("p", true).expect("rolled back");
        assert_eq!((rb.failed, rb.total), (3, 4));
        assert_eq!(shadow.canary_settled("p", true), None, "only once");
        assert!(shadow.rolled_back() && keys.iter().all(|k| !shadow.serves(k, 3)));
    }

    /// A native reconciler for the tests (never called).
    struct Never;

    impl wasmloop_sdk::Reconciler for Never {
        fn metadata() -> wasmloop_sdk::Metadata {
            wasmloop_sdk::Metadata::new("never", "0.1.0").reconciles(wasmloop_sdk::kinds::CONFIG_MAP)
        }

        fn reconcile(_: wasmloop_sdk::Request) -> Result<wasmloop_sdk::Outcome, wasmloop_sdk::Error> {
            Ok(wasmloop_sdk::Outcome::new())
        }
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
