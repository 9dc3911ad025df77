//! [`IndexedStore`]: one kind's cached objects with their indexes (client-go's thread-safe
//! store + indexer).
//!
//! Layout: objects by key (`namespace/name`), and per index a map value → set of keys. Each
//! object also remembers its values for the field indexes (computing those parses its JSON), so
//! an update or delete removes exactly the old entries without parsing again; the other
//! indexes' values come from the cached metadata. Keys and index values are shared `Arc<str>`s. Expensive
//! work (serialising JSON, parsing it for a new field index, building a dictionary and
//! compressing with it) happens before the write lock is taken, so readers only ever wait for
//! map updates.
//!
//! Once a store holds [`super::DICTIONARY_AT`] objects, its owner builds the kind's zstd
//! dictionary ([`super::dictionary`]); from then on every object's JSON is kept compressed with it.

use std::borrow::Cow;
use std::collections::{BTreeSet, HashMap, HashSet};
use std::sync::Arc;
use std::sync::atomic::AtomicU8;

use parking_lot::RwLock;
use serde_json::Value;

use super::body::Dictionary;
use super::index::{Index, IndexSpec, LABEL_PAIRS_INDEX, NAMESPACE_INDEX, OWNER_INDEX, Values};
use super::object::{CachedObject, key_parts, str_field};
use super::{Error, Result, Selector};
use crate::kinds::KindRef;

/// What applying an event did to the store.
#[derive(Clone, Debug)]
pub enum Change {
    /// A new object was stored.
    Added(Arc<CachedObject>),
    /// A stored object was replaced by a newer version.
    Updated {
        /// The version that was stored.
        old: Arc<CachedObject>,
        /// The version now stored.
        new: Arc<CachedObject>,
    },
    /// The object was removed.
    Deleted(Arc<CachedObject>),
    /// Same resourceVersion as cached (or, without one, the same JSON): nothing was done.
    Unchanged(Arc<CachedObject>),
}

impl Change {
    /// The object as it is now, or as it last was for `Deleted`.
    pub fn object(&self) -> &Arc<CachedObject> {
        match self {
            Self::Added(o) | Self::Deleted(o) | Self::Unchanged(o) => o,
            Self::Updated { new, .. } => new,
        }
    }

    /// True for `Unchanged`.
    pub fn is_unchanged(&self) -> bool {
        matches!(self, Self::Unchanged(_))
    }
}

/// One object of a list, prepared by [`IndexedStore::prepare`] for
/// [`IndexedStore::replace_listed`].
pub struct Listed(pub(super) Prepared);

pub(super) enum Prepared {
    /// Already cached with the listed resourceVersion.
    Same { key: String, cached: Arc<CachedObject> },
    /// New or changed: its cached form, and its parsed JSON if the store has field indexes.
    New { obj: Arc<CachedObject>, value: Option<Value> },
}

/// Where a store's dictionary stands ([`IndexedStore::dictionary`]): none yet,
pub(super) const NO_DICTIONARY: u8 = 0;
/// being built (by one caller: the others go on without it),
pub(super) const BUILDING: u8 = 1;
/// built (every new object is compressed with it).
pub(super) const BUILT: u8 = 2;

/// One kind's objects (one informer's cache), with the built-in `namespace`, `owner` and
/// `label=value` indexes and any added ones. Results of reads are ordered by key
/// (`namespace/name`).
pub struct IndexedStore {
    kind: KindRef,
    pub(super) inner: RwLock<Inner>,
    /// Where the dictionary stands (see [`super::dictionary`]).
    pub(super) dictionary: AtomicU8,
}

pub(super) struct Inner {
    pub(super) objects: HashMap<Arc<str>, Entry>,
    pub(super) indexes: Vec<Index>,
    /// The kind's dictionary, once built: new objects are compressed with it.
    pub(super) dict: Option<Arc<Dictionary>>,
}

pub(super) struct Entry {
    pub(super) obj: Arc<CachedObject>,
    /// The object's values for each field index (those that read its JSON), in
    /// `Inner::indexes` order; empty when the store has none.
    pub(super) field_values: Box<[Values]>,
}

impl IndexedStore {
    /// An empty store for `kind` with the built-in indexes.
    pub fn new(kind: KindRef) -> Self {
        let index = |name: &str, spec| Index::new(name, spec, None);
        let indexes = vec![
            index(NAMESPACE_INDEX, IndexSpec::Namespace),
            index(OWNER_INDEX, IndexSpec::ControllerOwner),
            index(LABEL_PAIRS_INDEX, IndexSpec::LabelPairs),
        ];
        Self { kind, inner: RwLock::new(Inner { objects: HashMap::new(), indexes, dict: None }), dictionary: AtomicU8::new(NO_DICTIONARY) }
    }

    /// The kind stored here.
    pub fn kind(&self) -> &KindRef {
        &self.kind
    }

    /// Add index `name`, computed over the objects already cached, for the store's life. Adding
    /// the same spec again is a no-op; a different spec under an existing name is an
    /// `IndexConflict`. (Controllers share indexes by definition instead:
    /// [`acquire_index`](Self::acquire_index).)
    pub fn add_index(&self, name: &str, spec: IndexSpec) -> Result<()> {
        self.insert_index(name, spec, None)
    }

    /// Add index `name` with `users` (`None`: for the store's life), or count `users` more for
    /// it if it exists with this spec.
    pub(super) fn insert_index(&self, name: &str, spec: IndexSpec, users: Option<usize>) -> Result<()> {
        if self.inner.write().use_existing(name, &spec, users)? {
            return Ok(());
        }
        let snapshot = self.inner.read().objects.values().map(|e| e.obj.clone()).collect::<Vec<_>>();
        // Compute values outside the lock: field indexes parse each object's JSON.
        let computed: HashMap<Arc<str>, (Arc<CachedObject>, Vec<String>)> =
            snapshot.into_iter().map(|obj| (obj.key_arc().clone(), (obj.clone(), owned_values(&spec, &obj)))).collect();

        let mut inner = self.inner.write();
        if inner.use_existing(name, &spec, users)? {
            return Ok(()); // added meanwhile by another caller
        }
        let mut index = Index::new(name, spec, users);
        for (key, entry) in &mut inner.objects {
            let values = match computed.get(key) {
                Some((obj, values)) if Arc::ptr_eq(obj, &entry.obj) => Cow::Borrowed(values),
                // Changed since the snapshot: compute again (rare).
                _ => Cow::Owned(owned_values(&index.spec, &entry.obj)),
            };
            let values = index.intern(values.iter().map(String::as_str));
            index.add(key, &values);
            if index.spec.reads_json() {
                let mut all = std::mem::take(&mut entry.field_values).into_vec();
                all.push(values);
                entry.field_values = all.into_boxed_slice();
            }
        }
        inner.indexes.push(index);
        Ok(())
    }

    /// Names of the indexes, built-ins first.
    #[cfg(test)]
    fn index_names(&self) -> Vec<String> {
        self.inner.read().indexes.iter().map(|i| i.name.to_string()).collect()
    }

    /// Insert or update one object (a watch event's JSON).
    pub fn apply(&self, mut value: Value) -> Result<Change> {
        let key = key_of(&value)?;
        let rv = str_field(&value["metadata"], "resourceVersion");
        let dict = {
            let inner = self.inner.read();
            if let Some(same) = inner.same_version(&key, rv) {
                return Ok(Change::Unchanged(same));
            }
            inner.dict.clone()
        };
        let obj = Arc::new(CachedObject::from_value_mut(&mut value, dict.as_ref())?);
        Ok(self.inner.write().upsert(obj, &value))
    }

    /// Remove one object; `None` if it was not cached.
    pub fn delete(&self, namespace: Option<&str>, name: &str) -> Option<Change> {
        let key = make_key(namespace, name);
        self.inner.write().remove(&key).map(Change::Deleted)
    }

    /// Prepare one object of a list for [`replace_listed`](Self::replace_listed), as it arrives:
    /// an object the store holds at the listed resourceVersion is only looked up; any other is
    /// made into its cached form now (managedFields dropped, serialised, compressed if the kind
    /// has a dictionary), so a list of N objects never holds N parsed documents at once. The
    /// parsed document is kept only while the store has a field index (whose values it gives).
    pub fn prepare(&self, mut value: Value) -> Result<Listed> {
        let key = key_of(&value)?;
        let (same, dict, reads_json) = {
            let inner = self.inner.read();
            let same = inner.same_version(&key, str_field(&value["metadata"], "resourceVersion"));
            (same, inner.dict.clone(), inner.indexes.iter().any(|i| i.spec.reads_json()))
        };
        Ok(Listed(match same {
            Some(cached) => Prepared::Same { key, cached },
            None => {
                let obj = Arc::new(CachedObject::from_value_mut(&mut value, dict.as_ref())?);
                Prepared::New { obj, value: reads_json.then_some(value) }
            }
        }))
    }

    /// Replace everything with a fresh list (a relist), atomically for readers.
    ///
    /// Returns a change for every listed object in list order — `Added`, `Updated`, or
    /// `Unchanged` when the resourceVersion is the one cached — followed by `Deleted` for each
    /// cached object missing from the list, in key order. Should another writer change a listed
    /// object while the list was being prepared, its version is kept and no change is reported
    /// for it.
    pub fn replace_listed(&self, listed: Vec<Listed>) -> Vec<Change> {
        let mut inner = self.inner.write();
        let mut changes = Vec::with_capacity(listed.len());
        let mut seen = HashSet::with_capacity(listed.len());
        for Listed(p) in listed {
            match p {
                Prepared::New { obj, value } => {
                    seen.insert(obj.key_arc().clone());
                    // A field index added since the object was prepared reads its parsed JSON.
                    let parsed = match value {
                        Some(v) => v,
                        None if inner.indexes.iter().any(|i| i.spec.reads_json()) => obj.value(),
                        None => Value::Null,
                    };
                    changes.push(inner.upsert(obj, &parsed));
                }
                Prepared::Same { key, cached } => {
                    let Some((key, entry)) = inner.objects.get_key_value(key.as_str()) else {
                        continue; // deleted by another writer meanwhile
                    };
                    seen.insert(key.clone());
                    // If another writer changed it meanwhile, its version stays, unreported.
                    if Arc::ptr_eq(&entry.obj, &cached) {
                        changes.push(Change::Unchanged(cached));
                    }
                }
            }
        }
        let mut gone: Vec<Arc<str>> = inner.objects.keys().filter(|k| !seen.contains(*k)).cloned().collect();
        gone.sort_unstable();
        changes.extend(gone.iter().filter_map(|k| inner.remove(k)).map(Change::Deleted));
        changes
    }

    /// [`prepare`](Self::prepare) every object, then [`replace_listed`](Self::replace_listed).
    /// If any object is invalid nothing is changed.
    pub fn replace(&self, values: Vec<Value>) -> Result<Vec<Change>> {
        let listed = values.into_iter().map(|v| self.prepare(v)).collect::<Result<Vec<_>>>()?;
        Ok(self.replace_listed(listed))
    }

    /// One object, if cached.
    pub fn get(&self, namespace: Option<&str>, name: &str) -> Option<Arc<CachedObject>> {
        let key = make_key(namespace, name);
        self.inner.read().objects.get(key.as_str()).map(|e| e.obj.clone())
    }

    /// Objects in `namespace` (all namespaces if None) matching `selector` (all if None).
    ///
    /// Reads only the objects that can match: those carrying the rarest of the selector's
    /// required labels (`key=value`, `key in (…)`) when that is fewer than the namespace holds.
    pub fn list(&self, namespace: Option<&str>, selector: Option<&Selector>) -> Vec<Arc<CachedObject>> {
        let keep = |o: &Arc<CachedObject>| selector.is_none_or(|s| s.matches(o));
        let inner = self.inner.read();
        let namespace = namespace.filter(|ns| !ns.is_empty());
        let scope = match namespace {
            Some(ns) => inner.index(NAMESPACE_INDEX).and_then(|i| i.map.get(ns)).map_or(0, BTreeSet::len),
            None => inner.objects.len(),
        };
        if let Some(keys) = selector.and_then(|s| inner.label_candidates(s, scope)) {
            let in_scope = |k: &Arc<str>| namespace.is_none_or(|ns| key_parts_of(k).0 == Some(ns));
            return keys
                .into_iter()
                .filter(|k| in_scope(k))
                .filter_map(|k| inner.objects.get(k))
                .map(|e| &e.obj)
                .filter(|o| keep(o))
                .cloned()
                .collect();
        }
        match namespace {
            Some(ns) => inner.lookup(NAMESPACE_INDEX, ns).unwrap_or_default().into_iter().filter(keep).collect(),
            None => sorted(inner.objects.values().map(|e| &e.obj).filter(|o| keep(o)).cloned().collect()),
        }
    }

    /// Objects whose index `index` has value `value`.
    pub fn by_index(&self, index: &str, value: &str) -> Result<Vec<Arc<CachedObject>>> {
        self.inner.read().lookup(index, value).ok_or_else(|| Error::UnknownIndex { kind: self.kind.clone(), index: index.into() })
    }

    /// Every cached object.
    pub fn snapshot(&self) -> Vec<Arc<CachedObject>> {
        sorted(self.inner.read().objects.values().map(|e| e.obj.clone()).collect())
    }

    /// Number of cached objects.
    pub fn len(&self) -> usize {
        self.inner.read().objects.len()
    }

    /// True if nothing is cached.
    pub fn is_empty(&self) -> bool {
        self.inner.read().objects.is_empty()
    }
}

impl std::fmt::Debug for IndexedStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("IndexedStore").field("kind", &self.kind).field("len", &self.len()).finish()
    }
}

impl Inner {
    /// True if index `name` exists with this spec, false if the name is free.
    fn has_index(&self, name: &str, spec: &IndexSpec) -> Result<bool> {
        match self.index(name) {
            Some(i) if &i.spec == spec => Ok(true),
            Some(_) => Err(Error::IndexConflict { name: name.into() }),
            None => Ok(false),
        }
    }

    /// If index `name` exists with this spec, count `users` more for it (those kept for the
    /// store's life stay so) and say true; false if the name is free.
    fn use_existing(&mut self, name: &str, spec: &IndexSpec, users: Option<usize>) -> Result<bool> {
        if !self.has_index(name, spec)? {
            return Ok(false);
        }
        if let (Some(more), Some(index)) = (users, self.indexes.iter_mut().find(|i| &*i.name == name)) {
            index.users = index.users.map(|n| n + more);
        }
        Ok(true)
    }

    /// The cached object at `key` if it has resourceVersion `rv` (never for an empty `rv`).
    fn same_version(&self, key: &str, rv: &str) -> Option<Arc<CachedObject>> {
        let entry = self.objects.get(key).filter(|e| !rv.is_empty() && e.obj.resource_version() == rv)?;
        Some(entry.obj.clone())
    }

    pub(super) fn index(&self, name: &str) -> Option<&Index> {
        self.indexes.iter().find(|i| &*i.name == name)
    }

    /// The keys, in order, of the objects carrying the pairs of the selector's most selective
    /// requirement, if that is fewer than `limit` objects; None if no requirement narrows.
    fn label_candidates(&self, selector: &Selector, limit: usize) -> Option<Vec<&Arc<str>>> {
        let pairs = self.index(LABEL_PAIRS_INDEX)?;
        let sets = |values: &[String]| -> Vec<&BTreeSet<Arc<str>>> { values.iter().filter_map(|v| pairs.map.get(v.as_str())).collect() };
        let (count, best) = selector
            .required_pairs()
            .map(|values| {
                let found = sets(&values);
                (found.iter().map(|s| s.len()).sum::<usize>(), found)
            })
            .min_by_key(|(n, _)| *n)?;
        if count >= limit {
            return None;
        }
        let mut keys: Vec<&Arc<str>> = best.into_iter().flatten().collect();
        keys.sort_unstable();
        keys.dedup();
        Some(keys)
    }

    /// Objects with `value` in index `name`, in key order; None if there is no such index.
    fn lookup(&self, name: &str, value: &str) -> Option<Vec<Arc<CachedObject>>> {
        self.lookup_up_to(name, value, usize::MAX)
    }

    /// The first `limit` of [`lookup`](Self::lookup).
    pub(super) fn lookup_up_to(&self, name: &str, value: &str, limit: usize) -> Option<Vec<Arc<CachedObject>>> {
        let keys = self.index(name)?.map.get(value).into_iter().flatten().take(limit);
        Some(keys.filter_map(|k| self.objects.get(k)).map(|e| e.obj.clone()).collect())
    }

    /// Insert or replace `obj`; `value` is its JSON, read by field indexes.
    fn upsert(&mut self, obj: Arc<CachedObject>, value: &Value) -> Change {
        let key = obj.key_arc().clone();
        if let Some(old) = self.objects.get(&key) {
            let rv = obj.resource_version();
            let same = match rv.is_empty() {
                false => old.obj.resource_version() == rv,
                true => old.obj.resource_version().is_empty() && old.obj.json().ok() == obj.json().ok(),
            };
            if same {
                return Change::Unchanged(old.obj.clone());
            }
        }
        let values: Vec<Values> =
            self.indexes.iter().map(|index| index.intern(index.spec.values(&obj, value).iter().map(|v| &**v))).collect();
        // Remove then insert, so the map, the indexes and `obj` all share `obj`'s key.
        let old = self.objects.remove(&key);
        let old_values = old.as_ref().map(|o| indexed_values(&self.indexes, o));
        for (i, (index, new_values)) in self.indexes.iter_mut().zip(&values).enumerate() {
            match old_values.as_ref().and_then(|v| v.get(i)) {
                Some(old_values) if old_values.iter().map(|v| &**v).eq(new_values.iter().map(|v| &**v)) => index.rekey(&key, new_values),
                Some(old_values) => {
                    index.remove(&key, old_values);
                    index.add(&key, new_values);
                }
                None => index.add(&key, new_values),
            }
        }
        drop(old_values);
        let field_values = self.indexes.iter().zip(values).filter(|(index, _)| index.spec.reads_json()).map(|(_, v)| v).collect();
        self.objects.insert(key, Entry { obj: obj.clone(), field_values });
        match old {
            None => Change::Added(obj),
            Some(old) => Change::Updated { old: old.obj, new: obj },
        }
    }

    /// Remove the object at `key` from the map and every index.
    fn remove(&mut self, key: &str) -> Option<Arc<CachedObject>> {
        let entry = self.objects.remove(key)?;
        let values = indexed_values(&self.indexes, &entry);
        for (index, values) in self.indexes.iter_mut().zip(&values) {
            index.remove(key, values);
        }
        drop(values);
        Some(entry.obj)
    }
}

/// The namespace and name of a key made by [`make_key`].
fn key_parts_of(key: &str) -> (Option<&str>, &str) {
    match key.split_once('/') {
        Some((ns, name)) => (Some(ns), name),
        None => (None, key),
    }
}

/// client-go's key: `namespace/name`, or `name` without a namespace (empty counts as none).
fn make_key(namespace: Option<&str>, name: &str) -> String {
    match namespace.filter(|ns| !ns.is_empty()) {
        Some(ns) => format!("{ns}/{name}"),
        None => name.to_string(),
    }
}

fn key_of(value: &Value) -> Result<String> {
    let (namespace, name) = key_parts(value)?;
    Ok(make_key(namespace, name))
}

/// The values `entry` is indexed under, per index in `indexes` order: remembered for field
/// indexes, recomputed from the cached metadata for the others (the same object gives the same
/// values, so these are exactly the ones it was added under).
fn indexed_values<'e>(indexes: &[Index], entry: &'e Entry) -> Vec<Vec<Cow<'e, str>>> {
    let mut remembered = entry.field_values.iter();
    indexes
        .iter()
        .map(|index| match index.spec.reads_json() {
            true => remembered.next().map(|v| v.iter().map(|s| Cow::Borrowed(&**s)).collect()).unwrap_or_default(),
            false => index.spec.values(&entry.obj, &Value::Null),
        })
        .collect()
}

/// An index's values for `obj`, parsing its JSON if the index reads fields.
fn owned_values(spec: &IndexSpec, obj: &CachedObject) -> Vec<String> {
    let json = if spec.reads_json() { obj.value() } else { Value::Null };
    spec.values(obj, &json).into_iter().map(Cow::into_owned).collect()
}

fn sorted(mut objects: Vec<Arc<CachedObject>>) -> Vec<Arc<CachedObject>> {
    objects.sort_unstable_by(|a, b| a.key().cmp(b.key()));
    objects
}

#[cfg(test)]
#[path = "store_tests.rs"]
mod tests;
