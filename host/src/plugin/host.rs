//! The host side of one plugin call: the Store data ([`HostState`]) and the imports it serves.
//!
//! Each call (the `metadata()` call at load, then every reconcile) gets a fresh [`HostState`]:
//! - a WASI context with **no capabilities**: no preopened directories, no environment, no
//!   arguments, no network (TCP, UDP and name lookup denied), stdin empty; stdout/stderr are
//!   forwarded line by line into `tracing`, tagged with the plugin and key, within a byte budget;
//! - a [`MemoryLimiter`] enforcing the plugin's memory cap and remembering a refused growth (to
//!   tell an out-of-memory trap from other traps);
//! - the cache the reconcile may read, with reads checked against the plugin's [`Grants`];
//! - optionally a [`Tap`]: a call being recorded logs its reads, clocks and random values
//!   ([`super::recorder`]); a replayed call gets them from a recording ([`super::replay`]).

use std::borrow::Cow;
use std::sync::Arc;

use wasmtime::component::ResourceTable;
use wasmtime_wasi::{WasiCtx, WasiCtxBuilder, WasiCtxView, WasiView};

use super::bindings::{cache as wit_cache, log as wit_log, types as wit};
use super::limiter::MemoryLimiter;
use super::limits::Limits;
use super::meta;
use super::output::{GuestOutput, OutputRate};
use super::recorder::Capture;
use super::recording::{Answer, Call, Kind};
use super::replay::Serve;
use crate::cache::{self, CachedObject, SharedCache};
use crate::grants::{Grants, ReadScope};
use crate::kinds::KindRef;
use crate::reconciler::FieldDecl;

/// Most random bytes one WASI `get-random-bytes` call may ask for.
const RANDOM_BYTES_PER_REQUEST: u64 = 64 * 1024;

/// Most WASI resources (streams, pollables) one call may hold at once; creating more traps.
pub const RESOURCES_PER_CALL: usize = 1024;

/// Store data of one plugin call.
pub struct HostState {
    plugin: Arc<str>,
    key: Option<String>,
    /// Built on the first WASI call (many reconciles make none): see [`zero_capability_wasi`].
    wasi: Option<WasiCtx>,
    table: ResourceTable,
    pub(crate) limiter: MemoryLimiter,
    pub(crate) output: GuestOutput,
    cache: Option<SharedCache>,
    grants: Arc<Grants>,
    /// Bytes of object JSON this call may still copy out of the cache.
    read_budget: usize,
    /// Set when a read went over the budget: the call fails whatever the guest returns.
    pub(crate) reads_exhausted: Option<usize>,
    /// Fields the plugin declared for metadata reads.
    fields: Arc<[FieldDecl]>,
    /// Recording this call, or replaying one (None: neither, the common case).
    tap: Option<Tap>,
}

/// What a call's inputs go through besides the cache: a recording being made, or one replayed.
#[derive(Clone, Debug)]
pub(crate) enum Tap {
    /// Log every read, clock reading and random byte.
    Record(Capture),
    /// Answer reads, clocks and random from a recording; the cache is not read.
    Replay(Serve),
}

impl HostState {
    /// State for one call of `plugin`. `key` tags log lines; `cache` is what reads see (None
    /// during `metadata()`: every read is refused).
    pub(crate) fn new(
        plugin: Arc<str>,
        key: Option<String>,
        limits: &Limits,
        grants: Arc<Grants>,
        cache: Option<SharedCache>,
        rate: Arc<OutputRate>,
    ) -> Self {
        let output = GuestOutput::metered(plugin.clone(), key.clone(), limits.output.as_usize(), rate);
        Self {
            plugin,
            key,
            wasi: None,
            table: {
                let mut table = ResourceTable::new();
                table.set_max_capacity(RESOURCES_PER_CALL);
                table
            },
            limiter: MemoryLimiter::new(limits),
            output,
            cache,
            grants,
            read_budget: limits.read_budget().as_usize(),
            reads_exhausted: None,
            fields: Arc::from([]),
            tap: None,
        }
    }

    /// Record this call's inputs, or serve them from a recording. Before the first guest call.
    pub(crate) fn tap(&mut self, tap: Tap) {
        self.tap = Some(tap);
    }

    /// A cache read through the tap: `live` answers it from the cache (logged when recording);
    /// when replaying, the recording answers it (a read it lacks is a `cache-error`). `call` is
    /// the read, built only when there is a tap.
    fn tapped<T>(
        &mut self,
        call: Option<Call>,
        live: impl FnOnce(&mut Self) -> Result<T, wit_cache::CacheError>,
        answer: fn(&T) -> Answer,
        from: fn(Answer) -> Option<T>,
    ) -> Result<T, wit_cache::CacheError> {
        match (&self.tap, call) {
            (None, _) | (_, None) => live(self),
            (Some(Tap::Record(capture)), Some(call)) => {
                let capture = capture.clone();
                let exhausted = self.reads_exhausted.is_some();
                let result = live(self);
                let recorded = match &result {
                    Ok(v) => answer(v),
                    Err(e) => Answer::Error(e.into()),
                };
                capture.read(call, recorded, !exhausted && self.reads_exhausted.is_some());
                result
            }
            (Some(Tap::Replay(serve)), Some(call)) => {
                let Some((recorded, over_budget)) = serve.read(&call) else {
                    return Err(wit_cache::CacheError::Invalid(format!("not recorded: {call} (the recording has no such read)")));
                };
                if over_budget {
                    self.reads_exhausted.get_or_insert(0);
                }
                match recorded {
                    Answer::Error(e) => Err((&e).into()),
                    other => from(other).ok_or_else(|| {
                        wit_cache::CacheError::Invalid(format!("the recording answers {call} with another call's kind of answer"))
                    }),
                }
            }
        }
    }

    /// The fields metadata reads return (from the plugin's metadata).
    pub(crate) fn declare_fields(&mut self, fields: Arc<[FieldDecl]>) {
        self.fields = fields;
    }

    /// Charge `objects` to the read budget before copying them; past it, the read fails.
    fn charge(&mut self, objects: &[&Arc<CachedObject>]) -> Result<(), wit_cache::CacheError> {
        self.charge_bytes(objects.iter().map(|o| o.json_len()).sum())
    }

    fn charge_bytes(&mut self, bytes: usize) -> Result<(), wit_cache::CacheError> {
        if self.reads_exhausted.is_some() || bytes > self.read_budget {
            let budget = self.read_budget;
            self.reads_exhausted.get_or_insert(budget);
            return Err(wit_cache::CacheError::Invalid(format!(
                "this call read more object JSON than its budget allows ({budget} bytes left); the reconcile fails"
            )));
        }
        self.read_budget -= bytes;
        Ok(())
    }

    /// The JSON of `objects` the plugin may see, charged to the budget.
    fn jsons(&mut self, objects: Vec<Arc<CachedObject>>, scope: &ReadScope) -> Result<Vec<String>, wit_cache::CacheError> {
        let visible: Vec<&Arc<CachedObject>> = objects.iter().filter(|o| scope.allows(o.namespace())).collect();
        self.charge(&visible)?;
        visible.into_iter().map(|o| o.json().map(Cow::into_owned).map_err(cache_error)).collect()
    }

    /// The metadata of `objects` the plugin may see, charged to the budget.
    fn metas(
        &mut self,
        kind: &KindRef,
        objects: Vec<Arc<CachedObject>>,
        scope: &ReadScope,
    ) -> Result<Vec<wit::ObjectMeta>, wit_cache::CacheError> {
        let visible: Vec<&Arc<CachedObject>> = objects.iter().filter(|o| scope.allows(o.namespace())).collect();
        // Charged as JSON reads, before the work: the host parses each object's JSON to build its
        // record, so a loop of metadata reads costs the host what the plugin is charged.
        self.charge(&visible)?;
        let paths: Vec<&str> = self.fields.iter().filter(|f| &f.kind == kind).map(|f| f.path.as_str()).collect();
        Ok(visible.into_iter().map(|o| meta::object_meta(o, &paths)).collect())
    }

    /// [`HostState::metas`] in one packed buffer, without building the records.
    fn packed(&mut self, kind: &KindRef, objects: Vec<Arc<CachedObject>>, scope: &ReadScope) -> Result<Vec<u8>, wit_cache::CacheError> {
        let visible: Vec<&Arc<CachedObject>> = objects.iter().filter(|o| scope.allows(o.namespace())).collect();
        self.charge(&visible)?;
        let paths: Vec<&str> = self.fields.iter().filter(|f| &f.kind == kind).map(|f| f.path.as_str()).collect();
        let visible: Vec<&CachedObject> = visible.into_iter().map(|o| &**o).collect();
        Ok(meta::packed_objects(&visible, &paths))
    }

    /// Check a read of `kind` (in `namespace`, or all granted namespaces) against the grants.
    fn check_list(&self, kind: &KindRef, namespace: Option<&str>) -> Result<ReadScope, wit_cache::CacheError> {
        let scope = self.read_scope(kind);
        // One namespace must be granted; all namespaces are filtered down to the granted ones.
        let refused = match namespace {
            Some(ns) => !scope.allows(Some(ns)),
            None => scope == ReadScope::None,
        };
        if refused { Err(self.not_granted(kind, namespace)) } else { Ok(scope) }
    }

    fn read_scope(&self, kind: &KindRef) -> ReadScope {
        self.grants.read_scope(kind)
    }

    fn not_granted(&self, kind: &KindRef, namespace: Option<&str>) -> wit_cache::CacheError {
        let message = match self.grants.check_read(kind, namespace) {
            Err(e) => e.to_string(),
            Ok(()) => format!("plugin {} may not read {kind}", self.plugin),
        };
        wit_cache::CacheError::NotGranted(message)
    }

    fn cache(&self) -> Result<SharedCache, wit_cache::CacheError> {
        self.cache.clone().ok_or_else(|| wit_cache::CacheError::NotGranted("the cache is not readable during metadata()".into()))
    }
}

/// The WASI context of one call: no capabilities; stdout and stderr go to `output`; clocks and
/// random values recorded or replayed through `tap`.
fn zero_capability_wasi(output: &GuestOutput, tap: Option<&Tap>) -> WasiCtx {
    let mut builder = WasiCtxBuilder::new();
    match tap {
        None => {}
        Some(Tap::Record(capture)) => capture.install(&mut builder),
        Some(Tap::Replay(serve)) => serve.install(&mut builder),
    }
    builder
        .stdout(output.stream("stdout"))
        .stderr(output.stream("stderr"))
        .allow_tcp(false)
        .allow_udp(false)
        .allow_ip_name_lookup(false)
        .socket_addr_check(|_, _| Box::pin(async { false }))
        // Random bytes are allocated by the host: a larger request traps.
        .max_random_size(RANDOM_BYTES_PER_REQUEST)
        .build()
}

impl WasiView for HostState {
    /// Every WASI import goes through here: the context is built on first use (about 0.7 µs,
    /// two RNG seedings and a dozen allocations), so a reconcile that makes no WASI call does
    /// not pay for it. It is per call either way: nothing is shared between calls.
    fn ctx(&mut self) -> WasiCtxView<'_> {
        let (output, tap) = (&self.output, self.tap.as_ref());
        let ctx = self.wasi.get_or_insert_with(|| zero_capability_wasi(output, tap));
        WasiCtxView { ctx, table: &mut self.table }
    }
}

fn kind_ref(k: wit::KindRef) -> KindRef {
    KindRef::new(k.api_version, k.kind)
}

fn cache_error(e: cache::Error) -> wit_cache::CacheError {
    use wit_cache::CacheError as W;
    match e {
        cache::Error::NotGranted(_) => W::NotGranted(e.to_string()),
        cache::Error::UnknownIndex { .. } => W::UnknownIndex(e.to_string()),
        _ => W::Invalid(e.to_string()),
    }
}

impl wit::Host for HostState {}

impl HostState {
    // The cache reads, answered from the cache (`tapped` wraps each).
    fn live_get(&mut self, kind: wit::KindRef, namespace: Option<String>, name: String) -> Result<Option<String>, wit_cache::CacheError> {
        let kind = kind_ref(kind);
        if !self.read_scope(&kind).allows(namespace.as_deref()) {
            return Err(self.not_granted(&kind, namespace.as_deref()));
        }
        let found = self.cache()?.get(&kind, namespace.as_deref(), &name).map_err(cache_error)?;
        if let Some(o) = &found {
            self.charge(&[o])?;
        }
        found.map(|o| o.json().map(Cow::into_owned)).transpose().map_err(cache_error)
    }

    fn live_list(
        &mut self,
        kind: wit::KindRef,
        namespace: Option<String>,
        selector: Option<String>,
    ) -> Result<Vec<String>, wit_cache::CacheError> {
        let kind = kind_ref(kind);
        let scope = self.check_list(&kind, namespace.as_deref())?;
        let found = self.cache()?.list(&kind, namespace.as_deref(), selector.as_deref()).map_err(cache_error)?;
        self.jsons(found, &scope)
    }

    fn live_by_index(&mut self, kind: wit::KindRef, index: String, value: String) -> Result<Vec<String>, wit_cache::CacheError> {
        let kind = kind_ref(kind);
        let scope = self.read_scope(&kind);
        if scope == ReadScope::None {
            return Err(self.not_granted(&kind, None));
        }
        let found = self.cache()?.by_index(&kind, &index, &value).map_err(cache_error)?;
        self.jsons(found, &scope)
    }

    fn live_get_meta(
        &mut self,
        kind: wit::KindRef,
        namespace: Option<String>,
        name: String,
    ) -> Result<Option<wit::ObjectMeta>, wit_cache::CacheError> {
        let kind = kind_ref(kind);
        let scope = self.read_scope(&kind);
        if !scope.allows(namespace.as_deref()) {
            return Err(self.not_granted(&kind, namespace.as_deref()));
        }
        let found = self.cache()?.get(&kind, namespace.as_deref(), &name).map_err(cache_error)?;
        Ok(self.metas(&kind, found.into_iter().collect(), &scope)?.pop())
    }

    fn live_list_meta(
        &mut self,
        kind: wit::KindRef,
        namespace: Option<String>,
        selector: Option<String>,
    ) -> Result<Vec<wit::ObjectMeta>, wit_cache::CacheError> {
        let kind = kind_ref(kind);
        let scope = self.check_list(&kind, namespace.as_deref())?;
        let found = self.cache()?.list(&kind, namespace.as_deref(), selector.as_deref()).map_err(cache_error)?;
        self.metas(&kind, found, &scope)
    }

    fn live_by_index_meta(
        &mut self,
        kind: wit::KindRef,
        index: String,
        value: String,
    ) -> Result<Vec<wit::ObjectMeta>, wit_cache::CacheError> {
        let kind = kind_ref(kind);
        let scope = self.read_scope(&kind);
        if scope == ReadScope::None {
            return Err(self.not_granted(&kind, None));
        }
        let found = self.cache()?.by_index(&kind, &index, &value).map_err(cache_error)?;
        self.metas(&kind, found, &scope)
    }
}

impl wit_cache::Host for HostState {
    fn get(&mut self, kind: wit::KindRef, namespace: Option<String>, name: String) -> Result<Option<String>, wit_cache::CacheError> {
        let call = self.tap.is_some().then(|| Call::Get { kind: Kind::from(&kind), namespace: namespace.clone(), name: name.clone() });
        self.tapped(
            call,
            |s| s.live_get(kind, namespace, name),
            |v| Answer::Object(v.clone()),
            |a| match a {
                Answer::Object(v) => Some(v),
                _ => None,
            },
        )
    }

    fn list(
        &mut self,
        kind: wit::KindRef,
        namespace: Option<String>,
        selector: Option<String>,
    ) -> Result<Vec<String>, wit_cache::CacheError> {
        let call =
            self.tap.is_some().then(|| Call::List { kind: Kind::from(&kind), namespace: namespace.clone(), selector: selector.clone() });
        self.tapped(call, |s| s.live_list(kind, namespace, selector), |v| objects(v), from_objects)
    }

    fn by_index(&mut self, kind: wit::KindRef, index: String, value: String) -> Result<Vec<String>, wit_cache::CacheError> {
        let call = self.tap.is_some().then(|| Call::ByIndex { kind: Kind::from(&kind), index: index.clone(), value: value.clone() });
        self.tapped(call, |s| s.live_by_index(kind, index, value), |v| objects(v), from_objects)
    }

    fn get_meta(
        &mut self,
        kind: wit::KindRef,
        namespace: Option<String>,
        name: String,
    ) -> Result<Option<wit::ObjectMeta>, wit_cache::CacheError> {
        let call = self.tap.is_some().then(|| Call::GetMeta { kind: Kind::from(&kind), namespace: namespace.clone(), name: name.clone() });
        self.tapped(
            call,
            |s| s.live_get_meta(kind, namespace, name),
            |v| Answer::Meta(v.as_ref().map(|m| Box::new(m.into()))),
            |a| match a {
                Answer::Meta(m) => Some(m.as_deref().map(Into::into)),
                _ => None,
            },
        )
    }

    fn list_meta(
        &mut self,
        kind: wit::KindRef,
        namespace: Option<String>,
        selector: Option<String>,
    ) -> Result<Vec<wit::ObjectMeta>, wit_cache::CacheError> {
        let call = self.tap.is_some().then(|| Call::ListMeta {
            kind: Kind::from(&kind),
            namespace: namespace.clone(),
            selector: selector.clone(),
        });
        self.tapped(call, |s| s.live_list_meta(kind, namespace, selector), |v| metas(v), from_metas)
    }

    fn by_index_meta(&mut self, kind: wit::KindRef, index: String, value: String) -> Result<Vec<wit::ObjectMeta>, wit_cache::CacheError> {
        let call = self.tap.is_some().then(|| Call::ByIndexMeta { kind: Kind::from(&kind), index: index.clone(), value: value.clone() });
        self.tapped(call, |s| s.live_by_index_meta(kind, index, value), |v| metas(v), from_metas)
    }

    /// `list-meta`, packed; recorded and replayed as the `list-meta` it encodes.
    fn list_meta_packed(
        &mut self,
        kind: wit::KindRef,
        namespace: Option<String>,
        selector: Option<String>,
    ) -> Result<Vec<u8>, wit_cache::CacheError> {
        if self.tap.is_some() {
            return wit_cache::Host::list_meta(self, kind, namespace, selector).map(|m| meta::packed(&m));
        }
        let kind = kind_ref(kind);
        let scope = self.check_list(&kind, namespace.as_deref())?;
        let found = self.cache()?.list(&kind, namespace.as_deref(), selector.as_deref()).map_err(cache_error)?;
        self.packed(&kind, found, &scope)
    }

    /// `by-index-meta`, packed; recorded and replayed as the `by-index-meta` it encodes.
    fn by_index_meta_packed(&mut self, kind: wit::KindRef, index: String, value: String) -> Result<Vec<u8>, wit_cache::CacheError> {
        if self.tap.is_some() {
            return wit_cache::Host::by_index_meta(self, kind, index, value).map(|m| meta::packed(&m));
        }
        let kind = kind_ref(kind);
        let scope = self.read_scope(&kind);
        if scope == ReadScope::None {
            return Err(self.not_granted(&kind, None));
        }
        let found = self.cache()?.by_index(&kind, &index, &value).map_err(cache_error)?;
        self.packed(&kind, found, &scope)
    }
}

fn objects(v: &[String]) -> Answer {
    Answer::Objects(v.to_vec())
}

fn from_objects(a: Answer) -> Option<Vec<String>> {
    match a {
        Answer::Objects(v) => Some(v),
        _ => None,
    }
}

fn metas(v: &[wit::ObjectMeta]) -> Answer {
    Answer::Metas(v.iter().map(Into::into).collect())
}

fn from_metas(a: Answer) -> Option<Vec<wit::ObjectMeta>> {
    match a {
        Answer::Metas(v) => Some(v.iter().map(Into::into).collect()),
        _ => None,
    }
}

impl wit_log::Host for HostState {
    fn log(&mut self, level: wit_log::Level, message: String) {
        let Some(message) = self.output.take_budget(message) else { return };
        let plugin = &*self.plugin;
        let key = self.key.as_deref().unwrap_or("-");
        use wit_log::Level as L;
        match level {
            L::Trace => tracing::trace!(target: "wasmloop::plugin", plugin, key, "{message}"),
            L::Debug => tracing::debug!(target: "wasmloop::plugin", plugin, key, "{message}"),
            L::Info => tracing::info!(target: "wasmloop::plugin", plugin, key, "{message}"),
            L::Warn => tracing::warn!(target: "wasmloop::plugin", plugin, key, "{message}"),
            L::Error => tracing::error!(target: "wasmloop::plugin", plugin, key, "{message}"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A call's state over a cache holding one Pod `shop/web`, reads budgeted to `budget` bytes.
    fn state_over_a_pod(budget: u64, tap: Option<Tap>) -> HostState {
        let pod = serde_json::json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "web", "namespace": "shop", "uid": "u1", "resourceVersion": "1", "labels": {"app": "web"}}});
        let cache: SharedCache = Arc::new(cache::CacheView::from_objects([pod]).unwrap());
        let limits = Limits { reads_per_call: Some(crate::plugin::ByteSize(budget)), ..Limits::default() };
        let rate = Arc::new(OutputRate::new(1 << 20));
        let mut state = HostState::new(Arc::from("p"), None, &limits, Arc::new(Grants::all()), Some(cache), rate);
        if let Some(tap) = tap {
            state.tap(tap);
        }
        state
    }

    fn pod_kind() -> wit::KindRef {
        wit::KindRef { api_version: "v1".into(), kind: "Pod".into() }
    }

    #[test]
    fn reads_recorded_at_the_host_boundary_are_answered_the_same_in_replay() {
        use super::super::recorder::PluginInfo;
        use super::super::recording::{RecordedOutcome, RecordedRequest};
        use wit_cache::Host as _;

        let capture = Capture::new(1 << 20);
        let mut live = state_over_a_pod(1 << 20, Some(Tap::Record(capture.clone())));
        let got = live.get(pod_kind(), Some("shop".into()), "web".into()).unwrap();
        let listed = live.list(pod_kind(), Some("shop".into()), Some("app=web".into())).unwrap();
        let metas = live.list_meta(pod_kind(), None, None).unwrap();
        let missing = live.get(pod_kind(), Some("shop".into()), "gone".into()).unwrap();
        let bad = live.by_index(pod_kind(), "nope".into(), "x".into()).unwrap_err();
        let info = PluginInfo { name: "p", version: "1", digest: "sha256:00" };
        let request = RecordedRequest { key: "v1/Pod/shop/web".into(), reason: "event".into(), last_error: None };
        let recording = capture.finish(&info, request, RecordedOutcome::default());
        assert_eq!(recording.reads.len(), 5);
        // The recording goes through its file form.
        let recording = super::super::recording::Recording::decode(&recording.encode(1 << 20).unwrap()).unwrap();

        let serve = Serve::new(&recording);
        let mut replayed = state_over_a_pod(1 << 20, Some(Tap::Replay(serve.clone())));
        replayed.cache = None; // Nothing is read from a cache in replay.
        assert_eq!(replayed.list(pod_kind(), Some("shop".into()), Some("app=web".into())).unwrap(), listed);
        assert_eq!(replayed.get(pod_kind(), Some("shop".into()), "web".into()).unwrap(), got);
        let recorded = |ms: &[wit::ObjectMeta]| ms.iter().map(super::super::recording::Meta::from).collect::<Vec<_>>();
        assert_eq!(recorded(&replayed.list_meta(pod_kind(), None, None).unwrap()), recorded(&metas));
        assert_eq!(metas.len(), 1);
        assert_eq!(replayed.get(pod_kind(), Some("shop".into()), "gone".into()).unwrap(), missing);
        let error = |e: &wit_cache::CacheError| super::super::recording::CacheError::from(e);
        assert_eq!(error(&replayed.by_index(pod_kind(), "nope".into(), "x".into()).unwrap_err()), error(&bad));
        let not_recorded = replayed.get(pod_kind(), Some("shop".into()), "other".into()).unwrap_err();
        assert!(
            matches!(&not_recorded, wit_cache::CacheError::Invalid(m) if m.starts_with("not recorded: get(v1/Pod, \"shop\", \"other\")")),
            "{not_recorded:?}"
        );
        assert_eq!(serve.report().not_recorded, [r#"get(v1/Pod, "shop", "other")"#]);
        assert!(replayed.reads_exhausted.is_none());
    }

    /// The packed reads hold exactly what the record reads return, live and replayed (recorded
    /// as the record reads they pack), and answer to the same grants.
    #[test]
    fn packed_reads_hold_the_records_and_answer_to_the_same_grants() {
        use super::super::recorder::PluginInfo;
        use super::super::recording::{RecordedOutcome, RecordedRequest};
        use wit_cache::Host as _;

        let mut live = state_over_a_pod(1 << 20, None);
        let records = live.list_meta(pod_kind(), Some("shop".into()), Some("app=web".into())).unwrap();
        let by_owner = live.by_index_meta(pod_kind(), "namespace".into(), "shop".into()).unwrap();
        assert_eq!(records.len(), 1);
        assert_eq!(live.list_meta_packed(pod_kind(), Some("shop".into()), Some("app=web".into())).unwrap(), meta::packed(&records));
        assert_eq!(live.by_index_meta_packed(pod_kind(), "namespace".into(), "shop".into()).unwrap(), meta::packed(&by_owner));
        let none = live.list_meta_packed(pod_kind(), Some("shop".into()), Some("app=db".into())).unwrap();
        assert_eq!(wasmloop_model::packed::decode(&none).unwrap(), []);
        assert!(matches!(live.by_index_meta_packed(pod_kind(), "nope".into(), "x".into()), Err(wit_cache::CacheError::UnknownIndex(_))));

        // Recorded as list-meta, replayed from the recording without a cache.
        let capture = Capture::new(1 << 20);
        let mut recording_state = state_over_a_pod(1 << 20, Some(Tap::Record(capture.clone())));
        let packed = recording_state.list_meta_packed(pod_kind(), None, None).unwrap();
        let info = PluginInfo { name: "p", version: "1", digest: "sha256:00" };
        let request = RecordedRequest { key: "v1/Pod/shop/web".into(), reason: "event".into(), last_error: None };
        let recording = capture.finish(&info, request, RecordedOutcome::default());
        assert!(matches!(recording.reads[..], [ref r] if matches!(r.call, Call::ListMeta { .. })), "{:?}", recording.reads);
        let mut replayed = state_over_a_pod(1 << 20, Some(Tap::Replay(Serve::new(&recording))));
        replayed.cache = None;
        assert_eq!(replayed.list_meta_packed(pod_kind(), None, None).unwrap(), packed);

        // Grants: only namespace `other` readable: `shop` is refused, all namespaces show none.
        let grants = Grants::from_yaml("p", "grants:\n  - kinds: [v1/Pod]\n    verbs: [read]\n    namespaces: [other]\n").unwrap();
        let mut scoped = state_over_a_pod(1 << 20, None);
        scoped.grants = Arc::new(grants);
        let refused = scoped.list_meta_packed(pod_kind(), Some("shop".into()), None).unwrap_err();
        assert!(matches!(refused, wit_cache::CacheError::NotGranted(_)), "{refused:?}");
        let all = scoped.list_meta_packed(pod_kind(), None, None).unwrap();
        assert_eq!(wasmloop_model::packed::decode(&all).unwrap(), []);
        let by_index = scoped.by_index_meta_packed(pod_kind(), "namespace".into(), "shop".into()).unwrap();
        assert_eq!(wasmloop_model::packed::decode(&by_index).unwrap(), []);

        // Charged to the read budget as the JSON they are read from.
        let mut poor = state_over_a_pod(10, None);
        assert!(poor.list_meta_packed(pod_kind(), None, None).is_err());
        assert!(poor.reads_exhausted.is_some());
    }

    #[test]
    fn a_read_over_the_budget_when_recorded_fails_the_replay_too() {
        use super::super::recorder::PluginInfo;
        use super::super::recording::{RecordedOutcome, RecordedRequest};
        use wit_cache::Host as _;

        let capture = Capture::new(1 << 20);
        let mut live = state_over_a_pod(10, Some(Tap::Record(capture.clone())));
        assert!(live.get(pod_kind(), Some("shop".into()), "web".into()).is_err());
        assert!(live.reads_exhausted.is_some());
        let info = PluginInfo { name: "p", version: "1", digest: "sha256:00" };
        let request = RecordedRequest { key: "v1/Pod/shop/web".into(), reason: "event".into(), last_error: None };
        let recording = capture.finish(&info, request, RecordedOutcome::default());
        assert!(recording.reads[0].over_budget);
        // Replayed under a generous budget: the read fails as recorded, and the call with it.
        let mut replayed = state_over_a_pod(1 << 20, Some(Tap::Replay(Serve::new(&recording))));
        assert!(replayed.get(pod_kind(), Some("shop".into()), "web".into()).is_err());
        assert!(replayed.reads_exhausted.is_some());
    }
}
