//! [`Candidates`]: candidate versions (`shadowOf: <plugin>`), run beside their plugin's serving
//! version whenever it runs ([`crate::controller::shadow`]); their differences and canary
//! roll-backs sampled into Events on their ConfigMaps.

use std::collections::HashMap;
use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};

use tokio::sync::{Mutex, broadcast};
use tracing::{info, warn};

use super::install::Runner;
use super::manifest::PluginManifest;
use super::status::StatusWriter;
use super::waiting::NotLoaded;
use crate::actions::EventType;
use crate::controller::shadow::{Difference, RolledBack};
use crate::controller::{Controller, Shadow};
use crate::executor::Executor;
use crate::kinds::ObjectKey;
use crate::plugin::WasmPlugin;
use crate::reconciler::Reconciler as _;

/// The shortest time between two Events about one candidate's differences.
pub const DIFFERENCE_EVENT_EVERY: Duration = Duration::from_secs(30);

/// A loaded candidate version.
struct Candidate {
    /// The plugin it shadows.
    target: String,
    plugin: Arc<WasmPlugin>,
    /// What runs beside the serving version (its canary's state lives here, across restarts of
    /// the serving controller).
    shadow: Arc<Shadow>,
    /// The ConfigMap's uid (Events about its differences go there).
    uid: String,
}

/// The candidate versions, by ConfigMap.
#[derive(Default)]
pub(super) struct Candidates {
    loaded: Mutex<HashMap<ObjectKey, Candidate>>,
}

impl Candidates {
    /// Keep `plugin` as the candidate of `key` (ConfigMap uid `uid`) and run it beside its
    /// plugin's serving version from the same namespace (now, or when that version starts). It
    /// must reconcile the same kind. A canary's writes go out with `executor` (the candidate's
    /// own identity).
    pub(super) async fn install(
        &self,
        runner: &Runner,
        key: &ObjectKey,
        uid: &str,
        plugin: &Arc<WasmPlugin>,
        manifest: &PluginManifest,
        executor: Option<Executor>,
    ) -> Result<(), NotLoaded> {
        // The candidate runs under the name of the plugin it shadows (scoped as that one is).
        let target = manifest.name.clone();
        let shadow = Shadow::new(plugin.clone(), plugin.grants().clone(), manifest.controller.workers)
            .with_canary(manifest.canary.clone())
            .with_executor(executor);
        let candidate = Candidate { target: target.clone(), plugin: plugin.clone(), shadow: Arc::new(shadow), uid: uid.to_owned() };
        let attached = runner
            .with_serving(key.namespace.as_deref(), &target, |_, controller, serving, shards| {
                let (theirs, ours) = (&serving.spec().reconciles, &plugin.spec().reconciles);
                if theirs != ours {
                    return Err(NotLoaded::Refused(format!(
                        "the candidate reconciles {ours} but plugin {target} (serving) reconciles {theirs}: a candidate version \
                         reconciles the same kind"
                    )));
                }
                if let Some(canary) = &manifest.canary {
                    canary.validate(shards).map_err(|e| NotLoaded::Refused(e.to_string()))?;
                }
                controller.set_shadow(Some(candidate.shadow.clone()));
                Ok(())
            })
            .await;
        match attached {
            Some(result) => result?,
            None => info!(configmap = %key, plugin = %target,
                          "candidate loaded; plugin {target} is not serving from this namespace: it runs beside it once it does"),
        }
        self.loaded.lock().await.insert(key.clone(), candidate);
        Ok(())
    }

    /// Run the candidate of the plugin serving for `key` (if one is loaded) beside it: a
    /// started or restarted controller starts without one.
    pub(super) async fn attach(&self, runner: &Runner, key: &ObjectKey, name: &str) {
        let loaded = self.loaded.lock().await;
        runner
            .with_serving(key.namespace.as_deref(), name, |_, controller, serving, shards| {
                let same = |c: &&Candidate| c.target == name && c.plugin.spec().reconciles == serving.spec().reconciles;
                let found = loaded.iter().find(|(k, c)| k.namespace == key.namespace && same(c)).map(|(_, c)| c);
                if let Some(c) = found {
                    attach_to(controller, c, shards, name);
                }
            })
            .await;
    }

    /// Stop running the candidate of `key` (its ConfigMap is gone); what it was.
    pub(super) async fn remove(&self, runner: &Runner, key: &ObjectKey) -> Option<Arc<WasmPlugin>> {
        let candidate = self.loaded.lock().await.remove(key)?;
        runner
            .with_serving(key.namespace.as_deref(), &candidate.target, |_, controller, _, _| {
                if controller.shadow().is_some_and(|s| Arc::ptr_eq(&s, &candidate.shadow)) {
                    controller.set_shadow(None);
                }
            })
            .await;
        Some(candidate.plugin)
    }

    /// Whether `key` holds a candidate.
    pub(super) async fn holds(&self, key: &ObjectKey) -> bool {
        self.loaded.lock().await.contains_key(key)
    }

    /// The ConfigMap (and its uid) of the candidate of plugin `name`.
    async fn of_plugin(&self, name: &str) -> Option<(ObjectKey, String)> {
        self.loaded.lock().await.iter().find(|(_, c)| c.target == name).map(|(k, c)| (k.clone(), c.uid.clone()))
    }

    /// Differences of candidate versions and canary roll-backs, sampled into Events on their
    /// ConfigMaps: at most one difference per ConfigMap every [`DIFFERENCE_EVENT_EVERY`].
    pub(super) async fn note(
        candidates: Weak<Self>,
        status: StatusWriter,
        mut differences: broadcast::Receiver<Difference>,
        mut rollbacks: broadcast::Receiver<RolledBack>,
    ) {
        let mut last: HashMap<ObjectKey, Instant> = HashMap::new();
        loop {
            let (plugin, event) = tokio::select! {
                d = differences.recv() => match d {
                    Ok(d) => (d.plugin.clone(), Note::Differs(d)),
                    Err(broadcast::error::RecvError::Lagged(_)) => continue,
                    Err(broadcast::error::RecvError::Closed) => return,
                },
                r = rollbacks.recv() => match r {
                    Ok(r) => (r.plugin.clone(), Note::RolledBack(r)),
                    Err(broadcast::error::RecvError::Lagged(_)) => continue,
                    Err(broadcast::error::RecvError::Closed) => return,
                },
            };
            let Some(candidates) = candidates.upgrade() else { return };
            let Some((key, uid)) = candidates.of_plugin(&plugin).await else { continue };
            let (reason, message) = match event {
                Note::RolledBack(r) => (
                    "CanaryRolledBack",
                    format!(
                        "canary of {} rolled back: {} of its {} reconciles failed, over its maxFailureRate; the serving version serves \
                     every shard again and the candidate ({}) only shadows (edit or re-apply this ConfigMap to try again)",
                        r.plugin, r.failed, r.total, r.digest
                    ),
                ),
                Note::Differs(d) => {
                    if last.get(&key).is_some_and(|t| t.elapsed() < DIFFERENCE_EVENT_EVERY) {
                        continue;
                    }
                    last.insert(key.clone(), Instant::now());
                    (
                        "CandidateDiffers",
                        format!(
                            "{}: the candidate ({}) differs from the serving version ({}); only serving: [{}]; only candidate: [{}] \
                         (wasmloop diff shows all)",
                            d.key,
                            d.candidate_digest,
                            d.serving_digest,
                            d.only_serving().join(", "),
                            d.only_candidate().join(", ")
                        ),
                    )
                }
            };
            status.note(&key, &uid, EventType::Warning, reason, &message).await;
        }
    }
}

enum Note {
    Differs(Difference),
    RolledBack(RolledBack),
}

/// Run `c` beside `controller` (of a plugin with `shards`), unless it already does; a canary
/// that does not fit the shards only shadows.
fn attach_to(controller: &Controller, c: &Candidate, shards: usize, name: &str) {
    if controller.shadow().is_some_and(|s| Arc::ptr_eq(&s, &c.shadow)) {
        return;
    }
    match c.shadow.canary().map(|canary| canary.validate(shards)) {
        Some(Err(e)) => {
            warn!(plugin = %name, error = %e, "the candidate's canary does not fit the serving version's shards: it only shadows");
            let shadow_only = Shadow::new(c.plugin.clone(), c.shadow.grants().clone(), c.shadow.slots());
            controller.set_shadow(Some(Arc::new(shadow_only)));
        }
        _ => controller.set_shadow(Some(c.shadow.clone())),
    }
}
