//! The actions a reconciler returns.

use std::borrow::Cow;

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
    /// The API verb this action needs (for grants and RBAC messages).
    pub fn verb(&self) -> &'static str {
        match self {
            Action::Create { .. } => "create",
            Action::Apply { .. } => "patch",
            Action::Delete { .. } => "delete",
            Action::UpdateStatus { .. } => "update-status",
            Action::Event { .. } => "event",
            Action::Patch { status: true, .. } => "update-status",
            Action::Patch { .. } => "patch",
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

    /// What a body-carrying action writes, as an object-shaped value admission can check: the
    /// object of a create or apply, a merge patch as is, and a JSON patch's `add`/`replace`
    /// values placed at their paths (arrays for index segments).
    pub fn written(&self) -> Option<Cow<'_, Value>> {
        match self {
            Action::Create { object } | Action::Apply { object } => Some(Cow::Borrowed(object)),
            Action::Patch { patch_type: PatchType::Merge, body, .. } => Some(Cow::Borrowed(body)),
            Action::Patch { patch_type: PatchType::Json, body, .. } => Some(Cow::Owned(json_patch_written(body))),
            _ => None,
        }
    }
}

/// The values a JSON patch adds or replaces, placed at their paths.
fn json_patch_written(ops: &Value) -> Value {
    let mut out = Value::Object(Default::default());
    for op in ops.as_array().into_iter().flatten() {
        let kind = op.get("op").and_then(Value::as_str);
        let (Some("add" | "replace"), Some(path), Some(value)) = (kind, op.get("path").and_then(Value::as_str), op.get("value")) else {
            continue;
        };
        let segments: Vec<String> = path.split('/').skip(1).map(|s| s.replace("~1", "/").replace("~0", "~")).collect();
        let mut placed = value.clone();
        for (i, seg) in segments.iter().enumerate().rev() {
            // An index (or `-`) in a list: the value is one element of it.
            let is_index = i > 0 && (seg == "-" || seg.parse::<usize>().is_ok());
            placed = if is_index { Value::Array(vec![placed]) } else { serde_json::json!({ seg.clone(): placed }) };
        }
        merge_into(&mut out, placed);
    }
    out
}

fn merge_into(into: &mut Value, from: Value) {
    match (into, from) {
        (Value::Object(a), Value::Object(b)) => {
            for (k, v) in b {
                match a.get_mut(&k) {
                    Some(existing) => merge_into(existing, v),
                    None => {
                        a.insert(k, v);
                    }
                }
            }
        }
        (Value::Array(a), Value::Array(b)) => a.extend(b),
        (slot, v) => *slot = v,
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
            | Action::Patch { key, .. } => Target::of_key(&key.kind.api_version, &key.kind.kind, key.namespace.as_deref(), &key.name),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn json_patches_show_what_they_write() {
        let ops = json!([
            {"op": "test", "path": "/metadata/uid", "value": "u"},
            {"op": "add", "path": "/metadata/ownerReferences/-", "value": {"kind": "ReplicaSet"}},
            {"op": "replace", "path": "/metadata/labels/a~1b", "value": "x"},
            {"op": "add", "path": "/spec/template/spec", "value": {"serviceAccountName": "s"}},
            {"op": "remove", "path": "/metadata/finalizers/0"},
        ]);
        let written = json_patch_written(&ops);
        assert_eq!(
            written,
            json!({
                "metadata": {"ownerReferences": [{"kind": "ReplicaSet"}], "labels": {"a/b": "x"}},
                "spec": {"template": {"spec": {"serviceAccountName": "s"}}},
            })
        );
    }
}
