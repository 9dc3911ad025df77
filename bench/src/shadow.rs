//! What a shadow version costs the serving one: `wasmloop-bench shadow`.
//!
//! The replicaset plugin serves reconciles of one 10-Pod ReplicaSet (converged: reads only; and
//! create: 10 creates + a status) on a blocking thread, as the controller's worker does, one at
//! a time. With a shadow, each reconcile also does what the worker does for a candidate (the
//! same plugin, loaded twice): once the serving call has returned, take the candidate's slot if
//! free (one slot: a busy candidate skips the reconcile), start the candidate on the guest
//! pool's lowest-priority lane ([`Shadow::start`], the worker's path), reduce the serving result
//! for the comparison ([`Side::of`]) and hand it to a task that waits for the candidate and
//! compares. The serving latency is timed from the start of the serving call to the serving
//! side being ready for the comparison (the candidate started). Runs without and with the shadow
//! alternate; the figure is the ratio of the medians (over runs) of each run's p99.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

use anyhow::{Context, Result};
use serde::{Deserialize, Serialize};
use wasmloop::controller::Reconciler;
use wasmloop::controller::Shadow;
use wasmloop::controller::shadow::{self, Compared, Side};
use wasmloop::grants::Grants;
use wasmloop::plugin::PluginEngine;

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
    /// p99 of the serving reconcile, µs, per run without the shadow.
    pub p99_plain_us: Summary,
    /// The same with the shadow.
    pub p99_shadowed_us: Summary,
    /// Median p50, µs, without and with.
    pub p50_plain_us: Summary,
    pub p50_shadowed_us: Summary,
    /// median p99 with / median p99 without.
    pub p99_ratio: f64,
    /// Shadowed reconciles compared, and skipped (candidate busy), over all shadowed runs.
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
        let (mut plain, mut shadowed, mut plain50, mut shadowed50) = (Vec::new(), Vec::new(), Vec::new(), Vec::new());
        let counts = Arc::new(Counts::default());
        // Warm-up: both versions, a few hundred calls.
        measure(&serving, None, &scenario, 300, &counts).await?;
        for _ in 0..args.runs {
            let (p50, p99) = measure(&serving, None, &scenario, args.iterations, &counts).await?;
            plain.push(p99);
            plain50.push(p50);
            let (p50, p99) = measure(&serving, Some(&candidate), &scenario, args.iterations, &counts).await?;
            shadowed.push(p99);
            shadowed50.push(p50);
        }
        let (p99_plain_us, p99_shadowed_us) = (Summary::of(&plain)?, Summary::of(&shadowed)?);
        let r = ScenarioResult {
            scenario: format!("{} ({} Pods)", scenario.name, scenario.pods),
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
            "shadow {:<22} serving p99 {:>7.1} µs plain, {:>7.1} µs shadowed: {:.2}× (p50 {:.1} → {:.1} µs; {} compared, {} different, {} skipped; {} runs × {})",
            r.scenario,
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
    Ok(out)
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
    n: usize,
    counts: &Arc<Counts>,
) -> Result<(f64, f64)> {
    let mut samples = Vec::with_capacity(n);
    for _ in 0..n {
        let started = Instant::now();
        let (r, s) = (serving.clone(), scenario.clone());
        let result = tokio::task::spawn_blocking(move || r.reconcile(&s.request, &s.cache)).await?;
        // As the worker: the candidate starts once the serving call has returned (never beside
        // it), on the guest pool's lowest-priority lane, if its slot is free.
        let shadow = candidate.map(|c| c.start(&scenario.request, &scenario.cache).map(|answer| (c.reconciler().clone(), answer)));
        match shadow {
            Some(Some((c, answer))) => {
                let side = Side::of(serving.as_ref(), &result);
                samples.push(started.elapsed().as_secs_f64() * 1e6);
                let (key, counts) = (scenario.request.key.clone(), counts.clone());
                tokio::spawn(async move {
                    if let Ok(theirs) = answer.await {
                        let (compared, _) = shadow::compare("replicaset", &key, side, Side::of(c.as_ref(), &theirs));
                        counts.compared.fetch_add(1, Ordering::Relaxed);
                        if compared != Compared::Same {
                            counts.different.fetch_add(1, Ordering::Relaxed);
                        }
                    }
                });
            }
            Some(None) => {
                counts.skipped.fetch_add(1, Ordering::Relaxed);
                samples.push(started.elapsed().as_secs_f64() * 1e6);
            }
            None => samples.push(started.elapsed().as_secs_f64() * 1e6),
        }
        result.map_err(|e| anyhow::anyhow!("reconcile: {e}"))?;
    }
    samples.sort_by(f64::total_cmp);
    Ok((percentile_sorted(&samples, 50.0), percentile_sorted(&samples, 99.0)))
}
