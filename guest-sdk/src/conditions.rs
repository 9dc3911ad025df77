//! Status conditions (`status.conditions`) with the semantics of Go's
//! `k8s.io/apimachinery/pkg/api/meta` helpers: [`set`] (`SetStatusCondition`), [`find`]
//! (`FindStatusCondition`), [`remove`] (`RemoveStatusCondition`), [`is_true`]
//! (`IsStatusConditionTrue`) and friends, on a `Vec<Condition>` or, with the `*_in` forms, on a
//! status `serde_json::Value`.
//!
//! A condition's `lastTransitionTime` changes only when its status does; a new reason, message
//! or observed generation is written in place. The time is the wall clock ([`crate::time::now`])
//! unless the new condition carries one or the `*_at` forms are given `now`, for deterministic
//! tests.
//!
//! Write conditions back with [`status_patch`]: the status write is a JSON merge patch, which
//! replaces lists whole, so the patch carries the whole list (and other status fields are kept).
//!
//! ```
//! use wasmloop_sdk::conditions::{self, Condition};
//! use wasmloop_sdk::{kinds, Outcome};
//! use serde_json::json;
//!
//! let obj = json!({"apiVersion": "example.com/v1", "kind": "Foo",
//!                  "metadata": {"name": "f", "namespace": "ns", "generation": 3},
//!                  "status": {"phase": "Running"}});
//! let mut conds = conditions::read(&obj["status"]).unwrap();
//! let ready = Condition::new("Ready", true, "AllReplicasReady", "3/3 ready").observed_generation(3);
//! let mut out = Outcome::new();
//! if conditions::set_at(&mut conds, ready, 1_796_084_919) {
//!     out = out.status(&obj, conditions::status_patch(&conds));
//! }
//! let (_, patch) = out.status_updates().next().unwrap();
//! assert_eq!(patch["conditions"][0]["lastTransitionTime"], "2026-12-01T00:28:39Z");
//! assert!(conditions::is_true(&conds, "Ready"));
//! ```

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use crate::time;

/// A condition's status: `True`, `False` or `Unknown` (any other value reads as `Unknown`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum ConditionStatus {
    /// The condition holds.
    True,
    /// The condition does not hold.
    False,
    /// Not known (also what a missing or unrecognised status reads as).
    #[default]
    #[serde(other)]
    Unknown,
}

impl ConditionStatus {
    /// `"True"`, `"False"` or `"Unknown"`.
    pub fn as_str(self) -> &'static str {
        match self {
            ConditionStatus::True => "True",
            ConditionStatus::False => "False",
            ConditionStatus::Unknown => "Unknown",
        }
    }
}

impl From<bool> for ConditionStatus {
    fn from(b: bool) -> Self {
        if b { ConditionStatus::True } else { ConditionStatus::False }
    }
}

impl std::fmt::Display for ConditionStatus {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One status condition (`metav1.Condition`). Fields it does not name (a Deployment
/// condition's `lastUpdateTime`, a Pod condition's `lastProbeTime`) are kept in `extra`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct Condition {
    /// The condition's type, CamelCase, e.g. `Ready`.
    #[serde(rename = "type")]
    pub type_: String,
    /// True, False or Unknown.
    pub status: ConditionStatus,
    /// The `metadata.generation` the condition was set for.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    /// When the status last changed (RFC 3339); [`set`] fills it in.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub last_transition_time: Option<String>,
    /// CamelCase machine-readable reason for the last transition (the API server requires one
    /// in `metav1.Condition`).
    pub reason: String,
    /// Human-readable detail (may be empty).
    pub message: String,
    /// Fields not named above, kept as read.
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

impl Condition {
    /// A condition of type `type_` with this status (`true`/`false` or a [`ConditionStatus`]),
    /// reason and message; no transition time (set by [`set`]) and no observed generation.
    pub fn new(
        type_: impl Into<String>,
        status: impl Into<ConditionStatus>,
        reason: impl Into<String>,
        message: impl Into<String>,
    ) -> Self {
        Self { type_: type_.into(), status: status.into(), reason: reason.into(), message: message.into(), ..Self::default() }
    }

    /// With `observedGeneration` (usually the object's `metadata.generation`).
    pub fn observed_generation(mut self, generation: i64) -> Self {
        self.observed_generation = Some(generation);
        self
    }

    /// With this `lastTransitionTime` (RFC 3339), used by [`set`] when the status changes.
    pub fn last_transition_time(mut self, time: impl Into<String>) -> Self {
        self.last_transition_time = Some(time.into());
        self
    }

    /// The condition as JSON, as it is serialized.
    pub fn to_value(&self) -> Value {
        let mut m = Map::new();
        m.insert("type".into(), self.type_.clone().into());
        m.insert("status".into(), self.status.as_str().into());
        if let Some(g) = self.observed_generation {
            m.insert("observedGeneration".into(), g.into());
        }
        if let Some(t) = &self.last_transition_time {
            m.insert("lastTransitionTime".into(), t.clone().into());
        }
        m.insert("reason".into(), self.reason.clone().into());
        m.insert("message".into(), self.message.clone().into());
        for (k, v) in &self.extra {
            m.entry(k.clone()).or_insert_with(|| v.clone());
        }
        Value::Object(m)
    }
}

/// A status whose conditions cannot be read or written.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The status is neither an object nor absent (`null`).
    #[error("status is not a JSON object")]
    StatusNotAnObject,
    /// `status.conditions` is not a list of conditions.
    #[error("status.conditions does not parse: {0}")]
    Invalid(#[from] serde_json::Error),
}

impl From<Error> for crate::Error {
    /// Permanent: a malformed status does not get better by retrying.
    fn from(e: Error) -> Self {
        crate::Error::permanent(e)
    }
}

/// Set `new` in `conditions` (Go's `SetStatusCondition`), with the wall clock as "now".
/// Returns whether anything changed.
pub fn set(conditions: &mut Vec<Condition>, new: Condition) -> bool {
    set_at(conditions, new, time::now())
}

/// [`set`] with `now` (seconds since the epoch) as the current time:
///
/// - a condition of a new type is appended, its `lastTransitionTime` the one it carries or now;
/// - if the status differs, it is changed and `lastTransitionTime` becomes the new
///   condition's, or now;
/// - a different reason, message or observed generation is changed in place, keeping
///   `lastTransitionTime`.
pub fn set_at(conditions: &mut Vec<Condition>, mut new: Condition, now: i64) -> bool {
    let Some(existing) = conditions.iter_mut().find(|c| c.type_ == new.type_) else {
        if new.last_transition_time.as_deref().is_none_or(str::is_empty) {
            new.last_transition_time = Some(time::format(now));
        }
        conditions.push(new);
        return true;
    };
    let mut changed = false;
    if existing.status != new.status {
        existing.status = new.status;
        existing.last_transition_time = Some(new.last_transition_time.filter(|t| !t.is_empty()).unwrap_or_else(|| time::format(now)));
        changed = true;
    }
    if existing.reason != new.reason {
        existing.reason = new.reason;
        changed = true;
    }
    if existing.message != new.message {
        existing.message = new.message;
        changed = true;
    }
    if existing.observed_generation != new.observed_generation {
        existing.observed_generation = new.observed_generation;
        changed = true;
    }
    changed
}

/// The condition of type `type_` (Go's `FindStatusCondition`).
pub fn find<'a>(conditions: &'a [Condition], type_: &str) -> Option<&'a Condition> {
    conditions.iter().find(|c| c.type_ == type_)
}

/// Remove the condition of type `type_` (Go's `RemoveStatusCondition`); whether there was one.
pub fn remove(conditions: &mut Vec<Condition>, type_: &str) -> bool {
    let before = conditions.len();
    conditions.retain(|c| c.type_ != type_);
    conditions.len() != before
}

/// Whether the condition of type `type_` is present and `True` (Go's `IsStatusConditionTrue`).
pub fn is_true(conditions: &[Condition], type_: &str) -> bool {
    is_present_and_equal(conditions, type_, ConditionStatus::True)
}

/// Whether the condition of type `type_` is present and `False` (Go's `IsStatusConditionFalse`).
pub fn is_false(conditions: &[Condition], type_: &str) -> bool {
    is_present_and_equal(conditions, type_, ConditionStatus::False)
}

/// Whether the condition of type `type_` is present with this status (Go's
/// `IsStatusConditionPresentAndEqual`).
pub fn is_present_and_equal(conditions: &[Condition], type_: &str, status: ConditionStatus) -> bool {
    find(conditions, type_).is_some_and(|c| c.status == status)
}

/// The conditions of a status value (`obj["status"]`): none if the status or its `conditions`
/// is absent or `null`.
pub fn read(status: &Value) -> Result<Vec<Condition>, Error> {
    match status {
        Value::Null => Ok(Vec::new()),
        Value::Object(m) => match m.get("conditions") {
            None | Some(Value::Null) => Ok(Vec::new()),
            Some(list) => Ok(Vec::<Condition>::deserialize(list)?),
        },
        _ => Err(Error::StatusNotAnObject),
    }
}

/// Replace the conditions of a status value (an absent, `null` status becomes an object).
pub fn write(status: &mut Value, conditions: &[Condition]) -> Result<(), Error> {
    if status.is_null() {
        *status = Value::Object(Map::new());
    }
    let Value::Object(m) = status else { return Err(Error::StatusNotAnObject) };
    m.insert("conditions".into(), Value::Array(conditions.iter().map(Condition::to_value).collect()));
    Ok(())
}

/// [`set`] on a status value (`&mut obj["status"]`): whether anything changed.
pub fn set_in(status: &mut Value, new: Condition) -> Result<bool, Error> {
    set_in_at(status, new, time::now())
}

/// [`set_at`] on a status value.
pub fn set_in_at(status: &mut Value, new: Condition, now: i64) -> Result<bool, Error> {
    let mut conditions = read(status)?;
    let changed = set_at(&mut conditions, new, now);
    if changed {
        write(status, &conditions)?;
    }
    Ok(changed)
}

/// [`find`] on a status value (a copy of the condition).
pub fn find_in(status: &Value, type_: &str) -> Result<Option<Condition>, Error> {
    Ok(read(status)?.into_iter().find(|c| c.type_ == type_))
}

/// [`remove`] on a status value: whether there was one.
pub fn remove_in(status: &mut Value, type_: &str) -> Result<bool, Error> {
    let mut conditions = read(status)?;
    let removed = remove(&mut conditions, type_);
    if removed {
        write(status, &conditions)?;
    }
    Ok(removed)
}

/// The status merge patch that writes `conditions`: `{"conditions": [...]}`, for
/// [`Outcome::status`](crate::Outcome::status). A merge patch replaces a list whole, so this is
/// the whole list (an empty one clears it); other status fields are left as they are.
pub fn status_patch(conditions: &[Condition]) -> Value {
    let mut m = Map::new();
    m.insert("conditions".into(), Value::Array(conditions.iter().map(Condition::to_value).collect()));
    Value::Object(m)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    const T0: i64 = 1_796_084_919; // 2026-12-01T00:28:39Z
    const T1: i64 = T0 + 60;

    fn ready(status: bool, reason: &str) -> Condition {
        Condition::new("Ready", status, reason, "")
    }

    #[test]
    fn new_types_are_appended_with_now_or_their_own_time() {
        let mut c = Vec::new();
        assert!(set_at(&mut c, ready(true, "Up"), T0));
        assert_eq!(c[0].last_transition_time.as_deref(), Some("2026-12-01T00:28:39Z"));
        let given = Condition::new("Synced", false, "Pending", "waiting").last_transition_time("2020-01-01T00:00:00Z");
        assert!(set_at(&mut c, given, T0));
        assert_eq!(c[1].last_transition_time.as_deref(), Some("2020-01-01T00:00:00Z"));
        assert_eq!(c.len(), 2);
    }

    #[test]
    fn transition_time_changes_only_with_the_status() {
        let mut c = Vec::new();
        set_at(&mut c, ready(true, "Up"), T0);
        // Same status, new reason, message and generation: updated in place.
        let again = Condition::new("Ready", true, "StillUp", "3/3").observed_generation(2);
        assert!(set_at(&mut c, again.clone(), T1));
        assert_eq!((c[0].reason.as_str(), c[0].message.as_str(), c[0].observed_generation), ("StillUp", "3/3", Some(2)));
        assert_eq!(c[0].last_transition_time.as_deref(), Some("2026-12-01T00:28:39Z"));
        // Nothing new: unchanged.
        assert!(!set_at(&mut c, again, T1));
        // A given time is ignored while the status stays.
        assert!(!set_at(&mut c, Condition::new("Ready", true, "StillUp", "3/3").observed_generation(2).last_transition_time("x"), T1));
        // The status flips: now.
        assert!(set_at(&mut c, ready(false, "Down"), T1));
        assert_eq!(c[0].last_transition_time.as_deref(), Some("2026-12-01T00:29:39Z"));
        assert_eq!(c[0].status, ConditionStatus::False);
        assert_eq!(c[0].observed_generation, None, "observedGeneration follows the new condition, as in Go");
    }

    #[test]
    fn find_remove_and_predicates() {
        let mut c = Vec::new();
        set_at(&mut c, ready(true, "Up"), T0);
        set_at(&mut c, Condition::new("Degraded", ConditionStatus::Unknown, "Probing", ""), T0);
        assert!(is_true(&c, "Ready"));
        assert!(!is_false(&c, "Ready"));
        assert!(!is_true(&c, "Degraded") && !is_false(&c, "Degraded"));
        assert!(is_present_and_equal(&c, "Degraded", ConditionStatus::Unknown));
        assert!(!is_true(&c, "Missing"));
        assert_eq!(find(&c, "Degraded").map(|d| d.reason.as_str()), Some("Probing"));
        assert!(remove(&mut c, "Degraded"));
        assert!(!remove(&mut c, "Degraded"));
        assert!(find(&c, "Degraded").is_none());
    }

    #[test]
    fn serde_is_camel_case_and_keeps_unknown_fields() {
        let raw = json!({"type": "Available", "status": "True", "lastUpdateTime": "2024-05-01T10:00:00Z",
                         "lastTransitionTime": "2024-05-01T10:00:00Z", "reason": "MinimumReplicasAvailable",
                         "message": "ok", "observedGeneration": 4});
        let c: Condition = serde_json::from_value(raw.clone()).unwrap();
        assert_eq!(c.observed_generation, Some(4));
        assert_eq!(c.extra["lastUpdateTime"], "2024-05-01T10:00:00Z");
        assert_eq!(c.to_value(), raw);
        assert_eq!(serde_json::to_value(&c).unwrap(), raw);
        // Lenient reads: a strange status is Unknown, missing fields default.
        let odd: Condition = serde_json::from_value(json!({"type": "X", "status": "maybe"})).unwrap();
        assert_eq!(odd.status, ConditionStatus::Unknown);
        assert_eq!(serde_json::to_value(&odd).unwrap(), json!({"type": "X", "status": "Unknown", "reason": "", "message": ""}));
    }

    #[test]
    fn status_values_are_read_and_written() {
        let mut status = Value::Null;
        assert!(read(&status).unwrap().is_empty());
        assert!(set_in_at(&mut status, ready(true, "Up"), T0).unwrap());
        assert!(!set_in_at(&mut status, ready(true, "Up"), T1).unwrap());
        assert_eq!(status["conditions"][0]["lastTransitionTime"], "2026-12-01T00:28:39Z");
        assert_eq!(find_in(&status, "Ready").unwrap().unwrap().reason, "Up");

        let mut status = json!({"replicas": 3, "conditions": [{"type": "Old", "status": "True", "reason": "R", "message": ""}]});
        assert!(set_in_at(&mut status, ready(false, "Down"), T0).unwrap());
        assert_eq!(status["replicas"], 3);
        assert_eq!(status["conditions"].as_array().unwrap().len(), 2);
        assert!(remove_in(&mut status, "Old").unwrap());
        assert!(!remove_in(&mut status, "Old").unwrap());
        assert_eq!(status["conditions"][0]["type"], "Ready");
        assert!(matches!(read(&json!("x")), Err(Error::StatusNotAnObject)));
        assert!(matches!(set_in(&mut json!([1]), ready(true, "Up")), Err(Error::StatusNotAnObject)));
        let e = read(&json!({"conditions": {"type": "Ready"}})).unwrap_err();
        assert!(e.to_string().starts_with("status.conditions does not parse"), "{e}");
        let e: crate::Error = e.into();
        assert!(!e.is_transient());
    }

    /// A reconciler keeping `Ready` = `spec.ready` on a custom resource, at the time in `NOW`.
    mod with_fake_cache {
        use std::sync::atomic::{AtomicI64, Ordering};

        use super::*;
        use crate::testing::FakeCache;
        use crate::{KindRef, Metadata, ObjectKey, Outcome, Reconciler, Request, cache};

        const FOO: KindRef = KindRef::from_static("example.com/v1", "Foo");
        static NOW: AtomicI64 = AtomicI64::new(T0);

        struct Ready;
        impl Reconciler for Ready {
            fn metadata() -> Metadata {
                Metadata::new("ready", "0").reconciles(FOO)
            }
            fn reconcile(req: Request) -> Result<Outcome, crate::Error> {
                let Some(foo) = cache::get_key::<Value>(&req.key)? else { return Ok(Outcome::new()) };
                let mut conds = read(&foo["status"])?;
                let ready = foo["spec"]["ready"].as_bool().unwrap_or(false);
                let message = foo["spec"]["message"].as_str().unwrap_or_default();
                let generation = foo["metadata"]["generation"].as_i64().unwrap_or(0);
                let c = Condition::new("Ready", ready, if ready { "Up" } else { "Down" }, message).observed_generation(generation);
                let mut out = Outcome::new();
                if set_at(&mut conds, c, NOW.load(Ordering::Relaxed)) {
                    out = out.status(&foo, status_patch(&conds));
                }
                Ok(out)
            }
        }

        fn foo(ready: bool, message: &str, generation: i64) -> Value {
            json!({"apiVersion": "example.com/v1", "kind": "Foo",
                   "metadata": {"name": "f", "namespace": "ns", "generation": generation},
                   "spec": {"ready": ready, "message": message}})
        }

        fn set_spec(fake: &FakeCache, key: &ObjectKey, spec: Value) {
            let mut obj = fake.get(key).unwrap();
            obj["spec"] = spec["spec"].clone();
            obj["metadata"]["generation"] = spec["metadata"]["generation"].clone();
            fake.add(obj);
        }

        #[test]
        fn conditions_converge_and_keep_their_transition_time() {
            let key = FOO.key(Some("ns"), "f");
            let fake = FakeCache::for_reconciler::<Ready>().with(json!({"apiVersion": "example.com/v1", "kind": "Foo",
                "metadata": {"name": "f", "namespace": "ns", "generation": 1},
                "spec": {"ready": false, "message": "starting"},
                "status": {"phase": "New", "conditions": [{"type": "Other", "status": "True", "reason": "Kept", "message": ""}]}}));
            NOW.store(T0, Ordering::Relaxed);
            assert_eq!(fake.converge::<Ready>(&key, 3).unwrap().len(), 1);
            let status = fake.get(&key).unwrap()["status"].clone();
            assert_eq!(status["phase"], "New", "the merge patch keeps other status fields");
            assert_eq!(find_in(&status, "Other").unwrap().unwrap().reason, "Kept");
            let ready = find_in(&status, "Ready").unwrap().unwrap();
            assert_eq!((ready.status, ready.last_transition_time.as_deref()), (ConditionStatus::False, Some("2026-12-01T00:28:39Z")));

            // A new message and generation: written, same transition time.
            NOW.store(T1, Ordering::Relaxed);
            set_spec(&fake, &key, foo(false, "pulling images", 2));
            assert_eq!(fake.converge::<Ready>(&key, 3).unwrap().len(), 1);
            let ready = find_in(&fake.get(&key).unwrap()["status"], "Ready").unwrap().unwrap();
            assert_eq!((ready.message.as_str(), ready.observed_generation), ("pulling images", Some(2)));
            assert_eq!(ready.last_transition_time.as_deref(), Some("2026-12-01T00:28:39Z"));

            // The status flips: a new transition time.
            set_spec(&fake, &key, foo(true, "", 3));
            assert_eq!(fake.converge::<Ready>(&key, 3).unwrap().len(), 1);
            let ready = find_in(&fake.get(&key).unwrap()["status"], "Ready").unwrap().unwrap();
            assert_eq!((ready.status, ready.last_transition_time.as_deref()), (ConditionStatus::True, Some("2026-12-01T00:29:39Z")));
            assert!(fake.reconcile::<Ready>(&key).unwrap().is_empty());
        }
    }

    #[test]
    fn the_status_patch_carries_the_whole_list() {
        let mut c = Vec::new();
        set_at(&mut c, ready(true, "Up"), T0);
        set_at(&mut c, Condition::new("Synced", true, "Done", "").observed_generation(7), T0);
        let p = status_patch(&c);
        assert_eq!(p.as_object().unwrap().len(), 1);
        assert_eq!(p["conditions"].as_array().unwrap().len(), 2);
        assert_eq!(p["conditions"][1]["observedGeneration"], 7);
        assert_eq!(status_patch(&[]), json!({"conditions": []}));
    }
}
