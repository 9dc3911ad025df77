//! Controller metrics, named as controller-runtime's: reconcile totals by result, errors,
//! reconcile time, active workers, plus actions by verb and result.

use std::time::Duration;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

use wasmloop_model::Verb;

use crate::queue::{QueueMetrics, QueueMetricsHandle};

/// How one action ended: the `result` label of `wasmloop_actions_total`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ActionResult {
    /// Sent and done (or already done).
    Ok,
    /// The API server refused it or did not answer.
    Error,
    /// Admission refused it (and with it the whole outcome).
    Refused,
    /// Admission could not judge it now: not sent, retried.
    Unverifiable,
    /// A precondition failed: the plugin's view was stale.
    Conflict,
    /// This replica may not write now (leader election, shard moved).
    Fenced,
    /// An Event over the Event budget: dropped.
    Dropped,
}

impl ActionResult {
    /// The label value.
    pub fn as_str(self) -> &'static str {
        match self {
            ActionResult::Ok => "ok",
            ActionResult::Error => "error",
            ActionResult::Refused => "refused",
            ActionResult::Unverifiable => "unverifiable",
            ActionResult::Conflict => "conflict",
            ActionResult::Fenced => "fenced",
            ActionResult::Dropped => "dropped",
        }
    }
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ControllerLabel {
    controller: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ResultLabels {
    controller: String,
    result: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct BudgetLabels {
    controller: String,
    budget: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ActionLabels {
    controller: String,
    verb: String,
    result: String,
}

/// Metrics of all controllers (one set of families, labelled by controller name).
#[derive(Clone)]
pub struct ControllerMetrics {
    reconcile_total: Family<ResultLabels, Counter>,
    reconcile_errors: Family<ControllerLabel, Counter>,
    reconcile_time: Family<ControllerLabel, Histogram>,
    active_workers: Family<ControllerLabel, Gauge>,
    actions: Family<ActionLabels, Counter>,
    shadow: Family<ResultLabels, Counter>,
    canary: Family<ResultLabels, Counter>,
    mapping_capped: Family<ControllerLabel, Counter>,
    index_bytes: Family<ControllerLabel, Gauge>,
    budget_exceeded: Family<BudgetLabels, Counter>,
    queues: QueueMetrics,
}

impl ControllerMetrics {
    /// Register the controller and work-queue families in `registry`.
    pub fn new(registry: &mut Registry) -> Self {
        let m = Self {
            reconcile_total: Family::default(),
            reconcile_errors: Family::default(),
            reconcile_time: Family::new_with_constructor(|| Histogram::new(exponential_buckets(0.0001, 2.0, 18))),
            active_workers: Family::default(),
            actions: Family::default(),
            shadow: Family::default(),
            canary: Family::default(),
            mapping_capped: Family::default(),
            index_bytes: Family::default(),
            budget_exceeded: Family::default(),
            queues: QueueMetrics::new(registry),
        };
        let r = registry.sub_registry_with_prefix("controller_runtime");
        r.register("reconcile", "Reconciles by controller and result", m.reconcile_total.clone());
        r.register("reconcile_errors", "Reconciles that failed", m.reconcile_errors.clone());
        r.register("reconcile_time_seconds", "Time per reconcile, actions included", m.reconcile_time.clone());
        r.register("active_workers", "Workers currently reconciling", m.active_workers.clone());
        let w = registry.sub_registry_with_prefix("wasmloop");
        w.register("actions", "Actions executed by verb and result", m.actions.clone());
        w.register(
            "shadow_reconciles",
            "Reconciles a candidate version shadowed, by how its outcome compared (same, different, skipped)",
            m.shadow.clone(),
        );
        w.register(
            "canary_reconciles",
            "Reconciles a candidate version served on its canary shards, by result (ok, failed)",
            m.canary.clone(),
        );
        w.register(
            "mapping_keys_capped",
            "Changes of watched objects whose index mapping stopped at budgets.keysPerEvent (later keys not queued)",
            m.mapping_capped.clone(),
        );
        w.register(
            "plugin_index_bytes",
            "Estimated heap bytes of the entries of each controller's indexes (shared ones counted in full for each)",
            m.index_bytes.clone(),
        );
        w.register(
            "budget_exceeded",
            "Times a running controller grew past one of its budgets (indexMemory), by budget",
            m.budget_exceeded.clone(),
        );
        m
    }

    /// Metrics that are registered nowhere (tests, offline runs).
    pub fn unregistered() -> Self {
        Self::new(&mut Registry::default())
    }

    pub(crate) fn queue_handle(&self, name: &str) -> QueueMetricsHandle {
        self.queues.for_queue(name)
    }

    pub(crate) fn worker_started(&self, controller: &str) {
        self.active_workers.get_or_create(&label(controller)).inc();
    }

    pub(crate) fn worker_finished(&self, controller: &str, took: Duration, result: &str) {
        let l = label(controller);
        self.active_workers.get_or_create(&l).dec();
        self.reconcile_time.get_or_create(&l).observe(took.as_secs_f64());
        self.reconcile_total.get_or_create(&ResultLabels { controller: controller.to_string(), result: result.to_string() }).inc();
        if result.contains("error") {
            self.reconcile_errors.get_or_create(&l).inc();
        }
    }

    pub(crate) fn action_executed(&self, controller: &str, verb: Verb, result: ActionResult) {
        let labels = ActionLabels { controller: controller.into(), verb: verb.as_str().into(), result: result.as_str().into() };
        self.actions.get_or_create(&labels).inc();
    }

    pub(crate) fn shadowed(&self, controller: &str, compared: super::shadow::Compared) {
        self.shadow.get_or_create(&ResultLabels { controller: controller.to_string(), result: compared.as_str().to_string() }).inc();
    }

    pub(crate) fn canary(&self, controller: &str, failed: bool) {
        let result = if failed { "failed" } else { "ok" };
        self.canary.get_or_create(&ResultLabels { controller: controller.to_string(), result: result.to_string() }).inc();
    }

    pub(crate) fn mapping_capped(&self, controller: &str) {
        self.mapping_capped.get_or_create(&label(controller)).inc();
    }

    pub(crate) fn index_bytes(&self, controller: &str, bytes: usize) {
        self.index_bytes.get_or_create(&label(controller)).set(i64::try_from(bytes).unwrap_or(i64::MAX));
    }

    pub(crate) fn budget_exceeded(&self, controller: &str, budget: super::Budget) {
        self.budget_exceeded.get_or_create(&BudgetLabels { controller: controller.into(), budget: budget.as_str().into() }).inc();
    }

    /// Changes of `controller`'s watched objects whose index mapping stopped at the key cap.
    pub fn mappings_capped(&self, controller: &str) -> u64 {
        self.mapping_capped.get_or_create(&label(controller)).get()
    }

    /// Times `controller` grew past `budget` while running.
    pub fn budgets_exceeded(&self, controller: &str, budget: super::Budget) -> u64 {
        self.budget_exceeded.get_or_create(&BudgetLabels { controller: controller.into(), budget: budget.as_str().into() }).get()
    }

    /// Reconciles of `controller` that ended with `result` (`success`, `requeue_after`, `error`,
    /// `permanent_error`).
    pub fn reconciles(&self, controller: &str, result: &str) -> u64 {
        self.reconcile_total.get_or_create(&ResultLabels { controller: controller.to_string(), result: result.to_string() }).get()
    }

    /// Actions of `controller` with `verb` that ended with `result` (`ok` or `error`).
    pub fn actions(&self, controller: &str, verb: &str, result: &str) -> u64 {
        self.actions.get_or_create(&ActionLabels { controller: controller.into(), verb: verb.into(), result: result.into() }).get()
    }
}

fn label(controller: &str) -> ControllerLabel {
    ControllerLabel { controller: controller.to_string() }
}
