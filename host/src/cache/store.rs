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
//! Once a store holds [`DICTIONARY_AT`] objects, its owner builds the kind's zstd dictionary
//! ([`IndexedStore::build_dictionary`], off the event path); from then on every object's JSON
//! is kept compressed with it.

use std::borrow::Cow;
use std::collections::{BTreeSet, HashMap, HashSet};
use std::sync::Arc;
use std::sync::atomic::{AtomicU8, Ordering};

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
pub struct Listed(Prepared);

enum Prepared {
    /// Already cached with the listed resourceVersion.
    Same { key: String, cached: Arc<CachedObject> },
    /// New or changed: its cached form, and its parsed JSON if the store has field indexes.
    New { obj: Arc<CachedObject>, value: Option<Value> },
}

/// One kind's objects (one informer's cache), with the built-in `namespace`, `owner` and
/// `label=value` indexes and any added ones. Results of reads are ordered by key
/// (`namespace/name`).
pub struct IndexedStore {
    kind: KindRef,
    pub(super) inner: RwLock<Inner>,
    /// Where the dictionary stands: [`NO_DICTIONARY`], [`BUILDING`] or [`BUILT`].
    dictionary: AtomicU8,
}

/// Objects a store holds before its kind's dictionary is built: below this, compression
/// would save little memory and the samples would say little about the kind.
pub const DICTIONARY_AT: usize = 1000;
/// Objects sampled (spread over the store) for a dictionary.
const DICTIONARY_SAMPLES: usize = 16;
/// Largest dictionary, in bytes.
const DICTIONARY_BYTES: usize = 16 * 1024;

const NO_DICTIONARY: u8 = 0;
const BUILDING: u8 = 1;
const BUILT: u8 = 2;
/// Objects compressed per write-lock hold while a store is packed: readers wait for a swap of
/// this many entries at most, and the plain versions are freed chunk by chunk.
const PACK_CHUNK: usize = 512;

/// What [`IndexedStore::build_dictionary`] did.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Packing {
    /// Bytes of the dictionary (0 if none could be built).
    pub dictionary_bytes: usize,
    /// Heap bytes of the dictionary prepared for compressing and decompressing.
    pub dictionary_heap_bytes: usize,
    /// Objects whose JSON is now compressed.
    pub packed: usize,
    /// JSON bytes of those objects before compression.
    pub json_bytes: usize,
    /// Their compressed bytes.
    pub packed_bytes: usize,
}

impl Packing {
    /// Nothing packed yet with `dict`.
    fn with(dict: &Dictionary) -> Self {
        Self { dictionary_bytes: dict.size(), dictionary_heap_bytes: dict.heap_bytes(), packed: 0, json_bytes: 0, packed_bytes: 0 }
    }

    /// Count one object now kept compressed.
    fn count(&mut self, packed: &CachedObject) {
        self.packed += 1;
        self.json_bytes += packed.json_len();
        self.packed_bytes += packed.stored_json_bytes();
    }
}

/// The kind's dictionary from [`DICTIONARY_SAMPLES`] of `objects`, spread over them; None if
/// none can be built.
fn sampled_dictionary(objects: &[&Arc<CachedObject>]) -> Option<Arc<Dictionary>> {
    let step = objects.len().div_ceil(DICTIONARY_SAMPLES).max(1);
    let samples: Vec<String> =
        objects.iter().step_by(step).take(DICTIONARY_SAMPLES).filter_map(|o| o.json().ok().map(Cow::into_owned)).collect();
    Dictionary::from_samples(&samples, DICTIONARY_BYTES)
}

pub(super) struct Inner {
    pub(super) objects: HashMap<Arc<str>, Entry>,
    pub(super) indexes: Vec<Index>,
    /// The kind's dictionary, once built: new objects are compressed with it.
    dict: Option<Arc<Dictionary>>,
}

pub(super) struct Entry {
    obj: Arc<CachedObject>,
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

    /// True, once, when the store has grown to [`DICTIONARY_AT`] objects without a dictionary:
    /// the caller then owes one call of [`build_dictionary`](Self::build_dictionary) (on a
    /// blocking thread: compressing every object takes tens of milliseconds).
    pub fn wants_dictionary(&self) -> bool {
        self.dictionary.load(Ordering::Relaxed) == NO_DICTIONARY
            && self.len() >= DICTIONARY_AT
            && self.dictionary.compare_exchange(NO_DICTIONARY, BUILDING, Ordering::AcqRel, Ordering::Relaxed).is_ok()
    }

    /// Build the kind's dictionary from a sample of the cached objects, then compress every
    /// cached object with it; objects cached later are compressed as they arrive. Readers are
    /// never blocked for the compression, only for swapping the results in. A store builds at
    /// most one dictionary; if none can be built, objects stay plain.
    pub fn build_dictionary(&self) -> Packing {
        self.dictionary.store(BUILT, Ordering::Release);
        let plain = self.plain_objects();
        let Some(dict) = sampled_dictionary(&plain.iter().collect::<Vec<_>>()) else {
            return Packing { dictionary_bytes: 0, dictionary_heap_bytes: 0, packed: 0, json_bytes: 0, packed_bytes: 0 };
        };
        let mut packing = Packing::with(&dict);
        self.pack(plain, &dict, &mut packing);
        // Objects cached while the first pass ran are still plain: they are few.
        self.inner.write().dict = Some(dict.clone());
        self.pack(self.plain_objects(), &dict, &mut packing);
        packing
    }

    /// While a (re)list is being prepared: once it holds [`DICTIONARY_AT`] objects and the store
    /// has no dictionary, build the dictionary from the listed objects, compress those already
    /// prepared, and let every object prepared from now on be compressed as it arrives, so a
    /// large first list is never held plain (which then leaves the freed plain text scattered
    /// between the compressed objects). None if the store has or is building a dictionary, the
    /// list is too short, or no dictionary could be built.
    pub fn dictionary_for_list(&self, listed: &mut [Listed]) -> Option<Packing> {
        let fresh: Vec<&Arc<CachedObject>> = listed
            .iter()
            .filter_map(|Listed(p)| match p {
                Prepared::New { obj, .. } if !obj.is_packed() => Some(obj),
                _ => None,
            })
            .collect();
        if fresh.len() < DICTIONARY_AT
            || self.dictionary.compare_exchange(NO_DICTIONARY, BUILT, Ordering::AcqRel, Ordering::Relaxed).is_err()
        {
            return None;
        }
        let dict = sampled_dictionary(&fresh)?;
        let mut packing = Packing::with(&dict);
        for Listed(p) in listed.iter_mut() {
            if let Prepared::New { obj, .. } = p
                && let Some(packed) = obj.packed(&dict)
            {
                packing.count(&packed);
                *obj = Arc::new(packed);
            }
        }
        // Objects the store already holds (a relist) are compressed too.
        self.inner.write().dict = Some(dict.clone());
        self.pack(self.plain_objects(), &dict, &mut packing);
        Some(packing)
    }

    /// The cached objects whose JSON is not compressed.
    fn plain_objects(&self) -> Vec<Arc<CachedObject>> {
        self.inner.read().objects.values().map(|e| e.obj.clone()).filter(|o| !o.is_packed()).collect()
    }

    /// Compress `objects` with `dict` outside the lock, [`PACK_CHUNK`] at a time, swapping in
    /// those still cached as they were after each chunk.
    fn pack(&self, objects: Vec<Arc<CachedObject>>, dict: &Arc<Dictionary>, packing: &mut Packing) {
        let mut objects = objects.into_iter().peekable();
        while objects.peek().is_some() {
            let packed: Vec<(Arc<CachedObject>, CachedObject)> =
                objects.by_ref().take(PACK_CHUNK).filter_map(|o| o.packed(dict).map(|p| (o, p))).collect();
            let mut inner = self.inner.write();
            for (old, new) in packed {
                let Some(entry) = inner.objects.get_mut(old.key()) else { continue };
                if Arc::ptr_eq(&entry.obj, &old) {
                    packing.count(&new);
                    entry.obj = Arc::new(new);
                }
            }
        }
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
mod tests {
    use serde_json::json;

    use super::*;

    fn store() -> IndexedStore {
        IndexedStore::new(KindRef::new("v1", "Pod"))
    }

    fn pod(ns: &str, name: &str, rv: &str, app: &str, node: &str) -> Value {
        json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"namespace": ns, "name": name, "uid": format!("uid-{ns}-{name}"),
                         "resourceVersion": rv, "labels": {"app": app}},
            "spec": {"nodeName": node}
        })
    }

    fn owned(mut v: Value, owner_uid: &str, controller: bool) -> Value {
        v["metadata"]["ownerReferences"] = json!([{
            "apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "rs", "uid": owner_uid,
            "controller": controller
        }]);
        v
    }

    fn keys(objs: &[Arc<CachedObject>]) -> Vec<&str> {
        objs.iter().map(|o| o.key()).collect()
    }

    fn by(s: &IndexedStore, index: &str, value: &str) -> Vec<String> {
        s.by_index(index, value).unwrap().iter().map(|o| o.key().to_string()).collect()
    }

    /// No index holds an empty set or a key that is not cached, and every cached object is
    /// indexed under exactly the values it has now.
    fn assert_consistent(s: &IndexedStore) {
        let inner = s.inner.read();
        for index in &inner.indexes {
            for (value, keys) in &index.map {
                assert!(!keys.is_empty(), "empty set left for {}={value}", index.name);
                for k in keys {
                    let e = inner.objects.get(k).expect("index points at a cached object");
                    let json = e.obj.value();
                    let now = index.spec.values(&e.obj, &json);
                    assert!(now.iter().any(|v| v == &**value), "{k} is stale under {}={value}", index.name);
                }
            }
        }
        for (k, e) in &inner.objects {
            assert_eq!(e.field_values.len(), inner.indexes.iter().filter(|i| i.spec.reads_json()).count());
            let values = indexed_values(&inner.indexes, e);
            assert_eq!(values.len(), inner.indexes.len());
            for (index, values) in inner.indexes.iter().zip(&values) {
                for v in values {
                    assert!(index.map.get(&**v).is_some_and(|ks| ks.contains(k)), "{k} missing under {v}");
                }
            }
        }
    }

    #[test]
    fn apply_adds_updates_and_skips_same_resource_version() {
        let s = store();
        assert!(matches!(s.apply(pod("a", "p", "1", "web", "n1")).unwrap(), Change::Added(_)));
        let cached = s.get(Some("a"), "p").unwrap();
        // Same resourceVersion, even with different content: nothing happens.
        let change = s.apply(pod("a", "p", "1", "CHANGED", "n1")).unwrap();
        assert!(change.is_unchanged());
        assert!(Arc::ptr_eq(change.object(), &cached));
        assert!(Arc::ptr_eq(&s.get(Some("a"), "p").unwrap(), &cached));
        assert_eq!(s.get(Some("a"), "p").unwrap().label("app"), Some("web"));
        match s.apply(pod("a", "p", "2", "db", "n1")).unwrap() {
            Change::Updated { old, new } => {
                assert_eq!((old.resource_version(), new.resource_version()), ("1", "2"));
                assert_eq!(new.label("app"), Some("db"));
            }
            other => panic!("{other:?}"),
        }
        assert_eq!(s.len(), 1);
        assert!(s.get(Some("b"), "p").is_none());
        assert!(s.get(None, "p").is_none());
        // Without resourceVersions, equal JSON is Unchanged and different JSON an update.
        let bare = |app: &str| json!({"metadata": {"name": "q", "labels": {"app": app}}});
        assert!(matches!(s.apply(bare("x")).unwrap(), Change::Added(_)));
        assert!(s.apply(bare("x")).unwrap().is_unchanged());
        assert!(matches!(s.apply(bare("y")).unwrap(), Change::Updated { .. }));
        assert!(s.apply(json!({"metadata": {}})).is_err());
        assert_consistent(&s);
    }

    #[test]
    fn label_index_follows_label_changes() {
        let s = store();
        s.add_index("app", IndexSpec::parse("labels.app").unwrap()).unwrap();
        s.apply(pod("a", "p1", "1", "web", "n1")).unwrap();
        s.apply(pod("a", "p2", "1", "web", "n1")).unwrap();
        assert_eq!(by(&s, "app", "web"), ["a/p1", "a/p2"]);
        s.apply(pod("a", "p1", "2", "db", "n1")).unwrap();
        assert_eq!(by(&s, "app", "web"), ["a/p2"]);
        assert_eq!(by(&s, "app", "db"), ["a/p1"]);
        let mut unlabelled = pod("a", "p2", "2", "", "n1");
        unlabelled["metadata"].as_object_mut().unwrap().remove("labels");
        s.apply(unlabelled).unwrap();
        assert!(by(&s, "app", "web").is_empty());
        assert!(by(&s, "app", "").is_empty());
        assert_consistent(&s);
    }

    #[test]
    fn field_index_handles_scalars_arrays_and_missing_fields() {
        let s = store();
        s.add_index("node", IndexSpec::parse("spec.nodeName").unwrap()).unwrap();
        s.add_index("port", IndexSpec::parse("spec.containers.ports.containerPort").unwrap()).unwrap();
        let mut p1 = pod("a", "p1", "1", "web", "n1");
        p1["spec"]["containers"] = json!([
            {"name": "app", "ports": [{"containerPort": 80}, {"containerPort": 443}]},
            {"name": "sidecar", "ports": [{"containerPort": 80}]}
        ]);
        s.apply(p1).unwrap();
        let mut pending = pod("a", "p2", "1", "web", "");
        pending["spec"].as_object_mut().unwrap().remove("nodeName");
        s.apply(pending).unwrap();
        assert_eq!(by(&s, "node", "n1"), ["a/p1"]);
        assert!(by(&s, "node", "").is_empty(), "missing field is not indexed");
        assert_eq!(by(&s, "port", "80"), ["a/p1"]);
        assert_eq!(by(&s, "port", "443"), ["a/p1"]);
        // Scheduling p2 moves it into the index; rescheduling p1 moves it out of n1.
        s.apply(pod("a", "p2", "2", "web", "n1")).unwrap();
        s.apply(pod("a", "p1", "2", "web", "n2")).unwrap();
        assert_eq!(by(&s, "node", "n1"), ["a/p2"]);
        assert_eq!(by(&s, "node", "n2"), ["a/p1"]);
        assert!(by(&s, "port", "80").is_empty(), "p1 lost its containers");
        assert_consistent(&s);
    }

    #[test]
    fn owner_index_uses_the_controller_owner_only() {
        let s = store();
        s.apply(owned(pod("a", "p1", "1", "web", "n1"), "rs-1", true)).unwrap();
        s.apply(owned(pod("a", "p2", "1", "web", "n1"), "rs-1", true)).unwrap();
        s.apply(owned(pod("a", "p3", "1", "web", "n1"), "rs-2", false)).unwrap();
        s.apply(pod("a", "p4", "1", "web", "n1")).unwrap();
        assert_eq!(by(&s, OWNER_INDEX, "rs-1"), ["a/p1", "a/p2"]);
        assert!(by(&s, OWNER_INDEX, "rs-2").is_empty(), "non-controller owners are not indexed");
        // Adoption by another controller moves the pod.
        s.apply(owned(pod("a", "p2", "2", "web", "n1"), "rs-3", true)).unwrap();
        assert_eq!(by(&s, OWNER_INDEX, "rs-1"), ["a/p1"]);
        assert_eq!(by(&s, OWNER_INDEX, "rs-3"), ["a/p2"]);
        assert_consistent(&s);
    }

    #[test]
    fn list_by_namespace_and_selector() {
        let s = store();
        s.apply(pod("b", "p2", "1", "web", "n1")).unwrap();
        s.apply(pod("a", "p1", "1", "web", "n1")).unwrap();
        s.apply(pod("a", "p0", "1", "db", "n1")).unwrap();
        s.apply(pod("c", "p3", "1", "db", "n1")).unwrap();
        assert_eq!(keys(&s.list(Some("a"), None)), ["a/p0", "a/p1"]);
        assert_eq!(keys(&s.list(None, None)), ["a/p0", "a/p1", "b/p2", "c/p3"]);
        assert_eq!(keys(&s.list(Some(""), None)), ["a/p0", "a/p1", "b/p2", "c/p3"]);
        let web = Selector::parse("app=web").unwrap();
        assert_eq!(keys(&s.list(Some("a"), Some(&web))), ["a/p1"]);
        assert_eq!(keys(&s.list(None, Some(&web))), ["a/p1", "b/p2"]);
        assert!(s.list(Some("zz"), None).is_empty());
        assert_eq!(keys(&s.snapshot()), ["a/p0", "a/p1", "b/p2", "c/p3"]);
        assert_eq!(by(&s, NAMESPACE_INDEX, "a"), ["a/p0", "a/p1"]);
    }

    #[test]
    fn selector_lists_read_the_label_index_and_agree_with_a_full_scan() {
        let s = store();
        for i in 0..60 {
            let (ns, app) = (format!("n{}", i % 3), ["web", "db", "cache"][i % 3 / 2 + i % 2]);
            let mut p = pod(&ns, &format!("p{i:02}"), "1", app, "n1");
            if i % 5 == 0 {
                p["metadata"]["labels"]["tier"] = json!("front");
            }
            s.apply(p).unwrap();
        }
        // Updates and deletes move objects between label sets.
        s.apply(pod("n0", "p00", "2", "db", "n1")).unwrap();
        s.delete(Some("n1"), "p01");
        assert_eq!(by(&s, LABEL_PAIRS_INDEX, "tier=front").len(), 11);
        let scan = |ns: Option<&str>, sel: &Selector| -> Vec<String> {
            let all = s.snapshot();
            all.iter().filter(|o| ns.is_none_or(|ns| o.namespace() == Some(ns)) && sel.matches(o)).map(|o| o.key().to_string()).collect()
        };
        for sel in
            ["app=web", "app=db,tier=front", "app in (web,cache)", "tier=front,app!=db", "app=none", "tier", "!tier", "app notin (db)"]
        {
            let sel = Selector::parse(sel).unwrap();
            for ns in [None, Some("n0"), Some("n1"), Some("zz")] {
                assert_eq!(keys(&s.list(ns, Some(&sel))), scan(ns, &sel), "{sel} in {ns:?}");
            }
        }
    }

    #[test]
    fn delete_removes_the_object_from_every_index() {
        let s = store();
        s.add_index("app", IndexSpec::parse("labels.app").unwrap()).unwrap();
        s.add_index("node", IndexSpec::parse("spec.nodeName").unwrap()).unwrap();
        s.apply(owned(pod("a", "p1", "1", "web", "n1"), "rs-1", true)).unwrap();
        s.apply(pod("a", "p2", "1", "db", "n2")).unwrap();
        match s.delete(Some("a"), "p1") {
            Some(Change::Deleted(o)) => assert_eq!(o.key(), "a/p1"),
            other => panic!("{other:?}"),
        }
        assert!(s.delete(Some("a"), "p1").is_none());
        assert!(s.get(Some("a"), "p1").is_none());
        assert!(by(&s, OWNER_INDEX, "rs-1").is_empty());
        assert!(by(&s, "app", "web").is_empty());
        assert!(by(&s, "node", "n1").is_empty());
        assert_eq!(by(&s, NAMESPACE_INDEX, "a"), ["a/p2"]);
        s.delete(Some("a"), "p2");
        assert!(s.is_empty());
        assert!(s.inner.read().indexes.iter().all(|i| i.map.is_empty()), "no empty sets left");
    }

    #[test]
    fn replace_reports_changes_and_fixes_indexes() {
        let s = store();
        s.add_index("app", IndexSpec::parse("labels.app").unwrap()).unwrap();
        s.apply(pod("a", "keep", "1", "web", "n1")).unwrap();
        s.apply(pod("a", "change", "1", "web", "n1")).unwrap();
        s.apply(pod("a", "gone", "1", "web", "n1")).unwrap();
        let keep = s.get(Some("a"), "keep").unwrap();
        let changes = s
            .replace(vec![pod("a", "keep", "1", "web", "n1"), pod("a", "change", "2", "db", "n1"), pod("b", "new", "1", "web", "n1")])
            .unwrap();
        let summary: Vec<(&str, &str)> = changes
            .iter()
            .map(|c| {
                let what = match c {
                    Change::Added(_) => "added",
                    Change::Updated { .. } => "updated",
                    Change::Deleted(_) => "deleted",
                    Change::Unchanged(_) => "unchanged",
                };
                (what, c.object().key())
            })
            .collect();
        assert_eq!(summary, [("unchanged", "a/keep"), ("updated", "a/change"), ("added", "b/new"), ("deleted", "a/gone")]);
        assert!(Arc::ptr_eq(&s.get(Some("a"), "keep").unwrap(), &keep), "unchanged object kept");
        assert_eq!(by(&s, "app", "web"), ["a/keep", "b/new"]);
        assert_eq!(by(&s, "app", "db"), ["a/change"]);
        assert_eq!(by(&s, NAMESPACE_INDEX, "a"), ["a/change", "a/keep"]);
        assert_consistent(&s);

        // One invalid object rejects the whole relist.
        let err = s.replace(vec![pod("c", "x", "1", "web", "n1"), json!({"metadata": {}})]);
        assert!(matches!(err, Err(Error::InvalidObject(_))));
        assert_eq!(s.len(), 3);
        // An empty relist deletes everything.
        assert_eq!(s.replace(vec![]).unwrap().len(), 3);
        assert!(s.is_empty());
        assert!(s.inner.read().indexes.iter().all(|i| i.map.is_empty()));
    }

    #[test]
    fn add_index_covers_objects_already_cached() {
        let s = store();
        s.apply(pod("a", "p1", "1", "web", "n1")).unwrap();
        s.apply(pod("a", "p2", "1", "db", "n2")).unwrap();
        s.add_index("node", IndexSpec::parse("spec.nodeName").unwrap()).unwrap();
        s.add_index("app", IndexSpec::Label("app".into())).unwrap();
        assert_eq!(by(&s, "node", "n1"), ["a/p1"]);
        assert_eq!(by(&s, "app", "db"), ["a/p2"]);
        s.apply(pod("a", "p2", "2", "web", "n1")).unwrap();
        assert_eq!(by(&s, "node", "n1"), ["a/p1", "a/p2"]);
        assert_eq!(by(&s, "app", "web"), ["a/p1", "a/p2"]);
        assert_consistent(&s);
    }

    #[test]
    fn index_names_conflicts_and_unknown_indexes() {
        let s = store();
        assert_eq!(s.index_names(), [NAMESPACE_INDEX, OWNER_INDEX, LABEL_PAIRS_INDEX]);
        let node = IndexSpec::parse("spec.nodeName").unwrap();
        s.add_index("node", node.clone()).unwrap();
        s.add_index("node", node).unwrap();
        assert_eq!(s.index_names(), [NAMESPACE_INDEX, OWNER_INDEX, LABEL_PAIRS_INDEX, "node"]);
        assert_eq!(s.add_index("node", IndexSpec::Label("node".into())), Err(Error::IndexConflict { name: "node".into() }));
        assert_eq!(s.add_index(OWNER_INDEX, IndexSpec::Label("x".into())), Err(Error::IndexConflict { name: OWNER_INDEX.into() }));
        s.add_index(NAMESPACE_INDEX, IndexSpec::Namespace).unwrap();
        assert_eq!(s.index_names().len(), 4);
        assert_eq!(s.by_index("nope", "x").unwrap_err(), Error::UnknownIndex { kind: KindRef::new("v1", "Pod"), index: "nope".into() });
    }

    #[test]
    fn cluster_scoped_objects_are_keyed_by_name() {
        let s = IndexedStore::new(KindRef::new("v1", "Namespace"));
        s.apply(json!({"metadata": {"name": "team-a", "resourceVersion": "1"}})).unwrap();
        assert_eq!(s.get(None, "team-a").unwrap().key(), "team-a");
        assert_eq!(s.get(Some(""), "team-a").unwrap().name(), "team-a");
        assert!(s.list(Some("team-a"), None).is_empty());
        assert!(matches!(s.delete(Some(""), "team-a"), Some(Change::Deleted(_))));
        assert!(s.is_empty());
    }

    #[test]
    fn readers_see_consistent_indexes_during_updates() {
        let s = Arc::new(store());
        s.add_index("app", IndexSpec::parse("labels.app").unwrap()).unwrap();
        for i in 0..50 {
            s.apply(pod("a", &format!("p{i}"), "0", "v0", "n1")).unwrap();
        }
        let writer = {
            let s = s.clone();
            std::thread::spawn(move || {
                for round in 1..=40 {
                    for i in 0..50 {
                        let app = format!("v{}", round % 3);
                        s.apply(pod("a", &format!("p{i}"), &round.to_string(), &app, "n1")).unwrap();
                    }
                }
            })
        };
        let mut reads = 0;
        while !writer.is_finished() || reads == 0 {
            for app in ["v0", "v1", "v2"] {
                for o in s.by_index("app", app).unwrap() {
                    assert_eq!(o.label("app"), Some(app), "{} returned for app={app}", o.key());
                }
                reads += 1;
            }
        }
        writer.join().unwrap();
        assert_eq!(by(&s, "app", "v1").len(), 50); // round 40 → v1
        assert_consistent(&s);
    }

    /// A Pod as an API server returns it: labels, annotations, a container, status and a
    /// managedFields block.
    fn realistic_pod(i: usize) -> Value {
        let rs = i % 50;
        json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {
                "name": format!("web-{rs}-{i:05}"), "namespace": format!("team-{}", i % 10),
                "uid": format!("6f1c2d3e-0000-4000-8000-{i:012}"), "resourceVersion": format!("{}", 100000 + i),
                "generation": 1, "creationTimestamp": "2024-05-01T10:00:00Z",
                "labels": {
                    "app.kubernetes.io/name": "web", "app.kubernetes.io/instance": format!("web-{rs}"),
                    "app.kubernetes.io/version": "1.4.2", "app.kubernetes.io/component": "frontend",
                    "app.kubernetes.io/part-of": "shop", "app.kubernetes.io/managed-by": "wasmloop",
                    "pod-template-hash": format!("7d9f8c{rs:04}"), "tier": "front", "env": "prod",
                    "team": format!("team-{}", i % 10)
                },
                "annotations": {
                    "prometheus.io/scrape": "true", "prometheus.io/port": "9090",
                    "kubectl.kubernetes.io/restartedAt": "2024-05-01T09:59:00Z",
                    "example.com/owner": "platform", "example.com/revision": "42"
                },
                "ownerReferences": [{
                    "apiVersion": "apps/v1", "kind": "ReplicaSet", "name": format!("web-{rs}"),
                    "uid": format!("rs-uid-{rs}"), "controller": true, "blockOwnerDeletion": true
                }],
                "managedFields": [{
                    "manager": "kube-controller-manager", "operation": "Update", "apiVersion": "v1",
                    "time": "2024-05-01T10:00:00Z", "fieldsType": "FieldsV1",
                    "fieldsV1": {"f:metadata": {"f:labels": {".": {}, "f:app": {}, "f:tier": {}},
                                 "f:ownerReferences": {".": {}, "k:{\"uid\":\"x\"}": {}}},
                                 "f:spec": {"f:containers": {"k:{\"name\":\"web\"}": {
                                     ".": {}, "f:image": {}, "f:name": {}, "f:ports": {}}}}}
                }, {
                    "manager": "kubelet", "operation": "Update", "apiVersion": "v1",
                    "time": "2024-05-01T10:00:05Z", "fieldsType": "FieldsV1", "subresource": "status",
                    "fieldsV1": {"f:status": {"f:conditions": {}, "f:containerStatuses": {},
                                 "f:hostIP": {}, "f:phase": {}, "f:podIP": {}, "f:startTime": {}}}
                }]
            },
            "spec": {
                "nodeName": format!("node-{}", i % 100),
                "containers": [{
                    "name": "web", "image": "registry.example.com/shop/web:1.4.2",
                    "ports": [{"containerPort": 8080, "protocol": "TCP"}],
                    "resources": {"requests": {"cpu": "100m", "memory": "128Mi"},
                                  "limits": {"memory": "256Mi"}},
                    "env": [{"name": "MODE", "value": "prod"}],
                    "volumeMounts": [{"name": "kube-api-access", "mountPath": "/var/run/secrets/kubernetes.io/serviceaccount", "readOnly": true}],
                    "terminationMessagePath": "/dev/termination-log", "imagePullPolicy": "IfNotPresent"
                }],
                "restartPolicy": "Always", "terminationGracePeriodSeconds": 30, "dnsPolicy": "ClusterFirst",
                "serviceAccountName": "default", "schedulerName": "default-scheduler",
                "tolerations": [{"key": "node.kubernetes.io/not-ready", "operator": "Exists",
                                 "effect": "NoExecute", "tolerationSeconds": 300}]
            },
            "status": {
                "phase": "Running", "hostIP": "10.0.0.1", "podIP": format!("10.1.{}.{}", i / 250, i % 250),
                "startTime": "2024-05-01T10:00:01Z", "qosClass": "Burstable",
                "conditions": [
                    {"type": "Ready", "status": "True", "lastTransitionTime": "2024-05-01T10:00:05Z"},
                    {"type": "PodScheduled", "status": "True", "lastTransitionTime": "2024-05-01T10:00:00Z"}
                ],
                "containerStatuses": [{"name": "web", "ready": true, "restartCount": 0,
                                       "image": "registry.example.com/shop/web:1.4.2",
                                       "state": {"running": {"startedAt": "2024-05-01T10:00:04Z"}}}]
            }
        })
    }

    #[test]
    fn ten_thousand_pods_index_exactly() {
        const N: usize = 10_000;
        let s = store();
        s.add_index("node", IndexSpec::parse("spec.nodeName").unwrap()).unwrap();
        s.add_index("instance", IndexSpec::parse("labels.app.kubernetes.io/instance").unwrap()).unwrap();
        let pods: Vec<Value> = (0..N).map(realistic_pod).collect();
        let raw_bytes: usize = pods.iter().map(|p| p.to_string().len()).sum();
        let changes = s.replace(pods).unwrap();
        assert_eq!(changes.len(), N);
        assert!(changes.iter().all(|c| matches!(c, Change::Added(_))));
        assert_eq!(s.len(), N);

        let expect = |pred: &dyn Fn(usize) -> bool| {
            let mut keys: Vec<String> = (0..N).filter(|&i| pred(i)).map(|i| format!("team-{}/web-{}-{i:05}", i % 10, i % 50)).collect();
            keys.sort();
            keys
        };
        assert_eq!(by(&s, "node", "node-7"), expect(&|i| i % 100 == 7));
        assert_eq!(by(&s, OWNER_INDEX, "rs-uid-13"), expect(&|i| i % 50 == 13));
        assert_eq!(by(&s, "instance", "web-13"), expect(&|i| i % 50 == 13));
        assert_eq!(by(&s, NAMESPACE_INDEX, "team-3").len(), N / 10);
        let sel = Selector::parse("team=team-3,app.kubernetes.io/instance in (web-13,web-23)").unwrap();
        let listed: Vec<String> = s.list(Some("team-3"), Some(&sel)).iter().map(|o| o.key().into()).collect();
        assert_eq!(listed, expect(&|i| i % 10 == 3 && (i % 50 == 13 || i % 50 == 23)));

        let all = s.snapshot();
        assert!(all.iter().all(|o| !o.json().unwrap().contains("managedFields")));
        // A lower bound (no allocator overhead, no map slots), for orientation only.
        let cached: usize = all.iter().map(|o| o.approx_heap_bytes()).sum();
        eprintln!("{N} pods: {} bytes of JSON each as received, ~{} bytes each cached (lower bound)", raw_bytes / N, cached / N);

        // A relist with nothing changed reports everything unchanged and keeps the indexes.
        let changes = s.replace((0..N).map(realistic_pod).collect()).unwrap();
        assert!(changes.iter().all(Change::is_unchanged));
        assert_eq!(by(&s, "node", "node-7").len(), N / 100);
    }

    #[test]
    fn a_dictionary_is_wanted_once_and_packs_every_object_keeping_reads_and_indexes() {
        let s = store();
        s.add_index("node", IndexSpec::parse("spec.nodeName").unwrap()).unwrap();
        s.replace((0..DICTIONARY_AT - 1).map(realistic_pod).collect()).unwrap();
        assert!(!s.wants_dictionary(), "below the threshold");
        s.apply(realistic_pod(DICTIONARY_AT - 1)).unwrap();
        let before: Vec<(String, String)> = s.snapshot().iter().map(|o| (o.key().into(), o.json().unwrap().into_owned())).collect();
        assert!(s.wants_dictionary());
        assert!(!s.wants_dictionary(), "claimed once");

        let packing = s.build_dictionary();
        assert!(packing.dictionary_bytes > 0 && packing.dictionary_bytes <= DICTIONARY_BYTES, "{packing:?}");
        assert_eq!(packing.packed, DICTIONARY_AT);
        assert!(packing.packed_bytes * 5 < packing.json_bytes, "{packing:?}");
        let after: Vec<(String, String)> = s.snapshot().iter().map(|o| (o.key().into(), o.json().unwrap().into_owned())).collect();
        assert_eq!(before, after, "every object reads back the same JSON");
        assert!(s.snapshot().iter().all(|o| o.is_packed()));
        assert_consistent(&s);
        assert_eq!(by(&s, "node", "node-7").len(), DICTIONARY_AT / 100);

        // Objects arriving later are packed as they come, updates and relists included.
        s.apply(realistic_pod(5000)).unwrap();
        let mut changed = realistic_pod(3);
        changed["metadata"]["resourceVersion"] = json!("9");
        changed["spec"]["nodeName"] = json!("node-new");
        assert!(matches!(s.apply(changed.clone()).unwrap(), Change::Updated { .. }));
        let read = s.get(Some("team-3"), "web-3-00003").unwrap();
        assert!(read.is_packed());
        changed["metadata"].as_object_mut().unwrap().remove("managedFields");
        assert_eq!(read.value(), changed);
        assert_eq!(by(&s, "node", "node-new"), ["team-3/web-3-00003"]);
        let changes = s.replace((0..DICTIONARY_AT).map(realistic_pod).collect()).unwrap();
        assert_eq!(changes.iter().filter(|c| matches!(c, Change::Updated { .. })).count(), 1, "pod 3 back to its listed version");
        assert!(s.snapshot().iter().all(|o| o.is_packed()));
        assert_consistent(&s);
        assert!(!s.wants_dictionary(), "built once");
    }

    #[test]
    fn small_objects_pack_and_read_back_exactly() {
        let s = store();
        for i in 0..DICTIONARY_AT {
            s.apply(json!({"metadata": {"name": format!("n{i}"), "resourceVersion": "1"}})).unwrap();
        }
        assert!(s.wants_dictionary());
        let packing = s.build_dictionary();
        assert!(packing.packed == DICTIONARY_AT && packing.packed_bytes < packing.json_bytes, "{packing:?}");
        assert_eq!(s.get(None, "n7").unwrap().json().unwrap(), r#"{"metadata":{"name":"n7","resourceVersion":"1"}}"#);
    }

    #[test]
    fn a_long_first_list_is_compressed_as_it_arrives_from_its_dictionary_at_object() {
        let s = store();
        let mut listed: Vec<Listed> = (0..DICTIONARY_AT - 1).map(|i| s.prepare(realistic_pod(i)).unwrap()).collect();
        assert!(s.dictionary_for_list(&mut listed).is_none(), "one object short");
        listed.push(s.prepare(realistic_pod(DICTIONARY_AT - 1)).unwrap());
        let packing = s.dictionary_for_list(&mut listed).expect("built from the list");
        assert!(packing.packed == DICTIONARY_AT && packing.packed_bytes < packing.json_bytes, "{packing:?}");
        // Objects prepared from now on arrive compressed.
        listed.push(s.prepare(realistic_pod(DICTIONARY_AT)).unwrap());
        assert!(s.dictionary_for_list(&mut listed).is_none(), "built once");
        assert!(!s.wants_dictionary(), "the owner's post-list build is not due either");
        let changes = s.replace_listed(listed);
        assert_eq!(changes.len(), DICTIONARY_AT + 1);
        assert!(s.snapshot().iter().all(|o| o.is_packed()));
        let mut want = realistic_pod(7);
        want["metadata"].as_object_mut().unwrap().remove("managedFields");
        let key = key_of(&want).unwrap();
        let (ns, name) = key.split_once('/').map_or((None, key.as_str()), |(n, m)| (Some(n), m));
        assert_eq!(s.get(ns, name).unwrap().value(), want);
        assert_consistent(&s);
    }
}
