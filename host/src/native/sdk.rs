//! A plugin crate run natively: [`SdkReconciler<R>`] runs a `wasmloop_sdk::Reconciler` (the
//! same source the plugin's component is built from, linked as an `rlib`) through the SDK's
//! `embed` backend, answering its cache reads from the host's [`CacheRead`] and sending its logs
//! to `tracing`.
//!
//! Everything but the sandbox is the Wasm path's: the spec is built and checked from
//! `R::metadata()` as from a component's `metadata()`, the request and outcome are converted by
//! the same rules ([`crate::plugin::convert`]: an outcome one path refuses, the other refuses
//! with the same message), metadata reads return what the component would get
//! ([`crate::plugin::meta`]), and errors map alike (the plugin's transient and permanent errors
//! as such, an invalid outcome permanent, a panic, the native form of a trap, transient). What
//! it does not do: grants and limits other than `maxActions` (no memory, time or read budget);
//! reads are limited to the kinds the plugin declares.

use std::marker::PhantomData;
use std::rc::Rc;
use std::sync::Arc;

use wasmloop_sdk as sdk;
use wasmloop_sdk::embed::{self, Backend};

use crate::cache::{self, CachedObject, SharedCache};
use crate::kinds::{KindRef, ObjectKey};
use crate::plugin::Limits;
use crate::plugin::bindings::types as wit;
use crate::plugin::convert::{from_sdk_actions, from_sdk_outcome, spec_from_sdk_metadata, to_sdk_request};
use crate::plugin::meta::{object_meta, packed_objects};
use crate::reconciler::{Cause, Outcome, ReconcileError, Reconciler, ReconcilerSpec, Request, catch_panic};

/// Why a plugin crate cannot be run.
#[derive(Debug, thiserror::Error, Clone, PartialEq, Eq)]
pub enum Error {
    /// `R::metadata()` is refused as a component's `metadata()` would be.
    #[error("invalid plugin metadata: {0}")]
    InvalidMetadata(#[from] crate::plugin::MetadataError),
    /// `R::metadata()` panicked.
    #[error("the plugin's metadata() panicked: {0}")]
    MetadataPanicked(String),
}

/// A `wasmloop_sdk::Reconciler` (a plugin crate's reconciler type) run natively behind the
/// host's [`Reconciler`] trait, so it can be run and benchmarked next to its own component:
/// `SdkReconciler::<replicaset::ReplicaSetReconciler>::new()?`.
pub struct SdkReconciler<R> {
    /// Shared with each call's backend.
    spec: Arc<ReconcilerSpec>,
    limits: Limits,
    // `fn() -> R`: the reconciler is a type, never a value, so this is `Send + Sync` for any `R`.
    reconciler: PhantomData<fn() -> R>,
}

impl<R> std::fmt::Debug for SdkReconciler<R> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SdkReconciler")
            .field("reconciler", &std::any::type_name::<R>())
            .field("name", &self.spec.name)
            .field("max_actions", &self.limits.max_actions)
            .finish()
    }
}

impl<R: sdk::Reconciler> SdkReconciler<R> {
    /// The reconciler with the spec `R::metadata()` describes (checked as a component's is) and
    /// the default limits.
    pub fn new() -> Result<Self, Error> {
        let metadata = catch_panic(R::metadata).map_err(|p| Error::MetadataPanicked(p.0))?;
        let spec = spec_from_sdk_metadata(metadata).map_err(Error::InvalidMetadata)?;
        Ok(Self { spec: Arc::new(spec), limits: Limits::default(), reconciler: PhantomData })
    }

    /// Run under another name (the controller's, in logs and metrics), as a manifest's grants
    /// rename a component.
    pub fn named(mut self, name: impl Into<String>) -> Self {
        Arc::make_mut(&mut self.spec).name = name.into();
        self
    }

    /// Apply these limits: of them, only `maxActions` (the outcome's size) applies natively.
    pub fn with_limits(mut self, limits: Limits) -> Self {
        self.limits = limits;
        self
    }

    /// The limits this reconciler applies (see [`Self::with_limits`]).
    pub fn limits(&self) -> &Limits {
        &self.limits
    }
}

impl<R: sdk::Reconciler + 'static> Reconciler for SdkReconciler<R> {
    fn spec(&self) -> &ReconcilerSpec {
        &self.spec
    }

    /// Run `R::reconcile` on this thread with `cache` answering its reads. Never panics: a
    /// panic of the plugin becomes a `Transient` error, an invalid outcome a `Permanent` one.
    fn reconcile(&self, request: &Request, cache: &SharedCache) -> Result<Outcome, ReconcileError> {
        let name = &self.spec.name;
        let backend = Rc::new(HostCache { cache: cache.clone(), spec: self.spec.clone(), key: request.key.clone() });
        let run = || embed::reconcile_with::<R>(backend, to_sdk_request(request));
        match catch_panic(run) {
            Ok(Ok(outcome)) => from_sdk_outcome(outcome, &self.limits)
                .map_err(|source| ReconcileError::permanent(Cause::InvalidOutcome { plugin: name.clone(), source: Box::new(source) })),
            Ok(Err(e)) => {
                let (e, actions) = e.into_parts();
                let error = if e.is_transient() {
                    ReconcileError::reconciler_transient(e.message())
                } else {
                    ReconcileError::reconciler_permanent(e.message())
                };
                let actions = from_sdk_actions(actions, &self.limits).map_err(|source| {
                    ReconcileError::permanent(Cause::InvalidOutcome { plugin: name.clone(), source: Box::new(source) })
                })?;
                Err(error.with_actions(actions))
            }
            Err(panic) => Err(ReconcileError::transient(Cause::Stopped(format!("plugin {name} panicked in reconcile: {panic}")))),
        }
    }
}

/// The SDK backend of one reconcile: the host's cache and what the plugin declared.
struct HostCache {
    cache: SharedCache,
    spec: Arc<ReconcilerSpec>,
    /// The key being reconciled, for the log lines.
    key: ObjectKey,
}

type CacheResult<T> = Result<T, sdk::cache::Error>;

impl HostCache {
    /// The host's name of `kind`, if the plugin declared it readable.
    fn readable(&self, kind: &sdk::KindRef) -> CacheResult<KindRef> {
        let kind = KindRef::new(kind.api_version.as_ref(), kind.kind.as_ref());
        let spec = &self.spec;
        let declared =
            spec.reconciles == kind || spec.watches.iter().any(|w| w.kind == kind) || spec.indexes.iter().any(|i| i.kind == kind);
        if !declared {
            return Err(cache_error(cache::Error::NotGranted(kind)));
        }
        Ok(kind)
    }

    fn metas(&self, kind: &sdk::KindRef, host_kind: &KindRef, objects: &[std::sync::Arc<CachedObject>]) -> Vec<sdk::meta::Meta> {
        self.records(host_kind, objects).into_iter().map(|m| sdk_meta(kind, m)).collect()
    }

    /// The contract's records of `objects`, as the Wasm path builds them.
    fn records(&self, host_kind: &KindRef, objects: &[std::sync::Arc<CachedObject>]) -> Vec<wit::ObjectMeta> {
        let paths = self.paths(host_kind);
        objects.iter().map(|o| object_meta(o, &paths)).collect()
    }

    /// The packed buffer of `objects`, as the Wasm path packs it.
    fn packed(&self, host_kind: &KindRef, objects: &[std::sync::Arc<CachedObject>]) -> Vec<u8> {
        let objects: Vec<&CachedObject> = objects.iter().map(|o| &**o).collect();
        packed_objects(&objects, &self.paths(host_kind))
    }

    /// The fields declared for `host_kind`, in order.
    fn paths(&self, host_kind: &KindRef) -> Vec<&str> {
        self.spec.fields.iter().filter(|f| &f.kind == host_kind).map(|f| f.path.as_str()).collect()
    }
}

/// The host's cache errors as the component sees them (`cache-error`).
fn cache_error(e: cache::Error) -> sdk::cache::Error {
    match e {
        cache::Error::NotGranted(_) => sdk::cache::Error::NotGranted(e.to_string()),
        cache::Error::UnknownIndex { .. } => sdk::cache::Error::UnknownIndex(e.to_string()),
        _ => sdk::cache::Error::Invalid(e.to_string()),
    }
}

/// A metadata record as the SDK's component glue builds it from the contract's.
fn sdk_meta(kind: &sdk::KindRef, m: wit::ObjectMeta) -> sdk::meta::Meta {
    let metadata = sdk::object::ObjectMeta {
        namespace: m.namespace,
        name: m.name,
        uid: m.uid,
        resource_version: Some(m.resource_version).filter(|rv| !rv.is_empty()),
        generation: m.generation,
        creation_timestamp: m.creation_timestamp,
        deletion_timestamp: m.deletion_timestamp,
        labels: m.labels.into_iter().collect(),
        annotations: m.annotations.into_iter().collect(),
        owner_references: m
            .owner_references
            .into_iter()
            .map(|r| sdk::object::OwnerReference {
                api_version: r.api_version,
                kind: r.kind,
                name: r.name,
                uid: r.uid,
                controller: Some(r.controller),
                block_owner_deletion: Some(r.block_owner_deletion),
            })
            .collect(),
        finalizers: m.finalizers,
    };
    sdk::meta::Meta { kind: kind.clone(), metadata, fields: m.fields }
}

fn jsons(objects: Vec<std::sync::Arc<CachedObject>>) -> CacheResult<Vec<String>> {
    objects.iter().map(|o| o.json().map(std::borrow::Cow::into_owned).map_err(cache_error)).collect()
}

impl Backend for HostCache {
    fn get(&self, kind: &sdk::KindRef, namespace: Option<&str>, name: &str) -> CacheResult<Option<String>> {
        let kind = self.readable(kind)?;
        let found = self.cache.get(&kind, namespace, name).map_err(cache_error)?;
        found.map(|o| o.json().map(std::borrow::Cow::into_owned)).transpose().map_err(cache_error)
    }

    fn list(&self, kind: &sdk::KindRef, namespace: Option<&str>, selector: Option<&str>) -> CacheResult<Vec<String>> {
        let kind = self.readable(kind)?;
        jsons(self.cache.list(&kind, namespace, selector).map_err(cache_error)?)
    }

    fn by_index(&self, kind: &sdk::KindRef, index: &str, value: &str) -> CacheResult<Vec<String>> {
        let kind = self.readable(kind)?;
        jsons(self.cache.by_index(&kind, index, value).map_err(cache_error)?)
    }

    /// Only reached by a caller of the default `*_meta` methods, all overridden below.
    fn metas(&self, kind: &sdk::KindRef, objects: Vec<String>) -> Vec<sdk::meta::Meta> {
        let Ok(host_kind) = self.readable(kind) else { return Vec::new() };
        let cached: Vec<_> = objects
            .into_iter()
            .filter_map(|json| serde_json::from_str(&json).ok())
            .filter_map(|v| CachedObject::from_value(v).ok().map(std::sync::Arc::new))
            .collect();
        self.metas(kind, &host_kind, &cached)
    }

    fn get_meta(&self, kind: &sdk::KindRef, namespace: Option<&str>, name: &str) -> CacheResult<Option<sdk::meta::Meta>> {
        let host_kind = self.readable(kind)?;
        let found = self.cache.get(&host_kind, namespace, name).map_err(cache_error)?;
        Ok(self.metas(kind, &host_kind, found.as_slice()).pop())
    }

    fn list_meta(&self, kind: &sdk::KindRef, namespace: Option<&str>, selector: Option<&str>) -> CacheResult<Vec<sdk::meta::Meta>> {
        let host_kind = self.readable(kind)?;
        let found = self.cache.list(&host_kind, namespace, selector).map_err(cache_error)?;
        Ok(self.metas(kind, &host_kind, &found))
    }

    fn by_index_meta(&self, kind: &sdk::KindRef, index: &str, value: &str) -> CacheResult<Vec<sdk::meta::Meta>> {
        let host_kind = self.readable(kind)?;
        let found = self.cache.by_index(&host_kind, index, value).map_err(cache_error)?;
        Ok(self.metas(kind, &host_kind, &found))
    }

    /// Packed as the Wasm path packs them.
    fn list_meta_packed(&self, kind: &sdk::KindRef, namespace: Option<&str>, selector: Option<&str>) -> CacheResult<Vec<u8>> {
        let host_kind = self.readable(kind)?;
        let found = self.cache.list(&host_kind, namespace, selector).map_err(cache_error)?;
        Ok(self.packed(&host_kind, &found))
    }

    /// Packed as the Wasm path packs them.
    fn by_index_meta_packed(&self, kind: &sdk::KindRef, index: &str, value: &str) -> CacheResult<Vec<u8>> {
        let host_kind = self.readable(kind)?;
        let found = self.cache.by_index(&host_kind, index, value).map_err(cache_error)?;
        Ok(self.packed(&host_kind, &found))
    }

    fn log(&self, level: sdk::log::Level, message: &str) {
        let plugin = self.spec.name.as_str();
        let key = &self.key;
        use sdk::log::Level as L;
        match level {
            L::Trace => tracing::trace!(target: "wasmloop::plugin", plugin, %key, "{message}"),
            L::Debug => tracing::debug!(target: "wasmloop::plugin", plugin, %key, "{message}"),
            L::Info => tracing::info!(target: "wasmloop::plugin", plugin, %key, "{message}"),
            L::Warn => tracing::warn!(target: "wasmloop::plugin", plugin, %key, "{message}"),
            L::Error => tracing::error!(target: "wasmloop::plugin", plugin, %key, "{message}"),
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use crate::plugin::MetadataError;
    use serde_json::{Value, json};
    use wasmloop_sdk::{Metadata, kinds, meta};

    use super::*;
    use crate::actions::{Action, Deletion, Event, EventType, Planned, Preconditions};
    use crate::cache::CacheView;
    use crate::reconciler::{FieldDecl, Mapping, Reason, Retry};

    /// A small ReplicaSet-like reconciler; the key's name picks what it does.
    struct Tiny;

    impl sdk::Reconciler for Tiny {
        fn metadata() -> Metadata {
            Metadata::new("tiny", "0.1.0").reconciles(kinds::REPLICA_SET).owns(kinds::POD).field(kinds::POD, "status.phase")
        }

        fn reconcile(req: sdk::Request) -> Result<sdk::Outcome, sdk::Error> {
            match req.key.name.as_str() {
                "transient" => return Err(sdk::Error::transient("try later")),
                "permanent" => return Err(sdk::Error::permanent("bad spec")),
                "ungranted" => {
                    sdk::cache::get_raw(&kinds::SECRET, req.key.ns(), "s")?;
                }
                "panics" => panic!("boom"),
                "bad-status" => {
                    let mut out = sdk::Outcome::new();
                    out.push(sdk::Action::UpdateStatus { key: req.key.clone(), status: json!(3) });
                    return Ok(out);
                }
                "subresource" => return Ok(sdk::Outcome::new().delete_key(kinds::POD.key(req.key.ns(), "p/status"))),
                "unnamed" => return Ok(sdk::Outcome::new().create(&json!({"apiVersion": "v1", "kind": "Pod", "metadata": {}}))),
                "many" => {
                    let mut out = sdk::Outcome::new();
                    for n in 0..3 {
                        out = out.delete_key(kinds::POD.key(req.key.ns(), format!("p{n}")));
                    }
                    return Ok(out);
                }
                _ => {}
            }
            let Some(rs) = sdk::cache::get_key::<Value>(&req.key)? else { return Ok(sdk::Outcome::new()) };
            let uid = rs["metadata"]["uid"].as_str().unwrap_or_default().to_owned();
            let pods = meta::owned_by(&kinds::POD, &uid)?;
            let listed: Vec<Value> = sdk::cache::list(&kinds::POD, req.key.ns(), Some("app=web"))?;
            sdk::info!("{} owned, {} labelled, last error {:?}", pods.len(), listed.len(), req.last_error);
            let mut out = sdk::Outcome::new();
            for p in &pods {
                if p.field::<String>(0).as_deref() == Some("Failed") {
                    out = out.delete(&p.object());
                }
            }
            let child = json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"generateName": "web-"}});
            Ok(out
                .create_owned(&rs, child)
                .status(&rs, json!({"replicas": pods.len()}))
                .event(&rs, sdk::EventType::Warning, "Scaled", "up")
                .requeue_after(Duration::from_micros(1_500_300)))
        }
    }

    fn rs_kind() -> KindRef {
        KindRef::new("apps/v1", "ReplicaSet")
    }

    fn pod(name: &str, owner: &str, phase: &str) -> Value {
        json!({"apiVersion": "v1", "kind": "Pod",
               "metadata": {"name": name, "namespace": "shop", "uid": name, "resourceVersion": "1", "labels": {"app": "web"},
                            "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "web", "uid": owner, "controller": true}]},
               "status": {"phase": phase}})
    }

    fn cache() -> SharedCache {
        Arc::new(
            CacheView::from_objects([
                json!({"apiVersion": "apps/v1", "kind": "ReplicaSet",
                   "metadata": {"name": "web", "namespace": "shop", "uid": "rs-uid", "resourceVersion": "1"}}),
                pod("a", "rs-uid", "Running"),
                pod("b", "rs-uid", "Failed"),
                pod("c", "other-uid", "Failed"),
                json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "s", "namespace": "shop"}}),
            ])
            .unwrap(),
        )
    }

    fn run(name: &str) -> Result<Outcome, ReconcileError> {
        let rec = SdkReconciler::<Tiny>::new().unwrap().with_limits(Limits { max_actions: 2, ..Limits::default() });
        let mut req = Request::new(ObjectKey::new(rs_kind(), Some("shop"), name)).because(Reason::Retry(2));
        req.last_error = Some("conflict".into());
        rec.reconcile(&req, &cache())
    }

    #[test]
    fn the_spec_is_built_from_the_metadata() {
        let rec = SdkReconciler::<Tiny>::new().unwrap().named("tiny-native");
        let spec = rec.spec();
        assert_eq!((spec.name.as_str(), spec.version.as_str(), &spec.reconciles), ("tiny-native", "0.1.0", &rs_kind()));
        assert_eq!(spec.watches.len(), 1);
        assert_eq!((&spec.watches[0].kind, &spec.watches[0].mapping), (&KindRef::new("v1", "Pod"), &Mapping::Owner));
        assert_eq!(spec.fields, vec![FieldDecl { kind: KindRef::new("v1", "Pod"), path: "status.phase".into() }]);

        struct NoKind;
        impl sdk::Reconciler for NoKind {
            fn metadata() -> Metadata {
                Metadata::new("Bad Name", "0.1.0")
            }
            fn reconcile(_: sdk::Request) -> Result<sdk::Outcome, sdk::Error> {
                Ok(sdk::Outcome::new())
            }
        }
        let err = SdkReconciler::<NoKind>::new().unwrap_err();
        assert!(matches!(&err, Error::InvalidMetadata(MetadataError::NoReconciledKind)), "{err}");
    }

    #[test]
    fn reads_the_host_cache_and_returns_the_host_actions() {
        let rec = SdkReconciler::<Tiny>::new().unwrap();
        let req = Request::new(ObjectKey::new(rs_kind(), Some("shop"), "web"));
        let out = rec.reconcile(&req, &cache()).unwrap();
        let pod_key = |name: &str| ObjectKey::new(KindRef::new("v1", "Pod"), Some("shop"), name);
        let rs_key = ObjectKey::new(rs_kind(), Some("shop"), "web");
        let child = json!({"apiVersion": "v1", "kind": "Pod",
                           "metadata": {"generateName": "web-", "namespace": "shop",
                                        "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "web",
                                                             "uid": "rs-uid", "controller": true, "blockOwnerDeletion": true}]}});
        assert_eq!(
            out,
            Outcome {
                actions: [
                    Action::Delete(Deletion { key: pod_key("b"), preconditions: Preconditions::default() }),
                    Action::Create(child),
                    Action::UpdateStatus { key: rs_key.clone(), status: json!({"replicas": 2}) },
                    Action::Event(Event {
                        regarding: rs_key,
                        event_type: EventType::Warning,
                        reason: "Scaled".into(),
                        message: "up".into()
                    }),
                ]
                .into_iter()
                .map(|a| Planned::new(a).unwrap())
                .collect(),
                // Whole milliseconds, as the contract carries it.
                requeue_after: Some(Duration::from_millis(1500)),
            }
        );
        let gone = Request::new(ObjectKey::new(rs_kind(), Some("shop"), "gone"));
        assert_eq!(rec.reconcile(&gone, &cache()), Ok(Outcome::default()));
    }

    #[test]
    fn errors_map_as_on_the_wasm_path() {
        // How it is retried, and the message.
        let run = |what: &str| run(what).map_err(|e| (e.retry, e.to_string()));
        assert_eq!(run("transient"), Err((Retry::Backoff, "try later".into())));
        assert_eq!(run("permanent"), Err((Retry::WhenChanged, "bad spec".into())));
        let Err((Retry::Backoff, m)) = run("ungranted") else { panic!("{:?}", run("ungranted")) };
        assert!(m.contains("cache read not granted") && m.contains("v1/Secret"), "{m}");
        let Err((Retry::Backoff, m)) = run("panics") else { panic!() };
        assert_eq!(m, "plugin tiny panicked in reconcile: boom");
        // Refused by the SDK's builders, and by the host's checks of the outcome.
        let Err((Retry::WhenChanged, m)) = run("unnamed") else { panic!() };
        assert!(m.contains("neither metadata.name nor metadata.generateName"), "{m}");
        let Err((Retry::WhenChanged, m)) = run("bad-status") else { panic!() };
        assert_eq!(m, "plugin tiny returned an invalid outcome: action 0 (update-status): status must be a JSON object, got a number");
        let Err((Retry::WhenChanged, m)) = run("subresource") else { panic!() };
        assert!(m.contains("action 0 (delete)") && m.contains("subresources are not action targets"), "{m}");
        let Err((Retry::WhenChanged, m)) = run("many") else { panic!() };
        assert_eq!(m, "plugin tiny returned an invalid outcome: 3 actions, more than limits.maxActions 2");
        // The thread is left without a backend.
        assert_eq!(sdk::cache::get_raw(&kinds::POD, None, "a"), Err(sdk::cache::Error::NoHost));
    }
}
