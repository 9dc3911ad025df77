//! [`Kept`]: the cache as one reconcile saw it, so another version of the reconciler can be
//! given the same objects later (a shadow candidate, compared with the serving version).
//!
//! While the serving call runs, [`Kept`] answers every read from the live cache and keeps the
//! answer: the cache's own shared objects (`Arc`s, no copy), by query. Afterwards
//! [`Kept::replaying`] answers a query the serving call made with what it got then, whatever
//! the cache holds by now, and any other query (another version may read more) from the live
//! cache. A read that failed is not kept: it fails again or answers as the cache does then.

use std::collections::HashMap;
use std::sync::Arc;

use parking_lot::Mutex;

use super::{CacheRead, CachedObject, Result, SharedCache};
use crate::kinds::KindRef;

/// One read, as its arguments name it (the same whether the guest asked for objects, metadata
/// or a packed buffer: all are built from the same objects).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
enum Query {
    Get { kind: KindRef, namespace: Option<String>, name: String },
    List { kind: KindRef, namespace: Option<String>, selector: Option<String> },
    ByIndex { kind: KindRef, index: String, value: String },
}

impl Query {
    fn get(kind: &KindRef, namespace: Option<&str>, name: &str) -> Self {
        Query::Get { kind: kind.clone(), namespace: namespace.map(str::to_owned), name: name.to_owned() }
    }

    fn list(kind: &KindRef, namespace: Option<&str>, selector: Option<&str>) -> Self {
        Query::List { kind: kind.clone(), namespace: namespace.map(str::to_owned), selector: selector.map(str::to_owned) }
    }

    fn by_index(kind: &KindRef, index: &str, value: &str) -> Self {
        Query::ByIndex { kind: kind.clone(), index: index.to_owned(), value: value.to_owned() }
    }
}

/// A cache that keeps every answer it gives (see the module).
pub struct Kept {
    live: SharedCache,
    answers: Mutex<HashMap<Query, Vec<Arc<CachedObject>>>>,
}

impl Kept {
    /// Read `live`, keeping the answers.
    pub fn new(live: SharedCache) -> Self {
        Self { live, answers: Mutex::new(HashMap::new()) }
    }

    /// The kept answers, with `live` (the cache as it is when they are replayed) for queries
    /// they lack.
    pub fn replaying(self: &Arc<Self>, live: SharedCache) -> SharedCache {
        Arc::new(Replaying { kept: self.clone(), live })
    }

    /// How many distinct reads were kept.
    pub fn len(&self) -> usize {
        self.answers.lock().len()
    }

    /// Whether no read was kept.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    fn keep(&self, query: Query, objects: &[Arc<CachedObject>]) {
        // The first answer to a query is the one kept (a call reading twice saw it first).
        self.answers.lock().entry(query).or_insert_with(|| objects.to_vec());
    }

    fn kept(&self, query: &Query) -> Option<Vec<Arc<CachedObject>>> {
        self.answers.lock().get(query).cloned()
    }
}

impl CacheRead for Kept {
    fn get(&self, kind: &KindRef, namespace: Option<&str>, name: &str) -> Result<Option<Arc<CachedObject>>> {
        let found = self.live.get(kind, namespace, name)?;
        self.keep(Query::get(kind, namespace, name), found.as_slice());
        Ok(found)
    }

    fn list(&self, kind: &KindRef, namespace: Option<&str>, selector: Option<&str>) -> Result<Vec<Arc<CachedObject>>> {
        let found = self.live.list(kind, namespace, selector)?;
        self.keep(Query::list(kind, namespace, selector), &found);
        Ok(found)
    }

    fn by_index(&self, kind: &KindRef, index: &str, value: &str) -> Result<Vec<Arc<CachedObject>>> {
        let found = self.live.by_index(kind, index, value)?;
        self.keep(Query::by_index(kind, index, value), &found);
        Ok(found)
    }
}

/// [`Kept`] answers first, then the live cache.
struct Replaying {
    kept: Arc<Kept>,
    live: SharedCache,
}

impl CacheRead for Replaying {
    fn get(&self, kind: &KindRef, namespace: Option<&str>, name: &str) -> Result<Option<Arc<CachedObject>>> {
        match self.kept.kept(&Query::get(kind, namespace, name)) {
            Some(mut objects) => Ok(objects.pop()),
            None => self.live.get(kind, namespace, name),
        }
    }

    fn list(&self, kind: &KindRef, namespace: Option<&str>, selector: Option<&str>) -> Result<Vec<Arc<CachedObject>>> {
        self.kept.kept(&Query::list(kind, namespace, selector)).map_or_else(|| self.live.list(kind, namespace, selector), Ok)
    }

    fn by_index(&self, kind: &KindRef, index: &str, value: &str) -> Result<Vec<Arc<CachedObject>>> {
        self.kept.kept(&Query::by_index(kind, index, value)).map_or_else(|| self.live.by_index(kind, index, value), Ok)
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::cache::CacheView;

    fn pod(name: &str, app: &str) -> serde_json::Value {
        json!({"apiVersion": "v1", "kind": "Pod",
               "metadata": {"name": name, "namespace": "shop", "uid": format!("uid-{name}"), "resourceVersion": "1",
                            "labels": {"app": app}}})
    }

    fn names(objects: &[Arc<CachedObject>]) -> Vec<String> {
        let mut names: Vec<String> = objects.iter().map(|o| o.name().to_owned()).collect();
        names.sort();
        names
    }

    #[test]
    fn a_replay_answers_what_was_read_then_and_reads_the_rest_live() {
        let pods = KindRef::new("v1", "Pod");
        let before: SharedCache = Arc::new(CacheView::from_objects([pod("a", "web"), pod("b", "db")]).unwrap());
        let kept = Arc::new(Kept::new(before));
        assert_eq!(names(&kept.list(&pods, Some("shop"), Some("app=web")).unwrap()), ["a"]);
        assert!(kept.get(&pods, Some("shop"), "c").unwrap().is_none());
        assert_eq!(kept.len(), 2);

        // The cache moved on: a web Pod more, c created, b gone.
        let later: SharedCache = Arc::new(CacheView::from_objects([pod("a", "web"), pod("c", "web"), pod("d", "web")]).unwrap());
        let replay = kept.replaying(later);
        assert_eq!(names(&replay.list(&pods, Some("shop"), Some("app=web")).unwrap()), ["a"], "the list as it was read");
        assert!(replay.get(&pods, Some("shop"), "c").unwrap().is_none(), "c as it was read: not there");
        // Reads the serving call did not make: the cache as it is now.
        assert_eq!(names(&replay.list(&pods, Some("shop"), None).unwrap()), ["a", "c", "d"]);
        assert!(replay.get(&pods, Some("shop"), "d").unwrap().is_some());
        assert!(replay.get(&pods, Some("shop"), "b").unwrap().is_none());
    }

    #[test]
    fn a_failed_read_is_not_kept() {
        let pods = KindRef::new("v1", "Pod");
        let kept = Kept::new(Arc::new(CacheView::from_objects([pod("a", "web")]).unwrap()));
        assert!(kept.by_index(&pods, "no-such-index", "x").is_err());
        assert!(kept.is_empty());
    }
}
