//! [`CacheView`]: the stores one reconciler may read, behind [`CacheRead`].

use std::collections::HashMap;
use std::sync::Arc;

use serde_json::Value;

use super::index::{LABEL_PAIRS_INDEX, NAMESPACE_INDEX, OWNER_INDEX};
use super::object::str_field;
use super::{CacheRead, CachedObject, Error, IndexSpec, IndexUse, IndexedStore, Result, Selector};
use crate::kinds::KindRef;

/// A set of stores keyed by kind, and the indexes one reader declared on them. Reading a kind not
/// in the view is `NotGranted`.
///
/// A kind may have several stores: one per namespace when the plugin's read grants are limited
/// to some namespaces (each watched on its own), and one per selector when the plugin watches
/// the kind with several (the reconciled kind's and a watch's). Reads go to every store of the
/// kind and return each object once.
///
/// Index names are the reader's own: [`declare_index`](Self::declare_index) maps a name to a
/// definition, which the stores share with every other reader declaring it under any name, so
/// one plugin's name can neither block nor reach another plugin's index. Reads by index know the
/// declared names and the built-in `namespace`, `owner` and `label=value`.
#[derive(Clone, Debug, Default)]
pub struct CacheView {
    stores: HashMap<KindRef, Vec<Arc<IndexedStore>>>,
    /// Per kind: the reader's index name → the stores' name for its definition.
    indexes: HashMap<KindRef, HashMap<String, String>>,
    /// The shared indexes this view holds, one per (store, definition).
    uses: Vec<Arc<IndexUse>>,
}

impl CacheView {
    /// An empty view: every read is `NotGranted`.
    pub fn new() -> Self {
        Self::default()
    }

    /// This view plus `store`.
    #[cfg(test)]
    fn with_store(mut self, store: Arc<IndexedStore>) -> Self {
        self.insert(store);
        self
    }

    /// Add `store` to the stores of its kind (once).
    pub fn insert(&mut self, store: Arc<IndexedStore>) {
        let stores = self.stores.entry(store.kind().clone()).or_default();
        if !stores.iter().any(|s| Arc::ptr_eq(s, &store)) {
            stores.push(store);
        }
    }

    /// Declare index `name` on `kind` as `spec`: every store of the kind this view holds now gets
    /// it (shared with other readers of the store). Declaring a name again covers stores added
    /// since; the same name with another definition is an `IndexConflict`.
    pub fn declare_index(&mut self, kind: &KindRef, name: &str, spec: IndexSpec) -> Result<()> {
        let shared = spec.shared_name();
        let names = self.indexes.entry(kind.clone()).or_default();
        match names.get(name) {
            Some(existing) if *existing != shared => return Err(Error::IndexConflict { name: name.into() }),
            Some(_) => {}
            None => {
                names.insert(name.to_owned(), shared.clone());
            }
        }
        for store in self.stores.get(kind).into_iter().flatten() {
            if !self.uses.iter().any(|u| u.name() == shared && Arc::ptr_eq(u.store(), store)) {
                self.uses.push(Arc::new(store.acquire_index(spec.clone())?));
            }
        }
        Ok(())
    }

    /// The stores' name of the index `name` the reader reads on `kind`: a declared one's, or a
    /// built-in's; None if it knows no such index.
    pub fn index_name(&self, kind: &KindRef, name: &str) -> Option<&str> {
        match self.indexes.get(kind).and_then(|n| n.get(name)) {
            Some(shared) => Some(shared),
            None => [NAMESPACE_INDEX, OWNER_INDEX, LABEL_PAIRS_INDEX].into_iter().find(|b| *b == name),
        }
    }

    /// Estimated heap bytes of the entries of the indexes declared in this view (each counted in
    /// full, though other readers may share it).
    pub fn index_bytes(&self) -> usize {
        self.uses.iter().map(|u| u.bytes()).sum()
    }

    /// The stores for `kind` (empty if the view has none).
    pub fn stores(&self, kind: &KindRef) -> &[Arc<IndexedStore>] {
        self.stores.get(kind).map(Vec::as_slice).unwrap_or_default()
    }

    /// The kinds in this view.
    pub fn kinds(&self) -> impl Iterator<Item = &KindRef> {
        self.stores.keys()
    }

    /// A view holding `values`, one store per `apiVersion`/`kind` (both required). For offline
    /// runs and tests; a later object with the same key replaces an earlier one.
    pub fn from_objects(values: impl IntoIterator<Item = Value>) -> Result<Self> {
        let mut view = Self::new();
        for value in values {
            let kind = KindRef::new(str_field(&value, "apiVersion"), str_field(&value, "kind"));
            if kind.api_version.is_empty() || kind.kind.is_empty() {
                let name = str_field(&value["metadata"], "name");
                return Err(Error::InvalidObject(format!("object {name:?} needs apiVersion and kind")));
            }
            let stores = view.stores.entry(kind.clone()).or_default();
            if stores.is_empty() {
                stores.push(Arc::new(IndexedStore::new(kind)));
            }
            stores[0].apply(value)?;
        }
        Ok(view)
    }

    fn granted(&self, kind: &KindRef) -> Result<&[Arc<IndexedStore>]> {
        self.stores.get(kind).map(Vec::as_slice).ok_or_else(|| Error::NotGranted(kind.clone()))
    }
}

impl CacheRead for CacheView {
    fn get(&self, kind: &KindRef, namespace: Option<&str>, name: &str) -> Result<Option<Arc<CachedObject>>> {
        Ok(self.granted(kind)?.iter().find_map(|s| s.get(namespace, name)))
    }

    fn list(&self, kind: &KindRef, namespace: Option<&str>, selector: Option<&str>) -> Result<Vec<Arc<CachedObject>>> {
        let stores = self.granted(kind)?;
        let selector = selector.map(Selector::parse).transpose()?.filter(|s| !s.is_everything());
        let out: Vec<_> = stores.iter().flat_map(|s| s.list(namespace, selector.as_ref())).collect();
        Ok(once_each(out, stores.len()))
    }

    fn by_index(&self, kind: &KindRef, index: &str, value: &str) -> Result<Vec<Arc<CachedObject>>> {
        let stores = self.granted(kind)?;
        let name = self.index_name(kind, index).ok_or_else(|| Error::UnknownIndex { kind: kind.clone(), index: index.into() })?;
        let mut out = Vec::new();
        for store in stores {
            out.extend(store.by_index(name, value)?);
        }
        Ok(once_each(out, stores.len()))
    }
}

/// Objects from several stores sorted by key, each key once (stores of one kind with different
/// selectors overlap).
fn once_each(mut objects: Vec<Arc<CachedObject>>, stores: usize) -> Vec<Arc<CachedObject>> {
    if stores > 1 {
        objects.sort_by(|a, b| a.key().cmp(b.key()));
        objects.dedup_by(|a, b| a.key() == b.key());
    }
    objects
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::cache::{IndexSpec, OWNER_INDEX};

    fn pods() -> KindRef {
        KindRef::new("v1", "Pod")
    }

    fn view() -> CacheView {
        CacheView::from_objects([
            json!({"apiVersion": "v1", "kind": "Pod",
                   "metadata": {"name": "p1", "namespace": "a", "labels": {"app": "web"},
                                "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet",
                                                     "name": "rs", "uid": "rs-1", "controller": true}]}}),
            json!({"apiVersion": "v1", "kind": "Pod",
                   "metadata": {"name": "p2", "namespace": "b", "labels": {"app": "db"}}}),
            json!({"apiVersion": "apps/v1", "kind": "ReplicaSet",
                   "metadata": {"name": "rs", "namespace": "a", "uid": "rs-1"}}),
        ])
        .unwrap()
    }

    fn keys(objs: Vec<Arc<CachedObject>>) -> Vec<String> {
        objs.iter().map(|o| o.key().to_string()).collect()
    }

    #[test]
    fn from_objects_groups_by_kind_and_reads_through_cache_read() {
        let v = view();
        let mut kinds: Vec<_> = v.kinds().cloned().collect();
        kinds.sort();
        assert_eq!(kinds, [KindRef::new("apps/v1", "ReplicaSet"), pods()]);
        let read: &dyn CacheRead = &v;
        assert_eq!(read.get(&pods(), Some("a"), "p1").unwrap().unwrap().label("app"), Some("web"));
        assert!(read.get(&pods(), Some("b"), "p1").unwrap().is_none());
        assert_eq!(keys(read.list(&pods(), None, None).unwrap()), ["a/p1", "b/p2"]);
        assert_eq!(keys(read.list(&pods(), None, Some("app in (db)")).unwrap()), ["b/p2"]);
        assert_eq!(keys(read.list(&pods(), Some("a"), Some("")).unwrap()), ["a/p1"]);
        assert_eq!(keys(read.by_index(&pods(), OWNER_INDEX, "rs-1").unwrap()), ["a/p1"]);
        let rs = KindRef::new("apps/v1", "ReplicaSet");
        assert_eq!(read.get(&rs, Some("a"), "rs").unwrap().unwrap().uid(), "rs-1");
    }

    #[test]
    fn errors_for_ungranted_kinds_unknown_indexes_and_bad_selectors() {
        let v = view();
        let secrets = KindRef::new("v1", "Secret");
        assert_eq!(v.get(&secrets, None, "x").unwrap_err(), Error::NotGranted(secrets.clone()));
        assert_eq!(v.list(&secrets, None, None).unwrap_err(), Error::NotGranted(secrets.clone()));
        assert_eq!(v.by_index(&secrets, OWNER_INDEX, "x").unwrap_err(), Error::NotGranted(secrets));
        assert_eq!(v.by_index(&pods(), "node", "n1").unwrap_err(), Error::UnknownIndex { kind: pods(), index: "node".into() });
        assert!(matches!(v.list(&pods(), None, Some("app in web")).unwrap_err(), Error::InvalidSelector { .. }));
        // Indexes declared in the view are readable by their declared names.
        let mut v = v;
        v.declare_index(&pods(), "app", IndexSpec::Label("app".into())).unwrap();
        assert_eq!(keys(v.by_index(&pods(), "app", "db").unwrap()), ["b/p2"]);
        assert_eq!(
            v.declare_index(&pods(), "app", IndexSpec::Label("tier".into())),
            Err(Error::IndexConflict { name: "app".into() }),
            "one name, one definition, within a view"
        );
    }

    #[test]
    fn views_are_built_from_stores() {
        let store = Arc::new(IndexedStore::new(pods()));
        store.apply(json!({"metadata": {"name": "p"}})).unwrap();
        let mut v = CacheView::new();
        assert!(v.get(&pods(), None, "p").is_err());
        v.insert(store.clone());
        assert!(v.get(&pods(), None, "p").unwrap().is_some());
        let v = CacheView::new().with_store(store.clone()).with_store(store);
        assert_eq!(v.stores(&pods()).len(), 1, "a store is added once");
    }

    #[test]
    fn several_stores_of_one_kind_read_as_one() {
        let a = Arc::new(IndexedStore::new(pods()));
        a.apply(json!({"metadata": {"name": "p", "namespace": "a", "labels": {"app": "web"}}})).unwrap();
        let b = Arc::new(IndexedStore::new(pods()));
        b.apply(json!({"metadata": {"name": "p", "namespace": "b", "labels": {"app": "web"}}})).unwrap();
        let v = CacheView::new().with_store(b).with_store(a);
        assert_eq!(keys(v.list(&pods(), None, Some("app=web")).unwrap()), ["a/p", "b/p"]);
        assert_eq!(keys(v.list(&pods(), Some("b"), None).unwrap()), ["b/p"]);
        assert!(v.get(&pods(), Some("a"), "p").unwrap().is_some());
        assert!(v.get(&pods(), Some("c"), "p").unwrap().is_none());
        assert_eq!(keys(v.by_index(&pods(), crate::cache::NAMESPACE_INDEX, "b").unwrap()), ["b/p"]);
    }

    #[test]
    fn overlapping_stores_return_each_object_once() {
        // The reconciled kind's store (selector `app`) and a watch's (selector `tier=db`) overlap.
        let primary = Arc::new(IndexedStore::new(pods()));
        let watched = Arc::new(IndexedStore::new(pods()));
        let both = json!({"metadata": {"name": "both", "namespace": "a", "labels": {"app": "x", "tier": "db"}}});
        primary.apply(both.clone()).unwrap();
        watched.apply(both).unwrap();
        primary.apply(json!({"metadata": {"name": "app-only", "namespace": "a", "labels": {"app": "x"}}})).unwrap();
        watched.apply(json!({"metadata": {"name": "db-only", "namespace": "a", "labels": {"tier": "db"}}})).unwrap();
        let v = CacheView::new().with_store(primary).with_store(watched);
        assert_eq!(keys(v.list(&pods(), None, None).unwrap()), ["a/app-only", "a/both", "a/db-only"]);
        assert_eq!(keys(v.by_index(&pods(), crate::cache::NAMESPACE_INDEX, "a").unwrap()), ["a/app-only", "a/both", "a/db-only"]);
        assert!(v.get(&pods(), Some("a"), "db-only").unwrap().is_some(), "the watch's objects are readable");
    }

    #[test]
    fn index_names_are_each_readers_own_and_equal_definitions_are_shared() {
        let store = Arc::new(IndexedStore::new(pods()));
        store
            .apply(json!({"metadata": {"name": "p", "namespace": "a", "labels": {"app": "web", "tier": "db"}}, "spec": {"n": "n1"}}))
            .unwrap();
        let (mut first, mut second) = (CacheView::new().with_store(store.clone()), CacheView::new().with_store(store.clone()));
        // The same name, other definitions: each reader gets its own.
        first.declare_index(&pods(), "by", IndexSpec::Label("app".into())).unwrap();
        second.declare_index(&pods(), "by", IndexSpec::Label("tier".into())).unwrap();
        assert_eq!(keys(first.by_index(&pods(), "by", "web").unwrap()), ["a/p"]);
        assert!(first.by_index(&pods(), "by", "db").unwrap().is_empty());
        assert_eq!(keys(second.by_index(&pods(), "by", "db").unwrap()), ["a/p"]);
        // Another name, the same definition: one index in the store.
        second.declare_index(&pods(), "app", IndexSpec::Label("app".into())).unwrap();
        assert_eq!(first.index_name(&pods(), "by"), second.index_name(&pods(), "app"));
        assert!(first.index_bytes() > 0);
        // What a reader did not declare it cannot read, even where another reader's index is.
        let shared = first.index_name(&pods(), "by").unwrap().to_owned();
        assert_eq!(first.by_index(&pods(), &shared, "web").unwrap_err(), Error::UnknownIndex { kind: pods(), index: shared.clone() });
        assert_eq!(keys(first.by_index(&pods(), crate::cache::NAMESPACE_INDEX, "a").unwrap()), ["a/p"], "built-ins are readable");
        // The index lives while a view holds it.
        drop(second);
        assert_eq!(keys(first.by_index(&pods(), "by", "web").unwrap()), ["a/p"]);
        drop(first);
        assert_eq!(store.index_bytes(&shared), None);
    }

    #[test]
    fn from_objects_requires_api_version_and_kind() {
        let err = CacheView::from_objects([json!({"kind": "Pod", "metadata": {"name": "p"}})]).unwrap_err();
        assert_eq!(err, Error::InvalidObject(r#"object "p" needs apiVersion and kind"#.into()));
        let err = CacheView::from_objects([json!({"apiVersion": "v1", "kind": "Pod"})]).unwrap_err();
        assert_eq!(err, Error::InvalidObject("metadata is missing".into()));
    }
}
