//! The control loop: events → keys → work queue → reconcile → actions.
//!
//! A [`Controller`] runs one [`Reconciler`] (native or Wasm):
//! - it acquires shared informers for the reconciled kind and every watched kind, and maps each
//!   cache change to keys of the reconciled kind ([`mapping`]);
//! - N workers take keys from a rate-limited [`WorkQueue`] (one key is never processed twice at
//!   once; bursts fold into one reconcile), run the reconciler on a blocking thread against a
//!   read-only [`CacheView`], check every action against the [`Grants`], then execute them in
//!   order (runs of creates and deletes in slow-start batches of concurrent calls);
//! - failures are retried with per-key exponential backoff (the next request carries the last
//!   error), a failed precondition (conflict) requeues the key, `requeue_after` is honoured, and
//!   a periodic resync replays the cache into the queue without any API call;
//! - after creates and deletes, a key is not reconciled again until the cache shows them
//!   ([`expectations`]), so a reconciler never acts twice on a stale view of its own writes;
//! - [`Controller::replace_reconciler`] swaps in a new version without losing queued keys:
//!   running reconciles finish on the old one, the next one runs the new one.

pub mod expectations;
mod mapping;
mod metrics;
pub mod slow_start;

/// The reconciler contract, re-exported where controllers are built.
pub use crate::reconciler::{
    Cause, FieldDecl, IndexDecl, Mapping, Outcome, Reason, ReconcileError, Reconciler, ReconcilerSpec, Request, Retry, WatchSpec,
};
pub use expectations::Expectations;
pub use metrics::ControllerMetrics;

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use parking_lot::{Mutex, RwLock};
use serde::Deserialize;
use tokio::task::JoinHandle;
use tokio::time::Instant;
use tracing::{Instrument, debug, info, info_span, warn};

use crate::actions::{Action, EventType, Planned};
use crate::admission::{self, AdmittedAction};
use crate::cache::{self, CacheRead, CacheView, IndexSpec, Selector};
use crate::executor::{self, Executed, Executor};
use crate::grants::{Grants, ReadScope};
use crate::informer::{self, Informer, InformerKey, InformerRegistry, Subscription};
use crate::kinds::{KindRef, ObjectKey};
use crate::queue::{RateLimitConfig, RateLimiter, TokenBucket, WorkQueue};
use crate::shard::Ownership;
use expectations::{Expected, ExpectedChange, Wait};
use mapping::KeyMapper;

/// Errors starting or reconfiguring a controller.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("controller {controller}: {source}")]
    Informer { controller: String, source: informer::Error },
    #[error("controller {controller}: index {index:?} on {kind}: {source}")]
    Index { controller: String, kind: String, index: String, source: cache::Error },
    #[error("controller {controller}: {source}")]
    Grants { controller: String, source: crate::grants::Error },
    #[error("controller {controller}: cannot read {kind}: {reason}")]
    ReadScope { controller: String, kind: KindRef, reason: String },
}

pub type Result<T, E = Error> = std::result::Result<T, E>;

/// How a controller runs. Defaults follow controller-runtime.
#[derive(Clone, Debug, Deserialize)]
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
}

/// A rate with a burst (a token bucket, as client-go's client-side limiter): the actions a
/// controller may send (so one plugin cannot use up the host's API Priority and Fairness share
/// or delay its Lease renewals; default 50 qps, burst 100), or the Events it may record.
#[derive(Clone, Copy, Debug, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase", default, deny_unknown_fields)]
pub struct RateBudget {
    pub qps: f64,
    pub burst: u32,
}

impl Default for RateBudget {
    fn default() -> Self {
        Self { qps: 50.0, burst: 100 }
    }
}

impl RateBudget {
    /// `qps` must be positive and `burst` at least 1; errors name `field` (e.g. `api`).
    pub fn validate(&self, field: &str) -> std::result::Result<(), String> {
        if self.qps.is_nan() || self.qps <= 0.0 {
            return Err(format!("{field}.qps must be positive, got {}", self.qps));
        }
        if self.burst == 0 {
            return Err(format!("{field}.burst must be at least 1"));
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
        }
    }
}

/// A running controller. Dropping it without [`Controller::shutdown`] aborts its tasks.
pub struct Controller {
    inner: Arc<Inner>,
    workers: Vec<JoinHandle<()>>,
    resync: Option<JoinHandle<()>>,
    takeovers: Option<JoinHandle<()>>,
}

struct Inner {
    name: String,
    config: ControllerConfig,
    registry: InformerRegistry,
    executor: Executor,
    metrics: ControllerMetrics,
    queue: WorkQueue<ObjectKey>,
    /// The first reason each queued key was added for.
    reasons: Mutex<HashMap<ObjectKey, Reason>>,
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
    /// The last error of keys whose reconciles keep failing (sent with the next request).
    failures: Mutex<HashMap<ObjectKey, String>>,
    /// Swapped atomically on hot reload; each reconcile clones the current one.
    /// `None` before the first wiring and after shutdown.
    current: RwLock<Option<Current>>,
    /// Set by [`Controller::shutdown`]: workers waiting for the fence give up their key.
    stopping: tokio::sync::watch::Sender<bool>,
    /// With sharding: which keys this replica reconciles and the fence of each.
    ownership: Option<Arc<Ownership>>,
}

/// Everything that changes together when the reconciler is replaced.
#[derive(Clone)]
struct Current {
    reconciler: Arc<dyn Reconciler>,
    grants: Arc<Grants>,
    view: Arc<CacheView>,
    /// The reconciled kind's stores (one per granted namespace).
    primary: Vec<Arc<cache::IndexedStore>>,
    /// Keeps the informers alive and their handlers registered.
    _subscriptions: Arc<Vec<Subscription>>,
}

impl Controller {
    /// Start a controller: informers synced, existing objects queued, workers running.
    pub async fn start(
        reconciler: Arc<dyn Reconciler>,
        config: ControllerConfig,
        grants: Arc<Grants>,
        registry: InformerRegistry,
        executor: Executor,
        metrics: ControllerMetrics,
    ) -> Result<Self> {
        Self::start_sharded(reconciler, config, grants, registry, executor, metrics, None).await
    }

    /// [`start`](Self::start), reconciling only the keys of the shards this replica owns
    /// (`ownership`; `None`: every key, behind the executor's fence). A shard taken over has
    /// its keys queued from the cache.
    pub async fn start_sharded(
        reconciler: Arc<dyn Reconciler>,
        config: ControllerConfig,
        grants: Arc<Grants>,
        registry: InformerRegistry,
        executor: Executor,
        metrics: ControllerMetrics,
        ownership: Option<Arc<Ownership>>,
    ) -> Result<Self> {
        let name = reconciler.spec().name.clone();
        let queue = WorkQueue::new(name.clone(), config.rate_limits.build(), Some(metrics.queue_handle(&name)))
            .with_priorities(config.rate_limits.priorities());
        let inner = Arc::new(Inner {
            name,
            registry,
            executor,
            metrics,
            queue,
            reasons: Mutex::new(HashMap::new()),
            requeues: TokenBucket::new(config.rate_limits.qps, config.rate_limits.burst),
            api: TokenBucket::new(config.api.qps, config.api.burst),
            events: TokenBucket::new(config.events.qps, config.events.burst),
            expectations: Expectations::new(config.expectations_timeout),
            slow_start: slow_start::SlowStart::default(),
            failures: Mutex::new(HashMap::new()),
            config,
            current: RwLock::new(None),
            stopping: tokio::sync::watch::Sender::new(false),
            ownership,
        });
        let current = inner.wire(reconciler, grants).await?;
        *inner.current.write() = Some(current);
        // The initial list at low priority: events that arrive meanwhile go first (with aging).
        inner.enqueue_all(Reason::Event, crate::queue::Priority::Low);
        let workers = (0..inner.config.workers.max(1))
            .map(|i| tokio::spawn(inner.clone().work().instrument(info_span!("worker", controller = %inner.name, i))))
            .collect();
        let resync = inner.config.resync.map(|period| tokio::spawn(inner.clone().resync_every(period)));
        let takeovers = inner.ownership.as_ref().map(|o| tokio::spawn(Inner::follow_takeovers(Arc::downgrade(&inner), o.subscribe())));
        info!(controller = %inner.name, workers = inner.config.workers, "controller started");
        Ok(Self { inner, workers, resync, takeovers })
    }

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
    }
}

impl Inner {
    /// Acquire informers, add indexes, subscribe handlers and wait for sync.
    async fn wire(self: &Arc<Self>, reconciler: Arc<dyn Reconciler>, grants: Arc<Grants>) -> Result<Current> {
        let spec = reconciler.spec().clone();
        grants.check_spec(&spec).map_err(|source| Error::Grants { controller: self.name.clone(), source })?;
        let err = |source| Error::Informer { controller: self.name.clone(), source };
        let namespaced = self.registry.resolver().resolve(&spec.reconciles).await.map_err(|e| err(e.into()))?.namespaced;
        let mapper = KeyMapper { primary: spec.reconciles.clone(), namespaced };

        let mut view = CacheView::new();
        let mut subscriptions = Vec::new();
        let primary = self.acquire(&grants, &spec.reconciles, spec.selector.as_deref()).await?;
        for inf in &primary {
            let me = Arc::downgrade(self);
            let m = mapper.clone();
            let kind = spec.reconciles.clone();
            subscriptions.push(inf.subscribe(Arc::new(move |change| {
                if let Some(inner) = me.upgrade() {
                    m.for_primary(change).into_iter().for_each(|k| inner.enqueue(k, Reason::Event));
                    inner.wake_waiting(&kind, change);
                }
            })));
            view.insert(inf.store().clone());
        }
        let mut informers = primary.clone();
        for watch in &spec.watches {
            let watched = self.acquire(&grants, &watch.kind, watch.selector.as_deref()).await?;
            // Every informer of a kind serves its reads (the view returns overlapping objects once).
            for inf in watched {
                let me = Arc::downgrade(self);
                let (m, mapping, kind) = (mapper.clone(), watch.mapping.clone(), watch.kind.clone());
                subscriptions.push(inf.subscribe(Arc::new(move |change| {
                    if let Some(inner) = me.upgrade() {
                        m.for_watched(&mapping, change).into_iter().for_each(|k| inner.enqueue(k, Reason::Event));
                        inner.wake_waiting(&kind, change);
                    }
                })));
                view.insert(inf.store().clone());
                informers.push(inf);
            }
        }
        for idx in &spec.indexes {
            if view.stores(&idx.kind).is_empty() {
                // An index on a kind that is read but not watched for events.
                for inf in self.acquire(&grants, &idx.kind, None).await? {
                    view.insert(inf.store().clone());
                    let (me, kind) = (Arc::downgrade(self), idx.kind.clone());
                    subscriptions.push(inf.subscribe(Arc::new(move |change| {
                        if let Some(inner) = me.upgrade() {
                            inner.wake_waiting(&kind, change);
                        }
                    })));
                    informers.push(inf);
                }
            }
            let index_err =
                |source| Error::Index { controller: self.name.clone(), kind: idx.kind.to_string(), index: idx.name.clone(), source };
            let index = IndexSpec::parse(&idx.path).map_err(index_err)?;
            for store in view.stores(&idx.kind) {
                store.add_index(&idx.name, index.clone()).map_err(index_err)?;
            }
        }
        for inf in &informers {
            inf.wait_synced(self.config.sync_timeout).await.map_err(err)?;
        }
        Ok(Current {
            reconciler,
            grants,
            view: Arc::new(view),
            primary: primary.iter().map(|i| i.store().clone()).collect(),
            _subscriptions: Arc::new(subscriptions),
        })
    }

    /// Shared informers for `kind`: one per namespace the plugin may read it in (narrowed to
    /// the controller's namespace), so a plugin granted reads in some namespaces needs RBAC
    /// only there and never sees objects from elsewhere.
    async fn acquire(&self, grants: &Grants, kind: &KindRef, selector: Option<&str>) -> Result<Vec<Arc<Informer>>> {
        let err = |source| Error::Informer { controller: self.name.clone(), source };
        let mut informers = Vec::new();
        for namespace in self.read_namespaces(grants, kind).await? {
            let key = InformerKey::new(kind.clone(), namespace.clone(), selector).map_err(|e| {
                let key = InformerKey { kind: kind.clone(), namespace: namespace.clone(), selector: selector.map(str::to_owned) };
                err(informer::Error::Selector(key, e))
            })?;
            informers.push(self.registry.acquire(key).await.map_err(err)?);
        }
        Ok(informers)
    }

    /// Where `kind` is watched: `[None]` = everywhere, else these namespaces.
    async fn read_namespaces(&self, grants: &Grants, kind: &KindRef) -> Result<Vec<Option<String>>> {
        read_namespaces(self.registry.resolver(), grants, kind, self.config.namespace.as_deref()).await.map_err(|e| match e {
            ReadScopeError::Scope(reason) => Error::ReadScope { controller: self.name.clone(), kind: kind.clone(), reason },
            ReadScopeError::Kind(e) => Error::Informer { controller: self.name.clone(), source: e.into() },
        })
    }

    /// Queue the keys that wait for the object of `change` ([`expectations`]).
    fn wake_waiting(&self, kind: &KindRef, change: &cache::Change) {
        let o = change.object();
        let object = expectations::object_key(kind, o.namespace(), o.name());
        for key in self.expectations.waiting_for(&object) {
            self.enqueue(key, Reason::Event);
        }
    }

    /// Queue `key` at normal priority (events).
    fn enqueue(&self, key: ObjectKey, reason: Reason) {
        self.enqueue_with(key, reason, crate::queue::Priority::Normal);
    }

    /// Queue `key` at `priority`; a key already queued lower is raised (its reason stays the first).
    /// With sharding, only keys of the shards this replica owns are queued.
    fn enqueue_with(&self, key: ObjectKey, reason: Reason, priority: crate::queue::Priority) {
        if self.ownership.as_ref().is_some_and(|o| !o.owns(&key)) {
            return;
        }
        self.reasons.lock().entry(key.clone()).or_insert(reason);
        self.queue.add_with_priority(key, priority);
    }

    /// Queue every cached object of the reconciled kind at `priority`.
    fn enqueue_all(&self, reason: Reason, priority: crate::queue::Priority) {
        let Some((primary, kind)) = self.current.read().as_ref().map(|c| (c.primary.clone(), c.reconciler.spec().reconciles.clone()))
        else {
            return;
        };
        for o in primary.iter().flat_map(|s| s.snapshot()) {
            self.enqueue_with(ObjectKey::new(kind.clone(), o.namespace(), o.name()), reason, priority);
        }
    }

    /// Queue the keys of each shard this replica takes over (they were not queued before).
    async fn follow_takeovers(me: std::sync::Weak<Self>, mut news: tokio::sync::broadcast::Receiver<usize>) {
        loop {
            let shard = match news.recv().await {
                Ok(shard) => Some(shard),
                Err(tokio::sync::broadcast::error::RecvError::Lagged(_)) => None,
                Err(tokio::sync::broadcast::error::RecvError::Closed) => return,
            };
            let Some(inner) = me.upgrade() else { return };
            let Some(ownership) = inner.ownership.clone() else { return };
            let (primary, kind) = match inner.current.read().as_ref() {
                Some(c) => (c.primary.clone(), c.reconciler.spec().reconciles.clone()),
                None => continue,
            };
            let mut queued = 0;
            for o in primary.iter().flat_map(|s| s.snapshot()) {
                let key = ObjectKey::new(kind.clone(), o.namespace(), o.name());
                // Lagged: every owned shard (the enqueue skips the others).
                if shard.is_none_or(|s| ownership.shard_of(&key) == s) {
                    inner.enqueue_with(key, Reason::Resync, crate::queue::Priority::Normal);
                    queued += 1;
                }
            }
            info!(controller = %inner.name, ?shard, queued, "shard taken over; its keys queued from the cache");
        }
    }

    async fn resync_every(self: Arc<Self>, period: Duration) {
        let mut tick = tokio::time::interval_at(Instant::now() + period, period);
        loop {
            tick.tick().await;
            debug!(controller = %self.name, "resync: replaying the cache");
            self.enqueue_all(Reason::Resync, crate::queue::Priority::Low);
        }
    }

    /// One line per reconcile at [`RECONCILE_LOG`]: the key, the actions returned (or why there
    /// were none), the result, how long it took, and which build of the reconciler ran it.
    fn log_reconcile(
        &self,
        key: &ObjectKey,
        current: &Current,
        took: Duration,
        returned: Option<String>,
        result: &Result<Option<Duration>, Failed>,
    ) {
        let took_ms = (took.as_secs_f64() * 10_000.0).round() / 10.0;
        let digest = current.reconciler.digest().unwrap_or("native");
        let what = match (returned, result) {
            (Some(actions), Ok(_)) => actions,
            (Some(actions), Err(Failed::Transient(m) | Failed::Permanent(m) | Failed::Conflict(m))) => format!("{actions}: {m}"),
            (None, Err(Failed::Transient(m) | Failed::Permanent(m) | Failed::Conflict(m))) => format!("failed: {m}"),
            (None, Ok(_)) => "no actions".into(),
        };
        debug!(target: RECONCILE_LOG, result = result_label(result), took_ms, digest, "{key}: {what}");
    }

    async fn work(self: Arc<Self>) {
        while let Some(key) = self.queue.get().await {
            if let Some(ownership) = &self.ownership {
                // Sharded: a key whose shard this replica no longer owns is dropped; the owner
                // queued it from its own cache when it took the shard over.
                if !ownership.owns(&key) {
                    self.reasons.lock().remove(&key);
                    self.queue.forget(&key);
                    self.queue.done(&key);
                    continue;
                }
                let _running = ownership.running(&key);
                let span = info_span!("reconcile", controller = %self.name, key = %key);
                self.process(&key).instrument(span).await;
                self.queue.done(&key);
                continue;
            }
            // A warm standby (leader election, Lease held elsewhere) holds one key per worker
            // and starts on it the moment its writes may go out.
            if !self.until_writable().await {
                self.queue.done(&key);
                break;
            }
            let span = info_span!("reconcile", controller = %self.name, key = %key);
            self.process(&key).instrument(span).await;
            self.queue.done(&key);
        }
    }

    /// Wait until this replica may write; false if the controller stops first.
    async fn until_writable(&self) -> bool {
        let mut stopping = self.stopping.subscribe();
        tokio::select! {
            () = self.executor.fence().wait_open() => {}
            _ = stopping.wait_for(|s| *s) => return false,
        }
        !*self.stopping.borrow()
    }

    async fn process(&self, key: &ObjectKey) {
        let Some(current) = self.current.read().clone() else { return };
        if let Wait::Until(deadline) = self.expectations.check(key, current.view.as_ref()) {
            // Parked: an event on an expected object (or the deadline) brings it back.
            debug!(key = %key, "waiting for the cache to show this key's creates and deletes");
            self.queue.add_after(key.clone(), deadline.saturating_duration_since(Instant::now()));
            return;
        }
        let reason = self.reasons.lock().remove(key).unwrap_or(Reason::Event);
        let last_error = self.failures.lock().get(key).cloned();
        let request = Request { key: key.clone(), reason, last_error };
        let started = Instant::now();
        self.metrics.worker_started(&self.name);
        let reconciler = current.reconciler.clone();
        let view: cache::SharedCache = current.view.clone();
        let result = tokio::task::spawn_blocking(move || reconciler.reconcile(&request, &view))
            .await
            .unwrap_or_else(|e| Err(ReconcileError::transient(Cause::Stopped(format!("reconciler panicked: {e}")))));
        // The actions returned, for the reconcile line (only when someone reads it).
        let returned = match &result {
            Ok(outcome) if tracing::enabled!(target: RECONCILE_LOG, tracing::Level::DEBUG) => Some(summarize(&outcome.actions)),
            Err(e) if !e.actions.is_empty() && tracing::enabled!(target: RECONCILE_LOG, tracing::Level::DEBUG) => {
                Some(summarize(&e.actions))
            }
            _ => None,
        };
        let result = match result {
            Ok(outcome) => self.execute(key, &current, outcome).await,
            Err(error) => self.failed(key, &current, error).await,
        };
        self.metrics.worker_finished(&self.name, started.elapsed(), result_label(&result));
        if tracing::enabled!(target: RECONCILE_LOG, tracing::Level::DEBUG) {
            self.log_reconcile(key, &current, started.elapsed(), returned, &result);
        }
        match &result {
            Ok(_) => drop(self.failures.lock().remove(key)),
            Err(Failed::Transient(msg) | Failed::Permanent(msg)) => drop(self.failures.lock().insert(key.clone(), msg.clone())),
            Err(Failed::Conflict(_)) => {}
        }
        match result {
            Ok(requeue_after) => {
                self.queue.forget(key);
                if let Some(after) = requeue_after {
                    let bucket = RateLimiter::<()>::when(&self.requeues, &());
                    let after = after.max(self.config.min_requeue_after).max(bucket);
                    self.reasons.lock().entry(key.clone()).or_insert(Reason::Requeue);
                    self.queue.add_after(key.clone(), after);
                }
            }
            Err(Failed::Conflict(msg)) => {
                // The plugin acted on a stale view: not an error; reconcile again from the cache.
                debug!(error = %msg, "precondition failed; reconciling again");
                self.reasons.lock().entry(key.clone()).or_insert(Reason::Event);
                self.queue.add_rate_limited(key.clone());
            }
            Err(Failed::Transient(msg)) => {
                let attempt = self.queue.num_requeues(key) + 1;
                warn!(attempt, error = %msg, "reconcile failed; retrying with backoff");
                self.reasons.lock().entry(key.clone()).or_insert(Reason::Retry(attempt));
                self.queue.add_rate_limited(key.clone());
            }
            Err(Failed::Permanent(msg)) => {
                warn!(error = %msg, "reconcile failed permanently; not retried until the object changes");
                self.queue.forget(key);
            }
        }
    }

    /// A failed reconcile: its actions (contract 0.3: Events, status conditions) are admitted and
    /// executed as an outcome's would be, then the error decides the retry. A permanent error
    /// is also reported as a Warning Event.
    async fn failed(&self, key: &ObjectKey, current: &Current, error: ReconcileError) -> Result<Option<Duration>, Failed> {
        let mut message = error.cause.to_string();
        if !error.actions.is_empty() {
            let outcome = Outcome { actions: error.actions, requeue_after: None };
            if let Err(Failed::Transient(m) | Failed::Permanent(m) | Failed::Conflict(m)) = self.execute(key, current, outcome).await {
                message = format!("{message} (and the actions returned with the error failed: {m})");
            }
        }
        match error.retry {
            Retry::WhenChanged => {
                self.report(key, "ReconcileFailed", &format!("{}: {message}", self.name)).await;
                Err(Failed::Permanent(message))
            }
            Retry::Backoff => Err(Failed::Transient(message)),
        }
    }

    /// Admit every action first (target, scope, grants, protected objects judged by what each
    /// write produces, owners: nothing is sent if one is refused), then execute them in order.
    async fn execute(&self, key: &ObjectKey, current: &Current, outcome: Outcome) -> Result<Option<Duration>, Failed> {
        let ctx = admission::Context {
            grants: &current.grants,
            cache: current.view.as_ref(),
            client: Some(self.executor.writer().client()),
            manager: &self.name,
            budget: Some(&self.api),
        };
        let admitted = match self.executor.admission().admit(ctx, outcome.actions).await {
            Ok(admitted) => admitted,
            Err(admission::Error::Refused(refusal)) => {
                self.api.acquire().await;
                self.metrics.action_executed(&self.name, refusal.verb.as_str(), "refused");
                let message = format!("plugin {}: {refusal}", self.name);
                self.report(key, "ActionRefused", &message).await;
                return Err(Failed::Permanent(message));
            }
            Err(e @ admission::Error::Unverifiable { .. }) => {
                self.metrics.action_executed(&self.name, e.verb().as_str(), "unverifiable");
                return Err(Failed::Transient(e.to_string()));
            }
            Err(e @ admission::Error::Conflict { .. }) => {
                self.metrics.action_executed(&self.name, e.verb().as_str(), "conflict");
                return Err(Failed::Conflict(e.to_string()));
            }
        };
        let mut expected = Vec::new();
        let result = self.execute_admitted(key, current, admitted.actions(), &mut expected).await;
        self.expectations.expect(key, expected);
        result.map(|()| outcome.requeue_after)
    }

    /// Send admitted actions in order, noting what the cache must show afterwards. A run of
    /// consecutive creates and deletes (independent objects) goes out in slow-start batches of
    /// doubling size, as KCM's `slowStartBatch`, starting at the size this controller's calls
    /// have proven ([`slow_start`]; 1 at first and after any failure): a failing batch stops the
    /// rest.
    async fn execute_admitted(
        &self,
        key: &ObjectKey,
        current: &Current,
        actions: &[AdmittedAction],
        expected: &mut Vec<Expected>,
    ) -> Result<(), Failed> {
        let mut done = 0;
        let mut i = 0;
        while i < actions.len() {
            let run = actions[i..].iter().take_while(|a| a.planned().is_create_or_delete()).count();
            let (end, mut batch) = if run == 0 { (i + 1, 1) } else { (i + run, self.slow_start.first_batch()) };
            while i < end {
                let this = &actions[i..end.min(i + batch)];
                let results = futures::future::join_all(this.iter().map(|a| self.execute_one(key, current, a))).await;
                let mut first_error = None;
                for result in results {
                    match result {
                        Ok(e) => {
                            done += 1;
                            expected.extend(e);
                        }
                        Err(e) => {
                            first_error.get_or_insert(e);
                        }
                    }
                }
                if let Some(e) = first_error {
                    if run > 0 {
                        self.slow_start.failed();
                    }
                    // Say how far the outcome got: nothing is half-applied silently.
                    return Err(e.with_progress(done, actions.len()));
                }
                if run > 0 {
                    self.slow_start.succeeded(this.len());
                }
                i += this.len();
                batch *= 2;
            }
        }
        Ok(())
    }

    /// Send one action (within the API and Event budgets); what the cache must then show.
    async fn execute_one(&self, key: &ObjectKey, current: &Current, admitted: &AdmittedAction) -> Result<Option<Expected>, Failed> {
        let verb = admitted.verb().as_str();
        if matches!(admitted.action(), Action::Event { .. }) && !RateLimiter::<()>::when(&self.events, &()).is_zero() {
            // An Event flood is dropped, not queued (Events are best-effort by nature).
            self.metrics.action_executed(&self.name, verb, "dropped");
            return Ok(None);
        }
        self.api.acquire().await;
        match self.executor.execute(&self.name, admitted, self.fence_for(key)).await {
            Ok(done) => {
                self.metrics.action_executed(&self.name, verb, "ok");
                Ok(expectation(current, admitted.action(), &done))
            }
            Err(e) => {
                let result = if e.is_fenced() {
                    "fenced"
                } else if e.is_conflict() {
                    "conflict"
                } else {
                    "error"
                };
                self.metrics.action_executed(&self.name, verb, result);
                debug!(key = %key, error = %e, "action failed");
                Err(to_failed(e))
            }
        }
    }

    /// The fence writes for `key` go behind: its shard's, else the executor's (leader election).
    fn fence_for(&self, key: &ObjectKey) -> &crate::fence::Fence {
        match &self.ownership {
            Some(o) => o.fence_for(key),
            None => self.executor.fence(),
        }
    }

    /// A Warning Event on the reconciled object from the host itself (best effort), for what
    /// is not retried: `ActionRefused` (admission) and `ReconcileFailed` (permanent errors).
    async fn report(&self, key: &ObjectKey, reason: &str, message: &str) {
        if let Err(e) = self.fence_for(key).check() {
            debug!(key = %key, error = %e, "not reporting the failure: this replica may not write");
            return;
        }
        match self.executor.record_event(HOST_REPORTER, key, EventType::Warning, reason, message).await {
            Ok(_) => self.metrics.action_executed(HOST_REPORTER, "event", "ok"),
            Err(e) => {
                self.metrics.action_executed(HOST_REPORTER, "event", "error");
                debug!(key = %key, error = %e, "could not record the failure as an Event");
            }
        }
    }
}

/// Why a kind cannot be watched for a plugin.
#[derive(Debug, thiserror::Error)]
pub enum ReadScopeError {
    /// Its grants and the controller's namespace do not allow it.
    #[error("cannot read it: {0}")]
    Scope(String),
    /// Discovery failed.
    #[error(transparent)]
    Kind(#[from] crate::kinds::Error),
}

/// Where a plugin with `grants` running in `namespace` (`None`: all) reads `kind`: `[None]` =
/// everywhere, else these namespaces (one informer each), so a plugin granted reads in some
/// namespaces needs RBAC only there and never sees objects from elsewhere.
pub async fn read_namespaces(
    resolver: &crate::kinds::KindResolver,
    grants: &Grants,
    kind: &KindRef,
    namespace: Option<&str>,
) -> Result<Vec<Option<String>>, ReadScopeError> {
    match (grants.read_scope(kind), namespace) {
        (ReadScope::All, namespace) => Ok(vec![namespace.map(str::to_owned)]),
        (ReadScope::None, _) => Err(ReadScopeError::Scope("no read grant covers it".into())),
        (ReadScope::Namespaces(granted), Some(ns)) if granted.iter().any(|g| g == ns) => Ok(vec![Some(ns.to_owned())]),
        (ReadScope::Namespaces(granted), Some(ns)) => {
            Err(ReadScopeError::Scope(format!("the plugin runs in namespace {ns}, but reads are granted only in {}", granted.join(", "))))
        }
        (ReadScope::Namespaces(granted), None) => {
            if !resolver.resolve(kind).await?.namespaced {
                return Err(ReadScopeError::Scope(format!(
                    "it is cluster-scoped, but reads are granted only in namespaces {}",
                    granted.join(", ")
                )));
            }
            Ok(granted.into_iter().map(Some).collect())
        }
    }
}

/// The Event reporter for what the host itself says about objects.
pub const HOST_REPORTER: &str = "wasmloop";

/// The tracing target of one line per reconcile (at debug): its actions, result and duration,
/// inside the `reconcile` span (controller, key). `wasmloop dev` shows these.
pub const RECONCILE_LOG: &str = "wasmloop::reconcile";

/// `create v1/ConfigMap/team-a/welcome, event v1/Namespace/team-a`, or `no actions`.
fn summarize(actions: &[Planned]) -> String {
    if actions.is_empty() {
        return "no actions".into();
    }
    actions.iter().map(|a| format!("{} {}", a.verb(), a.target())).collect::<Vec<_>>().join(", ")
}

/// How a reconcile failed, as the controller handles it.
enum Failed {
    /// Retried with backoff; the next request carries the message.
    Transient(String),
    /// Not retried until something changes.
    Permanent(String),
    /// A precondition failed: reconciled again, not an error.
    Conflict(String),
}

impl Failed {
    /// The same failure, noting how many of the outcome's actions were executed before it.
    fn with_progress(self, done: usize, total: usize) -> Self {
        let note = |m: String| format!("{m} ({done} of {total} actions of this outcome were executed)");
        match self {
            Failed::Transient(m) => Failed::Transient(note(m)),
            Failed::Permanent(m) => Failed::Permanent(note(m)),
            Failed::Conflict(m) => Failed::Conflict(note(m)),
        }
    }
}

fn to_failed(e: executor::Error) -> Failed {
    if e.is_conflict() {
        Failed::Conflict(e.to_string())
    } else if e.is_permanent() {
        Failed::Permanent(e.to_string())
    } else {
        Failed::Transient(e.to_string())
    }
}

fn result_label(r: &Result<Option<Duration>, Failed>) -> &'static str {
    match r {
        Ok(Some(_)) => "requeue_after",
        Ok(None) => "success",
        Err(Failed::Transient(_)) => "error",
        Err(Failed::Permanent(_)) => "permanent_error",
        Err(Failed::Conflict(_)) => "conflict",
    }
}

/// What the cache must show after `action` was executed: a created object (if the reconciler
/// caches objects like it: its kind is read and the object matches the watch's selector), or a
/// deleted one gone.
fn expectation(current: &Current, action: &Action, done: &Executed) -> Option<Expected> {
    let view: &CacheView = current.view.as_ref();
    match (action, done) {
        (Action::Create { object }, Executed::Object(created)) => expect_added(current, created).or_else(|| expect_added(current, object)),
        (Action::Create { object }, _) => expect_added(current, object),
        (Action::Delete { key, .. }, _) => {
            let cached = view.get(&key.kind, key.namespace.as_deref(), &key.name).ok()??;
            Some(Expected { object: key.clone(), change: ExpectedChange::Deleted { uid: cached.uid().to_owned() } })
        }
        _ => None,
    }
}

fn expect_added(current: &Current, object: &serde_json::Value) -> Option<Expected> {
    let field = |p: &str| object.pointer(p).and_then(serde_json::Value::as_str);
    let kind = KindRef::new(field("/apiVersion")?, field("/kind")?);
    let name = field("/metadata/name").filter(|n| !n.is_empty())?;
    if current.view.stores(&kind).is_empty() {
        return None;
    }
    // The informers of the kind (reconciled, watched, indexed) and their selectors: the object
    // is cached if one of them takes it.
    let spec = current.reconciler.spec();
    let mut selectors = Vec::new();
    if kind == spec.reconciles {
        selectors.push(spec.selector.as_deref());
    }
    selectors.extend(spec.watches.iter().filter(|w| w.kind == kind).map(|w| w.selector.as_deref()));
    if spec.indexes.iter().any(|i| i.kind == kind) {
        selectors.push(None);
    }
    let labels = object.pointer("/metadata/labels");
    let label = |k: &str| labels.and_then(|l| l.get(k)).and_then(serde_json::Value::as_str);
    let cached = selectors.iter().any(|s| match s {
        None => true,
        Some(selector) => Selector::parse(selector).is_ok_and(|s| s.matches_with(label)),
    });
    if !cached {
        return None;
    }
    let object = expectations::object_key(&kind, field("/metadata/namespace").filter(|n| !n.is_empty()), name);
    Some(Expected { object, change: ExpectedChange::Added })
}
