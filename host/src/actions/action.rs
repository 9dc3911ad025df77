//! The actions a reconciler returns.

use serde::{Deserialize, Serialize};
use serde_json::Value;

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
    /// Replace `.status` through the `/status` subresource.
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
