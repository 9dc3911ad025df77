//! What a plugin asks the host to do: one [`Action`] per write or Event, with the conditions the
//! API server checks first. [`crate::Outcome`] builds them; [`crate::patch`] has the patch builders.

use serde_json::Value;

use crate::types::ObjectKey;

/// `Normal` or `Warning`, as in Kubernetes Events.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EventType {
    /// Routine: something happened as intended.
    Normal,
    /// Something needs attention.
    Warning,
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

/// A deletion: which object, and the conditions the API server checks first (a mismatch is a
/// conflict: nothing is deleted and the host reconciles the key again once its cache has caught
/// up), built like a [`Patch`](crate::Patch):
///
/// ```
/// use wasmloop_sdk::{kinds, Deletion, Outcome};
/// // Delete the ConfigMap only if it is still the one read (not deleted and re-created).
/// let out = Outcome::new().deletion(Deletion::new(kinds::CONFIG_MAP.key(Some("ns"), "c")).if_uid("uid-1"));
/// assert_eq!(out.deletions().next().unwrap().preconditions.uid.as_deref(), Some("uid-1"));
/// ```
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
    pub fn if_uid(mut self, uid: impl Into<String>) -> Self {
        self.preconditions.uid = Some(uid.into());
        self
    }

    /// Only if the object is unchanged since it had this resourceVersion.
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

/// One thing for the host to do. The host makes each idempotent: creating an existing object
/// and deleting a missing one count as done.
#[derive(Clone, Debug, PartialEq)]
pub enum Action {
    /// Create the object.
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
    /// Patch an object or its status (see [`crate::patch`]).
    Patch(Patch),
}

/// Conditions the API server checks before writing; a mismatch is a conflict.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Preconditions {
    /// The object must still be this one (not deleted and re-created under its name).
    pub uid: Option<String>,
    /// The object must be unchanged since it was read.
    pub resource_version: Option<String>,
}

/// How a patch document is read.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PatchType {
    /// JSON merge patch (RFC 7386): given fields set, `null` removes, lists replaced whole.
    Merge,
    /// JSON patch (RFC 6902): `add`, `remove`, `replace` and `test` operations.
    Json,
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
    pub fn status(mut self) -> Self {
        self.status = true;
        self
    }

    /// Only if the object still has this uid.
    pub fn if_uid(mut self, uid: impl Into<String>) -> Self {
        self.preconditions.uid = Some(uid.into());
        self
    }

    /// Only if the object is unchanged since it had this resourceVersion.
    pub fn if_resource_version(mut self, rv: impl Into<String>) -> Self {
        self.preconditions.resource_version = Some(rv.into());
        self
    }

    /// Preconditions from the object as read: its uid and resourceVersion.
    pub fn if_unchanged(self, obj: &Value) -> Self {
        let field = |f: &str| obj.pointer(&format!("/metadata/{f}")).and_then(Value::as_str).filter(|s| !s.is_empty()).map(str::to_owned);
        let mut p = self;
        p.preconditions.uid = field("uid");
        p.preconditions.resource_version = field("resourceVersion");
        p
    }
}
