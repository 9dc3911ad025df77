//! Section 5a: event → reconcile start, in-process, against the real API server.
//!
//! A `Controller` runs a no-op native reconciler for ConfigMaps in one namespace. A load
//! generator patches those ConfigMaps at `rate` writes/s (rotating over `keys` of them, so a key
//! is rarely written twice before it is reconciled). Two latencies per event:
//! - **event → reconcile start** (the host's own latency: cache update, handlers, queue, a worker
//!   picking the key, the blocking-thread hop): from the informer delivering the change to our
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
use wasmloop::actions::Executor;
use wasmloop::cache::{CacheRead, CachedObject};
use wasmloop::controller::{Controller, ControllerConfig, ControllerMetrics, Outcome, ReconcileError, Reconciler, ReconcilerSpec, Request};
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
    #[arg(long)]
    pub out: PathBuf,
}

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Results {
    pub target_rate: u32,
    pub seconds: u64,
    pub keys: usize,
    pub workers: usize,
    pub writes: u64,
    /// Writes per second actually sent.
    pub write_rate: f64,
    /// Events the informer delivered during the load, per second.
    pub event_rate: f64,
    pub events: usize,
    pub reconciles_measured: usize,
    pub event_to_reconcile_us: Summary,
    pub write_to_event_ms: Summary,
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
    fn reconcile(&self, request: &Request, _cache: &dyn CacheRead) -> Result<Outcome, ReconcileError> {
        let now = Instant::now();
        if let Some(t) = self.pending.lock().remove(&request.key.name) {
            self.samples.lock().push((now - t).as_secs_f64() * 1e6);
        }
        Ok(Outcome::default())
    }
}

pub async fn run(args: Args) -> Result<Results> {
    let client = kube_util::client(&args.kubeconfig).await?;
    let ns = format!("bench-latency-{}", std::process::id());
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
    let delivered: Arc<Mutex<Vec<(Arc<CachedObject>, Instant)>>> = Default::default();
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
        },
        pending: pending.clone(),
        samples: Mutex::new(Vec::new()),
    });
    let config = ControllerConfig { namespace: Some(ns.clone()), workers: args.workers, ..Default::default() };
    let controller = Controller::start(probe.clone(), config, Arc::new(Grants::all()), registry.clone(), executor, ControllerMetrics::unregistered())
        .await
        .context("starting the probe controller")?;
    // Let the initial reconciles of every key pass, then start from a clean slate.
    tokio::time::sleep(Duration::from_secs(1)).await;
    pending.lock().clear();
    delivered.lock().clear();
    probe.samples.lock().clear();

    let sends: Arc<Mutex<HashMap<u64, Instant>>> = Default::default();
    let failures = Arc::new(AtomicU64::new(0));
    let total = args.rate as u64 * args.seconds;
    let permits = Arc::new(tokio::sync::Semaphore::new(args.inflight));
    let start = Instant::now();
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
    kube_util::wait_until("every event reconciled", Duration::from_secs(60), Duration::from_millis(20), || {
        let pending = pending.clone();
        async move { Ok(pending.lock().is_empty()) }
    })
    .await?;
    let load_time = start.elapsed();
    controller.shutdown(Duration::from_secs(5)).await;

    let delivered = std::mem::take(&mut *delivered.lock());
    let sends = sends.lock();
    let mut write_to_event = Vec::new();
    for (obj, at) in &delivered {
        let seq: Option<u64> = obj.value()["data"]["seq"].as_str().and_then(|s| s.parse().ok());
        if let Some(sent_at) = seq.and_then(|s| sends.get(&s)) {
            write_to_event.push((*at - *sent_at).as_secs_f64() * 1e3);
        }
    }
    let samples = std::mem::take(&mut *probe.samples.lock());
    let _ = kube_util::delete_namespace(&client, &ns).await;
    let results = Results {
        target_rate: args.rate,
        seconds: args.seconds,
        keys: args.keys,
        workers: args.workers,
        writes: sent,
        write_rate: sent as f64 / send_time.as_secs_f64(),
        event_rate: delivered.len() as f64 / load_time.as_secs_f64(),
        events: delivered.len(),
        reconciles_measured: samples.len(),
        event_to_reconcile_us: Summary::of(&samples).context("no reconcile was measured")?,
        write_to_event_ms: Summary::of(&write_to_event).context("no event matched a write")?,
    };
    eprintln!(
        "latency: {} writes at {:.0}/s, {} events, event→reconcile p50 {:.0} µs p99 {:.0} µs, write→event p50 {:.1} ms",
        results.writes, results.write_rate, results.events, results.event_to_reconcile_us.median, results.event_to_reconcile_us.p99,
        results.write_to_event_ms.median
    );
    Ok(results)
}
