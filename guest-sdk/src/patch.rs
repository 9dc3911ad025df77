//! Patches of objects anyone owns (contract 0.2): adopt and release children, add and remove
//! finalizers, or any JSON merge patch or JSON patch, guarded by preconditions.
//!
//! A precondition that fails is not an error: the host reconciles the key again once its cache
//! has caught up, and the reconcile decides afresh from what it then reads.
//!
//! ```
//! use serde_json::json;
//! use wasmloop_sdk::Outcome;
//! let rs = json!({"apiVersion": "apps/v1", "kind": "ReplicaSet",
//!                 "metadata": {"name": "web", "namespace": "shop", "uid": "rs-1"}});
//! let orphan = json!({"apiVersion": "v1", "kind": "Pod",
//!                     "metadata": {"name": "web-x", "namespace": "shop", "uid": "p-1", "resourceVersion": "7"}});
//! let out = Outcome::new().adopt(&rs, &orphan);
//! assert_eq!(out.patches().count(), 1);
//! ```

use serde::Serialize;
use serde_json::{Value, json};

use crate::action::Action;
use crate::error::Error;
use crate::invalid::InvalidObject;
use crate::object;
use crate::outcome::Outcome;

pub use crate::action::{Patch, PatchType, Preconditions};

/// The owner reference that makes `owner` the controller of its dependents.
pub fn controller_ref(owner: &Value) -> Result<Value, InvalidObject> {
    let s = |p: &str| owner.pointer(p).and_then(Value::as_str).filter(|s| !s.is_empty());
    let (Some(api_version), Some(kind), Some(name), Some(uid)) = (s("/apiVersion"), s("/kind"), s("/metadata/name"), s("/metadata/uid"))
    else {
        return Err(InvalidObject::IncompleteOwner);
    };
    Ok(json!({
        "apiVersion": api_version, "kind": kind, "name": name, "uid": uid,
        "controller": true, "blockOwnerDeletion": true,
    }))
}

fn owner_refs(obj: &Value) -> &[Value] {
    obj.pointer("/metadata/ownerReferences").and_then(Value::as_array).map(Vec::as_slice).unwrap_or_default()
}

/// The index of `uid` among `obj`'s owner references.
fn owner_index(obj: &Value, uid: &str) -> Option<usize> {
    owner_refs(obj).iter().position(|r| r.get("uid").and_then(Value::as_str) == Some(uid))
}

/// The uid of `obj`'s controller (the owner reference with `controller: true`), if any.
pub fn controller_uid(obj: &Value) -> Option<&str> {
    owner_refs(obj)
        .iter()
        .find(|r| r.get("controller").and_then(Value::as_bool) == Some(true))
        .and_then(|r| r.get("uid").and_then(Value::as_str))
}

/// Whether `obj` carries `finalizer`.
pub fn has_finalizer(obj: &Value, finalizer: &str) -> bool {
    finalizer_index(obj, finalizer).is_some()
}

fn finalizer_index(obj: &Value, finalizer: &str) -> Option<usize> {
    obj.pointer("/metadata/finalizers").and_then(Value::as_array)?.iter().position(|f| f.as_str() == Some(finalizer))
}

/// Whether `obj` is being deleted (`metadata.deletionTimestamp` set).
pub fn is_deleting(obj: &Value) -> bool {
    obj.pointer("/metadata/deletionTimestamp").is_some_and(|t| !t.is_null())
}

/// Append to a list field, creating it if absent: `[ops]` for a JSON patch.
fn append(obj: &Value, list: &str, value: Value) -> Value {
    let pointer = format!("/metadata/{list}");
    if obj.pointer(&pointer).is_some_and(Value::is_array) {
        json!([{"op": "add", "path": format!("{pointer}/-"), "value": value}])
    } else {
        json!([{"op": "add", "path": pointer, "value": [value]}])
    }
}

/// Remove element `index` of a list field, testing first that it is still `expected`.
fn remove_at(list: &str, index: usize, expected: Value) -> Value {
    let path = format!("/metadata/{list}/{index}");
    json!([{"op": "test", "path": path, "value": expected}, {"op": "remove", "path": path}])
}

impl Outcome {
    /// Patch an object (see [`Patch`]).
    pub fn patch(mut self, patch: Patch) -> Self {
        self.push(Action::Patch(patch));
        self
    }

    /// JSON merge patch of `obj` if it is unchanged since it was read (uid and resourceVersion
    /// preconditions taken from it).
    pub fn merge_patch(self, obj: &impl Serialize, body: impl Serialize) -> Self {
        self.patch_object("merge_patch", obj, |v| {
            let body = serde_json::to_value(body).map_err(|e| InvalidObject::serde("patch", e))?;
            Ok(Patch::merge(object::key(v)?, body).if_unchanged(v))
        })
    }

    /// Make `owner` the controller of `orphan` (KCM's adoption): adds the controller owner
    /// reference if `orphan` is still the object read and has no controller.
    pub fn adopt(self, owner: &impl Serialize, orphan: &impl Serialize) -> Self {
        let owner_ref = match serde_json::to_value(owner).map_err(|e| InvalidObject::serde("owner", e)).and_then(|o| controller_ref(&o)) {
            Ok(r) => r,
            Err(e) => return self.with_problem(format!("adopt: {e}")),
        };
        self.patch_object("adopt", orphan, |v| {
            if controller_uid(v).is_some() {
                return Err(InvalidObject::AlreadyControlled(object::key(v)?));
            }
            Ok(Patch::json(object::key(v)?, append(v, "ownerReferences", owner_ref)).if_unchanged(v))
        })
    }

    /// Remove `owner_uid`'s owner reference from `dependent` (KCM's release of a child that no
    /// longer matches); nothing if it has none.
    pub fn release(self, owner_uid: &str, dependent: &impl Serialize) -> Self {
        self.patch_object_opt("release", dependent, |v| {
            let Some(i) = owner_index(v, owner_uid) else { return Ok(None) };
            // Test the uid only: the reference as read may omit defaults the server stores.
            let path = format!("/metadata/ownerReferences/{i}");
            let ops = json!([{"op": "test", "path": format!("{path}/uid"), "value": owner_uid}, {"op": "remove", "path": path}]);
            Ok(Some(Patch::json(object::key(v)?, ops).if_unchanged(v)))
        })
    }

    /// Add `finalizer` to `obj` unless it has it.
    pub fn add_finalizer(self, obj: &impl Serialize, finalizer: &str) -> Self {
        self.patch_object_opt("add_finalizer", obj, |v| {
            if has_finalizer(v, finalizer) {
                return Ok(None);
            }
            Ok(Some(Patch::json(object::key(v)?, append(v, "finalizers", json!(finalizer))).if_unchanged(v)))
        })
    }

    /// Remove `finalizer` from `obj` if it has it (after cleanup: the API server then finishes
    /// the deletion once no finalizer is left).
    pub fn remove_finalizer(self, obj: &impl Serialize, finalizer: &str) -> Self {
        self.patch_object_opt("remove_finalizer", obj, |v| {
            let Some(i) = finalizer_index(v, finalizer) else { return Ok(None) };
            // Only the uid: other controllers may change the object meanwhile; the test op
            // guards the position.
            let ops = remove_at("finalizers", i, json!(finalizer));
            let uid = v.pointer("/metadata/uid").and_then(Value::as_str).unwrap_or_default();
            Ok(Some(Patch::json(object::key(v)?, ops).if_uid(uid)))
        })
    }

    /// Patches to send.
    pub fn patches(&self) -> impl Iterator<Item = &Patch> {
        self.actions.iter().filter_map(|a| match a {
            Action::Patch(p) => Some(p),
            _ => None,
        })
    }

    fn patch_object(self, what: &str, obj: &impl Serialize, f: impl FnOnce(&Value) -> Result<Patch, InvalidObject>) -> Self {
        self.patch_object_opt(what, obj, |v| f(v).map(Some))
    }

    fn patch_object_opt(self, what: &str, obj: &impl Serialize, f: impl FnOnce(&Value) -> Result<Option<Patch>, InvalidObject>) -> Self {
        let built = serde_json::to_value(obj).map_err(|e| InvalidObject::serde("object", e)).and_then(|v| f(&v));
        match built {
            Ok(Some(p)) => self.patch(p),
            Ok(None) => self,
            Err(e) => self.with_problem(format!("{what}: {e}")),
        }
    }
}

/// What a finalizer-guarded reconcile does now (kube-runtime's `finalizer` pattern).
#[derive(Debug, PartialEq, Eq)]
pub enum FinalizerPhase {
    /// The object lacks the finalizer and is not being deleted: add it first.
    Add,
    /// Reconcile normally.
    Apply,
    /// Being deleted with the finalizer: clean up, then remove it.
    Cleanup,
    /// Being deleted and the finalizer is gone: nothing to do.
    Done,
}

/// The phase of `obj` for `finalizer`.
pub fn finalizer_phase(obj: &Value, finalizer: &str) -> FinalizerPhase {
    match (is_deleting(obj), has_finalizer(obj, finalizer)) {
        (false, false) => FinalizerPhase::Add,
        (false, true) => FinalizerPhase::Apply,
        (true, true) => FinalizerPhase::Cleanup,
        (true, false) => FinalizerPhase::Done,
    }
}

/// Reconcile `obj` under `finalizer`: the object gets the finalizer before anything else,
/// `apply` runs while it lives, and `cleanup` runs once it is being deleted; the finalizer is
/// removed in the same outcome, after cleanup's actions, so a failed cleanup action keeps it
/// (and the deletion waits). `cleanup` must be idempotent and return an outcome that finishes
/// the cleanup, or an error (retried, finalizer kept).
pub fn with_finalizer(
    obj: &Value,
    finalizer: &str,
    apply: impl FnOnce(&Value) -> Result<Outcome, Error>,
    cleanup: impl FnOnce(&Value) -> Result<Outcome, Error>,
) -> Result<Outcome, Error> {
    match finalizer_phase(obj, finalizer) {
        // The patch is an event on the object: the next reconcile applies.
        FinalizerPhase::Add => Ok(Outcome::new().add_finalizer(obj, finalizer)),
        FinalizerPhase::Apply => apply(obj),
        FinalizerPhase::Cleanup => Ok(cleanup(obj)?.remove_finalizer(obj, finalizer)),
        FinalizerPhase::Done => Ok(Outcome::new()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rs() -> Value {
        json!({"apiVersion": "apps/v1", "kind": "ReplicaSet", "metadata": {"name": "web", "namespace": "shop", "uid": "rs-1"}})
    }

    fn pod(owners: Value) -> Value {
        json!({"apiVersion": "v1", "kind": "Pod",
               "metadata": {"name": "p", "namespace": "shop", "uid": "p-1", "resourceVersion": "7", "ownerReferences": owners}})
    }

    #[test]
    fn adopt_adds_a_controller_ref_guarded_by_uid_and_version() {
        let out = Outcome::new().adopt(&rs(), &pod(json!([])));
        let p = out.patches().next().unwrap();
        assert_eq!(p.patch_type, PatchType::Json);
        assert_eq!(p.preconditions, Preconditions { uid: Some("p-1".into()), resource_version: Some("7".into()) });
        assert_eq!(p.body[0]["path"], "/metadata/ownerReferences/-");
        assert_eq!(p.body[0]["value"]["controller"], true);
        let mut bare = pod(json!([]));
        bare["metadata"].as_object_mut().unwrap().remove("ownerReferences");
        let out = Outcome::new().adopt(&rs(), &bare);
        assert_eq!(out.patches().next().unwrap().body[0]["path"], "/metadata/ownerReferences");
        let owned = pod(json!([{"apiVersion": "v1", "kind": "X", "name": "x", "uid": "x", "controller": true}]));
        let err = Outcome::new().adopt(&rs(), &owned).into_result().unwrap_err();
        assert!(err.message().contains("already has a controller"), "{err}");
    }

    #[test]
    fn release_removes_only_the_owners_reference() {
        let owners = json!([{"uid": "other"}, {"uid": "rs-1", "controller": true}]);
        let out = Outcome::new().release("rs-1", &pod(owners));
        let p = out.patches().next().unwrap();
        assert_eq!(
            p.body,
            json!([
                {"op": "test", "path": "/metadata/ownerReferences/1/uid", "value": "rs-1"},
                {"op": "remove", "path": "/metadata/ownerReferences/1"},
            ])
        );
        assert!(Outcome::new().release("nobody", &pod(json!([]))).is_empty());
    }

    #[test]
    fn finalizers_follow_the_object_through_deletion() {
        let mut obj = rs();
        let applied = |_: &Value| Ok(Outcome::new().event_key(object::key(&rs()).unwrap(), crate::EventType::Normal, "Applied", ""));
        let cleaned = |_: &Value| Ok(Outcome::new().event_key(object::key(&rs()).unwrap(), crate::EventType::Normal, "Cleaned", ""));
        let add = with_finalizer(&obj, "x.io/cleanup", applied, cleaned).unwrap();
        assert_eq!(add.patches().next().unwrap().body, json!([{"op": "add", "path": "/metadata/finalizers", "value": ["x.io/cleanup"]}]));
        obj["metadata"]["finalizers"] = json!(["other", "x.io/cleanup"]);
        let live = with_finalizer(&obj, "x.io/cleanup", applied, cleaned).unwrap();
        assert_eq!(live.events().next().unwrap().reason, "Applied");
        obj["metadata"]["deletionTimestamp"] = json!("2026-01-01T00:00:00Z");
        let gone = with_finalizer(&obj, "x.io/cleanup", applied, cleaned).unwrap();
        assert!(matches!(gone.actions[0], Action::Event(_)), "cleanup's actions come first");
        let remove = gone.patches().next().unwrap();
        assert_eq!(remove.body[1], json!({"op": "remove", "path": "/metadata/finalizers/1"}));
        assert_eq!(remove.preconditions.uid.as_deref(), Some("rs-1"));
        obj["metadata"]["finalizers"] = json!(["other"]);
        assert!(with_finalizer(&obj, "x.io/cleanup", applied, cleaned).unwrap().is_empty());
    }
}
