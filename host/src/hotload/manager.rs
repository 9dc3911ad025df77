//! [`PluginManager`]: ConfigMaps labelled `wasmloop.dev/plugin=true` in, running controllers out.
//!
//! The manager is itself a small controller: a shared ConfigMap informer feeds a [`WorkQueue`]
//! keyed by ConfigMap, so bursts of updates fold into one load and one ConfigMap is never
//! loaded twice at once. For each key it compares a digest of the payload with what is loaded
//! (or was last refused) and only then decodes, compiles (off the async runtime, through the
//! precompiled cache), checks that the API server serves every kind it reads, validates and
//! swaps. An attempt ends Loaded, Waiting (something it depends on is not there yet:
//! [`super::waiting`], retried by itself) or Rejected. Every outcome is reported: first a log
//! line, a metric and a [`LoadEvent`] (as soon as the new version serves), then a Kubernetes
//! Event and the status annotations on the ConfigMap ([`super::status`]: API writes, slower,
//! never re-creating a deleted ConfigMap). A kind that stops being served under a loaded plugin
//! (its CRD deleted) stops it and puts it back to Waiting: loaded plugins' kinds are checked
//! through discovery every `rediscovery` interval.
//!
//! Payloads referenced by digest (`data.plugin.wasm.ref` + `data.plugin.wasm.digest`, see
//! [`source`]) come from a second informer, on ConfigMaps labelled
//! `wasmloop.dev/plugin-payload=true`, and are looked up in the plugin ConfigMap's own namespace
//! only. An immutable payload, once verified against its digest, is known by its uid: a manifest
//! change that keeps the digest reuses the loaded component (no read, decompress, hash or
//! deserialise). A payload that appears after its plugin ConfigMap loads it then. A payload split
//! over several ConfigMaps is read only once every part is there, as one (a part that changes or
//! goes away loads the plugin ConfigMap again).

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::ConfigMap;
use tokio::sync::{Mutex, broadcast};
use tokio::task::JoinHandle;
use tracing::{debug, info, warn};

use super::claims::{Claim, Claims};
use super::manifest::PluginManifest;
use super::metrics::PluginMetrics;
use super::served;
use super::source::{self, PAYLOAD_LABEL, PLUGIN_LABEL, PayloadRef};
use super::status::{HOST_ANNOTATIONS, PluginStatus, State, StatusWriter, Written};
use super::waiting::{NotLoaded, Pending, WaitPolicy, WaitReason, Waiting};
use crate::cache::{CachedObject, Change, IndexedStore};
use crate::controller::shadow::{Difference, RolledBack};
use crate::controller::{Controller, ControllerConfig, Reconciler, Shadow, Shared};
use crate::executor::Executor;
use crate::identity::{self, Identity, PluginIdentity};
use crate::informer::{self, InformerKey, Subscription};
use crate::kinds::{KindRef, ObjectKey};
use crate::plugin::{ByteSize, Compiled, LoadLimits, Origin, PluginEngine, PrecompiledCache, RecordOptions, Recorder, WasmPlugin};
use crate::queue::{RateLimitConfig, WorkQueue};

/// Errors starting the manager (loading errors are reported on the ConfigMaps instead).
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("plugin ConfigMap informer: {0}")]
    Informer(#[from] informer::Error),
    #[error("precompiled cache: {0}")]
    Cache(#[from] crate::plugin::engine::Error),
}

pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Where the manager looks and how it behaves.
#[derive(Clone, Debug)]
pub struct PluginManagerConfig {
    /// Namespace of the plugin ConfigMaps; `None` = all namespaces.
    pub namespace: Option<String>,
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
    /// How often the kinds of loaded plugins are checked through discovery (a kind no longer
    /// served stops its plugin, which then waits for it).
    pub rediscovery: Duration,
    /// Record chosen reconciles of every plugin (`--record-dir`): each loaded plugin gets a
    /// [`Recorder`] writing into its own subdirectory. `None`: nothing is recorded.
    pub record: Option<RecordOptions>,
}

impl PluginManagerConfig {
    /// Plugins from `namespace` (`None`: every namespace) with the defaults: no precompiled
    /// cache, 25 s shutdown grace, no memory budget, components up to [`LoadLimits`]'s default
    /// size, 1 compile at a time within its default budget, 4 loaders, the default [`WaitPolicy`], rediscovery every 10 s, plugins
    /// writing with the host's identity (`wasmloop run` defaults to their own:
    /// [`PluginIdentity::Own`]).
    pub fn new(namespace: Option<String>) -> Self {
        Self {
            namespace,
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
            record: None,
        }
    }
}

/// Where a loaded version came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LoadOrigin {
    /// Compiled from the wasm bytes.
    Compiled,
    /// Deserialised from the precompiled cache (no compile).
    Precompiled,
    /// The component already loaded with the same digest, reused (referenced payloads: a
    /// manifest-only change; no payload read, decompress, compile or deserialise).
    Reused,
    /// The ConfigMap went back to the version already serving (nothing to load).
    Unchanged,
}

/// What happened to a plugin ConfigMap (for tests and `/metrics`).
#[derive(Clone, Debug, PartialEq)]
pub enum LoadEvent {
    /// A plugin was loaded (or reloaded) and its controller runs.
    Loaded {
        /// The plugin ConfigMap's name.
        configmap: String,
        /// The plugin's name.
        plugin: String,
        /// The plugin's own version.
        version: String,
        /// `sha256:<hex>` of the component.
        digest: String,
        /// How the component was obtained.
        origin: LoadOrigin,
        /// Time from seeing the ConfigMap to the controller running.
        took: Duration,
    },
    /// The ConfigMap waits for something (`reason`, rendered); sent when the wait begins or
    /// its reason changes, not on every retry.
    Waiting {
        /// The plugin ConfigMap's name.
        configmap: String,
        /// What it waits for.
        reason: String,
    },
    /// The ConfigMap's plugin cannot be loaded as it is; the last good version, if any, keeps running.
    Rejected {
        /// The plugin ConfigMap's name.
        configmap: String,
        /// Why it was rejected.
        error: String,
    },
    /// A plugin was stopped and unloaded (its ConfigMap was deleted or no longer names it).
    Removed {
        /// The plugin ConfigMap's name.
        configmap: String,
        /// The plugin's name.
        plugin: String,
    },
}

struct Loaded {
    controller: Controller,
    plugin: Arc<WasmPlugin>,
    config: ControllerConfig,
    /// The identity its writes carry (`None`: the host's).
    identity: Option<Identity>,
    /// Digest of the ConfigMap payload this version came from.
    payload: String,
}

struct Inner {
    engine: PluginEngine,
    precompiled: Option<PrecompiledCache>,
    /// What the plugins' controllers share (informers, admission, the fence, metrics).
    shared: Shared,
    /// The host's executor; each plugin's controller writes with one acting as the plugin.
    executor: Executor,
    plugin_metrics: PluginMetrics,
    config: PluginManagerConfig,
    store: Arc<IndexedStore>,
    queue: WorkQueue<ObjectKey>,
    loaded: Mutex<HashMap<ObjectKey, Loaded>>,
    /// What is remembered of each ConfigMap that is not running: its last refusal, the payloads
    /// it references.
    tracked: parking_lot::Mutex<HashMap<ObjectKey, Tracked>>,
    /// The ConfigMaps that wait, why, and when to try them again.
    waiting: Waiting,
    /// The plugin name and memory each ConfigMap holds or is loading (uniqueness and budget).
    claims: Claims,
    /// Compiles running at once.
    compiles: Arc<tokio::sync::Semaphore>,
    events: broadcast::Sender<LoadEvent>,
    /// Payload ConfigMaps (`wasmloop.dev/plugin-payload=true`) in the plugin namespace(s).
    payloads: Arc<IndexedStore>,
    /// Immutable payloads already checked: (namespace, name; a split one's part names joined by
    /// commas) → (uid; a split one's part uids joined, sha256 of the component).
    verified: parking_lot::Mutex<HashMap<PayloadName, (String, String)>>,
    /// For a payload the informer has not delivered yet (read once, by name, with `list`), and
    /// for discovery.
    client: kube::Client,
    /// The Events and status annotations on plugin ConfigMaps.
    status: StatusWriter,
    /// Candidate versions (`shadowOf:`), by ConfigMap: attached to the serving controller of
    /// their plugin whenever it runs.
    shadows: Mutex<HashMap<ObjectKey, Candidate>>,
}

/// A loaded candidate version ([`crate::controller::shadow`]).
struct Candidate {
    /// The plugin it shadows.
    target: String,
    plugin: Arc<WasmPlugin>,
    /// What runs beside the serving version (its canary's state lives here, across restarts of
    /// the serving controller).
    shadow: Arc<Shadow>,
    /// Digest of the ConfigMap payload it came from.
    payload: String,
    /// The ConfigMap's uid (Events about its differences go there).
    uid: String,
}

/// The shortest time between two Events about one candidate's differences.
pub const DIFFERENCE_EVENT_EVERY: Duration = Duration::from_secs(30);

/// (namespace, name) of a payload ConfigMap.
type PayloadName = (Option<String>, String);

/// What the manager remembers of one plugin ConfigMap besides what runs for it.
#[derive(Default)]
struct Tracked {
    /// The last refused attempt: its content, its payload's identity and its annotations (so a
    /// refusal is reported once, and any change of these, `kubectl annotate` included, tries
    /// again).
    refused: Option<String>,
    /// The payloads (namespace, name; the parts of a split one) it references: it is loaded
    /// again when one changes.
    payloads: Vec<PayloadName>,
}

/// A referenced payload ConfigMap, as found.
enum Found {
    Cached(Arc<CachedObject>),
    /// Read from the API server: the informer had not delivered it yet.
    Fetched(Box<ConfigMap>),
    Missing,
}

impl Found {
    /// What identifies the payload's bytes: an immutable ConfigMap's uid cannot change content.
    fn state(&self) -> String {
        match self {
            Found::Cached(o) => format!("{}:{}:{}", o.name(), o.uid(), cached_immutable(o)),
            Found::Fetched(cm) => format!(
                "{}:{}:{}",
                cm.metadata.name.as_deref().unwrap_or_default(),
                cm.metadata.uid.as_deref().unwrap_or_default(),
                cm.immutable == Some(true)
            ),
            Found::Missing => "missing".into(),
        }
    }
}

/// `immutable: true` on a cached ConfigMap, without decoding its binaryData.
fn cached_immutable(o: &CachedObject) -> bool {
    #[derive(serde::Deserialize)]
    struct Flag {
        immutable: Option<bool>,
    }
    o.parse::<Flag>().ok().and_then(|f| f.immutable) == Some(true)
}

/// The component to load: bytes to compile (or find in the precompiled cache), or one loaded already.
enum Input {
    Wasm(Vec<u8>),
    Reuse(Compiled),
}

/// Loads, swaps and removes plugins as their ConfigMaps come and go.
pub struct PluginManager {
    inner: Arc<Inner>,
    _subscription: Subscription,
    _payload_subscription: Subscription,
    workers: Vec<JoinHandle<()>>,
}

fn configmap_kind() -> KindRef {
    KindRef::new("v1", "ConfigMap")
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
        let key = InformerKey::new(configmap_kind(), config.namespace.clone(), Some(&format!("{PLUGIN_LABEL}=true")))
            .map_err(|source| informer::Error::Selector { kind: configmap_kind(), source })?;
        let informer = shared.registry.acquire(key).await?;
        let payload_key = InformerKey::new(configmap_kind(), config.namespace.clone(), Some(&format!("{PAYLOAD_LABEL}=true")))
            .map_err(|source| informer::Error::Selector { kind: configmap_kind(), source })?;
        let payload_informer = shared.registry.acquire(payload_key).await?;
        let client = shared.registry.resolver().client().clone();
        // No plugin may write the ConfigMaps plugins are loaded from.
        shared.admission.protected().watch_plugin_configmaps(informer.store().clone());
        let queue = WorkQueue::new("wasmloop-plugins", RateLimitConfig::default().build(), None);
        let (events, _) = broadcast::channel(64);
        let compile_workers = config.compile_workers.max(1);
        let status = StatusWriter::new(client.clone(), config.instance.clone(), shared.fence.clone(), config.sharding.clone());
        let waiting = Waiting::new(config.wait);
        let inner = Arc::new(Inner {
            engine,
            precompiled,
            shared,
            executor,
            plugin_metrics,
            config,
            store: informer.store().clone(),
            queue,
            loaded: Mutex::new(HashMap::new()),
            tracked: Default::default(),
            waiting,
            claims: Claims::default(),
            compiles: Arc::new(tokio::sync::Semaphore::new(compile_workers)),
            events,
            payloads: payload_informer.store().clone(),
            verified: Default::default(),
            client,
            status,
            shadows: Mutex::new(HashMap::new()),
        });
        let differences = tokio::spawn(Inner::note_differences(
            Arc::downgrade(&inner),
            inner.shared.shadows.subscribe(),
            inner.shared.shadows.subscribe_rollbacks(),
        ));
        let weak = Arc::downgrade(&inner);
        let payload_subscription = payload_informer.subscribe(Arc::new(move |change| {
            if let Some(inner) = weak.upgrade() {
                inner.payload_changed(change);
            }
        }));
        let q = inner.queue.clone();
        let subscription = informer.subscribe(Arc::new(move |change| {
            let o = change.object();
            q.add(ObjectKey::new(configmap_kind(), o.namespace(), o.name()));
        }));
        informer.wait_synced(Duration::from_secs(120)).await?;
        payload_informer.wait_synced(Duration::from_secs(120)).await?;
        // Load what exists now, before reporting ready.
        for o in inner.store.snapshot() {
            inner.sync(&ObjectKey::new(configmap_kind(), o.namespace(), o.name())).await;
        }
        let mut workers: Vec<JoinHandle<()>> = (0..inner.config.loaders.max(1)).map(|_| tokio::spawn(inner.clone().work())).collect();
        workers.push(tokio::spawn(Inner::rediscover_every(Arc::downgrade(&inner), inner.config.rediscovery)));
        workers.push(differences);
        Ok(Self { inner, _subscription: subscription, _payload_subscription: payload_subscription, workers })
    }

    /// Load events as they happen (subscribe before causing them).
    pub fn events(&self) -> broadcast::Receiver<LoadEvent> {
        self.inner.events.subscribe()
    }

    /// `(configmap, plugin name, version)` of every loaded plugin.
    pub async fn loaded(&self) -> Vec<(String, String, String)> {
        let loaded = self.inner.loaded.lock().await;
        loaded.iter().map(|(k, l)| (k.name.clone(), l.plugin.name().to_string(), l.plugin.spec().version.clone())).collect()
    }

    /// The loaded plugins themselves (for metrics).
    pub async fn plugins(&self) -> Vec<Arc<WasmPlugin>> {
        self.inner.loaded.lock().await.values().map(|l| l.plugin.clone()).collect()
    }

    /// Stop every controller (running reconciles get the grace period), then the manager.
    pub async fn shutdown(self) {
        self.inner.queue.shut_down();
        self.workers.iter().for_each(JoinHandle::abort);
        // All controllers stop at once, so the whole shutdown takes one grace period.
        let loaded: Vec<_> = self.inner.loaded.lock().await.drain().collect();
        let grace = self.inner.config.shutdown_grace;
        futures::future::join_all(loaded.into_iter().map(|(_, l)| l.controller.shutdown(grace))).await;
    }
}

impl Inner {
    async fn work(self: Arc<Self>) {
        while let Some(key) = self.queue.get().await {
            self.sync(&key).await;
            self.queue.done(&key);
        }
    }

    async fn sync(&self, key: &ObjectKey) {
        let Some(obj) = self.store.get(key.namespace.as_deref(), &key.name) else {
            return self.unload(key).await;
        };
        let cm: ConfigMap = match obj.parse() {
            Ok(cm) => cm,
            Err(e) => return warn!(configmap = %key, error = %e, "unreadable ConfigMap"),
        };
        let uid = obj.uid().to_string();
        let started = Instant::now();
        let reference = source::payload_ref(&cm);
        // Referenced form: find the payload (recording the reference first, so a payload arriving
        // meanwhile queues this ConfigMap again), and make its identity part of what is compared.
        let mut payload = payload_digest(&cm);
        let found = match &reference {
            Ok(Some(r)) => {
                self.tracked.lock().entry(key.clone()).or_default().payloads =
                    r.parts.iter().map(|p| (key.namespace.clone(), p.clone())).collect();
                let mut found = Vec::with_capacity(r.parts.len());
                for part in &r.parts {
                    found.push(self.find_payload(key.namespace.as_deref(), part).await);
                }
                payload = format!("{payload}|{}", found.iter().map(Found::state).collect::<Vec<_>>().join(","));
                Some(found)
            }
            _ => {
                self.tracked.lock().entry(key.clone()).or_default().payloads.clear();
                None
            }
        };
        let payload_name = reference.as_ref().ok().and_then(Option::as_ref).map(PayloadRef::names);
        let declared = reference.as_ref().ok().and_then(Option::as_ref).map(|r| r.digest.clone());
        let mut serving = self.loaded.lock().await.get(key).filter(|l| l.payload == payload).map(|l| l.plugin.clone());
        if serving.is_none() {
            serving = self.shadows.lock().await.get(key).filter(|c| c.payload == payload).map(|c| c.plugin.clone());
        }
        if let Some(plugin) = serving {
            // Back to the version that is serving (e.g. after a refused or waiting update): report it again.
            let was_rejected = self.take_refusal(key).is_some();
            if self.waiting.clear(key).is_some() || was_rejected {
                self.loaded_ok(key, &uid, &plugin, LoadOrigin::Unchanged, started.elapsed(), payload_name.as_deref()).await;
            }
            return;
        }
        // A refusal is tried again once anything it was about changes, annotations included.
        let attempt = format!("{payload}|{}", annotations_digest(&cm));
        if self.tracked.lock().get(key).and_then(|t| t.refused.as_ref()) == Some(&attempt) {
            return;
        }
        match self.load(key, &cm, reference, found, &payload).await {
            Ok((plugin, origin)) => {
                self.take_refusal(key);
                self.waiting.clear(key);
                self.loaded_ok(key, &uid, &plugin, origin, started.elapsed(), payload_name.as_deref()).await;
            }
            Err(NotLoaded::Waiting(reason)) => {
                self.take_refusal(key);
                let candidate = self.waiting.pending(key, &payload).map(|p| p.plugin);
                self.wait(key, &uid, reason, candidate.as_ref(), declared).await;
            }
            Err(NotLoaded::Refused(reason)) => {
                self.waiting.clear(key);
                self.tracked.lock().entry(key.clone()).or_default().refused = Some(attempt);
                self.refused(key, &uid, reason, declared).await;
            }
        }
    }

    /// Forget `key`'s last refusal (it is tried again); what it was.
    fn take_refusal(&self, key: &ObjectKey) -> Option<String> {
        self.tracked.lock().get_mut(key).and_then(|t| t.refused.take())
    }

    /// What still serves for `key`, if anything: (`<name> <version>`, digest).
    async fn serving(&self, key: &ObjectKey) -> Option<(String, String)> {
        let loaded = self.loaded.lock().await;
        loaded.get(key).map(|l| (format!("{} {}", l.plugin.name(), l.plugin.spec().version), l.plugin.digest().to_string()))
    }

    /// `key` was refused: say so (log, metric, [`LoadEvent`]), then a Warning Event and the status.
    async fn refused(&self, key: &ObjectKey, uid: &str, reason: String, declared: Option<String>) {
        self.plugin_metrics.load(&cm_label(key), "rejected");
        let serving = self.serving(key).await;
        let message = match &serving {
            Some((s, _)) => format!("{reason}; still serving {s}"),
            None => reason.clone(),
        };
        warn!(configmap = %key, error = %reason, serving = serving.as_ref().map_or("nothing", |s| s.0.as_str()), "plugin rejected");
        let _ = self.events.send(LoadEvent::Rejected { configmap: key.name.clone(), error: reason.clone() });
        let status = PluginStatus {
            state: Some(State::Rejected),
            reason: "Refused".into(),
            message,
            digest: declared,
            error: Some(reason),
            serving_digest: serving.as_ref().map(|s| s.1.clone()),
            serving: serving.map(|s| s.0),
            ..Default::default()
        };
        self.report(key, uid, &status).await;
    }

    /// `key` waits for `reason`: say so when the wait begins or changes, report it once it has
    /// lasted, and try again (after a backoff for reasons no event announces).
    async fn wait(&self, key: &ObjectKey, uid: &str, reason: WaitReason, candidate: Option<&Arc<WasmPlugin>>, declared: Option<String>) {
        let next = self.waiting.wait(key, reason.clone());
        let serving = self.serving(key).await;
        let mut message = reason.to_string();
        if let Some((s, _)) = &serving {
            message = format!("{message}; still serving {s}");
        }
        if next.changed {
            self.plugin_metrics.load(&cm_label(key), "waiting");
            info!(configmap = %key, reason = reason.reason(), waiting_for = %reason.subject(),
                  serving = serving.as_ref().map_or("nothing", |s| s.0.as_str()), "plugin waiting: {reason}");
            let _ = self.events.send(LoadEvent::Waiting { configmap: key.name.clone(), reason: reason.to_string() });
        } else {
            debug!(configmap = %key, reason = reason.reason(), retry_in = ?next.retry_after, "plugin still waiting");
        }
        if next.report {
            let status = PluginStatus {
                state: Some(State::Waiting),
                reason: reason.reason().into(),
                message,
                plugin: candidate.map(|p| p.name().to_string()),
                version: candidate.map(|p| p.spec().version.clone()),
                digest: candidate.map(|p| p.digest().to_string()).or(declared),
                waiting_for: Some(reason.subject()),
                serving_digest: serving.as_ref().map(|s| s.1.clone()),
                serving: serving.map(|s| s.0),
                ..Default::default()
            };
            self.report(key, uid, &status).await;
        }
        if let Some(delay) = next.retry_after {
            self.queue.add_after(key.clone(), delay);
        }
    }

    /// The new version serves: say so at once (log, metric, [`LoadEvent`]), then write the Event
    /// and the status annotation (API round trips, so last).
    async fn loaded_ok(
        &self,
        key: &ObjectKey,
        uid: &str,
        plugin: &Arc<WasmPlugin>,
        origin: LoadOrigin,
        took: Duration,
        payload: Option<&str>,
    ) {
        let spec = plugin.spec();
        self.plugin_metrics.load(&cm_label(key), "loaded");
        self.plugin_metrics.load_time(origin != LoadOrigin::Compiled, took.as_secs_f64());
        self.plugin_metrics.set_loaded(&cm_label(key), Some(plugin.clone()));
        info!(configmap = %key, plugin = %spec.name, version = %spec.version, digest = %plugin.digest(),
              payload = payload.unwrap_or("inline"), ?origin, took_ms = took.as_millis() as u64, "plugin loaded");
        let _ = self.events.send(LoadEvent::Loaded {
            configmap: key.name.clone(),
            plugin: spec.name.clone(),
            version: spec.version.clone(),
            digest: plugin.digest().to_string(),
            origin,
            took,
        });
        let (how, reason) = match origin {
            LoadOrigin::Compiled => ("compiled", "Compiled"),
            LoadOrigin::Precompiled => ("from the precompiled cache", "Precompiled"),
            LoadOrigin::Reused => ("reusing the loaded component (same digest)", "Reused"),
            LoadOrigin::Unchanged => ("already serving", "Unchanged"),
        };
        let status = PluginStatus {
            state: Some(State::Loaded),
            reason: reason.into(),
            message: format!("{} {} ({}) loaded in {:.0?}, {how}", spec.name, spec.version, plugin.digest(), took),
            plugin: Some(spec.name.clone()),
            version: Some(spec.version.clone()),
            digest: Some(plugin.digest().to_string()),
            payload: payload.map(str::to_string),
            origin: Some(how.into()),
            load_millis: Some(took.as_millis() as u64),
            ..Default::default()
        };
        self.report(key, uid, &status).await;
    }

    /// A payload ConfigMap changed: load again the plugin ConfigMaps that reference it.
    fn payload_changed(&self, change: &Change) {
        if change.is_unchanged() {
            return;
        }
        let o = change.object();
        let (namespace, name) = (o.namespace().map(str::to_string), o.name().to_string());
        if let Change::Deleted(_) = change {
            self.verified.lock().remove(&(namespace.clone(), name.clone()));
        }
        let waiting: Vec<ObjectKey> = self
            .tracked
            .lock()
            .iter()
            .filter(|(_, t)| t.payloads.iter().any(|(ns, n)| *ns == namespace && *n == name))
            .map(|(k, _)| k.clone())
            .collect();
        for key in waiting {
            self.queue.add(key);
        }
    }

    /// The payload ConfigMap `name` in `namespace` (the plugin ConfigMap's own): from the
    /// informer, else (the informer may lag behind an apply of both objects) read once by name.
    async fn find_payload(&self, namespace: Option<&str>, name: &str) -> Found {
        if let Some(o) = self.payloads.get(namespace, name) {
            return Found::Cached(o);
        }
        let Some(ns) = namespace else { return Found::Missing };
        let api = kube::Api::<ConfigMap>::namespaced(self.client.clone(), ns);
        let lp = kube::api::ListParams::default().fields(&format!("metadata.name={name}"));
        match api.list(&lp).await {
            Ok(list) => list
                .items
                .into_iter()
                .find(|c| c.metadata.name.as_deref() == Some(name))
                .map_or(Found::Missing, |c| Found::Fetched(Box::new(c))),
            Err(e) => {
                warn!(namespace = ns, payload = name, error = %e, "could not read the payload ConfigMap; waiting for the informer");
                Found::Missing
            }
        }
    }

    /// The component for `reference`: the loaded one if these immutable payload ConfigMaps (one,
    /// or the parts of a split payload, as `found` in the reference's order) were verified
    /// before with that digest, else their bytes, joined, decompressed and checked.
    async fn resolve(&self, namespace: Option<&str>, reference: &PayloadRef, found: Vec<Found>) -> Result<Input, NotLoaded> {
        let key = (namespace.map(str::to_string), reference.names());
        let mut uids = Vec::with_capacity(found.len());
        for (part, found) in reference.parts.iter().zip(&found) {
            let (uid, immutable) = match found {
                Found::Missing => {
                    let namespace = namespace.unwrap_or_default().to_string();
                    return Err(WaitReason::PayloadMissing { namespace, name: part.clone() }.into());
                }
                Found::Cached(o) => (o.uid().to_string(), cached_immutable(o)),
                Found::Fetched(cm) => {
                    if !source::is_payload(cm) {
                        let namespace = namespace.unwrap_or_default().to_string();
                        return Err(source::Error::PayloadNotLabelled { namespace, name: part.clone() }.to_string().into());
                    }
                    (cm.metadata.uid.clone().unwrap_or_default(), cm.immutable == Some(true))
                }
            };
            if !immutable {
                return Err(source::Error::PayloadNotImmutable { name: part.clone() }.to_string().into());
            }
            uids.push(uid);
        }
        let uid = if uids.iter().any(String::is_empty) { String::new() } else { uids.join(",") };
        let known = self.verified.lock().get(&key).filter(|(u, _)| !uid.is_empty() && *u == uid).map(|(_, d)| d.clone());
        if let Some(actual) = known {
            if actual != reference.digest {
                let e = source::Error::DigestMismatch { name: reference.names(), declared: reference.digest.clone(), actual };
                return Err(e.to_string().into());
            }
            let loaded = self.loaded.lock().await.values().find(|l| l.plugin.digest() == reference.digest).map(|l| l.plugin.clone());
            if let Some(plugin) = loaded {
                return Ok(Input::Reuse(Compiled {
                    component: plugin.component().clone(),
                    digest: reference.digest.clone(),
                    size: plugin.size(),
                    origin: Origin::CacheHit,
                    elapsed: Duration::ZERO,
                }));
            }
        }
        let mut cms = Vec::with_capacity(found.len());
        for found in found {
            cms.push(match found {
                Found::Cached(o) => o.parse::<ConfigMap>().map_err(|e| e.to_string())?,
                Found::Fetched(cm) => *cm,
                Found::Missing => unreachable!("handled above"),
            });
        }
        match source::decode_payload(&cms.iter().collect::<Vec<_>>(), reference) {
            Ok((wasm, _, _)) => {
                self.verified.lock().insert(key, (uid, reference.digest.clone()));
                Ok(Input::Wasm(wasm))
            }
            Err(e) => {
                if let source::Error::DigestMismatch { actual, .. } = &e {
                    self.verified.lock().insert(key, (uid, actual.clone()));
                }
                Err(e.to_string().into())
            }
        }
    }

    /// Decode, claim the name and memory, compile, check that the kinds it reads are served,
    /// validate, then start or swap. Any error leaves what runs untouched. The `loaded` lock is
    /// never held across a compile, a controller start or an informer sync, so other ConfigMaps
    /// load and unload meanwhile. A version compiled for a kind that is not served yet is held
    /// (not compiled again) until the ConfigMap changes.
    async fn load(
        &self,
        key: &ObjectKey,
        cm: &ConfigMap,
        reference: source::Result<Option<PayloadRef>>,
        found: Option<Vec<Found>>,
        payload: &str,
    ) -> Result<(Arc<WasmPlugin>, LoadOrigin), NotLoaded> {
        let pending = self.waiting.pending(key, payload);
        let input = match (&pending, reference.map_err(|e| e.to_string())?, found) {
            (Some(_), ..) => None,
            (None, Some(reference), Some(found)) => Some(self.resolve(key.namespace.as_deref(), &reference, found).await?),
            (None, ..) => Some(Input::Wasm(source::decode(cm).map_err(|e| e.to_string())?.wasm)),
        };
        let manifest = source::manifest(cm).map_err(|e| e.to_string())?;
        let manifest = PluginManifest::parse(manifest, &key.name).map_err(|e| e.to_string())?;
        let size = match &input {
            Some(Input::Wasm(wasm)) => wasm.len(),
            Some(Input::Reuse(compiled)) => compiled.size,
            None => 0,
        };
        let load_limits = LoadLimits { max_component_size: self.config.max_component_size, compile_budget: self.config.compile_budget };
        load_limits.check_size(size).map_err(|e| e.to_string())?;
        // A candidate claims its own name: one candidate per plugin, beside the serving version.
        let claim_name = match &manifest.shadow_of {
            Some(target) => format!("{target} (candidate)"),
            None => manifest.name.clone(),
        };
        let claim = Claim { name: claim_name, memory: manifest.limits.memory.bytes() * manifest.controller.workers as u64 };
        let previous = self.claims.claim(key, claim, self.config.memory_budget)?;
        let installed = async {
            let (plugin, origin) = match (pending, input) {
                (Some(p), _) => (p.plugin, p.origin),
                (None, Some(input)) => self.compile(input, &manifest).await?,
                (None, None) => unreachable!("an input is resolved whenever nothing is pending"),
            };
            // Every kind it reads must be served, and its identity allowed to read them, before
            // anything starts (or replaces what runs).
            if let Some(reason) = served::Discovery::new(&self.client).unserved(&served::kinds_of(plugin.spec())).await {
                self.forget_unserved(&reason);
                self.waiting.hold(key, Pending { payload: payload.to_string(), plugin, origin });
                return Err(reason.into());
            }
            if manifest.shadow_of.is_some() {
                // A candidate never writes: no identity to check, nothing started.
                return self.install_candidate(key, cm, &plugin, &manifest, payload).await.map(|()| (plugin, origin));
            }
            let identity = match self.identity_of(key, &plugin, &manifest).await {
                Ok(identity) => identity,
                Err(reason) => {
                    self.waiting.hold(key, Pending { payload: payload.to_string(), plugin, origin });
                    return Err(reason);
                }
            };
            self.install(key, &plugin, &manifest, identity, payload).await.map(|()| (plugin, origin))
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

    /// The resolver must not keep an answer from before a kind stopped being served (its CRD
    /// re-created with another scope or versions would be addressed wrongly).
    fn forget_unserved(&self, reason: &WaitReason) {
        if let WaitReason::KindNotServed { kind, .. } = reason {
            self.shared.registry.resolver().forget(kind);
        }
    }

    /// Compile (or take from the precompiled cache) and validate, in the bounded compile pool
    /// and within the compile budget. Artifacts are cached only once the plugin validated.
    async fn compile(&self, input: Input, manifest: &PluginManifest) -> Result<(Arc<WasmPlugin>, LoadOrigin), String> {
        let permit = self.compiles.clone().acquire_owned().await.map_err(|e| e.to_string())?;
        let (engine, precompiled) = (self.engine.clone(), self.precompiled.clone());
        let (limits, grants, component) = (manifest.limits.clone(), manifest.grants.clone(), manifest.component.clone());
        let record = self.config.record.clone();
        // A compile cannot be interrupted: past the budget it is abandoned, and its thread keeps
        // the pool permit until it ends, so abandoned compiles stay bounded too.
        // On the guest threads: compiling a hostile component must not delay the host either.
        let work = crate::plugin::guest_threads::run(move || {
            let _permit = permit;
            let wasm = match input {
                Input::Wasm(wasm) => wasm,
                Input::Reuse(compiled) => {
                    let plugin =
                        WasmPlugin::from_compiled_as(&engine, compiled, limits, grants, component.as_deref()).map_err(|e| e.to_string())?;
                    return Ok::<_, String>((Arc::new(recording(plugin, record)), LoadOrigin::Reused));
                }
            };
            let cached = precompiled.as_ref().and_then(|c| c.cached(&engine, &wasm).ok().flatten());
            let cache_hit = cached.is_some();
            let compiled = match cached {
                Some(compiled) => compiled,
                None => engine.compile_timed(&wasm).map_err(|e| e.to_string())?,
            };
            let plugin =
                WasmPlugin::from_compiled_as(&engine, compiled, limits, grants, component.as_deref()).map_err(|e| e.to_string())?;
            if let (Some(cache), false) = (&precompiled, cache_hit) {
                cache.store(&engine, &wasm, plugin.component());
            }
            Ok::<_, String>((Arc::new(recording(plugin, record)), if cache_hit { LoadOrigin::Precompiled } else { LoadOrigin::Compiled }))
        });
        let budget = self.config.compile_budget;
        match tokio::time::timeout(budget, work).await {
            Ok(joined) => joined.map_err(|e| {
                if e.is_cancelled() {
                    "loading was cancelled: the host is shutting down".to_string()
                } else {
                    format!("loading panicked: {e}")
                }
            })?,
            Err(_) => Err(format!(
                "compiling and validating took longer than the {} budget; refused (raise it with --compile-budget / \
                 WASMLOOP_COMPILE_BUDGET)",
                crate::duration::format(budget)
            )),
        }
    }

    /// The identity the plugin's writes will carry, once the API server says it may list and
    /// watch everything the plugin reads (`None`: the host's own, with `--plugin-identity host`).
    /// Missing RBAC is a wait: it can be granted after the plugin is applied.
    async fn identity_of(&self, key: &ObjectKey, plugin: &WasmPlugin, manifest: &PluginManifest) -> Result<Option<Identity>, NotLoaded> {
        if self.config.plugin_identity == PluginIdentity::Host {
            return Ok(None);
        }
        let namespace = key.namespace.as_deref().ok_or_else(|| NotLoaded::Refused("a plugin ConfigMap has a namespace".into()))?;
        let identity = Identity::of_plugin(namespace, plugin.name(), manifest.service_account.as_deref());
        let resolver = self.shared.registry.resolver();
        let mut reads = Vec::new();
        for kind in plugin.spec().kinds() {
            let discovery_failed = |error: String| WaitReason::DiscoveryFailed { kind: kind.clone(), error };
            let namespaces = crate::controller::read_namespaces(resolver, plugin.grants(), &kind, manifest.controller.namespace.as_deref())
                .await
                .map_err(|e| match e {
                    crate::controller::ReadScopeError::Scope(why) => NotLoaded::Refused(format!("cannot read {kind}: {why}")),
                    crate::controller::ReadScopeError::Kind(e) => discovery_failed(e.to_string()).into(),
                })?;
            let resolved = resolver.resolve(&kind).await.map_err(|e| discovery_failed(e.to_string()))?;
            reads.extend(namespaces.into_iter().map(|namespace| identity::Read { kind: resolved.clone(), namespace }));
        }
        identity::check_reads(&self.client, &identity, &reads)
            .await
            .map_err(|e| WaitReason::ReadsNotAuthorized { identity: identity.to_string(), detail: e.to_string() })?;
        Ok(Some(identity))
    }

    /// Start the plugin's controller, or swap it into the running one.
    async fn install(
        &self,
        key: &ObjectKey,
        plugin: &Arc<WasmPlugin>,
        manifest: &PluginManifest,
        identity: Option<Identity>,
        payload: &str,
    ) -> Result<(), NotLoaded> {
        let grants = plugin.grants().clone();
        let old = self.loaded.lock().await.remove(key);
        let shards_changed = old.as_ref().map(|o| o.config.shards).filter(|n| *n != manifest.controller.shards);
        if let (Some(from), Some(_)) = (shards_changed, &self.config.sharding) {
            // Replicas reload one after another: two partitions of the keys at once would let
            // two replicas reconcile one key. A new shard count needs the plugin removed first.
            self.loaded.lock().await.extend(old.map(|o| (key.clone(), o)));
            return Err(format!(
                "shards cannot change from {from} to {} while the plugin is loaded with --shard-mode plugin; \
                 delete its ConfigMap, wait for it to be removed everywhere, then apply the new one",
                manifest.controller.shards
            )
            .into());
        }
        let (entry, result) = match old {
            Some(mut old)
                if old.config == manifest.controller
                    && old.identity == identity
                    && old.plugin.spec().reconciles == plugin.spec().reconciles =>
            {
                match old.controller.replace_reconciler(plugin.clone() as Arc<dyn Reconciler>, grants).await {
                    Ok(()) => {
                        old.plugin = plugin.clone();
                        old.payload = payload.to_string();
                        (Some(old), Ok(()))
                    }
                    Err(e) => (Some(old), Err(not_loaded(e))),
                }
            }
            Some(old) => {
                // The controller itself changes (kind, scope, workers, queue): restart it. The new
                // controller queues every object from the cache, so no key is lost.
                old.controller.shutdown(self.config.shutdown_grace).await;
                match self.start_controller(plugin, &manifest.controller, grants, identity.as_ref()).await {
                    Ok(controller) => {
                        let config = manifest.controller.clone();
                        (Some(Loaded { controller, plugin: plugin.clone(), config, identity, payload: payload.to_string() }), Ok(()))
                    }
                    Err(e) => {
                        // Bring the old version back.
                        let restarted =
                            self.start_controller(&old.plugin, &old.config, old.plugin.grants().clone(), old.identity.as_ref()).await;
                        (restarted.ok().map(|controller| Loaded { controller, ..old }), Err(e))
                    }
                }
            }
            None => match self.start_controller(plugin, &manifest.controller, grants, identity.as_ref()).await {
                Ok(controller) => {
                    let config = manifest.controller.clone();
                    (Some(Loaded { controller, plugin: plugin.clone(), config, identity, payload: payload.to_string() }), Ok(()))
                }
                Err(e) => (None, Err(e)),
            },
        };
        if let Some(entry) = entry {
            self.attach_candidate(key, &entry).await;
            self.loaded.lock().await.insert(key.clone(), entry);
        }
        result
    }

    /// Keep the candidate version of `key` and run it beside its plugin's serving version (now,
    /// or when that version starts). It must reconcile the same kind.
    async fn install_candidate(
        &self,
        key: &ObjectKey,
        cm: &ConfigMap,
        plugin: &Arc<WasmPlugin>,
        manifest: &PluginManifest,
        payload: &str,
    ) -> Result<(), NotLoaded> {
        let target = manifest.shadow_of.clone().unwrap_or_default();
        let shadow = Shadow::new(plugin.clone(), plugin.grants().clone(), manifest.controller.workers).with_canary(manifest.canary.clone());
        let candidate = Candidate {
            target: target.clone(),
            plugin: plugin.clone(),
            shadow: Arc::new(shadow),
            payload: payload.to_string(),
            uid: cm.metadata.uid.clone().unwrap_or_default(),
        };
        let loaded = self.loaded.lock().await;
        // Only a serving version loaded from the same namespace: with --all-namespaces, a
        // candidate must not attach itself to another namespace's plugin (its canary's writes
        // would go out as that plugin's identity).
        let serving = loaded.iter().find(|(k, l)| l.plugin.name() == target && k.namespace == key.namespace).map(|(_, l)| l);
        if let Some(serving) = serving {
            let (theirs, ours) = (&serving.plugin.spec().reconciles, &plugin.spec().reconciles);
            if theirs != ours {
                return Err(NotLoaded::Refused(format!(
                    "the candidate reconciles {ours} but plugin {target} (serving) reconciles {theirs}: a candidate version reconciles the same kind"
                )));
            }
            if let Some(canary) = &manifest.canary {
                canary.validate(serving.config.shards).map_err(NotLoaded::Refused)?;
            }
            serving.controller.set_shadow(Some(candidate.shadow.clone()));
        } else {
            info!(configmap = %key, plugin = %target, "candidate loaded; plugin {target} is not serving from this namespace: it runs beside it once it does");
        }
        drop(loaded);
        self.shadows.lock().await.insert(key.clone(), candidate);
        Ok(())
    }

    /// Run the candidate of `entry`'s plugin, if one is loaded, beside it (a restarted
    /// controller starts without one).
    async fn attach_candidate(&self, key: &ObjectKey, entry: &Loaded) {
        let shadows = self.shadows.lock().await;
        let name = entry.plugin.name();
        let candidate = shadows
            .iter()
            .find(|(k, c)| k.namespace == key.namespace && c.target == name && c.plugin.spec().reconciles == entry.plugin.spec().reconciles)
            .map(|(_, c)| c);
        let Some(c) = candidate else { return };
        if entry.controller.shadow().is_some_and(|s| Arc::ptr_eq(&s, &c.shadow)) {
            return;
        }
        let canary = c.shadow.canary();
        match canary.map(|canary| canary.validate(entry.config.shards)) {
            Some(Err(e)) => {
                warn!(plugin = %name, error = %e, "the candidate's canary does not fit the serving version's shards: it only shadows");
                let grants = c.shadow.grants().clone();
                let shadow_only = Shadow::new(c.plugin.clone(), grants, c.shadow.slots());
                entry.controller.set_shadow(Some(Arc::new(shadow_only)));
            }
            _ => entry.controller.set_shadow(Some(c.shadow.clone())),
        }
    }

    /// A canary rolled back by itself: a Warning Event on its ConfigMap says so.
    async fn note_rollback(&self, rollback: &RolledBack) {
        let found = self.shadows.lock().await.iter().find(|(_, c)| c.target == rollback.plugin).map(|(k, c)| (k.clone(), c.uid.clone()));
        let Some((key, uid)) = found else { return };
        let message = format!(
            "canary of {} rolled back: {} of its {} reconciles failed, over its maxFailureRate; the serving version serves \
             every shard again and the candidate ({}) only shadows (edit or re-apply this ConfigMap to try again)",
            rollback.plugin, rollback.failed, rollback.total, rollback.digest
        );
        self.status.note(&key, &uid, crate::actions::EventType::Warning, "CanaryRolledBack", &message).await;
    }

    /// Stop running the candidate of `key` (its ConfigMap is gone).
    async fn remove_candidate(&self, key: &ObjectKey) -> Option<Arc<WasmPlugin>> {
        let candidate = self.shadows.lock().await.remove(key)?;
        if let Some(serving) = self.loaded.lock().await.values().find(|l| l.plugin.name() == candidate.target) {
            serving.controller.set_shadow(None);
        }
        self.plugin_metrics.set_loaded(&cm_label(key), None);
        Some(candidate.plugin)
    }

    /// Differences of candidate versions, sampled into Events on their ConfigMaps: at most one
    /// per ConfigMap every [`DIFFERENCE_EVENT_EVERY`].
    async fn note_differences(
        inner: std::sync::Weak<Self>,
        mut differences: broadcast::Receiver<Difference>,
        mut rollbacks: broadcast::Receiver<RolledBack>,
    ) {
        let mut last: HashMap<ObjectKey, Instant> = HashMap::new();
        loop {
            let d = tokio::select! {
                d = differences.recv() => d,
                rollback = rollbacks.recv() => {
                    match rollback {
                        Ok(rollback) => match inner.upgrade() {
                            Some(inner) => inner.note_rollback(&rollback).await,
                            None => return,
                        },
                        Err(broadcast::error::RecvError::Lagged(_)) => {}
                        Err(broadcast::error::RecvError::Closed) => return,
                    }
                    continue;
                }
            };
            let d = match d {
                Ok(d) => d,
                Err(broadcast::error::RecvError::Lagged(_)) => continue,
                Err(broadcast::error::RecvError::Closed) => return,
            };
            let Some(inner) = inner.upgrade() else { return };
            let found = inner.shadows.lock().await.iter().find(|(_, c)| c.target == d.plugin).map(|(k, c)| (k.clone(), c.uid.clone()));
            let Some((key, uid)) = found else { continue };
            if last.get(&key).is_some_and(|t| t.elapsed() < DIFFERENCE_EVENT_EVERY) {
                continue;
            }
            last.insert(key.clone(), Instant::now());
            let message = format!(
                "{}: the candidate ({}) differs from the serving version ({}); only serving: [{}]; only candidate: [{}] (wasmloop diff shows all)",
                d.key,
                d.candidate_digest,
                d.serving_digest,
                d.only_serving().join(", "),
                d.only_candidate().join(", ")
            );
            inner.status.note(&key, &uid, crate::actions::EventType::Warning, "CandidateDiffers", &message).await;
        }
    }

    /// `name` is free again: retry the ConfigMaps that were refused because it was taken.
    fn release_name(&self, name: &str) {
        for key in self.claims.name_released(name) {
            self.take_refusal(&key);
            info!(configmap = %key, plugin = name, "plugin name released; loading the ConfigMap that waited for it");
            self.queue.add(key);
        }
    }

    async fn start_controller(
        &self,
        plugin: &Arc<WasmPlugin>,
        config: &ControllerConfig,
        grants: Arc<crate::grants::Grants>,
        identity: Option<&Identity>,
    ) -> Result<Controller, NotLoaded> {
        let executor = self.executor.acting_as(identity).map_err(|e| NotLoaded::Refused(e.to_string()))?;
        let ownership = self.config.sharding.as_ref().map(|s| s.register(plugin.name(), config.shards));
        let started = Controller::start_sharded(plugin.clone(), config.clone(), grants, self.shared.clone(), executor, ownership).await;
        if started.is_err()
            && let Some(sharding) = &self.config.sharding
        {
            sharding.unregister(plugin.name());
        }
        started.map_err(not_loaded)
    }

    /// The ConfigMap is gone: forget it entirely and stop what runs for it.
    async fn unload(&self, key: &ObjectKey) {
        self.tracked.lock().remove(key);
        self.waiting.clear(key);
        self.claims.release(key);
        if let Some(candidate) = self.remove_candidate(key).await {
            info!(configmap = %key, plugin = %candidate.name(), "candidate version removed");
            self.release_name(&format!("{} (candidate)", candidate.name()));
            let _ = self.events.send(LoadEvent::Removed { configmap: key.name.clone(), plugin: candidate.name().to_string() });
            return;
        }
        let Some(plugin) = self.stop(key).await else { return };
        self.plugin_metrics.load(&cm_label(key), "removed");
        info!(configmap = %key, plugin = %plugin.name(), "plugin removed");
        self.release_name(plugin.name());
        let _ = self.events.send(LoadEvent::Removed { configmap: key.name.clone(), plugin: plugin.name().to_string() });
    }

    /// Stop the controller of `key` (its running reconciles get the grace period); what ran.
    async fn stop(&self, key: &ObjectKey) -> Option<Arc<WasmPlugin>> {
        let old = self.loaded.lock().await.remove(key)?;
        self.plugin_metrics.set_loaded(&cm_label(key), None);
        old.controller.shutdown(self.config.shutdown_grace).await;
        if let Some(sharding) = &self.config.sharding {
            sharding.unregister(old.plugin.name());
        }
        Some(old.plugin)
    }

    /// Every `period`, while the manager lives: [`Inner::rediscover`].
    async fn rediscover_every(inner: std::sync::Weak<Self>, period: Duration) {
        loop {
            tokio::time::sleep(period).await;
            let Some(inner) = inner.upgrade() else { return };
            inner.rediscover().await;
        }
    }

    /// Ask discovery about the kinds of every loaded plugin (one request per group/version);
    /// a plugin one of whose kinds is no longer served is stopped and waits for it. Discovery
    /// that does not answer stops nothing.
    async fn rediscover(&self) {
        let loaded: Vec<(ObjectKey, Arc<WasmPlugin>, String)> =
            self.loaded.lock().await.iter().map(|(k, l)| (k.clone(), l.plugin.clone(), l.payload.clone())).collect();
        let mut discovery = served::Discovery::new(&self.client);
        for (key, plugin, payload) in loaded {
            let Some(reason @ WaitReason::KindNotServed { .. }) = discovery.unserved(&served::kinds_of(plugin.spec())).await else {
                continue;
            };
            let Some(uid) = self.store.get(key.namespace.as_deref(), &key.name).map(|o| o.uid().to_string()) else { continue };
            let Some(stopped) = self.stop(&key).await else { continue };
            self.forget_unserved(&reason);
            warn!(configmap = %key, plugin = %stopped.name(), "{reason}: no longer served; plugin stopped until it is");
            let origin = LoadOrigin::Reused;
            self.waiting.hold(&key, Pending { payload, plugin: stopped.clone(), origin });
            self.wait(&key, &uid, reason, Some(&stopped), None).await;
        }
    }

    /// The Event and the status annotations on the ConfigMap (skipped if it is gone).
    async fn report(&self, key: &ObjectKey, uid: &str, status: &PluginStatus) {
        if self.status.report(key, uid, status).await == Written::Gone {
            debug!(configmap = %key, "plugin ConfigMap gone before its status was written");
        }
    }
}

/// `namespace/name` of a plugin ConfigMap, as metrics label it.
fn cm_label(key: &ObjectKey) -> String {
    format!("{}/{}", key.namespace.as_deref().unwrap_or_default(), key.name)
}

/// A refusal's or a wait's controller start error: a kind not served (discovery raced the CRD)
/// waits; anything else is refused.
fn not_loaded(e: crate::controller::Error) -> NotLoaded {
    use crate::kinds::Error as KindError;
    match &e {
        crate::controller::Error::Informer { source: informer::Error::Kind(KindError::NotServed(kind, _)), .. } => {
            WaitReason::KindNotServed { kind: kind.clone(), role: "reads" }.into()
        }
        crate::controller::Error::Informer { source: informer::Error::Kind(KindError::Discovery(kind, err)), .. } => {
            WaitReason::DiscoveryFailed { kind: kind.clone(), error: err.to_string() }.into()
        }
        _ => NotLoaded::Refused(e.to_string()),
    }
}

/// Digest of the ConfigMap's annotations other than the host's own (so `kubectl annotate` tries
/// a refused plugin again, and the status the host writes does not).
fn annotations_digest(cm: &ConfigMap) -> String {
    let mut annotations = cm.metadata.annotations.clone().unwrap_or_default();
    annotations.retain(|k, _| !HOST_ANNOTATIONS.contains(&k.as_str()));
    source::sha256(&[&serde_json::to_vec(&annotations).unwrap_or_default()])
}

/// Digest of what defines a plugin in the ConfigMap (data + binaryData; not metadata, so the
/// status annotation the host writes does not trigger a reload).
fn payload_digest(cm: &ConfigMap) -> String {
    let data = serde_json::to_vec(&cm.data).unwrap_or_default();
    let binary = serde_json::to_vec(&cm.binary_data).unwrap_or_default();
    source::sha256(&[&data, &binary])
}

/// `plugin`, recording what `options` choose (a recorder that cannot start is logged: the
/// plugin runs without one; recording never stops a plugin from loading).
fn recording(plugin: WasmPlugin, options: Option<RecordOptions>) -> WasmPlugin {
    let Some(options) = options.filter(RecordOptions::records_anything) else { return plugin };
    match Recorder::start(options, plugin.name()) {
        Ok(recorder) => {
            tracing::info!(target: "wasmloop::record", plugin = plugin.name(), dir = %recorder.dir().display(), "recording reconciles");
            plugin.with_recorder(recorder)
        }
        Err(error) => {
            tracing::warn!(target: "wasmloop::record", plugin = plugin.name(), %error, "not recording: the recorder did not start");
            plugin
        }
    }
}
