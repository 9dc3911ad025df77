//! [`FenceMetrics`]: the fences' openings and closings per Lease, and the reads of a Lease that
//! confirm writes (how many, how long, what they found).

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct LeaseLabels {
    lease: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ClosedLabels {
    lease: String,
    reason: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ResultLabels {
    result: &'static str,
}

/// The fences' metrics: openings and closings per Lease, and the reads that confirm writes.
#[derive(Clone, Debug)]
pub struct FenceMetrics {
    opened: Family<LeaseLabels, Counter>,
    closed: Family<ClosedLabels, Counter>,
    stale: Family<LeaseLabels, Counter>,
    reads: Counter,
    read_seconds: Histogram,
    confirmations: Family<ResultLabels, Counter>,
}

impl Default for FenceMetrics {
    fn default() -> Self {
        Self {
            opened: Family::default(),
            closed: Family::default(),
            stale: Family::default(),
            reads: Counter::default(),
            // 0.25 ms to ~1 s.
            read_seconds: Histogram::new(exponential_buckets(0.000_25, 2.0, 13)),
            confirmations: Family::default(),
        }
    }
}

impl FenceMetrics {
    /// Metrics registered in `registry` (one set per process: every fence shares it).
    pub fn new(registry: &mut Registry) -> Self {
        let m = Self::default();
        registry.register(
            "wasmloop_fence_opened",
            "Times a write fence opened (a renewal of its Lease succeeded), by Lease",
            m.opened.clone(),
        );
        registry.register(
            "wasmloop_fence_closed",
            "Times a write fence closed, by Lease and reason (expired, conflict, lost)",
            m.closed.clone(),
        );
        registry.register(
            "wasmloop_fence_stale_renewals",
            "Renewals that succeeded but were sent before the fence last closed (they open nothing), by Lease",
            m.stale.clone(),
        );
        registry.register(
            "wasmloop_fence_reads",
            "Reads of a Lease that confirmed writes (each serves the writes waiting for it)",
            m.reads.clone(),
        );
        registry.register(
            "wasmloop_fence_read_seconds",
            "Time a read of a Lease that confirms writes took, from its send to its answer",
            m.read_seconds.clone(),
        );
        registry.register(
            "wasmloop_fence_confirmations",
            "Writes checked by a read of their Lease, by result (held, taken, unconfirmed)",
            m.confirmations.clone(),
        );
        m
    }

    /// The fence of `lease` opened.
    pub(super) fn opened(&self, lease: &str) {
        self.opened.get_or_create(&LeaseLabels { lease: lease.to_owned() }).inc();
    }

    /// The fence of `lease` closed, for `reason`.
    pub(super) fn closed(&self, lease: &str, reason: &'static str) {
        self.closed.get_or_create(&ClosedLabels { lease: lease.to_owned(), reason }).inc();
    }

    /// An answer to a renewal of `lease` came too late to reopen its fence.
    pub(super) fn stale(&self, lease: &str) {
        self.stale.get_or_create(&LeaseLabels { lease: lease.to_owned() }).inc();
    }

    /// A confirming read of a Lease took `took`.
    pub(super) fn read(&self, took: std::time::Duration) {
        self.reads.inc();
        self.read_seconds.observe(took.as_secs_f64());
    }

    /// A write was confirmed (or not) by a read: `result`.
    pub(super) fn confirmed(&self, result: &super::Result<()>) {
        let result = match result {
            Ok(()) => "held",
            Err(super::Error::Unconfirmed { .. }) => "unconfirmed",
            Err(_) => "taken",
        };
        self.confirmations.get_or_create(&ResultLabels { result }).inc();
    }
}
