//! The fixed cost of one Wasm reconcile, phase by phase: `wasmloop-bench call-cost`.
//!
//! Loads the `echo` test plugin (or `--plugin`) and times reconciles of a key that is not in the
//! cache (one cache read that finds nothing, an empty outcome: the cost of entering and leaving a
//! fresh instance) with [`WasmPlugin::profile_reconcile`], which follows the real call path and
//! timestamps each phase. Run twice: on a plain thread (as criterion does: no Tokio runtime) and
//! on a blocking thread of a multi-thread runtime (as the controller does).

use std::path::PathBuf;
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use serde_json::json;
use wasmloop::cache::{CacheView, SharedCache};
use wasmloop::controller::{Reconciler, Request};
use wasmloop::grants::Grants;
use wasmloop::kinds::{KindRef, ObjectKey};
use wasmloop::plugin::phases::{CallPhases, profile_wrapper};
use wasmloop::plugin::{ByteSize, EngineLimits, Limits, PluginEngine, WasmPlugin};

use crate::stats::Summary;

#[derive(clap::Args, Clone)]
pub struct Args {
    /// The plugin (contract 0.2 or 0.3; default: the echo test plugin, a 0.2 build).
    #[arg(long)]
    pub plugin: Option<PathBuf>,
    #[arg(long, default_value_t = 20_000)]
    pub iterations: usize,
    /// Also reconcile a key that is in the cache (echo reads it twice and writes a status).
    #[arg(long)]
    pub present: bool,
    /// Reset memory slots with `PAGEMAP_SCAN` (`EngineLimits::pagemap_scan`).
    #[arg(long)]
    pub pagemap_scan: bool,
    /// Bytes of each memory slot reset in place instead of given back to the kernel
    /// (`EngineLimits::keep_resident`, e.g. `0`, `64Ki`, `1Mi`; default: the engine's).
    #[arg(long, value_parser = parse_size)]
    pub keep_resident: Option<ByteSize>,
}

/// A `--keep-resident` value: a Kubernetes quantity of bytes (`0`, `64Ki`, `1Mi`).
pub fn parse_size(s: &str) -> std::result::Result<ByteSize, String> {
    ByteSize::parse(s).map_err(|e| e.to_string())
}

fn request(name: &str) -> Request {
    Request::new(ObjectKey::new(KindRef::new("v1", "ConfigMap"), Some("default"), name))
}

fn load(args: &Args) -> Result<(PluginEngine, WasmPlugin)> {
    let path = args.plugin.clone().unwrap_or_else(|| crate::fixtures::workspace_root().join("target/wasm32-wasip2/plugin/echo.wasm"));
    let bytes = std::fs::read(&path).with_context(|| format!("reading {} (scripts/build-test-plugins.sh echo)", path.display()))?;
    let engine = PluginEngine::with_limits(EngineLimits {
        pagemap_scan: args.pagemap_scan,
        keep_resident: args.keep_resident,
        ..EngineLimits::default()
    })?;
    let grants = Grants::from_yaml("echo", "grants:\n  - kinds: [v1/ConfigMap]\n    verbs: [read, update-status, event]\n")?;
    let plugin = WasmPlugin::load(&engine, &bytes, Limits::default(), grants)?;
    Ok((engine, plugin))
}

fn us(d: Duration) -> f64 {
    d.as_secs_f64() * 1e6
}

fn run(plugin: &WasmPlugin, key: &str, n: usize) -> Result<()> {
    let cache: SharedCache = std::sync::Arc::new(CacheView::from_objects(vec![json!({"apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"namespace": "default", "name": "web", "uid": "uid-1"}, "data": {"k": "v"}})])?);
    let req = request(key);
    for _ in 0..n / 10 {
        plugin.profile_reconcile(&req, &cache).map_err(|e| anyhow::anyhow!("{e}"))?;
    }
    let mut runs: Vec<CallPhases> = Vec::with_capacity(n);
    for _ in 0..n {
        runs.push(plugin.profile_reconcile(&req, &cache).map_err(|e| anyhow::anyhow!("{e}"))?);
    }
    let med = |f: fn(&CallPhases) -> Duration| Summary::of(&runs.iter().map(|p| us(f(p))).collect::<Vec<_>>()).map(|s| s.median);
    type Phase = (&'static str, fn(&CallPhases) -> Duration);
    let phases: [Phase; 10] = [
        ("slot", |p| p.slot),
        ("state", |p| p.state),
        ("store", |p| p.store),
        ("request", |p| p.request),
        ("wrapper", |p| p.wrapper),
        ("instantiate", |p| p.instantiate),
        ("call", |p| p.call),
        ("drop", |p| p.drop),
        ("outcome", |p| p.outcome),
        ("total", |p| p.total),
    ];
    let mut line = format!("  key={key:<8}");
    for (name, f) in phases {
        line += &format!(" {name}={:.2}", med(f)?);
    }
    println!("{line}  (median µs of {n})");
    // The real path, end to end.
    let started = Instant::now();
    for _ in 0..n {
        plugin.reconcile(&req, &cache).map_err(|e| anyhow::anyhow!("{e}"))?;
    }
    let per = us(started.elapsed()) / n as f64;
    let mut wrapper: Vec<f64> = (0..n).map(|_| us(profile_wrapper(Duration::from_secs(1)))).collect();
    wrapper.sort_by(f64::total_cmp);
    println!("  key={key:<8} reconcile() mean {per:.2} µs; deadline wrapper alone (ready future) median {:.2} µs", wrapper[n / 2]);
    Ok(())
}

pub fn main(args: Args) -> Result<()> {
    let (_engine, plugin) = load(&args)?;
    let keys: &[&str] = if args.present { &["absent", "web"] } else { &["absent"] };
    println!("pagemap scan: {}; keep resident: {:?}", args.pagemap_scan, args.keep_resident);
    println!("plain thread (no Tokio runtime, as criterion):");
    for key in keys {
        run(&plugin, key, args.iterations)?;
    }
    println!("blocking thread of a multi-thread runtime (as the controller):");
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build()?;
    let plugin = std::sync::Arc::new(plugin);
    for key in keys {
        let (p, k, n) = (plugin.clone(), key.to_string(), args.iterations);
        rt.block_on(async move { tokio::task::spawn_blocking(move || run(&p, &k, n)).await })??;
    }
    Ok(())
}
