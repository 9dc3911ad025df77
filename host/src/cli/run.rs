//! `wasmloop run`: the host process.
//!
//! Order of events: connect → serve `/healthz` `/metrics` `/readyz` → load plugins from
//! ConfigMaps (informers synced, components compiled) → ready → reconcile until SIGTERM/SIGINT
//! → stop taking keys, let running reconciles finish (bounded), (release the Lease), exit 0.
//! With `--leader-elect` a replica is a warm standby until it holds the Lease: ready and
//! loaded, its workers waiting at the write fence; it reconciles while it leads and stands by
//! again if it loses the Lease.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use parking_lot::Mutex;
use prometheus_client::registry::Registry;
use tokio::sync::watch;
use tracing::{info, warn};
use wasmloop::admission::{Admission, HostObjects, Protected, Scopes};
use wasmloop::controller::{ControllerMetrics, Shared};
use wasmloop::executor::Executor;
use wasmloop::fence::Fence;
use wasmloop::hotload::{PluginManager, PluginManagerConfig};
use wasmloop::identity::PluginIdentity;
use wasmloop::informer::InformerRegistry;
use wasmloop::kinds::KindResolver;
use wasmloop::leader::{Election, LeaseConfig};
use wasmloop::plugin::memory_metrics::LoadedPlugins;
use wasmloop::plugin::{ByteSize, EngineLimits, PluginEngine, RecordOptions, address_space};
use wasmloop::server::{self, Readiness};
use wasmloop::shard::{ShardConfig, Sharding};

use super::{LogFormat, parse_duration, parse_size};

#[derive(clap::Args, Debug)]
pub struct RunArgs {
    /// Kubeconfig to use (default: KUBECONFIG, ~/.kube/config, then in-cluster).
    #[arg(long, env = "KUBECONFIG")]
    kubeconfig: Option<String>,
    /// Namespace of the plugin ConfigMaps (label wasmloop.dev/plugin=true).
    #[arg(long, env = "WASMLOOP_PLUGIN_NAMESPACE", default_value = "wasmloop")]
    plugin_namespace: String,
    /// Load plugin ConfigMaps from every namespace instead.
    #[arg(long, env = "WASMLOOP_ALL_NAMESPACES")]
    all_namespaces: bool,
    /// Address of /metrics, /healthz and /readyz.
    #[arg(long, env = "WASMLOOP_LISTEN", default_value = "0.0.0.0:8080")]
    listen: SocketAddr,
    /// Only the holder of a Lease reconciles (for several replicas).
    #[arg(long, env = "WASMLOOP_LEADER_ELECT", conflicts_with = "shard_mode")]
    leader_elect: bool,
    /// `plugin`: spread the plugins (and their key-space shards) over the live replicas, each
    /// shard owned through its own Lease; every replica stays warm for every plugin.
    #[arg(long, env = "WASMLOOP_SHARD_MODE", value_enum, default_value = "none")]
    shard_mode: ShardMode,
    /// Name of the Lease.
    #[arg(long, env = "WASMLOOP_LEASE_NAME", default_value = "wasmloop")]
    lease_name: String,
    /// Namespace of the Lease (default: the plugin namespace).
    #[arg(long, env = "WASMLOOP_LEASE_NAMESPACE")]
    lease_namespace: Option<String>,
    /// Lease duration in seconds: how long a dead leader blocks a takeover.
    #[arg(long, env = "WASMLOOP_LEASE_DURATION", default_value_t = 15)]
    lease_duration: u64,
    /// Renew this many seconds before the lease expires.
    #[arg(long, env = "WASMLOOP_LEASE_GRACE", default_value_t = 5)]
    lease_grace: u64,
    /// This replica's identity in the Lease and in Events (default: POD_NAME, else host name + PID).
    #[arg(long, env = "POD_NAME")]
    identity: Option<String>,
    /// The ServiceAccount the host runs as, `namespace/name`: plugins write nothing in its
    /// namespace and no RBAC that binds it (default: in a cluster, the pod's own).
    #[arg(long, env = "WASMLOOP_SERVICE_ACCOUNT")]
    service_account: Option<String>,
    /// Whose identity plugin writes carry: `own` (each plugin's ServiceAccount, by
    /// impersonation, so the API server checks them against that account's RBAC) or `host`
    /// (the host's credentials: only the host's own checks stand between plugins and the
    /// cluster; for single-tenant clusters and development).
    #[arg(long, env = "WASMLOOP_PLUGIN_IDENTITY", value_enum, default_value = "own")]
    plugin_identity: PluginIdentity,
    /// Linear memory all plugins together may hold (sum of `limits.memory × concurrency`); a
    /// plugin that does not fit is refused naming both numbers. Default: the container's
    /// memory limit (cgroup), else no budget.
    #[arg(long, env = "WASMLOOP_PLUGIN_MEMORY_BUDGET", value_parser = parse_size)]
    plugin_memory_budget: Option<ByteSize>,
    #[command(flatten)]
    load: super::LoadArgs,
    #[command(flatten)]
    oci: super::oci::OciRunArgs,
    /// Reconciles the plugin instance pool holds at once, all plugins together (two of them kept
    /// for loading plugins). Each instance reserves address space for two linear memories: see
    /// --plugin-memory-max.
    #[arg(long, env = "WASMLOOP_INSTANCE_POOL", default_value_t = EngineLimits::default().instances, value_parser = clap::value_parser!(u32).range(3..))]
    instance_pool: u32,
    /// The largest `limits.memory` a plugin may have; every memory slot of the pool is this
    /// large (address space, committed only as used).
    #[arg(long, env = "WASMLOOP_PLUGIN_MEMORY_MAX", default_value_t = EngineLimits::default().max_memory, value_parser = parse_size)]
    plugin_memory_max: ByteSize,
    #[command(flatten)]
    record: RecordArgs,
    /// How long running reconciles may take to finish on shutdown (e.g. 25s).
    #[arg(long, env = "WASMLOOP_SHUTDOWN_GRACE", default_value = "25s", value_parser = parse_duration)]
    shutdown_grace: Duration,
    /// How often the kinds of loaded plugins are asked of discovery.
    #[arg(long, env = "WASMLOOP_REDISCOVERY_INTERVAL", default_value = "10s", value_parser = parse_duration)]
    rediscovery_interval: Duration,
    /// How long a kind a loaded plugin reads must be missing from discovery (in three answers
    /// at least) before the plugin is stopped until it is served again. A kind missing from one
    /// answer (an API server that restarts serves its CRDs a moment later) stops nothing.
    #[arg(long, env = "WASMLOOP_KIND_GONE_AFTER", default_value = "20s", value_parser = parse_duration)]
    kind_gone_after: Duration,
    /// Log format.
    #[arg(long, env = "WASMLOOP_LOG_FORMAT", value_enum, default_value = "text")]
    log_format: LogFormat,
}

/// Recording reconciles for `wasmloop replay` (off unless `--record-dir` and a key or
/// `--record-failures` are given).
#[derive(clap::Args, Debug, Clone)]
pub struct RecordArgs {
    /// Record chosen reconciles into DIR/<plugin>/ as `.json.zst` (see --record-key,
    /// --record-failures). Writing never blocks or fails a reconcile.
    #[arg(long, env = "WASMLOOP_RECORD_DIR", value_name = "DIR")]
    record_dir: Option<PathBuf>,
    /// Record every reconcile of this key (`apps/v1/ReplicaSet/shop/web`); repeatable.
    #[arg(long, env = "WASMLOOP_RECORD_KEY", value_name = "KEY", requires = "record_dir", value_delimiter = ',')]
    record_key: Vec<String>,
    /// Record every failing reconcile.
    #[arg(long, env = "WASMLOOP_RECORD_FAILURES", requires = "record_dir")]
    record_failures: bool,
    /// Recordings kept per plugin; the oldest beyond are removed.
    #[arg(long, env = "WASMLOOP_RECORD_MAX", value_name = "N", default_value_t = RecordOptions::DEFAULT_MAX_KEPT)]
    record_max: usize,
    /// Largest recording written (compressed); a larger one is dropped and logged.
    #[arg(long, env = "WASMLOOP_RECORD_MAX_BYTES", default_value = "1Mi", value_parser = parse_size)]
    record_max_bytes: ByteSize,
}

impl RunArgs {
    /// The engine's pool as `--instance-pool`, `--plugin-memory-max` and the load flags size it.
    fn engine_limits(&self) -> EngineLimits {
        let load = self.load.engine_limits();
        EngineLimits { max_memory: self.plugin_memory_max, ..address_space::scaled(&load, self.instance_pool) }
    }
}

impl RecordArgs {
    /// The recording options these flags set (`None`: nothing recorded).
    pub fn options(&self) -> anyhow::Result<Option<RecordOptions>> {
        let Some(dir) = &self.record_dir else { return Ok(None) };
        if self.record_key.is_empty() && !self.record_failures {
            anyhow::bail!("--record-dir records nothing without --record-key or --record-failures");
        }
        let mut options = RecordOptions::new(dir.clone(), &self.record_key, self.record_failures)?;
        options.max_kept = self.record_max.max(1);
        options.max_bytes = self.record_max_bytes.as_usize();
        Ok(Some(options))
    }
}

/// How replicas share the work.
#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum ShardMode {
    /// Every replica reconciles everything (or, with --leader-elect, the leader does).
    None,
    /// Each plugin shard is owned by one replica, chosen by rendezvous hashing over the live ones.
    Plugin,
}

impl RunArgs {
    /// The namespace of the Leases: --lease-namespace, else the plugin namespace.
    fn lease_ns(&self) -> String {
        self.lease_namespace.clone().unwrap_or_else(|| self.plugin_namespace.clone())
    }

    fn uses_leases(&self) -> bool {
        self.leader_elect || self.shard_mode == ShardMode::Plugin
    }
}

/// Where the host keeps its own objects: plugin ConfigMaps, the Lease, its ServiceAccount.
fn protected_objects(args: &RunArgs, registry: InformerRegistry) -> anyhow::Result<Protected> {
    let service_account = match args.service_account.as_deref() {
        Some(text) => {
            let (ns, name) = text
                .split_once('/')
                .filter(|(ns, name)| !ns.is_empty() && !name.is_empty() && !name.contains('/'))
                .with_context(|| format!("--service-account {text:?}: expected <namespace>/<name>"))?;
            Some((ns.to_string(), name.to_string()))
        }
        None => in_cluster_service_account(),
    };
    let hosts = HostObjects {
        plugin_namespaces: if args.all_namespaces { Vec::new() } else { vec![args.plugin_namespace.clone()] },
        lease_namespace: args.uses_leases().then(|| args.lease_ns()),
        service_account,
    };
    Ok(Protected::new(hosts, registry))
}

/// In a pod: the namespace and ServiceAccount from the mounted token's claims.
fn in_cluster_service_account() -> Option<(String, String)> {
    const DIR: &str = "/var/run/secrets/kubernetes.io/serviceaccount";
    let token = std::fs::read_to_string(format!("{DIR}/token")).ok()?;
    let claims = token.split('.').nth(1)?;
    let bytes = base64::Engine::decode(&base64::engine::general_purpose::URL_SAFE_NO_PAD, claims.trim_end_matches('=')).ok()?;
    let claims: serde_json::Value = serde_json::from_slice(&bytes).ok()?;
    // "system:serviceaccount:<namespace>:<name>"
    let sub = claims.get("sub")?.as_str()?;
    let mut parts = sub.strip_prefix("system:serviceaccount:")?.splitn(2, ':');
    Some((parts.next()?.to_string(), parts.next()?.to_string()))
}

/// The memory limit of this container (cgroup v2 `memory.max`, else v1), if it has one.
fn container_memory_limit() -> Option<ByteSize> {
    ["/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory/memory.limit_in_bytes"].iter().find_map(|path| {
        let text = std::fs::read_to_string(path).ok()?;
        // "max" (v2) or a huge number (v1) means no limit.
        text.trim().parse::<u64>().ok().filter(|n| *n < 1 << 50).map(ByteSize)
    })
}

pub async fn run(args: RunArgs) -> anyhow::Result<()> {
    super::init_tracing(args.log_format);
    // The instance pool's address space first: under an RLIMIT_AS it cannot have, say so now.
    let engine_limits = address_space::fit(args.engine_limits(), address_space::limit());
    address_space::check(&engine_limits, address_space::limit())?;
    let record = args.record.options()?;
    let identity = args.identity.clone().unwrap_or_else(default_identity);
    let connection = wasmloop::client::Connection::new(args.kubeconfig.as_deref()).await?;
    let (client, requests) = (connection.client().clone(), connection.requests().clone());
    let resolver = KindResolver::new(client.clone());
    let registry = InformerRegistry::new(resolver.clone());
    let protected = protected_objects(&args, registry.clone())?;
    info!(hosts = ?protected.hosts(), plugin_identity = ?args.plugin_identity, "the host's own objects are protected from every plugin");
    // With leader election, writes go out only while this replica's Lease is valid.
    let fence = if args.leader_elect { Fence::closed() } else { Fence::open() };
    let admission = Admission::new(Scopes::Discovery(resolver.clone()), protected);
    let executor = Executor::new(resolver, Some(identity.clone())).with_connection(connection);
    let mut prom = Registry::default();
    requests.register(&mut prom);
    let metrics = ControllerMetrics::new(&mut prom);
    let shared = Shared::new(registry.clone(), metrics).with_admission(admission).with_fence(fence.clone());
    let plugin_metrics = wasmloop::hotload::metrics::PluginMetrics::new(&mut prom);
    let leading = prometheus_client::metrics::gauge::Gauge::<i64>::default();
    prom.register(
        "wasmloop_leader",
        "1 while this replica holds the Lease and reconciles (1 without --leader-elect; 0 with --shard-mode plugin: see wasmloop_shard_owned)",
        leading.clone(),
    );
    // The leader's fence is counted here (the shards' fences by sharding).
    let fence_metrics = args.leader_elect.then(|| wasmloop::fence::FenceMetrics::new(&mut prom));
    let sharding = match args.shard_mode {
        ShardMode::None => None,
        ShardMode::Plugin => {
            let config = ShardConfig {
                namespace: args.lease_ns(),
                identity: identity.clone(),
                duration: Duration::from_secs(args.lease_duration),
                grace: Duration::from_secs(args.lease_grace),
                release_timeout: args.shutdown_grace,
            };
            Some(Sharding::start(client.clone(), config, &mut prom).context("starting sharding")?)
        }
    };
    let prom = Arc::new(Mutex::new(prom));
    let load_limits = args.load.load_limits()?;
    let engine = tokio::task::spawn_blocking(move || PluginEngine::with_limits(engine_limits)).await??;

    let (stop_tx, stop) = watch::channel(false);
    tokio::spawn(watch_signals(stop_tx));
    let ready = Readiness::default();
    let mut http_stop = stop.clone();
    let (addr, http) = server::serve(args.listen, prom.clone(), ready.clone(), shared.shadows.clone(), async move {
        let _ = http_stop.wait_for(|s| *s).await;
    })
    .await?;
    info!(%addr, %identity, "serving /metrics, /healthz, /readyz, /shadow");

    let precompiled_dir = args.load.precompiled_dir();
    let oci = args.oci.settings(Some(precompiled_dir.clone().unwrap_or_else(super::default_precompiled_dir).as_path()))?;
    let config = PluginManagerConfig {
        precompiled_dir,
        oci,
        shutdown_grace: args.shutdown_grace,
        memory_budget: args.plugin_memory_budget.or_else(container_memory_limit),
        max_component_size: load_limits.max_component_size,
        compile_budget: load_limits.compile_budget,
        sharding: sharding.clone(),
        plugin_identity: args.plugin_identity,
        instance: Some(identity.clone()),
        record: record.clone(),
        home_namespace: args.all_namespaces.then(|| args.plugin_namespace.clone()),
        rediscovery: args.rediscovery_interval,
        gone: wasmloop::hotload::GonePolicy { polls: 3, window: args.kind_gone_after },
        ..PluginManagerConfig::new((!args.all_namespaces).then(|| args.plugin_namespace.clone()))
    };
    let start_manager = || PluginManager::start(engine.clone(), shared.clone(), executor.clone(), plugin_metrics.clone(), config.clone());
    // `wasmloop_plugin_state` from the plugin ConfigMaps' status annotations, on every replica
    // (the manager's own informer: no request more).
    let states = wasmloop::plugin_state::StateCollector::watch(&registry, config.namespace.clone()).await.context("plugin states")?;
    prom.lock().register_collector(Box::new(states));
    // Memory per plugin, from the plugins the manager runs (kept current by `keep_loaded`).
    let loaded = LoadedPlugins::default();
    prom.lock().register_collector(Box::new(loaded.collector()));

    if !args.leader_elect {
        let manager = start_manager().await.context("starting the plugin manager")?;
        leading.set(i64::from(sharding.is_none()));
        ready.set(true);
        info!(sharded = sharding.is_some(), "ready");
        tokio::join!(wait_stop(stop.clone()), keep_loaded(&manager, &loaded, stop.clone()));
        ready.set(false);
        // Running reconciles finish behind open fences; then the shards' Leases are released
        // (other replicas take them at once) and this replica leaves the membership.
        manager.shutdown().await;
        if let Some(sharding) = sharding {
            sharding.shutdown().await;
        }
    } else {
        let lease = LeaseConfig {
            namespace: args.lease_ns(),
            name: args.lease_name.clone(),
            identity: identity.clone(),
            duration: Duration::from_secs(args.lease_duration),
            grace: Duration::from_secs(args.lease_grace),
        };
        let described = format!("{}/{}", lease.namespace, lease.name);
        let mut election = Election::join(client.clone(), fence.clone(), lease, fence_metrics.unwrap_or_default()).await?;
        // Leadership is followed from the moment this replica joins: the Lease may be ours (and
        // the fence open) before the plugins below are loaded, and the gauge must say so then.
        let follower = tokio::spawn({
            let (stop, leading) = (stop.clone(), leading.clone());
            async move {
                election.follow(&stop, |l| _ = leading.set(i64::from(l))).await;
                election
            }
        });
        // Warm standby: informers synced and every plugin loaded and compiled before the Lease
        // is ours; the workers wait at the fence, so nothing is reconciled or written until then.
        let manager = start_manager().await.context("starting the plugin manager")?;
        ready.set(true);
        info!(lease = %described, "warm: plugins loaded");
        let (election, ()) = tokio::join!(follower, keep_loaded(&manager, &loaded, stop.clone()));
        let election = election.context("following the leader election")?;
        // Stopping while leading: running reconciles finish their outcomes behind an open fence.
        manager.shutdown().await;
        ready.set(false);
        election.leave(Duration::from_secs(5)).await;
    }
    let _ = tokio::time::timeout(Duration::from_secs(5), http).await;
    info!("stopped");
    Ok(())
}

/// Keep `loaded` (the plugins behind the memory gauges) current, every 5 s until `stop`.
async fn keep_loaded(manager: &PluginManager, loaded: &LoadedPlugins, mut stop: watch::Receiver<bool>) {
    loop {
        loaded.set(manager.plugins().await);
        tokio::select! {
            _ = stop.wait_for(|s| *s) => return,
            () = tokio::time::sleep(Duration::from_secs(5)) => {}
        }
    }
}

async fn wait_stop(mut stop: watch::Receiver<bool>) {
    let _ = stop.wait_for(|s| *s).await;
}

async fn watch_signals(stop: watch::Sender<bool>) {
    use tokio::signal::unix::{SignalKind, signal};
    let (Ok(mut term), Ok(mut int)) = (signal(SignalKind::terminate()), signal(SignalKind::interrupt())) else {
        warn!("cannot install signal handlers");
        return;
    };
    tokio::select! {
        _ = term.recv() => info!("SIGTERM: shutting down"),
        _ = int.recv() => info!("SIGINT: shutting down"),
    }
    stop.send_replace(true);
}

fn default_identity() -> String {
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname").map(|h| h.trim().to_string()).unwrap_or_else(|_| "wasmloop".into());
    format!("{host}-{}", std::process::id())
}

#[cfg(test)]
mod tests {
    use clap::Parser;

    use super::*;

    #[derive(Parser, Debug)]
    struct Probe {
        #[command(flatten)]
        record: RecordArgs,
    }

    #[derive(Parser, Debug)]
    struct RunProbe {
        #[command(flatten)]
        run: RunArgs,
    }

    #[test]
    fn the_pool_flags_default_to_the_engine_defaults_and_scale_it() {
        let p = RunProbe::try_parse_from(["probe"]).unwrap();
        assert_eq!(p.run.engine_limits(), EngineLimits::default());
        let p = RunProbe::try_parse_from(["probe", "--instance-pool", "16", "--plugin-memory-max", "128Mi"]).unwrap();
        let l = p.run.engine_limits();
        assert_eq!((l.instances, l.memories, l.tables, l.core_instances, l.max_memory), (16, 32, 128, 128, ByteSize::mib(128)));
        assert!(RunProbe::try_parse_from(["probe", "--instance-pool", "2"]).is_err(), "two are kept for loading");
    }

    #[test]
    fn recording_is_off_unless_asked_for_and_bounded() {
        let p = Probe::try_parse_from(["probe"]).unwrap();
        assert_eq!(p.record.options().unwrap(), None);
        let p = Probe::try_parse_from(["probe", "--record-dir", "/tmp/r"]).unwrap();
        assert!(p.record.options().is_err(), "a directory without keys or failures records nothing");
        assert!(Probe::try_parse_from(["probe", "--record-failures"]).is_err(), "--record-failures needs --record-dir");
        let p = Probe::try_parse_from([
            "probe",
            "--record-dir",
            "/tmp/r",
            "--record-key",
            "apps/v1/ReplicaSet/shop/web",
            "--record-key",
            "v1/Namespace/team-a",
            "--record-max",
            "5",
            "--record-max-bytes",
            "64Ki",
        ])
        .unwrap();
        let o = p.record.options().unwrap().unwrap();
        assert_eq!(o.keys.iter().map(String::as_str).collect::<Vec<_>>(), ["apps/v1/ReplicaSet/shop/web", "v1/Namespace/team-a"]);
        assert_eq!((o.max_kept, o.max_bytes, o.failures), (5, 64 * 1024, false));
        let p = Probe::try_parse_from(["probe", "--record-dir", "/tmp/r", "--record-key", "nonsense"]).unwrap();
        assert!(p.record.options().is_err());
    }
}
