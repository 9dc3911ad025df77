//! The actions a reconciler returns.

use serde::{Deserialize, Serialize};
use serde_json::Value;

use wasmloop_model::{Naming, Target, TargetError, Verb};

use crate::kinds::ObjectKey;

/// `Normal` or `Warning`, as in Kubernetes Events.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum EventType {
    Normal,
    Warning,
}

/// Conditions the API server checks before a patch or delete; a mismatch is a conflict.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Preconditions {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub uid: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resource_version: Option<String>,
}

impl Preconditions {
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
    Create { object: Value },
    /// Server-side apply (field manager = the controller's name).
    Apply { object: Value },
    /// Delete an object (NotFound counts as done).
    Delete {
        key: ObjectKey,
        #[serde(default, skip_serializing_if = "Preconditions::is_empty")]
        preconditions: Preconditions,
    },
    /// JSON merge patch of `.status` through the `/status` subresource.
    UpdateStatus { key: ObjectKey, status: Value },
    /// Record a Kubernetes Event about an object.
    Event {
        regarding: ObjectKey,
        #[serde(rename = "type")]
        event_type: EventType,
        reason: String,
        message: String,
    },
    /// Patch an object, or its `/status` subresource (`status: true`).
    Patch {
        key: ObjectKey,
        #[serde(default)]
        status: bool,
        patch_type: PatchType,
        body: Value,
        #[serde(default, skip_serializing_if = "Preconditions::is_empty")]
        preconditions: Preconditions,
    },
}

impl Action {
    /// The grant this action needs: the one verb of grants, refusals, logs and metrics.
    pub fn verb(&self) -> Verb {
        match self {
            Action::Create { .. } => Verb::Create,
            Action::Apply { .. } => Verb::Apply,
            Action::Delete { .. } => Verb::Delete,
            Action::UpdateStatus { .. } | Action::Patch { status: true, .. } => Verb::UpdateStatus,
            Action::Event { .. } => Verb::Event,
            Action::Patch { .. } => Verb::Patch,
        }
    }

    /// Delete `key` without preconditions.
    pub fn delete(key: ObjectKey) -> Self {
        Action::Delete { key, preconditions: Preconditions::default() }
    }

    /// The object a create or delete makes appear or disappear (for expectations).
    pub fn is_create_or_delete(&self) -> bool {
        matches!(self, Action::Create { .. } | Action::Delete { .. })
    }
}

impl Action {
    /// The object this action touches: the one rule (see `wasmloop_model::target`) that the
    /// outcome conversion, admission and the executor all use.
    pub fn target(&self) -> Result<Target, TargetError> {
        match self {
            Action::Create { object } => Target::of_object(object, Naming::NameOrGenerate),
            Action::Apply { object } => Target::of_object(object, Naming::NameOnly("apply")),
            Action::Delete { key, .. }
            | Action::UpdateStatus { key, .. }
            | Action::Event { regarding: key, .. }
            | Action::Patch { key, .. } => Target::of_key(key),
        }
    }
}
