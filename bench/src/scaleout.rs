//! Section 6: scale-out. The replicaset plugin in `shards` key-space shards (a ReplicaSet is in
//! the shard of its namespace's hash) run by `wasmloop run --shard-mode plugin` replicas on the
//! real API server, each shard owned by one replica through its Lease:
//! 1. **one replica** owns every shard; the workload (`namespaces` × `replicasets` ×
//!    `replicas`) is created and timed from the first create to every status at `replicas`;
//! 2. **three replicas** (10/10/10 shards of 30): the same workload in fresh namespaces, timed
//!    the same way; each replica's reconciles over the phase give the imbalance (max / mean) of
//!    a burst into namespaces nobody has counted yet;
//!    **steady**: once every shard's owner has published its object count on the shard's Lease
//!    and the replicas hold the split those weights give, every ReplicaSet is scaled by one
//!    replica, timed the same way: the imbalance of work on objects the replicas know;
//! 3. **failover**: one of the three is killed with SIGKILL, then one new ReplicaSet is created in
//!    each of fresh namespaces picked so that every shard has work. Watches on the shard Leases
//!    and on the new Pods time, for each shard of the dead replica, kill → a survivor's Lease →
//!    the first Pod a survivor created for it (the warm takeover), and kill → all converged.
//!
//! Phase 1's workload is deleted before phase 2 starts; phase 2's stays cached during phase 3
//! (a survivor taking a shard queues all of its keys, as in production).

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::path::PathBuf;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail, ensure};
use futures::stream::BoxStream;
use futures::{FutureExt, StreamExt, TryStreamExt};
use k8s_openapi::api::apps::v1::ReplicaSet;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, Patch, PatchParams, PostParams};
use kube::runtime::watcher::{self, Event};
use kube::{Client, Resource};
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use serde_json::json;
use wasmloop::hotload::PluginManifest;
use wasmloop::kinds::ObjectKey;
use wasmloop::shard::{OBJECTS_ANNOTATION, assign_weighted, count_is_current, lease_name, parse_objects, shard_name, shard_of, weights};

use crate::controllers::{HostArgs, HostProcess, HostUnderTest};
use crate::convergence::{HostProfile, RS_INFLIGHT};
use crate::fixtures::{self, rs_kind};
use crate::kube_util::{self, apply_plugin, delete_workload, ensure_namespace, metric_sum};
use crate::procfs;

/// The plugin (and controller) name.
pub const PLUGIN: &str = "replicaset";
/// The label that marks a phase's ReplicaSets and their Pods (value: the phase).
pub const PHASE_LABEL: &str = "wasmloop.dev/bench-scaleout";
/// Namespace operations (create, delete) in flight at once.
const NS_INFLIGHT: usize = 8;

#[derive(clap::Args, Debug, Clone)]
pub struct Args {
    #[command(flatten)]
    pub host: HostUnderTest,
    /// How the host binary was built (reported).
    #[arg(long, default_value = "release")]
    pub host_profile: String,
    /// Key-space shards of the plugin.
    #[arg(long, default_value_t = 30)]
    pub shards: usize,
    /// Namespaces of the workload (fresh ones in each phase).
    #[arg(long, default_value_t = 90)]
    pub namespaces: usize,
    /// ReplicaSets per namespace.
    #[arg(long, default_value_t = 4)]
    pub replicasets: usize,
    /// Replicas per ReplicaSet.
    #[arg(long, default_value_t = 10)]
    pub replicas: u32,
    /// The replicas' `--lease-duration`, seconds.
    #[arg(long, default_value_t = 15)]
    pub lease_duration: u64,
    /// The replicas' `--lease-grace`, seconds.
    #[arg(long, default_value_t = 5)]
    pub lease_grace: u64,
    /// Give up on a phase after this many seconds.
    #[arg(long, default_value_t = 300)]
    pub timeout_secs: u64,
    #[arg(long)]
    pub out: PathBuf,
}

/// The raw results of the section.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Results {
    pub host_profile: String,
    pub shards: usize,
    pub namespaces: usize,
    /// ReplicaSets per namespace.
    pub replicasets: usize,
    pub replicas: u32,
    pub lease_duration_s: u64,
    pub lease_grace_s: u64,
    /// Workers per replica (the manifest's `concurrency`).
    pub workers: usize,
    /// One replica owning every shard.
    pub one: Phase,
    /// Three replicas sharing the shards: a burst of new objects.
    pub three: Phase,
    /// The same three once the shards' weights settled: every ReplicaSet scaled by one.
    /// (`settle_s`: phase 2 converged → the weighted split held.)
    pub steady: Phase,
    /// Phase 2's replicas after kill -9 of one.
    pub failover: Failover,
}

impl Results {
    /// ReplicaSets of one phase's workload.
    pub fn total_replicasets(&self) -> usize {
        self.namespaces * self.replicasets
    }
}

/// One phase: the same workload against `replicas.len()` replicas.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Phase {
    /// Replicas started → every one sees them all and every shard is owned once, seconds.
    pub settle_s: f64,
    /// First create → last ReplicaSet created (the driver's part), seconds.
    pub created_s: f64,
    /// First create → every ReplicaSet's `status.replicas` at the target, seconds.
    pub converged_s: f64,
    pub replicas: Vec<Share>,
}

/// One replica's part of a phase.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Share {
    pub identity: String,
    /// Shards it owned during the phase.
    pub shards: usize,
    /// ReplicaSets of the workload in those shards (the namespace-hash spread).
    pub replicasets: usize,
    /// Its reconciles of the plugin (`controller_runtime_reconcile_total`) over the phase.
    pub reconciles: f64,
    /// Its CPU (user + system) over the phase, seconds.
    pub cpu_s: f64,
}

/// max / mean; 0 for an empty or all-zero set.
pub fn max_over_mean(values: impl IntoIterator<Item = f64>) -> f64 {
    let v: Vec<f64> = values.into_iter().collect();
    let mean = v.iter().sum::<f64>() / v.len().max(1) as f64;
    if mean <= 0.0 { 0.0 } else { v.iter().copied().fold(0.0, f64::max) / mean }
}

impl Phase {
    /// max / mean of the replicas' reconciles.
    pub fn imbalance(&self) -> f64 {
        max_over_mean(self.replicas.iter().map(|r| r.reconciles))
    }

    /// max / mean of the ReplicaSets in each replica's shards: the imbalance of the work itself.
    pub fn workload_imbalance(&self) -> f64 {
        max_over_mean(self.replicas.iter().map(|r| r.replicasets as f64))
    }
}

/// Phase 3: kill -9 of one replica, new work in every shard.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Failover {
    pub victim: String,
    /// Fresh namespaces, one new ReplicaSet each, spread evenly over the shards.
    pub namespaces: usize,
    /// Kill → last new ReplicaSet created, seconds.
    pub created_s: f64,
    /// The victim's shards, each taken over by a survivor.
    pub shards: Vec<Takeover>,
    /// For each survivor's shard: kill → its first new Pod, seconds (the undisturbed reference).
    pub survivor_first_pod_s: Vec<f64>,
    /// Kill → every new ReplicaSet's status at the target, seconds.
    pub converged_s: f64,
    /// Shards per survivor once both see only each other.
    pub shards_after: Vec<(String, usize)>,
    /// What each survivor did from the kill to the end (its own `/metrics`).
    pub survivors: Vec<(String, HostProfile)>,
}

impl Failover {
    /// Kill → the last of the victim's shards reconciling again (its first new Pod), seconds.
    pub fn resumed_s(&self) -> f64 {
        self.shards.iter().map(|s| s.first_pod_s).fold(f64::NAN, f64::max)
    }
}

/// One shard of the killed replica.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Takeover {
    pub shard: String,
    /// The survivor that took its Lease.
    pub holder: String,
    /// Kill → the watch saw the survivor's Lease, seconds.
    pub lease_s: f64,
    /// Kill → the watch saw the first Pod created in one of its namespaces, seconds.
    pub first_pod_s: f64,
}

impl Takeover {
    /// Lease taken → first reconcile's first Pod, seconds (both as the driver's watches saw them).
    pub fn warm_s(&self) -> f64 {
        self.first_pod_s - self.lease_s
    }
}

/// A running replica.
struct Member {
    identity: String,
    host: HostProcess,
}

impl Member {
    fn metrics(&self) -> Result<String> {
        kube_util::http_get(self.host.port, "/metrics").with_context(|| format!("scraping replica {}", self.identity))
    }

    fn reconciles(&self) -> Result<f64> {
        Ok(metric_sum(&self.metrics()?, "controller_runtime_reconcile_total", &[&format!("controller=\"{PLUGIN}\"")]))
    }
}

/// Shards a replica's `/metrics` says it owns (`wasmloop_shard_owned` = 1).
pub fn owned_shards(metrics: &str) -> BTreeSet<String> {
    metrics
        .lines()
        .filter_map(|l| {
            let (labels, value) = l.strip_prefix("wasmloop_shard_owned{")?.rsplit_once("} ")?;
            (value.trim().parse::<f64>().ok()? == 1.0).then_some(())?;
            Some(labels.split("shard=\"").nth(1)?.split('"').next()?.to_string())
        })
        .collect()
}

/// The shard of the ReplicaSets in namespace `ns`.
fn shard_of_namespace(ns: &str, shards: usize) -> String {
    let key = ObjectKey::new(rs_kind(), Some(ns), "web-0");
    shard_name(PLUGIN, shard_of(&key, shards), shards)
}

/// `count` namespace names `prefix-<j>`, picked so that the shards get ⌈count / shards⌉ at most
/// each (every shard gets one when `count` ≥ `shards`).
pub fn spread_namespaces(prefix: &str, count: usize, shards: usize) -> Vec<String> {
    let quota = count.div_ceil(shards.max(1));
    let mut per_shard: HashMap<String, usize> = HashMap::new();
    let mut out = Vec::new();
    for j in 0.. {
        if out.len() == count {
            break;
        }
        let ns = format!("{prefix}-{j}");
        let n = per_shard.entry(shard_of_namespace(&ns, shards)).or_default();
        if *n < quota {
            *n += 1;
            out.push(ns);
        }
    }
    out
}

/// Starts the phases' replicas: same plugin namespace, precompiled directory and flags.
struct Fleet<'a> {
    args: &'a Args,
    plugin_ns: String,
}

impl Fleet<'_> {
    /// Start one replica per identity, at once, each ready (plugin loaded, informers synced).
    async fn start(&self, identities: &[&str]) -> Result<Vec<Member>> {
        let precompiled = self.args.host.work_dir.join("precompiled");
        let starts = identities.iter().map(|id| {
            let precompiled = precompiled.clone();
            async move {
                let extra: Vec<String> = [
                    "--shard-mode",
                    "plugin",
                    "--identity",
                    id,
                    "--lease-duration",
                    &self.args.lease_duration.to_string(),
                    "--lease-grace",
                    &self.args.lease_grace.to_string(),
                ]
                .iter()
                .map(ToString::to_string)
                .collect();
                let host_args = HostArgs {
                    bin: &self.args.host.host_bin,
                    kubeconfig: &self.args.host.kubeconfig,
                    plugin_namespace: &self.plugin_ns,
                    precompiled_dir: &precompiled,
                    log: self.args.host.work_dir.join(format!("scaleout-{id}.log")),
                    extra: &extra,
                };
                let host = HostProcess::start(host_args, Duration::from_secs(120)).await?;
                anyhow::Ok(Member { identity: id.to_string(), host })
            }
        });
        futures::future::try_join_all(starts).await
    }
}

/// Once every replica sees exactly `members.len()` live replicas and every shard is owned by
/// exactly one of them: the shards each owns.
async fn settled(members: &mut [Member], shards: usize, timeout: Duration) -> Result<Vec<BTreeSet<String>>> {
    let deadline = Instant::now() + timeout;
    let want = members.len() as f64;
    loop {
        let mut split = Vec::new();
        let mut agreed = true;
        for m in members.iter_mut() {
            m.host.check_running()?;
            let text = m.metrics()?;
            let seen = metric_sum(&text, "wasmloop_shard_members", &[]);
            // A replica that never saw another one reports 0: the gauge is only set when the
            // membership changes from the replica itself alone.
            agreed &= seen == want || (want == 1.0 && seen == 0.0);
            split.push(owned_shards(&text));
        }
        let all: BTreeSet<&String> = split.iter().flatten().collect();
        let total: usize = split.iter().map(BTreeSet::len).sum();
        if agreed && all.len() == shards && total == shards {
            return Ok(split);
        }
        if Instant::now() > deadline {
            let counts: Vec<usize> = split.iter().map(BTreeSet::len).collect();
            bail!("after {timeout:?} the {} replicas had not settled: shards owned {counts:?} of {shards}", members.len());
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// The plugin's reconciles of each replica, once they stop changing (trailing reconciles, e.g.
/// on the controller's own status writes, belong to the phase): equal 1 s apart, at most 20 s.
async fn settled_reconciles(members: &[Member]) -> Result<Vec<f64>> {
    let read = || members.iter().map(Member::reconciles).collect::<Result<Vec<f64>>>();
    let mut last = read()?;
    for _ in 0..20 {
        tokio::time::sleep(Duration::from_secs(1)).await;
        let now = read()?;
        if now == last {
            return Ok(now);
        }
        last = now;
    }
    Ok(last)
}

/// A watch whose initial list is done: what it yields from here on is new.
async fn synced_watch<K>(api: Api<K>, config: watcher::Config) -> Result<BoxStream<'static, Result<Event<K>, watcher::Error>>>
where
    K: Resource + Clone + DeserializeOwned + std::fmt::Debug + Send + 'static,
    K::DynamicType: Default + Eq + std::hash::Hash + Clone,
{
    let mut stream = watcher::watcher(api, config).boxed();
    loop {
        match tokio::time::timeout(Duration::from_secs(30), stream.try_next()).await {
            Ok(Ok(Some(Event::InitDone))) => return Ok(stream),
            Ok(Ok(Some(_))) => {}
            Ok(Ok(None)) => bail!("watch ended before its initial list"),
            Ok(Err(e)) => bail!("watch failed: {e}"),
            Err(_) => bail!("watch did not list in 30 s"),
        }
    }
}

/// The phase's ReplicaSet `name` in `ns`: the convergence workload's, labelled with the phase
/// (its Pods too).
fn replicaset(name: &str, replicas: u32, phase: &str) -> Result<ReplicaSet> {
    let mut spec = fixtures::replicaset_spec(name, replicas);
    spec["metadata"]["labels"][PHASE_LABEL] = json!(phase);
    spec["spec"]["template"]["metadata"]["labels"][PHASE_LABEL] = json!(phase);
    Ok(serde_json::from_value(spec)?)
}

/// Create `per_namespace` ReplicaSets in each namespace, `RS_INFLIGHT` at once: when the last
/// create returned, from `t0`.
async fn create_workload(
    client: Client,
    namespaces: Vec<String>,
    per_namespace: usize,
    replicas: u32,
    phase: String,
    t0: Instant,
) -> Result<Duration> {
    let items: Vec<(String, String)> =
        namespaces.iter().flat_map(|ns| (0..per_namespace).map(move |i| (ns.clone(), format!("web-{i}")))).collect();
    futures::stream::iter(items)
        .map(|(ns, name)| {
            let (api, phase) = (Api::<ReplicaSet>::namespaced(client.clone(), &ns), phase.clone());
            async move {
                let rs = replicaset(&name, replicas, &phase)?;
                api.create(&PostParams::default(), &rs).await.with_context(|| format!("creating ReplicaSet {ns}/{name}"))?;
                anyhow::Ok(t0.elapsed())
            }
        })
        .buffer_unordered(RS_INFLIGHT)
        .try_fold(Duration::ZERO, |a, b| async move { Ok(a.max(b)) })
        .await
}

/// ReplicaSet statuses seen by a watch: `status.replicas` by `ns/name`.
#[derive(Default)]
struct Statuses(HashMap<String, i32>);

impl Statuses {
    fn see(&mut self, event: Event<ReplicaSet>) {
        let key =
            |rs: &ReplicaSet| format!("{}/{}", rs.metadata.namespace.as_deref().unwrap_or(""), rs.metadata.name.as_deref().unwrap_or(""));
        match event {
            Event::Apply(rs) | Event::InitApply(rs) => {
                let n = rs.status.as_ref().map_or(0, |s| s.replicas);
                self.0.insert(key(&rs), n);
            }
            Event::Delete(rs) => {
                self.0.remove(&key(&rs));
            }
            Event::Init | Event::InitDone => {}
        }
    }

    fn converged(&self, total: usize, replicas: u32) -> bool {
        self.0.len() == total && self.0.values().all(|r| *r == replicas as i32)
    }

    fn at_target(&self, replicas: u32) -> usize {
        self.0.values().filter(|r| **r == replicas as i32).count()
    }
}

async fn create_namespaces(client: &Client, namespaces: &[String]) -> Result<()> {
    futures::stream::iter(namespaces).map(|ns| ensure_namespace(client, ns)).buffer_unordered(NS_INFLIGHT).try_collect::<()>().await
}

/// Scale every ReplicaSet of the workload in `namespaces` to `replicas`, `RS_INFLIGHT` at once:
/// when the last patch returned, from `t0`.
async fn scale_workload(client: Client, namespaces: Vec<String>, per_namespace: usize, replicas: u32, t0: Instant) -> Result<Duration> {
    let items: Vec<(String, String)> =
        namespaces.iter().flat_map(|ns| (0..per_namespace).map(move |i| (ns.clone(), format!("web-{i}")))).collect();
    futures::stream::iter(items)
        .map(|(ns, name)| {
            let api = Api::<ReplicaSet>::namespaced(client.clone(), &ns);
            async move {
                let patch = Patch::Merge(json!({"spec": {"replicas": replicas}}));
                api.patch(&name, &PatchParams::default(), &patch).await.with_context(|| format!("scaling ReplicaSet {ns}/{name}"))?;
                anyhow::Ok(t0.elapsed())
            }
        })
        .buffer_unordered(RS_INFLIGHT)
        .try_fold(Duration::ZERO, |a, b| async move { Ok(a.max(b)) })
        .await
}

/// Once every shard's Lease publishes the ReplicaSets in it (every ReplicaSet in the cluster,
/// as the replicas cache them; within the publishing hysteresis, ±25 %) and every replica owns
/// exactly the shards the weighted assignment of those counts (and the Leases' holders) gives
/// it: the shards each owns.
async fn weighted_split(client: &Client, args: &Args, plugin_ns: &str, members: &mut [Member]) -> Result<Vec<BTreeSet<String>>> {
    let identities: BTreeSet<String> = members.iter().map(|m| m.identity.clone()).collect();
    let deadline = Instant::now() + Duration::from_secs(args.timeout_secs);
    let leases = Api::<Lease>::namespaced(client.clone(), plugin_ns);
    let replicasets = Api::<ReplicaSet>::all(client.clone());
    loop {
        let mut truth: BTreeMap<String, u64> = BTreeMap::new();
        for rs in replicasets.list_metadata(&Default::default()).await?.items {
            *truth.entry(shard_of_namespace(rs.metadata.namespace.as_deref().unwrap_or(""), args.shards)).or_default() += 1;
        }
        let (mut published, mut holder) = (HashMap::new(), HashMap::new());
        for l in leases.list(&Default::default()).await?.items {
            let name = l.metadata.name.clone().unwrap_or_default();
            let n = l.metadata.annotations.as_ref().and_then(|a| a.get(OBJECTS_ANNOTATION)).and_then(|v| parse_objects(v));
            published.insert(name.clone(), n);
            if let Some(h) = l.spec.and_then(|s| s.holder_identity) {
                holder.insert(name, h);
            }
        }
        let shards: Vec<String> = (0..args.shards).map(|i| shard_name(PLUGIN, i, args.shards)).collect();
        let counts: Vec<(&str, Option<u64>)> =
            shards.iter().map(|s| (s.as_str(), published.get(&lease_name(s)).copied().flatten())).collect();
        let counted = counts.iter().all(|(s, n)| n.is_some_and(|n| count_is_current(n, truth.get(*s).copied().unwrap_or(0))));
        let holders: BTreeMap<String, String> =
            shards.iter().filter_map(|s| Some((s.clone(), holder.get(&lease_name(s))?.clone()))).collect();
        let expected = assign_weighted(&weights(counts), &identities, &holders);
        let mut split = Vec::new();
        for m in members.iter_mut() {
            m.host.check_running()?;
            split.push(owned_shards(&m.metrics()?));
        }
        let holds = members
            .iter()
            .zip(&split)
            .all(|(m, mine)| *mine == expected.iter().filter(|(_, o)| **o == m.identity).map(|(s, _)| s.clone()).collect());
        if counted && holds {
            return Ok(split);
        }
        if Instant::now() > deadline {
            let counts: Vec<usize> = split.iter().map(BTreeSet::len).collect();
            bail!("after {} s the weights had not settled: counts published {counted}, shards owned {counts:?}", args.timeout_secs);
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

/// What one phase does to the workload.
enum Work {
    /// Create it (in fresh namespaces).
    Create,
    /// Scale every ReplicaSet to `replicas`.
    Scale(u32),
}

/// One phase against `members`, settled after `settle_s` owning `split`: create (or scale) the
/// workload in `namespaces`, time it to converged statuses, and count each replica's reconciles
/// and CPU over it.
#[allow(clippy::too_many_arguments)]
async fn phase(
    client: &Client,
    args: &Args,
    members: &mut [Member],
    split: &[BTreeSet<String>],
    settle_s: f64,
    namespaces: &[String],
    label: &str,
    work: Work,
) -> Result<Phase> {
    let selector = format!("{PHASE_LABEL}={label}");
    let mut rss = synced_watch(Api::<ReplicaSet>::all(client.clone()), watcher::Config::default().labels(&selector)).await?;
    // From a quiet start: whatever the replicas were still reconciling (shards just moved) is done.
    let reconciles0 = settled_reconciles(members).await?;
    let cpu0 = members.iter().map(|m| procfs::cpu_seconds(m.host.pid())).collect::<Result<Vec<_>>>()?;
    let total = namespaces.len() * args.replicasets;
    let target = match work {
        Work::Create => args.replicas,
        Work::Scale(replicas) => replicas,
    };
    let t0 = Instant::now();
    let mut create = match work {
        Work::Create => {
            create_workload(client.clone(), namespaces.to_vec(), args.replicasets, args.replicas, label.to_string(), t0).boxed()
        }
        Work::Scale(replicas) => scale_workload(client.clone(), namespaces.to_vec(), args.replicasets, replicas, t0).boxed(),
    };
    let deadline = tokio::time::Instant::now() + Duration::from_secs(args.timeout_secs);
    let mut statuses = Statuses::default();
    let (mut created, mut converged) = (None, None);
    while created.is_none() || converged.is_none() {
        tokio::select! {
            r = &mut create, if created.is_none() => created = Some(r?),
            event = rss.next() => match event {
                Some(Ok(e)) => statuses.see(e),
                Some(Err(e)) => bail!("ReplicaSet watch failed: {e}"),
                None => bail!("ReplicaSet watch ended"),
            },
            () = tokio::time::sleep_until(deadline) => bail!(
                "phase {label}: not converged after {} s: {} of {total} statuses at {target}",
                args.timeout_secs, statuses.at_target(target)
            ),
        }
        if converged.is_none() && statuses.converged(total, target) {
            converged = Some(t0.elapsed());
        }
    }
    let reconciles1 = settled_reconciles(members).await?;
    let mut replicas = Vec::new();
    for (i, m) in members.iter_mut().enumerate() {
        m.host.check_running()?;
        let in_mine = namespaces.iter().filter(|ns| split[i].contains(&shard_of_namespace(ns, args.shards))).count();
        replicas.push(Share {
            identity: m.identity.clone(),
            shards: split[i].len(),
            replicasets: in_mine * args.replicasets,
            reconciles: reconciles1[i] - reconciles0[i],
            cpu_s: procfs::cpu_seconds(m.host.pid())? - cpu0[i],
        });
    }
    let secs = |d: Option<Duration>| d.map_or(f64::NAN, |d| d.as_secs_f64());
    Ok(Phase { settle_s, created_s: secs(created), converged_s: secs(converged), replicas })
}

/// Phase 3: kill -9 the first of `members`, create one new ReplicaSet in each of fresh
/// namespaces spread over every shard, and time the takeover of each of its shards. Returns the
/// survivors.
async fn failover(
    client: &Client,
    args: &Args,
    plugin_ns: &str,
    mut members: Vec<Member>,
    prefix: &str,
) -> Result<(Failover, Vec<Member>)> {
    let mut victim = members.remove(0);
    let survivors: BTreeSet<String> = members.iter().map(|m| m.identity.clone()).collect();
    let namespaces = spread_namespaces(prefix, args.namespaces.max(args.shards), args.shards);
    let shard_of_ns: HashMap<String, String> = namespaces.iter().map(|ns| (ns.clone(), shard_of_namespace(ns, args.shards))).collect();
    create_namespaces(client, &namespaces).await?;
    let label = "failover";
    let selector = format!("{PHASE_LABEL}={label}");
    let mut leases = synced_watch(Api::<Lease>::namespaced(client.clone(), plugin_ns), watcher::Config::default()).await?;
    let mut pods = synced_watch(Api::<Pod>::all(client.clone()), watcher::Config::default().labels(&selector)).await?;
    let mut rss = synced_watch(Api::<ReplicaSet>::all(client.clone()), watcher::Config::default().labels(&selector)).await?;

    // The victim's shards, as it reports them right before it dies.
    let victim_shards = owned_shards(&victim.metrics()?);
    ensure!(!victim_shards.is_empty(), "replica {} owns no shard", victim.identity);
    let by_lease: HashMap<String, String> = victim_shards.iter().map(|s| (lease_name(s), s.clone())).collect();
    let profiles0 = members.iter().map(|m| HostProfile::scrape(m.host.port)).collect::<Result<Vec<_>>>()?;
    victim.host.kill()?;
    let t0 = Instant::now();
    eprintln!("scale-out: killed {} (kill -9) owning {} shards", victim.identity, victim_shards.len());

    let mut create = std::pin::pin!(create_workload(client.clone(), namespaces.clone(), 1, args.replicas, label.to_string(), t0));
    let deadline = tokio::time::Instant::now() + Duration::from_secs(args.timeout_secs + args.lease_duration);
    let mut statuses = Statuses::default();
    let mut taken: BTreeMap<String, (String, Duration)> = BTreeMap::new();
    let mut first_pod: BTreeMap<String, Duration> = BTreeMap::new();
    let (mut created, mut converged) = (None, None);
    let every_shard: BTreeSet<&String> = shard_of_ns.values().collect();
    loop {
        let done = created.is_some()
            && converged.is_some()
            && taken.len() == victim_shards.len()
            && every_shard.iter().all(|s| first_pod.contains_key(*s));
        if done {
            break;
        }
        tokio::select! {
            r = &mut create, if created.is_none() => created = Some(r?),
            event = leases.next() => match event {
                Some(Ok(Event::Apply(l) | Event::InitApply(l))) => {
                    let holder = l.spec.as_ref().and_then(|s| s.holder_identity.clone()).unwrap_or_default();
                    if let Some(shard) = l.metadata.name.as_ref().and_then(|n| by_lease.get(n))
                        && survivors.contains(&holder)
                    {
                        taken.entry(shard.clone()).or_insert((holder, t0.elapsed()));
                    }
                }
                Some(Ok(_)) => {}
                Some(Err(e)) => bail!("Lease watch failed: {e}"),
                None => bail!("Lease watch ended"),
            },
            event = pods.next() => match event {
                Some(Ok(Event::Apply(p) | Event::InitApply(p))) => {
                    if let Some(shard) = p.metadata.namespace.as_ref().and_then(|ns| shard_of_ns.get(ns)) {
                        first_pod.entry(shard.clone()).or_insert_with(|| t0.elapsed());
                    }
                }
                Some(Ok(_)) => {}
                Some(Err(e)) => bail!("Pod watch failed: {e}"),
                None => bail!("Pod watch ended"),
            },
            event = rss.next() => match event {
                Some(Ok(e)) => statuses.see(e),
                Some(Err(e)) => bail!("ReplicaSet watch failed: {e}"),
                None => bail!("ReplicaSet watch ended"),
            },
            () = tokio::time::sleep_until(deadline) => bail!(
                "failover: after {} s: {} of {} shards taken, {} of {} statuses at {}",
                args.timeout_secs + args.lease_duration, taken.len(), victim_shards.len(),
                statuses.at_target(args.replicas), namespaces.len(), args.replicas
            ),
        }
        if converged.is_none() && statuses.converged(namespaces.len(), args.replicas) {
            converged = Some(t0.elapsed());
        }
    }
    let shards = victim_shards
        .iter()
        .map(|s| {
            let (holder, lease) = taken[s].clone();
            Takeover { shard: s.clone(), holder, lease_s: lease.as_secs_f64(), first_pod_s: first_pod[s].as_secs_f64() }
        })
        .collect();
    let profiles = members
        .iter()
        .zip(&profiles0)
        .map(|(m, before)| Ok((m.identity.clone(), HostProfile::scrape(m.host.port)?.minus(before))))
        .collect::<Result<Vec<_>>>()?;
    let survivor_first_pod_s = first_pod.iter().filter(|(s, _)| !victim_shards.contains(*s)).map(|(_, d)| d.as_secs_f64()).collect();
    let split = settled(&mut members, args.shards, Duration::from_secs(args.timeout_secs)).await?;
    let shards_after = members.iter().zip(&split).map(|(m, s)| (m.identity.clone(), s.len())).collect();
    let secs = |d: Option<Duration>| d.map_or(f64::NAN, |d| d.as_secs_f64());
    let result = Failover {
        victim: victim.identity.clone(),
        namespaces: namespaces.len(),
        created_s: secs(created),
        shards,
        survivor_first_pod_s,
        converged_s: secs(converged),
        shards_after,
        survivors: profiles,
    };
    Ok((result, members))
}

/// Stop every replica (SIGTERM: each releases its Leases on the way out).
async fn stop_all(members: Vec<Member>) -> Result<()> {
    for m in members {
        m.host.stop().await.with_context(|| format!("stopping replica {}", m.identity))?;
    }
    Ok(())
}

fn report_phase(name: &str, p: &Phase) {
    let per: Vec<String> =
        p.replicas.iter().map(|r| format!("{} {} shards {:.0} reconciles", r.identity, r.shards, r.reconciles)).collect();
    eprintln!(
        "scale-out: {name}: settled {:.2} s, converged {:.2} s (created {:.2} s), imbalance {:.2} (workload {:.2}); {}",
        p.settle_s,
        p.converged_s,
        p.created_s,
        p.imbalance(),
        p.workload_imbalance(),
        per.join(", ")
    );
}

pub async fn run(args: Args) -> Result<Results> {
    ensure!(args.shards >= 3 && args.namespaces > 0 && args.replicasets > 0 && args.replicas > 0, "empty workload or fewer than 3 shards");
    std::fs::create_dir_all(&args.host.work_dir)?;
    let client = kube_util::client(&args.host.kubeconfig).await?;
    let wasm = std::fs::read(&args.host.plugin).with_context(|| format!("reading {}", args.host.plugin.display()))?;
    let base = std::fs::read_to_string(&args.host.manifest).with_context(|| format!("reading {}", args.host.manifest.display()))?;
    let manifest =
        format!("{}\n# Key-space shards spread over the replicas (wasmloop-bench scale-out).\nshards: {}\n", base.trim_end(), args.shards);
    let parsed =
        PluginManifest::parse(&manifest, PLUGIN).context("the manifest with shards: does not parse (does it already say shards:?)")?;
    ensure!(
        parsed.name == PLUGIN && parsed.controller.shards == args.shards,
        "the manifest is not the {PLUGIN} plugin's in {} shards",
        args.shards
    );
    let tag = std::process::id();
    let plugin_ns = format!("wasmloop-bench-scaleout-{tag}");
    ensure_namespace(&client, &plugin_ns).await?;
    apply_plugin(&client, &plugin_ns, PLUGIN, &wasm, &manifest).await?;
    let fleet = Fleet { args: &args, plugin_ns: plugin_ns.clone() };
    let settle_timeout = Duration::from_secs(args.timeout_secs);
    let names = |phase: &str| (0..args.namespaces).map(|i| format!("so-{tag}-{phase}-{i}")).collect::<Vec<_>>();

    // 1. One replica owns every shard.
    let started = Instant::now();
    let mut one = fleet.start(&["r0"]).await?;
    let split = settled(&mut one, args.shards, settle_timeout).await?;
    let settle_s = started.elapsed().as_secs_f64();
    let ns_one = names("one");
    create_namespaces(&client, &ns_one).await?;
    let p1 = phase(&client, &args, &mut one, &split, settle_s, &ns_one, "one", Work::Create).await?;
    report_phase("1 replica", &p1);
    stop_all(one).await?;
    futures::stream::iter(&ns_one)
        .map(|ns| delete_workload(&client, ns, settle_timeout))
        .buffer_unordered(NS_INFLIGHT)
        .try_collect::<()>()
        .await?;

    // Phase 1's Leases carry its object counts (published before its workload was deleted):
    // phase 2 starts as a fresh install does, with none.
    Api::<Lease>::namespaced(client.clone(), &plugin_ns)
        .delete_collection(&Default::default(), &Default::default())
        .await
        .context("deleting phase 1's Leases")?;

    // 2. Three replicas, 10/10/10 shards of 30.
    let started = Instant::now();
    let mut three = fleet.start(&["r1", "r2", "r3"]).await?;
    let split = settled(&mut three, args.shards, settle_timeout).await?;
    let settle_s = started.elapsed().as_secs_f64();
    let ns_three = names("three");
    create_namespaces(&client, &ns_three).await?;
    let p3 = phase(&client, &args, &mut three, &split, settle_s, &ns_three, "three", Work::Create).await?;
    report_phase("3 replicas", &p3);
    let started = Instant::now();
    let split = weighted_split(&client, &args, &plugin_ns, &mut three).await?;
    let settle_s = started.elapsed().as_secs_f64();
    let steady = phase(&client, &args, &mut three, &split, settle_s, &ns_three, "three", Work::Scale(args.replicas + 1)).await?;
    report_phase("3 replicas, weights settled, every ReplicaSet scaled by one", &steady);

    // 3. kill -9 of r1; new work in every shard.
    let fo_prefix = format!("so-{tag}-fo");
    let (fo, survivors) = failover(&client, &args, &plugin_ns, three, &fo_prefix).await?;
    let warm: Vec<String> = fo.shards.iter().map(|s| format!("{:.0}", s.warm_s() * 1e3)).collect();
    eprintln!(
        "scale-out: failover: Leases taken {:.2}–{:.2} s after the kill, Lease → first Pod [{}] ms, resumed {:.2} s, converged {:.2} s, shards after {:?}",
        fo.shards.iter().map(|s| s.lease_s).fold(f64::INFINITY, f64::min),
        fo.shards.iter().map(|s| s.lease_s).fold(0.0, f64::max),
        warm.join(", "),
        fo.resumed_s(),
        fo.converged_s,
        fo.shards_after
    );
    stop_all(survivors).await?;
    // The later sections' controllers watch every namespace: leave nothing behind.
    let ns_failover = spread_namespaces(&fo_prefix, args.namespaces.max(args.shards), args.shards);
    futures::stream::iter(ns_three.iter().chain(&ns_failover))
        .map(|ns| delete_workload(&client, ns, settle_timeout))
        .buffer_unordered(NS_INFLIGHT)
        .try_collect::<()>()
        .await?;
    Ok(Results {
        host_profile: args.host_profile.clone(),
        shards: args.shards,
        namespaces: args.namespaces,
        replicasets: args.replicasets,
        replicas: args.replicas,
        lease_duration_s: args.lease_duration,
        lease_grace_s: args.lease_grace,
        workers: parsed.controller.workers,
        one: p1,
        three: p3,
        steady,
        failover: fo,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn owned_shards_are_read_from_the_exposition() {
        let text = "# HELP wasmloop_shard_owned 1 for each shard\n\
                    wasmloop_shard_owned{plugin=\"replicaset\",shard=\"replicaset/3-of-30\"} 1\n\
                    wasmloop_shard_owned{plugin=\"replicaset\",shard=\"replicaset/4-of-30\"} 0\n\
                    wasmloop_shard_members 3\n";
        assert_eq!(owned_shards(text).into_iter().collect::<Vec<_>>(), ["replicaset/3-of-30"]);
    }

    #[test]
    fn spread_namespaces_cover_every_shard_evenly() {
        let ns = spread_namespaces("so-1-fo", 30, 30);
        let shards: BTreeSet<String> = ns.iter().map(|n| shard_of_namespace(n, 30)).collect();
        assert_eq!((ns.len(), shards.len()), (30, 30));
        let ns = spread_namespaces("so-1-fo", 90, 30);
        let mut per: HashMap<String, usize> = HashMap::new();
        ns.iter().for_each(|n| *per.entry(shard_of_namespace(n, 30)).or_default() += 1);
        assert!(per.len() == 30 && per.values().all(|n| *n == 3));
    }

    #[test]
    fn imbalance_is_max_over_mean() {
        assert_eq!(max_over_mean([10.0, 10.0, 10.0]), 1.0);
        assert!((max_over_mean([12.0, 9.0, 9.0]) - 1.2).abs() < 1e-9);
        assert_eq!(max_over_mean([0.0, 0.0]), 0.0);
    }
}
