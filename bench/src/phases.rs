//! Where the time of one reconcile goes: a [`CacheRead`] wrapper that timestamps every cache
//! read the reconciler makes, on the real call path.
//!
//! For a Wasm reconcile the timestamps split the call into:
//! - `enter`: call start → first cache read (Store + instance from the `InstancePre`, lowering
//!   the request, guest prologue);
//! - `reads`: time inside the host's cache lookups (the `CacheRead` calls themselves; copying the
//!   JSON into the guest happens after they return and is not in here);
//! - `between`: guest work between the first and the last read (e.g. parsing the ReplicaSet);
//! - `after`: last read → call returned (copying the read JSON into guest memory, parsing it,
//!   the algorithm, building the actions, lifting and checking the outcome, dropping the Store).
//!
//! The same wrapper around the native reconciler gives its `reads` and the rest.

use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::Mutex;
use serde::{Deserialize, Serialize};
use wasmloop::cache::{CacheRead, CachedObject, Result, SharedCache};
use wasmloop::controller::{Outcome, ReconcileError, Reconciler, Request};
use wasmloop::kinds::KindRef;

use crate::stats::Summary;

#[derive(Default)]
struct Marks {
    first_start: Option<Instant>,
    last_end: Option<Instant>,
    inside: Duration,
    reads: u32,
}

/// A cache that times the reads going through it.
pub struct TimedCache {
    inner: SharedCache,
    marks: Mutex<Marks>,
}

impl TimedCache {
    pub fn new(inner: SharedCache) -> Self {
        Self { inner, marks: Mutex::new(Marks::default()) }
    }

    fn timed<T>(&self, f: impl FnOnce() -> T) -> T {
        let start = Instant::now();
        let out = f();
        let end = Instant::now();
        let mut m = self.marks.lock();
        m.first_start.get_or_insert(start);
        m.last_end = Some(end);
        m.inside += end - start;
        m.reads += 1;
        out
    }
}

impl CacheRead for TimedCache {
    fn get(&self, kind: &KindRef, namespace: Option<&str>, name: &str) -> Result<Option<Arc<CachedObject>>> {
        self.timed(|| self.inner.get(kind, namespace, name))
    }
    fn list(&self, kind: &KindRef, namespace: Option<&str>, selector: Option<&str>) -> Result<Vec<Arc<CachedObject>>> {
        self.timed(|| self.inner.list(kind, namespace, selector))
    }
    fn by_index(&self, kind: &KindRef, index: &str, value: &str) -> Result<Vec<Arc<CachedObject>>> {
        self.timed(|| self.inner.by_index(kind, index, value))
    }
}

/// One timed reconcile.
#[derive(Clone, Copy, Debug)]
pub struct Phases {
    pub total: Duration,
    pub enter: Duration,
    pub reads: Duration,
    pub between: Duration,
    pub after: Duration,
    pub read_calls: u32,
    pub actions: usize,
}

/// Run `reconciler` once through a [`TimedCache`].
pub fn time_once(reconciler: &dyn Reconciler, request: &Request, cache: &SharedCache) -> std::result::Result<Phases, ReconcileError> {
    let timed = Arc::new(TimedCache::new(cache.clone()));
    let shared: SharedCache = timed.clone();
    let start = Instant::now();
    let outcome: Outcome = reconciler.reconcile(request, &shared)?;
    let end = Instant::now();
    drop(shared);
    let m = std::mem::take(&mut *timed.marks.lock());
    let first = m.first_start.unwrap_or(end);
    let last = m.last_end.unwrap_or(end);
    Ok(Phases {
        total: end - start,
        enter: first - start,
        reads: m.inside,
        between: (last - first).saturating_sub(m.inside),
        after: end - last,
        read_calls: m.reads,
        actions: outcome.actions.len(),
    })
}

/// Medians (µs) of many timed reconciles of one scenario.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct PhaseReport {
    pub reconciler: String,
    pub scenario: String,
    pub pods: usize,
    pub iterations: usize,
    pub read_calls: u32,
    pub actions: usize,
    pub total_us: Summary,
    pub enter_us: Summary,
    pub reads_us: Summary,
    pub between_us: Summary,
    pub after_us: Summary,
}

/// Time `iterations` reconciles (after `iterations / 10` warm-up calls) and summarise them.
pub fn measure(
    label: &str,
    scenario: &str,
    pods: usize,
    reconciler: &dyn Reconciler,
    request: &Request,
    cache: &SharedCache,
    iterations: usize,
) -> anyhow::Result<PhaseReport> {
    for _ in 0..iterations / 10 {
        time_once(reconciler, request, cache).map_err(|e| anyhow::anyhow!("{label} {scenario}: {e}"))?;
    }
    let mut runs = Vec::with_capacity(iterations);
    for _ in 0..iterations {
        runs.push(time_once(reconciler, request, cache).map_err(|e| anyhow::anyhow!("{label} {scenario}: {e}"))?);
    }
    let us = |f: fn(&Phases) -> Duration| -> anyhow::Result<Summary> {
        Summary::of(&runs.iter().map(|p| f(p).as_secs_f64() * 1e6).collect::<Vec<_>>())
    };
    Ok(PhaseReport {
        reconciler: label.to_string(),
        scenario: scenario.to_string(),
        pods,
        iterations,
        read_calls: runs[0].read_calls,
        actions: runs[0].actions,
        total_us: us(|p| p.total)?,
        enter_us: us(|p| p.enter)?,
        reads_us: us(|p| p.reads)?,
        between_us: us(|p| p.between)?,
        after_us: us(|p| p.after)?,
    })
}
