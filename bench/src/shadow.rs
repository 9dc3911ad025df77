//! What a shadow version costs the serving one: `wasmloop-bench shadow`.
//!
//! The replicaset plugin serves reconciles of one 10-Pod ReplicaSet (converged: reads only; and
//! create: 10 creates + a status) on the guest pool's serving lane, as the controller's worker
//! does, one at a time. With a shadow, each reconcile also does what the worker does for a
//! candidate (the same plugin, loaded twice): take the candidate's slot if free before the
//! serving call (one slot: a busy candidate skips the reconcile), keep the serving call's cache
//! answers ([`Kept`]), then start the candidate ([`Shadow::start`], the worker's path), which
//! waits on the lowest-priority lane until no serving call is in flight, replays those answers
//! and pauses whenever a serving call starts; reduce the
//! serving result for the comparison ([`Side::of`]) and hand it to a task that waits for the
//! candidate and compares. The serving latency is timed from the start of the serving call to
//! the serving side being ready for the comparison (the candidate handed over).
//!
//! Two arrival patterns: **back to back** (the next reconcile starts as soon as the previous
//! one is handed over: a saturated worker, where the candidate finds few idle moments and the
//! shadow samples fewer reconciles) and **paced** (at most one reconcile per
//! [`PACE`]: a worker with idle moments between reconciles, where the candidate runs in them).
//! Runs without and with the shadow alternate; a shadowed run ends once its last candidate
//! has; the figure is the ratio of the medians (over runs) of each run's p99.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use serde::{Deserialize, Serialize};
use wasmloop::cache::{Kept, SharedCache};
use wasmloop::controller::Reconciler;
use wasmloop::controller::Shadow;
use wasmloop::controller::shadow::{self, Compared, Side};
use wasmloop::grants::Grants;
use wasmloop::plugin::PluginEngine;
use wasmloop::plugin::guest_threads;

use crate::fixtures::{self, Scenario, Shape};
use crate::stats::{Summary, percentile_sorted};

#[derive(clap::Args, Debug, Clone)]
pub struct Args {
    /// Reconciles per run.
    #[arg(long, default_value_t = 2000)]
    pub iterations: usize,
    /// Runs of each mode (alternating).
    #[arg(long, default_value_t = 5)]
    pub runs: usize,
    /// Also write the results as JSON here.
    #[arg(long)]
    pub out: Option<std::path::PathBuf>,
}

/// One scenario's figures.
#[derive(Debug, Serialize, Deserialize)]
pub struct ScenarioResult {
    pub scenario: String,
    /// `back to back` or `paced`.
    #[serde(default)]
    pub arrival: String,
    /// p99 of the serving reconcile, µs, per run without the shadow.
    pub p99_plain_us: Summary,
    /// The same with the shadow.
    pub p99_shadowed_us: Summary,
    /// Median p50, µs, without and with.
    pub p50_plain_us: Summary,
    pub p50_shadowed_us: Summary,
    /// median p99 with / median p99 without.
    pub p99_ratio: f64,
    /// Shadowed reconciles compared, and skipped (candidate busy, or no idle moment in time),
    /// over all shadowed runs.
    pub compared: u64,
    pub different: u64,
    pub skipped: u64,
}

pub fn main(args: Args) -> Result<()> {
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build()?;
    let results = rt.block_on(run(&args))?;
    if let Some(out) = &args.out {
        std::fs::write(out, serde_json::to_vec_pretty(&results)?).with_context(|| format!("writing {}", out.display()))?;
    }
    Ok(())
}

async fn run(args: &Args) -> Result<Vec<ScenarioResult>> {
    // Loading blocks (compiles, calls metadata()): off the runtime.
    let (serving, candidate) = tokio::task::spawn_blocking(|| -> Result<_> {
        let engine = PluginEngine::new()?;
        Ok((fixtures::load_replicaset_plugin(&engine)?, fixtures::load_replicaset_plugin(&engine)?))
    })
    .await??;
    let serving: Arc<dyn Reconciler> = serving;
    // The product's shadow: one slot, its thread at the lowest priority.
    let candidate = Shadow::new(candidate, Arc::new(Grants::all()), 1);
    let mut out = Vec::new();
    for shape in [Shape::Converged, Shape::Create] {
        let scenario = Arc::new(fixtures::scenario(shape, 10)?);
        for arrival in [Arrival::BackToBack, Arrival::Paced] {
            let (mut plain, mut shadowed, mut plain50, mut shadowed50) = (Vec::new(), Vec::new(), Vec::new(), Vec::new());
            let counts = Arc::new(Counts::default());
            // Warm-up: both versions, a few hundred calls.
            measure(&serving, Some(&candidate), &scenario, arrival, 300, &Arc::new(Counts::default())).await?;
            for _ in 0..args.runs {
                let (p50, p99) = measure(&serving, None, &scenario, arrival, args.iterations, &counts).await?;
                plain.push(p99);
                plain50.push(p50);
                let (p50, p99) = measure(&serving, Some(&candidate), &scenario, arrival, args.iterations, &counts).await?;
                shadowed.push(p99);
                shadowed50.push(p50);
            }
            let (p99_plain_us, p99_shadowed_us) = (Summary::of(&plain)?, Summary::of(&shadowed)?);
            let r = ScenarioResult {
                scenario: format!("{} ({} Pods)", scenario.name, scenario.pods),
                arrival: arrival.as_str().to_owned(),
                p99_ratio: p99_shadowed_us.median / p99_plain_us.median,
                p99_plain_us,
                p99_shadowed_us,
                p50_plain_us: Summary::of(&plain50)?,
                p50_shadowed_us: Summary::of(&shadowed50)?,
                compared: counts.compared.load(Ordering::Relaxed),
                different: counts.different.load(Ordering::Relaxed),
                skipped: counts.skipped.load(Ordering::Relaxed),
            };
            println!(
                "shadow {:<22} {:<12} serving p99 {:>7.1} µs plain, {:>7.1} µs shadowed: {:.2}× (p50 {:.1} → {:.1} µs; {} compared, {} different, {} skipped; {} runs × {})",
                r.scenario,
                r.arrival,
                r.p99_plain_us.median,
                r.p99_shadowed_us.median,
                r.p99_ratio,
                r.p50_plain_us.median,
                r.p50_shadowed_us.median,
                r.compared,
                r.different,
                r.skipped,
                args.runs,
                args.iterations
            );
            out.push(r);
        }
    }
    Ok(out)
}

/// The least time between the starts of two paced reconciles.
pub const PACE: Duration = Duration::from_millis(2);

/// How reconciles arrive.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Arrival {
    /// Each as soon as the previous one is handed over.
    BackToBack,
    /// At most one per [`PACE`].
    Paced,
}

impl Arrival {
    fn as_str(self) -> &'static str {
        match self {
            Arrival::BackToBack => "back to back",
            Arrival::Paced => "paced",
        }
    }
}

#[derive(Default)]
struct Counts {
    compared: AtomicU64,
    /// Compared and found different (the same plugin: expected 0).
    different: AtomicU64,
    skipped: AtomicU64,
}

/// `n` serving reconciles of `scenario`, shadowed by `candidate` if given: (p50, p99) in µs.
async fn measure(
    serving: &Arc<dyn Reconciler>,
    candidate: Option<&Shadow>,
    scenario: &Arc<Scenario>,
    arrival: Arrival,
    n: usize,
    counts: &Arc<Counts>,
) -> Result<(f64, f64)> {
    let mut samples = Vec::with_capacity(n);
    let mut comparisons = Vec::new();
    for _ in 0..n {
        let started = Instant::now();
        // As the worker: a candidate slot is taken before the serving call, whose cache answers
        // cache answers; the candidate replays them once no serving call is in flight.
        let slot = candidate.and_then(Shadow::reserve);
        let kept = slot.as_ref().map(|_| Arc::new(Kept::new(scenario.cache.clone())));
        let (r, s) = (serving.clone(), scenario.clone());
        let cache: SharedCache = kept.clone().map_or_else(|| scenario.cache.clone(), |k| k as SharedCache);
        let result = guest_threads::run(move || r.reconcile(&s.request, &cache)).await?;
        match (candidate, slot.zip(kept)) {
            (Some(c), Some((slot, kept))) => {
                let answer = c.start(slot, &scenario.request, &kept, &scenario.cache);
                let side = Side::of(serving.as_ref(), &result);
                samples.push(started.elapsed().as_secs_f64() * 1e6);
                let (key, counts, theirs_by) = (scenario.request.key.clone(), counts.clone(), c.reconciler().clone());
                comparisons.push(tokio::spawn(async move {
                    let Ok(theirs) = answer.await else {
                        counts.skipped.fetch_add(1, Ordering::Relaxed);
                        return;
                    };
                    let (compared, _) = shadow::compare("replicaset", &key, side, Side::of(theirs_by.as_ref(), &theirs));
                    counts.compared.fetch_add(1, Ordering::Relaxed);
                    if compared != Compared::Same {
                        counts.different.fetch_add(1, Ordering::Relaxed);
                    }
                }));
            }
            (Some(_), None) => {
                counts.skipped.fetch_add(1, Ordering::Relaxed);
                samples.push(started.elapsed().as_secs_f64() * 1e6);
            }
            (None, _) => samples.push(started.elapsed().as_secs_f64() * 1e6),
        }
        result.map_err(|e| anyhow::anyhow!("reconcile: {e}"))?;
        if arrival == Arrival::Paced {
            tokio::time::sleep_until((started + PACE).into()).await;
        }
    }
    // The run ends with its last candidate: none runs into the next run.
    for c in comparisons {
        c.await?;
    }
    samples.sort_by(f64::total_cmp);
    Ok((percentile_sorted(&samples, 50.0), percentile_sorted(&samples, 99.0)))
}
