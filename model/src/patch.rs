//! Patches a plugin writes: a JSON merge patch (RFC 7386) must be an object; a JSON patch
//! (RFC 6902) a list of `add`, `remove`, `replace` and `test` operations (`move` and `copy` would
//! write values that admission cannot see) with paths of at most [`MAX_PATH_SEGMENTS`] segments.
//! Both are applied as the API server applies them, and a patch's preconditions (uid,
//! resourceVersion) hold as the API server checks them. The host, and every language's test fake,
//! follow these rules (the conformance corpus pins them: `model/conformance/`).

use serde_json::Value;

use crate::target::json_type;

/// Most segments a JSON patch path may have.
pub const MAX_PATH_SEGMENTS: usize = 128;

/// Why a patch is refused or does not apply.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PatchError {
    /// A merge patch that is not a JSON object.
    #[error("a merge patch must be a JSON object, got {0}")]
    MergeNotAnObject(&'static str),
    /// A merge patch whose `metadata` is not an object (`null` would remove all of it).
    #[error("a merge patch's metadata must be a JSON object, got {0}")]
    MergeMetadataNotAnObject(&'static str),
    /// A JSON patch that is not a list.
    #[error("a JSON patch must be a list of operations, got {0}")]
    JsonNotAList(&'static str),
    /// An operation the host refuses before sending it.
    #[error("operation {index}: {why}")]
    Refused {
        /// Its position in the list.
        index: usize,
        /// What is wrong with it.
        why: Refusal,
    },
    /// A `test` operation whose value is not there.
    #[error("operation {index}: the test failed (the value differs)")]
    TestFailed {
        /// Its position in the list.
        index: usize,
    },
    /// An operation whose path is not in the object (or a malformed pointer).
    #[error("operation {index}: the path does not apply to the object")]
    DoesNotApply {
        /// Its position in the list.
        index: usize,
    },
}

/// Why the host refuses a JSON patch operation.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Refusal {
    /// Not `add`, `remove`, `replace` or `test` (`move`, `copy`, anything else).
    #[error("op {0:?} is not one of add, remove, replace, test")]
    Op(String),
    /// No `path` string.
    #[error("path must be a string")]
    Path,
    /// A path of more than [`MAX_PATH_SEGMENTS`] segments.
    #[error("path has more than {MAX_PATH_SEGMENTS} segments")]
    TooDeep,
    /// `add`, `replace` or `test` without a value.
    #[error("{0} needs a value")]
    NoValue(String),
}

impl PatchError {
    /// A stable name of the kind of error, as the conformance corpus records it.
    pub fn kind(&self) -> &'static str {
        match self {
            PatchError::MergeNotAnObject(_) => "merge_not_an_object",
            PatchError::MergeMetadataNotAnObject(_) => "merge_metadata_not_an_object",
            PatchError::JsonNotAList(_) => "json_not_a_list",
            PatchError::Refused { why: Refusal::Op(_), .. } => "op_refused",
            PatchError::Refused { why: Refusal::Path, .. } => "path_not_a_string",
            PatchError::Refused { why: Refusal::TooDeep, .. } => "path_too_deep",
            PatchError::Refused { why: Refusal::NoValue(_), .. } => "no_value",
            PatchError::TestFailed { .. } => "test_failed",
            PatchError::DoesNotApply { .. } => "does_not_apply",
        }
    }

    /// The position of the operation at fault, for JSON patches.
    pub fn index(&self) -> Option<usize> {
        match self {
            PatchError::Refused { index, .. } | PatchError::TestFailed { index } | PatchError::DoesNotApply { index } => Some(*index),
            PatchError::MergeNotAnObject(_) | PatchError::MergeMetadataNotAnObject(_) | PatchError::JsonNotAList(_) => None,
        }
    }
}

/// The result of checking or applying a patch.
pub type Result<T, E = PatchError> = std::result::Result<T, E>;

/// Check a merge patch: a JSON object, whose `metadata`, if given, is an object too.
pub fn check_merge(patch: &Value) -> Result<()> {
    let object = patch.as_object().ok_or_else(|| PatchError::MergeNotAnObject(json_type(patch)))?;
    match object.get("metadata") {
        Some(meta) if !meta.is_object() => Err(PatchError::MergeMetadataNotAnObject(json_type(meta))),
        _ => Ok(()),
    }
}

/// Check a JSON patch: a list of `add`, `remove`, `replace`, `test` operations, each with a path
/// of at most [`MAX_PATH_SEGMENTS`] segments and (but `remove`) a value.
pub fn check_json(ops: &Value) -> Result<()> {
    let ops = ops.as_array().ok_or_else(|| PatchError::JsonNotAList(json_type(ops)))?;
    for (index, op) in ops.iter().enumerate() {
        let refused = |why| PatchError::Refused { index, why };
        let name = op.get("op").and_then(Value::as_str).unwrap_or_default();
        if !matches!(name, "add" | "remove" | "replace" | "test") {
            return Err(refused(Refusal::Op(name.to_owned())));
        }
        let Some(path) = op.get("path").and_then(Value::as_str) else {
            return Err(refused(Refusal::Path));
        };
        if path.matches('/').count() > MAX_PATH_SEGMENTS {
            return Err(refused(Refusal::TooDeep));
        }
        if name != "remove" && op.get("value").is_none() {
            return Err(refused(Refusal::NoValue(name.to_owned())));
        }
    }
    Ok(())
}

/// `before` with merge patch `patch` applied (RFC 7386: objects merge recursively, `null`
/// removes, anything else replaces).
pub fn merge(before: &Value, patch: &Value) -> Result<Value> {
    check_merge(patch)?;
    let mut after = before.clone();
    merge_into(&mut after, patch);
    Ok(after)
}

/// Merge `patch` into `target` in place (RFC 7386), unchecked: an apply's object or a status
/// merged into what is stored.
pub fn merge_into(target: &mut Value, patch: &Value) {
    json_patch::merge(target, patch);
}

/// `before` with JSON patch `ops` applied, all or nothing (RFC 6902).
pub fn json(before: &Value, ops: &Value) -> Result<Value> {
    check_json(ops)?;
    // Checked: a list of known operations with string paths; a malformed pointer is one that
    // does not apply (the operation it is in is found by parsing one at a time).
    let mut parsed = Vec::new();
    for (index, op) in ops.as_array().into_iter().flatten().enumerate() {
        parsed.push(serde_json::from_value::<json_patch::PatchOperation>(op.clone()).map_err(|_| PatchError::DoesNotApply { index })?);
    }
    apply_ops(before, &json_patch::Patch(parsed))
}

/// `before` with JSON patch operations applied that were checked ([`check_json`]) and parsed
/// already (the host parses a plugin's patch once, at planning), all or nothing.
pub fn apply_ops(before: &Value, ops: &json_patch::Patch) -> Result<Value> {
    let mut after = before.clone();
    json_patch::patch(&mut after, ops).map_err(|e| match e.kind {
        json_patch::PatchErrorKind::TestFailed => PatchError::TestFailed { index: e.operation },
        _ => PatchError::DoesNotApply { index: e.operation },
    })?;
    Ok(after)
}

/// Whether `object` is the one a patch's (or delete's) preconditions name: the same uid and
/// resourceVersion, where given; an empty precondition is none.
pub fn preconditions_hold(uid: Option<&str>, resource_version: Option<&str>, object: &Value) -> bool {
    let holds = |want: Option<&str>, field: &str| {
        want.filter(|w| !w.is_empty()).is_none_or(|w| object.get("metadata").and_then(|m| m.get(field)).and_then(Value::as_str) == Some(w))
    };
    holds(uid, "uid") && holds(resource_version, "resourceVersion")
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn merge_patches_merge_and_refuse_non_objects() {
        assert_eq!(merge(&json!({"a": {"b": 1, "c": 2}}), &json!({"a": {"b": null, "d": 3}})), Ok(json!({"a": {"c": 2, "d": 3}})));
        assert_eq!(merge(&json!({}), &json!([1])).unwrap_err().kind(), "merge_not_an_object");
    }

    #[test]
    fn json_patches_refuse_move_and_copy_and_name_the_operation() {
        let err = json(&json!({"a": 1}), &json!([{"op": "test", "path": "/a", "value": 1}, {"op": "copy", "from": "/a", "path": "/b"}]));
        assert_eq!(err.as_ref().map_err(PatchError::index), Err(Some(1)));
        assert_eq!(err.unwrap_err().kind(), "op_refused");
        let err = json(&json!({"a": 1}), &json!([{"op": "test", "path": "/a", "value": 2}])).unwrap_err();
        assert_eq!((err.kind(), err.index()), ("test_failed", Some(0)));
        let err = json(&json!({"a": 1}), &json!([{"op": "remove", "path": "/a"}, {"op": "remove", "path": "/a"}])).unwrap_err();
        assert_eq!((err.kind(), err.index()), ("does_not_apply", Some(1)));
        assert_eq!(json(&json!({"a": 1}), &json!([{"op": "replace", "path": "/a", "value": 2}])), Ok(json!({"a": 2})));
    }

    #[test]
    fn preconditions_hold_where_given() {
        let obj = json!({"metadata": {"uid": "u", "resourceVersion": "7"}});
        assert!(preconditions_hold(None, None, &obj));
        assert!(preconditions_hold(Some("u"), Some(""), &obj));
        assert!(!preconditions_hold(Some("u"), Some("6"), &obj));
        assert!(!preconditions_hold(Some("v"), None, &json!({})));
    }
}
