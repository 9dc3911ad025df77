//! Section 5a: event → reconcile start, in-process, against the real API server.
//!
//! A `Controller` runs a no-op native reconciler for ConfigMaps in one namespace. A load
//! generator patches those ConfigMaps at `rate` writes/s (rotating over `keys` of them, so a key
//! is rarely written twice before it is reconciled). Two latencies per event:
//! - **event → reconcile start** (the host's own latency: cache update, handlers, queue, a worker
//!   picking the key and entering the reconciler in place): from the informer delivering the change to our
//!   handler, subscribed before the controller's so it runs first, to the reconciler being
//!   entered for that key. Events folded into one reconcile count from the first of them, as
//!   client-go's `queue_duration` does;
//! - **write → event** (API server, etcd and watch, for context): from sending the PATCH to the
//!   informer delivering the change carrying its sequence number.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use futures::StreamExt;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, Patch, PatchParams, PostParams};
use parking_lot::Mutex;
use serde::{Deserialize, Serialize};
use serde_json::json;
use wasmloop::cache::{CachedObject, SharedCache};
use wasmloop::controller::{
    Controller, ControllerConfig, ControllerMetrics, Outcome, ReconcileError, Reconciler, ReconcilerSpec, Request, Shared,
};
use wasmloop::executor::Executor;
use wasmloop::grants::Grants;
use wasmloop::informer::{InformerKey, InformerRegistry};
use wasmloop::kinds::{KindRef, KindResolver};

use crate::kube_util::{self, ensure_namespace};
use crate::stats::Summary;

#[derive(clap::Args, Debug, Clone)]
pub struct Args {
    #[arg(long)]
    pub kubeconfig: PathBuf,
    /// Target writes (and so events) per second.
    #[arg(long, default_value_t = 1000)]
    pub rate: u32,
    #[arg(long, default_value_t = 10)]
    pub seconds: u64,
    /// ConfigMaps written in rotation.
    #[arg(long, default_value_t = 500)]
    pub keys: usize,
    /// Controller workers.
    #[arg(long, default_value_t = 4)]
    pub workers: usize,
    /// Most PATCHes in flight (the generator waits beyond that: the achieved rate is reported).
    #[arg(long, default_value_t = 256)]
    pub inflight: usize,
    /// Run the load generator on its own thread pinned to this CPU, with its own runtime and
    /// client (so its requests' work is not done on the host's threads). `scripts/bench.sh`
    /// starts this process pinned to the other CPU (`taskset`), with the API server and etcd on
    /// this one, so the figure is the host's own latency.
    #[arg(long)]
    pub generator_cpu: Option<usize>,
    /// Run hostile plugins beside the probe (the `hostile` and `spin-loop` test components in
    /// this directory): guests sleeping past their deadline, requeue, log and Event floods, a
    /// spinning guest. The probe's latency is then the well-behaved plugin's under attack.
    #[arg(long)]
    pub attack: Option<PathBuf>,
    /// Measure this many times, each with a fresh controller in fresh namespaces; the result is
    /// the run with the median p99 (one run's p99 is its 1% slowest reconciles, which the
    /// machine's scheduling moves a lot), with every run's p99 beside it.
    #[arg(long, default_value_t = 1)]
    pub runs: usize,
    #[arg(long)]
    pub out: PathBuf,
}

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Results {
    /// Whether hostile plugins ran beside the probe.
    #[serde(default)]
    pub under_attack: bool,
    pub target_rate: u32,
    pub seconds: u64,
    pub keys: usize,
    pub workers: usize,
    pub writes: u64,
    /// Writes per second actually sent.
    pub write_rate: f64,
    /// The CPU the load generator was pinned to, if any.
    #[serde(default)]
    pub generator_cpu: Option<usize>,
    /// The CPUs this process (the host) could run on, as `sched_getaffinity` reported them.
    #[serde(default)]
    pub host_cpus: Vec<usize>,
    /// Events the informer delivered during the load, per second.
    pub event_rate: f64,
    pub events: usize,
    pub reconciles_measured: usize,
    pub event_to_reconcile_us: Summary,
    pub write_to_event_ms: Summary,
    /// Every run's event → reconcile p99 (µs), in run order; this result is the median one's.
    #[serde(default)]
    pub p99_runs_us: Vec<f64>,
}

fn cm_kind() -> KindRef {
    KindRef::new("v1", "ConfigMap")
}

/// Records when each key's oldest unreconciled event arrived.
type Pending = Arc<Mutex<HashMap<String, Instant>>>;

struct Probe {
    spec: ReconcilerSpec,
    pending: Pending,
    samples: Mutex<Vec<f64>>,
}

impl Reconciler for Probe {
    fn spec(&self) -> &ReconcilerSpec {
        &self.spec
    }
    fn reconcile(&self, request: &Request, _cache: &SharedCache) -> Result<Outcome, ReconcileError> {
        let now = Instant::now();
        if let Some(t) = self.pending.lock().remove(&request.key.name) {
            self.samples.lock().push((now - t).as_secs_f64() * 1e6);
        }
        Ok(Outcome::default())
    }
}

/// `args.runs` measurements; the one with the median p99, with every run's p99.
pub async fn run(args: Args) -> Result<Results> {
    anyhow::ensure!(args.runs > 0, "--runs must be at least 1");
    let mut runs = Vec::with_capacity(args.runs);
    for i in 0..args.runs {
        runs.push(run_once(&args, &format!("{}-{i}", std::process::id())).await?);
    }
    let p99s: Vec<f64> = runs.iter().map(|r| r.event_to_reconcile_us.p99).collect();
    runs.sort_by(|a, b| a.event_to_reconcile_us.p99.total_cmp(&b.event_to_reconcile_us.p99));
    let mut median = runs.swap_remove(runs.len() / 2);
    median.p99_runs_us = p99s;
    Ok(median)
}

/// One measurement, in namespaces named with `suffix`.
async fn run_once(args: &Args, suffix: &str) -> Result<Results> {
    let client = kube_util::client(&args.kubeconfig).await?;
    let ns = format!("bench-latency-{suffix}");
    ensure_namespace(&client, &ns).await?;
    let cms = Api::<ConfigMap>::namespaced(client.clone(), &ns);
    futures::stream::iter(0..args.keys)
        .map(|i| {
            let cms = cms.clone();
            async move {
                let cm: ConfigMap = serde_json::from_value(json!({"metadata": {"name": format!("cm-{i}")}, "data": {"seq": "0"}}))?;
                cms.create(&PostParams::default(), &cm).await.with_context(|| format!("creating cm-{i}"))?;
                anyhow::Ok(())
            }
        })
        .buffer_unordered(32)
        .collect::<Vec<_>>()
        .await
        .into_iter()
        .collect::<Result<Vec<_>>>()?;

    let resolver = KindResolver::new(client.clone());
    let registry = InformerRegistry::new(resolver.clone());
    let executor = Executor::new(resolver, Some("wasmloop-bench".into()));
    let informer = registry.acquire(InformerKey::new(cm_kind(), Some(ns.clone()), None)?).await?;
    informer.wait_synced(Duration::from_secs(60)).await?;

    let pending: Pending = Default::default();
    let delivered: Delivered = Default::default();
    // Subscribed before the controller's handler, so it runs first for every change.
    let _sub = {
        let (pending, delivered) = (pending.clone(), delivered.clone());
        informer.subscribe(Arc::new(move |change| {
            let now = Instant::now();
            if change.is_unchanged() {
                return;
            }
            let o = change.object();
            pending.lock().entry(o.name().to_string()).or_insert(now);
            delivered.lock().push((o.clone(), now));
        }))
    };
    let probe = Arc::new(Probe {
        spec: ReconcilerSpec {
            name: "latency-probe".into(),
            version: "0".into(),
            reconciles: cm_kind(),
            selector: None,
            watches: vec![],
            indexes: vec![],
            fields: vec![],
            annotation_selector: None,
        },
        pending: pending.clone(),
        samples: Mutex::new(Vec::new()),
    });
    let config = ControllerConfig { namespace: Some(ns.clone()), workers: args.workers, ..Default::default() };
    let controller = Controller::start(
        probe.clone(),
        config,
        Arc::new(Grants::all()),
        Shared::new(registry.clone(), ControllerMetrics::unregistered()),
        executor.clone(),
    )
    .await
    .context("starting the probe controller")?;
    let attackers = match &args.attack {
        Some(dir) => Some(attack::start(&client, &registry, &executor, dir, suffix).await.context("starting the attack")?),
        None => None,
    };
    // Let the initial reconciles of every key pass, then start from a clean slate.
    tokio::time::sleep(Duration::from_secs(1)).await;
    pending.lock().clear();
    delivered.lock().clear();
    probe.samples.lock().clear();

    let sends: Sends = Default::default();
    let host_cpus = allowed_cpus()?;
    let start = Instant::now();
    let load = match args.generator_cpu {
        None => generate(cms.clone(), args, &sends, start).await?,
        Some(cpu) => {
            let (args, sends, ns) = (args.clone(), sends.clone(), ns.clone());
            let thread = std::thread::Builder::new().name("load-generator".into()).spawn(move || -> Result<Load> {
                pin_this_thread(cpu)?;
                let rt = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
                rt.block_on(async {
                    let client = kube_util::client(&args.kubeconfig).await?;
                    generate(Api::namespaced(client, &ns), &args, &sends, start).await
                })
            })?;
            tokio::task::spawn_blocking(move || thread.join()).await?.map_err(|_| anyhow::anyhow!("the load generator panicked"))??
        }
    };
    let (sent, send_time) = (load.sent, load.send_time);
    kube_util::wait_until("every event reconciled", Duration::from_secs(60), Duration::from_millis(20), || {
        let pending = pending.clone();
        async move { Ok(pending.lock().is_empty()) }
    })
    .await?;
    let load_time = start.elapsed();
    controller.shutdown(Duration::from_secs(5)).await;
    if let Some(attackers) = attackers {
        attackers.stop(&client).await;
    }

    let delivered = std::mem::take(&mut *delivered.lock());
    let write_to_event: Vec<f64> = {
        let sends = sends.lock();
        delivered
            .iter()
            .filter_map(|(obj, at)| {
                let seq: u64 = obj.value()["data"]["seq"].as_str()?.parse().ok()?;
                sends.get(&seq).map(|sent_at| (*at - *sent_at).as_secs_f64() * 1e3)
            })
            .collect()
    };
    let samples = std::mem::take(&mut *probe.samples.lock());
    let _ = kube_util::delete_namespace(&client, &ns).await;
    let results = Results {
        under_attack: args.attack.is_some(),
        target_rate: args.rate,
        seconds: args.seconds,
        keys: args.keys,
        workers: args.workers,
        generator_cpu: args.generator_cpu,
        host_cpus,
        writes: sent,
        write_rate: sent as f64 / send_time.as_secs_f64(),
        event_rate: delivered.len() as f64 / load_time.as_secs_f64(),
        events: delivered.len(),
        reconciles_measured: samples.len(),
        event_to_reconcile_us: Summary::of(&samples).context("no reconcile was measured")?,
        write_to_event_ms: Summary::of(&write_to_event).context("no event matched a write")?,
        p99_runs_us: Vec::new(),
    };
    eprintln!(
        "latency{}: {} writes at {:.0}/s, {} events, event→reconcile p50 {:.0} µs p99 {:.0} µs, write→event p50 {:.1} ms",
        if results.under_attack { " under attack" } else { "" },
        results.writes,
        results.write_rate,
        results.events,
        results.event_to_reconcile_us.median,
        results.event_to_reconcile_us.p99,
        results.write_to_event_ms.median
    );
    Ok(results)
}

/// Each change the informer delivered, with when.
type Delivered = Arc<Mutex<Vec<(Arc<CachedObject>, Instant)>>>;

/// When each write (by sequence number) was sent.
type Sends = Arc<Mutex<HashMap<u64, Instant>>>;

/// What the load generator did.
struct Load {
    sent: u64,
    /// From `start` to the last write sent (not answered).
    send_time: Duration,
}

/// Patch the ConfigMaps at `args.rate` writes/s for `args.seconds`, at most `args.inflight` at
/// once; every write must succeed.
async fn generate(cms: Api<ConfigMap>, args: &Args, sends: &Sends, start: Instant) -> Result<Load> {
    let failures = Arc::new(AtomicU64::new(0));
    let total = args.rate as u64 * args.seconds;
    let permits = Arc::new(tokio::sync::Semaphore::new(args.inflight));
    let mut sent = 0u64;
    let mut tick = tokio::time::interval(Duration::from_millis(1));
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Burst);
    let mut tasks = Vec::new();
    while sent < total {
        tick.tick().await;
        // Writes due by now at the target rate.
        let due = ((start.elapsed().as_secs_f64() * args.rate as f64) as u64 + 1).min(total);
        while sent < due {
            let seq = sent + 1;
            let permit = permits.clone().acquire_owned().await?;
            let (cms, sends, failures) = (cms.clone(), sends.clone(), failures.clone());
            let name = format!("cm-{}", seq as usize % args.keys);
            sends.lock().insert(seq, Instant::now());
            tasks.push(tokio::spawn(async move {
                let patch = json!({"data": {"seq": seq.to_string()}});
                if cms.patch(&name, &PatchParams::default(), &Patch::Merge(&patch)).await.is_err() {
                    failures.fetch_add(1, Ordering::Relaxed);
                }
                drop(permit);
            }));
            sent += 1;
        }
    }
    let send_time = start.elapsed();
    for t in tasks {
        t.await?;
    }
    anyhow::ensure!(failures.load(Ordering::Relaxed) == 0, "{} of {sent} PATCHes failed", failures.load(Ordering::Relaxed));
    Ok(Load { sent, send_time })
}

/// Run the calling thread on `cpu` only.
fn pin_this_thread(cpu: usize) -> Result<()> {
    let mut set = rustix::thread::CpuSet::new();
    set.set(cpu);
    rustix::thread::sched_setaffinity(None, &set).with_context(|| format!("pinning the load generator to CPU {cpu}"))
}

/// The CPUs the calling thread may run on.
fn allowed_cpus() -> Result<Vec<usize>> {
    let set = rustix::thread::sched_getaffinity(None).context("sched_getaffinity")?;
    Ok((0..rustix::thread::CpuSet::MAX_CPU).filter(|&c| set.is_set(c)).collect())
}

/// Hostile plugins in namespaces of their own, in the same host as the probe.
mod attack {
    use std::path::Path;
    use std::sync::Arc;
    use std::time::Duration;

    use anyhow::{Context, Result};
    use k8s_openapi::api::core::v1::ConfigMap;
    use kube::api::{Api, PostParams};
    use serde_json::{Value, json};
    use wasmloop::controller::{Controller, ControllerMetrics, Shared};
    use wasmloop::executor::Executor;
    use wasmloop::hotload::PluginManifest;
    use wasmloop::informer::InformerRegistry;
    use wasmloop::plugin::{PluginEngine, WasmPlugin};

    use crate::kube_util::{self, ensure_namespace};

    pub struct Attackers {
        controllers: Vec<Controller>,
        namespaces: Vec<String>,
    }

    impl Attackers {
        pub async fn stop(self, client: &kube::Client) {
            for c in self.controllers {
                c.shutdown(Duration::from_secs(5)).await;
            }
            for ns in self.namespaces {
                let _ = kube_util::delete_namespace(client, &ns).await;
            }
        }
    }

    async fn plugin(engine: &PluginEngine, wasm: &Path, manifest: &PluginManifest) -> Result<Arc<WasmPlugin>> {
        let bytes = std::fs::read(wasm).with_context(|| format!("reading {}", wasm.display()))?;
        let (engine, limits, grants) = (engine.clone(), manifest.limits.clone(), manifest.grants.clone());
        Ok(Arc::new(tokio::task::spawn_blocking(move || WasmPlugin::load(&engine, &bytes, limits, grants)).await??))
    }

    pub async fn start(
        client: &kube::Client,
        registry: &InformerRegistry,
        executor: &Executor,
        dir: &Path,
        suffix: &str,
    ) -> Result<Attackers> {
        let engine = tokio::task::spawn_blocking(PluginEngine::new).await??;
        let (hostile_ns, spin_ns) = (format!("bench-attack-{suffix}"), format!("bench-spin-{suffix}"));
        let mut controllers = Vec::new();
        for ns in [&hostile_ns, &spin_ns] {
            ensure_namespace(client, ns).await?;
        }
        let grants = "grants:\n  - kinds: [v1/ConfigMap]\n    verbs: [read, create, update-status, event]\n";
        let hostile = PluginManifest::parse(&format!("name: hostile\nnamespace: {hostile_ns}\nconcurrency: 4\n{grants}"), "hostile")?;
        let spin = PluginManifest::parse(&format!("name: spin-loop\nnamespace: {spin_ns}\n{grants}"), "spin-loop")?;
        for (file, manifest) in [("hostile.wasm", &hostile), ("spin_loop.wasm", &spin)] {
            let p = plugin(&engine, &dir.join(file), manifest).await?;
            let c = Controller::start(
                p.clone(),
                manifest.controller.clone(),
                p.grants().clone(),
                Shared::new(registry.clone(), ControllerMetrics::unregistered()),
                executor.clone(),
            )
            .await?;
            controllers.push(c);
        }
        let noise: Vec<Value> = (0..1000)
            .map(|i| {
                json!({"event": {"regarding": {"apiVersion": "v1", "kind": "ConfigMap", "namespace": "$NS", "name": "$NAME"},
                                      "type": "Normal", "reason": "Noise", "message": format!("event {i}")}})
            })
            .collect();
        let cases = [
            ("sleepy-1", json!({"sleepMs": "60000"})),
            ("sleepy-2", json!({"sleepMs": "60000"})),
            ("spinner", json!({"requeueAfterMs": "0"})),
            ("chatty", json!({"logLines": "5000", "requeueAfterMs": "0"})),
            ("noisy", json!({"actions": Value::Array(noise).to_string(), "requeueAfterMs": "0"})),
        ];
        let cms = Api::<ConfigMap>::namespaced(client.clone(), &hostile_ns);
        for (name, data) in cases {
            let cm: ConfigMap =
                serde_json::from_value(json!({"metadata": {"name": name, "labels": {"wasmloop.dev/hostile-test": "true"}}, "data": data}))?;
            cms.create(&PostParams::default(), &cm).await?;
        }
        let spin_cm: ConfigMap = serde_json::from_value(json!({"metadata": {"name": "spin"}}))?;
        Api::<ConfigMap>::namespaced(client.clone(), &spin_ns).create(&PostParams::default(), &spin_cm).await?;
        // Let the attack get going before the measurement starts.
        tokio::time::sleep(Duration::from_secs(2)).await;
        Ok(Attackers { controllers, namespaces: vec![hostile_ns, spin_ns] })
    }
}
