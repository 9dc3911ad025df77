//! The actions a reconciler returns.

use serde::{Deserialize, Serialize};
use serde_json::Value;

use wasmloop_model::{Naming, Target, TargetError};

use crate::kinds::ObjectKey;

/// `Normal` or `Warning`, as in Kubernetes Events.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum EventType {
    Normal,
    Warning,
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
    Delete { key: ObjectKey },
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
}

impl Action {
    /// The API verb this action needs (for grants and RBAC messages).
    pub fn verb(&self) -> &'static str {
        match self {
            Action::Create { .. } => "create",
            Action::Apply { .. } => "patch",
            Action::Delete { .. } => "delete",
            Action::UpdateStatus { .. } => "update-status",
            Action::Event { .. } => "event",
        }
    }
}

impl Action {
    /// The object this action touches: the one rule (see `wasmloop_model::target`) that the
    /// outcome conversion, admission and the executor all use.
    pub fn target(&self) -> Result<Target, TargetError> {
        match self {
            Action::Create { object } => Target::of_object(object, Naming::NameOrGenerate),
            Action::Apply { object } => Target::of_object(object, Naming::NameOnly("apply")),
            Action::Delete { key } | Action::UpdateStatus { key, .. } | Action::Event { regarding: key, .. } => {
                Target::of_key(&key.kind.api_version, &key.kind.kind, key.namespace.as_deref(), &key.name)
            }
        }
    }
}
