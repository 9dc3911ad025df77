//! Indexes shared by definition: controllers reading one informer's store each declare indexes
//! under names of their own; the store keeps one index per definition ([`IndexSpec::shared_name`])
//! for all of them, counts its users, drops it with the last ([`IndexUse`]), and says what its
//! entries cost ([`IndexedStore::index_bytes`]), so each plugin's index memory can be charged to
//! it. A plugin's own names for them live in its [`CacheView`](super::CacheView).

use std::sync::Arc;

use super::index::Index;
use super::{CachedObject, Error, IndexSpec, IndexedStore, Result};

impl IndexedStore {
    /// Use the index defined by `spec`, added (under [`IndexSpec::shared_name`]) if no one uses
    /// it yet: every user of one definition shares one index, whatever it calls it. The index
    /// goes when its last [`IndexUse`] is dropped.
    pub fn acquire_index(self: &Arc<Self>, spec: IndexSpec) -> Result<IndexUse> {
        let name = spec.shared_name();
        self.insert_index(&name, spec, Some(1))?;
        Ok(IndexUse { store: self.clone(), name })
    }

    /// Estimated heap bytes of the entries of index `name` ([`Index::approx_bytes`]); None if
    /// there is no such index.
    pub fn index_bytes(&self, name: &str) -> Option<usize> {
        self.inner.read().index(name).map(Index::approx_bytes)
    }

    /// The first `limit` objects (in key order) whose index `name` has `value`: what a mapping
    /// within its cap looks at.
    pub fn by_index_up_to(&self, name: &str, value: &str, limit: usize) -> Result<Vec<Arc<CachedObject>>> {
        let found = self.inner.read().lookup_up_to(name, value, limit);
        found.ok_or_else(|| Error::UnknownIndex { kind: self.kind().clone(), index: name.into() })
    }

    /// One user fewer for the shared index `name`; removed with its entries when none is left.
    fn release_index(&self, name: &str) {
        let mut inner = self.inner.write();
        let Some(at) = inner.indexes.iter().position(|i| &*i.name == name) else { return };
        match &mut inner.indexes[at].users {
            Some(n) if *n > 1 => *n -= 1,
            Some(_) => {
                // Its values, if it reads fields, are the k-th of each object's remembered ones.
                let field = inner.indexes[at].spec.reads_json().then(|| inner.indexes[..at].iter().filter(|i| i.spec.reads_json()).count());
                inner.indexes.remove(at);
                if let Some(k) = field {
                    for entry in inner.objects.values_mut() {
                        let mut all = std::mem::take(&mut entry.field_values).into_vec();
                        all.remove(k);
                        entry.field_values = all.into_boxed_slice();
                    }
                }
            }
            None => {}
        }
    }
}

/// A controller's use of a shared index ([`IndexedStore::acquire_index`]): the index stays while
/// one is held.
pub struct IndexUse {
    store: Arc<IndexedStore>,
    name: String,
}

impl IndexUse {
    /// The name the store knows the index by ([`IndexSpec::shared_name`]).
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The store it indexes.
    pub fn store(&self) -> &Arc<IndexedStore> {
        &self.store
    }

    /// Estimated heap bytes of its entries now.
    pub fn bytes(&self) -> usize {
        self.store.index_bytes(&self.name).unwrap_or_default()
    }
}

impl Drop for IndexUse {
    fn drop(&mut self) {
        self.store.release_index(&self.name);
    }
}

impl std::fmt::Debug for IndexUse {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("IndexUse").field("kind", self.store.kind()).field("name", &self.name).finish()
    }
}

#[cfg(test)]
mod tests {
    use serde_json::{Value, json};

    use super::*;
    use crate::kinds::KindRef;

    fn pod(name: &str, rv: &str, app: &str, node: &str) -> Value {
        json!({"metadata": {"namespace": "a", "name": name, "resourceVersion": rv, "labels": {"app": app}}, "spec": {"nodeName": node}})
    }

    fn names(s: &IndexedStore, index: &str, value: &str) -> Vec<String> {
        s.by_index(index, value).unwrap().iter().map(|o| o.name().to_string()).collect()
    }

    #[test]
    fn equal_definitions_share_one_index_that_goes_with_its_last_user() {
        let s = Arc::new(IndexedStore::new(KindRef::new("v1", "Pod")));
        s.apply(pod("p1", "1", "web", "n1")).unwrap();
        let node = IndexSpec::parse("spec.nodeName").unwrap();
        let first = s.acquire_index(node.clone()).unwrap();
        let second = s.acquire_index(node.clone()).unwrap();
        let app = s.acquire_index(IndexSpec::parse("labels.app").unwrap()).unwrap();
        assert_eq!((first.name(), app.name()), ("field:spec.nodeName", "label:app"));
        assert_eq!(first.name(), second.name(), "one index for one definition");
        s.apply(pod("p2", "1", "db", "n1")).unwrap();
        assert_eq!(names(&s, first.name(), "n1"), ["p1", "p2"]);
        assert!(first.bytes() > 0 && first.bytes() == second.bytes());
        drop(first);
        assert_eq!(names(&s, second.name(), "n1"), ["p1", "p2"], "the other user still has it");
        let name = second.name().to_owned();
        drop(second);
        assert!(s.by_index(&name, "n1").is_err(), "gone with its last user");
        assert_eq!(s.index_bytes(&name), None);
        // The store still indexes and updates with the field index gone.
        s.apply(pod("p1", "2", "db", "n2")).unwrap();
        assert_eq!(names(&s, app.name(), "db"), ["p1", "p2"]);
        // Acquired again: computed over what is cached now.
        let again = s.acquire_index(node).unwrap();
        assert_eq!(names(&s, again.name(), "n2"), ["p1"]);
        s.delete(Some("a"), "p1");
        assert!(names(&s, again.name(), "n2").is_empty());
    }

    #[test]
    fn a_field_index_released_between_others_leaves_theirs_intact() {
        let s = Arc::new(IndexedStore::new(KindRef::new("v1", "Pod")));
        for i in 0..20 {
            s.apply(json!({"metadata": {"namespace": "a", "name": format!("p{i}"), "resourceVersion": "1"},
                           "spec": {"a": format!("a{}", i % 3), "b": format!("b{}", i % 4), "c": format!("c{}", i % 5)}}))
                .unwrap();
        }
        let [a, b, c] = ["spec.a", "spec.b", "spec.c"].map(|p| s.acquire_index(IndexSpec::parse(p).unwrap()).unwrap());
        drop(b);
        // Updates and deletes remove exactly the old entries of the indexes left.
        for i in 0..20 {
            s.apply(json!({"metadata": {"namespace": "a", "name": format!("p{i}"), "resourceVersion": "2"},
                           "spec": {"a": "a9", "b": "b9", "c": format!("c{}", i % 2)}}))
                .unwrap();
        }
        assert_eq!(names(&s, a.name(), "a9").len(), 20);
        assert!(names(&s, a.name(), "a0").is_empty());
        assert_eq!(names(&s, c.name(), "c1").len(), 10);
        assert!(names(&s, c.name(), "c4").is_empty());
    }

    #[test]
    fn index_bytes_follow_the_entries() {
        let s = Arc::new(IndexedStore::new(KindRef::new("v1", "Pod")));
        let app = s.acquire_index(IndexSpec::parse("labels.app").unwrap()).unwrap();
        assert_eq!(app.bytes(), 0);
        for i in 0..100 {
            s.apply(pod(&format!("p{i}"), "1", &format!("app-{}", i % 10), "n")).unwrap();
        }
        let ten_values = app.bytes();
        for i in 0..100 {
            s.apply(pod(&format!("p{i}"), "2", &format!("app-{i}"), "n")).unwrap();
        }
        let hundred_values = app.bytes();
        assert!(hundred_values > 4 * ten_values, "{ten_values} → {hundred_values}: a distinct value costs a B-tree leaf");
        for i in 0..100 {
            s.delete(Some("a"), &format!("p{i}"));
        }
        assert_eq!(app.bytes(), 0, "nothing left, nothing counted");
    }
}
