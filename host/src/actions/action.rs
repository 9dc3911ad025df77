//! The actions a reconciler returns, in the contract's terms (what `wasmloop reconcile` prints).

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::kinds::ObjectKey;

/// `Normal` or `Warning`, as in Kubernetes Events.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum EventType {
    /// Routine.
    Normal,
    /// Something needs attention.
    Warning,
}

/// Conditions the API server checks before a patch or delete; a mismatch is a conflict.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Preconditions {
    /// The object must still be this one (not deleted and re-created under its name).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub uid: Option<String>,
    /// The object must be unchanged since the plugin read it.
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
    /// JSON merge patch (RFC 7386).
    Merge,
    /// JSON patch (RFC 6902).
    Json,
}

/// One thing to do to the cluster. The executor makes each idempotent.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "action", rename_all = "camelCase")]
pub enum Action {
    /// Create an object (AlreadyExists counts as done).
    Create {
        /// The whole object, `apiVersion`, `kind` and `metadata.name` included.
        object: Value,
    },
    /// Server-side apply (field manager = the controller's name).
    Apply {
        /// The fields the controller owns, with `apiVersion`, `kind` and `metadata.name`.
        object: Value,
    },
    /// Delete an object (NotFound counts as done).
    Delete {
        /// The object to delete.
        key: ObjectKey,
        /// What the API server checks before deleting (none by default).
        #[serde(default, skip_serializing_if = "Preconditions::is_empty")]
        preconditions: Preconditions,
    },
    /// JSON merge patch of `.status` through the `/status` subresource.
    UpdateStatus {
        /// The object whose status is patched.
        key: ObjectKey,
        /// The merge patch of `.status`.
        status: Value,
    },
    /// Record a Kubernetes Event about an object.
    Event {
        /// The object the Event is about.
        regarding: ObjectKey,
        /// `Normal` or `Warning`.
        #[serde(rename = "type")]
        event_type: EventType,
        /// A short CamelCase reason, e.g. `ScalingUp`.
        reason: String,
        /// The human-readable message.
        message: String,
    },
    /// Patch an object, or its `/status` subresource (`status: true`).
    Patch {
        /// The object to patch.
        key: ObjectKey,
        /// Patch the `/status` subresource instead of the object.
        #[serde(default)]
        status: bool,
        /// How `body` is read.
        patch_type: PatchType,
        /// The patch document.
        body: Value,
        /// What the API server checks before patching (none by default).
        #[serde(default, skip_serializing_if = "Preconditions::is_empty")]
        preconditions: Preconditions,
    },
}

impl Action {
    /// Delete `key` without preconditions.
    pub fn delete(key: ObjectKey) -> Self {
        Action::Delete { key, preconditions: Preconditions::default() }
    }
}
