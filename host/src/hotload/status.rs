//! What the host tells the cluster about a plugin ConfigMap: an Event, then its status
//! annotations, written with the host's own client (never on a plugin's behalf).
//!
//! The status is three annotations, written together in one JSON merge patch:
//!
//! - `wasmloop.dev/state`: `Loaded`, `Waiting` or `Rejected` (for `kubectl wait
//!   --for=jsonpath=...`, which compares one plain value);
//! - `wasmloop.dev/digest`: the `sha256:` of the component that state is about (the one loaded,
//!   or the one waiting or refused), so a script can wait for *its* build;
//! - `wasmloop.dev/status`: all of it as JSON ([`PluginStatus`]: state, reason, message, plugin,
//!   version, digest, what still serves, ...).
//!
//! The patch carries the ConfigMap's uid as a precondition, so a status write never re-creates
//! a deleted ConfigMap (a merge patch of a missing object is a 404; server-side apply would have
//! created it) nor lands on a ConfigMap re-created under the same name (422 on `metadata.uid`).
//! Both mean "gone or replaced": the write is skipped, not an error.

use k8s_openapi::api::core::v1::{ConfigMap, ObjectReference};
use kube::api::{Api, Patch, PatchParams};
use kube::runtime::events::{Event, EventType as KubeEventType, Recorder, Reporter};
use serde::{Deserialize, Deserializer, Serialize};
use serde_json::json;
use tracing::{debug, warn};

use super::source::STATUS_ANNOTATION;
use crate::actions::EventType;
use crate::fence::Fence;
use crate::kinds::ObjectKey;
use crate::shard::Sharding;

/// The annotation with the state alone (`Loaded`, `Waiting`, `Rejected`).
pub const STATE_ANNOTATION: &str = "wasmloop.dev/state";
/// The annotation with the digest of the component the state is about.
pub const DIGEST_ANNOTATION: &str = "wasmloop.dev/digest";
/// The annotation with the ConfigMap data of the last version that served (JSON `{"data":
/// {...}}`, referenced payloads only): a host that starts while the ConfigMap holds a version
/// that cannot serve serves this one.
pub const LAST_GOOD_ANNOTATION: &str = "wasmloop.dev/last-good";
/// The largest last-good annotation the host writes or reads.
pub const MAX_LAST_GOOD: usize = 64 * 1024;
/// The annotations the host writes (a change of only these is not a change of the plugin).
pub const HOST_ANNOTATIONS: [&str; 4] = [STATUS_ANNOTATION, STATE_ANNOTATION, DIGEST_ANNOTATION, LAST_GOOD_ANNOTATION];

/// Where a plugin ConfigMap stands.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum State {
    /// A version of it serves (the one `digest` names).
    Loaded,
    /// It cannot load yet: something it depends on is missing (a kind, its payload, its name);
    /// retried by itself. An older version may still serve (`serving`).
    Waiting,
    /// It was refused; retried when the ConfigMap, its payload or what it references changes.
    /// An older version may still serve (`serving`).
    Rejected,
}

impl State {
    /// The state as the status JSON writes it; `Unknown` for a ConfigMap the host has not
    /// reported on (yet).
    pub fn name(state: Option<Self>) -> &'static str {
        state.map_or("Unknown", Self::as_str)
    }

    /// The state as the status JSON writes it.
    pub fn as_str(self) -> &'static str {
        match self {
            State::Loaded => "Loaded",
            State::Waiting => "Waiting",
            State::Rejected => "Rejected",
        }
    }

    /// The Event that reports entering this state: (type, reason).
    fn event(self) -> (EventType, &'static str) {
        match self {
            State::Loaded => (EventType::Normal, "PluginLoaded"),
            State::Waiting => (EventType::Normal, "PluginWaiting"),
            State::Rejected => (EventType::Warning, "PluginRejected"),
        }
    }
}

/// The JSON of `wasmloop.dev/status`. Read back tolerantly ([`PluginStatus::from_annotations`]:
/// fields added later are ignored, missing ones are empty), so readers of other versions —
/// `wasmloop status`, the `wasmloop_plugin_state` metric — keep working as it grows.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct PluginStatus {
    /// Loaded, Waiting or Rejected (`None` in a default, empty status, or a state this host does
    /// not know).
    #[serde(deserialize_with = "known_state")]
    pub state: Option<State>,
    /// Why, in one CamelCase word: `Compiled`, `Precompiled`, `Reused`, `Unchanged` (Loaded);
    /// `KindNotServed`, `PayloadMissing`, `NameTaken`, `DiscoveryFailed` (Waiting); `Refused`.
    pub reason: String,
    /// For a person: what happened and, when something else still serves, what.
    pub message: String,
    /// The plugin the state is about: its name, version and component digest, as far as known
    /// (a payload that cannot be read has no version yet; its digest is the declared one).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub plugin: Option<String>,
    /// The plugin's own version.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub version: Option<String>,
    /// `sha256:<hex>` of its component.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub digest: Option<String>,
    /// The last version that served when its controller does not run (a kind it reads is gone,
    /// or it could not start again): `<name> <version>`. It starts again by itself.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub stopped: Option<String>,
    /// Waiting or Rejected while an older version keeps serving: `<name> <version>`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub serving: Option<String>,
    /// The digest of the version that still serves.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub serving_digest: Option<String>,
    /// Rejected: the refusal (the message without what still serves).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// Waiting: what for (a kind, a payload ConfigMap, a plugin name).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub waiting_for: Option<String>,
    /// The payload ConfigMap the component came from (referenced form).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub payload: Option<String>,
    /// Loaded: how ("compiled", "from the precompiled cache", ...) and how long it took.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub origin: Option<String>,
    /// Loaded: how long the load took, in milliseconds.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub load_millis: Option<u64>,
    /// Not part of the JSON: the [`LAST_GOOD_ANNOTATION`] to write with it (`Some(None)`:
    /// remove it; `None`: leave it as it is).
    #[serde(skip)]
    pub last_good: Option<Option<String>>,
}

/// A state this host does not know reads as none.
fn known_state<'de, D: Deserializer<'de>>(d: D) -> Result<Option<State>, D::Error> {
    Ok(Option::<serde_json::Value>::deserialize(d)?.and_then(|v| serde_json::from_value(v).ok()))
}

impl PluginStatus {
    /// The status a plugin ConfigMap's `annotations` report: the JSON when it parses, else
    /// what the plain state and digest annotations say.
    pub fn from_annotations(annotations: &std::collections::BTreeMap<String, String>) -> Self {
        let json = annotations.get(STATUS_ANNOTATION).and_then(|json| serde_json::from_str::<Self>(json).ok());
        let mut status = json.unwrap_or_default();
        if status.state.is_none() {
            status.state = annotations.get(STATE_ANNOTATION).and_then(|s| serde_json::from_value(json!(s)).ok());
        }
        if status.digest.is_none() {
            status.digest = annotations.get(DIGEST_ANNOTATION).cloned();
        }
        status
    }

    /// The digest that serves: this one's when Loaded, else the older version's still serving.
    pub fn serving_digest(&self) -> Option<&str> {
        if self.state == Some(State::Loaded) { self.digest.as_deref() } else { self.serving_digest.as_deref() }
    }

    /// The digest waiting or refused (not serving), if any.
    pub fn pending_digest(&self) -> Option<&str> {
        if self.state == Some(State::Loaded) { None } else { self.digest.as_deref() }
    }

    /// The Event's `action`: the status reason and the digest it is about. kube-runtime's
    /// Recorder folds Events with the same type, reason, action and object into one series that
    /// keeps the first note, so a new version (or a new reason) must be a new action, or
    /// `PluginLoaded` would go on saying the version loaded first.
    fn action(&self) -> String {
        let about = self.digest.as_deref().or(self.waiting_for.as_deref()).unwrap_or("-");
        truncate(&format!("{} {about}", self.reason), 128)
    }

    /// The three annotations of this status.
    pub fn annotations(&self) -> serde_json::Value {
        let state = self.state.map(State::as_str);
        let json = serde_json::to_string(self).unwrap_or_default();
        let mut annotations = json!({STATUS_ANNOTATION: json, STATE_ANNOTATION: state, DIGEST_ANNOTATION: self.digest});
        if let Some(last_good) = &self.last_good {
            let bounded = last_good.as_ref().filter(|l| l.len() <= MAX_LAST_GOOD);
            annotations[LAST_GOOD_ANNOTATION] = json!(bounded);
        }
        annotations
    }
}

/// How a status write ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Written {
    /// The Event and the annotations were sent.
    Reported,
    /// Not this replica's to report (a standby, or another shard owner's ConfigMap).
    NotOurs,
    /// The ConfigMap is gone or was re-created (404, or a uid that is not the one loaded).
    Gone,
    /// The API server refused or failed (logged as a warning; the next change reports again).
    Failed,
}

/// Writes plugin status: behind the host's fence (a standby writes nothing), by the one replica
/// that speaks for the ConfigMap (sharded), with the host's own client.
#[derive(Clone)]
pub struct StatusWriter {
    client: kube::Client,
    recorder: Recorder,
    fence: Fence,
    sharding: Option<Sharding>,
}

impl StatusWriter {
    /// Events report as controller `wasmloop`, instance `instance` (the replica's identity).
    pub fn new(client: kube::Client, instance: Option<String>, fence: Fence, sharding: Option<Sharding>) -> Self {
        let recorder = Recorder::new(client.clone(), Reporter { controller: "wasmloop".into(), instance });
        Self { client, recorder, fence, sharding }
    }

    /// Report `status` on the ConfigMap `key` whose uid is `uid`: the Event first, then the
    /// annotations (so a script that saw the annotation finds the Event).
    pub async fn report(&self, key: &ObjectKey, uid: &str, status: &PluginStatus) -> Written {
        let Some(state) = status.state else { return Written::Failed };
        if self.fence.check().is_err() {
            debug!(configmap = %key, state = state.as_str(), "standby: not reporting plugin status");
            return Written::NotOurs;
        }
        let label = format!("{}/{}", key.namespace.as_deref().unwrap_or_default(), key.name);
        if self.sharding.as_ref().is_some_and(|s| !s.speaks_for(&label)) {
            debug!(configmap = %key, state = state.as_str(), "sharded: another replica reports this plugin's status");
            return Written::NotOurs;
        }
        let Some(namespace) = key.namespace.as_deref() else { return Written::Failed };
        let (event_type, reason) = state.event();
        self.publish(key, uid, event_type, reason, &status.message, status.action()).await;
        let api = Api::<ConfigMap>::namespaced(self.client.clone(), namespace);
        let patch = Patch::Merge(json!({"metadata": {"uid": uid, "annotations": status.annotations()}}));
        match api.patch(&key.name, &PatchParams::default(), &patch).await {
            Ok(_) => Written::Reported,
            Err(kube::Error::Api(s)) if is_gone(&s) => {
                debug!(configmap = %key, code = s.code, "plugin ConfigMap gone or re-created; status not written");
                Written::Gone
            }
            Err(e) => {
                warn!(configmap = %key, error = %e, "could not write the plugin status annotation");
                Written::Failed
            }
        }
    }
}

impl StatusWriter {
    /// Record an Event about the ConfigMap `key` (uid `uid`) that is not a status change (e.g. a
    /// candidate version's difference), behind the same fence and shard ownership.
    pub async fn note(&self, key: &ObjectKey, uid: &str, event_type: EventType, reason: &str, message: &str) {
        let label = format!("{}/{}", key.namespace.as_deref().unwrap_or_default(), key.name);
        if self.fence.check().is_err() || self.sharding.as_ref().is_some_and(|s| !s.speaks_for(&label)) {
            return;
        }
        self.publish(key, uid, event_type, reason, message, reason.to_owned()).await;
    }

    async fn publish(&self, key: &ObjectKey, uid: &str, event_type: EventType, reason: &str, message: &str, action: String) {
        let event = Event {
            type_: match event_type {
                EventType::Normal => KubeEventType::Normal,
                EventType::Warning => KubeEventType::Warning,
            },
            reason: reason.into(),
            note: Some(truncate(message, 1024)),
            action,
            secondary: None,
        };
        let reference = ObjectReference {
            api_version: Some("v1".into()),
            kind: Some("ConfigMap".into()),
            name: Some(key.name.clone()),
            namespace: key.namespace.clone(),
            uid: Some(uid.into()),
            ..Default::default()
        };
        if let Err(e) = self.recorder.publish(&event, &reference).await {
            warn!(configmap = %key, error = %e, "could not record the plugin Event");
        }
    }
}

/// 404: deleted. 409: changed under a precondition. 422 on `metadata.uid`: re-created under
/// the same name (the uid in the patch is not the object's).
fn is_gone(s: &kube::core::Status) -> bool {
    s.code == 404 || s.code == 409 || (s.code == 422 && s.message.contains("metadata.uid"))
}

fn truncate(s: &str, max: usize) -> String {
    if s.len() <= max {
        return s.to_string();
    }
    let mut end = max;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    s[..end].to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_annotations_carry_the_state_the_digest_and_the_json() {
        let status = PluginStatus {
            state: Some(State::Waiting),
            reason: "KindNotServed".into(),
            message: "waiting".into(),
            digest: Some("sha256:ab".into()),
            waiting_for: Some("example.com/v1/Thing".into()),
            ..Default::default()
        };
        let a = status.annotations();
        assert_eq!(a[STATE_ANNOTATION], "Waiting");
        assert_eq!(a[DIGEST_ANNOTATION], "sha256:ab");
        let json: serde_json::Value = serde_json::from_str(a[STATUS_ANNOTATION].as_str().unwrap()).unwrap();
        assert_eq!(
            json,
            json!({"state": "Waiting", "reason": "KindNotServed", "message": "waiting",
                                "digest": "sha256:ab", "waitingFor": "example.com/v1/Thing"})
        );
    }

    #[test]
    fn events_about_another_version_or_reason_are_not_folded_into_one_series() {
        let loaded = |digest: &str| PluginStatus {
            state: Some(State::Loaded),
            reason: "Compiled".into(),
            digest: Some(digest.into()),
            ..Default::default()
        };
        assert_eq!(loaded("sha256:a").action(), loaded("sha256:a").action(), "a repeat folds");
        assert_ne!(loaded("sha256:a").action(), loaded("sha256:b").action(), "a new version does not");
        let waiting = PluginStatus { reason: "PayloadMissing".into(), waiting_for: Some("v1/ConfigMap/ns/p".into()), ..Default::default() };
        assert_eq!(waiting.action(), "PayloadMissing v1/ConfigMap/ns/p");
    }

    #[test]
    fn an_unknown_digest_removes_the_digest_annotation() {
        // null in a merge patch removes the key: a refused ConfigMap with no readable digest
        // does not keep the digest of an earlier version.
        let status = PluginStatus { state: Some(State::Rejected), ..Default::default() };
        assert!(status.annotations()[DIGEST_ANNOTATION].is_null());
    }

    #[test]
    fn deleted_and_recreated_configmaps_are_gone_other_failures_are_not() {
        let status = |code: u16, message: &str| kube::core::Status::failure(message, "").with_code(code);
        assert!(is_gone(&status(404, "configmaps \"x\" not found")));
        assert!(is_gone(&status(409, "the object has been modified")));
        assert!(is_gone(&status(422, "ConfigMap \"x\" is invalid: metadata.uid: Invalid value: \"a\": field is immutable")));
        assert!(!is_gone(&status(422, "ConfigMap \"x\" is invalid: data: Too long")));
        assert!(!is_gone(&status(403, "forbidden")));
        assert!(!is_gone(&status(500, "etcd")));
    }
}
