//! Shared informers: List, then Watch from the list's resourceVersion, into an [`IndexedStore`].
//!
//! One watch and one store per (kind, namespace, label selector), however many controllers use
//! it ([`InformerRegistry::acquire`]). Users hold an `Arc<Informer>` (usually inside a
//! [`Subscription`]); when the last one is dropped the watch stops. The watch itself is
//! kube-runtime's `watcher`: paged initial list, bookmarks, relist on 410 Gone, reconnect
//! backoff 800 ms → 30 s with jitter, reset after 2 min of health (client-go's numbers).
//!
//! A (re)list is applied atomically when it completes: readers see the old consistent state
//! until then, and objects that vanished while the watch was down produce `Deleted` changes.

use std::collections::HashMap;
use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Weak};
use std::time::Duration;

use futures::StreamExt;
use futures::stream::BoxStream;
use kube::api::Api;
use kube::runtime::WatchStreamExt;
use kube::runtime::watcher::{self, watcher};
use parking_lot::{Mutex, RwLock};
use tokio::sync::watch;
use tokio::task::JoinHandle;
use tracing::{debug, info, warn};

use crate::cache::{self, Change, IndexedStore, Selector};
use crate::kinds::{self, KindRef, KindResolver};

mod raw;
use raw::RawObject;

/// Errors starting or waiting for an informer.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The informer's kind does not resolve.
    #[error(transparent)]
    Kind(#[from] kinds::Error),
    /// A selector of an informer for `kind` does not parse.
    #[error("informer for {kind}: {source}")]
    Selector {
        /// The kind.
        kind: KindRef,
        /// The selector's error (it names the selector).
        #[source]
        source: cache::Error,
    },
    /// The informer's first list did not complete in time.
    #[error("informer for {key} did not sync within {timeout:?}; last error: {last_error}")]
    SyncTimeout {
        /// The informer waited for.
        key: InformerKey,
        /// How long it was waited for.
        timeout: Duration,
        /// The last list or watch error it saw (`none` if none).
        last_error: String,
    },
}

/// A result whose error is an informer's.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// What an informer watches: a kind, optionally one namespace, optionally a label selector
/// (sent to the API server) and an annotation selector (applied here, as objects arrive).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct InformerKey {
    /// The kind.
    pub kind: KindRef,
    /// One namespace, or all.
    pub namespace: Option<String>,
    /// Canonical form of the label selector (so equal selectors share one informer).
    pub selector: Option<String>,
    /// Canonical form of the annotation selector: objects whose annotations do not match are
    /// not cached (and leave the cache, as deletions, when they stop matching).
    pub annotations: Option<String>,
}

/// A selector's canonical form; an empty selector means "everything".
fn canonical(selector: Option<&str>) -> cache::Result<Option<String>> {
    match selector.map(str::trim).filter(|s| !s.is_empty()) {
        Some(s) => Ok(Some(Selector::parse(s)?.to_string())),
        None => Ok(None),
    }
}

impl InformerKey {
    /// A key whose label selector is parsed and normalised; an empty selector means "everything".
    pub fn new(kind: KindRef, namespace: Option<String>, selector: Option<&str>) -> cache::Result<Self> {
        Ok(Self { kind, namespace, selector: canonical(selector)?, annotations: None })
    }

    /// The same key, caching only objects whose annotations match `selector` (contract 0.3).
    pub fn with_annotations(mut self, selector: Option<&str>) -> cache::Result<Self> {
        self.annotations = canonical(selector)?;
        Ok(self)
    }
}

/// Most bytes of a selector an informer's name (in logs and errors) quotes.
const QUOTED_SELECTOR: usize = 256;

impl fmt::Display for InformerKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.kind)?;
        if let Some(ns) = &self.namespace {
            write!(f, " in {ns}")?;
        }
        if let Some(sel) = &self.selector {
            write!(f, " [{}]", Quoted(sel))?;
        }
        if let Some(sel) = &self.annotations {
            write!(f, " [annotations {}]", Quoted(sel))?;
        }
        Ok(())
    }
}

/// A selector as logs quote it: whole up to [`QUOTED_SELECTOR`] bytes, else its start and size.
struct Quoted<'a>(&'a str);

impl fmt::Display for Quoted<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let s = self.0;
        if s.len() <= QUOTED_SELECTOR {
            return f.write_str(s);
        }
        let cut = (0..=QUOTED_SELECTOR).rev().find(|&i| s.is_char_boundary(i)).unwrap_or(0);
        write!(f, "{}… ({} bytes)", &s[..cut], s.len())
    }
}

/// A callback run, in order, for every change the informer applies to its store.
pub type Handler = Arc<dyn Fn(&Change) + Send + Sync>;

/// The subscribers, copy-on-write: dispatch takes a snapshot and calls the handlers without
/// holding the lock, so a handler may subscribe or unsubscribe (or block) without deadlocking
/// or stalling (un)subscriptions.
#[derive(Default)]
struct Handlers {
    next_id: AtomicU64,
    list: RwLock<Arc<[(u64, Handler)]>>,
}

impl Handlers {
    fn dispatch(&self, change: &Change) {
        let snapshot = self.list.read().clone();
        for (_, h) in snapshot.iter() {
            h(change);
        }
    }

    fn add(&self, id: u64, handler: Handler) {
        let mut list = self.list.write();
        *list = list.iter().cloned().chain([(id, handler)]).collect();
    }

    fn remove(&self, id: u64) {
        let mut list = self.list.write();
        *list = list.iter().filter(|(i, _)| *i != id).cloned().collect();
    }
}

/// One running watch and its store. Dropping the last `Arc<Informer>` stops the watch.
pub struct Informer {
    key: InformerKey,
    store: Arc<IndexedStore>,
    handlers: Arc<Handlers>,
    synced: watch::Receiver<bool>,
    last_error: Arc<Mutex<String>>,
    task: JoinHandle<()>,
}

impl Informer {
    /// What this informer watches.
    pub fn key(&self) -> &InformerKey {
        &self.key
    }

    /// The cache this informer fills.
    pub fn store(&self) -> &Arc<IndexedStore> {
        &self.store
    }

    /// Wait until the first list is in the store, or fail after `timeout`.
    pub async fn wait_synced(&self, timeout: Duration) -> Result<()> {
        let mut rx = self.synced.clone();
        match tokio::time::timeout(timeout, rx.wait_for(|s| *s)).await {
            Ok(Ok(_)) => Ok(()),
            _ => Err(Error::SyncTimeout { key: self.key.clone(), timeout, last_error: self.last_error.lock().clone() }),
        }
    }

    /// Run `handler` for every future change. Existing objects are not replayed: callers that
    /// need them read the store (after subscribing, so nothing falls in between).
    pub fn subscribe(self: &Arc<Self>, handler: Handler) -> Subscription {
        let id = self.handlers.next_id.fetch_add(1, Ordering::Relaxed);
        self.handlers.add(id, handler);
        Subscription { informer: self.clone(), id }
    }
}

impl Drop for Informer {
    fn drop(&mut self) {
        debug!(informer = %self.key, "stopping informer: no users left");
        self.task.abort();
    }
}

/// A registered handler; unregistered (and the informer released) when dropped.
pub struct Subscription {
    informer: Arc<Informer>,
    id: u64,
}

impl Subscription {
    /// The informer subscribed to.
    pub fn informer(&self) -> &Arc<Informer> {
        &self.informer
    }
}

impl Drop for Subscription {
    fn drop(&mut self) {
        self.informer.handlers.remove(self.id);
    }
}

/// Starts informers on demand and shares them between users.
#[derive(Clone)]
pub struct InformerRegistry {
    resolver: KindResolver,
    informers: Arc<Mutex<HashMap<InformerKey, Weak<Informer>>>>,
    /// Fault injection for tests: every watch event reaches the cache this much later.
    event_delay: Duration,
}

impl InformerRegistry {
    /// An empty registry resolving kinds through `resolver`.
    pub fn new(resolver: KindResolver) -> Self {
        Self { resolver, informers: Default::default(), event_delay: Duration::ZERO }
    }

    /// The same registry whose informers see every watch event `delay` late, as over a slow or
    /// congested watch (fault injection for tests: the real API server cannot be made slow).
    pub fn with_event_delay(mut self, delay: Duration) -> Self {
        self.event_delay = delay;
        self
    }

    /// The resolver its informers' kinds go through.
    pub fn resolver(&self) -> &KindResolver {
        &self.resolver
    }

    /// The running informer for `key`, started if none is running.
    pub async fn acquire(&self, key: InformerKey) -> Result<Arc<Informer>> {
        if let Some(inf) = self.informers.lock().get(&key).and_then(Weak::upgrade) {
            return Ok(inf);
        }
        let resolved = self.resolver.resolve(&key.kind).await?;
        let mut map = self.informers.lock();
        // Another caller may have started it while we resolved the kind.
        if let Some(inf) = map.get(&key).and_then(Weak::upgrade) {
            return Ok(inf);
        }
        map.retain(|_, w| w.strong_count() > 0);
        let informer = Arc::new(self.start(key.clone(), resolved));
        map.insert(key, Arc::downgrade(&informer));
        Ok(informer)
    }

    /// Whether an informer for `key` is running (acquiring it starts nothing).
    pub fn is_running(&self, key: &InformerKey) -> bool {
        self.informers.lock().get(key).is_some_and(|w| w.strong_count() > 0)
    }

    /// Keys of the informers currently running.
    pub fn running(&self) -> Vec<InformerKey> {
        let map = self.informers.lock();
        map.iter().filter(|(_, w)| w.strong_count() > 0).map(|(k, _)| k.clone()).collect()
    }

    fn start(&self, key: InformerKey, resolved: kinds::ResolvedKind) -> Informer {
        let store = Arc::new(IndexedStore::new(key.kind.clone()));
        let handlers = Arc::new(Handlers::default());
        let (synced_tx, synced) = watch::channel(false);
        let last_error = Arc::new(Mutex::new(String::from("none")));
        let client = self.resolver.client().clone();
        let api: Api<RawObject> = match (&key.namespace, resolved.namespaced) {
            (Some(ns), true) => Api::namespaced_with(client, ns, &resolved.resource),
            _ => Api::all_with(client, &resolved.resource),
        };
        let mut config = watcher::Config::default();
        if let Some(sel) = &key.selector {
            config = config.labels(sel);
        }
        info!(informer = %key, "starting informer");
        let stream = watcher(api, config).default_backoff().boxed();
        let stream = if self.event_delay.is_zero() { stream } else { delayed(stream, self.event_delay) };
        let task = tokio::spawn(run_watch(key.clone(), stream, store.clone(), handlers.clone(), synced_tx, last_error.clone()));
        Informer { key, store, handlers, synced, last_error, task }
    }
}

/// What the informer's watch yields: kube-runtime's watcher events, retried with backoff.
type WatchEvents = BoxStream<'static, watcher::Result<watcher::Event<RawObject>>>;

/// The informer's task: apply each of `stream`'s events to `store` and dispatch the changes.
///
/// After each watch change it dispatches, it yields to the runtime: the handlers have woken
/// the workers the change concerns, and they get to start its reconcile before the next event
/// is handled. A burst of events already buffered (the API server flushing its watch after a
/// stall) would otherwise all be applied first, and the first event's reconcile wait for the
/// whole burst (measured: event → reconcile p50 36 → 19 µs at 1 000 events/s, BENCHMARKS.md §5).
/// A relist is dispatched at once when it is complete, as before.
async fn run_watch(
    key: InformerKey,
    mut stream: WatchEvents,
    store: Arc<IndexedStore>,
    handlers: Arc<Handlers>,
    synced: watch::Sender<bool>,
    last_error: Arc<Mutex<String>>,
) {
    // The list so far, each object in its cached form as it arrived (never N parsed documents),
    // and the first object the cache refused: a list with one is rejected whole.
    let mut buffer: Vec<cache::Listed> = Vec::new();
    let mut refused: Option<cache::Error> = None;
    // The key's annotation selector parsed when the key was made: it parses.
    let annotations = key.annotations.as_deref().and_then(|s| Selector::parse(s).ok());
    let selected = |v: &serde_json::Value| annotations.as_ref().is_none_or(|s| matches_annotations(s, v));
    while let Some(event) = stream.next().await {
        let event = match event {
            Ok(e) => e,
            Err(e) => {
                // The backoff wrapper retries; we only record and report.
                warn!(informer = %key, error = %e, "watch error; retrying with backoff");
                *last_error.lock() = e.to_string();
                continue;
            }
        };
        match event {
            watcher::Event::Init => {
                buffer.clear();
                refused = None;
            }
            watcher::Event::InitApply(obj) => {
                let v = to_value(obj, &key.kind);
                if selected(&v) && refused.is_none() {
                    match store.prepare(v) {
                        Ok(listed) => buffer.push(listed),
                        Err(e) => refused = Some(e),
                    }
                    // Once, at the 1000th object: ~10 ms (16 samples, 1000 compressions).
                    if buffer.len() == cache::DICTIONARY_AT
                        && let Some(p) = store.dictionary_for_list(&mut buffer)
                    {
                        info!(
                            informer = %key, dictionary_bytes = p.dictionary_bytes, objects = p.packed, json_bytes = p.json_bytes,
                            packed_bytes = p.packed_bytes, "cache dictionary built from the list; the rest is compressed as it arrives"
                        );
                    }
                }
            }
            watcher::Event::InitDone => {
                let listed = std::mem::take(&mut buffer);
                match refused.take() {
                    None => store.replace_listed(listed).iter().for_each(|c| handlers.dispatch(c)),
                    Some(e) => warn!(informer = %key, error = %e, "relist rejected by the cache"),
                }
                if !build_dictionary_if_due(&key, &store) {
                    // The list's transient allocations are free now; return them.
                    tokio::task::spawn_blocking(crate::heap::release_free_memory);
                }
                if !*synced.borrow() {
                    info!(informer = %key, objects = store.len(), "informer synced");
                    synced.send_replace(true);
                }
            }
            watcher::Event::Apply(obj) => {
                let v = to_value(obj, &key.kind);
                if selected(&v) {
                    match store.apply(v) {
                        Ok(change) => {
                            handlers.dispatch(&change);
                            build_dictionary_if_due(&key, &store);
                        }
                        Err(e) => warn!(informer = %key, error = %e, "object not cached"),
                    }
                } else {
                    // No longer selected (its annotations changed): it leaves the cache, as an
                    // object leaving a label selector does.
                    let meta = |f: &str| v.pointer(&format!("/metadata/{f}")).and_then(serde_json::Value::as_str);
                    if let Some(change) = store.delete(meta("namespace"), meta("name").unwrap_or_default()) {
                        handlers.dispatch(&change);
                    }
                }
                tokio::task::yield_now().await;
            }
            watcher::Event::Delete(obj) => {
                if let Some(change) = store.delete(obj.metadata.namespace.as_deref(), obj.metadata.name.as_deref().unwrap_or_default()) {
                    handlers.dispatch(&change);
                }
                tokio::task::yield_now().await;
            }
        }
    }
}

/// Once the store has grown large enough, build its kind's dictionary on a blocking thread, so
/// events keep flowing meanwhile (the store compresses what it holds, then swaps it in, then
/// the plain versions' memory is returned to the OS). True if it started a build.
fn build_dictionary_if_due(key: &InformerKey, store: &Arc<IndexedStore>) -> bool {
    if !store.wants_dictionary() {
        return false;
    }
    let (key, store) = (key.to_string(), store.clone());
    tokio::task::spawn_blocking(move || {
        let started = std::time::Instant::now();
        let p = store.build_dictionary();
        info!(
            informer = %key, dictionary_bytes = p.dictionary_bytes, dictionary_heap_bytes = p.dictionary_heap_bytes,
            objects = p.packed, json_bytes = p.json_bytes, packed_bytes = p.packed_bytes,
            took_ms = started.elapsed().as_millis() as u64, "cache dictionary built; objects compressed"
        );
        crate::heap::release_free_memory();
    });
    true
}

/// Whether `selector` matches `object`'s annotations.
fn matches_annotations(selector: &Selector, object: &serde_json::Value) -> bool {
    let annotations = object.pointer("/metadata/annotations");
    selector.matches_with(|k: &str| annotations.and_then(|a| a.get(k)).and_then(serde_json::Value::as_str))
}

/// `stream`'s items, each `delay` after it arrived (a forwarding task stamps them on arrival,
/// so the delay is constant, not cumulative). Dropping the result stops the forwarder.
fn delayed<T: Send + 'static>(mut stream: BoxStream<'static, T>, delay: Duration) -> BoxStream<'static, T> {
    let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
    let forwarder = tokio::spawn(async move {
        while let Some(item) = stream.next().await {
            if tx.send((tokio::time::Instant::now() + delay, item)).is_err() {
                break;
            }
        }
    });
    struct AbortOnDrop(tokio::task::JoinHandle<()>);
    impl Drop for AbortOnDrop {
        fn drop(&mut self) {
            self.0.abort();
        }
    }
    futures::stream::unfold((rx, AbortOnDrop(forwarder)), |(mut rx, guard)| async move {
        let (due, item) = rx.recv().await?;
        tokio::time::sleep_until(due).await;
        Some((item, (rx, guard)))
    })
    .boxed()
}

/// The object as JSON, with the informer's `apiVersion` and `kind`: the API server leaves them
/// out of the items of a built-in kind's list (a Namespace or ConfigMap from the initial list
/// would otherwise reach plugins without them, and e.g. `create_owned` on it fails).
fn to_value(obj: RawObject, kind: &KindRef) -> serde_json::Value {
    let mut value = obj.value;
    if let Some(map) = value.as_object_mut() {
        let missing = |f: &str| map.get(f).and_then(serde_json::Value::as_str).is_none_or(str::is_empty);
        if missing("apiVersion") || missing("kind") {
            map.insert("apiVersion".into(), kind.api_version.to_string().into());
            map.insert("kind".into(), kind.kind.to_string().into());
        }
    }
    value
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::AtomicUsize;

    use super::*;
    use crate::cache::CachedObject;

    #[test]
    fn list_items_without_api_version_and_kind_get_the_informers() {
        let ns = KindRef::new("v1", "Namespace");
        // As a built-in kind's list returns its items: no apiVersion, no kind.
        let item: RawObject = serde_json::from_value(serde_json::json!({"metadata": {"name": "team-a"}})).unwrap();
        let v = to_value(item, &ns);
        assert_eq!((v["apiVersion"].as_str(), v["kind"].as_str()), (Some("v1"), Some("Namespace")));
        // As a watch event or a custom resource's list: kept as sent.
        let event: RawObject =
            serde_json::from_value(serde_json::json!({"apiVersion": "wasmloop.dev/v1alpha1", "kind": "PodSet", "metadata": {"name": "p"}}))
                .unwrap();
        let v = to_value(event, &ns);
        assert_eq!((v["apiVersion"].as_str(), v["kind"].as_str()), (Some("wasmloop.dev/v1alpha1"), Some("PodSet")));
    }

    /// A RawObject named `name` in namespace `ns`, as a watch event carries it.
    fn raw(name: &str) -> RawObject {
        serde_json::from_value(serde_json::json!({"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": name, "namespace": "ns", "resourceVersion": "1"}}))
        .unwrap()
    }

    #[tokio::test]
    async fn a_woken_worker_starts_before_the_next_buffered_event_is_handled() {
        // Three changes buffered at once; the handler wakes a "worker" for each. On this
        // single-threaded runtime the worker runs only when the informer's task yields.
        let events: Vec<watcher::Result<watcher::Event<RawObject>>> = vec![
            Ok(watcher::Event::Init),
            Ok(watcher::Event::InitDone),
            Ok(watcher::Event::Apply(raw("a"))),
            Ok(watcher::Event::Apply(raw("b"))),
            Ok(watcher::Event::Delete(raw("a"))),
        ];
        let log = Arc::new(Mutex::new(Vec::new()));
        let (wake, mut woken) = tokio::sync::mpsc::unbounded_channel::<String>();
        let worker = {
            let log = log.clone();
            tokio::spawn(async move {
                while let Some(what) = woken.recv().await {
                    log.lock().push(format!("reconciled {what}"));
                }
            })
        };
        let handlers = Arc::new(Handlers::default());
        handlers.add(
            1,
            Arc::new({
                let log = log.clone();
                move |change: &Change| {
                    let what =
                        format!("{} {}", if matches!(change, Change::Deleted(_)) { "deleted" } else { "applied" }, change.object().name());
                    log.lock().push(format!("handled {what}"));
                    wake.send(what).unwrap();
                }
            }),
        );
        let kind = KindRef::new("v1", "ConfigMap");
        let key = InformerKey::new(kind.clone(), Some("ns".into()), None).unwrap();
        let store = Arc::new(IndexedStore::new(kind));
        let (synced, _) = watch::channel(false);
        run_watch(key, futures::stream::iter(events).boxed(), store.clone(), handlers.clone(), synced, Default::default()).await;
        drop(handlers); // the last sender: the worker ends once it has drained
        worker.await.unwrap();
        assert_eq!(
            *log.lock(),
            [
                "handled applied a",
                "reconciled applied a",
                "handled applied b",
                "reconciled applied b",
                "handled deleted a",
                "reconciled deleted a"
            ],
            "each change's worker ran before the next change was handled"
        );
        assert_eq!(store.len(), 1, "b is cached, a was deleted");
    }

    #[test]
    fn an_informer_quotes_a_long_selector_by_its_start_and_size() {
        let long = format!("app in ({})", (0..100).map(|i| format!("value-{i}")).collect::<Vec<_>>().join(","));
        let key = InformerKey::new(KindRef::new("v1", "Pod"), Some("ns".into()), Some(&long)).unwrap();
        let shown = key.to_string();
        assert!(shown.starts_with("v1/Pod in ns [app in (value-0,"), "{shown}");
        assert!(shown.ends_with(&format!("… ({} bytes)]", key.selector.as_ref().unwrap().len())), "{shown}");
        assert!(shown.len() < QUOTED_SELECTOR + 64, "{shown}");
        let short = InformerKey::new(KindRef::new("v1", "Pod"), None, Some("app=web")).unwrap();
        assert_eq!(short.to_string(), "v1/Pod [app=web]");
    }

    #[test]
    fn a_handler_may_unsubscribe_and_subscribe_while_being_dispatched() {
        let handlers = Arc::new(Handlers::default());
        let calls = Arc::new(AtomicUsize::new(0));
        let h: Handler = {
            let (handlers, calls) = (Arc::downgrade(&handlers), calls.clone());
            Arc::new(move |_| {
                calls.fetch_add(1, Ordering::Relaxed);
                let handlers = handlers.upgrade().expect("handlers alive");
                handlers.remove(1); // itself: with the lock held during dispatch this deadlocked
                handlers.add(2, Arc::new(|_| {}));
            })
        };
        handlers.add(1, h);
        let change = Change::Added(Arc::new(CachedObject::from_value(serde_json::json!({"metadata": {"name": "x"}})).unwrap()));
        handlers.dispatch(&change);
        handlers.dispatch(&change);
        assert_eq!(calls.load(Ordering::Relaxed), 1, "the handler ran once, then was gone");
        assert_eq!(handlers.list.read().iter().map(|(id, _)| *id).collect::<Vec<_>>(), [2]);
    }
}
