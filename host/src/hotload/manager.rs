//! [`PluginManager`]: ConfigMaps labelled `wasmloop.dev/plugin=true` in, running controllers out.
//!
//! The manager is itself a small controller: a shared ConfigMap informer feeds a [`WorkQueue`]
//! keyed by ConfigMap, so bursts of updates fold into one load and one ConfigMap is never
//! handled twice at once. Each ConfigMap has a [`Lifecycle`] (the pure state machine of
//! [`super::lifecycle`], which decides what serves); for each key the manager works out the
//! ConfigMap's [`Content`] and drives the life cycle with it, carrying out its effects here:
//! an attempt to load (payload from [`Payloads`], name and memory from [`Claims`], compile in
//! [`Compiler`], the kinds it reads served, its identity claimed and authorized, then started or
//! swapped by the [`Runner`], or kept as a candidate by [`Candidates`]), suspending or resuming
//! the good version, removing everything, reporting ([`Reporter`]).
//!
//! The kinds of every kept version are asked of discovery every `rediscovery` interval; the
//! answers go to the life cycles, which suspend a version only once a kind has been gone for a
//! while ([`GonePolicy`]) and resume it when the kind is back.

use std::collections::{BTreeMap, HashMap};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::ConfigMap;
use tokio::sync::broadcast;
use tokio::task::JoinHandle;
use tracing::{info, warn};

use super::candidates::Candidates;
use super::claims::{Claim, Claims};
use super::compile::{Compiler, Input as CompileInput, LoadOrigin};
use super::lifecycle::{self, Attempt, Content, Effects, GonePolicy, Input, Lifecycle, Stop, View};
use super::manifest::PluginManifest;
use super::metrics::PluginMetrics;
use super::payloads::{Found, PayloadName, Payloads, Resolved};
use super::registry::{OciSettings, Registry};
use super::report::{LoadEvent, Notes, Reporter, Version};
use super::served;
use super::source::{self, PAYLOAD_LABEL, PLUGIN_LABEL, PayloadRef};
use super::status::{LAST_GOOD_ANNOTATION, MAX_LAST_GOOD, StatusWriter};
use super::waiting::{NotLoaded, Pending, WaitPolicy, WaitReason, Waiting};
use super::{access, fingerprint};
use crate::cache::IndexedStore;
use crate::controller::Shared;
use crate::executor::Executor;
use crate::identity::PluginIdentity;
use crate::informer::{self, InformerKey, Subscription};
use crate::kinds::{KindRef, ObjectKey};
use crate::plugin::{ByteSize, Compiled, LoadLimits, Origin, PluginEngine, PrecompiledCache, RecordOptions, WasmPlugin};
use crate::queue::{RateLimitConfig, WorkQueue};
use crate::reconciler::Reconciler as _;

/// Errors starting the manager (loading errors are reported on the ConfigMaps instead).
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The plugin (or payload) ConfigMap informer did not start or sync.
    #[error("plugin ConfigMap informer: {0}")]
    Informer(#[from] informer::Error),
    /// The precompiled cache's directory cannot be used.
    #[error("precompiled cache: {0}")]
    Cache(#[from] crate::plugin::engine::Error),
    /// The OCI client or blob cache cannot be set up.
    #[error("OCI registry client: {0}")]
    Oci(String),
}

/// A result whose error is the manager's.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Where the manager looks and how it behaves.
#[derive(Clone, Debug)]
pub struct PluginManagerConfig {
    /// Namespace of the plugin ConfigMaps; `None` = all namespaces.
    pub namespace: Option<String>,
    /// With all namespaces: the host's own plugin namespace, whose plugins keep their names.
    /// A plugin from any other namespace is known as `<name>.<namespace>` (its component still
    /// says `<name>`), so no namespace can take, or wait for, another's plugin names.
    pub home_namespace: Option<String>,
    /// Directory of precompiled components; `None` = always compile.
    pub precompiled_dir: Option<PathBuf>,
    /// How long a removed or replaced controller may take to finish running reconciles.
    pub shutdown_grace: Duration,
    /// The most linear memory all plugins together may hold at once: the sum over loaded
    /// plugins of `limits.memory × concurrency`. `None` = no budget.
    pub memory_budget: Option<ByteSize>,
    /// Largest component (decompressed) one plugin may be.
    pub max_component_size: ByteSize,
    /// Compiles that may run at once (each on a blocking thread).
    pub compile_workers: usize,
    /// How long compiling and validating one plugin may take.
    pub compile_budget: Duration,
    /// ConfigMaps loaded or unloaded at once (one at a time per ConfigMap).
    pub loaders: usize,
    /// With `--shard-mode plugin`: the shards of each plugin are spread over the replicas, and
    /// plugin status is reported by one of them.
    pub sharding: Option<crate::shard::Sharding>,
    /// Whose identity plugin writes carry: each plugin's own ServiceAccount (checked at load by
    /// SubjectAccessReviews for its reads), or the host's.
    pub plugin_identity: PluginIdentity,
    /// This replica's identity in the Events it records about plugin ConfigMaps.
    pub instance: Option<String>,
    /// When waiting ConfigMaps are tried again and how long a wait lasts before it is reported.
    pub wait: WaitPolicy,
    /// How often the kinds of loaded plugins are checked through discovery.
    pub rediscovery: Duration,
    /// When a kind missing from discovery counts as gone (its plugin is then stopped until the
    /// kind is back).
    pub gone: GonePolicy,
    /// Record chosen reconciles of every plugin (`--record-dir`): each loaded plugin gets a
    /// [`crate::plugin::Recorder`] writing into its own subdirectory. `None`: nothing is recorded.
    pub record: Option<RecordOptions>,
    /// How plugins whose manifest says `oci:` are pulled: CA bundle, time-outs, blob cache,
    /// cluster-wide trusted keys.
    pub oci: OciSettings,
}

impl PluginManagerConfig {
    /// Plugins from `namespace` (`None`: every namespace) with the defaults: no precompiled
    /// cache, 25 s shutdown grace, no memory budget, components up to [`LoadLimits`]'s default
    /// size, 1 compile at a time within its default budget, 4 loaders, the default
    /// [`WaitPolicy`] and [`GonePolicy`], rediscovery every 10 s, plugins writing with the host's
    /// identity (`wasmloop run` defaults to their own: [`PluginIdentity::Own`]).
    pub fn new(namespace: Option<String>) -> Self {
        Self {
            namespace,
            home_namespace: None,
            precompiled_dir: None,
            shutdown_grace: Duration::from_secs(25),
            memory_budget: None,
            max_component_size: LoadLimits::default().max_component_size,
            compile_workers: 1,
            compile_budget: LoadLimits::default().compile_budget,
            loaders: 4,
            sharding: None,
            plugin_identity: PluginIdentity::Host,
            instance: None,
            wait: WaitPolicy::default(),
            rediscovery: Duration::from_secs(10),
            gone: GonePolicy::default(),
            record: None,
            oci: OciSettings::default(),
        }
    }
}

/// One plugin ConfigMap's life cycle and what is known of it for its reports.
struct Entry {
    life: Lifecycle<Version>,
    notes: Notes,
    /// Whether the last-good annotation was read (once, when this host first sees it).
    remembered: bool,
}

pub(super) struct Inner {
    config: PluginManagerConfig,
    shared: Shared,
    executor: Executor,
    store: Arc<IndexedStore>,
    queue: WorkQueue<ObjectKey>,
    entries: parking_lot::Mutex<HashMap<ObjectKey, Entry>>,
    /// Discovery answers about kept versions' kinds, applied when their key is next handled.
    discovered: parking_lot::Mutex<HashMap<ObjectKey, (Option<KindRef>, tokio::time::Instant)>>,
    runner: super::install::Runner,
    candidates: Arc<Candidates>,
    compiler: Compiler,
    payloads: Payloads,
    registry: Registry,
    claims: Claims,
    reporter: Reporter,
    client: kube::Client,
}

/// Loads, swaps and removes plugins as their ConfigMaps come and go.
pub struct PluginManager {
    inner: Arc<Inner>,
    _subscriptions: [Subscription; 2],
    workers: Vec<JoinHandle<()>>,
}

fn configmap_kind() -> KindRef {
    KindRef::new("v1", "ConfigMap")
}

/// The informer of the ConfigMaps labelled `<label>=true` where `config` looks.
fn labelled(config: &PluginManagerConfig, label: &str) -> std::result::Result<InformerKey, crate::cache::Error> {
    InformerKey::new(configmap_kind(), config.namespace.clone(), Some(&format!("{label}=true")))
}

impl PluginManager {
    /// Start watching plugin ConfigMaps. Returns once the ConfigMaps present now are loaded (or
    /// refused), so readiness can follow.
    pub async fn start(
        engine: PluginEngine,
        shared: Shared,
        executor: Executor,
        plugin_metrics: PluginMetrics,
        config: PluginManagerConfig,
    ) -> Result<Self> {
        let precompiled = config.precompiled_dir.as_ref().map(PrecompiledCache::new).transpose()?;
        let selector = |source| informer::Error::Selector { kind: configmap_kind(), source };
        let informer = shared.registry.acquire(labelled(&config, PLUGIN_LABEL).map_err(selector)?).await?;
        let payload_informer = shared.registry.acquire(labelled(&config, PAYLOAD_LABEL).map_err(selector)?).await?;
        let client = shared.registry.resolver().client().clone();
        // No plugin may write the ConfigMaps plugins are loaded from.
        shared.admission.protected().watch_plugin_configmaps(informer.store().clone());
        let (events, _) = broadcast::channel(64);
        let status = StatusWriter::new(client.clone(), config.instance.clone(), shared.fence.clone(), config.sharding.clone());
        let reporter = Reporter { status: status.clone(), metrics: plugin_metrics, events, waiting: Waiting::new(config.wait) };
        let compiler = Compiler::new(engine, precompiled, config.compile_workers, config.compile_budget, config.record.clone());
        let runner = super::install::Runner::new(shared.clone(), executor.clone(), config.sharding.clone(), config.shutdown_grace);
        let inner = Arc::new(Inner {
            queue: WorkQueue::new("wasmloop-plugins", RateLimitConfig::default().build(), None),
            store: informer.store().clone(),
            entries: Default::default(),
            discovered: Default::default(),
            runner,
            candidates: Arc::default(),
            compiler,
            payloads: Payloads::new(payload_informer.store().clone()),
            registry: Registry::new(&config.oci, config.max_component_size.bytes(), client.clone()).map_err(Error::Oci)?,
            claims: Claims::default(),
            reporter,
            client,
            config,
            shared,
            executor,
        });
        let notes = tokio::spawn(Candidates::note(
            Arc::downgrade(&inner.candidates),
            status,
            inner.shared.shadows.subscribe(),
            inner.shared.shadows.subscribe_rollbacks(),
        ));
        let weak = Arc::downgrade(&inner);
        let payload_subscription = payload_informer.subscribe(Arc::new(move |change| {
            if let Some(inner) = weak.upgrade() {
                for key in inner.payloads.referencing(change) {
                    inner.queue.add(key);
                }
            }
        }));
        let q = inner.queue.clone();
        let subscription = informer.subscribe(Arc::new(move |change| {
            // The host's own status writes change nothing to load: no work, no payload lookups.
            if !fingerprint::only_host_annotations(change) {
                let o = change.object();
                q.add(ObjectKey::new(configmap_kind(), o.namespace(), o.name()));
            }
        }));
        informer.wait_synced(Duration::from_secs(120)).await?;
        payload_informer.wait_synced(Duration::from_secs(120)).await?;
        // Load what exists now, before reporting ready.
        for o in inner.store.snapshot() {
            inner.sync(&ObjectKey::new(configmap_kind(), o.namespace(), o.name())).await;
        }
        let mut workers: Vec<JoinHandle<()>> = (0..inner.config.loaders.max(1)).map(|_| tokio::spawn(inner.clone().work())).collect();
        workers.push(tokio::spawn(Inner::rediscover_every(Arc::downgrade(&inner), inner.config.rediscovery)));
        workers.push(notes);
        Ok(Self { inner, _subscriptions: [subscription, payload_subscription], workers })
    }

    /// Load events as they happen (subscribe before causing them).
    pub fn events(&self) -> broadcast::Receiver<LoadEvent> {
        self.inner.reporter.events.subscribe()
    }

    /// `(configmap, plugin name, version)` of every loaded plugin (serving, or stopped until its
    /// kinds are served again).
    pub async fn loaded(&self) -> Vec<(String, String, String)> {
        let versions = self.inner.runner.versions().await;
        versions.into_iter().map(|(k, p)| (k.name, p.name().to_string(), p.spec().version.clone())).collect()
    }

    /// The loaded plugins themselves (for metrics).
    pub async fn plugins(&self) -> Vec<Arc<WasmPlugin>> {
        self.inner.runner.versions().await.into_iter().map(|(_, p)| p).collect()
    }

    /// Stop every controller (running reconciles get the grace period), then the manager.
    pub async fn shutdown(self) {
        self.inner.queue.shut_down();
        self.workers.iter().for_each(JoinHandle::abort);
        self.inner.runner.shutdown().await;
    }
}

/// What a ConfigMap (the one in the cluster, or the one its last-good annotation records)
/// holds, resolved for loading.
struct Source {
    content: Content,
    cm: ConfigMap,
    reference: source::Result<Option<PayloadRef>>,
    found: Option<Found>,
    /// Its manifest names an OCI artifact (`oci:`).
    oci: bool,
}

impl Source {
    /// The digest it declares (referenced payloads).
    fn declared(&self) -> Option<String> {
        self.reference.as_ref().ok().and_then(Option::as_ref).map(|r| r.digest.clone())
    }

    /// The payload ConfigMap(s) it references, `a,b,c`.
    fn payload_names(&self) -> Option<String> {
        self.reference.as_ref().ok().and_then(Option::as_ref).map(PayloadRef::names)
    }

    /// Its data, if it can be recorded as the last good version (referenced payloads only).
    fn recordable(&self) -> Option<BTreeMap<String, String>> {
        let referenced = (self.oci || matches!(self.reference, Ok(Some(_)))) && self.cm.binary_data.as_ref().is_none_or(BTreeMap::is_empty);
        referenced.then(|| self.cm.data.clone().unwrap_or_default())
    }
}

impl Inner {
    async fn work(self: Arc<Self>) {
        while let Some(key) = self.queue.get().await {
            self.sync(&key).await;
            self.queue.done(&key);
        }
    }

    /// Drive `key`'s life cycle with what its ConfigMap holds now (and any discovery answer
    /// about its kinds).
    async fn sync(self: &Arc<Self>, key: &ObjectKey) {
        let taken = self.entries.lock().remove(key);
        let mut entry =
            taken.unwrap_or_else(|| Entry { life: Lifecycle::new(self.config.gone), notes: Notes::default(), remembered: false });
        let cm = match self.store.get(key.namespace.as_deref(), &key.name).map(|o| o.parse::<ConfigMap>()) {
            None => {
                self.discovered.lock().remove(key);
                let effects = KeyEffects::new(self, key, None, None, &mut entry.notes);
                lifecycle::drive(&mut entry.life, Input::Deleted, &effects).await;
                return;
            }
            Some(Err(e)) => {
                warn!(configmap = %key, error = %e, "unreadable ConfigMap");
                self.entries.lock().insert(key.clone(), entry);
                return;
            }
            Some(Ok(cm)) => cm,
        };
        entry.notes.uid = cm.metadata.uid.clone().unwrap_or_default();
        let remembered = if entry.remembered { None } else { self.remembered(key, &cm) };
        entry.remembered = true;
        let current = self.source(key, cm);
        let mut parts = parts_of(key, &current);
        parts.extend(remembered.iter().flat_map(|r| parts_of(key, r)));
        self.payloads.track(key, parts);
        let inputs = {
            let discovered = self.discovered.lock().remove(key);
            let mut inputs: Vec<Input<Version>> = discovered.map(|(missing, now)| Input::Discovered { missing, now }).into_iter().collect();
            inputs.extend(remembered.as_ref().map(|r| Input::Remembered(r.content.clone())));
            inputs.push(Input::Observed(current.content.clone()));
            inputs
        };
        let retry = {
            let effects = KeyEffects::new(self, key, Some(current), remembered, &mut entry.notes);
            for input in inputs {
                lifecycle::drive(&mut entry.life, input, &effects).await;
            }
            effects.retry.into_inner()
        };
        self.entries.lock().insert(key.clone(), entry);
        if let Some(delay) = retry {
            self.queue.add_after(key.clone(), delay);
        }
    }

    /// What `cm` holds, its payloads looked up in the cache.
    fn source(&self, key: &ObjectKey, cm: ConfigMap) -> Source {
        let reference = source::payload_ref(&cm);
        let found = match &reference {
            Ok(Some(r)) => Some(self.payloads.lookup(key.namespace.as_deref(), r)),
            _ => None,
        };
        let mut version = fingerprint::payload_digest(&cm);
        if let Some(found) = &found {
            version = format!("{version}|{}", found.state());
        }
        let content = Content { version, retry: fingerprint::annotations_digest(&cm) };
        let oci = source::manifest(&cm).ok().and_then(|m| PluginManifest::parse(m, &key.name).ok()).is_some_and(|m| m.oci.is_some());
        Source { content, cm, reference, found, oci }
    }

    /// The good version recorded on `cm` by an earlier host, as a ConfigMap of its own.
    fn remembered(&self, key: &ObjectKey, cm: &ConfigMap) -> Option<Source> {
        let text = cm.metadata.annotations.as_ref()?.get(LAST_GOOD_ANNOTATION)?;
        if text.len() > MAX_LAST_GOOD {
            warn!(configmap = %key, bytes = text.len(), "ignoring the last-good annotation: too large");
            return None;
        }
        #[derive(serde::Deserialize)]
        #[serde(deny_unknown_fields)]
        struct Recorded {
            data: BTreeMap<String, String>,
        }
        let recorded: Recorded = match serde_json::from_str(text) {
            Ok(r) => r,
            Err(e) => {
                warn!(configmap = %key, error = %e, "ignoring the last-good annotation: it does not parse");
                return None;
            }
        };
        let mut remembered = cm.clone();
        remembered.data = Some(recorded.data);
        remembered.binary_data = None;
        Some(self.source(key, remembered))
    }

    /// Try to load `source` for `key`: decode, claim the name and memory, compile, check that
    /// the kinds it reads are served and that its identity is its own, then start or swap (or
    /// keep it as a candidate). Any error leaves what runs untouched (or says it did not:
    /// [`Attempt`]'s `good_running`).
    async fn load(&self, key: &ObjectKey, source: &Source) -> Result<(Arc<WasmPlugin>, LoadOrigin), NotLoaded> {
        let waiting = &self.reporter.waiting;
        let pending = waiting.pending(key, &source.content.version);
        let mut manifest =
            PluginManifest::parse(source::manifest(&source.cm).map_err(|e| e.to_string())?, &key.name).map_err(|e| e.to_string())?;
        if let (Some(home), Some(namespace)) = (&self.config.home_namespace, &key.namespace)
            && home != namespace
        {
            manifest.scope_to(namespace);
        }
        let reference = source.reference.as_ref().map_err(ToString::to_string)?;
        let input = match (&pending, reference, &source.found) {
            (Some(_), ..) => None,
            (None, reference, _) if let Some(oci) = &manifest.oci => {
                let inline = source.cm.binary_data.as_ref().and_then(|b| b.keys().next());
                if let Some(other) = reference.as_ref().map(PayloadRef::names).or(inline.cloned()) {
                    return Err(NotLoaded::Refused(format!(
                        "both oci.ref in plugin.yaml and a payload in the ConfigMap ({other}); keep one"
                    )));
                }
                let uid = source.cm.metadata.uid.as_deref().unwrap_or_default();
                Some(CompileInput::Wasm(self.registry.component(key, uid, &source.content.version, oci).await?.wasm))
            }
            (None, Some(reference), Some(found)) => Some(self.component(key, reference, found).await?),
            (None, ..) => Some(CompileInput::Wasm(source::decode(&source.cm).map_err(|e| e.to_string())?.wasm)),
        };
        let size = match &input {
            Some(CompileInput::Wasm(wasm)) => wasm.len(),
            Some(CompileInput::Reuse(compiled)) => compiled.size,
            None => 0,
        };
        let load_limits = LoadLimits { max_component_size: self.config.max_component_size, compile_budget: self.config.compile_budget };
        load_limits.check_size(size).map_err(|e| e.to_string())?;
        // A candidate claims its own name: one candidate per plugin, beside the serving version.
        let claim_name = match &manifest.shadow_of {
            Some(_) => format!("{} (candidate)", manifest.name),
            None => manifest.name.clone(),
        };
        let claim = Claim { name: claim_name, memory: manifest.limits.memory.bytes() * manifest.controller.workers as u64 };
        let previous = self.claims.claim(key, claim, self.config.memory_budget)?;
        let installed = async {
            let (plugin, origin) = match (pending, input) {
                (Some(p), _) => (p.plugin, p.origin),
                (None, Some(input)) => self.compiler.compile(input, &manifest).await.map_err(|e| NotLoaded::Refused(e.to_string()))?,
                (None, None) => return Err(NotLoaded::Refused("nothing to load".into())),
            };
            // Every kind it reads must be served, and its identity its own and allowed to read
            // them, before anything starts (or replaces what runs).
            let hold = |reason: WaitReason| {
                waiting.hold(key, Pending { payload: source.content.version.clone(), plugin: plugin.clone(), origin });
                NotLoaded::Waiting(reason)
            };
            if let Some(reason) = served::Discovery::new(&self.client).unserved(&served::kinds_of(plugin.spec())).await {
                self.forget_unserved(&reason);
                return Err(hold(reason));
            }
            let writes = manifest.shadow_of.is_none() || manifest.canary.is_some();
            let identity = match writes && self.config.plugin_identity == PluginIdentity::Own {
                true => Some(access::identity_of(&self.shared, &self.client, key, &plugin, &manifest).await.map_err(|e| match e {
                    NotLoaded::Waiting(reason) => hold(reason),
                    refused => refused,
                })?),
                false => None,
            };
            if manifest.shadow_of.is_some() {
                // A canary writes on its shards, as its own identity (never the serving version's).
                let executor = match manifest.canary {
                    Some(_) => Some(self.executor.acting_as(identity.as_ref()).map_err(|e| NotLoaded::Refused(e.to_string()))?),
                    None => None,
                };
                let uid = source.cm.metadata.uid.as_deref().unwrap_or_default();
                self.candidates.install(&self.runner, key, uid, &plugin, &manifest, executor).await?;
            } else {
                let installed = self.runner.install(key, &plugin, &manifest, identity).await;
                self.candidates.attach(&self.runner, key, plugin.name()).await;
                installed?;
            }
            Ok((plugin, origin))
        }
        .await;
        match &installed {
            Ok(_) => {
                if let Some(previous) = previous.filter(|p| Some(&p.name) != self.claims.name_of(key).as_ref()) {
                    self.release_name(&previous.name);
                }
            }
            // What this ConfigMap held before (if anything) is what still runs.
            Err(_) => self.claims.restore(key, previous),
        }
        installed
    }

    /// The component of a referenced payload: the loaded one of its digest if these payload
    /// ConfigMaps were verified before, else their bytes.
    async fn component(&self, key: &ObjectKey, reference: &PayloadRef, found: &Found) -> Result<CompileInput, NotLoaded> {
        let namespace = key.namespace.as_deref();
        match self.payloads.resolve(namespace, reference, found)? {
            Resolved::Wasm(wasm) => Ok(CompileInput::Wasm(wasm)),
            Resolved::Known => match self.runner.with_digest(&reference.digest).await {
                Some(plugin) => Ok(CompileInput::Reuse(Compiled {
                    component: plugin.component().clone(),
                    digest: reference.digest.clone(),
                    size: plugin.size(),
                    origin: Origin::CacheHit,
                    elapsed: Duration::ZERO,
                })),
                None => Ok(CompileInput::Wasm(self.payloads.read(namespace, reference, found)?)),
            },
        }
    }

    /// The resolver must not keep an answer from before a kind stopped being served (its CRD
    /// re-created with another scope or versions would be addressed wrongly).
    fn forget_unserved(&self, reason: &WaitReason) {
        if let WaitReason::KindNotServed { kind, .. } = reason {
            self.shared.registry.resolver().forget(kind);
        }
    }

    /// `name` is free again: retry the ConfigMaps that waited for it.
    fn release_name(&self, name: &str) {
        for key in self.claims.name_released(name) {
            info!(configmap = %key, plugin = name, "plugin name released; loading the ConfigMap that waited for it");
            self.queue.add(key);
        }
    }

    /// Stop and forget everything of `key` (its ConfigMap is gone).
    async fn unload(&self, key: &ObjectKey) {
        self.payloads.forget(key);
        self.registry.forget(key);
        self.claims.release(key);
        self.reporter.waiting.clear(key);
        if let Some(candidate) = self.candidates.remove(&self.runner, key).await {
            self.reporter.removed(key, &candidate, true);
            self.release_name(&format!("{} (candidate)", candidate.name()));
        } else if let Some(plugin) = self.runner.remove(key).await {
            self.reporter.removed(key, &plugin, false);
            self.release_name(plugin.name());
        }
    }

    /// Every `period`, while the manager lives: ask discovery about the kinds of every kept
    /// version (one request per group/version), and hand the answers to their life cycles.
    async fn rediscover_every(inner: std::sync::Weak<Self>, period: Duration) {
        loop {
            tokio::time::sleep(period).await;
            let Some(inner) = inner.upgrade() else { return };
            let versions = inner.runner.versions().await;
            let mut discovery = served::Discovery::new(&inner.client);
            for (key, plugin) in versions {
                let missing = match discovery.unserved(&served::kinds_of(plugin.spec())).await {
                    None => None,
                    Some(WaitReason::KindNotServed { kind, .. }) => Some(kind),
                    // Discovery that does not answer says nothing either way.
                    Some(_) => continue,
                };
                inner.discovered.lock().insert(key.clone(), (missing, tokio::time::Instant::now()));
                inner.queue.add(key);
            }
        }
    }
}

/// The payload parts `source` references.
fn parts_of(key: &ObjectKey, source: &Source) -> Vec<PayloadName> {
    match &source.reference {
        Ok(Some(r)) => r.parts.iter().map(|p| (key.namespace.clone(), p.clone())).collect(),
        _ => Vec::new(),
    }
}

/// The effects of one ConfigMap's life cycle, carried out for one round of inputs.
struct KeyEffects<'a> {
    inner: &'a Arc<Inner>,
    key: &'a ObjectKey,
    current: Option<Source>,
    remembered: Option<Source>,
    notes: parking_lot::Mutex<&'a mut Notes>,
    /// When to handle the key again (a waiting content's retry).
    retry: parking_lot::Mutex<Option<Duration>>,
}

impl<'a> KeyEffects<'a> {
    fn new(inner: &'a Arc<Inner>, key: &'a ObjectKey, current: Option<Source>, remembered: Option<Source>, notes: &'a mut Notes) -> Self {
        Self { inner, key, current, remembered, notes: parking_lot::Mutex::new(notes), retry: parking_lot::Mutex::new(None) }
    }
}

impl Effects<Version> for KeyEffects<'_> {
    async fn attempt(&self, content: &Content) -> (Attempt<Version>, bool) {
        let started = Instant::now();
        let is_current = self.current.as_ref().is_some_and(|c| c.content == *content);
        let Some(source) = [&self.current, &self.remembered].into_iter().flatten().find(|s| s.content == *content) else {
            return (Attempt::Refused("the content changed meanwhile".into()), true);
        };
        let was_running = self.inner.runner.running(self.key).await;
        let result = self.inner.load(self.key, source).await;
        let good_running = !was_running || self.inner.runner.running(self.key).await || self.inner.candidates.holds(self.key).await;
        let mut notes = self.notes.lock();
        if is_current {
            notes.declared = source.declared();
        }
        match result {
            Ok((plugin, origin)) => {
                self.inner.reporter.waiting.clear(self.key);
                notes.held = None;
                notes.fresh = Some((origin, started.elapsed()));
                notes.payload = source.payload_names().or_else(|| self.inner.registry.resolved(self.key));
                notes.good_data = source.recordable();
                (Attempt::Served(Version(plugin)), true)
            }
            Err(NotLoaded::Waiting(reason)) => {
                if is_current {
                    notes.held = self.inner.reporter.waiting.pending(self.key, &content.version).map(|p| p.plugin);
                }
                (Attempt::Waiting(reason), good_running)
            }
            Err(NotLoaded::Refused(reason)) => {
                if is_current {
                    notes.held = None;
                }
                (Attempt::Refused(reason), good_running)
            }
        }
    }

    async fn resume(&self, version: &Version) -> std::result::Result<(), Stop> {
        let started = Instant::now();
        self.inner.runner.resume(self.key).await?;
        self.inner.candidates.attach(&self.inner.runner, self.key, version.0.name()).await;
        info!(configmap = %self.key, plugin = %version.0.name(), "the version that served before runs again");
        self.notes.lock().fresh = Some((LoadOrigin::Resumed, started.elapsed()));
        Ok(())
    }

    async fn suspend(&self) {
        self.inner.runner.suspend(self.key).await;
    }

    async fn remove(&self) {
        self.inner.unload(self.key).await;
    }

    async fn report(&self, view: View<'_, Version>) {
        let rendered = {
            let mut notes = self.notes.lock();
            self.inner.reporter.render(self.key, view, &mut notes)
        };
        if let Some(retry) = rendered.retry {
            *self.retry.lock() = Some(retry);
        }
        if let Some(status) = rendered.status {
            let uid = self.notes.lock().uid.clone();
            self.inner.reporter.write(self.key, &uid, &status).await;
        }
    }
}
