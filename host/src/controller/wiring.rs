//! Wiring a reconciler to the cache: its declarations checked against its budgets, shared
//! informers for every kind it reads (one per namespace its grants allow; a new one costs a token
//! of its API budget), its indexes, the handlers that map each change to keys of the reconciled
//! kind and queue them (index mappings off the informers' tasks), the periodic resync and shard
//! takeovers, and [`Caching`]: which objects the reconciler's informers hold, for expectations.

use std::collections::HashMap;
use std::sync::{Arc, Weak};
use std::time::Duration;

use serde_json::Value;
use tokio::sync::mpsc::UnboundedReceiver;
use tokio::time::Instant;
use tracing::{debug, info, warn};

use super::budget::{Budget, Crossing, IndexMemoryWatch};
use super::mapping::{KeyMapper, Mapped, Scope};
use super::{Current, Error, IndexDecl, Inner, Mapping, Reason, Reconciler, ReconcilerSpec, Result, expectations};
use crate::actions::Planned;
use crate::cache::{self, CacheView, Change, IndexSpec, Selector};
use crate::grants::{Grants, ReadScope};
use crate::informer::{self, Informer, InformerKey};
use crate::kinds::{KindRef, ObjectKey};
use crate::plugin::guest_threads;

/// Changes mapped in one call on the guest threads.
const MAPPING_BATCH: usize = 64;
/// How often at most a controller logs that its mappings hit the key cap.
const CAPPED_WARNING_EVERY: Duration = Duration::from_secs(60);

impl Inner {
    /// Check the spec against the budgets, acquire informers, declare indexes, subscribe
    /// handlers, wait for sync, then check the memory of the indexes.
    pub(super) async fn wire(self: &Arc<Self>, reconciler: Arc<dyn Reconciler>, grants: Arc<Grants>) -> Result<Current> {
        let spec = reconciler.spec().clone();
        grants.check_spec(&spec).map_err(|source| Error::Grants { controller: self.name.clone(), source })?;
        let budgets = self.config.budgets;
        let over = |source| Error::Budget { controller: self.name.clone(), source };
        budgets.check_spec(&spec).map_err(over)?;
        let err = |source| Error::Informer { controller: self.name.clone(), source };
        let namespaced = self.shared.registry.resolver().resolve(&spec.reconciles).await.map_err(|e| err(e.into()))?.namespaced;
        let mut view = CacheView::new();
        let mut subscriptions = Vec::new();
        let scope = Scope::of(namespaced, &self.read_namespaces(&grants, &spec.reconciles).await?);
        let primary = self.acquire(&grants, &spec.reconciles, spec.selector.as_deref(), spec.annotation_selector.as_deref()).await?;
        primary.iter().for_each(|inf| view.insert(inf.store().clone()));
        // The reconciled kind's own indexes first: index mappings look in them from the first event.
        let mut index_names = HashMap::new();
        for idx in spec.indexes.iter().filter(|i| i.kind == spec.reconciles) {
            let index = declare(&mut view, idx).map_err(|e| self.index_error(idx, e))?;
            index_names.insert(idx.name.clone(), index.shared_name());
        }
        let stores = primary.iter().map(|i| i.store().clone()).collect();
        let mapper = KeyMapper {
            primary: spec.reconciles.clone(),
            namespaced,
            stores,
            index_names: Arc::new(index_names),
            scope,
            max_keys: budgets.keys_per_event,
        };
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
        }
        // Index mappings fan out: they are mapped off the informers' tasks ([`Inner::map_off_path`]).
        let (fan_out, changes) = tokio::sync::mpsc::unbounded_channel();
        let mut informers = primary.clone();
        for (at, watch) in spec.watches.iter().enumerate() {
            let watched = self.acquire(&grants, &watch.kind, watch.selector.as_deref(), watch.annotation_selector.as_deref()).await?;
            // Every informer of a kind serves its reads (the view returns overlapping objects once).
            for inf in watched {
                let me = Arc::downgrade(self);
                let (m, mapping, kind, fan_out) = (mapper.clone(), watch.mapping.clone(), watch.kind.clone(), fan_out.clone());
                let fans_out = matches!(mapping, Mapping::Index { .. });
                subscriptions.push(inf.subscribe(Arc::new(move |change| {
                    if let Some(inner) = me.upgrade() {
                        if fans_out {
                            // The receiver lives as long as the sender's handler (or the controller).
                            let _ = fan_out.send((at, change.clone()));
                        } else {
                            inner.queue_mapped(&m.for_watched(&mapping, change));
                        }
                        inner.wake_waiting(&kind, change);
                    }
                })));
                view.insert(inf.store().clone());
                informers.push(inf);
            }
        }
        drop(fan_out);
        let mappings = spec.watches.iter().map(|w| w.mapping.clone()).collect();
        tokio::spawn(Self::map_off_path(Arc::downgrade(self), mapper, mappings, changes));
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
            // Every store of the kind, the reconciled kind's watched with other selectors too.
            declare(&mut view, idx).map_err(|e| self.index_error(idx, e))?;
        }
        for inf in &informers {
            inf.wait_synced(self.config.sync_timeout).await.map_err(err)?;
        }
        budgets.check_index_memory(view.index_bytes()).map_err(over)?;
        Ok(Current {
            caching: Arc::new(Caching::of(&spec)),
            reconciler,
            grants,
            executor: self.executor.clone(),
            view: Arc::new(view),
            primary: primary.iter().map(|i| i.store().clone()).collect(),
            _subscriptions: Arc::new(subscriptions),
        })
    }

    /// The error of index `idx` that cannot be declared.
    fn index_error(&self, idx: &IndexDecl, source: cache::Error) -> Error {
        Error::Index { controller: self.name.clone(), kind: idx.kind.to_string(), index: idx.name.clone(), source }
    }

    /// Map the changes of watches with an index mapping (`watch` index, change) to keys, in
    /// batches on the guest threads (below the host's own: [`guest_threads`]), and queue them:
    /// one plugin's fan-out never holds up an informer's task, another plugin's events or the
    /// host's probes. Ends when the informers' handlers are gone (the wiring was replaced).
    ///
    /// The channel is unbounded: the informers never wait for a plugin's mapping. Each change
    /// costs at most `keysPerEvent` entries here, so the backlog grows only while changes arrive
    /// faster than that many entries per change are mapped.
    async fn map_off_path(me: Weak<Self>, mapper: KeyMapper, mappings: Arc<[Mapping]>, mut changes: UnboundedReceiver<(usize, Change)>) {
        let mut batch = Vec::new();
        while changes.recv_many(&mut batch, MAPPING_BATCH).await > 0 {
            let (m, mappings, work) = (mapper.clone(), mappings.clone(), std::mem::take(&mut batch));
            let mapped =
                guest_threads::run(move || work.iter().map(|(at, change)| m.for_watched(&mappings[*at], change)).collect::<Vec<_>>());
            let Some(inner) = me.upgrade() else { return };
            let mapped = match mapped.await {
                Ok(mapped) => mapped,
                Err(e) => {
                    warn!(controller = %inner.name, error = %e, "mapping a batch of changes failed; their keys are queued at the next resync");
                    continue;
                }
            };
            mapped.iter().for_each(|m| inner.queue_mapped(m));
        }
    }

    /// Queue what a change mapped to; a mapping cut at its cap is counted and logged (at most
    /// once a minute per controller).
    fn queue_mapped(&self, mapped: &Mapped) {
        mapped.keys.iter().for_each(|k| self.enqueue(k.clone(), Reason::Event));
        if mapped.out_of_scope > 0 {
            debug!(controller = %self.name, dropped = mapped.out_of_scope, "keys outside the reconciled kind's read scope dropped");
        }
        if mapped.capped {
            self.shared.metrics.mapping_capped(&self.name);
            let mut last = self.capped_warning.lock();
            if last.is_none_or(|at| at.elapsed() >= CAPPED_WARNING_EVERY) {
                *last = Some(Instant::now());
                warn!(
                    controller = %self.name, keys = mapped.keys.len(), examined = mapped.examined,
                    "a change mapped to more index entries than budgets.keysPerEvent; the rest are not queued by it \
                     (they are at the next resync); counted in wasmloop_mapping_keys_capped_total"
                );
            }
        }
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
            // A new informer (a LIST and a WATCH) costs a token of the plugin's API budget; one
            // another controller runs costs nothing.
            if !self.shared.registry.is_running(&key) {
                self.api.acquire().await;
            }
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

    /// Every `period` (the first at once): measure the memory of the current version's indexes,
    /// show it (`wasmloop_plugin_index_bytes`), and when it grows past `budgets.indexMemory` say
    /// so once (a warning and `wasmloop_budget_exceeded_total{budget="indexMemory"}`); the plugin
    /// keeps running, and is refused at its next load if its indexes are still over then.
    pub(super) async fn watch_index_memory(me: Weak<Self>, period: Duration) {
        let mut watch = IndexMemoryWatch::default();
        let mut tick = tokio::time::interval(period);
        loop {
            tick.tick().await;
            let Some(inner) = me.upgrade() else { return };
            let Some(view) = inner.current.read().as_ref().map(|c| c.view.clone()) else { continue };
            let (bytes, budget) = (view.index_bytes(), inner.config.budgets.index_memory);
            inner.shared.metrics.index_bytes(&inner.name, bytes);
            match watch.measure(bytes, budget) {
                Crossing::Exceeded => {
                    inner.shared.metrics.budget_exceeded(&inner.name, Budget::IndexMemory);
                    warn!(controller = %inner.name, bytes, %budget, "the plugin's indexes grew past budgets.indexMemory; it keeps running, \
                          and is refused at its next load if they are still over then");
                }
                Crossing::Within => {
                    info!(controller = %inner.name, bytes, %budget, "the plugin's indexes are within budgets.indexMemory again");
                }
                Crossing::Same => {}
            }
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

/// Declare `idx` in `view` (on every store of its kind so far); its definition.
fn declare(view: &mut CacheView, idx: &IndexDecl) -> cache::Result<IndexSpec> {
    let index = IndexSpec::parse(&idx.path)?;
    view.declare_index(&idx.kind, &idx.name, index.clone())?;
    Ok(index)
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
            crate::actions::Action::Create(object) => self.key_if_cached(object).is_some(),
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
