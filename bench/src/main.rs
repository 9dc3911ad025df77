//! `wasmloop-bench`: the measurements behind `scripts/bench.sh` / BENCHMARKS.md.

mod alloc;
mod cache_memory;

use clap::{Parser, Subcommand};

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
    },
}

fn main() -> anyhow::Result<()> {
    match Cli::parse().command {
        Command::CacheMemory { pods } => {
            let m = cache_memory::measure(pods)?;
            println!(
                "cache-memory pods={} bytes_per_pod={:.0} json_in_per_pod={:.0} json_cached_per_pod={:.0}",
                m.pods, m.bytes_per_pod, m.json_bytes_per_pod_in, m.json_bytes_per_pod_cached
            );
        }
    }
    Ok(())
}
