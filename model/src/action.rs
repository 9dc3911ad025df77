//! The one action vocabulary: what a plugin asks the host to do ([`Action`]), with the
//! conditions the API server checks first ([`Preconditions`]), how a patch is read
//! ([`PatchType`]) and which grant each needs ([`Action::verb`]). The guest SDK builds these, the
//! host checks and sends them, and `wasmloop reconcile` prints them in the one JSON form below.
//!
//! JSON form (recordings, `wasmloop reconcile`): an object tagged by `action` —
//! `{"action": "create", "object": …}`, `apply`, `delete` (`key`, `preconditions`),
//! `updateStatus` (`key`, `status`), `event` (`regarding`, `type`, `reason`, `message`),
//! `patch` (`key`, `status`, `patch_type`, `body`, `preconditions`).

use serde::{Deserialize, Deserializer, Serialize, Serializer};
use serde_json::Value;

use crate::{ObjectKey, Verb};

/// `Normal` or `Warning`, as in Kubernetes Events.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum EventType {
    /// Routine: something happened as intended.
    Normal,
    /// Something needs attention.
    Warning,
}

/// Conditions the API server checks before a patch or delete; a mismatch is a conflict (nothing
/// is written, and the host reconciles the key again once its cache has caught up).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Preconditions {
    /// The object must still be this one (not deleted and re-created under its name).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub uid: Option<String>,
    /// The object must be unchanged since it was read.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resource_version: Option<String>,
}

impl Preconditions {
    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.uid.is_none() && self.resource_version.is_none()
    }
}

/// How a patch document is read.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum PatchType {
    /// JSON merge patch (RFC 7386): given fields set, `null` removes, lists replaced whole.
    Merge,
    /// JSON patch (RFC 6902): `add`, `remove`, `replace` and `test` operations.
    Json,
}

/// A Kubernetes Event to record.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Event {
    /// The object the event is about.
    pub regarding: ObjectKey,
    /// Normal or Warning.
    pub event_type: EventType,
    /// CamelCase machine-readable reason, e.g. `ScaledUp`.
    pub reason: String,
    /// Human-readable detail.
    pub message: String,
}

/// A deletion: which object, and the conditions the API server checks first.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Deletion {
    /// The object to delete.
    pub key: ObjectKey,
    /// Checked by the API server before deleting.
    pub preconditions: Preconditions,
}

impl Deletion {
    /// Delete the object with this key, whatever it is now.
    pub fn new(key: ObjectKey) -> Self {
        Self { key, preconditions: Preconditions::default() }
    }

    /// Only if the object still has this uid (it was not deleted and re-created under its name).
    #[must_use]
    pub fn if_uid(mut self, uid: impl Into<String>) -> Self {
        self.preconditions.uid = Some(uid.into());
        self
    }

    /// Only if the object is unchanged since it had this resourceVersion.
    #[must_use]
    pub fn if_resource_version(mut self, rv: impl Into<String>) -> Self {
        self.preconditions.resource_version = Some(rv.into());
        self
    }
}

impl From<ObjectKey> for Deletion {
    fn from(key: ObjectKey) -> Self {
        Self::new(key)
    }
}

/// A patch of an object or of its status.
#[derive(Clone, Debug, PartialEq)]
pub struct Patch {
    /// The object to patch.
    pub key: ObjectKey,
    /// Patch the `status` subresource (needs the `update-status` grant) instead of the object
    /// (needs `patch`).
    pub status: bool,
    /// How [`body`](Self::body) is read: JSON merge patch or JSON patch.
    pub patch_type: PatchType,
    /// The patch document.
    pub body: Value,
    /// What the API server checks before applying the patch (none by default).
    pub preconditions: Preconditions,
}

impl Patch {
    /// A JSON merge patch of the object with this key.
    pub fn merge(key: ObjectKey, body: Value) -> Self {
        Self { key, status: false, patch_type: PatchType::Merge, body, preconditions: Preconditions::default() }
    }

    /// A JSON patch (a list of operations) of the object with this key.
    pub fn json(key: ObjectKey, operations: Value) -> Self {
        Self { key, status: false, patch_type: PatchType::Json, body: operations, preconditions: Preconditions::default() }
    }

    /// Patch the `status` subresource instead.
    #[must_use]
    pub fn status(mut self) -> Self {
        self.status = true;
        self
    }

    /// Only if the object still has this uid.
    #[must_use]
    pub fn if_uid(mut self, uid: impl Into<String>) -> Self {
        self.preconditions.uid = Some(uid.into());
        self
    }

    /// Only if the object is unchanged since it had this resourceVersion.
    #[must_use]
    pub fn if_resource_version(mut self, rv: impl Into<String>) -> Self {
        self.preconditions.resource_version = Some(rv.into());
        self
    }

    /// Preconditions from the object as read: its uid and resourceVersion.
    #[must_use]
    pub fn if_unchanged(self, obj: &Value) -> Self {
        let field = |f: &str| obj.pointer(&format!("/metadata/{f}")).and_then(Value::as_str).filter(|s| !s.is_empty()).map(str::to_owned);
        let mut p = self;
        p.preconditions.uid = field("uid");
        p.preconditions.resource_version = field("resourceVersion");
        p
    }
}

/// One thing for the host to do. The host makes each idempotent: creating an existing object
/// and deleting a missing one count as done.
#[derive(Clone, Debug, PartialEq)]
pub enum Action {
    /// Create the object (`apiVersion`, `kind` and `metadata.name` or `generateName` included).
    Create(Value),
    /// Server-side apply of the object (field manager = the plugin's name).
    Apply(Value),
    /// Delete the object (background propagation), if its preconditions hold.
    Delete(Deletion),
    /// JSON merge patch of `.status` through the `/status` subresource: fields given are set,
    /// fields given as null are removed, others are kept.
    UpdateStatus {
        /// The object whose status to write.
        key: ObjectKey,
        /// The new status (a JSON object).
        status: Value,
    },
    /// Record an Event.
    Event(Event),
    /// Patch an object or its status.
    Patch(Patch),
}

impl Action {
    /// Delete `key` without preconditions.
    pub fn delete(key: ObjectKey) -> Self {
        Action::Delete(Deletion::new(key))
    }

    /// The grant it needs, by the vocabulary's one rule: a patch of `/status` is
    /// `update-status`.
    pub fn verb(&self) -> Verb {
        match self {
            Action::Create(_) => Verb::Create,
            Action::Apply(_) => Verb::Apply,
            Action::Delete(_) => Verb::Delete,
            Action::UpdateStatus { .. } | Action::Patch(Patch { status: true, .. }) => Verb::UpdateStatus,
            Action::Event(_) => Verb::Event,
            Action::Patch(_) => Verb::Patch,
        }
    }

    /// Whether it makes an object appear or disappear (creates and deletes).
    pub fn is_create_or_delete(&self) -> bool {
        matches!(self, Action::Create(_) | Action::Delete(_))
    }
}

/// The JSON form of an action, borrowed (serializing never copies a body).
#[derive(Serialize)]
#[serde(tag = "action", rename_all = "camelCase")]
enum WireRef<'a> {
    Create {
        object: &'a Value,
    },
    Apply {
        object: &'a Value,
    },
    Delete {
        key: &'a ObjectKey,
        #[serde(skip_serializing_if = "Preconditions::is_empty")]
        preconditions: &'a Preconditions,
    },
    UpdateStatus {
        key: &'a ObjectKey,
        status: &'a Value,
    },
    Event {
        regarding: &'a ObjectKey,
        #[serde(rename = "type")]
        event_type: EventType,
        reason: &'a str,
        message: &'a str,
    },
    Patch {
        key: &'a ObjectKey,
        status: bool,
        patch_type: PatchType,
        body: &'a Value,
        #[serde(skip_serializing_if = "Preconditions::is_empty")]
        preconditions: &'a Preconditions,
    },
}

/// The JSON form of an action, owned (what deserializing reads).
#[derive(Deserialize)]
#[serde(tag = "action", rename_all = "camelCase")]
enum Wire {
    Create {
        object: Value,
    },
    Apply {
        object: Value,
    },
    Delete {
        key: ObjectKey,
        #[serde(default)]
        preconditions: Preconditions,
    },
    UpdateStatus {
        key: ObjectKey,
        status: Value,
    },
    Event {
        regarding: ObjectKey,
        #[serde(rename = "type")]
        event_type: EventType,
        reason: String,
        message: String,
    },
    Patch {
        key: ObjectKey,
        #[serde(default)]
        status: bool,
        patch_type: PatchType,
        body: Value,
        #[serde(default)]
        preconditions: Preconditions,
    },
}

impl Serialize for Action {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let wire = match self {
            Action::Create(object) => WireRef::Create { object },
            Action::Apply(object) => WireRef::Apply { object },
            Action::Delete(Deletion { key, preconditions }) => WireRef::Delete { key, preconditions },
            Action::UpdateStatus { key, status } => WireRef::UpdateStatus { key, status },
            Action::Event(Event { regarding, event_type, reason, message }) => {
                WireRef::Event { regarding, event_type: *event_type, reason, message }
            }
            Action::Patch(Patch { key, status, patch_type, body, preconditions }) => {
                WireRef::Patch { key, status: *status, patch_type: *patch_type, body, preconditions }
            }
        };
        wire.serialize(serializer)
    }
}

impl<'de> Deserialize<'de> for Action {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        Ok(match Wire::deserialize(deserializer)? {
            Wire::Create { object } => Action::Create(object),
            Wire::Apply { object } => Action::Apply(object),
            Wire::Delete { key, preconditions } => Action::Delete(Deletion { key, preconditions }),
            Wire::UpdateStatus { key, status } => Action::UpdateStatus { key, status },
            Wire::Event { regarding, event_type, reason, message } => Action::Event(Event { regarding, event_type, reason, message }),
            Wire::Patch { key, status, patch_type, body, preconditions } => {
                Action::Patch(Patch { key, status, patch_type, body, preconditions })
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::KindRef;

    fn key() -> ObjectKey {
        KindRef::new("v1", "ConfigMap").key(Some("ns"), "c")
    }

    #[test]
    fn the_verb_rule() {
        assert_eq!(Action::Create(json!({})).verb(), Verb::Create);
        assert_eq!(Action::Patch(Patch::merge(key(), json!({}))).verb(), Verb::Patch);
        assert_eq!(Action::Patch(Patch::merge(key(), json!({})).status()).verb(), Verb::UpdateStatus);
        assert_eq!(Action::UpdateStatus { key: key(), status: json!({}) }.verb(), Verb::UpdateStatus);
        assert!(Action::delete(key()).is_create_or_delete() && !Action::Apply(json!({})).is_create_or_delete());
    }

    #[test]
    fn the_json_form_round_trips_and_is_the_documented_one() {
        let actions = [
            Action::Create(json!({"kind": "ConfigMap"})),
            Action::Apply(json!({"kind": "ConfigMap"})),
            Action::delete(key()),
            Action::Delete(Deletion::new(key()).if_uid("u")),
            Action::UpdateStatus { key: key(), status: json!({"ready": true}) },
            Action::Event(Event { regarding: key(), event_type: EventType::Warning, reason: "R".into(), message: "m".into() }),
            Action::Patch(Patch::json(key(), json!([])).status().if_resource_version("7")),
        ];
        for a in &actions {
            let json = serde_json::to_value(a).unwrap();
            assert_eq!(&serde_json::from_value::<Action>(json.clone()).unwrap(), a, "{json}");
        }
        let json = |i: usize| serde_json::to_value(&actions[i]).unwrap();
        assert_eq!(json(0), json!({"action": "create", "object": {"kind": "ConfigMap"}}));
        assert_eq!(json(2), json!({"action": "delete", "key": key()}), "no preconditions: none printed");
        assert_eq!(json(3)["preconditions"], json!({"uid": "u"}));
        assert_eq!(json(4)["action"], "updateStatus");
        assert_eq!((json(5)["type"].clone(), json(5)["action"].clone()), (json!("Warning"), json!("event")));
        assert_eq!(json(6)["patch_type"], "json");
        assert_eq!(json(6)["preconditions"], json!({"resourceVersion": "7"}));
    }
}
