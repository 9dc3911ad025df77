//! Section 2 of BENCHMARKS.md: the same ReplicaSet code, the `replicaset` plugin crate, run
//! natively by the host (`wasmloop::native::SdkReconciler`, the crate linked as an rlib) and as
//! the plugin's Wasm component, on the same host cache, with criterion; then a hand-timed phase
//! breakdown of the calls (`wasmloop_bench::phases`), written as JSON to
//! `$WASMLOOP_BENCH_PHASES_OUT` when set.
//!
//! Run through `scripts/bench.sh`, or: `cargo bench -p wasmloop-bench --bench reconcile`.

use std::hint::black_box;

use anyhow::{Context, Result, ensure};
use criterion::{BenchmarkId, Criterion};
use wasmloop::controller::Reconciler;
use wasmloop::native::SdkReconciler;
use wasmloop::plugin::{EngineLimits, PluginEngine};
use wasmloop_bench::fixtures::{self, Scenario, Shape};
use wasmloop_bench::phases;

fn main() -> Result<()> {
    let engine = PluginEngine::new().context("creating the plugin engine")?;
    let wasm = fixtures::load_replicaset_plugin(&engine)?;
    // The component's limits (of which only maxActions applies natively) and name.
    let native = SdkReconciler::<replicaset::ReplicaSetReconciler>::new()
        .context("running the replicaset crate natively")?
        .named(wasm.name())
        .with_limits(wasm.limits().clone());
    let reconcilers: [(&str, &dyn Reconciler); 2] = [("native", &native), ("wasm", wasm.as_ref())];

    let shapes = [(Shape::Converged, 10), (Shape::Converged, 100), (Shape::Create, 10), (Shape::ScaleDown, 10), (Shape::Missing, 10)];
    let scenarios: Vec<Scenario> = shapes.iter().map(|&(shape, pods)| fixtures::scenario(shape, pods)).collect::<Result<_>>()?;

    // Both must do the same work: the same outcome (actions and requeue) in every scenario.
    for s in &scenarios {
        let native_outcome = native.reconcile(&s.request, &s.cache).map_err(|e| anyhow::anyhow!("native {}: {e}", s.name))?;
        let wasm_outcome = wasm.reconcile(&s.request, &s.cache).map_err(|e| anyhow::anyhow!("wasm {}: {e}", s.name))?;
        ensure!(
            native_outcome == wasm_outcome,
            "{} ({} pods): native and wasm outcomes differ:\nnative: {native_outcome:?}\nwasm:   {wasm_outcome:?}",
            s.name,
            s.pods
        );
        let actions = native_outcome.actions.len();
        let expected = match s.name {
            "converged" | "missing-key" => 0,
            _ => s.pods + 1,
        };
        ensure!(actions == expected, "{} ({} pods): expected {expected} actions, got {actions}", s.name, s.pods);
    }

    let mut c = Criterion::default().configure_from_args();
    {
        let mut group = c.benchmark_group("reconcile");
        for s in &scenarios {
            for (label, r) in reconcilers {
                group.bench_with_input(BenchmarkId::new(format!("{label}-{}", s.name), s.pods), s, |b, s| {
                    b.iter(|| r.reconcile(black_box(&s.request), &s.cache).expect("reconcile failed"));
                });
            }
        }
        group.finish();
    }
    // The same Wasm calls on an engine that resets memory slots with `PAGEMAP_SCAN` (opt-in,
    // `EngineLimits::pagemap_scan`: see there why it is not the default): no page faults on the
    // next call. What separates the two is what the default's page faults cost.
    let pagemap_engine = PluginEngine::with_limits(EngineLimits { pagemap_scan: true, ..EngineLimits::default() })?;
    if pagemap_engine.resets_with_pagemap() {
        let wasm_pagemap = fixtures::load_replicaset_plugin(&pagemap_engine)?;
        let mut group = c.benchmark_group("reconcile");
        for s in &scenarios {
            let expected = wasm.reconcile(&s.request, &s.cache).map_err(|e| anyhow::anyhow!("wasm {}: {e}", s.name))?;
            let got = wasm_pagemap.reconcile(&s.request, &s.cache).map_err(|e| anyhow::anyhow!("wasm-pagemap {}: {e}", s.name))?;
            ensure!(expected == got, "{}: the outcome differs with PAGEMAP_SCAN resets", s.name);
            group.bench_with_input(BenchmarkId::new(format!("wasm-pagemap-{}", s.name), s.pods), s, |b, s| {
                b.iter(|| wasm_pagemap.reconcile(black_box(&s.request), &s.cache).expect("reconcile failed"));
            });
        }
        group.finish();
    } else {
        eprintln!("PAGEMAP_SCAN is not available on this kernel (6.7+): no wasm-pagemap benchmarks");
    }
    c.final_summary();

    if let Some(out) = std::env::var_os("WASMLOOP_BENCH_PHASES_OUT") {
        let iterations: usize = std::env::var("WASMLOOP_BENCH_PHASE_ITERATIONS").ok().and_then(|v| v.parse().ok()).unwrap_or(2000);
        let mut reports = Vec::new();
        for s in &scenarios {
            for (label, r) in reconcilers {
                // 100-Pod reconciles are ~10x slower: fewer iterations keep the time similar.
                let n = if s.pods >= 100 { (iterations / 5).max(10) } else { iterations };
                reports.push(phases::measure(label, s.name, s.pods, r, &s.request, &s.cache, n)?);
            }
        }
        let stats = wasm.stats();
        ensure!(stats.traps + stats.timeouts + stats.ooms + stats.instantiation_failures == 0, "the plugin failed calls: {stats:?}");
        let json = serde_json::json!({"phases": reports, "plugin_calls": stats.calls, "plugin_bytes": wasm.size()});
        std::fs::write(&out, serde_json::to_vec_pretty(&json)?).with_context(|| format!("writing {}", out.to_string_lossy()))?;
        eprintln!("phase breakdown written to {}", out.to_string_lossy());
    }
    Ok(())
}
