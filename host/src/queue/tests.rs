//! The queue's semantics on tokio's paused clock: serialising keys, folding bursts, delays,
//! backoff, priorities, metrics.

use super::*;
use std::collections::HashSet;
use std::task::Poll;

use futures::poll;
use prometheus_client::registry::Registry;
use tokio::time::{advance, timeout};

const MS: Duration = Duration::from_millis(1);

fn queue<K: Clone + Eq + Hash + Send + Sync + 'static>() -> WorkQueue<K> {
    WorkQueue::new("test", RateLimitConfig::default().build(), None)
}

/// `get` returns nothing within an hour (instant on the paused clock).
async fn assert_nothing_ready<K: Clone + Eq + Hash + Send + Sync + fmt::Debug + 'static>(q: &WorkQueue<K>) {
    let got = timeout(Duration::from_secs(3600), q.get()).await;
    assert!(got.is_err(), "expected no ready key, got {got:?}");
}

#[tokio::test(start_paused = true)]
async fn five_adds_make_one_get() {
    let q = queue();
    let added: Vec<bool> = (0..5).map(|_| q.add("a")).collect();
    assert_eq!(added, [true, false, false, false, false]);
    assert_eq!(q.len(), 1);
    assert_eq!(q.get().await, Some("a"));
    assert!(q.is_empty());
    assert_nothing_ready(&q).await;
    assert_eq!(q.stats(), QueueStats { adds: 5, deduplicated: 4 });
    assert_eq!(q.stats().dedup_ratio(), 0.8);
}

#[tokio::test(start_paused = true)]
async fn ready_keys_are_fifo() {
    let q = queue();
    for key in ["c", "a", "b", "a"] {
        q.add(key);
    }
    let mut out = Vec::new();
    for _ in 0..3 {
        out.push(q.get().await);
    }
    assert_eq!(out, [Some("c"), Some("a"), Some("b")]);
}

#[tokio::test(start_paused = true)]
async fn add_while_processing_waits_for_done() {
    let q = queue();
    q.add("a");
    assert_eq!(q.get().await, Some("a"));
    // Re-added (three times) while processing: not ready, not handed to another worker.
    assert!(q.add("a"));
    assert!(!q.add("a"));
    assert!(!q.add("a"));
    assert_eq!(q.len(), 0);
    let mut second = pin!(q.get());
    assert_eq!(poll!(second.as_mut()), Poll::Pending);
    q.done(&"a");
    assert_eq!(q.len(), 1);
    assert_eq!(second.await, Some("a"));
    q.done(&"a");
    // Exactly once: nothing further.
    assert_nothing_ready(&q).await;
}

#[tokio::test(start_paused = true)]
async fn done_without_readd_does_not_requeue() {
    let q = queue();
    q.add(1);
    assert_eq!(q.get().await, Some(1));
    q.done(&1);
    q.done(&1); // a second done is harmless
    assert!(q.is_empty());
    assert!(q.add(1), "after done the key can be queued afresh");
    assert_eq!(q.len(), 1);
}

/// Workers mark keys in a shared set while they hold them: a key found there is a double run.
async fn run_workers(q: WorkQueue<u32>, workers: usize, keys: u32, rounds: u32, hold: Duration) -> usize {
    let holding = Arc::new(Mutex::new(HashSet::new()));
    let processed = Arc::new(Mutex::new(0usize));
    let mut handles = Vec::new();
    for _ in 0..workers {
        let (q, holding, processed) = (q.clone(), holding.clone(), processed.clone());
        handles.push(tokio::spawn(async move {
            while let Some(key) = q.get().await {
                assert!(holding.lock().insert(key), "key {key} held by two workers");
                if hold.is_zero() {
                    tokio::task::yield_now().await;
                } else {
                    tokio::time::sleep(hold).await;
                }
                holding.lock().remove(&key);
                *processed.lock() += 1;
                q.done(&key);
            }
        }));
    }
    for _ in 0..rounds {
        for key in 0..keys {
            q.add(key);
        }
        if hold.is_zero() {
            tokio::task::yield_now().await;
        } else {
            tokio::time::sleep(MS).await;
        }
    }
    // Let the workers drain, then stop them.
    while !q.is_empty() || !q.inner.state.lock().processing.is_empty() {
        tokio::time::sleep(MS).await;
    }
    q.shut_down();
    for handle in handles {
        handle.await.expect("worker panicked");
    }
    *processed.lock()
}

#[tokio::test(start_paused = true)]
async fn two_workers_never_hold_the_same_key() {
    let q = queue();
    let processed = run_workers(q.clone(), 4, 3, 50, 2 * MS).await;
    // Every key is processed at least once, and dedup keeps it far below 150 runs.
    assert!((3..150).contains(&processed), "processed {processed}");
    assert!(q.stats().deduplicated > 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_workers_never_hold_the_same_key_on_threads() {
    let q = queue();
    let processed = run_workers(q, 8, 5, 500, Duration::ZERO).await;
    assert!(processed >= 5, "processed {processed}");
}

#[tokio::test(start_paused = true)]
async fn many_waiting_workers_each_get_one_key() {
    let q = queue();
    let tasks: Vec<_> = (0..5)
        .map(|_| {
            let q = q.clone();
            tokio::spawn(async move { q.get().await })
        })
        .collect();
    tokio::task::yield_now().await;
    for key in 0..5 {
        q.add(key);
    }
    let mut got = Vec::new();
    for task in tasks {
        got.push(task.await.expect("getter panicked"));
    }
    got.sort();
    assert_eq!(got, [Some(0), Some(1), Some(2), Some(3), Some(4)]);
}

#[tokio::test(start_paused = true)]
async fn cancelled_get_loses_nothing() {
    let q = queue();
    assert_nothing_ready(&q).await; // a get dropped by its timeout
    let waiter = tokio::spawn({
        let q = q.clone();
        async move { q.get().await }
    });
    tokio::task::yield_now().await;
    q.add("a");
    assert_eq!(waiter.await.expect("getter panicked"), Some("a"));
}

#[tokio::test(start_paused = true)]
async fn delayed_keys_come_out_in_deadline_order_not_before() {
    let q = queue();
    q.add_after("c", 300 * MS);
    q.add_after("a", 100 * MS);
    q.add_after("b", 200 * MS);
    q.add_after("b2", 200 * MS); // same deadline as "b": after it
    assert_eq!((q.len(), q.delayed_len()), (0, 4));
    let start = Instant::now();
    let mut get = pin!(q.get());
    assert_eq!(poll!(get.as_mut()), Poll::Pending);
    advance(99 * MS).await;
    assert_eq!(poll!(get.as_mut()), Poll::Pending);
    advance(MS).await;
    assert_eq!(poll!(get.as_mut()), Poll::Ready(Some("a")));
    let mut rest = Vec::new();
    for _ in 0..3 {
        let key = q.get().await;
        rest.push((key, start.elapsed()));
    }
    assert_eq!(rest, [(Some("b"), 200 * MS), (Some("b2"), 200 * MS), (Some("c"), 300 * MS)]);
    assert_eq!(q.delayed_len(), 0);
}

#[tokio::test(start_paused = true)]
async fn earliest_add_after_wins() {
    let q = queue();
    let start = Instant::now();
    q.add_after("a", Duration::from_secs(10));
    q.add_after("a", 100 * MS); // earlier: moves it up
    q.add_after("a", Duration::from_secs(5)); // later: ignored
    assert_eq!(q.delayed_len(), 1);
    assert_eq!(q.get().await, Some("a"));
    assert_eq!(start.elapsed(), 100 * MS);
    assert_eq!(q.delayed_len(), 0, "the later deadlines left nothing behind");
    assert_eq!(q.stats(), QueueStats { adds: 3, deduplicated: 2 });
}

#[tokio::test(start_paused = true)]
async fn earlier_add_after_wakes_a_sleeping_getter() {
    let q = queue();
    q.add_after("late", Duration::from_secs(10));
    let getter = tokio::spawn({
        let q = q.clone();
        async move { (q.get().await, Instant::now()) }
    });
    tokio::task::yield_now().await; // the getter now sleeps until +10 s
    let start = Instant::now();
    q.add_after("soon", 50 * MS);
    let (key, at) = getter.await.expect("getter panicked");
    assert_eq!((key, at - start), (Some("soon"), 50 * MS));
}

#[tokio::test(start_paused = true)]
async fn zero_delay_is_a_plain_add() {
    let q = queue();
    q.add_after(7, Duration::ZERO);
    assert_eq!((q.len(), q.delayed_len()), (1, 0));
}

#[tokio::test(start_paused = true)]
async fn due_key_already_queued_is_folded() {
    let q = queue();
    q.add("a");
    q.add_after("a", 10 * MS);
    advance(10 * MS).await;
    assert_eq!((q.len(), q.delayed_len()), (1, 0));
    assert_eq!(q.get().await, Some("a"));
    assert_nothing_ready(&q).await;
    assert_eq!(q.stats().deduplicated, 1);
}

#[tokio::test(start_paused = true)]
async fn rate_limited_adds_back_off_and_forget_resets() {
    let q = queue();
    let start = Instant::now();
    let mut ready_after = Vec::new();
    for _ in 0..4 {
        let parked_at = Instant::now();
        q.add_rate_limited("a");
        assert_eq!(q.get().await, Some("a"));
        ready_after.push(parked_at.elapsed());
        q.done(&"a");
    }
    assert_eq!(ready_after, [5 * MS, 10 * MS, 20 * MS, 40 * MS]);
    assert_eq!(start.elapsed(), 75 * MS);
    assert_eq!(q.num_requeues(&"a"), 4);
    q.forget(&"a");
    assert_eq!(q.num_requeues(&"a"), 0);
    let parked_at = Instant::now();
    q.add_rate_limited("a");
    assert_eq!(q.get().await, Some("a"));
    assert_eq!(parked_at.elapsed(), 5 * MS);
}

#[tokio::test(start_paused = true)]
async fn shut_down_wakes_all_getters() {
    let q: WorkQueue<u8> = queue();
    q.add_after(1, Duration::from_secs(60)); // one getter sleeps on a deadline too
    let getters: Vec<_> = (0..3)
        .map(|_| {
            let q = q.clone();
            tokio::spawn(async move { q.get().await })
        })
        .collect();
    tokio::task::yield_now().await;
    assert!(!q.is_shut_down());
    q.shut_down();
    for getter in getters {
        let got = timeout(MS, getter).await.expect("getter was not woken");
        assert_eq!(got.expect("getter panicked"), None);
    }
    assert!(q.is_shut_down());
    assert!(!q.add(2));
    q.add_rate_limited(3);
    assert_eq!(q.num_requeues(&3), 0, "no failure recorded after shutdown");
    assert_eq!(q.get().await, None);
}

struct Fixed(Duration);
impl<K> RateLimiter<K> for Fixed {
    fn when(&self, _: &K) -> Duration {
        self.0
    }
    fn forget(&self, _: &K) {}
    fn retries(&self, _: &K) -> u32 {
        42
    }
}

#[tokio::test(start_paused = true)]
async fn set_rate_limiter_keeps_keys() {
    let q = queue();
    q.add("ready");
    q.add_rate_limited("parked");
    q.set_rate_limiter(Arc::new(Fixed(Duration::from_secs(1))));
    assert_eq!((q.len(), q.delayed_len()), (1, 1));
    assert_eq!(q.num_requeues(&"parked"), 42, "the new limiter answers");
    let start = Instant::now();
    q.add_rate_limited("new");
    assert_eq!(q.get().await, Some("ready"));
    assert_eq!(q.get().await, Some("parked"));
    assert_eq!(q.get().await, Some("new"));
    assert_eq!(start.elapsed(), Duration::from_secs(1));
}

/// The registry's metrics as OpenMetrics text (also used by `priority`'s tests).
pub(crate) fn scrape(registry: &Registry) -> String {
    let mut text = String::new();
    prometheus_client::encoding::text::encode(&mut text, registry).expect("encoding into a String cannot fail");
    text
}

/// `text` has exactly this line.
pub(crate) fn assert_has(text: &str, line: &str) {
    assert!(text.lines().any(|l| l == line), "missing {line:?} in:\n{text}");
}

#[tokio::test(start_paused = true)]
async fn metrics_follow_the_queue() {
    let mut registry = Registry::default();
    let metrics = QueueMetrics::new(&mut registry);
    let q = WorkQueue::new("pods", RateLimitConfig::default().build(), Some(metrics.for_queue("pods")));
    q.add("a");
    q.add("b");
    q.add("a"); // deduplicated: not an add in the metrics
    advance(Duration::from_secs(1)).await;
    assert_eq!(q.get().await, Some("a"));
    advance(Duration::from_secs(2)).await;
    q.done(&"a");
    q.add_rate_limited("c");
    let text = scrape(&registry);
    assert_has(&text, r#"workqueue_depth{name="pods"} 1"#);
    assert_has(&text, r#"workqueue_adds_total{name="pods"} 2"#);
    assert_has(&text, r#"workqueue_retries_total{name="pods"} 1"#);
    assert_has(&text, r#"workqueue_queue_duration_seconds_count{name="pods"} 1"#);
    assert_has(&text, r#"workqueue_queue_duration_seconds_sum{name="pods"} 1.0"#);
    assert_has(&text, r#"workqueue_work_duration_seconds_count{name="pods"} 1"#);
    assert_has(&text, r#"workqueue_work_duration_seconds_sum{name="pods"} 2.0"#);
    assert_has(&text, r#"workqueue_unfinished_work_seconds{name="pods"} 0.0"#);

    // "b" waited 3 s; "c" becomes ready after its 5 ms backoff and counts as an add.
    assert_eq!(q.get().await, Some("b"));
    assert_eq!(q.get().await, Some("c"));
    advance(Duration::from_secs(4)).await;
    // Scraped with no queue activity in between: "b" and "c" are both ~4 s in flight.
    let text = scrape(&registry);
    assert_has(&text, r#"workqueue_adds_total{name="pods"} 3"#);
    assert_has(&text, r#"workqueue_depth{name="pods"} 0"#);
    assert_has(&text, r#"workqueue_queue_duration_seconds_sum{name="pods"} 4.0"#);
    assert_has(&text, r#"workqueue_unfinished_work_seconds{name="pods"} 8.005"#);
    assert_has(&text, r#"workqueue_longest_running_processor_seconds{name="pods"} 4.005"#);

    // A dropped queue stops reporting its abandoned work.
    drop(q);
    let text = scrape(&registry);
    assert_has(&text, r#"workqueue_unfinished_work_seconds{name="pods"} 0.0"#);
}
