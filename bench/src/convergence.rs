//! Section 1: convergence against the real peer. `replicasets` × `replicas` on the real API
//! server, driven against kube-controller-manager's ReplicaSet controller, the wasmloop host
//! binary running the `replicaset` plugin, and the **floor**, in turn, a fresh namespace per
//! run. The floor has no controller: the driver itself sends what a controller must send (each
//! ReplicaSet's Pods as soon as its create returns, then one status write), `floor_inflight`
//! requests at once, so no controller can converge faster on this machine and API server.
//! Each run records, from the first ReplicaSet create: when the last ReplicaSet was created,
//! when all Pods existed, when every status read `replicas`; the controller's CPU time over
//! that span and its resident memory a little after.

use std::collections::{HashMap, HashSet};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::apps::v1::ReplicaSet;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, Patch, PatchParams, PostParams};
use kube::runtime::watcher::{self, Event};
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use tokio::sync::Semaphore;

use crate::controllers::{HostArgs, HostUnderTest, PeerControlPlane, control_plane_pids, kcm_race_flags, with_host, with_kcm};
use crate::fixtures;
use crate::kube_util::{self, apply_plugin, delete_workload, ensure_namespace};
use crate::procfs;

/// Namespace of the plugin ConfigMap the host loads in this section.
pub const PLUGIN_NAMESPACE: &str = "wasmloop-bench";

#[derive(clap::Args, Debug, Clone)]
pub struct Args {
    #[command(flatten)]
    pub host: HostUnderTest,
    #[command(flatten)]
    pub peer: PeerControlPlane,
    /// How the host binary was built (reported).
    #[arg(long, default_value = "release")]
    pub host_profile: String,
    /// Runs per controller (alternating kcm, wasmloop, kcm, ...).
    #[arg(long, default_value_t = 5)]
    pub runs: usize,
    #[arg(long, default_value_t = 100)]
    pub replicasets: usize,
    #[arg(long, default_value_t = 10)]
    pub replicas: u32,
    /// Requests the floor's driver keeps in flight (Pod creates and status writes together).
    #[arg(long, default_value_t = 64)]
    pub floor_inflight: usize,
    /// Give up on a run after this many seconds.
    #[arg(long, default_value_t = 180)]
    pub timeout_secs: u64,
    #[arg(long)]
    pub out: PathBuf,
}

/// The flags kube-controller-manager runs with (the issue's).
pub fn kcm_flags() -> Vec<String> {
    kcm_race_flags("replicaset")
}

/// The contestants, in the order they run within a round.
pub const CONTROLLERS: [&str; 3] = ["kcm", "wasmloop", FLOOR];
/// The controller-less run: the driver sends the Pods and statuses itself.
pub const FLOOR: &str = "floor";
/// ReplicaSet creates the driver keeps in flight, in every run.
pub const RS_INFLIGHT: usize = 16;

/// One run of one controller.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Run {
    /// `kcm`, `wasmloop` or `floor`.
    pub controller: String,
    pub run: usize,
    pub namespace: String,
    /// Start → ready (informers synced; the host: plugins loaded), seconds. Not part of the race.
    pub ready_s: f64,
    /// First create → last ReplicaSet created (the driver's part), seconds.
    pub created_s: f64,
    /// First create → all Pods exist.
    pub pods_s: f64,
    /// First create → every ReplicaSet's status.replicas reads the target.
    pub status_s: f64,
    /// Controller CPU (user + system) from the first create to converged statuses (the floor:
    /// the driver's, which also watches).
    pub cpu_s: f64,
    /// Controller VmRSS 2 s after convergence, bytes (0 for the floor).
    pub rss_bytes: u64,
    /// Most Pods seen at once (more than the target means surplus creates).
    pub max_pods: usize,
    /// `RssAnon` / `RssFile` at the same moment as `rss_bytes`.
    pub rss_anon_bytes: u64,
    pub rss_file_bytes: u64,
    /// CPU of the API server and etcd over the same span as `cpu_s`.
    pub apiserver_cpu_s: f64,
    pub etcd_cpu_s: f64,
    /// The host's own metrics at the end of the run (wasmloop runs only).
    pub host: Option<HostProfile>,
}

/// From the host's `/metrics`, from the first create to converged statuses: where its time went.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct HostProfile {
    pub reconciles: f64,
    /// Σ reconcile time (plugin call + executing its actions), seconds.
    pub reconcile_seconds: f64,
    /// Σ time keys waited in the queue before a worker took them, seconds.
    pub queue_wait_seconds: f64,
    pub queue_adds: f64,
    pub plugin_calls: f64,
    pub creates: f64,
    pub deletes: f64,
    pub status_updates: f64,
    pub failed_actions: f64,
}

impl HostProfile {
    /// Read the host's `/metrics` on `port` (every controller's samples summed).
    pub fn scrape(port: u16) -> Result<Self> {
        let text = kube_util::http_get(port, "/metrics")?;
        let m = |name: &str, with: &[&str]| kube_util::metric_sum(&text, name, with);
        let p = Self {
            reconciles: m("controller_runtime_reconcile_total", &[]),
            reconcile_seconds: m("controller_runtime_reconcile_time_seconds_sum", &[]),
            queue_wait_seconds: m("workqueue_queue_duration_seconds_sum", &[]),
            queue_adds: m("workqueue_adds_total", &[]),
            plugin_calls: m("wasmloop_plugin_calls_total", &[]),
            creates: m("wasmloop_actions_total", &["verb=\"create\"", "result=\"ok\""]),
            deletes: m("wasmloop_actions_total", &["verb=\"delete\"", "result=\"ok\""]),
            status_updates: m("wasmloop_actions_total", &["verb=\"update-status\"", "result=\"ok\""]),
            failed_actions: m("wasmloop_actions_total", &["result=\"error\""]),
        };
        Ok(p)
    }

    /// What happened since `before`.
    pub fn minus(&self, before: &Self) -> Self {
        Self {
            reconciles: self.reconciles - before.reconciles,
            reconcile_seconds: self.reconcile_seconds - before.reconcile_seconds,
            queue_wait_seconds: self.queue_wait_seconds - before.queue_wait_seconds,
            queue_adds: self.queue_adds - before.queue_adds,
            plugin_calls: self.plugin_calls - before.plugin_calls,
            creates: self.creates - before.creates,
            deletes: self.deletes - before.deletes,
            status_updates: self.status_updates - before.status_updates,
            failed_actions: self.failed_actions - before.failed_actions,
        }
    }
}

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Results {
    pub replicasets: usize,
    pub replicas: u32,
    pub kcm_flags: Vec<String>,
    pub host_profile: String,
    pub plugin_manifest: String,
    /// Requests the floor's driver kept in flight.
    #[serde(default)]
    pub floor_inflight: usize,
    pub runs: Vec<Run>,
}

impl Results {
    /// The runs of one controller, in order.
    pub fn runs_of(&self, controller: &str) -> Vec<&Run> {
        self.runs.iter().filter(|r| r.controller == controller).collect()
    }

    /// Pods the workload converges to.
    pub fn target_pods(&self) -> usize {
        self.replicasets * self.replicas as usize
    }
}

pub async fn run(args: Args) -> Result<Results> {
    std::fs::create_dir_all(&args.host.work_dir)?;
    let client = kube_util::client(&args.host.kubeconfig).await?;
    let wasm = std::fs::read(&args.host.plugin).with_context(|| format!("reading {}", args.host.plugin.display()))?;
    let manifest = std::fs::read_to_string(&args.host.manifest).with_context(|| format!("reading {}", args.host.manifest.display()))?;
    ensure_namespace(&client, PLUGIN_NAMESPACE).await?;
    apply_plugin(&client, PLUGIN_NAMESPACE, "replicaset", &wasm, &manifest).await?;
    let precompiled = args.host.work_dir.join("precompiled");
    let tag = std::process::id();
    let cp_pids = control_plane_pids(&args.peer.control_plane_dir)?;
    let mut runs = Vec::new();
    for i in 0..args.runs {
        for controller in CONTROLLERS {
            let ns = format!("bench-conv-{tag}-{i}-{controller}");
            ensure_namespace(&client, &ns).await?;
            let result = match controller {
                "kcm" => {
                    let log = args.host.work_dir.join(format!("kcm-{i}.log"));
                    let measure = async |pid| drive(&client, &ns, &args, Driver::Watch, pid, &cp_pids, None).await;
                    with_kcm(&args.peer, &kcm_flags(), &log, measure).await.map(|(ready_s, r)| Run { ready_s, ..r })
                }
                FLOOR => {
                    let r = drive(&client, &ns, &args, Driver::Floor, std::process::id(), &cp_pids, None).await;
                    r.map(|r| Run { ready_s: 0.0, rss_bytes: 0, rss_anon_bytes: 0, rss_file_bytes: 0, ..r })
                }
                _ => {
                    let host_args = HostArgs {
                        bin: &args.host.host_bin,
                        kubeconfig: &args.host.kubeconfig,
                        plugin_namespace: PLUGIN_NAMESPACE,
                        precompiled_dir: &precompiled,
                        log: args.host.work_dir.join(format!("wasmloop-{i}.log")),
                        extra: &[],
                    };
                    let measure = async |pid, port| drive(&client, &ns, &args, Driver::Watch, pid, &cp_pids, Some(port)).await;
                    with_host(host_args, measure).await.map(|(ready_s, r)| Run { ready_s, ..r })
                }
            };
            let result = result.with_context(|| format!("run {i} with {controller} in namespace {ns}"))?;
            eprintln!(
                "convergence: run {i} {controller:<8} pods {:.2} s, statuses {:.2} s, cpu {:.2} s, rss {:.0} MiB",
                result.pods_s,
                result.status_s,
                result.cpu_s,
                result.rss_bytes as f64 / 1048576.0
            );
            runs.push(Run { controller: controller.to_string(), run: i, namespace: ns.clone(), ..result });
            delete_workload(&client, &ns, Duration::from_secs(120)).await?;
        }
    }
    Ok(Results {
        replicasets: args.replicasets,
        replicas: args.replicas,
        kcm_flags: kcm_flags(),
        host_profile: args.host_profile,
        plugin_manifest: manifest,
        floor_inflight: args.floor_inflight,
        runs,
    })
}

enum Seen {
    Pod(Event<Pod>),
    Rs(Event<ReplicaSet>),
    Created(Result<Duration>),
}

/// What the driver does besides creating the ReplicaSets.
#[derive(Clone, Copy, PartialEq)]
enum Driver {
    /// Only watch: a controller does the rest.
    Watch,
    /// Also send each ReplicaSet's Pods and status itself (the floor).
    Floor,
}

/// Create the workload in `ns` and watch it converge; `pid` is the controller's process.
async fn drive(
    client: &kube::Client,
    ns: &str,
    args: &Args,
    driver: Driver,
    pid: u32,
    cp_pids: &[u32; 2],
    metrics_port: Option<u16>,
) -> Result<Run> {
    let (replicasets, replicas) = (args.replicasets, args.replicas);
    let timeout = Duration::from_secs(args.timeout_secs);
    let pods_api = Api::<Pod>::namespaced(client.clone(), ns);
    let rs_api = Api::<ReplicaSet>::namespaced(client.clone(), ns);
    let mut pods = watcher::watcher(pods_api, watcher::Config::default()).map_ok(Seen::Pod).boxed();
    let mut rss = watcher::watcher(rs_api.clone(), watcher::Config::default()).map_ok(Seen::Rs).boxed();
    // Both watches established (initial lists done) before the clock starts.
    for stream in [&mut pods, &mut rss] {
        loop {
            match tokio::time::timeout(Duration::from_secs(30), stream.try_next()).await {
                Ok(Ok(Some(Seen::Pod(Event::InitDone)))) | Ok(Ok(Some(Seen::Rs(Event::InitDone)))) => break,
                Ok(Ok(Some(_))) => {}
                Ok(Ok(None)) => bail!("watch ended before its initial list"),
                Ok(Err(e)) => bail!("watch failed: {e}"),
                Err(_) => bail!("watch did not list in 30 s"),
            }
        }
    }
    let target = replicasets * replicas as usize;
    let host0 = metrics_port.map(HostProfile::scrape).transpose()?;
    let cpu0 = procfs::cpu_seconds(pid)?;
    let cp0 = [procfs::cpu_seconds(cp_pids[0])?, procfs::cpu_seconds(cp_pids[1])?];
    let t0 = Instant::now();
    let create = {
        let (rs_api, pods_api) = (rs_api.clone(), Api::<Pod>::namespaced(client.clone(), ns));
        let (rs_permits, permits) = (Arc::new(Semaphore::new(RS_INFLIGHT)), Arc::new(Semaphore::new(args.floor_inflight)));
        async move {
            let created: Vec<Duration> = futures::stream::iter(0..replicasets)
                .map(|i| {
                    let (rs_api, pods_api, rs_permits, permits) = (rs_api.clone(), pods_api.clone(), rs_permits.clone(), permits.clone());
                    async move {
                        let name = format!("web-{i}");
                        let spec = fixtures::replicaset_spec(&name, replicas);
                        let rs: ReplicaSet = serde_json::from_value(spec.clone())?;
                        let rs = {
                            let _permit = rs_permits.acquire().await?;
                            rs_api.create(&PostParams::default(), &rs).await.with_context(|| format!("creating ReplicaSet {name}"))?
                        };
                        let created = t0.elapsed();
                        if driver == Driver::Floor {
                            floor_replicaset(&rs_api, &pods_api, &permits, &spec, &rs, replicas).await?;
                        }
                        anyhow::Ok(created)
                    }
                })
                .buffer_unordered(replicasets.max(1))
                .try_collect()
                .await?;
            Ok(created.into_iter().max().unwrap_or_default())
        }
    };
    let created = futures::stream::once(create).map(|r| Ok::<_, watcher::Error>(Seen::Created(r)));
    let mut events = futures::stream::select(futures::stream::select(pods, rss), created.boxed());

    let mut pod_names: HashSet<String> = HashSet::new();
    let mut statuses: HashMap<String, i32> = HashMap::new();
    let (mut created_at, mut pods_at, mut status_at) = (None, None, None);
    let mut max_pods = 0;
    let (mut cpu1, mut cp1) = (cpu0, cp0);
    let mut host = None;
    let deadline = t0 + timeout;
    while pods_at.is_none() || status_at.is_none() || created_at.is_none() {
        let left = deadline.saturating_duration_since(Instant::now());
        let next = match tokio::time::timeout(left, events.next()).await {
            Ok(Some(Ok(ev))) => ev,
            Ok(Some(Err(e))) => bail!("watch failed: {e}"),
            Ok(None) => bail!("watch streams ended"),
            Err(_) => bail!(
                "not converged after {timeout:?}: {} of {target} Pods, {} of {replicasets} statuses at {replicas}",
                pod_names.len(),
                statuses.values().filter(|r| **r == replicas as i32).count()
            ),
        };
        match next {
            Seen::Created(r) => created_at = Some(r?),
            Seen::Pod(Event::Apply(p) | Event::InitApply(p)) => {
                pod_names.insert(p.metadata.name.unwrap_or_default());
            }
            Seen::Pod(Event::Delete(p)) => {
                pod_names.remove(&p.metadata.name.unwrap_or_default());
            }
            Seen::Rs(Event::Apply(rs) | Event::InitApply(rs)) => {
                let n = rs.status.map(|s| s.replicas).unwrap_or(0);
                statuses.insert(rs.metadata.name.unwrap_or_default(), n);
            }
            Seen::Rs(Event::Delete(rs)) => {
                statuses.remove(&rs.metadata.name.unwrap_or_default());
            }
            Seen::Pod(_) | Seen::Rs(_) => {}
        }
        max_pods = max_pods.max(pod_names.len());
        if pods_at.is_none() && pod_names.len() >= target {
            pods_at = Some(t0.elapsed());
        }
        if status_at.is_none() && statuses.len() == replicasets && statuses.values().all(|r| *r == replicas as i32) {
            status_at = Some(t0.elapsed());
            cpu1 = procfs::cpu_seconds(pid)?;
            cp1 = [procfs::cpu_seconds(cp_pids[0])?, procfs::cpu_seconds(cp_pids[1])?];
            if let (Some(port), Some(before)) = (metrics_port, &host0) {
                let p = HostProfile::scrape(port)?.minus(before);
                anyhow::ensure!(p.reconciles > 0.0, "the host's /metrics counted no reconcile (metric names changed?)");
                host = Some(p);
            }
        }
    }
    tokio::time::sleep(Duration::from_secs(2)).await;
    let rss_bytes = procfs::settled_rss(pid, 5, Duration::from_millis(200))?;
    let [rss_anon_bytes, rss_file_bytes, _] = procfs::rss_parts(pid)?;
    let secs = |d: Option<Duration>| d.map(|d| d.as_secs_f64()).unwrap_or(f64::NAN);
    Ok(Run {
        controller: String::new(),
        run: 0,
        namespace: ns.to_string(),
        ready_s: f64::NAN,
        created_s: secs(created_at),
        pods_s: secs(pods_at),
        status_s: secs(status_at),
        cpu_s: cpu1 - cpu0,
        rss_bytes,
        max_pods,
        rss_anon_bytes,
        rss_file_bytes,
        apiserver_cpu_s: cp1[0] - cp0[0],
        etcd_cpu_s: cp1[1] - cp0[1],
        host,
    })
}

/// The floor's work for one created ReplicaSet: its Pods as the ReplicaSet controller creates
/// them (template, `generateName`, controller reference), all at once within the shared
/// `permits`, then one status write with what KCM writes.
async fn floor_replicaset(
    rs_api: &Api<ReplicaSet>,
    pods_api: &Api<Pod>,
    permits: &Semaphore,
    spec: &Value,
    rs: &ReplicaSet,
    replicas: u32,
) -> Result<()> {
    let name = rs.metadata.name.as_deref().context("created ReplicaSet has no name")?;
    let uid = rs.metadata.uid.as_deref().context("created ReplicaSet has no uid")?;
    let template = &spec["spec"]["template"];
    let pod: Pod = serde_json::from_value(json!({
        "metadata": {
            "generateName": format!("{name}-"),
            "labels": template["metadata"]["labels"],
            "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": name, "uid": uid,
                                 "controller": true, "blockOwnerDeletion": true}],
        },
        "spec": template["spec"],
    }))?;
    futures::future::try_join_all((0..replicas).map(|_| async {
        let _permit = permits.acquire().await?;
        pods_api.create(&PostParams::default(), &pod).await.with_context(|| format!("creating a Pod of {name}"))?;
        anyhow::Ok(())
    }))
    .await?;
    let status = json!({"status": {"replicas": replicas, "fullyLabeledReplicas": replicas, "observedGeneration": rs.metadata.generation}});
    let _permit = permits.acquire().await?;
    rs_api
        .patch_status(name, &PatchParams::default(), &Patch::Merge(&status))
        .await
        .with_context(|| format!("writing the status of {name}"))?;
    Ok(())
}
