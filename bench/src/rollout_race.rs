//! Section 10: the rollout race. `deployments` × `replicas` Deployments on the real API server
//! are created, then all their images changed, under kube-controller-manager's Deployment and
//! ReplicaSet controllers and under the wasmloop host running the `deployment` and `replicaset`
//! plugins, in turn, alternating, a fresh namespace per run. Nothing runs Pods in this control
//! plane: the simulated kubelet of `wasmloop_tests::kubelet` binds them, reports them Running and
//! Ready, and removes deleted ones, the same for both contestants.
//!
//! Each run records, from the first image change, when every rollout is complete (as `kubectl
//! rollout status` sees it: the new generation observed, every replica updated and available,
//! no old one left), the controller's CPU over that span and its resident memory a little
//! after; and, before, from the first create to every Deployment available.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::apps::v1::Deployment;
use kube::Client;
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
use kube::runtime::watcher::{self, Event};
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use tokio::sync::Semaphore;
use wasmloop_tests::kubelet::{Kubelet, KubeletConfig};

use crate::controllers::{HostArgs, PeerControlPlane, control_plane_pids, kcm_race_flags, with_host, with_kcm};
use crate::convergence::HostProfile;
use crate::kube_util::{self, apply_plugin, delete_workload, ensure_namespace};
use crate::procfs;

/// Namespace of the plugin ConfigMaps the host loads in this section (its own: the other
/// sections' hosts load only the replicaset plugin).
pub const PLUGIN_NAMESPACE: &str = "wasmloop-bench-rollout";
/// The contestants, in the order they run within a round.
pub const CONTROLLERS: [&str; 2] = ["kcm", "wasmloop"];
/// Creates and image changes the driver keeps in flight.
const INFLIGHT: usize = 16;

#[derive(clap::Args, Debug, Clone)]
pub struct Args {
    #[arg(long)]
    pub kubeconfig: PathBuf,
    #[command(flatten)]
    pub peer: PeerControlPlane,
    /// The wasmloop binary (`wasmloop run`).
    #[arg(long)]
    pub host_bin: PathBuf,
    /// How the host binary was built (reported).
    #[arg(long, default_value = "release")]
    pub host_profile: String,
    /// The replicaset plugin component and its admin manifest.
    #[arg(long)]
    pub replicaset_plugin: PathBuf,
    #[arg(long)]
    pub replicaset_manifest: PathBuf,
    /// The deployment plugin component and its admin manifest.
    #[arg(long)]
    pub deployment_plugin: PathBuf,
    #[arg(long)]
    pub deployment_manifest: PathBuf,
    /// Logs and the precompiled-plugin directory go here.
    #[arg(long)]
    pub work_dir: PathBuf,
    /// Runs per controller (alternating kcm, wasmloop, kcm, ...).
    #[arg(long, default_value_t = 3)]
    pub runs: usize,
    #[arg(long, default_value_t = 100)]
    pub deployments: usize,
    #[arg(long, default_value_t = 10)]
    pub replicas: i32,
    /// How long after the kubelet starts a Pod it reports it ready.
    #[arg(long, default_value_t = 0)]
    pub ready_after_ms: u64,
    /// Give up on a phase of a run after this many seconds.
    #[arg(long, default_value_t = 300)]
    pub timeout_secs: u64,
    #[arg(long)]
    pub out: PathBuf,
}

/// The flags kube-controller-manager runs with: its two controllers, the plugins' client budget.
pub fn kcm_flags() -> Vec<String> {
    kcm_race_flags("deployment,replicaset")
}

/// One run of one controller.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Run {
    /// `kcm` or `wasmloop`.
    pub controller: String,
    pub run: usize,
    pub namespace: String,
    /// Start → ready (caches synced; the host: plugins loaded), seconds. Not part of the race.
    pub ready_s: f64,
    /// First create → every Deployment complete at its first revision, seconds.
    pub create_s: f64,
    /// First image change → every rollout complete, seconds: the race.
    pub rollout_s: f64,
    /// Controller CPU (user + system) over the rollout.
    pub cpu_s: f64,
    /// Controller VmRSS 2 s after the rollout, bytes.
    pub rss_bytes: u64,
    /// CPU of the API server and etcd over the rollout.
    pub apiserver_cpu_s: f64,
    pub etcd_cpu_s: f64,
    /// The host's own metrics over the rollout (wasmloop runs only).
    pub host: Option<HostProfile>,
}

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Results {
    pub deployments: usize,
    pub replicas: i32,
    pub ready_after_ms: u64,
    pub kcm_flags: Vec<String>,
    pub host_profile: String,
    pub manifests: Vec<String>,
    pub runs: Vec<Run>,
}

impl Results {
    /// The runs of one controller, in order.
    pub fn runs_of(&self, controller: &str) -> Vec<&Run> {
        self.runs.iter().filter(|r| r.controller == controller).collect()
    }
}

/// The Deployment of the race: `replicas` copies of one small container at `version`.
pub fn deployment(name: &str, replicas: i32, version: &str) -> Value {
    json!({
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": name, "labels": {"app": name, "bench": "rollout"}},
        "spec": {"replicas": replicas, "selector": {"matchLabels": {"app": name}}, "template": template(name, version)},
    })
}

fn template(name: &str, version: &str) -> Value {
    json!({"metadata": {"labels": {"app": name, "bench": "rollout"}},
           "spec": {"containers": [{"name": "web", "image": format!("registry.example/shop/web:{version}"),
                                     "resources": {"requests": {"cpu": "10m", "memory": "16Mi"}}}]}})
}

pub async fn run(args: Args) -> Result<Results> {
    std::fs::create_dir_all(&args.work_dir)?;
    let client = kube_util::client(&args.kubeconfig).await?;
    ensure_namespace(&client, PLUGIN_NAMESPACE).await?;
    let mut manifests = Vec::new();
    for (name, plugin, manifest) in [
        ("replicaset", &args.replicaset_plugin, &args.replicaset_manifest),
        ("deployment", &args.deployment_plugin, &args.deployment_manifest),
    ] {
        let wasm = std::fs::read(plugin).with_context(|| format!("reading {}", plugin.display()))?;
        let text = std::fs::read_to_string(manifest).with_context(|| format!("reading {}", manifest.display()))?;
        apply_plugin(&client, PLUGIN_NAMESPACE, name, &wasm, &text).await?;
        manifests.push(text);
    }
    let precompiled = args.work_dir.join("precompiled");
    let tag = std::process::id();
    let cp_pids = control_plane_pids(&args.peer.control_plane_dir)?;
    let mut runs = Vec::new();
    for i in 0..args.runs {
        for controller in CONTROLLERS {
            let ns = format!("bench-rollout-{tag}-{i}-{controller}");
            ensure_namespace(&client, &ns).await?;
            let result = if controller == "kcm" {
                let log = args.work_dir.join(format!("kcm-rollout-{i}.log"));
                with_kcm(&args.peer, &kcm_flags(), &log, async |pid| race(&client, &ns, &args, pid, &cp_pids, None).await).await
            } else {
                let host_args = HostArgs {
                    bin: &args.host_bin,
                    kubeconfig: &args.kubeconfig,
                    plugin_namespace: PLUGIN_NAMESPACE,
                    precompiled_dir: &precompiled,
                    log: args.work_dir.join(format!("wasmloop-rollout-{i}.log")),
                    extra: &[],
                };
                with_host(host_args, async |pid, port| race(&client, &ns, &args, pid, &cp_pids, Some(port)).await).await
            }
            .map(|(ready_s, r)| Run { ready_s, ..r });
            let result = result.with_context(|| format!("run {i} with {controller} in namespace {ns}"))?;
            eprintln!(
                "rollout-race: run {i} {controller:<8} create {:.2} s, rollout {:.2} s, cpu {:.2} s, rss {:.0} MiB",
                result.create_s,
                result.rollout_s,
                result.cpu_s,
                result.rss_bytes as f64 / 1048576.0
            );
            runs.push(Run { controller: controller.to_string(), run: i, namespace: ns.clone(), ..result });
            Api::<Deployment>::namespaced(client.clone(), &ns)
                .delete_collection(&DeleteParams::background(), &ListParams::default())
                .await?;
            delete_workload(&client, &ns, Duration::from_secs(180)).await?;
        }
    }
    Ok(Results {
        deployments: args.deployments,
        replicas: args.replicas,
        ready_after_ms: args.ready_after_ms,
        kcm_flags: kcm_flags(),
        host_profile: args.host_profile,
        manifests,
        runs,
    })
}

/// What the driver knows of each Deployment: the generation it waits for, and whether the
/// status says that generation is rolled out.
#[derive(Default)]
struct Progress {
    target: HashMap<String, i64>,
    complete: HashMap<String, bool>,
}

impl Progress {
    fn observe(&mut self, d: &Deployment) {
        let name = d.metadata.name.clone().unwrap_or_default();
        let target = self.target.get(&name).copied().unwrap_or(1);
        self.complete.insert(name, rolled_out(d, target));
    }

    fn all_complete(&self, n: usize) -> bool {
        self.complete.values().filter(|c| **c).count() == n
    }
}

/// `kubectl rollout status`'s view: generation `target` observed, every replica updated and
/// available, none of an old ReplicaSet left.
fn rolled_out(d: &Deployment, target: i64) -> bool {
    let desired = d.spec.as_ref().and_then(|s| s.replicas).unwrap_or(1);
    let Some(s) = &d.status else { return false };
    s.observed_generation.unwrap_or(0) >= target
        && s.updated_replicas.unwrap_or(0) == desired
        && s.replicas.unwrap_or(0) == desired
        && s.available_replicas.unwrap_or(0) == desired
}

/// Create the Deployments, wait for them, change every image, wait for the rollouts.
async fn race(client: &Client, ns: &str, args: &Args, pid: u32, cp_pids: &[u32; 2], metrics_port: Option<u16>) -> Result<Run> {
    let api = Api::<Deployment>::namespaced(client.clone(), ns);
    let ready_after = Duration::from_millis(args.ready_after_ms);
    let kubelet =
        Kubelet::start(client.clone(), Some(ns), KubeletConfig { concurrency: 64, ..KubeletConfig::ready_after(ready_after) }).await?;
    let mut events = watcher::watcher(api.clone(), watcher::Config::default()).boxed();
    loop {
        match tokio::time::timeout(Duration::from_secs(30), events.try_next()).await {
            Ok(Ok(Some(Event::InitDone))) => break,
            Ok(Ok(Some(_))) => {}
            Ok(Ok(None)) => bail!("the Deployment watch ended before its initial list"),
            Ok(Err(e)) => bail!("the Deployment watch failed: {e}"),
            Err(_) => bail!("the Deployment watch did not list in 30 s"),
        }
    }
    let names: Vec<String> = (0..args.deployments).map(|i| format!("web-{i}")).collect();
    let timeout = Duration::from_secs(args.timeout_secs);
    let progress = Arc::new(parking_lot::Mutex::new(Progress::default()));

    // Create, and wait until every Deployment is available at its first revision.
    let t_create = Instant::now();
    let permits = Arc::new(Semaphore::new(INFLIGHT));
    let creates = futures::future::try_join_all(names.iter().map(|name| {
        let (api, permits) = (api.clone(), permits.clone());
        async move {
            let _p = permits.acquire().await?;
            let d: Deployment = serde_json::from_value(deployment(name, args.replicas, "1"))?;
            api.create(&PostParams::default(), &d).await.with_context(|| format!("creating Deployment {name}"))?;
            anyhow::Ok(())
        }
    }));
    let mut events = wait_all(events, creates, &progress, args.deployments, timeout, "the Deployments available").await?;
    let create_s = t_create.elapsed().as_secs_f64();
    tokio::time::sleep(Duration::from_secs(1)).await;

    // The race: change every image, wait until every rollout is complete.
    let host0 = metrics_port.map(HostProfile::scrape).transpose()?;
    let cpu0 = procfs::cpu_seconds(pid)?;
    let cp0 = [procfs::cpu_seconds(cp_pids[0])?, procfs::cpu_seconds(cp_pids[1])?];
    let t0 = Instant::now();
    let patches = futures::future::try_join_all(names.iter().map(|name| {
        let (api, permits, progress) = (api.clone(), permits.clone(), progress.clone());
        async move {
            let _p = permits.acquire().await?;
            let patch = json!({"spec": {"template": template(name, "2")}});
            let d = api.patch(name, &PatchParams::default(), &Patch::Merge(patch)).await.with_context(|| format!("changing {name}"))?;
            let mut p = progress.lock();
            p.target.insert(name.clone(), d.metadata.generation.unwrap_or(2));
            p.complete.insert(name.clone(), false);
            anyhow::Ok(())
        }
    }));
    events = wait_all(events, patches, &progress, args.deployments, timeout, "every rollout complete").await?;
    let rollout_s = t0.elapsed().as_secs_f64();
    let cpu1 = procfs::cpu_seconds(pid)?;
    let cp1 = [procfs::cpu_seconds(cp_pids[0])?, procfs::cpu_seconds(cp_pids[1])?];
    let host = match (metrics_port, &host0) {
        (Some(port), Some(before)) => Some(HostProfile::scrape(port)?.minus(before)),
        _ => None,
    };
    drop(events);
    tokio::time::sleep(Duration::from_secs(2)).await;
    let rss_bytes = procfs::settled_rss(pid, 5, Duration::from_millis(200))?;
    kubelet.shutdown().await?;
    Ok(Run {
        controller: String::new(),
        run: 0,
        namespace: ns.to_string(),
        ready_s: f64::NAN,
        create_s,
        rollout_s,
        cpu_s: cpu1 - cpu0,
        rss_bytes,
        apiserver_cpu_s: cp1[0] - cp0[0],
        etcd_cpu_s: cp1[1] - cp0[1],
        host,
    })
}

type Events = futures::stream::BoxStream<'static, Result<Event<Deployment>, watcher::Error>>;

/// Drive `writes` while following the Deployment watch, until `n` Deployments are complete.
async fn wait_all(
    mut events: Events,
    writes: impl std::future::Future<Output = Result<Vec<()>>>,
    progress: &parking_lot::Mutex<Progress>,
    n: usize,
    timeout: Duration,
    what: &str,
) -> Result<Events> {
    let deadline = tokio::time::Instant::now() + timeout;
    let mut writes = std::pin::pin!(writes);
    let mut written = false;
    loop {
        tokio::select! {
            done = &mut writes, if !written => {
                done?;
                written = true;
            }
            ev = events.try_next() => match ev {
                Ok(Some(Event::Apply(d) | Event::InitApply(d))) => progress.lock().observe(&d),
                Ok(Some(_)) => {}
                Ok(None) => bail!("the Deployment watch ended"),
                Err(e) => bail!("the Deployment watch failed: {e}"),
            },
            () = tokio::time::sleep_until(deadline) => {
                let p = progress.lock();
                bail!("not done after {timeout:?} waiting for {what}: {} of {n} complete", p.complete.values().filter(|c| **c).count());
            }
        }
        if written && progress.lock().all_complete(n) {
            return Ok(events);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rolled_out_means_observed_updated_and_available() {
        let d = |generation: i64, updated: i32, replicas: i32, available: i32| -> Deployment {
            serde_json::from_value(json!({"metadata": {"name": "web-0", "generation": 2}, "spec": {"replicas": 10},
                "status": {"observedGeneration": generation, "updatedReplicas": updated, "replicas": replicas, "availableReplicas": available}}))
            .unwrap()
        };
        assert!(rolled_out(&d(2, 10, 10, 10), 2));
        assert!(!rolled_out(&d(1, 10, 10, 10), 2), "an older generation");
        assert!(!rolled_out(&d(2, 10, 13, 10), 2), "old Pods left");
        assert!(!rolled_out(&d(2, 10, 10, 9), 2), "one unavailable");
        assert!(!rolled_out(&d(2, 7, 10, 10), 2), "not all updated");
    }
}
