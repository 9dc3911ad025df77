//! What a reconcile returns: actions for the host to execute, and an optional requeue.

use crate::invalid::InvalidObject;
use std::time::Duration;

use serde::Serialize;
use serde_json::{Value, json};
use wasmloop_model::owner::AdoptError;

use crate::action::{Action, Deletion, Event, EventType};
use crate::object;
use crate::types::ObjectKey;

/// The result of a successful reconcile, built by chaining:
///
/// ```
/// use std::time::Duration;
/// use wasmloop_sdk::{Outcome, EventType};
/// use serde_json::json;
/// let cm = json!({"apiVersion": "v1", "kind": "ConfigMap",
///                 "metadata": {"name": "c", "namespace": "ns"}, "data": {"k": "v"}});
/// let out = Outcome::default()
///     .apply(&cm)
///     .event(&cm, EventType::Normal, "Configured", "applied profile gold")
///     .requeue_after(Duration::from_secs(30));
/// assert_eq!(out.applied().count(), 1);
/// assert_eq!(out.requeue_after, Some(Duration::from_secs(30)));
/// ```
///
/// A builder given an object it cannot use (one without `apiVersion`, `kind` or a name, say)
/// records the problem instead of panicking; the reconcile then fails with a permanent error
/// naming it (see [`Outcome::into_result`]).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Outcome {
    /// The actions, in the order the host executes them.
    pub actions: Vec<Action>,
    /// Reconcile this key again after this long (the host's resync and events still apply).
    pub requeue_after: Option<Duration>,
    invalid: Option<String>,
    /// How many actions at the end stay last ([`Outcome::status_after_writes`]): the builders
    /// add theirs before them.
    last: usize,
}

impl Outcome {
    /// No actions, no requeue: the object is in its desired state.
    pub fn new() -> Self {
        Self::default()
    }

    /// Create `obj` (a `serde_json::Value`, a `k8s` type or any serializable object with
    /// `apiVersion`, `kind` and `metadata.name` or `metadata.generateName`).
    pub fn create(self, obj: &impl Serialize) -> Self {
        self.with_object("create", obj, |v| {
            check_type(&v)?;
            let named = ["name", "generateName"]
                .iter()
                .any(|f| v.get("metadata").and_then(|m| m.get(*f)).and_then(Value::as_str).is_some_and(|s| !s.is_empty()));
            if !named {
                return Err(InvalidObject::Unnamed);
            }
            Ok(Action::Create(v))
        })
    }

    /// Create `child` controlled by `owner`: adds an owner reference with `controller` and
    /// `blockOwnerDeletion` set (so garbage collection deletes the child with its owner and
    /// events on the child map back to the owner), and puts the child in the owner's namespace
    /// if it has none.
    pub fn create_owned(self, owner: &impl Serialize, child: impl Serialize) -> Self {
        let owner_ref = match serde_json::to_value(owner) {
            Ok(o) => controller_ref(&o),
            Err(e) => Err(InvalidObject::serde("owner", e)),
        };
        let owner_ref = match owner_ref {
            Ok(r) => r,
            Err(e) => return self.invalid(format!("create_owned: {e}")),
        };
        let (owner_ns, owner_ref) = owner_ref;
        let child = match serde_json::to_value(child) {
            Ok(c) => c,
            Err(e) => return self.invalid(format!("create_owned: child does not serialize: {e}")),
        };
        match set_owner(child, owner_ns.as_deref(), owner_ref) {
            Ok(child) => self.create(&child),
            Err(e) => self.invalid(format!("create_owned: {e}")),
        }
    }

    /// Server-side apply `obj` (needs `apiVersion`, `kind` and `metadata.name`); the host applies
    /// it with the plugin's name as field manager.
    pub fn apply(self, obj: &impl Serialize) -> Self {
        self.with_object("apply", obj, |v| {
            object::key(&v)?;
            Ok(Action::Apply(v))
        })
    }

    /// Delete `obj` (its key is taken from it).
    pub fn delete(self, obj: &impl Serialize) -> Self {
        self.with_object("delete", obj, |v| Ok(Action::Delete(Deletion::new(object::key(&v)?))))
    }

    /// Delete the object with this key.
    pub fn delete_key(self, key: ObjectKey) -> Self {
        self.deletion(Deletion::new(key))
    }

    /// Delete an object if the deletion's preconditions hold (see [`Deletion`]).
    pub fn deletion(mut self, deletion: Deletion) -> Self {
        self.push(Action::Delete(deletion));
        self
    }

    /// Write `.status` of `obj` through the `/status` subresource (merge patch): fields given
    /// are replaced, fields not given are kept.
    pub fn status(self, obj: &impl Serialize, status: impl Serialize) -> Self {
        let key = match serde_json::to_value(obj).map_err(|e| InvalidObject::serde("object", e)).and_then(|v| object::key(&v)) {
            Ok(k) => k,
            Err(e) => return self.invalid(format!("status: {e}")),
        };
        self.status_key(key, status)
    }

    /// Write `.status` of the object with this key.
    pub fn status_key(mut self, key: ObjectKey, status: impl Serialize) -> Self {
        match serde_json::to_value(status) {
            Ok(status @ Value::Object(_)) => {
                self.push(Action::UpdateStatus { key, status });
                self
            }
            Ok(other) => self.invalid(format!("status of {key}: expected a JSON object, got {other}")),
            Err(e) => self.invalid(format!("status of {key}: does not serialize: {e}")),
        }
    }

    /// Write `.status` of `obj` only if every other action of this outcome succeeds: the write
    /// is kept after all of them, whatever builders come later (it and any other
    /// `status_after_writes` stay last, in the order given). The host runs an outcome's actions
    /// in order and stops at the first one that fails or conflicts, so a status that reports a
    /// create ("JobCreated", `lastScheduleTime`) is never written when the create failed; the next
    /// reconcile gets the failure as [`Request::last_error`](crate::Request::last_error) and can
    /// say so instead.
    ///
    /// ```
    /// use serde_json::json;
    /// use wasmloop_sdk::{Action, Outcome};
    /// let cron = json!({"apiVersion": "batch.tutorial.kubebuilder.io/v1", "kind": "CronJob",
    ///                   "metadata": {"name": "c", "namespace": "ns", "uid": "c-1"}});
    /// let job = json!({"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "c-1"}});
    /// let out = Outcome::new()
    ///     .status_after_writes(&cron, json!({"lastScheduleTime": "2026-01-01T00:00:00Z"}))
    ///     .create_owned(&cron, job);
    /// assert!(matches!(out.actions[0], Action::Create(_)));
    /// assert!(matches!(out.actions[1], Action::UpdateStatus { .. }), "the status comes last");
    /// ```
    pub fn status_after_writes(self, obj: &impl Serialize, status: impl Serialize) -> Self {
        let before = self.actions.len();
        let mut out = self.status(obj, status);
        if out.actions.len() > before {
            // The status just added (before the pinned ones) joins them at the very end.
            let at = out.actions.len() - out.last - 1;
            let action = out.actions.remove(at);
            out.actions.push(action);
            out.last += 1;
        }
        out
    }

    /// Record an Event about `obj`.
    pub fn event(self, obj: &impl Serialize, event_type: EventType, reason: impl Into<String>, message: impl Into<String>) -> Self {
        let key = match serde_json::to_value(obj).map_err(|e| InvalidObject::serde("object", e)).and_then(|v| object::key(&v)) {
            Ok(k) => k,
            Err(e) => return self.invalid(format!("event: {e}")),
        };
        self.event_key(key, event_type, reason, message)
    }

    /// Record an Event about the object with this key.
    pub fn event_key(mut self, regarding: ObjectKey, event_type: EventType, reason: impl Into<String>, message: impl Into<String>) -> Self {
        let reason = reason.into();
        if reason.is_empty() {
            return self.invalid("event: empty reason");
        }
        self.push(Action::Event(Event { regarding, event_type, reason, message: message.into() }));
        self
    }

    /// Reconcile this key again after `after`.
    pub fn requeue_after(mut self, after: Duration) -> Self {
        self.requeue_after = Some(after);
        self
    }

    /// Append an action built by hand (before the [`Outcome::status_after_writes`] ones, which
    /// stay last).
    pub fn push(&mut self, action: Action) {
        let at = self.actions.len() - self.last.min(self.actions.len());
        self.actions.insert(at, action);
    }

    /// Whether the reconcile changes nothing (no actions; a requeue may still be asked for).
    pub fn is_empty(&self) -> bool {
        self.actions.is_empty()
    }

    /// Objects to create.
    pub fn created(&self) -> impl Iterator<Item = &Value> {
        self.actions.iter().filter_map(|a| match a {
            Action::Create(v) => Some(v),
            _ => None,
        })
    }

    /// Objects to server-side apply.
    pub fn applied(&self) -> impl Iterator<Item = &Value> {
        self.actions.iter().filter_map(|a| match a {
            Action::Apply(v) => Some(v),
            _ => None,
        })
    }

    /// Keys of objects to delete.
    pub fn deleted(&self) -> impl Iterator<Item = &ObjectKey> {
        self.deletions().map(|d| &d.key)
    }

    /// Deletions, with their preconditions.
    pub fn deletions(&self) -> impl Iterator<Item = &Deletion> {
        self.actions.iter().filter_map(|a| match a {
            Action::Delete(d) => Some(d),
            _ => None,
        })
    }

    /// Status updates, as (key, new status).
    pub fn status_updates(&self) -> impl Iterator<Item = (&ObjectKey, &Value)> {
        self.actions.iter().filter_map(|a| match a {
            Action::UpdateStatus { key, status } => Some((key, status)),
            _ => None,
        })
    }

    /// Events to record.
    pub fn events(&self) -> impl Iterator<Item = &Event> {
        self.actions.iter().filter_map(|a| match a {
            Action::Event(e) => Some(e),
            _ => None,
        })
    }

    /// The first problem a builder recorded, if any.
    pub(crate) fn problem(&self) -> Option<&str> {
        self.invalid.as_deref()
    }

    pub(crate) fn with_problem(self, problem: String) -> Self {
        self.invalid(problem)
    }

    fn invalid(mut self, problem: impl Into<String>) -> Self {
        self.invalid.get_or_insert(problem.into());
        self
    }

    fn with_object(self, what: &str, obj: &impl Serialize, f: impl FnOnce(Value) -> Result<Action, InvalidObject>) -> Self {
        let action = serde_json::to_value(obj).map_err(|e| InvalidObject::serde("object", e)).and_then(f);
        match action {
            Ok(a) => {
                let mut s = self;
                s.push(a);
                s
            }
            Err(e) => self.invalid(format!("{what}: {e}")),
        }
    }
}

fn check_type(v: &Value) -> Result<(), InvalidObject> {
    for f in ["apiVersion", "kind"] {
        if v.get(f).and_then(Value::as_str).is_none_or(str::is_empty) {
            return Err(InvalidObject::NoField(f));
        }
    }
    Ok(())
}

/// The owner's namespace and a controller reference to it.
pub(crate) fn controller_ref(owner: &Value) -> Result<(Option<String>, Value), InvalidObject> {
    let key = object::key(owner).map_err(|e| InvalidObject::Owner(Box::new(e)))?;
    let Some(uid) = object::uid(owner).filter(|u| !u.is_empty()) else { return Err(InvalidObject::OwnerWithoutUid(key)) };
    let r = json!({
        "apiVersion": key.kind.api_version,
        "kind": key.kind.kind,
        "name": key.name,
        "uid": uid,
        "controller": true,
        "blockOwnerDeletion": true,
    });
    Ok((key.namespace, r))
}

/// `child` in `owner_ns` (if it names no namespace) with `owner_ref` as its controller; an error
/// if it is in another namespace or already has another controller.
pub(crate) fn set_owner(child: Value, owner_ns: Option<&str>, owner_ref: Value) -> Result<Value, InvalidObject> {
    // The rule is the model's (one definition for every SDK's fake, pinned by the conformance corpus).
    wasmloop_model::owner::adopt(child, owner_ns, &owner_ref).map_err(|e| match e {
        AdoptError::NotAnObject(what) => InvalidObject::NotAnObject(what),
        AdoptError::OwnerReferencesNotAList => InvalidObject::OwnerReferencesNotAList,
        AdoptError::OtherNamespace { child, owner } => InvalidObject::OtherNamespace { child, owner },
        AdoptError::OtherController(other) => InvalidObject::OtherController(other),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kinds;

    fn owner() -> Value {
        json!({"apiVersion": "apps/v1", "kind": "ReplicaSet",
               "metadata": {"name": "web", "namespace": "prod", "uid": "rs-uid"}})
    }

    #[test]
    fn create_owned_sets_controller_ref_and_namespace() {
        let out = Outcome::new()
            .create_owned(&owner(), json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "web-0"}}))
            .into_result()
            .unwrap();
        let pod = out.created().next().unwrap();
        assert_eq!(pod["metadata"]["namespace"], "prod");
        assert_eq!(
            pod["metadata"]["ownerReferences"],
            json!([{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "web", "uid": "rs-uid",
                    "controller": true, "blockOwnerDeletion": true}])
        );
    }

    #[test]
    fn create_owned_rejects_cross_namespace_and_second_controller() {
        let pod = json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "namespace": "other"}});
        let e = Outcome::new().create_owned(&owner(), pod).into_result().unwrap_err();
        assert!(!e.is_transient());
        assert!(e.message().contains("cannot be owned by an object in \"prod\""), "{e}");

        let pod = json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p",
            "ownerReferences": [{"apiVersion": "v1", "kind": "X", "name": "x", "uid": "x", "controller": true}]}});
        let e = Outcome::new().create_owned(&owner(), pod).into_result().unwrap_err();
        assert!(e.message().contains("already has a controller"), "{e}");
    }

    #[test]
    fn create_owned_needs_owner_uid() {
        let owner = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c"}});
        let e = Outcome::new()
            .create_owned(&owner, json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"}}))
            .into_result()
            .unwrap_err();
        assert_eq!(e.message(), "invalid action: create_owned: owner v1/ConfigMap/c has no metadata.uid");
    }

    #[test]
    fn unusable_objects_fail_the_reconcile_with_the_first_problem() {
        let e = Outcome::new()
            .create(&json!({"kind": "Pod", "metadata": {"name": "p"}}))
            .delete(&json!({"apiVersion": "v1", "kind": "Pod"}))
            .into_result()
            .unwrap_err();
        assert_eq!(e.message(), "invalid action: create: object has no apiVersion");
        let e = Outcome::new().create(&json!({"apiVersion": "v1", "kind": "Pod"})).into_result().unwrap_err();
        assert!(e.message().contains("neither metadata.name nor metadata.generateName"));
        let e = Outcome::new().status_key(kinds::POD.key(None, "p"), 3).into_result().unwrap_err();
        assert!(e.message().contains("expected a JSON object, got 3"));
    }

    #[test]
    fn statuses_after_writes_stay_last_in_the_order_given() {
        let pod = |n: &str| json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": n, "namespace": "prod"}});
        let mut out = Outcome::new()
            .status_after_writes(&owner(), json!({"step": 1}))
            .create(&pod("a"))
            .status_after_writes(&owner(), json!({"step": 2}))
            .delete(&pod("b"))
            .status(&owner(), json!({"plain": true}))
            .event(&owner(), EventType::Normal, "Seen", "x");
        out.push(Action::Delete(Deletion::new(kinds::POD.key(Some("prod"), "c"))));
        let kinds: Vec<String> = out
            .actions
            .iter()
            .map(|a| match a {
                Action::Create(_) => "create".to_string(),
                Action::Delete(d) => format!("delete {}", d.key.name),
                Action::UpdateStatus { status, .. } => format!("status {status}"),
                Action::Event(_) => "event".to_string(),
                other => format!("{other:?}"),
            })
            .collect();
        assert_eq!(
            kinds,
            ["create", "delete b", r#"status {"plain":true}"#, "event", "delete c", r#"status {"step":1}"#, r#"status {"step":2}"#]
        );
        // An unusable status adds nothing and fails the reconcile, as `status` does.
        let e = Outcome::new().status_after_writes(&json!({"kind": "X"}), json!({})).into_result().unwrap_err();
        assert!(e.message().contains("status:"), "{e}");
    }

    #[test]
    fn builders_record_keys_and_accessors_filter() {
        let pod = json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "namespace": "ns"}});
        let out = Outcome::new()
            .create(&json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"generateName": "p-"}}))
            .delete(&pod)
            .delete_key(kinds::POD.key(Some("ns"), "q"))
            .status(&owner(), json!({"replicas": 1}))
            .event(&pod, EventType::Warning, "Failed", "boom")
            .requeue_after(Duration::from_secs(5))
            .into_result()
            .unwrap();
        assert_eq!(out.created().count(), 1);
        let deleted: Vec<String> = out.deleted().map(|k| k.name.clone()).collect();
        assert_eq!(deleted, ["p", "q"]);
        let (key, status) = out.status_updates().next().unwrap();
        assert_eq!(key.to_string(), "apps/v1/ReplicaSet/prod/web");
        assert_eq!(status["replicas"], 1);
        let ev = out.events().next().unwrap();
        assert_eq!((ev.event_type, ev.reason.as_str()), (EventType::Warning, "Failed"));
        assert_eq!(out.requeue_after, Some(Duration::from_secs(5)));
        assert!(!out.is_empty());
        assert!(Outcome::new().requeue_after(Duration::from_secs(1)).is_empty());
    }
}
