//! [`Reporter`]: what is said about a plugin ConfigMap when its life cycle's [`View`] changes —
//! first a log line, a metric and a [`LoadEvent`] (at once), then a Kubernetes Event and the
//! status annotations ([`super::status`]: API writes, slower). The status is derived from the
//! view alone, so it names a version as serving exactly when one runs. Waits are reported once
//! they have lasted ([`Waiting`]); messages in the annotation are bounded (the whole text is
//! logged once).

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::broadcast;
use tracing::{debug, info, warn};

use super::compile::LoadOrigin;
use super::lifecycle::{Standing, Stop, View};
use super::metrics::PluginMetrics;
use super::status::{PluginStatus, State, StatusWriter, Written};
use super::waiting::{WaitReason, Waiting};
use crate::kinds::ObjectKey;
use crate::plugin::WasmPlugin;
use crate::reconciler::Reconciler as _;

/// The longest `message` or `error` in the status annotation; longer ones are cut (the log
/// line has the whole text).
pub const MAX_STATUS_TEXT: usize = 2048;

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
        /// The same, typed, when it is a [`WaitReason`] (not a failed restart).
        wait: Option<WaitReason>,
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

/// What the manager knows of one ConfigMap besides its life cycle, for its reports.
#[derive(Default)]
pub(super) struct Notes {
    /// The ConfigMap's uid (status writes carry it as a precondition).
    pub(super) uid: String,
    /// The digest what the ConfigMap holds declares (referenced payloads).
    pub(super) declared: Option<String>,
    /// The version a waiting content compiled, if it got that far.
    pub(super) held: Option<Arc<WasmPlugin>>,
    /// How the good version came to serve, and how long it took: set when it does, reported once.
    pub(super) fresh: Option<(LoadOrigin, Duration)>,
    /// The payload ConfigMap(s) the good version came from (`None`: inline).
    pub(super) payload: Option<String>,
    /// The good version's ConfigMap data, as the last-good annotation records it (`None`: it
    /// cannot be recorded: inline, or too large).
    pub(super) good_data: Option<BTreeMap<String, String>>,
}

/// A loaded version, as life cycles know it: the same version is the same plugin object.
#[derive(Clone)]
pub(super) struct Version(pub(super) Arc<WasmPlugin>);

impl PartialEq for Version {
    fn eq(&self, other: &Self) -> bool {
        Arc::ptr_eq(&self.0, &other.0)
    }
}

impl std::fmt::Debug for Version {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} {} ({})", self.0.name(), self.0.spec().version, self.0.digest())
    }
}

/// What a report comes to: the status to write (if any), and when to try a waiting content again.
pub(super) struct Rendered {
    /// The status annotation and Event to write.
    pub(super) status: Option<PluginStatus>,
    /// When to handle the ConfigMap again.
    pub(super) retry: Option<Duration>,
}

/// Reports plugin ConfigMaps' life cycles.
pub(super) struct Reporter {
    pub(super) status: StatusWriter,
    pub(super) metrics: PluginMetrics,
    pub(super) events: broadcast::Sender<LoadEvent>,
    pub(super) waiting: Waiting,
}

impl Reporter {
    /// Say what `view` of `key` says at once (log, metric, [`LoadEvent`]), and render the status
    /// to write (the caller writes it: [`Reporter::write`]).
    pub(super) fn render(&self, key: &ObjectKey, view: View<'_, Version>, notes: &mut Notes) -> Rendered {
        let serving = view.serving.map(|p| (describe(&p.0), p.0.digest().to_string()));
        let stopped = view.stopped.map(|(p, _)| describe(&p.0));
        let mut status = PluginStatus {
            serving_digest: serving.as_ref().map(|s| s.1.clone()),
            serving: serving.as_ref().map(|s| s.0.clone()),
            stopped: stopped.clone(),
            ..Default::default()
        };
        let mut retry = None;
        let nothing = Rendered { status: None, retry: None };
        match (view.standing, view.serving.map(|v| &v.0), view.stopped.map(|(v, s)| (&v.0, s))) {
            (Standing::Loading | Standing::Unknown, ..) => return nothing,
            (Standing::Current, Some(plugin), _) => {
                self.waiting.clear(key);
                let (origin, took) = notes.fresh.take().unwrap_or((LoadOrigin::Unchanged, Duration::ZERO));
                self.loaded(key, plugin, origin, took, notes.payload.as_deref());
                let (how, reason) = origin.describe();
                let spec = plugin.spec();
                status = PluginStatus {
                    state: Some(State::Loaded),
                    reason: reason.into(),
                    message: format!("{} {} ({}) loaded in {:.0?}, {how}", spec.name, spec.version, plugin.digest(), took),
                    plugin: Some(spec.name.clone()),
                    version: Some(spec.version.clone()),
                    digest: Some(plugin.digest().to_string()),
                    payload: notes.payload.clone(),
                    origin: Some(how.into()),
                    load_millis: Some(took.as_millis() as u64),
                    last_good: Some(notes.good_data.as_ref().and_then(last_good_json)),
                    ..Default::default()
                };
            }
            (Standing::Current, None, Some((plugin, stop))) => {
                self.waiting.clear(key);
                let (reason, why, wait) = match stop {
                    Stop::Suspended(reason) => {
                        status.waiting_for = Some(reason.subject());
                        (reason.reason(), format!("{reason}"), Some(reason.clone()))
                    }
                    Stop::Failed(error) => ("Restarting", format!("it could not start again ({error}); retried"), None),
                };
                let message = format!("{} stopped: {why}", describe(plugin));
                warn!(configmap = %key, plugin = %plugin.name(), "{message}");
                self.metrics.load(&label(key), "waiting");
                let _ = self.events.send(LoadEvent::Waiting { configmap: key.name.clone(), reason: why, wait });
                self.metrics.set_loaded(&label(key), None);
                status.state = Some(State::Waiting);
                status.reason = reason.into();
                status.message = bounded(&message);
                status.digest = Some(plugin.digest().to_string());
            }
            (Standing::Current, None, None) => return nothing,
            (Standing::Waiting(reason), ..) => {
                let next = self.waiting.wait(key, reason.clone());
                retry = next.retry_after;
                let doing = doing(serving.as_ref().map(|s| &s.0), stopped.as_ref());
                if next.changed {
                    self.metrics.load(&label(key), "waiting");
                    info!(configmap = %key, reason = reason.reason(), waiting_for = %reason.subject(), %doing, "plugin waiting: {reason}");
                    let _ = self.events.send(LoadEvent::Waiting {
                        configmap: key.name.clone(),
                        reason: reason.to_string(),
                        wait: Some(reason.clone()),
                    });
                }
                if !next.report {
                    return Rendered { status: None, retry };
                }
                let held = notes.held.as_ref();
                status.state = Some(State::Waiting);
                status.reason = reason.reason().into();
                status.message = bounded(&format!("{reason}; {doing}"));
                status.plugin = held.map(|p| p.name().to_string());
                status.version = held.map(|p| p.spec().version.clone());
                status.digest = held.map(|p| p.digest().to_string()).or_else(|| notes.declared.clone());
                status.waiting_for = Some(reason.subject());
            }
            (Standing::Refused(error), ..) => {
                self.waiting.clear(key);
                self.metrics.load(&label(key), "rejected");
                let doing = doing(serving.as_ref().map(|s| &s.0), stopped.as_ref());
                warn!(configmap = %key, %error, %doing, "plugin rejected");
                let _ = self.events.send(LoadEvent::Rejected { configmap: key.name.clone(), error: error.to_string() });
                status.state = Some(State::Rejected);
                status.reason = "Refused".into();
                status.message = bounded(&format!("{error}; {doing}"));
                status.error = Some(bounded(error));
                status.digest = notes.declared.clone();
            }
        }
        Rendered { status: Some(status), retry }
    }

    /// Write `status` on the ConfigMap `key` whose uid is `uid` (skipped if it is gone).
    pub(super) async fn write(&self, key: &ObjectKey, uid: &str, status: &PluginStatus) {
        if self.status.report(key, uid, status).await == Written::Gone {
            debug!(configmap = %key, "plugin ConfigMap gone before its status was written");
        }
    }

    /// `key`'s version serves: say so at once (log, metric, [`LoadEvent`]).
    fn loaded(&self, key: &ObjectKey, plugin: &Arc<WasmPlugin>, origin: LoadOrigin, took: Duration, payload: Option<&str>) {
        let spec = plugin.spec();
        self.metrics.load(&label(key), "loaded");
        if matches!(origin, LoadOrigin::Compiled | LoadOrigin::Precompiled | LoadOrigin::Reused) {
            self.metrics.load_time(origin != LoadOrigin::Compiled, took.as_secs_f64());
        }
        self.metrics.set_loaded(&label(key), Some(plugin.clone()));
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
    }

    /// `key` is gone and `plugin` no longer runs for it.
    pub(super) fn removed(&self, key: &ObjectKey, plugin: &WasmPlugin, candidate: bool) {
        self.waiting.clear(key);
        self.metrics.set_loaded(&label(key), None);
        if candidate {
            info!(configmap = %key, plugin = %plugin.name(), "candidate version removed");
        } else {
            self.metrics.load(&label(key), "removed");
            info!(configmap = %key, plugin = %plugin.name(), "plugin removed");
        }
        let _ = self.events.send(LoadEvent::Removed { configmap: key.name.clone(), plugin: plugin.name().to_string() });
    }
}

/// `<name> <version>`.
fn describe(plugin: &WasmPlugin) -> String {
    format!("{} {}", plugin.name(), plugin.spec().version)
}

/// What serves meanwhile, for a person.
fn doing(serving: Option<&String>, stopped: Option<&String>) -> String {
    match (serving, stopped) {
        (Some(s), _) => format!("still serving {s}"),
        (None, Some(s)) => format!("nothing serves ({s} is stopped until its kinds are served)"),
        (None, None) => "nothing serves".into(),
    }
}

/// `namespace/name` of a plugin ConfigMap, as metrics label it.
pub(super) fn label(key: &ObjectKey) -> String {
    format!("{}/{}", key.namespace.as_deref().unwrap_or_default(), key.name)
}

/// `text`, cut to [`MAX_STATUS_TEXT`] bytes (at a character boundary) with a note of how much
/// was cut.
pub(super) fn bounded(text: &str) -> String {
    if text.len() <= MAX_STATUS_TEXT {
        return text.to_owned();
    }
    let mut end = MAX_STATUS_TEXT;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}… ({} more bytes: the host's log has the whole text)", &text[..end], text.len() - end)
}

/// The last-good annotation's value for a good version whose ConfigMap data was `data`.
fn last_good_json(data: &BTreeMap<String, String>) -> Option<String> {
    serde_json::to_string(&serde_json::json!({ "data": data })).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn status_texts_are_bounded_and_say_what_was_cut() {
        assert_eq!(bounded("short"), "short");
        let long = "é".repeat(5000);
        let cut = bounded(&long);
        assert!(cut.len() < MAX_STATUS_TEXT + 80, "{}", cut.len());
        assert!(cut.ends_with("more bytes: the host's log has the whole text)"), "{cut}");
    }
}
