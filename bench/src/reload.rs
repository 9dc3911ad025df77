//! Section 5b: hot reload, in-process: a `PluginManager` watching a plugin namespace of the
//! real API server. A new version of the replicaset plugin's ConfigMap (the same wasm bytes
//! under a manifest with another `limits.timeout`, so the controller is swapped, not restarted)
//! is applied, and the time runs until the manager reports the new version serving
//! (`LoadEvent::Loaded`, sent right after the swap, before the Event and status annotation are
//! written). Three managers:
//!
//! - "compile": the inline form (wasm in the plugin ConfigMap, ~the whole component re-applied),
//!   no precompiled cache: every load compiles;
//! - "precompiled cache": the inline form, the cache already holds the component: every load
//!   decodes the ConfigMap and deserialises (the figure before referenced payloads);
//! - "manifest-only, referenced payload": `wasmloop pack`'s default form; only the small plugin
//!   ConfigMap (manifest + `plugin.wasm.ref` + `plugin.wasm.digest`) is applied, the immutable
//!   payload ConfigMap stays: every load reuses the loaded component.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use parking_lot::Mutex;
use serde::{Deserialize, Serialize};
use tokio::sync::broadcast;
use wasmloop::controller::{ControllerMetrics, Shared};
use wasmloop::executor::Executor;
use wasmloop::hotload::source::PLUGIN_LABEL;
use wasmloop::hotload::{LoadEvent, PluginManager, PluginManagerConfig, PluginMetrics, pack};
use wasmloop::informer::{InformerKey, InformerRegistry};
use wasmloop::kinds::{KindRef, KindResolver};
use wasmloop::plugin::PluginEngine;

use crate::fixtures::manifest_variant;
use crate::kube_util::{self, apply_configmap, apply_plugin, ensure_namespace};
use crate::stats::Summary;

#[derive(clap::Args, Debug, Clone)]
pub struct Args {
    #[arg(long)]
    pub kubeconfig: PathBuf,
    #[arg(long)]
    pub plugin: PathBuf,
    #[arg(long)]
    pub manifest: PathBuf,
    /// Reloads that compile.
    #[arg(long, default_value_t = 5)]
    pub compile_runs: usize,
    /// Reloads from the precompiled cache (inline form), and manifest-only reloads (referenced form).
    #[arg(long, default_value_t = 10)]
    pub cached_runs: usize,
    #[arg(long)]
    pub out: PathBuf,
}

/// The case of the referenced form: only the small plugin ConfigMap is applied.
pub const MANIFEST_ONLY: &str = "manifest-only, referenced payload";

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Case {
    pub case: String,
    /// The manager's `LoadEvent` origin of every measured reload.
    pub origins: Vec<String>,
    /// Apply sent → `LoadEvent::Loaded` received, ms.
    pub apply_to_active_ms: Summary,
    /// The server-side apply PATCH itself (sent → answered), ms.
    pub apply_ms: Summary,
    /// Apply sent → the manager's ConfigMap informer delivers the change, ms.
    pub apply_to_event_ms: Summary,
    /// The manager's own load time (decode, compile or deserialise, validate, swap), ms.
    pub load_ms: Summary,
}

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Results {
    pub plugin_bytes: usize,
    pub cases: Vec<Case>,
}

async fn wait_loaded(events: &mut broadcast::Receiver<LoadEvent>, configmap: &str) -> Result<(String, Duration)> {
    loop {
        match tokio::time::timeout(Duration::from_secs(120), events.recv()).await {
            Ok(Ok(LoadEvent::Loaded { configmap: cm, origin, took, .. })) if cm == configmap => return Ok((format!("{origin:?}"), took)),
            Ok(Ok(LoadEvent::Rejected { configmap: cm, error })) if cm == configmap => bail!("the reload was rejected: {error}"),
            Ok(Ok(_)) => {}
            Ok(Err(e)) => bail!("load events: {e}"),
            Err(_) => bail!("no load event for {configmap} within 120 s"),
        }
    }
}

pub async fn run(args: Args) -> Result<Results> {
    let client = kube_util::client(&args.kubeconfig).await?;
    let wasm = std::fs::read(&args.plugin).with_context(|| format!("reading {}", args.plugin.display()))?;
    let base = std::fs::read_to_string(&args.manifest).with_context(|| format!("reading {}", args.manifest.display()))?;
    let tag = std::process::id();
    let target_ns = format!("bench-reload-target-{tag}");
    ensure_namespace(&client, &target_ns).await?;
    let resolver = KindResolver::new(client.clone());
    let registry = InformerRegistry::new(resolver.clone());
    let executor = Executor::new(resolver, Some("wasmloop-bench".into()));
    let engine = tokio::task::spawn_blocking(PluginEngine::new).await??;
    let precompiled = tempfile::tempdir()?;
    let mut cases = Vec::new();
    let mut timeout_ms = 1000;
    for (case, dir, runs, referenced) in [
        ("compile", None, args.compile_runs, false),
        ("precompiled cache", Some(precompiled.path().to_path_buf()), args.cached_runs, false),
        (MANIFEST_ONLY, Some(precompiled.path().to_path_buf()), args.cached_runs, true),
    ] {
        let plugin_ns = format!(
            "bench-reload-{tag}-{}",
            if referenced {
                "ref"
            } else if dir.is_some() {
                "cached"
            } else {
                "compile"
            }
        );
        ensure_namespace(&client, &plugin_ns).await?;
        let config = PluginManagerConfig {
            precompiled_dir: dir,
            shutdown_grace: Duration::from_secs(5),
            ..PluginManagerConfig::new(Some(plugin_ns.clone()))
        };
        let manager = PluginManager::start(
            engine.clone(),
            Shared::new(registry.clone(), ControllerMetrics::unregistered()),
            executor.clone(),
            PluginMetrics::unregistered(),
            config,
        )
        .await
        .context("starting the plugin manager")?;
        let mut events = manager.events();
        // The manager's own ConfigMap informer (shared): stamp when it delivers a change.
        let key = InformerKey::new(KindRef::new("v1", "ConfigMap"), Some(plugin_ns.clone()), Some(&format!("{PLUGIN_LABEL}=true")))?;
        let informer = registry.acquire(key).await?;
        let seen: Arc<Mutex<Vec<(String, Instant)>>> = Default::default();
        let _sub = {
            let seen = seen.clone();
            informer.subscribe(Arc::new(move |change| {
                let now = Instant::now();
                if !change.is_unchanged() {
                    seen.lock().push((change.object().resource_version().to_string(), now));
                }
            }))
        };
        let name = "rs-reload";
        // First version: starts the controller (and fills the precompiled cache). Not measured.
        let first = manifest_variant(&base, name, Some(&target_ns), Some(timeout_ms))?;
        let packed = if referenced {
            let packed = pack::pack_referenced(pack::PackInput {
                wasm: &wasm,
                path: "replicaset.wasm",
                manifest: first.clone(),
                name: name.to_string(),
                namespace: Some(plugin_ns.clone()),
            })
            .context("packing the plugin (referenced)")?;
            apply_configmap(&client, &plugin_ns, packed.payloads[0].clone()).await?;
            apply_configmap(&client, &plugin_ns, packed.plugin.clone()).await?;
            Some(packed)
        } else {
            apply_plugin(&client, &plugin_ns, name, &wasm, &first).await?;
            None
        };
        wait_loaded(&mut events, name).await?;
        let (mut total, mut load, mut origins) = (Vec::new(), Vec::new(), Vec::new());
        let (mut apply, mut to_event) = (Vec::new(), Vec::new());
        for _ in 0..runs {
            timeout_ms += 1;
            let manifest = manifest_variant(&base, name, Some(&target_ns), Some(timeout_ms))?;
            tokio::time::sleep(Duration::from_millis(200)).await;
            seen.lock().clear();
            let t0 = Instant::now();
            let rv = match &packed {
                // Only the small plugin ConfigMap changes; the payload is not re-applied.
                Some(packed) => {
                    let mut cm = packed.plugin.clone();
                    cm.data.get_or_insert_with(Default::default).insert(wasmloop::hotload::source::MANIFEST_KEY.into(), manifest);
                    apply_configmap(&client, &plugin_ns, cm).await?
                }
                None => apply_plugin(&client, &plugin_ns, name, &wasm, &manifest).await?,
            };
            apply.push(t0.elapsed().as_secs_f64() * 1e3);
            let (origin, took) = wait_loaded(&mut events, name).await?;
            total.push(t0.elapsed().as_secs_f64() * 1e3);
            let delivered = seen.lock().iter().find(|(v, _)| *v == rv).map(|(_, at)| *at);
            let delivered = delivered.with_context(|| format!("the informer did not deliver resourceVersion {rv}"))?;
            to_event.push((delivered - t0).as_secs_f64() * 1e3);
            load.push(took.as_secs_f64() * 1e3);
            origins.push(origin);
        }
        manager.shutdown().await;
        let expected = match case {
            "compile" => "Compiled",
            MANIFEST_ONLY => "Reused",
            _ => "Precompiled",
        };
        anyhow::ensure!(origins.iter().all(|o| o == expected), "{case}: expected every reload to be {expected}, got {origins:?}");
        let c = Case {
            case: case.to_string(),
            origins,
            apply_to_active_ms: Summary::of(&total)?,
            apply_ms: Summary::of(&apply)?,
            apply_to_event_ms: Summary::of(&to_event)?,
            load_ms: Summary::of(&load)?,
        };
        eprintln!(
            "reload: {case}: apply → active p50 {:.1} ms (apply {:.1} ms, → informer {:.1} ms, load {:.1} ms), {} runs",
            c.apply_to_active_ms.median, c.apply_ms.median, c.apply_to_event_ms.median, c.load_ms.median, c.apply_to_active_ms.n
        );
        cases.push(c);
    }
    Ok(Results { plugin_bytes: wasm.len(), cases })
}
