//! Section 4: the work queue alone (in-process, no API server), with the controller's key type
//! (`ObjectKey`) and its metrics handle attached, as controllers use it.
//!
//! - throughput: a producer adds `keys` distinct keys while `W` workers `get` + `done` them;
//!   keys per second from the first add to the last `done`;
//! - uncontended cost: one task adds `keys` keys, then takes and finishes them all;
//! - dedup under bursts: `burst_keys` keys receive `burst_events` adds each while 4 workers
//!   "reconcile" (a blocking thread busy for `work_us`, as the controller runs reconcilers);
//!   reports how many adds folded into a pending key and how many reconciles ran;
//! - starvation: `Low` keys (initial list, resync) added while `Normal` keys (events) keep every
//!   worker busy; each `Low` key's wait against the bound `wasmloop::queue::priority` states,
//!   with the `S` (longest get-to-get time of a worker) measured in the same run; and the same
//!   flood without aging (controller-runtime's priority queue), where `Low` keys are not served.

use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use anyhow::Result;
use parking_lot::Mutex;
use prometheus_client::registry::Registry;
use serde::{Deserialize, Serialize};
use wasmloop::kinds::ObjectKey;
use wasmloop::queue::{Priority, PriorityConfig, QueueMetrics, RateLimitConfig, WorkQueue};

use crate::fixtures::rs_kind;
use crate::stats::Summary;

#[derive(clap::Args, Debug, Clone)]
pub struct Args {
    /// Distinct keys per throughput run.
    #[arg(long, default_value_t = 100_000)]
    pub keys: usize,
    /// Worker counts for the throughput runs.
    #[arg(long, value_delimiter = ',', default_value = "1,4")]
    pub workers: Vec<usize>,
    /// Repetitions of each throughput run.
    #[arg(long, default_value_t = 5)]
    pub reps: usize,
    /// Keys in the burst runs.
    #[arg(long, default_value_t = 1000)]
    pub burst_keys: usize,
    /// Adds per key in the burst runs.
    #[arg(long, default_value_t = 10)]
    pub burst_events: usize,
    /// Simulated reconcile time in the burst runs, microseconds.
    #[arg(long, default_value_t = 50)]
    pub work_us: u64,
    /// Aging of the starvation runs, ms (short so the run is short; the bound scales with it).
    #[arg(long, default_value_t = 200)]
    pub aging_ms: u64,
    /// `Low` keys in the starvation runs.
    #[arg(long, default_value_t = 20)]
    pub low_keys: usize,
    #[arg(long)]
    pub out: PathBuf,
}

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Throughput {
    pub workers: usize,
    pub metrics: bool,
    /// Keys per second (add + get + done each).
    pub keys_per_s: Summary,
}

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Burst {
    pub pattern: String,
    pub keys: usize,
    pub adds: u64,
    pub deduplicated: u64,
    pub dedup_ratio: f64,
    pub reconciles: usize,
    pub wall_ms: f64,
}

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Results {
    pub keys: usize,
    pub runtime_threads: usize,
    pub throughput: Vec<Throughput>,
    /// Single task: ns per `add`, and per `get` + `done`.
    pub add_ns: Summary,
    pub get_done_ns: Summary,
    pub bursts: Vec<Burst>,
    pub work_us: u64,
    /// With aging, then without (`aging` of an hour).
    #[serde(default)]
    pub starvation: Vec<Starvation>,
}

/// `Low` keys under a flood of `Normal` ones.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Starvation {
    pub aging_ms: f64,
    pub aged_every: u32,
    pub workers: usize,
    pub low_keys: usize,
    /// Reconcile time per key (a blocking thread busy for it).
    pub hold_us: u64,
    /// Longest time between two gets of one worker, measured (the bound's `S`).
    pub max_get_to_get_us: f64,
    /// How long the flood ran.
    pub flood_ms: f64,
    pub normal_served: usize,
    pub low_served: usize,
    /// Waits of the served `Low` keys, ms.
    pub low_wait_ms: Option<Summary>,
    /// Largest wait / its bound over the served `Low` keys (≤ 1: the bound held).
    pub max_wait_over_bound: Option<f64>,
    /// The bound for the last `Low` key, ms.
    pub last_bound_ms: f64,
}

fn keys(n: usize) -> Vec<ObjectKey> {
    (0..n).map(|i| ObjectKey::new(rs_kind(), Some(&format!("ns-{}", i % 50)), format!("web-{i}"))).collect()
}

fn queue(metrics: bool) -> WorkQueue<ObjectKey> {
    let handle = metrics.then(|| QueueMetrics::new(&mut Registry::default()).for_queue("bench"));
    WorkQueue::new("bench", RateLimitConfig::default().build(), handle)
}

async fn throughput_once(keys: &[ObjectKey], workers: usize, metrics: bool) -> Result<f64> {
    let q = queue(metrics);
    let n = keys.len();
    let done = Arc::new(AtomicUsize::new(0));
    let start = Instant::now();
    let handles: Vec<_> = (0..workers)
        .map(|_| {
            let (q, done) = (q.clone(), done.clone());
            tokio::spawn(async move {
                while let Some(k) = q.get().await {
                    q.done(&k);
                    if done.fetch_add(1, Ordering::Relaxed) + 1 == n {
                        q.shut_down();
                    }
                }
            })
        })
        .collect();
    for (i, k) in keys.iter().enumerate() {
        q.add(k.clone());
        if i % 256 == 255 {
            tokio::task::yield_now().await;
        }
    }
    for h in handles {
        h.await?;
    }
    let elapsed = start.elapsed();
    anyhow::ensure!(done.load(Ordering::Relaxed) == n, "processed {} of {n} keys", done.load(Ordering::Relaxed));
    Ok(n as f64 / elapsed.as_secs_f64())
}

async fn uncontended(keys: &[ObjectKey]) -> Result<(f64, f64)> {
    let q = queue(true);
    let t = Instant::now();
    for k in keys {
        q.add(k.clone());
    }
    let add = t.elapsed();
    let t = Instant::now();
    for _ in 0..keys.len() {
        let k = q.get().await.ok_or_else(|| anyhow::anyhow!("queue ended early"))?;
        q.done(&k);
    }
    let get_done = t.elapsed();
    anyhow::ensure!(q.is_empty(), "keys left in the queue");
    let n = keys.len() as f64;
    Ok((add.as_nanos() as f64 / n, get_done.as_nanos() as f64 / n))
}

fn spin(d: Duration) {
    let t = Instant::now();
    while t.elapsed() < d {
        std::hint::spin_loop();
    }
}

/// `order` yields key indexes; `pace` is the time between adds (None: as fast as possible).
async fn burst(pattern: &str, keys: &[ObjectKey], order: Vec<usize>, pace: Option<Duration>, work: Duration) -> Result<Burst> {
    let q = queue(true);
    let reconciles = Arc::new(AtomicUsize::new(0));
    let busy = Arc::new(AtomicUsize::new(0));
    let start = Instant::now();
    let handles: Vec<_> = (0..4)
        .map(|_| {
            let (q, reconciles, busy) = (q.clone(), reconciles.clone(), busy.clone());
            tokio::spawn(async move {
                while let Some(k) = q.get().await {
                    busy.fetch_add(1, Ordering::SeqCst);
                    reconciles.fetch_add(1, Ordering::Relaxed);
                    let _ = tokio::task::spawn_blocking(move || spin(work)).await;
                    q.done(&k);
                    busy.fetch_sub(1, Ordering::SeqCst);
                }
            })
        })
        .collect();
    let mut next = Instant::now();
    for (i, &k) in order.iter().enumerate() {
        q.add(keys[k].clone());
        match pace {
            Some(p) => {
                next += p;
                tokio::time::sleep_until(next.into()).await;
            }
            None if i % 64 == 63 => tokio::task::yield_now().await,
            None => {}
        }
    }
    // Drain: nothing ready and nobody busy, twice in a row.
    let mut idle = 0;
    while idle < 2 {
        tokio::time::sleep(Duration::from_millis(5)).await;
        idle = if q.is_empty() && busy.load(Ordering::SeqCst) == 0 { idle + 1 } else { 0 };
    }
    let wall = start.elapsed();
    q.shut_down();
    for h in handles {
        h.await?;
    }
    let stats = q.stats();
    let reconciles = reconciles.load(Ordering::Relaxed);
    anyhow::ensure!(stats.adds as usize == order.len(), "counted {} adds, made {}", stats.adds, order.len());
    Ok(Burst {
        pattern: pattern.to_string(),
        keys: keys.len(),
        adds: stats.adds,
        deduplicated: stats.deduplicated,
        dedup_ratio: stats.dedup_ratio(),
        reconciles,
        wall_ms: wall.as_secs_f64() * 1e3,
    })
}

/// `low_keys` `Low` keys become ready at once while 4 workers are kept saturated with `Normal`
/// keys (at least `NORMAL_READY` ready at any time). Runs until every `Low` key is served (or for `flood`
/// when given, or at most a minute).
async fn starvation(config: PriorityConfig, low_keys: usize, work: Duration, flood: Option<Duration>) -> Result<Starvation> {
    const WORKERS: usize = 4;
    /// Enough that the workers never drain them between two top-ups, even when the producer
    /// is descheduled for tens of milliseconds.
    const NORMAL_READY: usize = 4096;
    let q = queue(true).with_priorities(config);
    let low_served: Arc<Mutex<Vec<(usize, Instant)>>> = Default::default();
    let normal_served = Arc::new(AtomicUsize::new(0));
    let max_gap = Arc::new(Mutex::new(Duration::ZERO));
    let key = |name: String| ObjectKey::new(rs_kind(), Some("flood"), name);
    let mut next_normal = 0usize;
    let mut top_up = |q: &WorkQueue<ObjectKey>| {
        while q.len_of(Priority::Normal) < NORMAL_READY {
            q.add(key(format!("n-{next_normal}")));
            next_normal += 1;
        }
    };
    top_up(&q);
    let handles: Vec<_> = (0..WORKERS)
        .map(|_| {
            let (q, low_served, normal_served, max_gap) = (q.clone(), low_served.clone(), normal_served.clone(), max_gap.clone());
            tokio::spawn(async move {
                let mut last_get: Option<Instant> = None;
                while let Some(k) = q.get().await {
                    let now = Instant::now();
                    if let Some(prev) = last_get {
                        let mut m = max_gap.lock();
                        *m = (*m).max(now - prev);
                    }
                    last_get = Some(now);
                    match k.name.strip_prefix("low-") {
                        Some(i) => low_served.lock().push((i.parse().unwrap_or(usize::MAX), now)),
                        None => {
                            normal_served.fetch_add(1, Ordering::Relaxed);
                        }
                    }
                    let _ = tokio::task::spawn_blocking(move || spin(work)).await;
                    q.done(&k);
                }
            })
        })
        .collect();
    // Let the workers reach a steady state, then the Low keys arrive, oldest first.
    tokio::time::sleep(Duration::from_millis(50)).await;
    let t0 = Instant::now();
    // Each key's wait counts from its own add (the moment it became ready).
    let added: Vec<Instant> = (0..low_keys)
        .map(|i| {
            q.add_with_priority(key(format!("low-{i}")), Priority::Low);
            Instant::now()
        })
        .collect();
    let limit = flood.unwrap_or(Duration::from_secs(60));
    while t0.elapsed() < limit && (flood.is_some() || low_served.lock().len() < low_keys) {
        top_up(&q);
        tokio::time::sleep(Duration::from_micros(200)).await;
    }
    let flood_time = t0.elapsed();
    q.shut_down();
    for h in handles {
        h.await?;
    }
    let hold = *max_gap.lock();
    let served = std::mem::take(&mut *low_served.lock());
    let bound = |ahead: usize| config.low_wait_bound(ahead as u32, WORKERS as u32, hold);
    let wait = |i: usize, at: Instant| at.saturating_duration_since(added.get(i).copied().unwrap_or(t0));
    let waits: Vec<f64> = served.iter().map(|&(i, at)| wait(i, at).as_secs_f64() * 1e3).collect();
    let over: Vec<f64> = served.iter().map(|&(i, at)| wait(i, at).as_secs_f64() / bound(i).as_secs_f64()).collect();
    Ok(Starvation {
        aging_ms: config.aging.as_secs_f64() * 1e3,
        aged_every: config.aged_every,
        workers: WORKERS,
        low_keys,
        hold_us: work.as_micros() as u64,
        max_get_to_get_us: hold.as_secs_f64() * 1e6,
        flood_ms: flood_time.as_secs_f64() * 1e3,
        normal_served: normal_served.load(Ordering::Relaxed),
        low_served: served.len(),
        low_wait_ms: (!waits.is_empty()).then(|| Summary::of(&waits)).transpose()?,
        max_wait_over_bound: over.iter().copied().reduce(f64::max),
        last_bound_ms: bound(low_keys.saturating_sub(1)).as_secs_f64() * 1e3,
    })
}

pub async fn run(args: Args) -> Result<Results> {
    let all = keys(args.keys);
    let mut throughput = Vec::new();
    for &workers in &args.workers {
        for metrics in [true, false] {
            let mut samples = Vec::new();
            throughput_once(&all[..all.len().min(10_000)], workers, metrics).await?; // warm-up
            for _ in 0..args.reps {
                samples.push(throughput_once(&all, workers, metrics).await?);
            }
            let s = Summary::of(&samples)?;
            eprintln!("queue: {workers} worker(s), metrics {metrics}: {:.0} keys/s (median of {})", s.median, s.n);
            throughput.push(Throughput { workers, metrics, keys_per_s: s });
        }
    }
    let (mut add, mut get_done) = (Vec::new(), Vec::new());
    for _ in 0..args.reps {
        let (a, g) = uncontended(&all).await?;
        add.push(a);
        get_done.push(g);
    }

    let (k, e) = (args.burst_keys, args.burst_events);
    let bkeys = keys(k);
    let work = Duration::from_micros(args.work_us);
    let per_key: Vec<usize> = (0..k).flat_map(|i| std::iter::repeat_n(i, e)).collect();
    let interleaved: Vec<usize> = (0..e).flat_map(|_| 0..k).collect();
    let events = k * e;
    let bursts = vec![
        burst("per-key bursts, unpaced", &bkeys, per_key, None, work).await?,
        burst("interleaved, unpaced", &bkeys, interleaved.clone(), None, work).await?,
        burst("interleaved, 10000 adds/s", &bkeys, interleaved, Some(Duration::from_secs(1) / 10_000), work).await?,
    ];
    for b in &bursts {
        eprintln!("queue: {}: {} adds → {} reconciles, dedup ratio {:.3}", b.pattern, b.adds, b.reconciles, b.dedup_ratio);
    }
    anyhow::ensure!(bursts.iter().all(|b| b.adds as usize == events), "burst runs lost adds");
    let aged = PriorityConfig { aging: Duration::from_millis(args.aging_ms), aged_every: 4 };
    let with = starvation(aged, args.low_keys, work, None).await?;
    let flood = Duration::from_secs_f64(with.flood_ms / 1e3);
    let without = starvation(PriorityConfig { aging: Duration::from_secs(3600), ..aged }, args.low_keys, work, Some(flood)).await?;
    for s in [&with, &without] {
        eprintln!(
            "queue: starvation, aging {:.0} ms: {} of {} low keys served during {:.0} ms of flood, max wait/bound {:?}",
            s.aging_ms, s.low_served, s.low_keys, s.flood_ms, s.max_wait_over_bound
        );
    }
    anyhow::ensure!(with.low_served == with.low_keys, "with aging only {} of {} low keys were served", with.low_served, with.low_keys);
    Ok(Results {
        keys: args.keys,
        runtime_threads: tokio::runtime::Handle::current().metrics().num_workers(),
        throughput,
        add_ns: Summary::of(&add)?,
        get_done_ns: Summary::of(&get_done)?,
        bursts,
        work_us: args.work_us,
        starvation: vec![with, without],
    })
}
