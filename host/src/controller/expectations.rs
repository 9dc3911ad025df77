//! Expectations: read-your-writes for reconcilers (kube-controller-manager's
//! `ControllerExpectations`, kept by the host so that no plugin has to).
//!
//! After the executor creates or deletes objects for a key, the controller records what the
//! cache must show before that key is reconciled again: each created object present, each
//! deleted one gone (or terminating, or replaced by another uid). Until then, or until the TTL
//! (default 5 minutes, as KCM's) passes, the key is parked: popping it does not call the
//! reconciler. Events on an expected object wake the key, and the check is always made against
//! the cache itself, so an event that arrived before the expectation was recorded is not missed.
//!
//! With this, a reconciler that names children with `generateName` never creates twice for one
//! missing child, however stale the watch and however many events arrive meanwhile.

use std::collections::HashMap;
use std::time::Duration;

use parking_lot::Mutex;
use tokio::time::Instant;

use crate::cache::CacheRead;
use crate::kinds::{KindRef, ObjectKey};

/// One object a key waits to see.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Expected {
    pub object: ObjectKey,
    pub change: ExpectedChange,
}

#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum ExpectedChange {
    /// Created: the cache must hold an object of that name.
    Added,
    /// Deleted: the cache must not hold the object with this uid (or hold it terminating).
    Deleted { uid: String },
}

impl Expected {
    /// Whether the cache shows it. Objects the reconciler cannot read count as seen.
    fn seen(&self, cache: &dyn CacheRead) -> bool {
        let o = &self.object;
        match (cache.get(&o.kind, o.namespace.as_deref(), &o.name), &self.change) {
            (Err(_), _) => true,
            (Ok(found), ExpectedChange::Added) => found.is_some(),
            (Ok(None), ExpectedChange::Deleted { .. }) => true,
            (Ok(Some(cached)), ExpectedChange::Deleted { uid }) => cached.uid() != uid || cached.is_deleting(),
        }
    }
}

/// Whether a key may be reconciled now.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Wait {
    Ready,
    /// Parked until the cache shows what is expected, at most until this instant.
    Until(Instant),
}

#[derive(Debug)]
struct Pending {
    items: Vec<Expected>,
    deadline: Instant,
}

/// Per-key expectations of one controller.
#[derive(Debug)]
pub struct Expectations {
    ttl: Duration,
    state: Mutex<State>,
}

#[derive(Debug, Default)]
struct State {
    by_key: HashMap<ObjectKey, Pending>,
    /// Which keys wait for an object (to wake them on its events).
    waiting: HashMap<ObjectKey, Vec<ObjectKey>>,
}

impl Expectations {
    /// Expectations that expire after `ttl`.
    pub fn new(ttl: Duration) -> Self {
        Self { ttl, state: Mutex::new(State::default()) }
    }

    /// Record what `key` waits for (added to what it already waits for); the TTL restarts.
    pub fn expect(&self, key: &ObjectKey, items: Vec<Expected>) {
        if items.is_empty() {
            return;
        }
        let mut state = self.state.lock();
        for item in &items {
            let keys = state.waiting.entry(item.object.clone()).or_default();
            if !keys.contains(key) {
                keys.push(key.clone());
            }
        }
        let deadline = Instant::now() + self.ttl;
        let pending = state.by_key.entry(key.clone()).or_insert_with(|| Pending { items: vec![], deadline });
        pending.deadline = deadline;
        pending.items.extend(items);
    }

    /// Whether `key` may be reconciled: what the cache already shows is crossed off; expired
    /// expectations are dropped.
    pub fn check(&self, key: &ObjectKey, cache: &dyn CacheRead) -> Wait {
        let mut state = self.state.lock();
        let Some(pending) = state.by_key.get_mut(key) else { return Wait::Ready };
        let (seen, unseen): (Vec<Expected>, Vec<Expected>) = pending.items.drain(..).partition(|item| item.seen(cache));
        pending.items = unseen;
        let wait = (!pending.items.is_empty() && Instant::now() < pending.deadline).then_some(pending.deadline);
        for item in seen {
            unwait(&mut state, &item.object, key);
        }
        if let Some(deadline) = wait {
            return Wait::Until(deadline);
        }
        let pending = state.by_key.get(key).expect("checked above");
        if !pending.items.is_empty() {
            tracing::warn!(key = %key, missing = pending.items.len(), "expectations expired; reconciling anyway");
        }
        self.forget_locked(&mut state, key);
        Wait::Ready
    }

    /// Keys waiting for `object` (to be woken by an event on it).
    pub fn waiting_for(&self, object: &ObjectKey) -> Vec<ObjectKey> {
        self.state.lock().waiting.get(object).cloned().unwrap_or_default()
    }

    /// Drop `key`'s expectations (its object is gone, or the controller stops).
    pub fn forget(&self, key: &ObjectKey) {
        let mut state = self.state.lock();
        self.forget_locked(&mut state, key);
    }

    fn forget_locked(&self, state: &mut State, key: &ObjectKey) {
        let Some(pending) = state.by_key.remove(key) else { return };
        for item in pending.items {
            unwait(state, &item.object, key);
        }
    }

    /// Keys with unmet expectations (for metrics and tests).
    pub fn len(&self) -> usize {
        self.state.lock().by_key.len()
    }

    /// Whether no key has expectations pending.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// `key` no longer waits for `object`.
fn unwait(state: &mut State, object: &ObjectKey, key: &ObjectKey) {
    if let Some(keys) = state.waiting.get_mut(object) {
        keys.retain(|k| k != key);
        if keys.is_empty() {
            state.waiting.remove(object);
        }
    }
}

/// The key of an expected object, for matching informer events.
pub fn object_key(kind: &KindRef, namespace: Option<&str>, name: &str) -> ObjectKey {
    ObjectKey::new(kind.clone(), namespace, name)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cache::CacheView;
    use serde_json::json;

    fn pod(name: &str, uid: &str, deleting: bool) -> serde_json::Value {
        let mut p = json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": "ns", "uid": uid}});
        if deleting {
            p["metadata"]["deletionTimestamp"] = json!("2026-01-01T00:00:00Z");
        }
        p
    }

    fn key(name: &str) -> ObjectKey {
        object_key(&KindRef::new("v1", "Pod"), Some("ns"), name)
    }

    fn rs() -> ObjectKey {
        object_key(&KindRef::new("apps/v1", "ReplicaSet"), Some("ns"), "web")
    }

    #[tokio::test(start_paused = true)]
    async fn a_key_waits_until_the_cache_shows_its_writes() {
        let e = Expectations::new(Duration::from_secs(300));
        e.expect(
            &rs(),
            vec![
                Expected { object: key("web-a"), change: ExpectedChange::Added },
                Expected { object: key("web-b"), change: ExpectedChange::Deleted { uid: "b1".into() } },
            ],
        );
        assert_eq!(e.waiting_for(&key("web-a")), vec![rs()]);

        let stale = CacheView::from_objects([pod("web-b", "b1", false)]).unwrap();
        assert!(matches!(e.check(&rs(), &stale), Wait::Until(_)));
        // The create is seen; the deleted Pod is still there.
        let half = CacheView::from_objects([pod("web-a", "a1", false), pod("web-b", "b1", false)]).unwrap();
        assert!(matches!(e.check(&rs(), &half), Wait::Until(_)));
        // Terminating counts as deleted (as KCM lowers expectations on deletionTimestamp).
        let caught_up = CacheView::from_objects([pod("web-a", "a1", false), pod("web-b", "b1", true)]).unwrap();
        assert_eq!(e.check(&rs(), &caught_up), Wait::Ready);
        assert!(e.is_empty() && e.waiting_for(&key("web-a")).is_empty());
    }

    #[tokio::test(start_paused = true)]
    async fn a_recreated_object_satisfies_its_deletion_and_expectations_expire() {
        let e = Expectations::new(Duration::from_secs(300));
        e.expect(&rs(), vec![Expected { object: key("web-b"), change: ExpectedChange::Deleted { uid: "b1".into() } }]);
        let recreated = CacheView::from_objects([pod("web-b", "b2", false)]).unwrap();
        assert_eq!(e.check(&rs(), &recreated), Wait::Ready);

        e.expect(&rs(), vec![Expected { object: key("never"), change: ExpectedChange::Added }]);
        let empty = CacheView::from_objects([pod("x", "x", false)]).unwrap();
        assert!(matches!(e.check(&rs(), &empty), Wait::Until(_)));
        tokio::time::advance(Duration::from_secs(301)).await;
        assert_eq!(e.check(&rs(), &empty), Wait::Ready);
        assert!(e.is_empty());
    }

    #[tokio::test(start_paused = true)]
    async fn unreadable_objects_do_not_park_a_key() {
        let e = Expectations::new(Duration::from_secs(300));
        let secret = object_key(&KindRef::new("v1", "Secret"), Some("ns"), "s");
        e.expect(&rs(), vec![Expected { object: secret, change: ExpectedChange::Added }]);
        let view = CacheView::from_objects([pod("x", "x", false)]).unwrap();
        assert_eq!(e.check(&rs(), &view), Wait::Ready);
    }
}
