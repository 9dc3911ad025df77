//! The control loop: events → keys → work queue → reconcile → actions.
//!
//! - [`wiring`]: informers, indexes and the handlers that turn changes into keys; which objects
//!   the cache will hold;
//! - [`worker`]: one key at a time, reconciled and settled (requeue, backoff, last error);
//! - [`apply`]: admission, then the actions within budgets, in slow-start batches;
//! - [`budget`]: what a plugin may declare (watches, selectors, indexes, their memory, ...);
//! - [`mapping`], [`expectations`], [`slow_start`], [`metrics`]: the rules those use.
//!
//! A [`Controller`] runs one [`Reconciler`] (native or Wasm):
//! - it acquires shared informers for the reconciled kind and every watched kind, and maps each
//!   cache change to keys of the reconciled kind ([`mapping`]);
//! - N workers take keys from a rate-limited [`WorkQueue`] (one key is never processed twice at
//!   once; bursts fold into one reconcile), run the reconciler (a plugin on a guest thread, a native
//!   one in place) against a read-only [`CacheView`], check every action against the [`Grants`], then execute them in
//!   order (runs of creates and deletes in slow-start batches of concurrent calls);
//! - failures are retried with per-key exponential backoff (the next request carries the last
//!   error), a failed precondition (conflict) requeues the key, `requeue_after` is honoured, and
//!   a periodic resync replays the cache into the queue without any API call;
//! - after creates and deletes, a key is not reconciled again until the cache shows them
//!   ([`expectations`]), so a reconciler never acts twice on a stale view of its own writes;
//! - [`Controller::replace_reconciler`] swaps in a new version without losing queued keys:
//!   running reconciles finish on the old one, the next one runs the new one.

mod apply;
pub mod budget;
#[cfg(test)]
mod conformance_tests;
mod expectations;
#[cfg(test)]
mod harness;
mod invalid;
mod mapping;
mod metrics;
mod settled;
pub mod shadow;
pub mod slow_start;
mod wiring;
mod worker;

/// The reconciler contract, re-exported where controllers are built.
pub use crate::reconciler::{
    Cause, FieldDecl, IndexDecl, Mapping, Outcome, Reason, ReconcileError, Reconciler, ReconcilerSpec, Request, Retry, WatchSpec,
};
pub use budget::{Budget, Budgets};
pub use expectations::Expectations;
pub use invalid::InvalidSetting;
pub use metrics::{ActionResult, ControllerMetrics};
pub use shadow::{Canary, Shadow, ShadowLog};
pub use wiring::{ReadScopeError, read_namespaces};

use std::sync::Arc;
use std::time::Duration;

use parking_lot::RwLock;
use serde::Deserialize;
use tokio::task::JoinHandle;
use tokio::time::Instant;
use tracing::{Instrument, info, info_span, warn};

use crate::admission::Admission;
use crate::cache::{self, CacheView};
use crate::executor::{Execute, Executor};
use crate::fence::Fence;
use crate::grants::Grants;
use crate::informer::{self, InformerRegistry, Subscription};
use crate::kinds::{KindRef, ObjectKey};
use crate::queue::{RateLimitConfig, TokenBucket, WorkQueue};
use crate::shard::Ownership;
use wiring::Caching;
use worker::KeyStates;

/// Errors starting or reconfiguring a controller.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// One of the controller's informers would not start or sync.
    #[error("controller {controller}: {source}")]
    Informer {
        /// The controller's name.
        controller: String,
        /// The informer's error.
        source: informer::Error,
    },
    /// An index the controller declares cannot be added to its kind's cache.
    #[error("controller {controller}: index {index:?} on {kind}: {source}")]
    Index {
        /// The controller's name.
        controller: String,
        /// The indexed kind.
        kind: String,
        /// The index's name.
        index: String,
        /// Why it cannot be added.
        source: cache::Error,
    },
    /// The controller's declared reads are not covered by its grants.
    #[error("controller {controller}: {source}")]
    Grants {
        /// The controller's name.
        controller: String,
        /// What the grants refuse.
        source: crate::grants::Error,
    },
    /// What the controller declares (or its indexes hold) is over one of its budgets.
    #[error("controller {controller}: {source}")]
    Budget {
        /// The controller's name.
        controller: String,
        /// Which budget, its value and the amount declared.
        source: budget::Exceeded,
    },
    /// The controller cannot read a kind in the scope it needs.
    #[error("controller {controller}: cannot read {kind}: {reason}")]
    ReadScope {
        /// The controller's name.
        controller: String,
        /// The kind.
        kind: KindRef,
        /// Why not.
        reason: String,
    },
}

/// A result whose error is a controller's.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// How a controller runs. Defaults follow controller-runtime.
#[derive(Clone, Debug, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct ControllerConfig {
    /// Concurrent reconciles (distinct keys). Default 1.
    pub workers: usize,
    /// Replay the whole cache into the queue this often; `None` disables. Default 10 h.
    #[serde(with = "crate::duration::serde_opt")]
    pub resync: Option<Duration>,
    /// Watch only this namespace (default: all).
    pub namespace: Option<String>,
    /// Per-key backoff and overall bucket.
    pub rate_limits: RateLimitConfig,
    /// How long to wait for the first list of every informer. Default 2 min.
    #[serde(with = "crate::duration::serde")]
    pub sync_timeout: Duration,
    /// Floor of a reconcile's `requeue_after` (default 1 s); requeues also take a token from
    /// the queue's overall bucket, so a plugin asking for 0 ms cannot spin.
    #[serde(with = "crate::duration::serde")]
    pub min_requeue_after: Duration,
    /// The controller's client-side API budget for the actions it sends.
    pub api: RateBudget,
    /// Events a controller may record: one token per Event; Events over it are dropped and
    /// counted (`result="dropped"`), not queued. Default 5 per second, burst 50.
    pub events: RateBudget,
    /// How long a key waits at most for the cache to show its creates and deletes
    /// ([`expectations`]). Default 5 min (KCM's `ExpectationsTimeout`).
    #[serde(with = "crate::duration::serde")]
    pub expectations_timeout: Duration,
    /// Key-space shards by namespace hash, each owned by one replica with `--shard-mode
    /// plugin` ([`crate::shard`]). Default 1: the plugin is one shard.
    pub shards: usize,
    /// What the reconciler may declare ([`budget`]).
    pub budgets: Budgets,
}

/// A rate with a burst (a token bucket, as client-go's client-side limiter): the actions a
/// controller may send (so one plugin cannot use up the host's API Priority and Fairness share
/// or delay its Lease renewals; default 50 qps, burst 100), or the Events it may record.
#[derive(Clone, Copy, Debug, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase", default, deny_unknown_fields)]
pub struct RateBudget {
    /// The sustained rate, per second.
    pub qps: f64,
    /// How many may go at once after a quiet spell (the bucket's size).
    pub burst: u32,
}

impl Default for RateBudget {
    fn default() -> Self {
        Self { qps: 50.0, burst: 100 }
    }
}

impl RateBudget {
    /// `qps` must be positive and `burst` at least 1; errors name `field` (e.g. `api`).
    pub fn validate(&self, field: &str) -> std::result::Result<(), InvalidSetting> {
        if self.qps.is_nan() || self.qps <= 0.0 {
            return Err(InvalidSetting::new(format!("{field}.qps"), format!("must be positive, got {}", self.qps)));
        }
        if self.burst == 0 {
            return Err(InvalidSetting::new(format!("{field}.burst"), "must be at least 1"));
        }
        Ok(())
    }
}

impl Default for ControllerConfig {
    fn default() -> Self {
        Self {
            workers: 1,
            resync: Some(Duration::from_secs(10 * 3600)),
            namespace: None,
            rate_limits: RateLimitConfig::default(),
            sync_timeout: Duration::from_secs(120),
            min_requeue_after: Duration::from_secs(1),
            api: RateBudget::default(),
            events: RateBudget { qps: 5.0, burst: 50 },
            expectations_timeout: Duration::from_secs(300),
            shards: 1,
            budgets: Budgets::default(),
        }
    }
}

/// What every controller of a host shares: the informers, the admission policy (scopes and
/// protected objects), the leader-election fence every write goes behind (unless sharded), and
/// the metrics.
#[derive(Clone)]
pub struct Shared {
    /// Shared informers, one per (kind, namespace, selector).
    pub registry: InformerRegistry,
    /// What every outcome must pass.
    pub admission: Admission,
    /// Open while this replica may write (leader election; always open without it).
    pub fence: Fence,
    /// The controllers' metrics.
    pub metrics: ControllerMetrics,
    /// How candidate versions compared with the serving ones ([`shadow`]).
    pub shadows: Arc<ShadowLog>,
}

impl Shared {
    /// Controllers on `registry`'s informers, with scopes from its discovery, the protected
    /// objects that need no host identity ([`crate::admission::Protected::minimal`]) and no
    /// leader election.
    pub fn new(registry: InformerRegistry, metrics: ControllerMetrics) -> Self {
        let scopes = crate::admission::Scopes::Discovery(registry.resolver().clone());
        let admission = Admission::new(scopes, crate::admission::Protected::minimal());
        Self { registry, admission, fence: Fence::open(), metrics, shadows: Arc::default() }
    }

    /// The same, admitting with `admission`.
    #[must_use]
    pub fn with_admission(mut self, admission: Admission) -> Self {
        self.admission = admission;
        self
    }

    /// The same, writing only while `fence` is open (leader election).
    #[must_use]
    pub fn with_fence(mut self, fence: Fence) -> Self {
        self.fence = fence;
        self
    }
}

/// A running controller. Dropping it without [`Controller::shutdown`] aborts its tasks.
pub struct Controller {
    inner: Arc<Inner>,
    workers: Vec<JoinHandle<()>>,
    resync: Option<JoinHandle<()>>,
    takeovers: Option<JoinHandle<()>>,
    index_memory: JoinHandle<()>,
}

struct Inner {
    name: String,
    config: ControllerConfig,
    shared: Shared,
    /// Sends this controller's writes (as the plugin's identity) and the host's reports.
    executor: Arc<dyn Execute>,
    queue: WorkQueue<ObjectKey>,
    /// Why each queued key was queued, and its last error.
    keys: KeyStates,
    /// Requeues (`requeue_after`) share the queue's overall rate.
    requeues: TokenBucket,
    /// The API budget: one token per action sent.
    api: TokenBucket,
    /// The Event budget: Events over it are dropped.
    events: TokenBucket,
    /// What each key waits to see in the cache before its next reconcile.
    expectations: Expectations,
    /// The first batch of a reconcile's creates and deletes ([`slow_start`]).
    slow_start: slow_start::SlowStart,
    /// Swapped atomically on hot reload; each reconcile clones the current one.
    /// `None` before the first wiring and after shutdown.
    current: RwLock<Option<Current>>,
    /// Set by [`Controller::shutdown`]: workers waiting for the fence give up their key.
    stopping: tokio::sync::watch::Sender<bool>,
    /// With sharding: which keys this replica reconciles and the fence of each.
    ownership: Option<Arc<Ownership>>,
    /// A candidate version run beside the serving one, never executed ([`shadow`]).
    shadow: RwLock<Option<Arc<Shadow>>>,
    /// When a mapping cut at the key cap was last logged.
    capped_warning: parking_lot::Mutex<Option<Instant>>,
}

/// Everything that changes together when the reconciler is replaced.
#[derive(Clone)]
struct Current {
    reconciler: Arc<dyn Reconciler>,
    grants: Arc<Grants>,
    /// Who the reconciler's writes go out as (a canary's: the candidate's own identity).
    executor: Arc<dyn Execute>,
    view: Arc<CacheView>,
    /// Which objects the view will hold (for expectations).
    caching: Arc<Caching>,
    /// The reconciled kind's stores (one per granted namespace).
    primary: Vec<Arc<cache::IndexedStore>>,
    /// Keeps the informers alive and their handlers registered.
    _subscriptions: Arc<Vec<Subscription>>,
}

impl Inner {
    /// A controller named `name`, not yet wired to informers: its queue, budgets and key states,
    /// its writes sent with `executor`.
    fn new(name: String, config: ControllerConfig, shared: Shared, executor: Arc<dyn Execute>, ownership: Option<Arc<Ownership>>) -> Self {
        let queue = WorkQueue::new(name.clone(), config.rate_limits.build(), Some(shared.metrics.queue_handle(&name)))
            .with_priorities(config.rate_limits.priorities());
        Inner {
            name,
            shared,
            executor,
            queue,
            keys: KeyStates::default(),
            requeues: TokenBucket::new(config.rate_limits.qps, config.rate_limits.burst),
            api: TokenBucket::new(config.api.qps, config.api.burst),
            events: TokenBucket::new(config.events.qps, config.events.burst),
            expectations: Expectations::new(config.expectations_timeout),
            slow_start: slow_start::SlowStart::default(),
            config,
            current: RwLock::new(None),
            stopping: tokio::sync::watch::Sender::new(false),
            ownership,
            shadow: RwLock::new(None),
            capped_warning: parking_lot::Mutex::new(None),
        }
    }
}

impl Controller {
    /// Start a controller: informers synced, existing objects queued, workers running. Its
    /// writes go out with `executor` (the plugin's identity), behind `shared.fence`.
    pub async fn start(
        reconciler: Arc<dyn Reconciler>,
        config: ControllerConfig,
        grants: Arc<Grants>,
        shared: Shared,
        executor: Executor,
    ) -> Result<Self> {
        Self::start_sharded(reconciler, config, grants, shared, executor, None).await
    }

    /// [`start`](Self::start), reconciling only the keys of the shards this replica owns
    /// (`ownership`; `None`: every key, behind the shared fence). A shard taken over has its
    /// keys queued from the cache.
    pub async fn start_sharded(
        reconciler: Arc<dyn Reconciler>,
        config: ControllerConfig,
        grants: Arc<Grants>,
        shared: Shared,
        executor: Executor,
        ownership: Option<Arc<Ownership>>,
    ) -> Result<Self> {
        let inner = Arc::new(Inner::new(reconciler.spec().name.clone(), config, shared, Arc::new(executor), ownership));
        let current = inner.wire(reconciler, grants).await?;
        *inner.current.write() = Some(current);
        if let Some(ownership) = &inner.ownership {
            let me = Arc::downgrade(&inner);
            ownership.count_objects_with(Box::new(move || me.upgrade().map(|inner| inner.objects_per_shard())));
        }
        // The initial list at low priority: events that arrive meanwhile go first (with aging).
        inner.enqueue_all(Reason::Event, crate::queue::Priority::Low);
        let workers = (0..inner.config.workers.max(1))
            .map(|i| tokio::spawn(inner.clone().work().instrument(info_span!("worker", controller = %inner.name, i))))
            .collect();
        let resync = inner.config.resync.map(|period| tokio::spawn(inner.clone().resync_every(period)));
        let takeovers = inner.ownership.as_ref().map(|o| tokio::spawn(Inner::follow_takeovers(Arc::downgrade(&inner), o.subscribe())));
        let index_memory = tokio::spawn(Inner::watch_index_memory(Arc::downgrade(&inner), INDEX_MEMORY_EVERY));
        info!(controller = %inner.name, workers = inner.config.workers, "controller started");
        Ok(Self { inner, workers, resync, takeovers, index_memory })
    }

    /// The controller's (the plugin's) name.
    pub fn name(&self) -> &str {
        &self.inner.name
    }

    /// The queue (for inspection and tests).
    pub fn queue(&self) -> &WorkQueue<ObjectKey> {
        &self.inner.queue
    }

    /// The spec of the reconciler currently in use.
    pub fn spec(&self) -> Option<ReconcilerSpec> {
        self.inner.current.read().as_ref().map(|c| c.reconciler.spec().clone())
    }

    /// Swap in a new reconciler (hot reload). Informers are re-wired only if the new version
    /// reads other kinds; queued keys stay queued; running reconciles finish on the old version.
    /// The grants travel with the reconciler they were checked against.
    pub async fn replace_reconciler(&self, reconciler: Arc<dyn Reconciler>, grants: Arc<Grants>) -> Result<()> {
        let to = reconciler.spec().version.clone();
        let current = self.inner.wire(reconciler, grants).await?;
        let old = self.inner.current.write().replace(current);
        let from = old.map(|c| c.reconciler.spec().version.clone()).unwrap_or_default();
        info!(controller = %self.inner.name, %from, %to, "reconciler replaced");
        // Keys queued before the swap run on the new version; reconcile everything once so the
        // new logic applies even to objects that see no event (at low priority, behind events).
        self.inner.enqueue_all(Reason::Resync, crate::queue::Priority::Low);
        Ok(())
    }

    /// Estimated heap bytes of the entries of the indexes the current version declares (what
    /// `budgets.indexMemory` bounds; each shared index counted in full).
    pub fn index_bytes(&self) -> usize {
        self.inner.current.read().as_ref().map_or(0, |c| c.view.index_bytes())
    }

    /// Run `shadow`'s candidate beside the serving version from the next reconcile on (`None`:
    /// stop): nothing it returns is executed, except on its canary shards; see [`shadow`].
    pub fn set_shadow(&self, shadow: Option<Arc<Shadow>>) {
        let what = shadow.as_ref().map(|s| s.reconciler().digest().unwrap_or("native").to_owned());
        *self.inner.shadow.write() = shadow;
        match what {
            Some(digest) => info!(controller = %self.inner.name, candidate = %digest, "shadowing with a candidate version"),
            None => info!(controller = %self.inner.name, "no longer shadowed"),
        }
    }

    /// The candidate beside this controller's serving version, if any.
    pub fn shadow(&self) -> Option<Arc<Shadow>> {
        self.inner.shadow.read().clone()
    }

    /// Stop taking keys, let running reconciles finish (up to `grace`), release informers.
    pub async fn shutdown(mut self, grace: Duration) {
        self.inner.queue.shut_down();
        self.inner.stopping.send_replace(true);
        if let Some(r) = self.resync.take() {
            r.abort();
        }
        if let Some(t) = self.takeovers.take() {
            t.abort();
        }
        self.index_memory.abort();
        let deadline = Instant::now() + grace;
        for w in std::mem::take(&mut self.workers) {
            if tokio::time::timeout_at(deadline, w).await.is_err() {
                warn!(controller = %self.inner.name, "worker did not finish within the grace period");
            }
        }
        self.inner.current.write().take();
        info!(controller = %self.inner.name, "controller stopped");
    }
}

impl Drop for Controller {
    fn drop(&mut self) {
        self.inner.queue.shut_down();
        self.workers.iter().for_each(JoinHandle::abort);
        if let Some(r) = &self.resync {
            r.abort();
        }
        if let Some(t) = &self.takeovers {
            t.abort();
        }
        self.index_memory.abort();
    }
}

/// How often a controller measures the memory of its indexes against `budgets.indexMemory`.
pub const INDEX_MEMORY_EVERY: Duration = Duration::from_secs(30);

/// The Event reporter for what the host itself says about objects.
pub const HOST_REPORTER: &str = "wasmloop";

/// The tracing target of one line per reconcile (at debug): its actions, result and duration,
/// inside the `reconcile` span (controller, key). `wasmloop dev` shows these.
pub const RECONCILE_LOG: &str = "wasmloop::reconcile";
