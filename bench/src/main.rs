//! `wasmloop-bench`: the live measurements behind `scripts/bench.sh` / BENCHMARKS.md. Each
//! subcommand measures one section and writes its raw results as JSON (`--out`); `report`
//! turns the results directory into the Markdown file.

use std::path::{Path, PathBuf};

use anyhow::Context;
use clap::{Parser, Subcommand};
use serde::Serialize;
use wasmloop_bench::{
    alloc, cache_memory, cache_scale, call_cost, convergence, devloop, index_memory, latency, memory, polyglot, queue, reload, report,
    rollout_race, scaleout, shadow,
};

#[global_allocator]
static ALLOC: alloc::Counting = alloc::Counting;

#[derive(Parser)]
#[command(about = "wasmloop benchmarks; scripts/bench.sh runs them and writes BENCHMARKS.md")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Heap bytes per cached Pod in the indexed cache.
    CacheMemory {
        #[arg(long, default_value_t = 10_000)]
        pods: usize,
        /// Also write the result as JSON here.
        #[arg(long)]
        out: Option<PathBuf>,
    },
    /// What an index's entries take on the heap beside the host's estimate (budgets.indexMemory).
    IndexMemory,
    /// Section 3b: the cache from 1 000 to 100 000 Pods, host vs kube-controller-manager: RSS,
    /// bytes per Pod, start → synced.
    CacheScale(cache_scale::Args),
    /// The fixed cost of one Wasm reconcile, phase by phase (echo plugin, key not in the cache).
    CallCost(call_cost::Args),
    /// Section 1: ReplicaSet convergence, kube-controller-manager vs the wasmloop host.
    Convergence(convergence::Args),
    /// Section 10: the rollout race, Deployments created then all images changed, KCM vs the host.
    RolloutRace(rollout_race::Args),
    /// Section 3: host RSS idle and with N plugins loaded.
    Memory(memory::Args),
    /// Section 4: work queue throughput and deduplication.
    Queue(queue::Args),
    /// Section 5a: event → reconcile start latency against the API server.
    Latency(latency::Args),
    /// Section 5b: hot reload, ConfigMap applied → new version serving.
    Reload(reload::Args),
    /// Section 6: scale-out, 1 vs 3 sharded replicas, imbalance, kill -9 failover.
    ScaleOut(scaleout::Args),
    /// Section 7: the plugin author's inner loop, `wasmloop dev`: save → new version reconciling.
    DevLoop(devloop::Args),
    /// Section 8: the same plugin from Rust, TypeScript and Python: sizes, compile, load from the
    /// precompiled cache, per-reconcile CPU, marginal RSS per idle plugin (in-process, no cluster).
    Polyglot(polyglot::Args),
    /// What a shadow version costs the serving one: serving reconcile p99 with and without a
    /// candidate beside it (in-process, no cluster).
    Shadow(shadow::Args),
    /// Write BENCHMARKS.md from a results directory.
    Report(report::Args),
}

fn write_json(path: &Path, value: &impl Serialize) -> anyhow::Result<()> {
    std::fs::write(path, serde_json::to_vec_pretty(value)?).with_context(|| format!("writing {}", path.display()))
}

fn main() -> anyhow::Result<()> {
    let _ = tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "warn".into()))
        .with_writer(std::io::stderr)
        .try_init();
    let rt = || tokio::runtime::Builder::new_multi_thread().enable_all().build();
    match Cli::parse().command {
        Command::CacheMemory { pods, out } => {
            let mut m = cache_memory::measure(pods, cache_memory::realistic_pod)?;
            m.running = Some(Box::new(cache_memory::measure(pods, cache_memory::running_pod)?));
            for (workload, m) in [("realistic", &m), ("running", m.running.as_deref().unwrap_or(&m))] {
                println!(
                    "cache-memory pods={} bytes_per_pod={:.0} (plain {:.0}) json_in_per_pod={:.0} json_cached_per_pod={:.0} \
                 stored_json_per_pod={:.0} dictionary={} B (heap {} B) dictionary_ms={:.1} read_ns plain={:.0} packed={:.0} ({workload} Pods)",
                    m.pods,
                    m.bytes_per_pod,
                    m.plain_bytes_per_pod,
                    m.json_bytes_per_pod_in,
                    m.json_bytes_per_pod_cached,
                    m.stored_json_bytes_per_pod,
                    m.dictionary_bytes,
                    m.dictionary_heap_bytes,
                    m.dictionary_ms,
                    m.read_plain_ns,
                    m.read_packed_ns
                );
            }
            if let Some(out) = out {
                write_json(&out, &m)?;
            }
        }
        Command::IndexMemory => {
            for shape in &index_memory::SHAPES {
                let (measured, estimated) = index_memory::measure(shape)?;
                println!(
                    "index-memory {:>24}: {} objects, {} values each, {} distinct: measured {measured} B, estimated {estimated} B ({:.2}×)",
                    shape.name,
                    shape.objects,
                    shape.values_per_object,
                    shape.distinct,
                    estimated as f64 / measured as f64
                );
            }
        }
        Command::CallCost(args) => call_cost::main(args)?,
        Command::Polyglot(args) => polyglot::main(args)?,
        Command::Shadow(args) => shadow::main(args)?,
        Command::Convergence(args) => {
            let out = args.out.clone();
            write_json(&out, &rt()?.block_on(convergence::run(args))?)?;
        }
        Command::RolloutRace(args) => {
            let out = args.out.clone();
            write_json(&out, &rt()?.block_on(rollout_race::run(args))?)?;
        }
        Command::CacheScale(args) => {
            let out = args.out.clone();
            write_json(&out, &rt()?.block_on(cache_scale::run(args))?)?;
        }
        Command::Memory(args) => {
            let out = args.out.clone();
            write_json(&out, &rt()?.block_on(memory::run(args))?)?;
        }
        Command::Queue(args) => {
            let out = args.out.clone();
            write_json(&out, &rt()?.block_on(queue::run(args))?)?;
        }
        Command::Latency(args) => {
            let out = args.out.clone();
            write_json(&out, &rt()?.block_on(latency::run(args))?)?;
        }
        Command::Reload(args) => {
            let out = args.out.clone();
            write_json(&out, &rt()?.block_on(reload::run(args))?)?;
        }
        Command::ScaleOut(args) => {
            let out = args.out.clone();
            write_json(&out, &rt()?.block_on(scaleout::run(args))?)?;
        }
        Command::DevLoop(args) => {
            let out = args.out.clone();
            write_json(&out, &rt()?.block_on(devloop::run(args))?)?;
        }
        Command::Report(args) => report::run(args)?,
    }
    Ok(())
}
