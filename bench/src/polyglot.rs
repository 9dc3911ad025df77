//! Section 8: plugins in other languages. The same plugin, `namespace-config`, built from Rust,
//! TypeScript (QuickJS; StarlingMonkey too when given) and Python (componentize-py), side by
//! side in one process, as the host loads and runs them:
//!
//! - **size**: the component's bytes, and zstd -19 as `wasmloop pack` stores it (and how many
//!   payload ConfigMaps that takes);
//! - **compile**: compiling the component (no cache), once;
//! - **load from the precompiled cache**: what a host restart costs per plugin: read and
//!   deserialise the cached artifact, instantiate, call `metadata()` and validate
//!   ([`PrecompiledCache::cached`] + [`WasmPlugin::from_compiled`]), median of several;
//! - **per-reconcile CPU**: thread CPU time of one reconcile on the fixtures of
//!   tests/fixtures/namespace-config (a fresh instance per call, as in the host), in two
//!   scenarios: a Namespace whose ConfigMap is missing (apply + event) and a converged one (no
//!   action); the ratio to the Rust build;
//! - **where a reconcile's time goes**: instantiate / call / drop, from
//!   [`WasmPlugin::profile_reconcile`] (the real call path, timed phase by phase);
//! - **marginal RSS per loaded idle plugin**: `VmRSS` growth of this process per extra copy
//!   loaded from the precompiled cache (each its own deserialised artifact and `InstancePre`;
//!   no controller, queue or informer, which section 3 measures in the real host).
//!
//! The three builds must give equal outcomes on each scenario before anything is timed.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail, ensure};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use wasmloop::cache::{CacheView, IndexSpec, IndexedStore, SharedCache};
use wasmloop::controller::{Reconciler, ReconcilerSpec, Request};
use wasmloop::hotload::{PluginManifest, pack};
use wasmloop::kinds::{KindRef, ObjectKey};
use wasmloop::plugin::{ByteSize, EngineLimits, PluginEngine, PrecompiledCache, WasmPlugin};

use crate::fixtures::workspace_root;
use crate::procfs;
use crate::stats::Summary;

#[derive(clap::Args, Debug, Clone)]
pub struct Args {
    /// A build to measure, `LANGUAGE=PATH` (repeatable; the first is the baseline). Default:
    /// rust, typescript and python from target/wasm32-wasip2/plugin/.
    #[arg(long = "build", value_name = "LANGUAGE=PATH")]
    pub builds: Vec<String>,
    /// CPU time to spend per build and scenario measuring reconciles.
    #[arg(long, default_value_t = 2.0)]
    pub cpu_seconds: f64,
    /// Loads from the precompiled cache per build (the median is reported).
    #[arg(long, default_value_t = 5)]
    pub loads: usize,
    /// Extra copies loaded per build for the marginal RSS.
    #[arg(long, default_value_t = 4)]
    pub copies: usize,
    /// Reset memory slots with `PAGEMAP_SCAN` (`EngineLimits::pagemap_scan`; off by default in
    /// the host, see there why): only the pages a call wrote are restored, in place.
    #[arg(long)]
    pub pagemap_scan: bool,
    /// Bytes of each memory slot reset in place instead of given back to the kernel
    /// (`EngineLimits::keep_resident`, e.g. `0`, `64Mi`; default: the engine's).
    #[arg(long, value_parser = crate::call_cost::parse_size)]
    pub keep_resident: Option<ByteSize>,
    /// Write the results as JSON here.
    #[arg(long)]
    pub out: Option<PathBuf>,
}

/// One build's figures.
#[derive(Debug, Serialize, Deserialize)]
pub struct Build {
    pub language: String,
    pub path: String,
    pub raw_bytes: usize,
    pub zstd_bytes: usize,
    /// Payload ConfigMaps `wasmloop pack` writes for it.
    pub payload_parts: usize,
    pub compile_ms: f64,
    /// Load from the precompiled cache (deserialise + instantiate + metadata()), ms.
    pub cached_load_ms: Summary,
    /// Per scenario: (name, CPU µs per reconcile, calls measured).
    pub reconcile_cpu_us: Vec<(String, f64, usize)>,
    /// Where a converged reconcile's wall time goes, medians in µs: instantiate (fresh instance
    /// from the `InstancePre`), call (guest code, cache reads, lifting), drop (Store and memory
    /// reset), total.
    pub phases_us: [f64; 4],
    /// Minor page faults per converged reconcile on the calling thread (the instance's memory
    /// pages touched afresh: copy-on-write of the image, zero pages of the heap and stack).
    #[serde(default)]
    pub faults_per_reconcile: f64,
    /// Marginal RSS per extra loaded idle copy, MiB.
    pub rss_per_plugin_mib: f64,
    /// Size of the precompiled artifact (native code and metadata), MiB: what a deserialised copy
    /// holds in anonymous memory.
    pub artifact_mib: f64,
}

#[derive(Debug, Serialize, Deserialize)]
pub struct Results {
    pub builds: Vec<Build>,
    /// Whether memory slots were reset with `PAGEMAP_SCAN` (`--pagemap-scan`).
    #[serde(default)]
    pub pagemap_scan: bool,
    /// `--keep-resident`, if given.
    #[serde(default)]
    pub keep_resident: Option<ByteSize>,
}

fn thread_cpu() -> Duration {
    let t = rustix::time::clock_gettime(rustix::time::ClockId::ThreadCPUTime);
    Duration::new(t.tv_sec as u64, t.tv_nsec as u32)
}

fn rss_mib() -> Result<f64> {
    Ok(crate::procfs::rss_bytes(std::process::id())? as f64 / (1 << 20) as f64)
}

fn fixtures(files: &[&str]) -> Result<Vec<Value>> {
    let dir = workspace_root().join("tests/fixtures/namespace-config");
    let mut out = Vec::new();
    for f in files {
        let text = std::fs::read_to_string(dir.join(f)).with_context(|| format!("reading {f}"))?;
        let docs: Vec<Value> = serde_saphyr::from_multiple(&text).with_context(|| format!("parsing {f}"))?;
        out.extend(docs.into_iter().filter(|d| !d.is_null()));
    }
    Ok(out)
}

/// (name, fixture files, namespace reconciled).
const SCENARIOS: &[(&str, &[&str], &str)] = &[
    ("missing ConfigMap: apply + event", &["cluster.yaml"], "team-a"),
    ("converged: no action", &["cluster.yaml", "converged.yaml"], "team-c"),
];
/// The index in [`SCENARIOS`] of the converged reconcile, whose phases and faults are profiled.
const CONVERGED: usize = 1;

fn default_builds() -> Vec<(String, PathBuf)> {
    let dir = workspace_root().join("target/wasm32-wasip2/plugin");
    [("rust", "namespace_config"), ("typescript", "namespace_config_ts"), ("python", "namespace_config_py")]
        .iter()
        .map(|(l, f)| (l.to_string(), dir.join(format!("{f}.wasm"))))
        .collect()
}

fn load(engine: &PluginEngine, cache: &PrecompiledCache, bytes: &[u8], manifest: &PluginManifest) -> Result<WasmPlugin> {
    let compiled = cache.cached(engine, bytes).map_err(|e| anyhow::anyhow!(e))?.context("not in the precompiled cache")?;
    Ok(WasmPlugin::from_compiled(engine, compiled, manifest.limits.clone(), manifest.grants.clone())?)
}

/// The cache `wasmloop reconcile` builds: a store per kind the plugin declares (empty when the
/// fixtures have none of it), with its declared indexes.
fn view_for(spec: &ReconcilerSpec, objects: Vec<Value>) -> Result<CacheView> {
    let from_files = CacheView::from_objects(objects)?;
    let mut view = CacheView::new();
    for kind in spec.kinds() {
        let store = from_files.stores(&kind).first().cloned().unwrap_or_else(|| Arc::new(IndexedStore::new(kind.clone())));
        view.insert(store);
    }
    for idx in &spec.indexes {
        view.declare_index(&idx.kind, &idx.name, IndexSpec::parse(&idx.path)?)?;
    }
    Ok(view)
}

/// The outcome of one reconcile, comparable across builds.
fn outcome_of(plugin: &WasmPlugin, request: &Request, view: &SharedCache) -> Result<String> {
    let out = plugin.reconcile(request, view).map_err(|e| anyhow::anyhow!("{e}"))?;
    Ok(format!("{} {:?}", serde_json::to_string(&out.actions)?, out.requeue_after))
}

pub fn main(args: Args) -> Result<()> {
    let builds: Vec<(String, PathBuf)> = if args.builds.is_empty() {
        default_builds()
    } else {
        args.builds
            .iter()
            .map(|b| b.split_once('=').map(|(l, p)| (l.to_string(), PathBuf::from(p))).context("--build LANGUAGE=PATH"))
            .collect::<Result<_>>()?
    };
    let manifest_text = std::fs::read_to_string(workspace_root().join("deploy/plugins/namespace-config.plugin.yaml"))?;
    let manifest = PluginManifest::parse(&manifest_text, "namespace-config")?;
    let engine = PluginEngine::with_limits(EngineLimits {
        pagemap_scan: args.pagemap_scan,
        keep_resident: args.keep_resident,
        ..EngineLimits::default()
    })?;
    let dir = tempfile::tempdir()?;
    let cache = PrecompiledCache::new(dir.path())?;
    let namespace = KindRef::new("v1", "Namespace");
    // Built from the first build's declaration (the builds must declare the same).
    let mut scenarios: Option<Vec<(&str, SharedCache, Request)>> = None;

    let mut results = Vec::new();
    let mut outcomes: Vec<Vec<String>> = Vec::new();
    let mut kept: Vec<WasmPlugin> = Vec::new();
    for (language, path) in &builds {
        let bytes = std::fs::read(path).with_context(|| format!("reading {} (scripts/build-plugins.sh)", path.display()))?;
        let packed = pack::pack_referenced(pack::PackInput {
            wasm: &bytes,
            path: &path.display().to_string(),
            manifest: manifest_text.clone(),
            name: "namespace-config".into(),
            namespace: None,
        })?;
        eprintln!("polyglot: {language}: compiling {} bytes", bytes.len());
        let compiled = engine.compile_timed(&bytes)?;
        let compile_ms = compiled.elapsed.as_secs_f64() * 1e3;
        let first = WasmPlugin::from_compiled(&engine, compiled, manifest.limits.clone(), manifest.grants.clone())?;
        cache.store(&engine, &bytes, first.component());
        let artifact_mib = first.component().serialize().map_err(|e| anyhow::anyhow!("{e:#}"))?.len() as f64 / (1 << 20) as f64;
        if scenarios.is_none() {
            scenarios = Some(
                SCENARIOS
                    .iter()
                    .map(|(name, files, ns)| {
                        let view: SharedCache = Arc::new(view_for(first.spec(), fixtures(files)?)?);
                        Ok((*name, view, Request::new(ObjectKey::new(namespace.clone(), None, *ns))))
                    })
                    .collect::<Result<_>>()?,
            );
        }
        let scenarios = scenarios.as_ref().context("scenarios")?;
        drop(first);

        let mut loads = Vec::new();
        for _ in 0..args.loads {
            let started = Instant::now();
            let plugin = load(&engine, &cache, &bytes, &manifest)?;
            loads.push(started.elapsed().as_secs_f64() * 1e3);
            drop(plugin);
        }
        let plugin = load(&engine, &cache, &bytes, &manifest)?;

        let mut cpu = Vec::new();
        let mut mine = Vec::new();
        let mut faults_per_reconcile = f64::NAN;
        for (index, (name, view, request)) in scenarios.iter().enumerate() {
            mine.push(outcome_of(&plugin, request, view)?);
            for _ in 0..5 {
                plugin.reconcile(request, view).map_err(|e| anyhow::anyhow!("{e}"))?;
            }
            let (started, faults_before, mut calls) = (thread_cpu(), procfs::thread_minor_faults()?, 0usize);
            while (thread_cpu() - started).as_secs_f64() < args.cpu_seconds || calls < 10 {
                plugin.reconcile(request, view).map_err(|e| anyhow::anyhow!("{e}"))?;
                calls += 1;
            }
            let us = (thread_cpu() - started).as_secs_f64() * 1e6 / calls as f64;
            if index == CONVERGED {
                faults_per_reconcile = (procfs::thread_minor_faults()? - faults_before) as f64 / calls as f64;
                eprintln!("polyglot: {language}: {name}: {faults_per_reconcile:.0} minor page faults per reconcile");
            }
            eprintln!("polyglot: {language}: {name}: {us:.1} µs CPU per reconcile ({calls} calls)");
            cpu.push((name.to_string(), us, calls));
        }
        let (_, view, request) = &scenarios[CONVERGED];
        let mut phases: [Vec<f64>; 4] = Default::default();
        for _ in 0..100 {
            let p = plugin.profile_reconcile(request, view).map_err(|e| anyhow::anyhow!("{e}"))?;
            for (i, d) in [p.instantiate, p.call, p.drop, p.total].into_iter().enumerate() {
                phases[i].push(d.as_secs_f64() * 1e6);
            }
        }
        let phases_us = phases.map(|v| Summary::of(&v).map_or(f64::NAN, |s| s.median));
        eprintln!(
            "polyglot: {language}: converged, wall µs (median of 100): instantiate {:.0}, call {:.0}, drop {:.0}, total {:.0}",
            phases_us[0], phases_us[1], phases_us[2], phases_us[3]
        );
        if let Some(first) = outcomes.first() {
            ensure!(*first == mine, "{language} gives other outcomes than {}:\n{mine:#?}\nvs\n{first:#?}", builds[0].0);
        }
        outcomes.push(mine);

        let before = rss_mib()?;
        for _ in 0..args.copies {
            kept.push(load(&engine, &cache, &bytes, &manifest)?);
        }
        std::thread::sleep(Duration::from_millis(200));
        let rss_per_plugin_mib = (rss_mib()? - before) / args.copies.max(1) as f64;
        results.push(Build {
            language: language.clone(),
            path: path.display().to_string(),
            raw_bytes: bytes.len(),
            zstd_bytes: packed.compressed_bytes,
            payload_parts: packed.payloads.len(),
            compile_ms,
            cached_load_ms: Summary::of(&loads)?,
            reconcile_cpu_us: cpu,
            phases_us,
            faults_per_reconcile,
            rss_per_plugin_mib,
            artifact_mib,
        });
    }
    if results.is_empty() {
        bail!("no build to measure");
    }
    print!("{}", table(&results));
    if let Some(out) = &args.out {
        std::fs::write(
            out,
            serde_json::to_vec_pretty(&Results { builds: results, pagemap_scan: args.pagemap_scan, keep_resident: args.keep_resident })?,
        )?;
    }
    Ok(())
}

/// The results as a Markdown table (what BENCHMARKS.md gets).
pub fn table(builds: &[Build]) -> String {
    let base = &builds[0];
    let mut s = String::from(
        "| build | raw / zstd | payload ConfigMaps | compile | load from precompiled cache (median) | reconcile CPU: apply + event | reconcile CPU: converged | converged, wall: instantiate / call / drop | RSS per idle plugin (artifact) |\n|---|---|---|---|---|---|---|---|---|\n",
    );
    for b in builds {
        let cpu = |i: usize| {
            let (us, base_us) = (b.reconcile_cpu_us[i].1, base.reconcile_cpu_us[i].1);
            format!("{us:.0} µs ({:.1}×)", us / base_us)
        };
        s.push_str(&format!(
            "| {} | {:.2} MB / {:.2} MB | {} | {:.1} s | {:.0} ms | {} | {} | {:.0} / {:.0} / {:.0} µs | {:.1} MiB ({:.1} MiB) |\n",
            b.language,
            b.raw_bytes as f64 / 1e6,
            b.zstd_bytes as f64 / 1e6,
            b.payload_parts,
            b.compile_ms / 1e3,
            b.cached_load_ms.median,
            cpu(0),
            cpu(1),
            b.phases_us[0],
            b.phases_us[1],
            b.phases_us[2],
            b.rss_per_plugin_mib,
            b.artifact_mib
        ));
    }
    s
}
