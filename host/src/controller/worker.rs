//! The worker: takes a key from the queue, reconciles it against the cache (a plugin on a guest
//! thread, a native reconciler in place: [`run_native`]), hands the outcome to
//! [`super::apply`], and settles the key — forgotten, requeued, retried with backoff or left
//! until something changes — remembering per key why it was queued and its last error
//! ([`KeyStates`]).

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use parking_lot::Mutex;
use tokio::time::Instant;
use tracing::{Instrument, debug, info_span, warn};

use super::apply::summarize;
use super::expectations::Wait;
use super::settled::{Failed, Handling, Settled, result_label};
use super::shadow::{self, Shadow};
use super::{Cause, Current, Inner, RECONCILE_LOG, ReconcileError};
use crate::cache;
use crate::kinds::ObjectKey;
use crate::plugin::guest_threads;
use crate::queue::{RateLimiter, TokenBucket, WorkQueue};
use crate::reconciler::{Panicked, Reason, Request, catch_panic};

/// What the worker remembers of each key between its reconciles: the first reason it was queued
/// for since its last reconcile, and its last error while it keeps failing (the next request's
/// `last_error`).
#[derive(Default)]
pub(super) struct KeyStates {
    reasons: Mutex<HashMap<ObjectKey, Reason>>,
    failures: Mutex<HashMap<ObjectKey, String>>,
}

impl KeyStates {
    /// `key` was queued for `reason`: kept unless an earlier reason is pending.
    pub(super) fn queued(&self, key: &ObjectKey, reason: Reason) {
        self.reasons.lock().entry(key.clone()).or_insert(reason);
    }

    /// The request for `key`'s reconcile, taking its pending reason.
    pub(super) fn request(&self, key: &ObjectKey) -> Request {
        let reason = self.reasons.lock().remove(key).unwrap_or(Reason::Event);
        Request { key: key.clone(), reason, last_error: self.failures.lock().get(key).cloned() }
    }

    /// `key` is no longer this replica's (its shard moved).
    pub(super) fn drop_key(&self, key: &ObjectKey) {
        self.reasons.lock().remove(key);
    }

    /// Settle `key` after a reconcile that ended in `result`: requeue, retry or forget it on
    /// `queue`, and remember its last error.
    pub(super) fn settle(&self, queue: &WorkQueue<ObjectKey>, requeues: &Requeues<'_>, key: &ObjectKey, result: &Settled) {
        match result {
            Ok(_) => drop(self.failures.lock().remove(key)),
            Err(f) if f.handling != Handling::Again => drop(self.failures.lock().insert(key.clone(), f.cause.to_string())),
            Err(_) => {}
        }
        match result {
            Ok(requeue_after) => {
                queue.forget(key);
                if let Some(after) = requeue_after {
                    self.queued(key, Reason::Requeue);
                    queue.add_after(key.clone(), requeues.delay(*after));
                }
            }
            Err(Failed { handling: Handling::Again, cause }) => {
                debug!(error = %cause, "precondition failed; reconciling again");
                self.queued(key, Reason::Event);
                queue.add_rate_limited(key.clone());
            }
            Err(Failed { handling: Handling::Backoff, cause }) => {
                let attempt = queue.num_requeues(key) + 1;
                warn!(attempt, error = %cause, "reconcile failed; retrying with backoff");
                self.queued(key, Reason::Retry(attempt));
                queue.add_rate_limited(key.clone());
            }
            Err(Failed { handling: Handling::WhenChanged, cause }) => {
                warn!(error = %cause, "reconcile failed permanently; not retried until the object changes");
                queue.forget(key);
            }
        }
    }
}

/// How long a `requeue_after` waits: at least the controller's floor and what the queue's
/// overall bucket allows, so a plugin asking for 0 ms cannot spin.
pub(super) struct Requeues<'a> {
    pub(super) floor: Duration,
    pub(super) bucket: &'a TokenBucket,
}

impl Requeues<'_> {
    fn delay(&self, asked: Duration) -> Duration {
        asked.max(self.floor).max(RateLimiter::<()>::when(self.bucket, &()))
    }
}

impl Inner {
    /// Take keys until the queue shuts down.
    pub(super) async fn work(self: Arc<Self>) {
        while let Some(key) = self.queue.get().await {
            if let Some(ownership) = &self.ownership {
                // Sharded: a key whose shard this replica no longer owns is dropped; the owner
                // queued it from its own cache when it took the shard over.
                if !ownership.owns(&key) {
                    self.keys.drop_key(&key);
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

    /// Compare the serving version's side with the candidate's once the candidate answers, on a
    /// task of its own (the serving outcome goes on meanwhile); record how they compared.
    fn compare_later(&self, key: &ObjectKey, serving: shadow::Side, candidate: Option<CandidateCall>) {
        let (name, log, metrics) = (self.name.clone(), self.shared.shadows.clone(), self.shared.metrics.clone());
        let Some(CandidateCall { reconciler, answer }) = candidate else {
            log.record(&name, shadow::Compared::Skipped, None);
            metrics.shadowed(&name, shadow::Compared::Skipped);
            return;
        };
        let key = key.clone();
        tokio::spawn(async move {
            let (compared, difference) = match answer.await {
                Ok(result) => shadow::compare(&name, &key, serving, shadow::Side::of(reconciler.as_ref(), &result)),
                Err(_) => (shadow::Compared::Skipped, None),
            };
            if let Some(d) = &difference {
                debug!(controller = %name, key = %key, only_serving = ?d.only_serving(), only_candidate = ?d.only_candidate(),
                       "the candidate version's outcome differs");
            }
            log.record(&name, compared, difference);
            metrics.shadowed(&name, compared);
        });
    }

    /// Count a reconcile the canary served; past its failure rate, roll it back: its shards go
    /// back to the serving version (every key queued again), and the log and metrics say so.
    fn canary_settled(&self, canary: &Shadow, result: &Settled) {
        let failed = matches!(result, Err(f) if f.handling != Handling::Again);
        self.shared.metrics.canary(&self.name, failed);
        if let Some(rollback) = canary.canary_settled(&self.name, failed) {
            warn!(controller = %self.name, candidate = %rollback.digest, failed = rollback.failed, total = rollback.total,
                  "canary rolled back: too many of its reconciles failed; the serving version takes its shards back");
            self.shared.shadows.rolled_back(rollback);
            self.enqueue_all(Reason::Resync, crate::queue::Priority::Low);
        }
    }

    /// Wait until this replica may write; false if the controller stops first.
    async fn until_writable(&self) -> bool {
        let mut stopping = self.stopping.subscribe();
        tokio::select! {
            () = self.shared.fence.wait_open() => {}
            _ = stopping.wait_for(|s| *s) => return false,
        }
        !*self.stopping.borrow()
    }

    /// Reconcile `key` once (unless it waits for the cache to show its writes) and settle it.
    async fn process(&self, key: &ObjectKey) {
        let Some(mut current) = self.current.read().clone() else { return };
        if let Wait::Until(deadline) = self.expectations.check(key, current.view.as_ref()) {
            // Parked: an event on an expected object (or the deadline) brings it back.
            debug!(key = %key, "waiting for the cache to show this key's creates and deletes");
            self.queue.add_after(key.clone(), deadline.saturating_duration_since(Instant::now()));
            return;
        }
        let request = self.keys.request(key);
        let started = Instant::now();
        self.shared.metrics.worker_started(&self.name);
        // A canary shard's keys are served by the candidate, under its own grants; elsewhere it
        // shadows the serving version.
        let shadow = self.shadow.read().clone();
        let canary = shadow.clone().filter(|s| s.serves(key, self.config.shards));
        if let Some(c) = &canary {
            current.reconciler = c.reconciler().clone();
            current.grants = c.grants().clone();
            if let Some(executor) = c.executor() {
                current.executor = Arc::new(executor.clone());
            }
        }
        let reconciler = current.reconciler.clone();
        let view: cache::SharedCache = current.view.clone();
        let serving = reconciler.clone();
        let guest = reconciler.runs_guest_code();
        // Shadowed: a candidate slot is taken first, and the serving call's reads are kept for
        // the candidate, which replays them later, never beside a serving call.
        let shadow = shadow.filter(|_| canary.is_none());
        let slot = shadow.as_ref().and_then(|s| s.reserve());
        let kept = slot.as_ref().map(|_| Arc::new(cache::Kept::new(view.clone())));
        let (call_request, call_view) = (request.clone(), kept.clone().map_or_else(|| view.clone(), |k| k as cache::SharedCache));
        let call = move || reconciler.reconcile(&call_request, &call_view);
        let joined = if guest { guest_threads::run(call).await.map_err(|e| Panicked(e.to_string())) } else { run_native(call).await };
        let result = joined.unwrap_or_else(|e| Err(ReconcileError::transient(Cause::Stopped(format!("reconciler panicked: {e}")))));
        if let Some(shadow) = shadow {
            let candidate = slot.zip(kept).map(|(slot, kept)| CandidateCall {
                reconciler: shadow.reconciler().clone(),
                answer: shadow.start(slot, &request, &kept, &view),
            });
            self.compare_later(key, shadow::Side::of(serving.as_ref(), &result), candidate);
        }
        // The actions returned, for the reconcile line (only when someone reads it).
        let logging = tracing::enabled!(target: RECONCILE_LOG, tracing::Level::DEBUG);
        let returned = match &result {
            Ok(outcome) if logging => Some(summarize(&outcome.actions)),
            Err(e) if logging && !e.actions.is_empty() => Some(summarize(&e.actions)),
            _ => None,
        };
        let result = match result {
            Ok(outcome) => self.execute(key, &current, outcome).await,
            Err(error) => self.failed(key, &current, error).await,
        };
        self.shared.metrics.worker_finished(&self.name, started.elapsed(), result_label(&result));
        if let Some(c) = &canary {
            self.canary_settled(c, &result);
        }
        if logging {
            log_reconcile(key, &current, started.elapsed(), returned, &result);
        }
        let requeues = Requeues { floor: self.config.min_requeue_after, bucket: &self.requeues };
        self.keys.settle(&self.queue, &requeues, key, &result);
    }
}

/// Run a native (trusted, host-compiled) reconciler's `call` on this thread, at once, and catch
/// its panic as an error (the panic's message).
///
/// On a multi-threaded runtime, [`tokio::task::block_in_place`] first hands this thread's other
/// tasks (event handling, the other workers) to another thread, so a slow native reconciler
/// cannot stall them; the reconcile itself starts without waiting for another thread to be
/// scheduled. That wait was the 1% tail of event → reconcile start when the host has one CPU:
/// during a burst of events the runtime's thread keeps the CPU for its time slice and the woken
/// blocking thread waits (measured in BENCHMARKS.md §5).
/// On a current-thread runtime (where `block_in_place` is not allowed), a blocking thread.
/// Plugins never run here: guest code keeps its lower-priority threads ([`guest_threads`]).
async fn run_native<T: Send + 'static>(call: impl FnOnce() -> T + Send + 'static) -> Result<T, Panicked> {
    use tokio::runtime::{Handle, RuntimeFlavor};
    if Handle::current().runtime_flavor() == RuntimeFlavor::MultiThread {
        tokio::task::block_in_place(|| catch_panic(call))
    } else {
        tokio::task::spawn_blocking(call).await.map_err(|e| Panicked(e.to_string()))
    }
}

/// A candidate's reconcile, started once the serving one has returned.
struct CandidateCall {
    reconciler: Arc<dyn crate::reconciler::Reconciler>,
    answer: tokio::sync::oneshot::Receiver<Result<crate::reconciler::Outcome, ReconcileError>>,
}

/// One line per reconcile at [`RECONCILE_LOG`]: the key, the actions returned (or why there were
/// none), the result, how long it took, and which build of the reconciler ran it.
fn log_reconcile(key: &ObjectKey, current: &Current, took: Duration, returned: Option<String>, result: &Settled) {
    let took_ms = (took.as_secs_f64() * 10_000.0).round() / 10.0;
    let digest = current.reconciler.digest().unwrap_or("native");
    let what = match (returned, result) {
        (Some(actions), Ok(_)) => actions,
        (Some(actions), Err(f)) => format!("{actions}: {}", f.cause),
        (None, Err(f)) => format!("failed: {}", f.cause),
        (None, Ok(_)) => "no actions".into(),
    };
    debug!(target: RECONCILE_LOG, result = result_label(result), took_ms, digest, "{key}: {what}");
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::controller::settled::FailCause;
    use crate::kinds::KindRef;
    use crate::queue::RateLimitConfig;

    fn key(name: &str) -> ObjectKey {
        KindRef::new("v1", "ConfigMap").key(Some("ns"), name)
    }

    fn failed(handling: Handling, message: &str) -> Settled {
        Err(Failed::new(handling, FailCause::Reconcile(Cause::Reconciler(message.into()))))
    }

    fn queue() -> WorkQueue<ObjectKey> {
        let limits = RateLimitConfig { base_delay: Duration::from_millis(5), ..RateLimitConfig::default() };
        WorkQueue::new("test", limits.build(), None)
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 1)]
    async fn a_native_reconcile_runs_in_place_while_the_runtime_goes_on() {
        // On the runtime's one worker thread, as a controller's worker task runs (the test's
        // own body runs on the test thread, outside the workers).
        tokio::spawn(async {
            let here = std::thread::current().id();
            // The call blocks until another task of this runtime has run: it would wait out the
            // timeout if the call kept the runtime's only worker thread to itself.
            let (tx, rx) = std::sync::mpsc::channel();
            let other = tokio::spawn(async move { tx.send(()).unwrap() });
            let call = move || (std::thread::current().id(), rx.recv_timeout(Duration::from_secs(10)));
            let (thread, answered) = run_native(call).await.unwrap();
            assert_eq!(thread, here, "the reconcile ran on the worker's own thread");
            assert!(answered.is_ok(), "another task ran while the reconcile blocked");
            other.await.unwrap();
        })
        .await
        .unwrap();
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 1)]
    async fn a_panicking_native_reconcile_is_an_error_naming_the_panic() {
        assert_eq!(run_native(|| panic!("boom")).await.unwrap_err().0, "boom");
        assert_eq!(run_native(|| panic!("boom {}", 2)).await.unwrap_err().0, "boom 2");
        assert_eq!(run_native(|| 7).await, Ok(7), "the worker goes on after a panic");
    }

    #[tokio::test]
    async fn on_a_current_thread_runtime_a_native_reconcile_runs_on_a_blocking_thread() {
        let here = std::thread::current().id();
        assert_ne!(run_native(move || std::thread::current().id()).await.unwrap(), here);
        assert!(run_native(|| panic!("boom")).await.unwrap_err().0.contains("boom"));
    }

    #[tokio::test(start_paused = true)]
    async fn failures_retry_with_backoff_and_carry_their_error() {
        let (states, queue, bucket) = (KeyStates::default(), queue(), TokenBucket::new(10.0, 100));
        let requeues = Requeues { floor: Duration::from_secs(1), bucket: &bucket };
        let k = key("a");
        states.queued(&k, Reason::Event);
        let request = states.request(&k);
        assert_eq!((request.reason, request.last_error), (Reason::Event, None));
        // Two failures: the second retry waits twice as long, and carries the error.
        for (attempt, wait) in [(1, 5), (2, 10)] {
            states.settle(&queue, &requeues, &k, &failed(Handling::Backoff, "boom"));
            tokio::time::sleep(Duration::from_millis(wait - 1)).await;
            assert_eq!(queue.len(), 0, "attempt {attempt} is not due yet");
            tokio::time::sleep(Duration::from_millis(1)).await;
            let got = queue.get().await.unwrap();
            let request = states.request(&got);
            assert_eq!((request.reason, request.last_error.as_deref()), (Reason::Retry(attempt), Some("boom")));
            queue.done(&got);
        }
        // A success forgets the error and the backoff.
        states.settle(&queue, &requeues, &k, &Ok(None));
        assert_eq!((queue.num_requeues(&k), states.request(&k).last_error), (0, None));
    }

    #[tokio::test(start_paused = true)]
    async fn requeues_wait_at_least_the_floor_and_permanent_errors_wait_for_a_change() {
        let (states, queue, bucket) = (KeyStates::default(), queue(), TokenBucket::new(10.0, 100));
        let requeues = Requeues { floor: Duration::from_secs(1), bucket: &bucket };
        let k = key("b");
        states.settle(&queue, &requeues, &k, &Ok(Some(Duration::ZERO)));
        tokio::time::sleep(Duration::from_millis(999)).await;
        assert_eq!(queue.len(), 0, "a 0 ms requeue waits the 1 s floor");
        tokio::time::sleep(Duration::from_millis(1)).await;
        let got = queue.get().await.unwrap();
        assert_eq!(states.request(&got).reason, Reason::Requeue);
        queue.done(&got);
        states.settle(&queue, &requeues, &k, &failed(Handling::WhenChanged, "bad spec"));
        tokio::time::sleep(Duration::from_secs(3600)).await;
        assert_eq!(queue.len(), 0, "a permanent error is not retried");
        assert_eq!(states.request(&k).last_error.as_deref(), Some("bad spec"));
        // A stale view is reconciled again, without becoming the last error.
        states.settle(&queue, &requeues, &k, &Ok(None));
        states.settle(&queue, &requeues, &k, &failed(Handling::Again, "conflict"));
        tokio::time::sleep(Duration::from_millis(5)).await;
        let got = queue.get().await.unwrap();
        let request = states.request(&got);
        assert_eq!((request.reason, request.last_error), (Reason::Event, None));
    }

    #[test]
    fn labels_and_messages() {
        assert_eq!(result_label(&Ok(Some(Duration::ZERO))), "requeue_after");
        assert_eq!(result_label(&failed(Handling::Again, "x")), "conflict");
        let cause = FailCause::WithActions {
            cause: Cause::Reconciler("quota".into()),
            actions: Box::new(FailCause::Reconcile(Cause::Stopped("trap".into()))),
        };
        assert_eq!(cause.to_string(), "quota (and the actions returned with the error failed: trap)");
    }

    mod with_a_fake_api {
        use std::time::Duration;

        use super::*;
        use crate::actions::Action;
        use crate::controller::harness::{self, FakeExecute, GRANTS, Scripted, config_map};
        use crate::controller::{ControllerConfig, ReconcileError};

        #[tokio::test(start_paused = true)]
        async fn a_reconcile_runs_its_outcome_then_waits_for_the_cache_to_show_its_create() {
            let reconciler = Scripted::new("test", |request| {
                let child = config_map("ns", &format!("{}-child", request.key.name));
                Ok(harness::outcome(vec![Action::Create(child)], Some(Duration::from_secs(30))))
            });
            let fake = FakeExecute::succeeding();
            let (inner, _, _) = harness::controller(reconciler.clone(), GRANTS, ControllerConfig::default(), fake.clone());
            let k = key("p");
            inner.process(&k).await;
            assert_eq!((reconciler.calls(), fake.sent()), (1, vec!["create v1/ConfigMap/ns/p-child".to_string()]));
            // Its own create is not in the cache yet: the key is parked, not reconciled again
            // on a stale view (it would create the child twice).
            inner.process(&k).await;
            assert_eq!((reconciler.calls(), fake.sent().len()), (1, 1), "parked until the cache shows the create");
        }

        #[tokio::test(start_paused = true)]
        async fn a_failed_reconcile_is_retried_with_backoff_carrying_its_error() {
            let reconciler = Scripted::new("test", |request| match &request.last_error {
                None => Err(ReconcileError::transient(Cause::Reconciler("quota exceeded".into()))),
                Some(_) => Ok(harness::outcome(Vec::new(), None)),
            });
            let config = ControllerConfig {
                rate_limits: RateLimitConfig { base_delay: Duration::from_millis(5), ..RateLimitConfig::default() },
                ..ControllerConfig::default()
            };
            let (inner, _, _) = harness::controller(reconciler.clone(), GRANTS, config, FakeExecute::succeeding());
            let k = key("p");
            inner.process(&k).await;
            assert_eq!(inner.queue.num_requeues(&k), 1, "retried with backoff");
            tokio::time::sleep(Duration::from_millis(5)).await;
            let got = inner.queue.get().await.unwrap();
            let request = inner.keys.request(&got);
            assert_eq!((request.reason, request.last_error.as_deref()), (Reason::Retry(1), Some("quota exceeded")));
            inner.keys.queued(&got, request.reason);
            inner.process(&got).await;
            inner.queue.done(&got);
            assert_eq!((reconciler.calls(), inner.queue.num_requeues(&k)), (2, 0), "a success forgets the backoff");
        }
    }
}
