//! `wasmloop dev`: the plugin author's inner loop. On every save in a plugin crate: build the
//! component, pack it with its manifest, apply it to the cluster as plugin ConfigMaps, wait until
//! it is loaded (or refused), and show each reconcile's actions and the plugin's log lines as
//! they happen, with the time from the save to the new version's first reconcile. A failed
//! build or a refused load is shown and the loop goes on; the last good version keeps running.
//!
//! The host that loads the ConfigMaps runs inside this process, watching only the session's
//! namespace (`--namespace`, default `wasmloop-dev-<package>`): the same hot-load path as
//! `wasmloop run` (manifest, grants, contract checks, keep-last-good), but its reconcile stream
//! is right here, two sessions on two plugins do not load each other's, and a production host
//! (watching its own namespace) never runs a version in development. Its writes are real: the
//! plugin acts on the cluster of the kubeconfig, under that identity's RBAC.

mod cargo;
mod changes;
mod local;
mod log;

use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, bail};
use k8s_openapi::api::core::v1::{ConfigMap, Namespace};
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
use tokio::sync::broadcast;
use tokio::time::Instant;
use tracing::{debug, info, warn};
use wasmloop::admission::{Admission, HostObjects, Protected, Scopes};
use wasmloop::controller::{ControllerMetrics, Shared};
use wasmloop::executor::Executor;
use wasmloop::hotload::source::{PAYLOAD_LABEL, PLUGIN_LABEL};
use wasmloop::hotload::{LoadEvent, LoadOrigin, PluginManager, PluginManagerConfig, PluginManifest, PluginMetrics, WaitReason, pack};
use wasmloop::informer::InformerRegistry;
use wasmloop::kinds::KindResolver;
use wasmloop::plugin::{ByteSize, FunctionCache, FunctionCacheStats, PluginEngine};

use self::cargo::{BuildFailed, Built, PluginCrate};
use self::changes::Changes;
use self::local::LocalControlPlane;
use self::log::{DEV_LOG, Reconciled};

/// Compiled functions kept between versions: two generations of at most this many bytes. Six
/// versions of the guide's plugin kept 34 MiB in Python (componentize-py, 18 MB component), 7 MiB
/// in TypeScript (QuickJS, 1.8 MB), 0.9 MiB in Rust; each version after the first compiled 1-5%
/// of its functions, the rest reused.
const DEV_FUNCTION_CACHE: ByteSize = ByteSize::mib(64);

/// How long to wait for a new version's first reconcile before saying there was none.
const FIRST_RECONCILE_WAIT: Duration = Duration::from_secs(10);

#[derive(clap::Args, Debug)]
pub struct DevArgs {
    /// The plugin's directory: a Rust crate, an npm package (TypeScript/JavaScript) or a Python
    /// project, as `wasmloop new --lang` makes them.
    #[arg(default_value = ".")]
    dir: PathBuf,
    /// Kubeconfig to use (default: KUBECONFIG, then ~/.kube/config). Not read from KUBECONFIG
    /// by the argument parser, so `--local` works in a shell that sets it (the client reads it
    /// when neither is given).
    #[arg(long)]
    kubeconfig: Option<PathBuf>,
    /// Start the project's local control plane (scripts/control-plane.sh) and use it; it is
    /// stopped when `wasmloop dev` exits.
    #[arg(long, conflicts_with = "kubeconfig")]
    local: bool,
    /// Namespace of the plugin ConfigMaps, created if missing (default `wasmloop-dev-<package>`).
    /// The session owns it: plugin ConfigMaps left there by an earlier session are deleted at the
    /// start, and only this process's host loads plugins from it. Keep it apart from the
    /// namespace a production host watches.
    #[arg(long)]
    namespace: Option<String>,
    /// The admin's manifest (default: `<package>.plugin.yaml` in the crate, as `wasmloop new`
    /// makes it; else one derived like `wasmloop pack` does: `read` on what the plugin declares,
    /// plus `--allow`).
    #[arg(long)]
    manifest: Option<PathBuf>,
    /// Without a manifest: a write to grant, `KIND=VERB[,VERB]` (as `wasmloop pack --allow`).
    #[arg(long = "allow", value_name = "KIND=VERBS")]
    allow: Vec<String>,
    /// A file of CustomResourceDefinitions (YAML; repeatable) to server-side apply before each
    /// version is loaded. With `--local` they are applied adapted to its v1.20 API server
    /// (empty-string defaults removed, list-map keys left without a default made required: what
    /// it says and why is logged); elsewhere as written, and a refusal says why and how to fix it.
    #[arg(long = "crd", value_name = "FILE")]
    crds: Vec<PathBuf>,
    /// The cargo profile to build with (Rust plugins).
    #[arg(long, default_value = "release")]
    profile: String,
    #[command(flatten)]
    load: super::LoadArgs,
}

pub fn run(args: DevArgs) -> anyhow::Result<ExitCode> {
    let reconciles = log::init();
    let rt = tokio::runtime::Builder::new_multi_thread().enable_all().build()?;
    rt.block_on(dev(args, reconciles))?;
    Ok(ExitCode::SUCCESS)
}

async fn dev(args: DevArgs, reconciles: broadcast::Sender<Reconciled>) -> anyhow::Result<()> {
    let krate = PluginCrate::locate(&args.dir, &args.profile)?;
    let local = if args.local { Some(LocalControlPlane::start()?) } else { None };
    let kubeconfig = local.as_ref().map(|l| l.kubeconfig.clone()).or(args.kubeconfig.clone());
    let result = match Session::start(&args, &krate, kubeconfig, reconciles).await {
        Ok(session) => session.run().await,
        Err(e) => Err(e),
    };
    drop(local);
    result
}

/// A running dev loop: the crate, the in-process host, and what was applied last.
struct Session<'a> {
    krate: &'a PluginCrate,
    args: &'a DevArgs,
    /// Where the plugin ConfigMaps go.
    namespace: String,
    client: kube::Client,
    engine: PluginEngine,
    manager: PluginManager,
    loads: broadcast::Receiver<LoadEvent>,
    reconciles: broadcast::Sender<Reconciled>,
    /// The component digest and manifest last applied (loaded or refused).
    applied: Option<(String, String)>,
    /// Payload ConfigMaps this session created, oldest first.
    payloads: Vec<String>,
    /// Versions loaded so far.
    versions: u32,
}

/// What started a cycle: the first write of a save, or the start of `wasmloop dev`.
#[derive(Clone, Copy)]
struct Trigger {
    at: Instant,
    what: &'static str,
}

impl<'a> Session<'a> {
    async fn start(
        args: &'a DevArgs,
        krate: &'a PluginCrate,
        kubeconfig: Option<PathBuf>,
        reconciles: broadcast::Sender<Reconciled>,
    ) -> anyhow::Result<Self> {
        let kubeconfig =
            kubeconfig.map(|p| p.to_str().map(str::to_string).with_context(|| format!("{} is not UTF-8", p.display()))).transpose()?;
        let (client, _) = wasmloop::client::build(kubeconfig.as_deref()).await?;
        let namespace = args.namespace.clone().unwrap_or_else(|| default_namespace(&krate.package));
        ensure_namespace(&client, &namespace).await?;
        clear_plugins(&client, &namespace).await?;
        let resolver = KindResolver::new(client.clone());
        let registry = InformerRegistry::new(resolver.clone());
        let hosts = HostObjects { plugin_namespaces: vec![namespace.clone()], lease_namespace: None, service_account: None };
        let admission = Admission::new(Scopes::Discovery(resolver.clone()), Protected::new(hosts, registry.clone()));
        let executor = Executor::new(resolver, Some("wasmloop-dev".into()));
        let mut prom = prometheus_client::registry::Registry::default();
        let (metrics, plugin_metrics) = (ControllerMetrics::new(&mut prom), PluginMetrics::new(&mut prom));
        let shared = Shared::new(registry, metrics).with_admission(admission);
        let load_limits = args.load.load_limits()?;
        let engine_limits = args.load.engine_limits();
        // Every version is new here: no precompiled cache on disk, but each compile reuses the
        // functions earlier versions compiled (only what the edit changed is compiled again).
        let functions = Arc::new(FunctionCache::new(DEV_FUNCTION_CACHE));
        let engine = tokio::task::spawn_blocking(move || PluginEngine::with_function_cache(engine_limits, functions)).await??;
        let config = PluginManagerConfig {
            precompiled_dir: None,
            max_component_size: load_limits.max_component_size,
            compile_budget: load_limits.compile_budget,
            ..PluginManagerConfig::new(Some(namespace.clone()))
        };
        let manager = PluginManager::start(engine.clone(), shared, executor, plugin_metrics, config).await.context("starting the host")?;
        let loads = manager.events();
        info!(target: DEV_LOG, "watching {} (package {}); plugin ConfigMaps in namespace {}", krate.dir.display(), krate.package, namespace);
        Ok(Self { krate, args, namespace, client, engine, manager, loads, reconciles, applied: None, payloads: Vec::new(), versions: 0 })
    }

    /// Build and load now, then again on every save, until SIGINT/SIGTERM. A save during a
    /// build starts it again (the old build is killed); a save during a load is taken next.
    async fn run(mut self) -> anyhow::Result<()> {
        let mut changes = Changes::watch(&self.krate.dir, &self.krate.outputs())?;
        let mut stop = std::pin::pin!(stop_signal());
        let mut trigger = Trigger { at: Instant::now(), what: "the start" };
        loop {
            match self.krate.toolchain {
                cargo::Toolchain::Cargo => info!(target: DEV_LOG, "building ({} profile)", self.krate.profile),
                other => info!(target: DEV_LOG, "building ({other:?})"),
            }
            let built = tokio::select! {
                built = self.krate.build() => built,
                change = changes.next() => match change {
                    Some(change) => {
                        trigger = self.saved(change);
                        continue;
                    }
                    None => break,
                },
                () = &mut stop => break,
            };
            let deployed = async {
                match built? {
                    Ok(built) => self.deploy(built, trigger).await,
                    Err(BuildFailed(messages)) => {
                        warn!(target: DEV_LOG, "build failed; the last good version keeps running\n{messages}");
                        Ok(())
                    }
                }
            };
            tokio::select! {
                result = deployed => if let Err(e) = result {
                    warn!(target: DEV_LOG, "{e:#}; the last good version keeps running");
                },
                () = &mut stop => break,
            }
            tokio::select! {
                change = changes.next() => match change {
                    Some(change) => trigger = self.saved(change),
                    None => break,
                },
                () = &mut stop => break,
            }
        }
        info!(target: DEV_LOG, "stopping; the plugin ConfigMaps stay in namespace {} until the next session (no other host loads them)", self.namespace);
        self.manager.shutdown().await;
        Ok(())
    }

    /// Say what a save touched; it triggers the next cycle.
    fn saved(&self, (at, paths): (Instant, Vec<PathBuf>)) -> Trigger {
        // Files still there (not an editor's or sed's temporary file), else all that changed.
        let kept: Vec<&PathBuf> = paths.iter().filter(|p| p.exists()).collect();
        let shown = if kept.is_empty() { paths.iter().collect() } else { kept };
        let names: Vec<String> = shown.iter().map(|p| p.strip_prefix(&self.krate.dir).unwrap_or(p).display().to_string()).collect();
        info!(target: DEV_LOG, "changed: {}", names.join(", "));
        Trigger { at, what: "the save" }
    }

    /// Pack → apply → loaded (or refused) → first reconcile of the new version (reported by a
    /// task of its own, so the next save is not held up).
    async fn deploy(&mut self, built: Built, trigger: Trigger) -> anyhow::Result<()> {
        info!(target: DEV_LOG, "built {} in {:.1} s ({} KB)", self.krate.wasm_path().display(), built.took.as_secs_f64(), built.wasm.len() / 1024);
        self.apply_crds().await?;
        let (manifest, source) = self.manifest(&built.wasm).await?;
        // A manifest that does not parse is named here, before anything is applied.
        let name = PluginManifest::parse(&manifest, &self.krate.package).with_context(|| format!("in {source}"))?.name;
        let digest = wasmloop::plugin::engine::digest(&built.wasm);
        if self.applied.as_ref().is_some_and(|(d, m)| *d == digest && *m == manifest) {
            info!(target: DEV_LOG, "same component and manifest as last applied; nothing to load");
            return Ok(());
        }
        let path = self.krate.wasm_path().display().to_string();
        let input = pack::PackInput {
            wasm: &built.wasm,
            path: &path,
            manifest: manifest.clone(),
            name: name.clone(),
            namespace: Some(self.namespace.clone()),
        };
        // The fast zstd level: packed on every save, applied to a development namespace.
        let packed = pack::pack_referenced_with(input, pack::DEFAULT_PART_BYTES, pack::FASTEST).context("packing")?;
        let current = packed.payload_names();
        // Subscribed before the apply: no load event or reconcile of this version is missed.
        self.loads = self.loads.resubscribe();
        let reconciles = self.reconciles.subscribe();
        let compiled_before = self.compiled_functions();
        let applied_at = Instant::now();
        self.apply(&packed.payloads, packed.plugin).await?;
        self.applied = Some((digest.clone(), manifest));
        for payload in &current {
            if !self.payloads.contains(payload) {
                self.payloads.push(payload.clone());
            }
        }
        let Some(origin) = self.wait_loaded(&name, &packed.digest).await? else {
            return Ok(());
        };
        let loaded_at = Instant::now();
        let compiled = self.compiled_functions();
        let (reused, new) = (compiled.hits - compiled_before.hits, compiled.misses - compiled_before.misses);
        if reused + new > 0 {
            let kept = self.engine.function_cache().map_or(0, FunctionCache::bytes);
            info!(target: DEV_LOG, "compiled {new} functions, reused {reused} compiled before ({:.1} MiB kept)", kept as f64 / (1 << 20) as f64);
        }
        self.delete_old_payloads(&current).await;
        if origin == LoadOrigin::Unchanged {
            // Back to what the host kept serving (after a refused version): nothing new runs.
            info!(target: DEV_LOG, "back to version {}, which the host kept running", self.versions);
            return Ok(());
        }
        self.versions += 1;
        let steps = format!(
            "build {:.2} s, pack + apply {:.2} s, load {:.2} s ({origin:?})",
            built.took.as_secs_f64(),
            (applied_at - trigger.at).saturating_sub(built.took).as_secs_f64(),
            (loaded_at - applied_at).as_secs_f64()
        );
        let version = self.versions;
        tokio::spawn(report_first_reconcile(reconciles, digest, version, trigger, loaded_at, steps));
        Ok(())
    }

    /// Server-side apply the `--crd` files' CustomResourceDefinitions (adapted with `--local`);
    /// a refusal says why and what to do.
    async fn apply_crds(&self) -> anyhow::Result<()> {
        use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
        for file in &self.args.crds {
            let text = std::fs::read_to_string(file).with_context(|| format!("reading {}", file.display()))?;
            let docs: Vec<serde_json::Value> =
                serde_saphyr::from_multiple(&text).with_context(|| format!("{}: not YAML", file.display()))?;
            for doc in docs.into_iter().filter(|d| d["kind"] == "CustomResourceDefinition") {
                let name = doc.pointer("/metadata/name").and_then(serde_json::Value::as_str).unwrap_or_default().to_owned();
                let doc = if self.args.local {
                    let (adapted, changes) = wasmloop::crds::adapt_for_old_servers(&doc);
                    if !changes.is_empty() {
                        info!(target: DEV_LOG, "CRD {name}: adapted for the local v1.20 API server ({})", wasmloop::crds::summary(&changes));
                    }
                    adapted
                } else {
                    doc
                };
                let api: Api<CustomResourceDefinition> = Api::all(self.client.clone());
                if let Err(e) = api.patch(&name, &PatchParams::apply("wasmloop-dev").force(), &Patch::Apply(&doc)).await {
                    let version = self.client.apiserver_version().await.ok().map(|v| v.git_version);
                    let why = wasmloop::crds::explain_refusal(&e.to_string(), version.as_deref());
                    match why {
                        Some(why) => bail!("the API server refused CRD {name} from {}:\n{why}", file.display()),
                        None => return Err(e).with_context(|| format!("applying CRD {name} from {}", file.display())),
                    }
                }
            }
        }
        Ok(())
    }

    /// How many functions compiles so far found already compiled (hits: earlier versions, or a function repeated in the component) or compiled (misses).
    fn compiled_functions(&self) -> FunctionCacheStats {
        self.engine.function_cache().map(FunctionCache::stats).unwrap_or_default()
    }

    /// Delete the payload ConfigMaps of earlier versions: the plugin ConfigMap now references
    /// `current`, and the host serves it.
    async fn delete_old_payloads(&mut self, current: &[String]) {
        let api: Api<ConfigMap> = Api::namespaced(self.client.clone(), &self.namespace);
        for old in self.payloads.iter().filter(|p| !current.contains(p)) {
            if let Err(e) = api.delete(old, &DeleteParams::default()).await {
                warn!(target: DEV_LOG, "could not delete the old payload ConfigMap {old}: {e}");
            }
        }
        self.payloads.retain(|p| current.contains(p));
    }

    /// The manifest and where it came from: `--manifest`, else `<package>.plugin.yaml` in the
    /// crate, else derived.
    async fn manifest(&self, wasm: &[u8]) -> anyhow::Result<(String, String)> {
        let file = self.args.manifest.clone().or_else(|| {
            let default = self.krate.dir.join(format!("{}.plugin.yaml", self.krate.package));
            default.exists().then_some(default)
        });
        if let Some(file) = file {
            if !self.args.allow.is_empty() {
                warn!(target: DEV_LOG, "--allow is ignored: the grants come from {}", file.display());
            }
            let text = std::fs::read_to_string(&file).with_context(|| format!("reading {}", file.display()))?;
            return Ok((text, file.display().to_string()));
        }
        let engine = self.engine.clone();
        let wasm = wasm.to_vec();
        let inspection = tokio::task::spawn_blocking(move || wasmloop::plugin::inspect(&engine, &wasm)).await??;
        let spec = inspection.metadata.context(inspection.metadata_error.unwrap_or_else(|| "the plugin answered no metadata".into()))?;
        Ok((super::pack::derive_manifest(&spec, None, &self.args.allow)?, "the derived manifest".into()))
    }

    /// The payload (immutable: created once per digest), then the plugin ConfigMap (server-side
    /// apply, so every save replaces it).
    async fn apply(&self, payloads: &[ConfigMap], plugin: ConfigMap) -> anyhow::Result<()> {
        let api: Api<ConfigMap> = Api::namespaced(self.client.clone(), &self.namespace);
        for payload in payloads {
            match api.create(&PostParams::default(), payload).await {
                Ok(_) => {}
                Err(kube::Error::Api(e)) if e.code == 409 => {}
                Err(e) => return Err(e).context("creating the payload ConfigMap"),
            }
        }
        let name = plugin.metadata.name.clone().unwrap_or_default();
        let mut body = serde_json::to_value(&plugin)?;
        body["apiVersion"] = "v1".into();
        body["kind"] = "ConfigMap".into();
        api.patch(&name, &PatchParams::apply("wasmloop-dev").force(), &Patch::Apply(&body))
            .await
            .with_context(|| format!("applying ConfigMap {}/{name}", self.namespace))?;
        Ok(())
    }

    /// How version `digest` of ConfigMap `name` loaded, or `None` if the host refused it or it
    /// waits (e.g. for its CRD; shown; the last good version keeps running).
    async fn wait_loaded(&mut self, name: &str, digest: &str) -> anyhow::Result<Option<LoadOrigin>> {
        let deadline = self.args.load.load_limits()?.compile_budget + Duration::from_secs(30);
        let wait = async {
            loop {
                match self.loads.recv().await {
                    Ok(LoadEvent::Loaded { configmap, digest: d, origin, .. }) if configmap == name && d == digest => {
                        return Ok(Some(origin));
                    }
                    Ok(LoadEvent::Rejected { configmap, error }) if configmap == name => {
                        warn!(target: DEV_LOG, "the host refused this version; the last good version keeps running: {error}");
                        return Ok(None);
                    }
                    // The payloads were just created: the host's cache of them may lag the
                    // plugin ConfigMap's event by a moment, and the version loads when it shows them.
                    Ok(LoadEvent::Waiting { configmap, wait: Some(WaitReason::PayloadMissing { name: payload, .. }), .. })
                        if configmap == name && self.payloads.contains(&payload) =>
                    {
                        debug!(target: DEV_LOG, "the host has not seen payload {payload} yet; waiting for it");
                    }
                    Ok(LoadEvent::Waiting { configmap, reason, .. }) if configmap == name => {
                        warn!(target: DEV_LOG, "this version waits (it starts by itself once that is there; the last good version keeps running): {reason}");
                        return Ok(None);
                    }
                    Ok(_) | Err(broadcast::error::RecvError::Lagged(_)) => {}
                    Err(broadcast::error::RecvError::Closed) => bail!("the host stopped"),
                }
            }
        };
        tokio::time::timeout(deadline, wait).await.with_context(|| format!("{name} was neither loaded nor refused in {deadline:?}"))?
    }
}

/// Say when the new version's first reconcile finished, counted from the save.
async fn report_first_reconcile(
    mut reconciles: broadcast::Receiver<Reconciled>,
    digest: String,
    version: u32,
    trigger: Trigger,
    loaded_at: Instant,
    steps: String,
) {
    let first = async {
        loop {
            match reconciles.recv().await {
                Ok(r) if r.digest == digest => return Some(r.at),
                Ok(_) | Err(broadcast::error::RecvError::Lagged(_)) => {}
                Err(broadcast::error::RecvError::Closed) => return None,
            }
        }
    };
    let Trigger { at: saved, what } = trigger;
    match tokio::time::timeout(FIRST_RECONCILE_WAIT, first).await {
        Ok(Some(at)) => info!(
            target: DEV_LOG,
            "version {version} reconciling {:.2} s after {what} ({steps}, first reconcile {:.2} s)",
            (at - saved).as_secs_f64(),
            (at - loaded_at).as_secs_f64()
        ),
        _ => info!(
            target: DEV_LOG,
            "version {version} loaded {:.2} s after {what} ({steps}); no reconcile in {} s (nothing to reconcile yet?)",
            (loaded_at - saved).as_secs_f64(),
            FIRST_RECONCILE_WAIT.as_secs()
        ),
    }
}

/// `wasmloop-dev-<package>`, as a namespace name may be (lowercase alphanumerics and `-`, at
/// most 63 characters).
fn default_namespace(package: &str) -> String {
    let name: String = package.to_ascii_lowercase().chars().map(|c| if c.is_ascii_alphanumeric() { c } else { '-' }).collect();
    let name = format!("wasmloop-dev-{name}");
    name[..name.len().min(63)].trim_end_matches('-').to_string()
}

/// Delete the plugin and payload ConfigMaps an earlier session left in `namespace`, so this one
/// starts from nothing (its first version is loaded, or refused, for all to see).
async fn clear_plugins(client: &kube::Client, namespace: &str) -> anyhow::Result<()> {
    let api: Api<ConfigMap> = Api::namespaced(client.clone(), namespace);
    for label in [PLUGIN_LABEL, PAYLOAD_LABEL] {
        let selector = ListParams::default().labels(&format!("{label}=true"));
        api.delete_collection(&DeleteParams::default(), &selector)
            .await
            .with_context(|| format!("deleting the ConfigMaps labelled {label}=true in namespace {namespace}"))?;
    }
    Ok(())
}

async fn ensure_namespace(client: &kube::Client, name: &str) -> anyhow::Result<()> {
    let api: Api<Namespace> = Api::all(client.clone());
    if api.get_opt(name).await.with_context(|| format!("reading namespace {name}"))?.is_some() {
        return Ok(());
    }
    let ns: Namespace = serde_json::from_value(serde_json::json!({"metadata": {"name": name}}))?;
    match api.create(&PostParams::default(), &ns).await {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(e)) if e.code == 409 => Ok(()),
        Err(e) => Err(e).with_context(|| format!("creating namespace {name}")),
    }
}

async fn stop_signal() {
    use tokio::signal::unix::{SignalKind, signal};
    match (signal(SignalKind::terminate()), signal(SignalKind::interrupt())) {
        (Ok(mut term), Ok(mut int)) => {
            tokio::select! {
                _ = term.recv() => {}
                _ = int.recv() => {}
            }
        }
        _ => std::future::pending().await,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn default_namespaces_are_namespace_names() {
        assert_eq!(default_namespace("welcome"), "wasmloop-dev-welcome");
        assert_eq!(default_namespace("My_Plugin"), "wasmloop-dev-my-plugin");
        let long = default_namespace(&"x".repeat(80));
        assert_eq!(long.len(), 63);
        assert_eq!(default_namespace(&format!("{}_y", "a".repeat(49))), format!("wasmloop-dev-{}", "a".repeat(49)));
    }
}
