//! Metacontroller's core as a helper: declare the children one parent should have, and get the
//! actions that make it so.
//!
//! For each kind given, [`Children::plan`] compares the desired objects with the parent's
//! current children of that kind (those it controls: index `owner` with the parent's uid) and
//! returns
//!
//! - a server-side **apply** of each desired child, with the parent as its controller owner and
//!   the parent's namespace if it names none, unless the cached child already holds everything
//!   desired (so a converged parent gets no writes);
//! - a **delete** of each child the parent controls that is no longer desired, guarded by the
//!   child's uid (a child deleted and re-created meanwhile is not touched);
//! - a [`Conflict`] for each desired child whose name is taken by an object the parent does not
//!   control: that object is **never touched** (adopt it explicitly with
//!   [`Outcome::adopt`](crate::Outcome::adopt) if that is what you want).
//!
//! Applies come before deletes. Children being deleted are neither applied nor deleted again
//! (a desired one is re-created once it is gone: its deletion is an event on the parent). A
//! parent being deleted gets an empty plan: garbage collection removes its children. Kinds not
//! given are not looked at, so give a kind with no desired objects to delete all its children.
//!
//! ```
//! use wasmloop_sdk::children::Children;
//! use wasmloop_sdk::testing::FakeCache;
//! use wasmloop_sdk::{kinds, KindRef, Metadata};
//! use serde_json::json;
//!
//! const FOO: KindRef = KindRef::from_static("example.com/v1", "Foo");
//! let fake = FakeCache::new(Metadata::new("foo", "0").reconciles(FOO).owns(kinds::CONFIG_MAP));
//! let foo = json!({"apiVersion": "example.com/v1", "kind": "Foo",
//!                  "metadata": {"name": "web", "namespace": "shop", "uid": "foo-1"}});
//! let cm = json!({"metadata": {"name": "web-config"}, "data": {"mode": "prod"}});
//! let plan = fake.enter(|| Children::of(&foo).kind(kinds::CONFIG_MAP, [cm]).plan()).unwrap();
//! let applied = plan.outcome.applied().next().unwrap();
//! assert_eq!(applied["metadata"]["namespace"], "shop");
//! assert_eq!(applied["metadata"]["ownerReferences"][0]["uid"], "foo-1");
//! assert!(plan.conflicts.is_empty());
//! ```
//!
//! The apply is skipped when the cached child contains the desired object (fields the API
//! server or others added are ignored). To notice fields *removed* from the desired object
//! (which server-side apply then removes), each child carries [`DESIRED_HASH_ANNOTATION`], a
//! hash of its desired form: a different desired object is always applied. Values the API
//! server normalises (a quantity `0.5` stored as `500m`) make the check fail and the child be
//! applied on every reconcile; server-side apply leaves it unchanged, so this costs a request
//! but no event or loop. Desired children should not carry `status` or server-set metadata
//! (`uid`, `resourceVersion`, ...): those are dropped.
//!
//! The child kinds must be readable (declare them with [`Metadata::owns`](crate::Metadata::owns)).
//! A watch selector on a child kind hides the children it does not match, so desired children
//! must match it (or a same-named foreign object would not be seen).

use crate::invalid::InvalidObject;
use std::fmt;

use serde::Serialize;
use serde_json::{Map, Value};

use crate::action::{Deletion, Event, EventType};
use crate::cache;
use crate::error::Error;
use crate::object;
use crate::outcome::{self, Outcome};
use crate::types::{KindRef, ObjectKey};

/// The annotation holding a hash of a child's desired form (see the [module docs](self)).
pub const DESIRED_HASH_ANNOTATION: &str = "wasmloop.dev/desired-hash";

/// The reason of the Warning Events [`Plan::with_warnings`] records.
pub const CONFLICT_REASON: &str = "ChildConflict";

/// Metadata fields the API server sets, dropped from desired children.
const SERVER_SET_METADATA: [&str; 7] =
    ["uid", "resourceVersion", "generation", "creationTimestamp", "deletionTimestamp", "deletionGracePeriodSeconds", "managedFields"];

/// The desired children of one parent, by kind; see the [module docs](self).
#[derive(Clone, Debug)]
#[must_use = "call .plan() to get the actions"]
pub struct Children {
    parent: Result<Parent, InvalidObject>,
    kinds: Vec<(KindRef, Vec<Result<Value, InvalidObject>>)>,
}

#[derive(Clone, Debug)]
struct Parent {
    key: ObjectKey,
    uid: String,
    deleting: bool,
    owner_ref: Value,
}

/// What to do: the actions, and the desired children that could not be made.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Plan {
    /// Applies, then deletes (empty when the children are as desired).
    pub outcome: Outcome,
    /// Desired children whose name is taken by an object the parent does not control.
    pub conflicts: Vec<Conflict>,
}

/// A desired child whose name is taken by an object the parent does not control; the object is
/// left alone.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Conflict {
    /// The parent.
    pub parent: ObjectKey,
    /// The existing object.
    pub child: ObjectKey,
    /// The uid of its controller, if it has one (none: an orphan).
    pub controller_uid: Option<String>,
}

impl Children {
    /// The children of `parent` (needs `apiVersion`, `kind`, `metadata.name` and
    /// `metadata.uid`: an object read from the cache).
    pub fn of(parent: &impl Serialize) -> Self {
        let parent = serde_json::to_value(parent).map_err(|e| InvalidObject::serde("parent", e)).and_then(|p| {
            let (_, owner_ref) = outcome::controller_ref(&p).map_err(|e| InvalidObject::Parent(Box::new(e)))?;
            let key = object::key(&p)?;
            let uid = object::uid(&p).unwrap_or_default().to_owned();
            Ok(Parent { key, uid, deleting: object::is_deleting(&p), owner_ref })
        });
        Self { parent, kinds: Vec::new() }
    }

    /// The desired children of `kind`: objects with a `metadata.name` (and `apiVersion` and
    /// `kind` matching `kind`, filled in if absent). An empty list deletes every child of the
    /// kind; giving a kind again adds to its list.
    pub fn kind<T: Serialize>(mut self, kind: KindRef, desired: impl IntoIterator<Item = T>) -> Self {
        let desired = desired.into_iter().map(|d| serde_json::to_value(d).map_err(|e| InvalidObject::serde("child", e)));
        match self.kinds.iter_mut().find(|(k, _)| *k == kind) {
            Some((_, list)) => list.extend(desired),
            None => self.kinds.push((kind, desired.collect())),
        }
        self
    }

    /// The actions that make the children as desired, read against the cache.
    ///
    /// Fails with a permanent error if the parent or a desired child is unusable (no name, a
    /// different kind, another namespace, another controller, a name given twice), and with a
    /// transient one if the cache cannot be read.
    pub fn plan(self) -> Result<Plan, Error> {
        let parent = self.parent.map_err(|e| Error::permanent(format!("children: {e}")))?;
        let mut plan = Plan::default();
        if parent.deleting {
            return Ok(plan);
        }
        let (mut applies, mut deletes) = (Vec::new(), Vec::new());
        // A parent has a handful of children of a kind: lists searched linearly, not maps, keep
        // every plugin using this some KB smaller. Deletes follow the cache's order.
        for (kind, desired) in self.kinds {
            let mut wanted: Vec<(ObjectKey, Value)> = Vec::with_capacity(desired.len());
            for (i, child) in desired.into_iter().enumerate() {
                let invalid = |e: InvalidObject| Error::permanent(format!("children: {kind} #{i}: {e}"));
                let child = child.and_then(|c| prepare(&parent, &kind, c)).map_err(invalid)?;
                let key = object::key(&child).map_err(invalid)?;
                if wanted.iter().any(|(k, _)| *k == key) {
                    return Err(Error::permanent(format!("children: {key} is desired twice")));
                }
                wanted.push((key, child));
            }
            let owned: Vec<Value> = cache::owned_by(&kind, &parent.uid).map_err(|e| Error::from(e).context(format!("children: {kind}")))?;
            let mut owned: Vec<(ObjectKey, Value)> = owned.into_iter().filter_map(|o| Some((object::key(&o).ok()?, o))).collect();
            for (key, child) in wanted {
                match owned.iter().position(|(k, _)| *k == key).map(|i| owned.remove(i).1) {
                    Some(current) if object::is_deleting(&current) || contains(&current, &child) => {}
                    Some(_) => applies.push(child),
                    None => match cache::get::<Value>(&kind, key.ns(), &key.name).map_err(|e| Error::from(e).context("children"))? {
                        Some(other) => plan.conflicts.push(Conflict {
                            parent: parent.key.clone(),
                            controller_uid: object::controller_uid(&other).map(str::to_owned),
                            child: key,
                        }),
                        None => applies.push(child),
                    },
                }
            }
            // What is left is owned and not desired.
            for (key, current) in owned {
                if !object::is_deleting(&current) {
                    deletes.push(Deletion::new(key).if_uid(object::uid(&current).unwrap_or_default()));
                }
            }
        }
        let mut out = applies.iter().fold(Outcome::new(), Outcome::apply);
        for d in deletes {
            out = out.deletion(d);
        }
        plan.outcome = out;
        Ok(plan)
    }
}

impl Plan {
    /// The outcome with a Warning Event about the parent for each conflict.
    pub fn with_warnings(self) -> Outcome {
        let mut out = self.outcome;
        for c in &self.conflicts {
            out.push(crate::Action::Event(c.warning()));
        }
        out
    }
}

impl Conflict {
    /// A Warning Event about the parent naming the conflict (reason [`CONFLICT_REASON`]).
    pub fn warning(&self) -> Event {
        Event { regarding: self.parent.clone(), event_type: EventType::Warning, reason: CONFLICT_REASON.into(), message: self.to_string() }
    }
}

impl fmt::Display for Conflict {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} {:?} exists and is not controlled by {} {:?}",
            self.child.kind.kind, self.child.name, self.parent.kind.kind, self.parent.name
        )?;
        match &self.controller_uid {
            Some(uid) => write!(f, " (its controller has uid {uid})"),
            None => f.write_str(" (it has no controller)"),
        }
    }
}

/// The child as applied: kind checked or filled in, server-set fields dropped, in the parent's
/// namespace, controlled by the parent, with the hash of this desired form.
fn prepare(parent: &Parent, kind: &KindRef, child: Value) -> Result<Value, InvalidObject> {
    let Value::Object(mut obj) = child else { return Err(InvalidObject::NotAnObject("child")) };
    for (field, want) in [("apiVersion", &kind.api_version), ("kind", &kind.kind)] {
        match obj.get(field) {
            None | Some(Value::Null) => {
                obj.insert(field.into(), want.to_string().into());
            }
            Some(Value::String(s)) if s == want.as_ref() => {}
            Some(other) => return Err(InvalidObject::OtherKind { field, found: other.to_string(), want: want.to_string() }),
        }
    }
    obj.remove("status");
    let meta = obj.entry("metadata").or_insert_with(|| Value::Object(Map::new()));
    let Value::Object(meta) = meta else { return Err(InvalidObject::NotAnObject("metadata")) };
    if meta.get("name").and_then(Value::as_str).is_none_or(str::is_empty) {
        return Err(InvalidObject::ChildWithoutName);
    }
    for f in SERVER_SET_METADATA {
        meta.remove(f);
    }
    if let Some(Value::Object(a)) = meta.get_mut("annotations") {
        a.remove(DESIRED_HASH_ANNOTATION);
        if a.is_empty() {
            meta.remove("annotations");
        }
    }
    let mut child = outcome::set_owner(Value::Object(obj), parent.key.ns(), parent.owner_ref.clone())?;
    let hash = format!("{:016x}", fnv1a(&child));
    let meta = child.get_mut("metadata").and_then(Value::as_object_mut).ok_or(InvalidObject::NotAnObject("metadata"))?;
    let annotations = meta.entry("annotations").or_insert_with(|| Value::Object(Map::new()));
    let Value::Object(annotations) = annotations else { return Err(InvalidObject::NotAnObject("metadata.annotations")) };
    annotations.insert(DESIRED_HASH_ANNOTATION.into(), hash.into());
    Ok(child)
}

/// Whether `current` holds everything in `desired`: objects member by member (a `null` member
/// matching an absent one), lists element by element with the same length, other values equal.
fn contains(current: &Value, desired: &Value) -> bool {
    match (current, desired) {
        (Value::Object(c), Value::Object(d)) => d.iter().all(|(k, dv)| match c.get(k) {
            Some(cv) => contains(cv, dv),
            None => dv.is_null(),
        }),
        (Value::Array(c), Value::Array(d)) => c.len() == d.len() && c.iter().zip(d).all(|(cv, dv)| contains(cv, dv)),
        (c, d) => c == d,
    }
}

/// 64-bit FNV-1a of the value's JSON text (object members in the map's order: sorted, as
/// `serde_json` keeps them without its `preserve_order` feature).
fn fnv1a(v: &Value) -> u64 {
    struct Fnv(u64);
    impl std::io::Write for Fnv {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            for b in buf {
                self.0 = (self.0 ^ u64::from(*b)).wrapping_mul(0x0100_0000_01b3);
            }
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    let mut h = Fnv(0xcbf2_9ce4_8422_2325);
    // Writing a Value cannot fail, and Fnv never does.
    let _ = serde_json::to_writer(&mut h, v);
    h.0
}

#[cfg(test)]
mod tests;
