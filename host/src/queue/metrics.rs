//! Per-queue Prometheus metrics, named and meant as client-go's workqueue metrics.
//!
//! | metric | type | meaning |
//! | --- | --- | --- |
//! | `workqueue_depth` | gauge | keys ready to be handed out |
//! | `workqueue_adds_total` | counter | adds that queued a key (deduplicated adds are not counted) |
//! | `workqueue_queue_duration_seconds` | histogram | time from add to `get` |
//! | `workqueue_work_duration_seconds` | histogram | time from `get` to `done` |
//! | `workqueue_unfinished_work_seconds` | gauge | sum of the ages of keys being processed |
//! | `workqueue_longest_running_processor_seconds` | gauge | age of the oldest key being processed |
//! | `workqueue_retries_total` | counter | rate-limited re-adds |
//!
//! and per [`Priority`] (label `priority`: `low`, `normal`), wasmloop's own:
//!
//! | metric | type | meaning |
//! | --- | --- | --- |
//! | `wasmloop_workqueue_depth` | gauge | keys of that priority ready to be handed out |
//! | `wasmloop_workqueue_oldest_ready_seconds` | gauge | how long the oldest ready key of that priority has waited (0 if none) |
//! | `wasmloop_workqueue_queue_duration_seconds` | histogram | time from add to `get`, by the priority the key was handed out at |
//! | `wasmloop_workqueue_aged_total` | counter | `Low` keys handed out ahead of ready `Normal` keys because they had aged (no `priority` label) |
//!
//! Every series carries the label `name=<queue name>`. The two "in progress" gauges and the
//! oldest-ready gauge are computed when scraped (a [`Collector`]) from the start times of the
//! work in flight and the ready times of the queue heads, so they are right even when no queue
//! operation happened since the last scrape. Alert on `wasmloop_workqueue_oldest_ready_seconds
//! {priority="low"}` well above the bound of [`crate::queue::priority`].

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::sync::atomic::AtomicU64;
use std::time::Duration;

use parking_lot::Mutex;
use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeLabelSet, EncodeMetric};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;
use tokio::time::Instant;

use crate::queue::Priority;

#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
struct QueueLabels {
    name: String,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
struct PriorityLabels {
    name: String,
    priority: String,
}

impl PriorityLabels {
    fn new(name: &str, priority: Priority) -> Self {
        Self { name: name.to_owned(), priority: priority.as_str().to_owned() }
    }
}

type HistogramFamily = Family<QueueLabels, Histogram, fn() -> Histogram>;
type PriorityHistogramFamily = Family<PriorityLabels, Histogram, fn() -> Histogram>;

/// client-go's buckets: 10 ns to 1000 s, ×10 each.
fn duration_histogram() -> Histogram {
    Histogram::new(exponential_buckets(1e-8, 10.0, 12))
}

/// Finer buckets for the per-priority waits, to tell an aging bound of seconds apart:
/// 1 ms to 524 s, ×2 each.
fn wait_histogram() -> Histogram {
    Histogram::new(exponential_buckets(1e-3, 2.0, 20))
}

/// In-flight work of the queues sharing one name, keyed by a per-get id.
type InFlight = Arc<Mutex<HashMap<u64, Instant>>>;

/// When the oldest ready key of each priority became ready, per queue name.
type Oldest = Arc<Mutex<[Option<Instant>; 2]>>;

/// The metric families of all queues, registered once. Cheap to clone.
#[derive(Debug, Clone)]
pub struct QueueMetrics {
    depth: Family<QueueLabels, Gauge>,
    adds: Family<QueueLabels, Counter>,
    queue_duration: HistogramFamily,
    work_duration: HistogramFamily,
    retries: Family<QueueLabels, Counter>,
    in_flight: Arc<Mutex<BTreeMap<String, InFlight>>>,
    priority_depth: Family<PriorityLabels, Gauge>,
    priority_queue_duration: PriorityHistogramFamily,
    aged: Family<QueueLabels, Counter>,
    oldest: Arc<Mutex<BTreeMap<String, Oldest>>>,
}

impl QueueMetrics {
    /// Registers the workqueue metric families in `registry`.
    pub fn new(registry: &mut Registry) -> Self {
        let metrics = Self {
            depth: Family::default(),
            adds: Family::default(),
            queue_duration: Family::new_with_constructor(duration_histogram),
            work_duration: Family::new_with_constructor(duration_histogram),
            retries: Family::default(),
            in_flight: Arc::default(),
            priority_depth: Family::default(),
            priority_queue_duration: Family::new_with_constructor(wait_histogram),
            aged: Family::default(),
            oldest: Arc::default(),
        };
        registry.register("workqueue_depth", "Current depth of the workqueue", metrics.depth.clone());
        registry.register("workqueue_adds", "Total number of adds handled by the workqueue", metrics.adds.clone());
        registry.register(
            "workqueue_queue_duration_seconds",
            "How long in seconds a key stays in the workqueue before being requested",
            metrics.queue_duration.clone(),
        );
        registry.register(
            "workqueue_work_duration_seconds",
            "How long in seconds processing a key from the workqueue takes",
            metrics.work_duration.clone(),
        );
        registry.register("workqueue_retries", "Total number of retries handled by the workqueue", metrics.retries.clone());
        registry.register("wasmloop_workqueue_depth", "Keys of each priority ready to be handed out", metrics.priority_depth.clone());
        registry.register(
            "wasmloop_workqueue_queue_duration_seconds",
            "How long in seconds a key stays in the workqueue before being requested, by the priority it was handed out at",
            metrics.priority_queue_duration.clone(),
        );
        registry.register(
            "wasmloop_workqueue_aged",
            "Low-priority keys handed out ahead of ready normal ones because they had aged",
            metrics.aged.clone(),
        );
        registry.register_collector(Box::new(InFlightCollector { in_flight: metrics.in_flight.clone(), oldest: metrics.oldest.clone() }));
        metrics
    }

    /// The metrics of the queue called `name` (queues sharing a name share their series).
    pub fn for_queue(&self, name: &str) -> QueueMetricsHandle {
        let labels = QueueLabels { name: name.to_owned() };
        let in_flight = self.in_flight.lock().entry(name.to_owned()).or_default().clone();
        let oldest = self.oldest.lock().entry(name.to_owned()).or_default().clone();
        let by_priority = |p| PriorityLabels::new(name, p);
        QueueMetricsHandle {
            depth: self.depth.get_or_create(&labels).clone(),
            adds: self.adds.get_or_create(&labels).clone(),
            queue_duration: self.queue_duration.get_or_create(&labels).clone(),
            work_duration: self.work_duration.get_or_create(&labels).clone(),
            retries: self.retries.get_or_create(&labels).clone(),
            in_flight,
            priority_depth: Priority::ALL.map(|p| self.priority_depth.get_or_create(&by_priority(p)).clone()),
            priority_queue_duration: Priority::ALL.map(|p| self.priority_queue_duration.get_or_create(&by_priority(p)).clone()),
            aged: self.aged.get_or_create(&labels).clone(),
            oldest,
        }
    }
}

/// One queue's metrics, given to [`WorkQueue::new`](crate::queue::WorkQueue::new).
#[derive(Debug, Clone)]
pub struct QueueMetricsHandle {
    depth: Gauge,
    adds: Counter,
    queue_duration: Histogram,
    work_duration: Histogram,
    retries: Counter,
    in_flight: InFlight,
    priority_depth: [Gauge; 2],
    priority_queue_duration: [Histogram; 2],
    aged: Counter,
    oldest: Oldest,
}

/// Identifies one unit of work in flight, from `get` to `done`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct WorkId(u64);

impl QueueMetricsHandle {
    pub(crate) fn added(&self) {
        self.adds.inc();
    }

    pub(crate) fn retried(&self) {
        self.retries.inc();
    }

    pub(crate) fn set_depth(&self, depth: usize) {
        self.depth.set(i64::try_from(depth).unwrap_or(i64::MAX));
    }

    /// A key queued at `queued_at` was handed to a worker now.
    pub(crate) fn started(&self, queued_at: Instant) -> WorkId {
        static NEXT_ID: AtomicU64 = AtomicU64::new(0);
        let now = Instant::now();
        self.queue_duration.observe(now.saturating_duration_since(queued_at).as_secs_f64());
        let id = NEXT_ID.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        self.in_flight.lock().insert(id, now);
        WorkId(id)
    }

    /// Depth of `priority` and when its oldest ready key became ready.
    pub(crate) fn set_priority_depth(&self, priority: Priority, depth: usize, oldest: Option<Instant>) {
        self.priority_depth[priority.index()].set(i64::try_from(depth).unwrap_or(i64::MAX));
        self.oldest.lock()[priority.index()] = oldest;
    }

    /// A key queued at `queued_at` was handed to a worker now, at `priority`; `aged_ahead` if it
    /// was an aged `Low` key served before ready `Normal` ones.
    pub(crate) fn started_at(&self, queued_at: Instant, priority: Priority, aged_ahead: bool) -> WorkId {
        let waited = Instant::now().saturating_duration_since(queued_at);
        self.priority_queue_duration[priority.index()].observe(waited.as_secs_f64());
        if aged_ahead {
            self.aged.inc();
        }
        self.started(queued_at)
    }

    /// The worker finished the key started as `id`.
    pub(crate) fn finished(&self, id: WorkId) {
        if let Some(started) = self.in_flight.lock().remove(&id.0) {
            self.work_duration.observe(started.elapsed().as_secs_f64());
        }
    }

    /// The work `id` will never finish (its queue is gone): stop counting it as in flight.
    pub(crate) fn abandoned(&self, id: WorkId) {
        self.in_flight.lock().remove(&id.0);
    }
}

/// Computes the two "in progress" gauges and the oldest-ready gauge at scrape time.
#[derive(Debug)]
struct InFlightCollector {
    in_flight: Arc<Mutex<BTreeMap<String, InFlight>>>,
    oldest: Arc<Mutex<BTreeMap<String, Oldest>>>,
}

impl Collector for InFlightCollector {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let unfinished = Family::<QueueLabels, Gauge<f64, AtomicU64>>::default();
        let longest = Family::<QueueLabels, Gauge<f64, AtomicU64>>::default();
        let now = Instant::now();
        for (name, in_flight) in self.in_flight.lock().iter() {
            let ages: Vec<_> = in_flight.lock().values().map(|start| now.saturating_duration_since(*start)).collect();
            let labels = QueueLabels { name: name.clone() };
            let total: Duration = ages.iter().sum();
            let oldest = ages.iter().max().copied().unwrap_or_default();
            unfinished.get_or_create(&labels).set(total.as_secs_f64());
            longest.get_or_create(&labels).set(oldest.as_secs_f64());
        }
        for (name, help, family) in [
            (
                "workqueue_unfinished_work_seconds",
                "How many seconds of work is in progress and not yet observed by work_duration",
                &unfinished,
            ),
            (
                "workqueue_longest_running_processor_seconds",
                "How many seconds the longest running processor of the workqueue has been running",
                &longest,
            ),
        ] {
            let metric_encoder = encoder.encode_descriptor(name, help, None, family.metric_type())?;
            family.encode(metric_encoder)?;
        }
        let oldest = Family::<PriorityLabels, Gauge<f64, AtomicU64>>::default();
        for (name, heads) in self.oldest.lock().iter() {
            let heads = *heads.lock();
            for p in Priority::ALL {
                let age = heads[p.index()].map_or(Duration::ZERO, |since| now.saturating_duration_since(since));
                oldest.get_or_create(&PriorityLabels::new(name, p)).set(age.as_secs_f64());
            }
        }
        let metric_encoder = encoder.encode_descriptor(
            "wasmloop_workqueue_oldest_ready_seconds",
            "How many seconds the oldest ready key of each priority has waited",
            None,
            oldest.metric_type(),
        )?;
        oldest.encode(metric_encoder)?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use prometheus_client::encoding::text::encode;

    fn scrape(registry: &Registry) -> String {
        let mut text = String::new();
        encode(&mut text, registry).expect("encoding into a String cannot fail");
        text
    }

    #[tokio::test(start_paused = true)]
    async fn handle_records_into_labelled_series() {
        let mut registry = Registry::default();
        let metrics = QueueMetrics::new(&mut registry);
        let a = metrics.for_queue("a");
        let b = metrics.for_queue("b");
        a.added();
        a.added();
        a.set_depth(2);
        a.retried();
        b.added();
        let text = scrape(&registry);
        assert!(text.contains("workqueue_adds_total{name=\"a\"} 2\n"), "{text}");
        assert!(text.contains("workqueue_adds_total{name=\"b\"} 1\n"), "{text}");
        assert!(text.contains("workqueue_depth{name=\"a\"} 2\n"), "{text}");
        assert!(text.contains("workqueue_retries_total{name=\"a\"} 1\n"), "{text}");
        assert!(text.contains("workqueue_retries_total{name=\"b\"} 0\n"), "{text}");
    }

    #[tokio::test(start_paused = true)]
    async fn in_flight_gauges_are_computed_at_scrape_time() {
        let mut registry = Registry::default();
        let metrics = QueueMetrics::new(&mut registry);
        let q = metrics.for_queue("q");
        let first = q.started(Instant::now());
        tokio::time::advance(Duration::from_secs(2)).await;
        let second = q.started(Instant::now());
        tokio::time::advance(Duration::from_secs(1)).await;
        // No queue activity since: the scrape itself sees 3 s + 1 s of work, the oldest 3 s old.
        let text = scrape(&registry);
        assert!(text.contains("workqueue_unfinished_work_seconds{name=\"q\"} 4.0\n"), "{text}");
        assert!(text.contains("workqueue_longest_running_processor_seconds{name=\"q\"} 3.0\n"), "{text}");
        q.finished(first);
        q.abandoned(second);
        let text = scrape(&registry);
        assert!(text.contains("workqueue_unfinished_work_seconds{name=\"q\"} 0.0\n"), "{text}");
        assert!(text.contains("workqueue_longest_running_processor_seconds{name=\"q\"} 0.0\n"), "{text}");
        // Only the finished one was observed as work.
        assert!(text.contains("workqueue_work_duration_seconds_count{name=\"q\"} 1\n"), "{text}");
        assert!(text.contains("workqueue_work_duration_seconds_sum{name=\"q\"} 3.0\n"), "{text}");
    }
}
