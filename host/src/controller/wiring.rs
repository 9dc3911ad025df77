//! Wiring a reconciler to the cache: shared informers for every kind it reads (one per
//! namespace its grants allow), its indexes, the handlers that map each change to keys of the
//! reconciled kind and queue them, the periodic resync and shard takeovers, and [`Caching`]:
//! which objects the reconciler's informers hold, for expectations.

use std::sync::Arc;
use std::time::Duration;

use serde_json::Value;
use tokio::time::Instant;
use tracing::{debug, info};

use super::mapping::KeyMapper;
use super::{Current, Error, Inner, Reason, Reconciler, ReconcilerSpec, Result, expectations};
use crate::actions::Planned;
use crate::cache::{self, CacheView, IndexSpec, Selector};
use crate::grants::{Grants, ReadScope};
use crate::informer::{self, Informer, InformerKey};
use crate::kinds::{KindRef, ObjectKey};

impl Inner {
    /// Acquire informers, add indexes, subscribe handlers and wait for sync.
    pub(super) async fn wire(self: &Arc<Self>, reconciler: Arc<dyn Reconciler>, grants: Arc<Grants>) -> Result<Current> {
        let spec = reconciler.spec().clone();
        grants.check_spec(&spec).map_err(|source| Error::Grants { controller: self.name.clone(), source })?;
        let err = |source| Error::Informer { controller: self.name.clone(), source };
        let namespaced = self.shared.registry.resolver().resolve(&spec.reconciles).await.map_err(|e| err(e.into()))?.namespaced;
        let mut view = CacheView::new();
        let mut subscriptions = Vec::new();
        let primary = self.acquire(&grants, &spec.reconciles, spec.selector.as_deref(), spec.annotation_selector.as_deref()).await?;
        // The reconciled kind's own indexes first: index mappings look in them from the first event.
        for idx in spec.indexes.iter().filter(|i| i.kind == spec.reconciles) {
            let index_err =
                |source| Error::Index { controller: self.name.clone(), kind: idx.kind.to_string(), index: idx.name.clone(), source };
            let index = IndexSpec::parse(&idx.path).map_err(index_err)?;
            for inf in &primary {
                inf.store().add_index(&idx.name, index.clone()).map_err(index_err)?;
            }
        }
        let stores = primary.iter().map(|i| i.store().clone()).collect();
        let mapper = KeyMapper { primary: spec.reconciles.clone(), namespaced, stores };
        for inf in &primary {
            let me = Arc::downgrade(self);
            let m = mapper.clone();
            let kind = spec.reconciles.clone();
            subscriptions.push(inf.subscribe(Arc::new(move |change| {
                if let Some(inner) = me.upgrade() {
                    m.for_primary(change).into_iter().for_each(|k| inner.enqueue(k, Reason::Event));
                    inner.wake_waiting(&kind, change);
                }
            })));
            view.insert(inf.store().clone());
        }
        let mut informers = primary.clone();
        for watch in &spec.watches {
            let watched = self.acquire(&grants, &watch.kind, watch.selector.as_deref(), watch.annotation_selector.as_deref()).await?;
            // Every informer of a kind serves its reads (the view returns overlapping objects once).
            for inf in watched {
                let me = Arc::downgrade(self);
                let (m, mapping, kind) = (mapper.clone(), watch.mapping.clone(), watch.kind.clone());
                subscriptions.push(inf.subscribe(Arc::new(move |change| {
                    if let Some(inner) = me.upgrade() {
                        m.for_watched(&mapping, change).into_iter().for_each(|k| inner.enqueue(k, Reason::Event));
                        inner.wake_waiting(&kind, change);
                    }
                })));
                view.insert(inf.store().clone());
                informers.push(inf);
            }
        }
        for idx in &spec.indexes {
            if view.stores(&idx.kind).is_empty() {
                // An index on a kind that is read but not watched for events.
                for inf in self.acquire(&grants, &idx.kind, None, None).await? {
                    view.insert(inf.store().clone());
                    let (me, kind) = (Arc::downgrade(self), idx.kind.clone());
                    subscriptions.push(inf.subscribe(Arc::new(move |change| {
                        if let Some(inner) = me.upgrade() {
                            inner.wake_waiting(&kind, change);
                        }
                    })));
                    informers.push(inf);
                }
            }
            let index_err =
                |source| Error::Index { controller: self.name.clone(), kind: idx.kind.to_string(), index: idx.name.clone(), source };
            let index = IndexSpec::parse(&idx.path).map_err(index_err)?;
            for store in view.stores(&idx.kind) {
                store.add_index(&idx.name, index.clone()).map_err(index_err)?;
            }
        }
        for inf in &informers {
            inf.wait_synced(self.config.sync_timeout).await.map_err(err)?;
        }
        Ok(Current {
            caching: Arc::new(Caching::of(&spec)),
            reconciler,
            grants,
            view: Arc::new(view),
            primary: primary.iter().map(|i| i.store().clone()).collect(),
            _subscriptions: Arc::new(subscriptions),
        })
    }

    /// Shared informers for `kind`: one per namespace the plugin may read it in (narrowed to
    /// the controller's namespace), so a plugin granted reads in some namespaces needs RBAC
    /// only there and never sees objects from elsewhere.
    async fn acquire(
        &self,
        grants: &Grants,
        kind: &KindRef,
        selector: Option<&str>,
        annotations: Option<&str>,
    ) -> Result<Vec<Arc<Informer>>> {
        let err = |source| Error::Informer { controller: self.name.clone(), source };
        let mut informers = Vec::new();
        for namespace in self.read_namespaces(grants, kind).await? {
            let key = InformerKey::new(kind.clone(), namespace, selector)
                .and_then(|k| k.with_annotations(annotations))
                .map_err(|source| err(informer::Error::Selector { kind: kind.clone(), source }))?;
            informers.push(self.shared.registry.acquire(key).await.map_err(err)?);
        }
        Ok(informers)
    }

    /// Where `kind` is watched: `[None]` = everywhere, else these namespaces.
    async fn read_namespaces(&self, grants: &Grants, kind: &KindRef) -> Result<Vec<Option<String>>> {
        read_namespaces(self.shared.registry.resolver(), grants, kind, self.config.namespace.as_deref()).await.map_err(|e| match e {
            ReadScopeError::Scope(reason) => Error::ReadScope { controller: self.name.clone(), kind: kind.clone(), reason },
            ReadScopeError::Kind(e) => Error::Informer { controller: self.name.clone(), source: e.into() },
        })
    }

    /// Queue the keys that wait for the object of `change` ([`expectations`]).
    pub(super) fn wake_waiting(&self, kind: &KindRef, change: &cache::Change) {
        let o = change.object();
        let object = expectations::object_key(kind, o.namespace(), o.name());
        for key in self.expectations.waiting_for(&object) {
            self.enqueue(key, Reason::Event);
        }
    }

    /// Queue `key` at normal priority (events).
    pub(super) fn enqueue(&self, key: ObjectKey, reason: Reason) {
        self.enqueue_with(key, reason, crate::queue::Priority::Normal);
    }

    /// Queue `key` at `priority`; a key already queued lower is raised (its reason stays the first).
    /// With sharding, only keys of the shards this replica owns are queued.
    pub(super) fn enqueue_with(&self, key: ObjectKey, reason: Reason, priority: crate::queue::Priority) {
        if self.ownership.as_ref().is_some_and(|o| !o.owns(&key)) {
            return;
        }
        self.keys.queued(&key, reason);
        self.queue.add_with_priority(key, priority);
    }

    /// Queue every cached object of the reconciled kind at `priority`.
    pub(super) fn enqueue_all(&self, reason: Reason, priority: crate::queue::Priority) {
        let Some((primary, kind)) = self.current.read().as_ref().map(|c| (c.primary.clone(), c.reconciler.spec().reconciles.clone()))
        else {
            return;
        };
        for o in primary.iter().flat_map(|s| s.snapshot()) {
            self.enqueue_with(ObjectKey::new(kind.clone(), o.namespace(), o.name()), reason, priority);
        }
    }

    /// The cached objects of the reconciled kind in each of the plugin's shards (one shard when
    /// unsharded): the weights of the shards ([`crate::shard::Ownership::count_objects_with`]).
    pub(super) fn objects_per_shard(&self) -> Vec<u64> {
        let shards = self.ownership.as_ref().map_or(1, |o| o.count());
        let mut counts = vec![0; shards];
        let Some(primary) = self.current.read().as_ref().map(|c| c.primary.clone()) else { return counts };
        for store in &primary {
            let objects = store.snapshot();
            // One hash per namespace, not per object.
            let mut shard_of: std::collections::HashMap<&str, usize> = std::collections::HashMap::new();
            for o in &objects {
                let scope = o.namespace().unwrap_or(o.name());
                let shard = *shard_of.entry(scope).or_insert_with(|| crate::shard::shard_of_scope(scope, shards));
                counts[shard] += 1;
            }
        }
        counts
    }

    /// Queue the keys of each shard this replica takes over (they were not queued before), its
    /// expectations for them forgotten.
    pub(super) async fn follow_takeovers(me: std::sync::Weak<Self>, mut news: tokio::sync::broadcast::Receiver<usize>) {
        loop {
            let shard = match news.recv().await {
                Ok(shard) => Some(shard),
                Err(tokio::sync::broadcast::error::RecvError::Lagged(_)) => None,
                Err(tokio::sync::broadcast::error::RecvError::Closed) => return,
            };
            let Some(inner) = me.upgrade() else { return };
            let Some(ownership) = inner.ownership.clone() else { return };
            let (primary, kind) = match inner.current.read().as_ref() {
                Some(c) => (c.primary.clone(), c.reconciler.spec().reconciles.clone()),
                None => continue,
            };
            let mut queued = 0;
            for o in primary.iter().flat_map(|s| s.snapshot()) {
                let key = ObjectKey::new(kind.clone(), o.namespace(), o.name());
                // Lagged: every owned shard (the enqueue skips the others).
                if shard.is_none_or(|s| ownership.shard_of(&key) == s) {
                    // What this replica expected from its writes of an earlier ownership is void:
                    // another owner may have undone them since (a Pod it created, deleted again).
                    inner.expectations.forget(&key);
                    inner.enqueue_with(key, Reason::Resync, crate::queue::Priority::Normal);
                    queued += 1;
                }
            }
            info!(controller = %inner.name, ?shard, queued, "shard taken over; its keys queued from the cache");
        }
    }

    pub(super) async fn resync_every(self: Arc<Self>, period: Duration) {
        let mut tick = tokio::time::interval_at(Instant::now() + period, period);
        loop {
            tick.tick().await;
            debug!(controller = %self.name, "resync: replaying the cache");
            self.enqueue_all(Reason::Resync, crate::queue::Priority::Low);
        }
    }
}

/// Which objects a reconciler's informers cache: per kind it reads, the selector of each informer
/// of that kind (none: every object), parsed once when the reconciler is wired. Expectations
/// wait for a created object only if the cache will show it.
#[derive(Debug, Default)]
pub(super) struct Caching {
    kinds: Vec<(KindRef, Vec<Option<Selector>>)>,
}

impl Caching {
    /// What `spec`'s informers cache: the reconciled kind (its selector), each watched kind (its
    /// watch's selector), each indexed kind (everything). A selector that does not parse has no
    /// informer (wiring refused it), so it caches nothing.
    pub(super) fn of(spec: &ReconcilerSpec) -> Self {
        let mut caching = Self::default();
        let parse = |s: Option<&str>| s.map(Selector::parse).transpose().ok();
        if let Some(s) = parse(spec.selector.as_deref()) {
            caching.add(&spec.reconciles, s);
        }
        for w in &spec.watches {
            if let Some(s) = parse(w.selector.as_deref()) {
                caching.add(&w.kind, s);
            }
        }
        for i in &spec.indexes {
            caching.add(&i.kind, None);
        }
        caching
    }

    fn add(&mut self, kind: &KindRef, selector: Option<Selector>) {
        match self.kinds.iter_mut().find(|(k, _)| k == kind) {
            Some((_, selectors)) => selectors.push(selector),
            None => self.kinds.push((kind.clone(), vec![selector])),
        }
    }

    /// The key of `object` (its JSON) if one of the informers would hold it.
    pub(super) fn key_if_cached(&self, object: &Value) -> Option<ObjectKey> {
        let field = |p: &str| object.pointer(p).and_then(Value::as_str).filter(|s| !s.is_empty());
        let kind = KindRef::new(field("/apiVersion")?, field("/kind")?);
        let labels = object.pointer("/metadata/labels");
        let label = |k: &str| labels.and_then(|l| l.get(k)).and_then(Value::as_str);
        let (_, selectors) = self.kinds.iter().find(|(k, _)| *k == kind)?;
        let cached = selectors.iter().any(|s| s.as_ref().is_none_or(|s| s.matches_with(label)));
        cached
            .then(|| expectations::object_key(&kind, field("/metadata/namespace"), field("/metadata/name").unwrap_or_default()))
            .filter(|k| !k.name.is_empty())
    }

    /// Whether the body of a planned create would be cached (when the server returned nothing).
    pub(super) fn caches_body(&self, planned: &Planned) -> bool {
        match planned.action() {
            crate::actions::Action::Create { object } => self.key_if_cached(object).is_some(),
            _ => false,
        }
    }
}

/// Why a kind cannot be watched for a plugin.
#[derive(Debug, thiserror::Error)]
pub enum ReadScopeError {
    /// Its grants and the controller's namespace do not allow it.
    #[error("cannot read it: {0}")]
    Scope(String),
    /// Discovery failed.
    #[error(transparent)]
    Kind(#[from] crate::kinds::Error),
}

/// Where a plugin with `grants` running in `namespace` (`None`: all) reads `kind`: `[None]` =
/// everywhere, else these namespaces (one informer each), so a plugin granted reads in some
/// namespaces needs RBAC only there and never sees objects from elsewhere.
pub async fn read_namespaces(
    resolver: &crate::kinds::KindResolver,
    grants: &Grants,
    kind: &KindRef,
    namespace: Option<&str>,
) -> Result<Vec<Option<String>>, ReadScopeError> {
    match (grants.read_scope(kind), namespace) {
        (ReadScope::All, namespace) => Ok(vec![namespace.map(str::to_owned)]),
        (ReadScope::None, _) => Err(ReadScopeError::Scope("no read grant covers it".into())),
        (ReadScope::Namespaces(granted), Some(ns)) if granted.iter().any(|g| g == ns) => Ok(vec![Some(ns.to_owned())]),
        (ReadScope::Namespaces(granted), Some(ns)) => {
            Err(ReadScopeError::Scope(format!("the plugin runs in namespace {ns}, but reads are granted only in {}", granted.join(", "))))
        }
        (ReadScope::Namespaces(granted), None) => {
            if !resolver.resolve(kind).await?.namespaced {
                return Err(ReadScopeError::Scope(format!(
                    "it is cluster-scoped, but reads are granted only in namespaces {}",
                    granted.join(", ")
                )));
            }
            Ok(granted.into_iter().map(Some).collect())
        }
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::reconciler::{IndexDecl, Mapping, WatchSpec};

    #[test]
    fn caching_follows_the_informers_and_their_selectors() {
        let pod = KindRef::new("v1", "Pod");
        let spec = ReconcilerSpec {
            name: "rs".into(),
            version: "1.0.0".into(),
            reconciles: KindRef::new("apps/v1", "ReplicaSet"),
            selector: None,
            watches: vec![WatchSpec {
                kind: pod.clone(),
                mapping: Mapping::Owner,
                selector: Some("app=web".into()),
                annotation_selector: None,
            }],
            indexes: vec![IndexDecl { kind: KindRef::new("v1", "Node"), name: "zone".into(), path: "labels.zone".into() }],
            fields: vec![],
            annotation_selector: None,
        };
        let caching = Caching::of(&spec);
        let obj = |kind: &str, labels: Value| json!({"apiVersion": "v1", "kind": kind, "metadata": {"name": "x", "namespace": "ns", "labels": labels}});
        assert_eq!(caching.key_if_cached(&obj("Pod", json!({"app": "web"}))), Some(pod.key(Some("ns"), "x")));
        assert_eq!(caching.key_if_cached(&obj("Pod", json!({"app": "db"}))), None, "the watch's selector does not take it");
        assert!(caching.key_if_cached(&obj("Node", json!({}))).is_some(), "an indexed kind caches everything");
        assert_eq!(caching.key_if_cached(&obj("Secret", json!({}))), None, "not a kind the reconciler reads");
        assert_eq!(caching.key_if_cached(&json!({"apiVersion": "v1", "kind": "Pod"})), None, "no name");
    }
}
