//! Priorities of the ready keys, with aging so that a `Low` key is never starved.
//!
//! Keys from the initial list, from resyncs and from the replay after a hot swap are
//! [`Priority::Low`]; keys from events, requeues and retries are [`Priority::Normal`]. Without
//! aging this is controller-runtime 0.23's priority queue: a `Normal` key is always handed out
//! before any `Low` one, so under a steady stream of events a resync key waits forever (its open
//! complaint). Here a `Low` key that has been ready for [`PriorityConfig::aging`] is *aged*, and
//! while an aged `Low` key waits, at most `aged_every − 1` consecutive gets serve `Normal` keys:
//! the next one serves the oldest `Low` key.
//!
//! # The bound
//!
//! Write `N` for [`PriorityConfig::aged_every`]. A `Low` key that became ready at `t` with `A`
//! older `Low` keys ahead of it is handed out at the latest by the `(A + 1)·N`-th get after
//! `t + aging`, however many `Normal` keys arrive. With `W` workers that each hold a key at most
//! `S` (get to the next get), that is a wait of at most
//!
//! > `aging + ⌈(A + 1)·N / W⌉ · S`
//!
//! Proof: the `Low` keys form one FIFO whose head is the oldest, so while our key is ready and
//! aged the head is aged too. A get serves a `Normal` key over an aged head only while the count
//! of such gets in a row is below `N − 1`; so of every `N` consecutive gets after `t + aging` at
//! least one serves the head of the `Low` FIFO, and the `A + 1`-th such get serves our key. The
//! workers never wait while a key is ready, so from `t + aging` on, each worker calls `get` at
//! least once every `S`: the `k`-th get comes within `⌈k / W⌉·S`. ∎ The converse guarantee:
//! while `Normal` keys are ready, two gets that serve `Low` keys have at least `N − 1` gets
//! serving `Normal` keys between them (so `Normal` keys get at least `N − 1` of any `N` gets in
//! a row), and every get while no `Low` key has aged. The tests
//! `aged_low_key_is_served_within_the_bound_under_saturation` and
//! `the_bound_holds_with_several_workers` check the bound on the paused clock.
//!
//! Defaults: `aging` 5 s, `N` = 4. Five seconds is five default reconcile deadlines: an initial
//! list or a resync that the workers clear in a few seconds stays entirely behind events (as in
//! controller-runtime), while a `Low` key under a flood of events is served after 5 s plus four
//! gets per older `Low` key. `N` = 4 caps what aging costs events at a quarter of the gets, and
//! only while `Low` keys have been waiting 5 s.
//!
//! Re-adding a key that is already ready at a lower priority raises it ([`Priority`] is the
//! maximum of its pending adds) and keeps its place in time: it is served before every `Normal`
//! key that became ready after it (controller-runtime keeps the add order of a raised item too).
//! Re-adding at the same or a lower priority changes nothing. Within a priority, keys come out
//! in the order they became ready (ties: first queued first).

use std::collections::BTreeMap;
use std::fmt;
use std::hash::Hash;
use std::time::Duration;

use serde::Deserialize;
use tokio::time::Instant;

/// How urgent a queued key is. Ordered: `Low < Normal`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum Priority {
    /// Keys nobody is waiting for: the initial list, resyncs, the replay after a hot swap.
    Low,
    /// Keys from events, requeues (`requeue_after`) and retries. What [`add`](super::WorkQueue::add) uses.
    #[default]
    Normal,
}

impl Priority {
    /// Every priority, lowest first.
    pub const ALL: [Priority; 2] = [Priority::Low, Priority::Normal];

    /// The `priority` label of the queue metrics.
    pub fn as_str(self) -> &'static str {
        match self {
            Priority::Low => "low",
            Priority::Normal => "normal",
        }
    }

    pub(crate) fn index(self) -> usize {
        self as usize
    }
}

impl fmt::Display for Priority {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// How long `Low` keys wait before they are aged, and the share aged ones get.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PriorityConfig {
    /// How long a `Low` key is ready before it is aged (default 5 s).
    pub aging: Duration,
    /// While a `Low` key is aged, at least one get in this many serves the oldest `Low` key
    /// (default 4; 1 serves aged `Low` keys before any `Normal` key). 0 is treated as 1.
    pub aged_every: u32,
}

/// Default of [`PriorityConfig::aging`].
pub const DEFAULT_AGING: Duration = Duration::from_secs(5);
/// Default of [`PriorityConfig::aged_every`].
pub const DEFAULT_AGED_EVERY: u32 = 4;

impl Default for PriorityConfig {
    fn default() -> Self {
        Self { aging: DEFAULT_AGING, aged_every: DEFAULT_AGED_EVERY }
    }
}

impl PriorityConfig {
    /// The wait bound of the module documentation for a `Low` key with `ahead` older `Low` keys,
    /// `workers` workers and a longest hold of `hold` per key.
    pub fn low_wait_bound(&self, ahead: u32, workers: u32, hold: Duration) -> Duration {
        let gets = (ahead + 1).saturating_mul(self.aged_every.max(1));
        let rounds = gets.div_ceil(workers.max(1));
        self.aging.saturating_add(hold.saturating_mul(rounds))
    }
}

/// One pop from the ready keys.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct Popped<K> {
    pub key: K,
    pub priority: Priority,
    /// An aged `Low` key served while `Normal` keys were ready.
    pub aged_ahead: bool,
}

/// Where a ready key is in its class: (ready since, sequence number). The queue keeps it with the
/// key's other state, so the set needs no index of its own.
pub(crate) type Slot = (Instant, u64);

/// The ready keys, one ordered class per priority.
pub(crate) struct ReadySet<K> {
    /// Per priority: keys by slot.
    classes: [BTreeMap<Slot, K>; 2],
    next_seq: u64,
    /// Gets in a row that served a `Normal` key while the head `Low` key was aged.
    streak: u32,
}

impl<K> ReadySet<K> {
    pub fn len(&self) -> usize {
        self.classes.iter().map(BTreeMap::len).sum()
    }

    pub fn len_of(&self, priority: Priority) -> usize {
        self.classes[priority.index()].len()
    }

    /// When the oldest ready key of `priority` became ready.
    pub fn oldest(&self, priority: Priority) -> Option<Instant> {
        self.classes[priority.index()].first_key_value().map(|((since, _), _)| *since)
    }
}

impl<K: Clone + Eq + Hash> ReadySet<K> {
    pub fn new() -> Self {
        Self { classes: [BTreeMap::new(), BTreeMap::new()], next_seq: 0, streak: 0 }
    }

    /// Adds `key` (which must not be ready yet) as ready since `since`; returns its slot.
    pub fn push(&mut self, key: K, priority: Priority, since: Instant) -> Slot {
        let slot = (since, self.next_seq);
        self.next_seq += 1;
        self.classes[priority.index()].insert(slot, key);
        slot
    }

    /// Moves the key in `slot` from priority `from` up to `to`, keeping its place in time.
    /// Returns whether it moved.
    pub fn raise(&mut self, slot: Slot, from: Priority, to: Priority) -> bool {
        if from >= to {
            return false;
        }
        let Some(key) = self.classes[from.index()].remove(&slot) else {
            return false;
        };
        self.classes[to.index()].insert(slot, key);
        true
    }

    /// Takes the next key to hand out at `now` (the module documentation's rule).
    pub fn pop(&mut self, now: Instant, config: &PriorityConfig) -> Option<Popped<K>> {
        let aged = self.oldest(Priority::Low).is_some_and(|since| now.saturating_duration_since(since) >= config.aging);
        let normal_ready = !self.classes[Priority::Normal.index()].is_empty();
        if !aged {
            self.streak = 0;
        }
        let priority = if aged && (!normal_ready || self.streak + 1 >= config.aged_every.max(1)) {
            self.streak = 0;
            Priority::Low
        } else if normal_ready {
            if aged {
                self.streak += 1;
            }
            Priority::Normal
        } else {
            Priority::Low
        };
        let (_, key) = self.classes[priority.index()].pop_first()?;
        Some(Popped { key, priority, aged_ahead: priority == Priority::Low && aged && normal_ready })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::queue::{QueueMetrics, RateLimitConfig, WorkQueue};

    use std::pin::pin;
    use std::sync::Arc;
    use std::task::Poll;

    use futures::poll;
    use parking_lot::Mutex;
    use prometheus_client::registry::Registry;
    use tokio::time::{advance, sleep};

    use Priority::{Low, Normal};

    const MS: Duration = Duration::from_millis(1);
    const S: Duration = Duration::from_secs(1);

    fn queue<K: Clone + Eq + Hash + Send + Sync + 'static>() -> WorkQueue<K> {
        WorkQueue::new("test", RateLimitConfig::default().build(), None)
    }

    async fn drain<K: Clone + Eq + Hash + Send + Sync + 'static>(q: &WorkQueue<K>) -> Vec<K> {
        let mut out = Vec::new();
        while !q.is_empty() {
            let key = q.get().await.expect("queue is not shut down");
            q.done(&key);
            out.push(key);
        }
        out
    }

    #[tokio::test(start_paused = true)]
    async fn normal_keys_come_before_low_ones_fifo_within_each() {
        let q = queue();
        q.add_with_priority("l1", Low);
        q.add("n1");
        q.add_with_priority("l2", Low);
        q.add_with_priority("n2", Normal);
        q.add_with_priority("l3", Low);
        assert_eq!((q.len(), q.len_of(Low), q.len_of(Normal)), (5, 3, 2));
        assert_eq!(drain(&q).await, ["n1", "n2", "l1", "l2", "l3"]);
    }

    #[tokio::test(start_paused = true)]
    async fn adding_at_a_higher_priority_raises_a_key_and_keeps_its_place_in_time() {
        let q = queue();
        q.add_with_priority("a", Low);
        advance(MS).await;
        q.add_with_priority("b", Low);
        advance(MS).await;
        q.add("n"); // ready after "a" and "b" became ready
        advance(MS).await;
        assert!(!q.add("b"), "a raise is folded: still one processing");
        assert_eq!((q.len(), q.len_of(Low), q.len_of(Normal)), (3, 1, 2));
        // "b" was ready before "n": raised, it comes first.
        assert_eq!(drain(&q).await, ["b", "n", "a"]);
        assert_eq!(q.stats(), crate::queue::QueueStats { adds: 4, deduplicated: 1 });
    }

    #[tokio::test(start_paused = true)]
    async fn a_lower_or_equal_priority_add_changes_nothing() {
        let q = queue();
        q.add("a");
        q.add("b");
        assert!(!q.add_with_priority("a", Low), "folded, not lowered");
        assert!(!q.add_with_priority("b", Normal));
        q.add_with_priority("c", Low);
        assert!(!q.add_with_priority("c", Low));
        assert_eq!((q.len_of(Low), q.len_of(Normal)), (1, 2));
        assert_eq!(drain(&q).await, ["a", "b", "c"]);
        assert_eq!(q.stats().deduplicated, 3);
    }

    #[tokio::test(start_paused = true)]
    async fn one_key_is_queued_once_across_priorities() {
        let q = queue();
        for p in [Low, Normal, Low, Normal] {
            q.add_with_priority(7, p);
        }
        assert_eq!(q.len(), 1);
        assert_eq!(drain(&q).await, [7]);
        assert_eq!(q.len(), 0);
    }

    #[tokio::test(start_paused = true)]
    async fn a_key_added_while_processing_keeps_its_highest_priority_for_done() {
        let q = queue();
        q.add_with_priority("a", Low);
        assert_eq!(q.get().await, Some("a"));
        // Re-added while processing, first Low then Normal: deferred, not handed out.
        assert!(q.add_with_priority("a", Low));
        assert!(!q.add("a"));
        assert_eq!(q.len(), 0);
        q.add_with_priority("x", Low);
        let mut second = pin!(q.get());
        assert_eq!(poll!(second.as_mut()), Poll::Ready(Some("x")));
        let mut third = pin!(q.get());
        assert_eq!(poll!(third.as_mut()), Poll::Pending, "a is still processing");
        q.done(&"a");
        assert_eq!((q.len_of(Low), q.len_of(Normal)), (0, 1), "queued again as Normal");
        assert_eq!(third.await, Some("a"));

        // Added while processing at Low only: queued again at Low.
        q.add_with_priority("a", Low);
        q.done(&"a");
        assert_eq!((q.len_of(Low), q.len_of(Normal)), (1, 0));
    }

    #[tokio::test(start_paused = true)]
    async fn due_keys_are_normal_and_ordered_by_their_deadline() {
        let q = queue();
        q.add_with_priority("low", Low);
        q.add_after("parked", 10 * MS);
        advance(20 * MS).await; // "parked" is due at +10 ms but nothing looked yet
        q.add("late"); // ready at +20 ms
        assert_eq!(drain(&q).await, ["parked", "late", "low"]);
        q.add_rate_limited("retry");
        q.add_with_priority("low", Low);
        advance(S).await;
        assert_eq!(drain(&q).await, ["retry", "low"]);
    }

    #[tokio::test(start_paused = true)]
    async fn aged_low_keys_get_one_get_in_n() {
        let q = queue::<u32>();
        q.set_priorities(PriorityConfig { aging: S, aged_every: 3 });
        q.add_with_priority(100, Low);
        q.add_with_priority(101, Low);
        for n in 0..10 {
            q.add(n);
        }
        // Not aged yet: strict priority.
        assert_eq!(q.get().await, Some(0));
        q.done(&0);
        advance(S).await;
        // Aged: two Normal gets, then a Low one.
        let order = drain(&q).await;
        assert_eq!(order, [1, 2, 100, 3, 4, 101, 5, 6, 7, 8, 9]);
    }

    #[tokio::test(start_paused = true)]
    async fn aged_every_one_serves_aged_low_keys_first() {
        let q = queue::<u32>();
        q.set_priorities(PriorityConfig { aging: S, aged_every: 1 });
        q.add_with_priority(100, Low);
        advance(S).await;
        q.add(1);
        q.add_with_priority(101, Low); // not aged: after the Normal key
        assert_eq!(drain(&q).await, [100, 1, 101]);
    }

    /// `workers` workers holding each key `hold`; a producer adding 3 new Normal keys per worker
    /// every `hold` (three times what the workers serve); `lows` Low keys queued at the start.
    /// Returns when each Low key was handed out (relative to the start), and how many of the gets
    /// from `aging` on served Normal keys, of how many.
    async fn saturate(
        config: PriorityConfig,
        workers: u32,
        lows: u32,
        hold: Duration,
        run: Duration,
    ) -> (Vec<Option<Duration>>, usize, usize) {
        const LOW_BASE: u32 = 1_000_000;
        let q = queue::<u32>();
        q.set_priorities(config);
        let start = Instant::now();
        // Normal keys are ready from the start (the producer adds more from hold/2 on).
        let per_tick = 3 * workers;
        for n in 0..per_tick {
            q.add(n);
        }
        for i in 0..lows {
            q.add_with_priority(LOW_BASE + i, Low);
        }
        let served = Arc::new(Mutex::new(Vec::new()));
        let workers: Vec<_> = (0..workers)
            .map(|_| {
                let (q, served) = (q.clone(), served.clone());
                tokio::spawn(async move {
                    while let Some(key) = q.get().await {
                        served.lock().push((key, start.elapsed()));
                        sleep(hold).await;
                        q.done(&key);
                    }
                })
            })
            .collect();
        let producer = tokio::spawn({
            let q = q.clone();
            async move {
                sleep(hold / 2).await;
                let mut next = per_tick;
                loop {
                    for _ in 0..per_tick {
                        q.add(next);
                        next += 1;
                    }
                    sleep(hold).await;
                }
            }
        });
        sleep(run).await;
        producer.abort();
        q.shut_down();
        for worker in workers {
            worker.await.expect("worker panicked");
        }
        assert!(q.len_of(Normal) > 100, "the Normal keys saturated the worker");
        let served = served.lock();
        let at = (0..lows).map(|i| served.iter().find(|(k, _)| *k == LOW_BASE + i).map(|(_, at)| *at)).collect();
        let after_aging: Vec<_> = served.iter().filter(|(_, at)| *at >= config.aging).collect();
        let normal = after_aging.iter().filter(|(k, _)| *k < LOW_BASE).count();
        (at, normal, after_aging.len())
    }

    #[tokio::test(start_paused = true)]
    async fn aged_low_key_is_served_within_the_bound_under_saturation() {
        let config = PriorityConfig::default();
        let hold = 100 * MS;
        let (at, normal, gets) = saturate(config, 1, 3, hold, 20 * S).await;
        for (ahead, at) in at.iter().enumerate() {
            let at = at.unwrap_or_else(|| panic!("Low key {ahead} starved"));
            let bound = config.low_wait_bound(ahead as u32, 1, hold);
            assert!(at >= config.aging, "Low key {ahead} served at {at:?}, before aging, with Normal keys ready");
            assert!(at <= bound, "Low key {ahead} served at {at:?}, after its bound {bound:?}");
        }
        // 5 s + (A+1)·4 gets of 100 ms: bounds 5.4, 5.8 and 6.2 s. The gets at 5.0, 5.1 and
        // 5.2 s serve Normal keys, the fourth after aging a Low one, and so on.
        assert_eq!(config.low_wait_bound(2, 1, hold), Duration::from_millis(6200));
        let ms = |ms| Some(Duration::from_millis(ms));
        assert_eq!(at, [ms(5300), ms(5700), ms(6100)]);
        // Normal keys kept at least 3 of every 4 gets once the Low keys had aged.
        assert!(normal * 4 >= gets * 3, "{normal} of {gets} gets served Normal keys");
    }

    #[tokio::test(start_paused = true)]
    async fn the_bound_holds_with_several_workers() {
        let config = PriorityConfig { aging: 2 * S, aged_every: 3 };
        let (hold, workers, lows) = (50 * MS, 4, 10);
        let (at, normal, gets) = saturate(config, workers, lows, hold, 30 * S).await;
        for (ahead, at) in at.iter().enumerate() {
            let at = at.unwrap_or_else(|| panic!("Low key {ahead} starved"));
            let bound = config.low_wait_bound(ahead as u32, workers, hold);
            assert!(at >= config.aging, "Low key {ahead} served at {at:?}, before aging");
            assert!(at <= bound, "Low key {ahead} served at {at:?}, after its bound {bound:?}");
        }
        assert!(normal * 3 >= gets * 2, "{normal} of {gets} gets served Normal keys");
    }

    #[tokio::test(start_paused = true)]
    async fn without_aging_a_low_key_starves_as_in_controller_runtime() {
        let strict = PriorityConfig { aging: Duration::MAX, aged_every: 4 };
        let (at, normal, _) = saturate(strict, 1, 1, 100 * MS, 60 * S).await;
        assert_eq!(at, [None], "strict priority never serves the Low key under saturation");
        assert_eq!(normal, 0, "no get comes after an aging of forever");
    }

    #[test]
    fn bound_arithmetic() {
        let c = PriorityConfig { aging: S, aged_every: 4 };
        assert_eq!(c.low_wait_bound(0, 1, 10 * MS), S + 40 * MS);
        assert_eq!(c.low_wait_bound(0, 4, 10 * MS), S + 10 * MS);
        assert_eq!(c.low_wait_bound(9, 3, 10 * MS), S + 140 * MS); // ⌈40/3⌉ = 14
        let zero = PriorityConfig { aging: S, aged_every: 0 };
        assert_eq!(zero.low_wait_bound(0, 0, 10 * MS), S + 10 * MS);
    }

    use crate::queue::tests::{assert_has, scrape};

    #[tokio::test(start_paused = true)]
    async fn metrics_per_priority() {
        let mut registry = Registry::default();
        let metrics = QueueMetrics::new(&mut registry);
        let q = WorkQueue::new("pods", RateLimitConfig::default().build(), Some(metrics.for_queue("pods")));
        q.set_priorities(PriorityConfig { aging: 2 * S, aged_every: 2 });
        q.add_with_priority("l1", Low);
        q.add_with_priority("l2", Low);
        q.add("n1");
        q.add("n2");
        advance(3 * S).await;
        let text = scrape(&registry);
        assert_has(&text, r#"workqueue_depth{name="pods"} 4"#);
        assert_has(&text, r#"wasmloop_workqueue_depth{name="pods",priority="low"} 2"#);
        assert_has(&text, r#"wasmloop_workqueue_depth{name="pods",priority="normal"} 2"#);
        assert_has(&text, r#"wasmloop_workqueue_oldest_ready_seconds{name="pods",priority="low"} 3.0"#);
        assert_has(&text, r#"wasmloop_workqueue_oldest_ready_seconds{name="pods",priority="normal"} 3.0"#);

        // Aged (3 s ≥ 2 s), one get in two: n1, l1 (aged, ahead of n2), n2, l2.
        let order = drain(&q).await;
        assert_eq!(order, ["n1", "l1", "n2", "l2"]);
        let text = scrape(&registry);
        assert_has(&text, r#"workqueue_depth{name="pods"} 0"#);
        assert_has(&text, r#"wasmloop_workqueue_depth{name="pods",priority="low"} 0"#);
        assert_has(&text, r#"wasmloop_workqueue_depth{name="pods",priority="normal"} 0"#);
        assert_has(&text, r#"wasmloop_workqueue_oldest_ready_seconds{name="pods",priority="low"} 0.0"#);
        assert_has(&text, r#"wasmloop_workqueue_queue_duration_seconds_count{name="pods",priority="low"} 2"#);
        assert_has(&text, r#"wasmloop_workqueue_queue_duration_seconds_sum{name="pods",priority="low"} 6.0"#);
        assert_has(&text, r#"wasmloop_workqueue_queue_duration_seconds_count{name="pods",priority="normal"} 2"#);
        assert_has(&text, r#"wasmloop_workqueue_aged_total{name="pods"} 1"#);
        // The existing family still counts every get.
        assert_has(&text, r#"workqueue_queue_duration_seconds_count{name="pods"} 4"#);

        // A dropped queue stops reporting its waiting keys.
        q.add_with_priority("l3", Low);
        advance(S).await;
        let text = scrape(&registry);
        assert_has(&text, r#"wasmloop_workqueue_oldest_ready_seconds{name="pods",priority="low"} 1.0"#);
        drop(q);
        let text = scrape(&registry);
        assert_has(&text, r#"wasmloop_workqueue_oldest_ready_seconds{name="pods",priority="low"} 0.0"#);
    }
}
