//! [`FenceKeeper`]: the I/O side of one fence. Whoever writes the Lease (the leader election, the
//! sharding coordinator) tells it each renewal it sends and how it was answered, and when the
//! Lease is lost; the keeper runs them through the [`Machine`] on the monotonic clock, publishes
//! the window the writers check, logs every opening and closing, and counts them.

use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::coordination::v1::Lease;
use parking_lot::Mutex;
use tokio::time::Instant;
use tracing::{info, warn};

use super::confirm::{Confirm, KubeLeaseReader, LeaseReader, LeaseToken};
use super::machine::{Answer, Change, Closed, Machine, Renewal};
use super::metrics::FenceMetrics;
use super::{Fence, Window};

/// What the keepers of one replica share.
#[derive(Clone)]
pub struct KeeperConfig {
    /// How long a renewal is good for, from when it was sent: lease duration − a margin for
    /// clock-rate differences between this replica and the others.
    pub validity: Duration,
    /// Where openings, closings and reads are counted.
    pub metrics: FenceMetrics,
    /// Read the Leases (to confirm writes) with this client, in this namespace; `None`: writes
    /// are judged by the local deadline alone.
    pub reads: Option<(kube::Client, String)>,
}

impl std::fmt::Debug for KeeperConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let reads = self.reads.as_ref().map(|(_, ns)| ns);
        f.debug_struct("KeeperConfig").field("validity", &self.validity).field("reads_in", &reads).finish_non_exhaustive()
    }
}

/// Feeds one fence from the renewals of its Lease. Cheap to share (`Arc`); one per fence.
#[derive(Debug)]
pub struct FenceKeeper {
    fence: Fence,
    lease: String,
    metrics: FenceMetrics,
    state: Mutex<State>,
}

#[derive(Debug)]
struct State {
    machine: Machine,
    /// The acquisition the window rests on.
    token: Option<LeaseToken>,
}

impl FenceKeeper {
    /// Keep `fence` (made with [`Fence::closed`]) from the renewals of Lease `lease`; writes
    /// behind it are confirmed with reads of the Lease when `config` says how.
    pub fn new(fence: Fence, lease: &str, config: &KeeperConfig) -> Arc<Self> {
        let reader: Option<Arc<dyn LeaseReader>> =
            config.reads.as_ref().map(|(client, ns)| Arc::new(KubeLeaseReader::new(client.clone(), ns, lease)) as _);
        Self::with_reader(fence, lease, config, reader)
    }

    /// The same, confirming writes with `reader` (if any).
    pub fn with_reader(fence: Fence, lease: &str, config: &KeeperConfig, reader: Option<Arc<dyn LeaseReader>>) -> Arc<Self> {
        if let Some(reader) = reader
            && !fence.confirm_with(Confirm::new(reader, config.metrics.clone()))
        {
            warn!(%lease, "the write fence already confirms writes with another Lease's reads");
        }
        Arc::new(Self {
            fence,
            lease: lease.to_string(),
            metrics: config.metrics.clone(),
            state: Mutex::new(State { machine: Machine::new(config.validity), token: None }),
        })
    }

    /// The fence the writers check.
    pub fn fence(&self) -> &Fence {
        &self.fence
    }

    /// Whether writes may go out now.
    pub fn is_open(&self) -> bool {
        self.state.lock().machine.is_open(Instant::now())
    }

    /// A renewal (or take) of the Lease is being sent now: call right before the request goes
    /// out, and pass what it returns to [`FenceKeeper::renewed`], [`FenceKeeper::conflicted`]
    /// or [`FenceKeeper::failed`].
    pub fn sent(&self) -> Renewal {
        let mut state = self.state.lock();
        let (renewal, changes) = state.machine.send(Instant::now());
        self.settle(&mut state, &changes);
        renewal
    }

    /// `renewal` succeeded: the API server returned `lease`, held by this replica.
    pub fn renewed(&self, renewal: Renewal, lease: &Lease) -> Vec<Change> {
        self.answer(renewal, Answer::Renewed, Some(LeaseToken::of(lease)))
    }

    /// `renewal` was answered 409 Conflict: another replica wrote the Lease.
    pub fn conflicted(&self, renewal: Renewal) -> Vec<Change> {
        self.answer(renewal, Answer::Conflict, None)
    }

    /// `renewal` failed without saying who holds the Lease (timeout, 5xx, connection).
    pub fn failed(&self, renewal: Renewal) -> Vec<Change> {
        self.answer(renewal, Answer::Failed, None)
    }

    /// The Lease is not this replica's now (held by another, deleted, about to be released, or
    /// the replica leaves): closed, and nothing sent before reopens it.
    pub fn lost(&self) -> Vec<Change> {
        let mut state = self.state.lock();
        let changes = state.machine.lose(Instant::now());
        self.settle(&mut state, &changes);
        changes
    }

    /// Time passed: closes the fence if its deadline is behind (call it often: every round).
    pub fn tick(&self) -> Vec<Change> {
        let mut state = self.state.lock();
        let changes = state.machine.tick(Instant::now());
        self.settle(&mut state, &changes);
        changes
    }

    fn answer(&self, renewal: Renewal, answer: Answer, token: Option<LeaseToken>) -> Vec<Change> {
        let mut state = self.state.lock();
        let changes = state.machine.answer(renewal, answer, Instant::now());
        // The window rests on this renewal when its own deadline is the window's.
        if token.is_some() && state.machine.open_until() == Some(renewal.sent() + state.machine.validity()) {
            state.token = token;
        }
        self.settle(&mut state, &changes);
        changes
    }

    /// Publish the window, log and count the changes.
    fn settle(&self, state: &mut State, changes: &[Change]) {
        let until = state.machine.open_until();
        if until.is_none() {
            state.token = None;
        }
        self.fence.publish(Window { until, token: state.token.clone() });
        let lease = self.lease.as_str();
        let now = Instant::now();
        for change in changes {
            match *change {
                Change::Opened { until } => {
                    self.metrics.opened(lease);
                    let open_ms = until.saturating_duration_since(now).as_millis() as u64;
                    info!(%lease, open_ms, "fence opened: a renewal of the Lease succeeded; writes go out");
                }
                Change::Closed(why) => {
                    self.metrics.closed(lease, why.as_str());
                    let reason = why.as_str();
                    match why {
                        Closed::Expired { late } => {
                            let late_ms = late.as_millis() as u64;
                            warn!(%lease, reason, late_ms, "fence closed: no renewal extended its deadline (a pause of this process, or renewals failing); only a renewal sent from now reopens it");
                        }
                        Closed::Conflict => {
                            warn!(%lease, reason, late_ms = 0u64, "fence closed: a renewal conflicted (another replica wrote the Lease)");
                        }
                        Closed::Lost => info!(%lease, reason, late_ms = 0u64, "fence closed: the Lease is not this replica's"),
                    }
                }
                Change::Stale { sent } => {
                    self.metrics.stale(lease);
                    let sent_ms_ago = now.saturating_duration_since(sent).as_millis() as u64;
                    warn!(%lease, sent_ms_ago, "a renewal sent before the fence closed succeeded: stale evidence, the fence stays closed until a fresh renewal succeeds");
                }
            }
        }
    }
}
