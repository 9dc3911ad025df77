//! Section 3b: the cache from 1 000 to 100 000 Pods, side by side with kube-controller-manager.
//!
//! The API server is filled with realistic Pods (section 3's cache figure: as a ReplicaSet creates them, 10 per
//! owner, bound to 50 node names; the owners do not exist, so neither controller has work: what is measured is holding the Pods),
//! then at every size both controllers start fresh in turn, alternating which goes first: the
//! host (`wasmloop run` with the replicaset plugin, which watches every Pod) until `/readyz` (its
//! informers listed and synced), kube-controller-manager (`--controllers=replicaset`, the same
//! Pods and ReplicaSets watched) until its ReplicaSet caches are synced. Then each one's settled
//! RSS, and the CPU it spent to get there. A first round at 0 Pods gives both baselines, so the
//! bytes per Pod are the marginal cost of the Pods: (RSS at N − RSS at 0) / N.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, ensure};
use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, DeleteParams, ListParams, PostParams};
use serde::{Deserialize, Serialize};

use crate::controllers::{HostArgs, HostProcess, HostUnderTest, Kcm, PeerControlPlane};
use crate::convergence::kcm_flags;
use crate::kube_util::{self, apply_plugin, ensure_namespace, wait_until};
use crate::procfs;

/// Creates and deletes the driver keeps in flight.
const IN_FLIGHT: usize = 64;

#[derive(clap::Args, Debug, Clone)]
pub struct Args {
    #[command(flatten)]
    pub host: HostUnderTest,
    #[command(flatten)]
    pub peer: PeerControlPlane,
    /// Pod counts to measure at, ascending (0, the baseline, is always measured first).
    #[arg(long, value_delimiter = ',', default_value = "1000,10000,100000")]
    pub counts: Vec<usize>,
    /// Fresh starts of each controller at each count (alternating which goes first).
    #[arg(long, default_value_t = 2)]
    pub runs: usize,
    /// Seconds to let a process settle after it synced, before reading its RSS.
    #[arg(long, default_value_t = 3)]
    pub settle_secs: u64,
    /// How long one controller may take to sync.
    #[arg(long, default_value_t = 300)]
    pub timeout_secs: u64,
    /// Leave the Pods (and namespaces) in the API server at the end, for a closer look.
    #[arg(long)]
    pub keep: bool,
    #[arg(long)]
    pub out: PathBuf,
}

/// One controller started once at one size.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Start {
    /// `wasmloop` or `kcm`.
    pub controller: String,
    pub pods: usize,
    /// Process start → caches synced (host: `/readyz`; KCM: "Caches are synced for ReplicaSet").
    pub sync_secs: f64,
    /// CPU the process used from its start until it synced.
    pub sync_cpu_secs: f64,
    /// Settled `VmRSS` after syncing.
    pub rss_bytes: u64,
}

/// Every start, plus how long filling the API server took.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Results {
    /// 0 first, then `--counts`.
    pub counts: Vec<usize>,
    pub runs: usize,
    /// Seconds each process settled before its RSS was read.
    pub settle_secs: u64,
    pub starts: Vec<Start>,
    /// (Pods in the API server afterwards, seconds the creates took, 64 in flight).
    pub fills: Vec<(usize, f64)>,
    /// Seconds deleting every Pod took at the end.
    pub drain_secs: f64,
}

impl Results {
    /// Every start of `controller` at `pods`.
    pub fn of(&self, controller: &str, pods: usize) -> impl Iterator<Item = &Start> {
        self.starts.iter().filter(move |s| s.controller == controller && s.pods == pods)
    }
}

pub async fn run(args: Args) -> Result<Results> {
    ensure!(
        !args.counts.is_empty() && args.counts[0] > 0 && args.counts.windows(2).all(|w| w[0] < w[1]),
        "--counts must be positive and ascending"
    );
    ensure!(args.runs > 0, "--runs must be at least 1");
    std::fs::create_dir_all(&args.host.work_dir)?;
    let client = kube_util::client(&args.host.kubeconfig).await?;
    let tag = std::process::id();
    let ns = format!("bench-scale-{tag}");
    let plugin_ns = format!("wasmloop-bench-scale-{tag}");
    ensure_namespace(&client, &ns).await?;
    ensure_namespace(&client, &plugin_ns).await?;
    let wasm = std::fs::read(&args.host.plugin).with_context(|| format!("reading {}", args.host.plugin.display()))?;
    let manifest = std::fs::read_to_string(&args.host.manifest).with_context(|| format!("reading {}", args.host.manifest.display()))?;
    apply_plugin(&client, &plugin_ns, "replicaset", &wasm, &manifest).await?;
    // A first start compiles the plugin into the precompiled cache; every measured start loads it.
    let warm = start_host(&args, &plugin_ns, "warm-up").await?;
    warm.stop().await?;

    let pods = Api::<Pod>::namespaced(client.clone(), &ns);
    let mut counts = vec![0];
    counts.extend(&args.counts);
    let (mut starts, mut fills) = (Vec::new(), Vec::new());
    let mut have = 0;
    for &count in &counts {
        if count > have {
            let t = Instant::now();
            fill(&pods, &ns, have, count).await?;
            let secs = t.elapsed().as_secs_f64();
            eprintln!("cache-scale: {count} Pods in the API server ({:.0} creates/s)", (count - have) as f64 / secs);
            fills.push((count, secs));
            have = count;
        }
        for r in 0..args.runs {
            let host_first = r % 2 == 0;
            for controller in if host_first { ["wasmloop", "kcm"] } else { ["kcm", "wasmloop"] } {
                let s = measure(&args, &plugin_ns, controller, count, r).await?;
                eprintln!(
                    "cache-scale: {controller:>8} {count:>6} Pods: synced in {:.2} s ({:.2} s CPU), RSS {:.1} MiB",
                    s.sync_secs,
                    s.sync_cpu_secs,
                    s.rss_bytes as f64 / 1_048_576.0
                );
                starts.push(s);
            }
        }
    }
    if args.keep {
        eprintln!("cache-scale: {have} Pods left in namespace {ns}, the plugin in {plugin_ns} (--keep)");
        return Ok(Results { counts, runs: args.runs, settle_secs: args.settle_secs, starts, fills, drain_secs: 0.0 });
    }
    let t = Instant::now();
    drain(&pods, have).await?;
    let drain_secs = t.elapsed().as_secs_f64();
    kube_util::delete_namespace(&client, &ns).await?;
    kube_util::delete_namespace(&client, &plugin_ns).await?;
    Ok(Results { counts, runs: args.runs, settle_secs: args.settle_secs, starts, fills, drain_secs })
}

async fn start_host(args: &Args, plugin_ns: &str, label: &str) -> Result<HostProcess> {
    let host_args = HostArgs {
        bin: &args.host.host_bin,
        kubeconfig: &args.host.kubeconfig,
        plugin_namespace: plugin_ns,
        precompiled_dir: &args.host.work_dir.join("precompiled"),
        log: args.host.work_dir.join(format!("host-{label}.log")),
        extra: &[],
    };
    HostProcess::start(host_args, Duration::from_secs(args.timeout_secs)).await
}

/// Start `controller` fresh, time it to synced, read its settled RSS, stop it.
async fn measure(args: &Args, plugin_ns: &str, controller: &str, pods: usize, run: usize) -> Result<Start> {
    let settle = Duration::from_secs(args.settle_secs);
    let started = Instant::now();
    let (sync_secs, sync_cpu_secs, rss_bytes) = if controller == "wasmloop" {
        let mut host = start_host(args, plugin_ns, &format!("{pods}-{run}")).await?;
        let sync = started.elapsed().as_secs_f64();
        let cpu = procfs::cpu_seconds(host.pid())?;
        tokio::time::sleep(settle).await;
        let rss = procfs::settled_rss(host.pid(), 10, Duration::from_millis(300))?;
        host.check_running()?;
        host.stop().await?;
        (sync, cpu, rss)
    } else {
        let timeout = Duration::from_secs(args.timeout_secs);
        let kcm = Kcm::start(&args.peer.control_plane_script, &args.peer.control_plane_dir, &kcm_flags(), timeout).await?;
        let sync = started.elapsed().as_secs_f64();
        let cpu = procfs::cpu_seconds(kcm.pid())?;
        tokio::time::sleep(settle).await;
        let rss = procfs::settled_rss(kcm.pid(), 10, Duration::from_millis(300))?;
        kcm.check_running()?;
        kcm.stop(&args.host.work_dir.join(format!("kcm-{pods}-{run}.log")))?;
        (sync, cpu, rss)
    };
    Ok(Start { controller: controller.into(), pods, sync_secs, sync_cpu_secs, rss_bytes })
}

/// Pod `n` of the workload: the realistic Pod of section 3's cache figure, as a ReplicaSet (that
/// does not exist) creates it.
fn pod(ns: &str, n: usize) -> Result<Pod> {
    let mut v = crate::cache_memory::realistic_pod(n);
    let meta = v["metadata"].as_object_mut().context("fixture Pod has no metadata")?;
    for server_set in ["uid", "resourceVersion", "creationTimestamp", "managedFields"] {
        meta.remove(server_set);
    }
    meta.insert("namespace".into(), ns.into());
    meta.insert("name".into(), format!("p-{n}").into());
    serde_json::from_value(v).context("fixture Pod")
}

/// Create Pods `from..to`.
async fn fill(pods: &Api<Pod>, ns: &str, from: usize, to: usize) -> Result<()> {
    futures::stream::iter(from..to)
        .map(|n| async move {
            let p = pod(ns, n)?;
            match pods.create(&PostParams::default(), &p).await {
                Ok(_) => Ok(()),
                Err(kube::Error::Api(s)) if s.code == 409 => Ok(()),
                Err(e) => Err(e).with_context(|| format!("creating Pod p-{n}")),
            }
        })
        .buffer_unordered(IN_FLIGHT)
        .try_collect::<()>()
        .await
}

/// Delete Pods `0..count` (in parallel: the API server's delete-collection is one worker), and
/// wait until the namespace lists none.
async fn drain(pods: &Api<Pod>, count: usize) -> Result<()> {
    futures::stream::iter(0..count)
        .map(|n| async move {
            match pods.delete(&format!("p-{n}"), &DeleteParams { grace_period_seconds: Some(0), ..DeleteParams::default() }).await {
                Ok(_) => Ok(()),
                Err(kube::Error::Api(s)) if s.code == 404 => Ok(()),
                Err(e) => Err(e).with_context(|| format!("deleting Pod p-{n}")),
            }
        })
        .buffer_unordered(IN_FLIGHT)
        .try_collect::<()>()
        .await?;
    wait_until("every Pod deleted", Duration::from_secs(300), Duration::from_millis(500), || async {
        Ok(pods.list(&ListParams::default().limit(1)).await?.items.is_empty())
    })
    .await
}
