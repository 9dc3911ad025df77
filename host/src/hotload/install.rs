//! [`Runner`]: the controllers of the plugin ConfigMaps whose versions serve — started, swapped,
//! suspended (a kind gone), resumed and removed. A version whose controller is stopped stays
//! here with its configuration and identity, so it can start again without loading anything.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::Mutex;

use super::lifecycle::Stop;
use super::manifest::PluginManifest;
use super::waiting::{NotLoaded, WaitReason};
use crate::controller::{Controller, ControllerConfig, Reconciler, Shared};
use crate::executor::Executor;
use crate::identity::Identity;
use crate::informer;
use crate::kinds::ObjectKey;
use crate::plugin::WasmPlugin;
use crate::shard::Sharding;

/// A serving version of one plugin ConfigMap.
pub(super) struct Loaded {
    /// Its controller (`None`: stopped, kept to start again).
    controller: Option<Controller>,
    plugin: Arc<WasmPlugin>,
    config: ControllerConfig,
    /// The identity its writes carry (`None`: the host's).
    identity: Option<Identity>,
}

/// The serving versions, by plugin ConfigMap.
pub(super) struct Runner {
    loaded: Mutex<HashMap<ObjectKey, Loaded>>,
    shared: Shared,
    executor: Executor,
    sharding: Option<Sharding>,
    grace: Duration,
}

impl Runner {
    /// Controllers share `shared`, write with `executor` acting as each plugin, and get `grace`
    /// to finish running reconciles when stopped.
    pub(super) fn new(shared: Shared, executor: Executor, sharding: Option<Sharding>, grace: Duration) -> Self {
        Self { loaded: Mutex::new(HashMap::new()), shared, executor, sharding, grace }
    }

    /// Start `plugin`'s controller for `key`, or swap it into the running one (its queue is
    /// kept). When the controller itself changes (kind, scope, workers, identity), the old one
    /// stops and a new one starts, queueing every cached object; if the new one fails to start,
    /// the old version is started again. [`Runner::running`] says afterwards whether `key`'s
    /// serving version runs.
    pub(super) async fn install(
        &self,
        key: &ObjectKey,
        plugin: &Arc<WasmPlugin>,
        manifest: &PluginManifest,
        identity: Option<Identity>,
    ) -> Result<(), NotLoaded> {
        let grants = plugin.grants().clone();
        let mut loaded = self.loaded.lock().await;
        let old = loaded.remove(key);
        let shards_changed = old.as_ref().map(|o| o.config.shards).filter(|n| *n != manifest.controller.shards);
        if let (Some(from), Some(_)) = (shards_changed, &self.sharding) {
            // Replicas reload one after another: two partitions of the keys at once would let
            // two replicas reconcile one key. A new shard count needs the plugin removed first.
            loaded.extend(old.map(|o| (key.clone(), o)));
            return Err(format!(
                "shards cannot change from {from} to {} while the plugin is loaded with --shard-mode plugin; \
                 delete its ConfigMap, wait for it to be removed everywhere, then apply the new one",
                manifest.controller.shards
            )
            .into());
        }
        drop(loaded);
        let same_controller = |old: &Loaded| {
            old.controller.is_some()
                && old.config == manifest.controller
                && old.identity == identity
                && old.plugin.spec().reconciles == plugin.spec().reconciles
        };
        let (entry, result) = match old {
            Some(mut old) if same_controller(&old) => {
                let controller = old.controller.as_ref().expect("checked by same_controller");
                match controller.replace_reconciler(plugin.clone() as Arc<dyn Reconciler>, grants).await {
                    Ok(()) => {
                        old.plugin = plugin.clone();
                        (Some(old), Ok(()))
                    }
                    Err(e) => (Some(old), Err(not_loaded(e))),
                }
            }
            Some(mut old) => {
                if let Some(controller) = old.controller.take() {
                    self.stop_controller(controller, &old.plugin).await;
                }
                match self.start(plugin, &manifest.controller, identity.as_ref()).await {
                    Ok(controller) => {
                        let config = manifest.controller.clone();
                        (Some(Loaded { controller: Some(controller), plugin: plugin.clone(), config, identity }), Ok(()))
                    }
                    Err(e) => {
                        // Bring the old version back; if it cannot start, it stays, stopped.
                        old.controller = self.start(&old.plugin, &old.config, old.identity.as_ref()).await.ok();
                        (Some(old), Err(e))
                    }
                }
            }
            None => match self.start(plugin, &manifest.controller, identity.as_ref()).await {
                Ok(controller) => {
                    let config = manifest.controller.clone();
                    (Some(Loaded { controller: Some(controller), plugin: plugin.clone(), config, identity }), Ok(()))
                }
                Err(e) => (None, Err(e)),
            },
        };
        if let Some(entry) = entry {
            self.loaded.lock().await.insert(key.clone(), entry);
        }
        result
    }

    /// Whether `key`'s serving version's controller runs.
    pub(super) async fn running(&self, key: &ObjectKey) -> bool {
        self.loaded.lock().await.get(key).is_some_and(|l| l.controller.is_some())
    }

    /// Stop `key`'s controller, keeping its version to start again.
    pub(super) async fn suspend(&self, key: &ObjectKey) {
        let controller = self.loaded.lock().await.get_mut(key).and_then(|l| l.controller.take().map(|c| (c, l.plugin.clone())));
        if let Some((controller, plugin)) = controller {
            self.stop_controller(controller, &plugin).await;
        }
    }

    /// Start `key`'s kept version again.
    pub(super) async fn resume(&self, key: &ObjectKey) -> Result<(), Stop> {
        let kept =
            self.loaded.lock().await.get(key).map(|l| (l.plugin.clone(), l.config.clone(), l.identity.clone(), l.controller.is_some()));
        let Some((plugin, config, identity, running)) = kept else {
            return Err(Stop::Failed("nothing kept to start again".into()));
        };
        if running {
            return Ok(());
        }
        match self.start(&plugin, &config, identity.as_ref()).await {
            Ok(controller) => {
                if let Some(l) = self.loaded.lock().await.get_mut(key) {
                    l.controller = Some(controller);
                }
                Ok(())
            }
            Err(NotLoaded::Waiting(reason @ WaitReason::KindNotServed { .. })) => Err(Stop::Suspended(reason)),
            Err(e) => Err(Stop::Failed(e.to_string())),
        }
    }

    /// Stop and forget `key`'s version; the plugin that served.
    pub(super) async fn remove(&self, key: &ObjectKey) -> Option<Arc<WasmPlugin>> {
        let old = self.loaded.lock().await.remove(key)?;
        if let Some(controller) = old.controller {
            self.stop_controller(controller, &old.plugin).await;
        }
        Some(old.plugin)
    }

    /// Every version kept, running or not: (ConfigMap, plugin).
    pub(super) async fn versions(&self) -> Vec<(ObjectKey, Arc<WasmPlugin>)> {
        self.loaded.lock().await.iter().map(|(k, l)| (k.clone(), l.plugin.clone())).collect()
    }

    /// A loaded component with `digest`, to reuse.
    pub(super) async fn with_digest(&self, digest: &str) -> Option<Arc<WasmPlugin>> {
        self.loaded.lock().await.values().find(|l| l.plugin.digest() == digest).map(|l| l.plugin.clone())
    }

    /// Call `f` with the running controller of plugin `name` loaded from `namespace`, its
    /// ConfigMap and its shard count.
    pub(super) async fn with_serving<T>(
        &self,
        namespace: Option<&str>,
        name: &str,
        f: impl FnOnce(&ObjectKey, &Controller, &WasmPlugin, usize) -> T,
    ) -> Option<T> {
        let loaded = self.loaded.lock().await;
        let (key, l) = loaded.iter().find(|(k, l)| l.plugin.name() == name && k.namespace.as_deref() == namespace)?;
        Some(f(key, l.controller.as_ref()?, &l.plugin, l.config.shards))
    }

    /// Stop every controller at once (one grace period for all).
    pub(super) async fn shutdown(&self) {
        let loaded: Vec<_> = self.loaded.lock().await.drain().collect();
        let grace = self.grace;
        futures::future::join_all(loaded.into_iter().filter_map(|(_, l)| l.controller.map(|c| c.shutdown(grace)))).await;
    }

    async fn start(
        &self,
        plugin: &Arc<WasmPlugin>,
        config: &ControllerConfig,
        identity: Option<&Identity>,
    ) -> Result<Controller, NotLoaded> {
        let executor = self.executor.acting_as(identity).map_err(|e| NotLoaded::Refused(e.to_string()))?;
        let ownership = self.sharding.as_ref().map(|s| s.register(plugin.name(), config.shards));
        let grants = plugin.grants().clone();
        let started = Controller::start_sharded(plugin.clone(), config.clone(), grants, self.shared.clone(), executor, ownership).await;
        if started.is_err()
            && let Some(sharding) = &self.sharding
        {
            sharding.unregister(plugin.name());
        }
        started.map_err(not_loaded)
    }

    async fn stop_controller(&self, controller: Controller, plugin: &WasmPlugin) {
        controller.shutdown(self.grace).await;
        if let Some(sharding) = &self.sharding {
            sharding.unregister(plugin.name());
        }
    }
}

/// A controller start error: a kind not served (discovery raced the CRD) waits; anything else
/// is refused.
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
