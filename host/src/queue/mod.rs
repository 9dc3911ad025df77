//! The work queue between the informers and the reconcilers, with client-go's semantics.
//!
//! A [`WorkQueue`] holds keys, not objects. Its rules (client-go's `dirty` and `processing` sets):
//!
//! - Each key is queued at most once: adding a key that is already waiting to be processed is a
//!   no-op (deduplication), except that it may raise the key's [`Priority`].
//! - Ready keys come out by [`Priority`] (`Normal` before `Low`), first in, first out within a
//!   priority, except that a `Low` key ready for longer than [`PriorityConfig::aging`] gets at
//!   least one get in [`PriorityConfig::aged_every`]: a `Low` key is never starved, and waits
//!   at most `aging + ⌈(A + 1)·N / W⌉·S` ([`priority`] states and proves the bound).
//! - A key handed out by [`get`](WorkQueue::get) is *processing* until [`done`](WorkQueue::done).
//!   Adding it meanwhile marks it dirty without handing it to another worker; `done` queues it
//!   again. So one key is never processed by two workers at once.
//! - [`add_after`](WorkQueue::add_after) parks a key until its deadline (RequeueAfter); a key
//!   already parked keeps the earlier of its two deadlines. Due keys join the ready queue at
//!   `Normal` priority as if added at their deadline (ties: first parked first). They are moved
//!   lazily, by any queue operation (a waiting `get` wakes at the next deadline), so no
//!   background task is needed.
//! - [`add_rate_limited`](WorkQueue::add_rate_limited) parks a key for as long as the
//!   [`RateLimiter`] says (per-key backoff after a failure); [`forget`](WorkQueue::forget) resets it.
//!
//! Any number of workers may wait in `get`; they sleep on a [`Notify`] and on the next deadline.

mod metrics;
mod priority;
mod rate_limit;

use std::collections::{BTreeMap, HashMap};
use std::fmt;
use std::hash::Hash;
use std::pin::pin;
use std::sync::Arc;
use std::time::Duration;

use parking_lot::{Mutex, RwLock};
use tokio::sync::Notify;
use tokio::time::Instant;

use crate::queue::metrics::WorkId;
pub use crate::queue::metrics::{QueueMetrics, QueueMetricsHandle};
pub use crate::queue::priority::{Priority, PriorityConfig};
use crate::queue::priority::{ReadySet, Slot};
pub use crate::queue::rate_limit::{ItemExponential, MaxOf, RateLimitConfig, RateLimiter, TokenBucket};

/// Errors of the queue module (all from configuration).
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A rate limit configuration has a value without meaning.
    #[error("invalid rate limit configuration: {0}")]
    InvalidRateLimit(String),
}

/// Result of this module's fallible operations.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Add statistics of one queue, for reporting how much deduplication saved.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct QueueStats {
    /// Calls of `add`, `add_with_priority`, `add_after` and `add_rate_limited` before shutdown.
    pub adds: u64,
    /// Adds folded into a key that was already pending (ready, dirty or parked earlier), raises
    /// of its priority included.
    pub deduplicated: u64,
}

impl QueueStats {
    /// Fraction of adds that were folded, 0.0 when nothing was added.
    pub fn dedup_ratio(&self) -> f64 {
        if self.adds == 0 { 0.0 } else { self.deduplicated as f64 / self.adds as f64 }
    }
}

/// A deduplicating, delaying, rate-limited work queue of keys. Clones share one queue.
pub struct WorkQueue<K> {
    inner: Arc<Inner<K>>,
}

impl<K> Clone for WorkQueue<K> {
    fn clone(&self) -> Self {
        Self { inner: self.inner.clone() }
    }
}

impl<K> fmt::Debug for WorkQueue<K> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let state = self.inner.state.lock();
        f.debug_struct("WorkQueue")
            .field("name", &self.inner.name)
            .field("ready", &state.ready.len())
            .field("processing", &state.processing.len())
            .field("delayed", &state.waiting.len())
            .field("shut_down", &state.shut_down)
            .finish()
    }
}

struct Inner<K> {
    name: String,
    state: Mutex<State<K>>,
    limiter: RwLock<Arc<dyn RateLimiter<K>>>,
    priorities: RwLock<PriorityConfig>,
    /// Wakes getters: one per newly ready key, all on shutdown or an earlier deadline.
    notify: Notify,
    metrics: Option<QueueMetricsHandle>,
}

struct State<K> {
    /// Keys ready to be handed out, by priority. Each is in `dirty` and not in `processing`.
    ready: ReadySet<K>,
    /// Keys that need processing (ready, or added while processing).
    dirty: HashMap<K, Pending>,
    /// Keys handed to a worker and not yet done, with their metrics id.
    processing: HashMap<K, Option<WorkId>>,
    /// Parked keys by (deadline, sequence number), so ties come out first parked first.
    waiting: BTreeMap<(Instant, u64), K>,
    /// The `waiting` entry of each parked key.
    waiting_at: HashMap<K, (Instant, u64)>,
    next_seq: u64,
    shut_down: bool,
    stats: QueueStats,
}

/// A key that needs processing.
#[derive(Debug, Clone, Copy)]
struct Pending {
    /// When it was first added (for the queue-duration metrics).
    since: Instant,
    /// The highest priority it was added with.
    priority: Priority,
    /// Its place among the ready keys; `None` while it is processing.
    slot: Option<Slot>,
}

/// What happened to a key handed to [`State::enqueue`].
#[derive(Debug, PartialEq, Eq)]
enum Enqueued {
    /// Already dirty: nothing changes but, perhaps, its priority.
    Folded,
    /// Appended to the ready queue.
    Ready,
    /// Marked dirty while processing; `done` will queue it.
    Deferred,
}

impl<K: Clone + Eq + Hash> State<K> {
    /// Marks `key` dirty at `priority`, ready since `now` unless it is processing.
    fn enqueue(&mut self, key: K, priority: Priority, now: Instant, metrics: Option<&QueueMetricsHandle>) -> Enqueued {
        if let Some(pending) = self.dirty.get_mut(&key) {
            let from = pending.priority;
            if priority > from {
                pending.priority = priority;
                if let Some(slot) = pending.slot
                    && self.ready.raise(slot, from, priority)
                {
                    self.report_depth(metrics);
                }
            }
            return Enqueued::Folded;
        }
        if let Some(m) = metrics {
            m.added();
        }
        let slot = if self.processing.contains_key(&key) { None } else { Some(self.ready.push(key.clone(), priority, now)) };
        self.dirty.insert(key, Pending { since: now, priority, slot });
        if slot.is_none() {
            return Enqueued::Deferred;
        }
        self.report_depth(metrics);
        Enqueued::Ready
    }

    /// Sets the depth gauges (total and per priority) and the oldest ready key per priority.
    fn report_depth(&self, metrics: Option<&QueueMetricsHandle>) {
        if let Some(m) = metrics {
            m.set_depth(self.ready.len());
            for p in Priority::ALL {
                m.set_priority_depth(p, self.ready.len_of(p), self.ready.oldest(p));
            }
        }
    }

    /// Moves parked keys whose deadline has come to the ready queue; returns how many became ready.
    fn promote_due(&mut self, now: Instant, metrics: Option<&QueueMetricsHandle>) -> usize {
        let mut ready = 0;
        while let Some(entry) = self.waiting.first_entry() {
            let deadline = entry.key().0;
            if deadline > now {
                break;
            }
            let key = entry.remove();
            self.waiting_at.remove(&key);
            // Ready since its deadline: ahead of keys added after it, however late this runs.
            match self.enqueue(key, Priority::Normal, deadline, metrics) {
                Enqueued::Ready => ready += 1,
                Enqueued::Folded => self.stats.deduplicated += 1,
                Enqueued::Deferred => {}
            }
        }
        ready
    }

    fn next_deadline(&self) -> Option<Instant> {
        self.waiting.first_key_value().map(|((deadline, _), _)| *deadline)
    }
}

impl<K: Clone + Eq + Hash + Send + Sync + 'static> WorkQueue<K> {
    /// An empty queue called `name` (the `name` label of its metrics).
    pub fn new(name: impl Into<String>, limiter: Arc<dyn RateLimiter<K>>, metrics: Option<QueueMetricsHandle>) -> Self {
        let state = State {
            ready: ReadySet::new(),
            dirty: HashMap::new(),
            processing: HashMap::new(),
            waiting: BTreeMap::new(),
            waiting_at: HashMap::new(),
            next_seq: 0,
            shut_down: false,
            stats: QueueStats::default(),
        };
        let inner = Inner {
            name: name.into(),
            state: Mutex::new(state),
            limiter: RwLock::new(limiter),
            priorities: RwLock::new(PriorityConfig::default()),
            notify: Notify::new(),
            metrics,
        };
        Self { inner: Arc::new(inner) }
    }

    /// The queue's name.
    pub fn name(&self) -> &str {
        &self.inner.name
    }

    /// This queue with `config` for its priorities (default [`PriorityConfig::default`]).
    pub fn with_priorities(self, config: PriorityConfig) -> Self {
        self.set_priorities(config);
        self
    }

    /// Changes how `Low` keys age; applies from the next `get`.
    pub fn set_priorities(&self, config: PriorityConfig) {
        *self.inner.priorities.write() = config;
    }

    /// The priority configuration in use.
    pub fn priorities(&self) -> PriorityConfig {
        *self.inner.priorities.read()
    }

    /// Queues `key` at [`Priority::Normal`]. Returns `true` if this add will cause a (further)
    /// processing of the key, `false` if it was folded into a pending one (or the queue is shut
    /// down).
    pub fn add(&self, key: K) -> bool {
        self.add_with_priority(key, Priority::Normal)
    }

    /// Queues `key` at `priority`; a key already pending at a lower priority is raised to it
    /// (keeping its place in time, see [`priority`]), one pending at the same or a higher
    /// priority is left as it is. Returns what [`add`](Self::add) returns.
    pub fn add_with_priority(&self, key: K, priority: Priority) -> bool {
        let mut state = self.inner.state.lock();
        if state.shut_down {
            return false;
        }
        state.stats.adds += 1;
        self.enqueue_counted(&mut state, key, priority)
    }

    fn enqueue_counted(&self, state: &mut State<K>, key: K, priority: Priority) -> bool {
        match state.enqueue(key, priority, Instant::now(), self.inner.metrics.as_ref()) {
            Enqueued::Folded => {
                state.stats.deduplicated += 1;
                false
            }
            Enqueued::Deferred => true,
            Enqueued::Ready => {
                self.inner.notify.notify_one();
                true
            }
        }
    }

    /// Queues `key` at [`Priority::Normal`] once `delay` has passed (immediately for a zero
    /// delay). A key that is already parked keeps the earlier of its two deadlines.
    pub fn add_after(&self, key: K, delay: Duration) {
        let mut state = self.inner.state.lock();
        if state.shut_down {
            return;
        }
        state.stats.adds += 1;
        let now = Instant::now();
        if delay.is_zero() {
            self.enqueue_counted(&mut state, key, Priority::Normal);
            return;
        }
        // A delay past the end of time is "never": the key is dropped rather than overflowing.
        let Some(deadline) = now.checked_add(delay) else {
            state.stats.deduplicated += 1;
            return;
        };
        if let Some(&(parked, seq)) = state.waiting_at.get(&key) {
            if parked <= deadline {
                state.stats.deduplicated += 1;
                return;
            }
            state.waiting.remove(&(parked, seq));
            state.stats.deduplicated += 1;
        }
        let earliest_before = state.next_deadline();
        let seq = state.next_seq;
        state.next_seq += 1;
        state.waiting.insert((deadline, seq), key.clone());
        state.waiting_at.insert(key, (deadline, seq));
        if earliest_before.is_none_or(|earliest| deadline < earliest) {
            // Sleeping getters must wake earlier than they planned.
            self.inner.notify.notify_waiters();
        }
    }

    /// Parks `key` for as long as the rate limiter says (recording one more failure), and
    /// counts a retry. It becomes ready at [`Priority::Normal`].
    pub fn add_rate_limited(&self, key: K) {
        if self.is_shut_down() {
            return;
        }
        let limiter = self.inner.limiter.read().clone();
        let delay = limiter.when(&key);
        if let Some(m) = &self.inner.metrics {
            m.retried();
        }
        self.add_after(key, delay);
    }

    /// Resets `key`'s failure history in the rate limiter (call after a successful reconcile).
    pub fn forget(&self, key: &K) {
        self.inner.limiter.read().forget(key);
    }

    /// How many failures of `key` the rate limiter remembers.
    pub fn num_requeues(&self, key: &K) -> u32 {
        self.inner.limiter.read().retries(key)
    }

    /// Waits for a ready key and marks it processing; the caller must call [`done`](Self::done)
    /// with it. The key is the next by priority and aging ([`priority`]). Returns `None` once
    /// the queue is shut down (keys still queued are not handed out).
    ///
    /// Cancel-safe: dropping the future never loses a key.
    pub async fn get(&self) -> Option<K> {
        loop {
            // Register for wake-ups before looking, so none is missed between look and wait.
            let mut notified = pin!(self.inner.notify.notified());
            notified.as_mut().enable();
            let next_deadline = {
                let mut state = self.inner.state.lock();
                if state.shut_down {
                    return None;
                }
                self.promote_due(&mut state);
                let now = Instant::now();
                let config = *self.inner.priorities.read();
                if let Some(popped) = state.ready.pop(now, &config) {
                    let key = popped.key;
                    let queued_at = state.dirty.remove(&key).map_or(now, |p| p.since);
                    let metrics = self.inner.metrics.as_ref();
                    state.report_depth(metrics);
                    let id = metrics.map(|m| m.started_at(queued_at, popped.priority, popped.aged_ahead));
                    state.processing.insert(key.clone(), id);
                    return Some(key);
                }
                state.next_deadline()
            };
            match next_deadline {
                Some(deadline) => {
                    tokio::select! {
                        () = &mut notified => {}
                        () = tokio::time::sleep_until(deadline) => {}
                    }
                }
                None => notified.await,
            }
        }
    }

    fn promote_due(&self, state: &mut State<K>) {
        let ready = state.promote_due(Instant::now(), self.inner.metrics.as_ref());
        for _ in 0..ready {
            self.inner.notify.notify_one();
        }
    }

    /// Marks `key` as processed. If it was added while processing, it is queued again.
    pub fn done(&self, key: &K) {
        let mut state = self.inner.state.lock();
        let Some(id) = state.processing.remove(key) else {
            return;
        };
        if let (Some(m), Some(id)) = (&self.inner.metrics, id) {
            m.finished(id);
        }
        let state = &mut *state;
        if let Some(pending) = state.dirty.get_mut(key)
            && !state.shut_down
        {
            let slot = state.ready.push(key.clone(), pending.priority, Instant::now());
            pending.slot = Some(slot);
            state.report_depth(self.inner.metrics.as_ref());
            self.inner.notify.notify_one();
        }
    }

    /// Number of keys ready to be handed out (the depth).
    pub fn len(&self) -> usize {
        let mut state = self.inner.state.lock();
        self.promote_due(&mut state);
        state.ready.len()
    }

    /// Number of keys of `priority` ready to be handed out.
    pub fn len_of(&self, priority: Priority) -> usize {
        let mut state = self.inner.state.lock();
        self.promote_due(&mut state);
        state.ready.len_of(priority)
    }

    /// Whether no key is ready to be handed out.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Number of keys parked until a deadline.
    #[cfg(test)]
    fn delayed_len(&self) -> usize {
        let mut state = self.inner.state.lock();
        self.promote_due(&mut state);
        state.waiting.len()
    }

    /// Add and deduplication counts since the queue was created.
    pub fn stats(&self) -> QueueStats {
        self.inner.state.lock().stats
    }

    /// Stops the queue: every waiting `get` returns `None`, as does every later one, and later
    /// adds are ignored. Workers still processing may call `done` as usual.
    pub fn shut_down(&self) {
        self.inner.state.lock().shut_down = true;
        self.inner.notify.notify_waiters();
    }

    /// Whether [`shut_down`](Self::shut_down) was called.
    fn is_shut_down(&self) -> bool {
        self.inner.state.lock().shut_down
    }

    /// Replaces the rate limiter (after a configuration change). Queued and parked keys stay;
    /// failure histories start afresh in the new limiter.
    #[cfg(test)]
    fn set_rate_limiter(&self, limiter: Arc<dyn RateLimiter<K>>) {
        *self.inner.limiter.write() = limiter;
    }
}

impl<K> Drop for Inner<K> {
    fn drop(&mut self) {
        // Work still in flight will never be done: stop reporting it as unfinished; keys still
        // queued will never be handed out: stop reporting their wait.
        if let Some(m) = &self.metrics {
            self.state.get_mut().processing.values().flatten().for_each(|id| m.abandoned(*id));
            for p in Priority::ALL {
                m.set_priority_depth(p, 0, None);
            }
        }
    }
}

#[cfg(test)]
pub(crate) mod tests;
