//! Unit-test reconcilers natively: a fake cache built from YAML or JSON, no wasm, no cluster.
//!
//! ```
//! use wasmloop_sdk::testing::FakeCache;
//! use wasmloop_sdk::{cache, kinds, Metadata, Outcome, Reconciler, Request, Error};
//! use serde_json::Value;
//!
//! struct CountPods;
//! impl Reconciler for CountPods {
//!     fn metadata() -> Metadata {
//!         Metadata::new("count", "0").reconciles(kinds::NAMESPACE).watches(kinds::POD, wasmloop_sdk::Mapping::Namespace)
//!     }
//!     fn reconcile(req: Request) -> Result<Outcome, Error> {
//!         let pods: Vec<Value> = cache::by_index(&kinds::POD, "namespace", &req.key.name)?;
//!         wasmloop_sdk::info!("{} pods", pods.len());
//!         Ok(Outcome::new())
//!     }
//! }
//!
//! let fake = FakeCache::for_reconciler::<CountPods>().with_yaml(r#"
//! apiVersion: v1
//! kind: Namespace
//! metadata: {name: team-a}
//! ---
//! apiVersion: v1
//! kind: Pod
//! metadata: {name: p, namespace: team-a}
//! "#);
//! let out = fake.reconcile::<CountPods>(&kinds::NAMESPACE.key(None, "team-a")).unwrap();
//! assert!(out.is_empty());
//! assert_eq!(fake.logs()[0].1, "1 pods");
//! ```
//!
//! The fake answers reads like the host: only kinds the metadata declares are readable, watch
//! and reconcile selectors limit what is cached, and `by_index` knows `namespace`, `owner`
//! (the controller owner's UID) and the declared `labels.<key>` / dotted-path indexes.
//! [`FakeCache::execute`] and [`FakeCache::converge`] play the host's part of carrying out the
//! actions, so tests can check that a reconciler converges and then writes nothing.
//!
//! Writes can be made to fail as the API server would refuse them ([`FakeCache::fail_when`],
//! [`FakeCache::fail_creates`]): the fake then stops the outcome at that action, as the host
//! does, and the next reconcile of the key carries the failure as `last_error`.
//!
//! The fake has a clock: [`crate::time`] reads it while the fake is installed. It starts at the
//! system time when the fake is made and stands still until a test moves it
//! ([`FakeCache::set_time`], [`FakeCache::advance`]), or until [`FakeCache::converge`] ends on
//! an outcome that asks for a requeue: then it moves to that requeue, when the host would
//! reconcile the key again. [`FakeCache::run_until`] plays a schedule out to a given time.

use std::cell::{Cell, RefCell};
use std::collections::BTreeMap;
use std::rc::Rc;
use std::time::Duration;

use serde::Serialize;
use serde_json::{Map, Value};
use wasmloop_model::index_path::{IndexPath, PathError};
use wasmloop_model::mapping;
use wasmloop_model::patch::{self, PatchError};
use wasmloop_model::{Naming, Target, TargetName};

use crate::action::{Action, Deletion, Event};
use crate::cache::{self, NAMESPACE_INDEX, OWNER_INDEX};
use crate::log::Level;
use crate::meta::Meta;
use crate::native::{self, Backend};
use crate::object;
use crate::outcome::Outcome;
use crate::types::{KindRef, Mapping, Metadata, ObjectKey, Request};
use crate::{Error, Reconciler};

type Objects = BTreeMap<KindRef, BTreeMap<(Option<String>, String), Value>>;

/// A fake of the host's cache (and of its action executor) for native tests.
///
/// Methods that load objects panic with a clear message on bad input: they are test fixtures.
pub struct FakeCache {
    inner: Rc<Inner>,
}

struct Inner {
    metadata: Metadata,
    objects: RefCell<Objects>,
    logs: RefCell<Vec<(Level, String)>>,
    events: RefCell<Vec<Event>>,
    next_uid: Cell<u64>,
    /// Now, in microseconds since the epoch: what [`crate::time`] reads.
    clock: Cell<i64>,
    /// Writes made to fail: each says why an action fails, or `None`.
    failures: RefCell<Vec<Failure>>,
    /// The key last reconciled, whose `last_error` a failing action sets.
    current: RefCell<Option<ObjectKey>>,
    /// Why each key's previous reconcile failed, while it keeps failing (the host's `last_error`).
    last_errors: RefCell<BTreeMap<ObjectKey, String>>,
}

/// Whether an action fails, and why (the API server's message).
type Failure = Box<dyn Fn(&Action) -> Option<String>>;

impl FakeCache {
    /// A fake granting what `metadata` declares.
    pub fn new(metadata: Metadata) -> Self {
        metadata.reconciled_kind();
        for s in [&metadata.selector, &metadata.annotation_selector].into_iter().flatten() {
            selector::parse(s).unwrap_or_else(|e| panic!("reconciled kind: invalid selector {s:?}: {e}"));
        }
        for i in &metadata.indexes {
            if let Err(e) = check_index_path(&i.path) {
                panic!("index {:?} on {}: invalid path {:?}: {e}", i.name, i.kind, i.path);
            }
        }
        for w in &metadata.watches {
            for s in [&w.selector, &w.annotation_selector].into_iter().flatten() {
                selector::parse(s).unwrap_or_else(|e| panic!("watch of {}: invalid selector {s:?}: {e}", w.kind));
            }
            // As the host refuses at load: an index mapping names an index of the reconciled kind.
            if let Mapping::Index { index, value } = &w.mapping {
                let primary = metadata.reconciled_kind();
                assert!(
                    metadata.indexes.iter().any(|i| &i.kind == primary && &i.name == index),
                    "watch of {}: the index mapping names index {index:?}, which is not declared on {primary}",
                    w.kind
                );
                value.check().unwrap_or_else(|e| panic!("watch of {}: the index mapping's field: {e}", w.kind));
            }
        }
        // As the host refuses at load: fields of kinds the plugin does not read, bad paths.
        let readable = metadata.readable_kinds();
        for (i, f) in metadata.fields.iter().enumerate() {
            assert!(readable.contains(&&f.kind), "fields[{i}]: {} is not a kind the plugin reconciles, watches or indexes", f.kind);
            if let Err(e) = check_index_path(&f.path) {
                panic!("fields[{i}] on {}: invalid path {:?}: {e}", f.kind, f.path);
            }
            assert!(
                !IndexPath::parse(&f.path).is_ok_and(|p| p.is_filtered()),
                "fields[{i}] on {}: {:?}: a metadata field reads one value: filters ([field=value]) are for indexes",
                f.kind,
                f.path
            );
        }
        Self {
            inner: Rc::new(Inner {
                metadata,
                objects: RefCell::default(),
                logs: RefCell::default(),
                events: RefCell::default(),
                next_uid: Cell::new(1),
                clock: Cell::new(crate::time::system_micros()),
                failures: RefCell::default(),
                current: RefCell::default(),
                last_errors: RefCell::default(),
            }),
        }
    }

    /// A fake granting what reconciler `R` declares.
    pub fn for_reconciler<R: Reconciler>() -> Self {
        Self::new(R::metadata())
    }

    /// The fake with its clock at `rfc3339` (a timestamp as the API server writes them, with or
    /// without a fraction).
    pub fn with_time(self, rfc3339: &str) -> Self {
        self.set_time(rfc3339);
        self
    }

    /// Set the clock [`crate::time`] reads to `rfc3339`. Panics on a malformed timestamp.
    pub fn set_time(&self, rfc3339: &str) -> &Self {
        let micros = crate::time::parse_micros(rfc3339).unwrap_or_else(|| panic!("FakeCache: not an RFC 3339 timestamp: {rfc3339:?}"));
        self.inner.clock.set(micros);
        self
    }

    /// Move the clock forward by `by`.
    pub fn advance(&self, by: Duration) -> &Self {
        let by = i64::try_from(by.as_micros()).unwrap_or(i64::MAX);
        self.inner.clock.set(self.inner.clock.get().saturating_add(by));
        self
    }

    /// Now, as the fake's clock says, in microseconds since the epoch.
    pub fn now_micros(&self) -> i64 {
        self.inner.clock.get()
    }

    /// Now, as the fake's clock says, as a `metav1.Time` (whole seconds).
    pub fn now_rfc3339(&self) -> String {
        crate::time::format(self.inner.clock.get().div_euclid(1_000_000))
    }

    /// Make the actions `fails` says why about fail, as the API server refusing them would
    /// (a 403, a 422, a quota): [`Self::execute`] stops the outcome at the first such action (the
    /// ones before it are done, the rest are not), and the next reconcile of the key carries
    /// `<verb> <object>: <why>` as [`Request::last_error`], as the host's does.
    pub fn fail_when(&self, fails: impl Fn(&Action) -> Option<String> + 'static) -> &Self {
        self.inner.failures.borrow_mut().push(Box::new(fails));
        self
    }

    /// Make every create of a `kind` object fail with `why` (see [`Self::fail_when`]).
    pub fn fail_creates(&self, kind: &KindRef, why: &str) -> &Self {
        let (kind, why) = (kind.clone(), why.to_owned());
        self.fail_when(move |a| match a {
            Action::Create(obj) if object::key(obj).is_ok_and(|k| k.kind == kind) => Some(why.clone()),
            _ => None,
        })
    }

    /// Let every write succeed again.
    pub fn clear_failures(&self) -> &Self {
        self.inner.failures.borrow_mut().clear();
        self
    }

    /// Why the previous reconcile of `key` failed (its error, or a failed action), while it
    /// keeps failing: what the next request carries.
    pub fn last_error(&self, key: &ObjectKey) -> Option<String> {
        self.inner.last_errors.borrow().get(key).cloned()
    }

    /// Add the objects in a YAML stream (`---`-separated documents; a `kind: List` adds its
    /// items).
    pub fn with_yaml(self, yaml: &str) -> Self {
        self.add_yaml(yaml);
        self
    }

    /// Add the objects in a JSON document (an object, an array, or a `kind: List`).
    pub fn with_json(self, json: &str) -> Self {
        self.add_json(json);
        self
    }

    /// Add one object (any serializable object, e.g. a `serde_json::json!` value or a `k8s` type).
    pub fn with(self, obj: impl Serialize) -> Self {
        self.add(obj);
        self
    }

    /// Add the objects in every `*.yaml`, `*.yml` and `*.json` file of a directory (in name
    /// order; not recursive), e.g. the fixtures also given to `wasmloop reconcile --objects`.
    pub fn with_dir(self, dir: impl AsRef<std::path::Path>) -> Self {
        let dir = dir.as_ref();
        let entries = std::fs::read_dir(dir).unwrap_or_else(|e| panic!("FakeCache: reading {}: {e}", dir.display()));
        let mut files: Vec<_> = entries.filter_map(|e| e.ok().map(|e| e.path())).collect();
        files.sort();
        for f in files {
            let ext = f.extension().and_then(|e| e.to_str()).unwrap_or_default();
            if !["yaml", "yml", "json"].contains(&ext) {
                continue;
            }
            let text = std::fs::read_to_string(&f).unwrap_or_else(|e| panic!("FakeCache: reading {}: {e}", f.display()));
            let docs: Vec<Value> = if ext == "json" {
                vec![serde_json::from_str(&text).unwrap_or_else(|e| panic!("FakeCache: {}: {e}", f.display()))]
            } else {
                serde_saphyr::from_multiple(&text).unwrap_or_else(|e| panic!("FakeCache: {}: {e}", f.display()))
            };
            docs.into_iter().for_each(|d| self.add_document(d));
        }
        self
    }

    /// Add the objects in a YAML stream.
    pub fn add_yaml(&self, yaml: &str) -> &Self {
        let docs: Vec<Value> = serde_saphyr::from_multiple(yaml).unwrap_or_else(|e| panic!("FakeCache: invalid YAML: {e}"));
        for doc in docs {
            self.add_document(doc);
        }
        self
    }

    /// Add the objects in a JSON document.
    pub fn add_json(&self, json: &str) -> &Self {
        let doc: Value = serde_json::from_str(json).unwrap_or_else(|e| panic!("FakeCache: invalid JSON: {e}"));
        self.add_document(doc);
        self
    }

    /// Add (or replace) one object. Objects without `metadata.uid` get a fresh one;
    /// `managedFields` is dropped, as the host does.
    pub fn add(&self, obj: impl Serialize) -> &Self {
        let v = serde_json::to_value(obj).unwrap_or_else(|e| panic!("FakeCache: object does not serialize: {e}"));
        self.insert(v);
        self
    }

    /// Remove an object (as if it was deleted), returning it.
    pub fn remove(&self, key: &ObjectKey) -> Option<Value> {
        let mut objects = self.inner.objects.borrow_mut();
        objects.get_mut(&key.kind)?.remove(&(key.namespace.clone(), key.name.clone()))
    }

    /// The stored object with this key (ignoring grants and selectors).
    pub fn get(&self, key: &ObjectKey) -> Option<Value> {
        let objects = self.inner.objects.borrow();
        objects.get(&key.kind)?.get(&(key.namespace.clone(), key.name.clone())).cloned()
    }

    /// All stored objects of `kind`, ordered by namespace and name.
    pub fn objects(&self, kind: &KindRef) -> Vec<Value> {
        let objects = self.inner.objects.borrow();
        objects.get(kind).map(|m| m.values().cloned().collect()).unwrap_or_default()
    }

    /// Reconcile `key` (reason `Event`) with this fake as the cache.
    ///
    /// Returns what the host would get: the reconciler's outcome, or its error (including the
    /// permanent error of an action builder given an unusable object).
    pub fn reconcile<R: Reconciler>(&self, key: &ObjectKey) -> Result<Outcome, Error> {
        self.reconcile_request::<R>(Request::new(key.clone()))
    }

    /// Reconcile a request with this fake as the cache. A request without `last_error` gets the
    /// key's, as the host sends it ([`Self::last_error`]).
    pub fn reconcile_request<R: Reconciler>(&self, mut request: Request) -> Result<Outcome, Error> {
        let reconciled = self.inner.metadata.reconciled_kind();
        assert_eq!(&request.key.kind, reconciled, "FakeCache: the host only reconciles keys of the reconciled kind {reconciled}");
        let key = request.key.clone();
        if request.last_error.is_none() {
            request.last_error = self.last_error(&key);
        }
        *self.inner.current.borrow_mut() = Some(key.clone());
        let result = self.enter(|| R::reconcile(request)).and_then(Outcome::into_result);
        let mut errors = self.inner.last_errors.borrow_mut();
        match &result {
            // Cleared now; a failing action of this outcome sets it again.
            Ok(_) => errors.remove(&key),
            Err(e) => errors.insert(key, e.message().to_owned()),
        };
        result
    }

    /// Run `f` with this fake answering the SDK's cache reads and logs on this thread.
    pub fn enter<T>(&self, f: impl FnOnce() -> T) -> T {
        native::with_backend(self.inner.clone(), f)
    }

    /// Carry out the actions as the host would, against the fake: create adds the object unless
    /// it exists (AlreadyExists counts as done), apply merges it in (a rough stand-in for
    /// server-side apply), delete removes it (missing counts as done; no garbage collection),
    /// update-status merge-patches `.status`, and events are recorded (see [`Self::events`]).
    pub fn execute(&self, outcome: &Outcome) {
        for action in &outcome.actions {
            if let Some(why) = self.inner.failures.borrow().iter().find_map(|f| f(action)) {
                // As the host: nothing more of this outcome is sent, and the key's next request says why.
                let failed = format!("{}: {why}", describe(action));
                if let Some(key) = self.inner.current.borrow().clone() {
                    self.inner.last_errors.borrow_mut().insert(key, failed);
                }
                return;
            }
            match action {
                Action::Create(obj) => {
                    // The host's rule for what an action targets (wasmloop-model), so a create
                    // the host would refuse fails here too, and generateName gets a name.
                    let target = Target::of_object(obj, Naming::NameOrGenerate).unwrap_or_else(|e| panic!("FakeCache: create: {e}"));
                    let obj = match &target.name {
                        TargetName::Name(_) => obj.clone(),
                        TargetName::GenerateName(prefix) => {
                            let mut named = obj.clone();
                            named["metadata"]["name"] = format!("{prefix}{:05}", self.next_uid()).into();
                            named
                        }
                    };
                    let key = object::key(&obj).unwrap_or_else(|e| panic!("FakeCache: create: {e}"));
                    if self.get(&key).is_none() {
                        self.insert(self.created(obj));
                    }
                }
                Action::Apply(obj) => {
                    Target::of_object(obj, Naming::NameOnly("apply")).unwrap_or_else(|e| panic!("FakeCache: apply: {e}"));
                    let key = object::key(obj).unwrap_or_else(|e| panic!("FakeCache: apply: {e}"));
                    let merged = match self.get(&key) {
                        Some(mut current) => {
                            patch::merge_into(&mut current, obj);
                            current
                        }
                        None => self.created(obj.clone()),
                    };
                    self.insert(merged);
                }
                Action::Delete(Deletion { key, preconditions }) => {
                    // As the API server: a failed precondition deletes nothing (a conflict), an
                    // object with finalizers is only marked for deletion.
                    match self.get(key) {
                        Some(obj) if !preconditions_hold(preconditions, &obj) => {}
                        Some(mut obj) if has_finalizers(&obj) => {
                            if obj.pointer("/metadata/deletionTimestamp").is_none() {
                                obj["metadata"]["deletionTimestamp"] = self.now_rfc3339().into();
                                self.insert(obj);
                            }
                        }
                        _ => {
                            self.remove(key);
                        }
                    }
                }
                Action::Patch(p) => self.apply_patch(p),
                Action::UpdateStatus { key, status } => {
                    // The host's status write of a missing object fails with NotFound; nothing to do here.
                    if let Some(mut current) = self.get(key) {
                        let map = current.as_object_mut().expect("stored objects are JSON objects");
                        let slot = map.entry("status").or_insert_with(|| Value::Object(Map::new()));
                        patch::merge_into(slot, status);
                        self.insert(current);
                    }
                }
                Action::Event(e) => self.inner.events.borrow_mut().push(e.clone()),
            }
        }
    }

    /// A new object as the API server stores it: `creationTimestamp` now (on the fake's clock).
    fn created(&self, mut obj: Value) -> Value {
        if let Some(meta) = obj.get_mut("metadata").and_then(Value::as_object_mut) {
            meta.entry("creationTimestamp").or_insert_with(|| self.now_rfc3339().into());
        }
        obj
    }

    /// A patch as the API server applies it: nothing if the object is missing or a
    /// precondition (or a `test` operation) fails, which the host treats as a conflict; a
    /// deleting object whose last finalizer is removed goes away.
    fn apply_patch(&self, p: &crate::patch::Patch) {
        let Some(mut current) = self.get(&p.key) else { return };
        let meta = |obj: &Value, f: &str| obj.pointer(&format!("/metadata/{f}")).and_then(Value::as_str).map(str::to_owned);
        if !preconditions_hold(&p.preconditions, &current) {
            return;
        }
        let patched = match patched(p.patch_type, &current, &p.body) {
            Ok(patched) => patched,
            // As the API server: a failed `test`, or a path not in the object, is a conflict.
            Err(PatchError::TestFailed { .. } | PatchError::DoesNotApply { .. }) => return,
            // As the host: a patch it refuses fails the outcome.
            Err(e) => panic!("FakeCache: patch of {}: {e}", p.key),
        };
        // A status patch changes only the status; an object patch everything but the status.
        if p.status {
            current["status"] = patched.get("status").cloned().unwrap_or(Value::Null);
        } else {
            let status = current.get("status").cloned();
            current = patched;
            match status {
                Some(st) => current["status"] = st,
                None => drop(current.as_object_mut().map(|m| m.remove("status"))),
            }
        }
        if let Some(rv) = meta(&current, "resourceVersion").and_then(|rv| rv.parse::<u64>().ok()) {
            current["metadata"]["resourceVersion"] = (rv + 1).to_string().into();
        }
        if current.pointer("/metadata/deletionTimestamp").is_some() && !has_finalizers(&current) {
            self.remove(&p.key);
        } else {
            self.insert(current);
        }
    }

    /// Reconcile `key` and execute the outcome until a reconcile returns no actions; returns the
    /// outcomes that had actions. Fails if the reconciler errors or has not converged after
    /// `max_rounds` reconciles. If the last reconcile asked for a requeue, the clock moves to it:
    /// the time the host would reconcile the key again.
    pub fn converge<R: Reconciler>(&self, key: &ObjectKey, max_rounds: usize) -> Result<Vec<Outcome>, ConvergeError> {
        let (done, requeue) = self.settle::<R>(key, max_rounds)?;
        if let Some(after) = requeue {
            self.advance(after);
        }
        Ok(done)
    }

    /// Play the host's loop for `key` until the clock reaches `until` (RFC 3339): converge, move
    /// the clock to the requeue the converged reconcile asked for, and again, as long as that
    /// requeue is not after `until`; then the clock is set to `until`. Returns every outcome that
    /// had actions, in order; fails as [`Self::converge`] does, or after `max_reconciles`
    /// reconciles in all. A schedule test: `fake.run_until::<CronJobs>(&key, "…T03:00:00Z", 100)`.
    pub fn run_until<R: Reconciler>(&self, key: &ObjectKey, until: &str, max_reconciles: usize) -> Result<Vec<Outcome>, ConvergeError> {
        let until = crate::time::parse_micros(until).unwrap_or_else(|| panic!("FakeCache: not an RFC 3339 timestamp: {until:?}"));
        let mut all = Vec::new();
        let mut left = max_reconciles;
        loop {
            let (done, requeue) = self.settle::<R>(key, left)?;
            left -= done.len() + 1;
            all.extend(done);
            let next = requeue.map(|after| self.now_micros().saturating_add(i64::try_from(after.as_micros()).unwrap_or(i64::MAX)));
            match next {
                Some(next) if next <= until && left > 0 => self.inner.clock.set(next),
                Some(_) | None => {
                    self.inner.clock.set(until.max(self.now_micros()));
                    return Ok(all);
                }
            }
        }
    }

    /// Reconcile and execute until no actions are left: the outcomes that had actions, and the
    /// requeue the last (empty) outcome asked for.
    fn settle<R: Reconciler>(&self, key: &ObjectKey, max_rounds: usize) -> Result<(Vec<Outcome>, Option<Duration>), ConvergeError> {
        let mut done = Vec::new();
        for _ in 0..max_rounds {
            let outcome = match self.reconcile::<R>(key) {
                Ok(outcome) => outcome,
                Err(e) => {
                    // As the host: a failure's actions are executed, then the error stands.
                    let (e, actions) = e.into_parts();
                    let mut failed = Outcome::new();
                    actions.into_iter().for_each(|a| failed.push(a));
                    self.execute(&failed);
                    return Err(ConvergeError::Failed { key: key.to_string(), error: e.to_string() });
                }
            };
            if outcome.is_empty() {
                return Ok((done, outcome.requeue_after));
            }
            self.execute(&outcome);
            if let Some(failed) = self.last_error(key) {
                return Err(ConvergeError::ActionFailed { key: key.to_string(), why: failed });
            }
            done.push(outcome);
        }
        Err(ConvergeError::NotConverged { key: key.to_string(), rounds: max_rounds, last: format!("{:?}", done.last()) })
    }

    /// The keys of the reconciled kind the host would queue for an event on `related` (an
    /// object in this fake, of a watched kind), through each of the plugin's watches of its
    /// kind and their mappings: owner, label, same name, namespace, and index (contract 0.3),
    /// after the watch's selectors. Test that a change to an object a primary only *names*
    /// reaches it: `assert_eq!(fake.mapped_keys(&deployment), vec![foo])`.
    pub fn mapped_keys(&self, related: &ObjectKey) -> Vec<ObjectKey> {
        let Some(obj) = self.get(related) else { return Vec::new() };
        let m = &self.inner.metadata;
        let primary = m.reconciled_kind().clone();
        let primary_namespaced = self.inner.objects.borrow().get(&primary).and_then(|o| o.keys().next().map(|(ns, _)| ns.is_some()));
        // Unknown (no primary stored yet): as the related object is.
        let namespaced = primary_namespaced.unwrap_or(related.namespace.is_some());
        let mut keys: Vec<ObjectKey> = Vec::new();
        for w in m.watches.iter().filter(|w| w.kind == related.kind) {
            if !Selection::of(&w.selector, &w.annotation_selector).matches(&obj) {
                continue;
            }
            let path = |index: &str| m.indexes.iter().find(|i| i.kind == primary && i.name == index).map(|i| i.path.clone());
            let primaries = if matches!(w.mapping, Mapping::Index { .. }) { self.objects(&primary) } else { Vec::new() };
            let found = mapping::keys(&w.mapping, &primary, namespaced, &obj, &primaries, |index, p| {
                index_values(index, path(index).as_deref(), p)
            });
            for k in found {
                if !keys.contains(&k) {
                    keys.push(k);
                }
            }
        }
        keys
    }

    /// Messages logged through the SDK while this fake was installed.
    pub fn logs(&self) -> Vec<(Level, String)> {
        self.inner.logs.borrow().clone()
    }

    /// Events recorded by [`Self::execute`].
    pub fn events(&self) -> Vec<Event> {
        self.inner.events.borrow().clone()
    }

    fn add_document(&self, doc: Value) {
        match doc {
            Value::Null => {}
            Value::Array(items) => items.into_iter().for_each(|i| self.add_document(i)),
            Value::Object(ref m) if m.get("kind").and_then(Value::as_str) == Some("List") => {
                if let Some(Value::Array(items)) = doc.get("items") {
                    items.iter().cloned().for_each(|i| self.add_document(i));
                }
            }
            other => self.insert(other),
        }
    }

    fn next_uid(&self) -> u64 {
        let n = self.inner.next_uid.get();
        self.inner.next_uid.set(n + 1);
        n
    }

    fn insert(&self, mut obj: Value) {
        let key = object::key(&obj).unwrap_or_else(|e| panic!("FakeCache: cannot add {obj}: {e}"));
        let meta = obj.get_mut("metadata").and_then(Value::as_object_mut).expect("object::key found metadata.name");
        meta.remove("managedFields");
        if meta.get("uid").and_then(Value::as_str).is_none_or(str::is_empty) {
            let n = self.next_uid();
            meta.insert("uid".into(), format!("fake-uid-{n}").into());
        }
        self.inner.objects.borrow_mut().entry(key.kind).or_default().insert((key.namespace, key.name), obj);
    }
}

impl Inner {
    /// Whether `kind` is readable, and the selectors limiting what of it is cached
    /// (`None`: everything is).
    fn grant(&self, kind: &KindRef) -> Result<Option<Vec<Selection>>, cache::Error> {
        let m = &self.metadata;
        let mut selectors = Vec::new();
        let mut unrestricted = false;
        let mut declared = false;
        let mut note = |labels: &Option<String>, annotations: &Option<String>| {
            declared = true;
            if labels.is_none() && annotations.is_none() {
                unrestricted = true;
            } else {
                selectors.push(Selection::of(labels, annotations));
            }
        };
        if m.reconciles.as_ref() == Some(kind) {
            note(&m.selector, &m.annotation_selector);
        }
        for w in m.watches.iter().filter(|w| &w.kind == kind) {
            note(&w.selector, &w.annotation_selector);
        }
        // As the host: an index on a kind it reconciles or watches is built on those informers
        // (their selectors apply); only a kind read for its index alone is cached whole.
        let watched = m.reconciles.as_ref() == Some(kind) || m.watches.iter().any(|w| &w.kind == kind);
        if !watched && m.indexes.iter().any(|i| &i.kind == kind) {
            note(&None, &None);
        }
        if !declared {
            return Err(cache::Error::NotGranted(format!(
                "{kind} is not declared in the metadata of plugin {:?} (reconciles, watches or indexes)",
                m.name
            )));
        }
        Ok((!unrestricted).then_some(selectors))
    }

    /// The cached objects of `kind` (after watch selectors) that pass `filter`, as JSON.
    fn read(&self, kind: &KindRef, mut filter: impl FnMut(&Value) -> bool) -> Result<Vec<String>, cache::Error> {
        let selectors = self.grant(kind)?;
        let objects = self.objects.borrow();
        let Some(of_kind) = objects.get(kind) else {
            return Ok(Vec::new());
        };
        Ok(of_kind
            .values()
            .filter(|o| visible(selectors.as_deref(), o) && filter(o))
            .map(|o| serde_json::to_string(o).expect("JSON values serialize"))
            .collect())
    }
}

fn visible(selections: Option<&[Selection]>, obj: &Value) -> bool {
    match selections {
        None => true,
        Some(sels) => sels.iter().any(|s| s.matches(obj)),
    }
}

/// What one informer of the host caches: a label selector (the API server's) and an annotation
/// selector (the host's), both optional.
struct Selection {
    labels: Option<selector::Selector>,
    annotations: Option<selector::Selector>,
}

impl Selection {
    fn of(labels: &Option<String>, annotations: &Option<String>) -> Self {
        let parse = |s: &Option<String>| s.as_deref().map(|s| selector::parse(s).expect("selectors were checked in FakeCache::new"));
        Self { labels: parse(labels), annotations: parse(annotations) }
    }

    fn matches(&self, obj: &Value) -> bool {
        let annotations = obj.pointer("/metadata/annotations");
        let annotation = |k: &str| annotations.and_then(|a| a.get(k)).and_then(Value::as_str);
        self.labels.as_ref().is_none_or(|s| s.matches(obj)) && self.annotations.as_ref().is_none_or(|s| s.matches_with(annotation))
    }
}

impl Backend for Inner {
    fn get(&self, kind: &KindRef, namespace: Option<&str>, name: &str) -> Result<Option<String>, cache::Error> {
        let selectors = self.grant(kind)?;
        let objects = self.objects.borrow();
        let obj = objects.get(kind).and_then(|m| m.get(&(namespace.map(str::to_owned), name.to_owned())));
        Ok(obj.filter(|o| visible(selectors.as_deref(), o)).map(|o| serde_json::to_string(o).expect("JSON values serialize")))
    }

    fn list(&self, kind: &KindRef, namespace: Option<&str>, sel: Option<&str>) -> Result<Vec<String>, cache::Error> {
        let sel = match sel {
            Some(s) => Some(selector::parse(s).map_err(|e| cache::Error::Invalid(format!("label selector {s:?}: {e}")))?),
            None => None,
        };
        self.read(kind, |o| namespace.is_none_or(|ns| object::namespace(o) == Some(ns)) && sel.as_ref().is_none_or(|s| s.matches(o)))
    }

    fn by_index(&self, kind: &KindRef, index: &str, value: &str) -> Result<Vec<String>, cache::Error> {
        self.grant(kind)?;
        let path = match index {
            NAMESPACE_INDEX | OWNER_INDEX => None,
            _ => match self.metadata.indexes.iter().find(|i| &i.kind == kind && i.name == index) {
                Some(i) => Some(i.path.as_str()),
                None => {
                    return Err(cache::Error::UnknownIndex(format!(
                        "no index {index:?} on {kind}: declare it with Metadata::index (namespace and owner always exist)"
                    )));
                }
            },
        };
        self.read(kind, |o| index_values(index, path, o).iter().any(|v| v == value))
    }

    fn metas(&self, kind: &KindRef, objects: Vec<String>) -> Vec<Meta> {
        let paths = self.metadata.fields_of(kind);
        objects
            .iter()
            .map(|json| {
                let v: Value = serde_json::from_str(json).expect("the fake stores JSON");
                let metadata = serde_json::from_value(v["metadata"].clone()).expect("the fake stores objects with metadata");
                let fields = paths.iter().map(|p| wasmloop_model::field::field(&v, p).map(std::string::ToString::to_string)).collect();
                Meta { kind: kind.clone(), metadata, fields }
            })
            .collect()
    }

    fn log(&self, level: Level, message: &str) {
        eprintln!("[{level:?}] {message}");
        self.logs.borrow_mut().push((level, message.to_owned()));
    }

    fn now_micros(&self) -> Option<i64> {
        Some(self.clock.get())
    }
}

/// The values of index `index` (with declared `path`, if not built in) for one object, as the
/// host computes them.
fn index_values(index: &str, path: Option<&str>, obj: &Value) -> Vec<String> {
    let mut out = Vec::new();
    match (index, path) {
        (NAMESPACE_INDEX, None) => out.extend(object::namespace(obj).map(str::to_owned)),
        (OWNER_INDEX, None) => out.extend(object::controller_uid(obj).filter(|u| !u.is_empty()).map(str::to_owned)),
        (_, Some(path)) => {
            if let Ok(path) = IndexPath::parse(path) {
                out.extend(path.values(obj).into_iter().map(std::borrow::Cow::into_owned));
            }
        }
        _ => {}
    }
    out
}

/// Check a declared index path the way the host does when it loads the plugin.
fn check_index_path(path: &str) -> Result<(), PathError> {
    IndexPath::parse(path).map(drop)
}

/// An action as the host names it in `last_error`: `<verb> <object>` (a generateName as `prefix*`).
fn describe(action: &Action) -> String {
    let target =
        |obj: &Value| Target::of_object(obj, Naming::NameOrGenerate).map_or_else(|_| "(an invalid object)".to_owned(), |t| t.to_string());
    match action {
        Action::Create(obj) => format!("create {}", target(obj)),
        Action::Apply(obj) => format!("apply {}", target(obj)),
        Action::Delete(d) => format!("delete {}", d.key),
        Action::Patch(p) if p.status => format!("update-status {}", p.key),
        Action::Patch(p) => format!("patch {}", p.key),
        Action::UpdateStatus { key, .. } => format!("update-status {key}"),
        Action::Event(e) => format!("event {}", e.regarding),
    }
}

/// Label selectors as the API server parses them: `a=b`, `a==b`, `a!=b`, `a`, `!a`,
/// `a in (x,y)`, `a notin (x,y)`, comma-separated (all must hold).
/// Label selectors, with the host's grammar and matching rules (`wasmloop_model::selector`).
mod selector {
    pub(super) use wasmloop_model::selector::{Reason, Selector};

    /// Parse `s`, the error being the reason (the callers name the selector).
    pub(super) fn parse(s: &str) -> Result<Selector, Reason> {
        Selector::parse(s).map_err(|e| e.reason)
    }
}

/// Whether `obj` is the object the preconditions name (same uid and resourceVersion, where given;
/// the host reads an empty precondition as none).
fn preconditions_hold(pre: &crate::patch::Preconditions, obj: &Value) -> bool {
    patch::preconditions_hold(pre.uid.as_deref(), pre.resource_version.as_deref(), obj)
}

/// `before` patched with `body` by the host's rules (wasmloop-model): a patch the host refuses
/// (a merge patch that is not an object, a JSON patch `move` or `copy`) is an error, as is one
/// that does not apply.
fn patched(patch_type: crate::patch::PatchType, before: &Value, body: &Value) -> Result<Value, PatchError> {
    match patch_type {
        crate::patch::PatchType::Merge => patch::merge(before, body),
        crate::patch::PatchType::Json => patch::json(before, body),
    }
}

fn has_finalizers(obj: &Value) -> bool {
    obj.pointer("/metadata/finalizers").and_then(Value::as_array).is_some_and(|f| !f.is_empty())
}

#[cfg(test)]
mod conformance;
mod error;
#[cfg(test)]
mod tests;

pub use error::ConvergeError;
