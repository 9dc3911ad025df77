//! [`WasmPlugin`]: a loaded, validated plugin that implements [`Reconciler`].
//!
//! Loading checks, in order: the bytes are a component (not a core module), it exports
//! `wasmloop:controller/plugin` at a version this host speaks, its imports are all provided,
//! it instantiates, `metadata()` answers within the limits, and every kind it declares reading
//! is granted. Each reconcile then runs in a **fresh Store** instantiated from the prepared
//! `InstancePre` (nothing leaks between reconciles; a trapped instance is simply dropped), under
//! the plugin's memory cap and an epoch deadline derived from its timeout.

use std::fmt;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use wasmtime::component::Component;
use wasmtime::{Store, Trap};

use super::bindings::{self, ControllerPre, types as wit, v0_1, v0_2};
use super::compat;
use super::convert::{from_wit_error, spec_from_metadata, to_outcome, to_planned, to_wit_request};
use super::engine::{self, Compiled, PluginEngine};
use super::host::{HostState, OutputRate, Tap};
use super::limits::{self, Limits};
use super::recorder::{Capture, PluginInfo, Recorder};
use super::recording::{self, RecordedOutcome, RecordedRequest, Recording};
use super::replay::{OutcomeDiff, ReplayReport, Serve};
use crate::cache::SharedCache;
use crate::grants::{self, Grants};
use crate::reconciler::{Cause, FieldDecl, Outcome, ReconcileError, Reconciler, ReconcilerSpec, Request, catch_panic};

/// Why a plugin was not loaded.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The component does not compile.
    #[error(transparent)]
    Engine(#[from] engine::Error),
    /// The plugin's limits do not fit the engine.
    #[error("invalid limits: {0}")]
    Limits(#[from] limits::Error),
    /// The component does not export the plugin interface.
    #[error("the component does not export {expected}@{version} (it exports: {exports}); build it with the wasmloop SDK")]
    NoPluginExport {
        /// The interface expected.
        expected: &'static str,
        /// Its version.
        version: &'static str,
        /// What the component exports instead.
        exports: String,
    },
    /// The plugin speaks a contract version this host does not.
    #[error(
        "the plugin targets {package}@{found} but this host speaks {package}@{expected} \
         (compatible: {compatible}); rebuild it against a matching SDK"
    )]
    WrongVersion {
        /// The contract's package.
        package: &'static str,
        /// The version the plugin exports.
        found: String,
        /// The version this host speaks.
        expected: &'static str,
        /// Every version this host runs.
        compatible: String,
    },
    /// The plugin imports something the host does not provide.
    #[error("the plugin imports what this host does not provide: {0}")]
    Link(String),
    /// Instantiating the plugin failed (a trap in its start, out of memory, ...).
    #[error("the plugin does not instantiate: {0}")]
    Instantiate(String),
    /// The plugin's `metadata()` trapped or timed out.
    #[error("metadata() failed: {0}")]
    Metadata(String),
    /// The plugin's `metadata()` answer is invalid.
    #[error("metadata() returned an invalid description: {0}")]
    InvalidMetadata(#[from] super::convert::MetadataError),
    /// The plugin's own name differs from the one its manifest gives.
    #[error(
        "the plugin calls itself {own:?} but its manifest (or ConfigMap) names it {manifest:?}: a plugin runs only \
         under its own name (set `name: {own}` in plugin.yaml, or name the ConfigMap {own}; to run it under another \
         name on purpose, say which plugin it is with `plugin: {own}`)"
    )]
    Identity {
        /// The name its `metadata()` gives.
        own: String,
        /// The name its manifest (or ConfigMap) gives.
        manifest: String,
    },
    /// The plugin's declared reads are not covered by its grants.
    #[error(transparent)]
    Grants(#[from] grants::Error),
}

/// A result whose error is a plugin that did not load.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Counters of one plugin's calls, for metrics. `traps`, `timeouts` and `ooms` are disjoint.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PluginStats {
    /// Reconciles started.
    pub calls: u64,
    /// Reconciles that returned a valid outcome.
    pub ok: u64,
    /// Reconciles where the plugin returned its own `reconcile-error`.
    pub errors: u64,
    /// Outcomes refused by the host (invalid action JSON, too many actions, ...).
    pub invalid_outcomes: u64,
    /// Traps other than timeouts and out-of-memory (panics, `unreachable`, bad memory access).
    pub traps: u64,
    /// Calls interrupted at their deadline.
    pub timeouts: u64,
    /// Calls that failed after a refused memory growth.
    pub ooms: u64,
    /// Failures to get an instance at all (e.g. the instance pool is exhausted).
    pub instantiation_failures: u64,
    /// Panics of the host side of a call, caught and turned into errors (a bug or misuse).
    pub host_panics: u64,
    /// Wall time spent in reconciles (instantiation included).
    pub busy: Duration,
    /// Guest output dropped over the per-call or per-minute limits.
    pub output_dropped_bytes: u64,
    /// The most linear memory any call has grown to (bytes), since this version loaded.
    pub memory_peak_bytes: u64,
}

#[derive(Default)]
struct Counters {
    calls: AtomicU64,
    ok: AtomicU64,
    errors: AtomicU64,
    invalid_outcomes: AtomicU64,
    traps: AtomicU64,
    timeouts: AtomicU64,
    ooms: AtomicU64,
    instantiation_failures: AtomicU64,
    host_panics: AtomicU64,
    busy_nanos: AtomicU64,
    memory_peak: AtomicU64,
}

fn bump(c: &AtomicU64) {
    c.fetch_add(1, Ordering::Relaxed);
}

/// How a call into the guest failed.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Failure {
    Timeout(Duration),
    OutOfMemory { limit: u64, requested: Option<usize>, detail: String },
    Trap { detail: String, stderr: String },
    Host(String),
}

impl Failure {
    fn classify(err: &wasmtime::Error, state: &HostState, limits: &Limits) -> Self {
        tracing::debug!(target: "wasmloop::plugin", error = ?err, "guest call failed");
        let trap = err.downcast_ref::<Trap>().copied();
        if trap == Some(Trap::Interrupt) {
            return Failure::Timeout(limits.timeout);
        }
        // The trap itself ("wasm `unreachable` instruction executed"), else the error's text.
        let detail = trap.map(|t| t.to_string()).unwrap_or_else(|| first_line(&format!("{err:#}")));
        if let Some(requested) = state.limiter.refused {
            return Failure::OutOfMemory { limit: limits.memory.bytes(), requested: Some(requested), detail };
        }
        match trap {
            Some(_) => Failure::Trap { detail, stderr: state.output.stderr_tail() },
            None => Failure::Host(format!("{err:#}")),
        }
    }

    fn describe(&self, plugin: &str, call: &str) -> String {
        match self {
            Failure::Timeout(t) => format!(
                "plugin {plugin} timed out: {call} ran longer than its {} limit and was interrupted; the instance was discarded",
                crate::duration::format(*t)
            ),
            Failure::OutOfMemory { limit, requested, detail } => {
                let requested = requested.map(|r| format!(" (asked for {} bytes)", r)).unwrap_or_default();
                format!(
                    "plugin {plugin} ran out of memory in {call}: linear memory may not grow past its {} limit{requested}, \
                     then: {detail}; the instance was discarded",
                    limits::ByteSize(*limit)
                )
            }
            Failure::Trap { detail, stderr } => {
                let stderr = if stderr.is_empty() {
                    String::new()
                } else {
                    let lines: Vec<&str> = stderr
                        .lines()
                        .map(str::trim)
                        .filter(|l| !l.is_empty() && !l.starts_with("note: run with `RUST_BACKTRACE"))
                        .collect();
                    format!("; guest stderr: {}", lines.join(" "))
                };
                format!("plugin {plugin} trapped in {call}: {detail}{stderr}; the instance was discarded")
            }
            Failure::Host(e) => format!("plugin {plugin}: {call} failed: {e}"),
        }
    }
}

fn first_line(s: &str) -> String {
    s.lines().next().unwrap_or_default().trim().to_owned()
}

/// A loaded plugin. Cheap to share (`Arc<WasmPlugin>`); reconciles may run concurrently.
pub struct WasmPlugin {
    engine: PluginEngine,
    name: Arc<str>,
    digest: String,
    size: usize,
    contract_version: String,
    pre: Pre,
    spec: ReconcilerSpec,
    /// The fields metadata reads return (shared with every call's Store).
    fields: Arc<[FieldDecl]>,
    limits: Limits,
    grants: Arc<Grants>,
    counters: Counters,
    output_rate: Arc<OutputRate>,
    /// Records chosen reconciles (None: records nothing, the default).
    recorder: Option<Arc<Recorder>>,
}

/// A recording run again: the outcome, how it differs from the recorded one, and what the
/// recording could not serve.
#[derive(Debug)]
pub struct Replayed {
    /// The replayed reconcile's result.
    pub result: std::result::Result<Outcome, ReconcileError>,
    /// The same, in the recording's terms.
    pub outcome: RecordedOutcome,
    /// How it differs from the recorded outcome.
    pub diff: OutcomeDiff,
    /// Reads, clock readings and random bytes the recording did not have.
    pub report: ReplayReport,
}

impl fmt::Debug for WasmPlugin {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("WasmPlugin")
            .field("name", &self.name)
            .field("digest", &self.digest)
            .field("size", &self.size)
            .field("limits", &self.limits)
            .finish_non_exhaustive()
    }
}

impl WasmPlugin {
    /// Compile and load `bytes`. **Blocking** (compiles): call it from `spawn_blocking`.
    pub fn load(engine: &PluginEngine, bytes: &[u8], limits: Limits, grants: Grants) -> Result<Self> {
        let compiled = engine.compile_timed(bytes)?;
        Self::from_compiled(engine, compiled, limits, grants)
    }

    /// Load an already compiled component (e.g. from the [`super::PrecompiledCache`]).
    /// Instantiates once to call `metadata()`; cheap compared to compiling. The component's own
    /// name must be the grants' plugin name (when that is set).
    pub fn from_compiled(engine: &PluginEngine, compiled: Compiled, limits: Limits, grants: Grants) -> Result<Self> {
        Self::from_compiled_as(engine, compiled, limits, grants, None)
    }

    /// Like [`Self::from_compiled`], for an admin who runs the component `component` (its own
    /// `metadata().name`) under the grants' plugin name: that name is then the controller's.
    pub fn from_compiled_as(
        engine: &PluginEngine,
        compiled: Compiled,
        limits: Limits,
        grants: Grants,
        own_name: Option<&str>,
    ) -> Result<Self> {
        limits.validate(engine.limits())?;
        let component = &compiled.component;
        let contract_version = check_contract(engine, component)?;
        let pre = Pre::new(engine, component, &contract_version)?;

        let label: Arc<str> = Arc::from(if grants.plugin().is_empty() { "(loading)" } else { grants.plugin() });
        let grants = Arc::new(grants);
        let meta = catch_panic(|| call_metadata(engine, &pre, &label, &limits, grants.clone()))
            .map_err(|what| Error::Metadata(format!("the host panicked while calling metadata(): {what}")))??;

        let mut spec = spec_from_metadata(meta).map_err(Error::InvalidMetadata)?;
        let expected = own_name.unwrap_or(grants.plugin());
        if !expected.is_empty() && expected != spec.name {
            return Err(Error::Identity { own: spec.name.clone(), manifest: expected.to_owned() });
        }
        if !grants.plugin().is_empty() {
            // The admin's name is the identity: field manager, Event reporter, metrics label.
            spec.name = grants.plugin().to_owned();
        }
        let grants = if grants.plugin().is_empty() { Arc::new(Grants::clone(&grants).named(spec.name.clone())) } else { grants };
        grants.check_spec(&spec)?;
        Ok(Self {
            engine: engine.clone(),
            name: Arc::from(spec.name.as_str()),
            digest: compiled.digest,
            size: compiled.size,
            contract_version,
            pre,
            fields: spec.fields.clone().into(),
            spec,
            output_rate: Arc::new(OutputRate::new(limits.output_per_minute.as_usize())),
            limits,
            grants,
            counters: Counters::default(),
            recorder: None,
        })
    }

    /// The same plugin, recording the reconciles `recorder` wants (chosen keys, failures).
    #[must_use]
    pub fn with_recorder(mut self, recorder: Arc<Recorder>) -> Self {
        self.recorder = Some(recorder);
        self
    }

    /// Its recorder, if it records.
    pub fn recorder(&self) -> Option<&Arc<Recorder>> {
        self.recorder.as_ref()
    }

    /// Reconcile as [`Reconciler::reconcile`] does, recording everything the call saw (about
    /// `max_bytes` of answers and random bytes at most; past that the recording is truncated).
    /// **Blocking**, as `reconcile`.
    pub fn reconcile_recorded(
        &self,
        request: &Request,
        cache: &SharedCache,
        max_bytes: usize,
    ) -> (std::result::Result<Outcome, ReconcileError>, Recording) {
        let capture = Capture::new(max_bytes);
        let result = self.guarded_call(request, cache, Some(Tap::Record(capture.clone())));
        let recording = self.recording(&capture, request, &result);
        (result, recording)
    }

    /// Run `recording` again: its request, its reads answered from it (never from a cache), its
    /// clocks and random values served in order. **Blocking**, as `reconcile`.
    pub fn replay(&self, recording: &Recording) -> std::result::Result<Replayed, recording::Error> {
        let request = recording.request.request()?;
        let serve = Serve::new(recording);
        let empty: SharedCache = Arc::new(crate::cache::CacheView::new());
        let result = self.guarded_call(&request, &empty, Some(Tap::Replay(serve.clone())));
        let outcome = RecordedOutcome::of(&result);
        let diff = OutcomeDiff::between(&recording.outcome, &outcome);
        Ok(Replayed { result, outcome, diff, report: serve.report() })
    }

    fn recording(&self, capture: &Capture, request: &Request, result: &std::result::Result<Outcome, ReconcileError>) -> Recording {
        let info = PluginInfo { name: &self.name, version: &self.spec.version, digest: &self.digest };
        capture.finish(&info, RecordedRequest::of(request), RecordedOutcome::of(result))
    }

    /// The plugin's name, as its `metadata()` gives it.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// `sha256:<hex>` of the plugin bytes.
    pub fn digest(&self) -> &str {
        &self.digest
    }

    /// Size of the plugin bytes.
    pub fn size(&self) -> usize {
        self.size
    }

    /// The contract version the plugin was built against (e.g. `0.1.0`).
    pub fn contract_version(&self) -> &str {
        &self.contract_version
    }

    /// The limits each call runs under.
    pub fn limits(&self) -> &Limits {
        &self.limits
    }

    /// What the plugin may read and do.
    pub fn grants(&self) -> &Arc<Grants> {
        &self.grants
    }

    /// The compiled component (e.g. to serialise it).
    pub fn component(&self) -> &Component {
        self.pre.component()
    }

    /// A snapshot of the call counters.
    pub fn stats(&self) -> PluginStats {
        let c = &self.counters;
        let get = |a: &AtomicU64| a.load(Ordering::Relaxed);
        PluginStats {
            calls: get(&c.calls),
            ok: get(&c.ok),
            errors: get(&c.errors),
            invalid_outcomes: get(&c.invalid_outcomes),
            traps: get(&c.traps),
            timeouts: get(&c.timeouts),
            ooms: get(&c.ooms),
            instantiation_failures: get(&c.instantiation_failures),
            host_panics: get(&c.host_panics),
            busy: Duration::from_nanos(get(&c.busy_nanos)),
            output_dropped_bytes: self.output_rate.dropped_bytes(),
            memory_peak_bytes: get(&c.memory_peak),
        }
    }

    fn call(&self, request: &Request, cache: &SharedCache, tap: Option<Tap>) -> Result<Outcome, ReconcileError> {
        let c = &self.counters;
        bump(&c.calls);
        // An instance slot first (waiting for one is not the plugin's time): every call ends by
        // its deadline, so no slot is held longer than that, and loading keeps slots of its own.
        let slots = self.engine.reconcile_slots().clone();
        let _slot = match slots.clone().try_acquire_owned() {
            Ok(slot) => Ok(slot),
            Err(_) => block_on(slots.acquire_owned()),
        };
        let started = Instant::now();
        let key = request.key.to_string();
        let mut store = new_store(
            &self.engine,
            self.name.clone(),
            Some(key),
            &self.limits,
            self.grants.clone(),
            Some(cache.clone()),
            self.output_rate.clone(),
        );
        store.data_mut().declare_fields(self.fields.clone());
        if let Some(tap) = tap {
            store.data_mut().tap(tap);
        }
        let output = store.data().output.clone();
        let wit_request = to_wit_request(request);
        let pre = &self.pre;
        let run = async move {
            let result = pre.reconcile(&mut store, &wit_request).await;
            (result, store)
        };
        let finished = within_deadline(self.limits.timeout, run);
        output.flush();
        if let Some((_, store)) = &finished {
            c.memory_peak.fetch_max(store.data().limiter.peak as u64, Ordering::Relaxed);
        }
        let result = match finished {
            // The deadline passed while the guest waited in a host call (e.g. a sleep in `poll`):
            // the call was cancelled and its Store, with the instance slot, dropped.
            None => {
                let failure = Failure::Timeout(self.limits.timeout);
                self.count_failure(&failure, false);
                Err(stopped(failure.describe(&self.name, "reconcile")))
            }
            Some((Err(e), store)) => {
                let failure = Failure::classify(&e, store.data(), &self.limits);
                self.count_failure(&failure, true);
                Err(stopped(failure.describe(&self.name, "instantiation")))
            }
            Some((Ok(result), store)) => match store.data().reads_exhausted {
                // The host copied out all it allowed; whatever the guest made of it, the call failed.
                Some(_) => {
                    bump(&c.errors);
                    Err(stopped(format!(
                        "plugin {} read more object JSON from the cache than its per-call budget ({}) allows; \
                         the reconcile failed (raise limits.readsPerCall, or read less: by index, by namespace)",
                        self.name,
                        limits::ByteSize(self.limits.read_budget().bytes())
                    )))
                }
                None => self.outcome(result, store.data()),
            },
        };
        c.busy_nanos.fetch_add(nanos(started.elapsed()), Ordering::Relaxed);
        result
    }

    /// Turn what the guest returned (or how it failed) into the reconcile's result.
    fn outcome(&self, result: wasmtime::Result<Result<wit::Outcome, wit::Failure>>, state: &HostState) -> Result<Outcome, ReconcileError> {
        let c = &self.counters;
        let invalid = |source| {
            bump(&c.invalid_outcomes);
            ReconcileError::permanent(Cause::InvalidOutcome { plugin: self.name.to_string(), source: Box::new(source) })
        };
        match result {
            Ok(Ok(outcome)) => {
                let outcome = to_outcome(outcome, &self.limits).map_err(invalid)?;
                bump(&c.ok);
                Ok(outcome)
            }
            Ok(Err(failure)) => {
                let actions = to_planned(failure.actions, &self.limits).map_err(invalid)?;
                bump(&c.errors);
                Err(from_wit_error(failure.error).with_actions(actions))
            }
            Err(e) => {
                let failure = Failure::classify(&e, state, &self.limits);
                self.count_failure(&failure, false);
                Err(stopped(failure.describe(&self.name, "reconcile")))
            }
        }
    }

    fn count_failure(&self, failure: &Failure, instantiating: bool) {
        let c = &self.counters;
        match failure {
            Failure::Timeout(_) => bump(&c.timeouts),
            Failure::OutOfMemory { .. } => bump(&c.ooms),
            Failure::Trap { .. } => bump(&c.traps),
            Failure::Host(_) if instantiating => bump(&c.instantiation_failures),
            Failure::Host(_) => bump(&c.traps),
        }
    }
}

/// A call the sandbox stopped (or that failed around the guest): retried with backoff.
fn stopped(why: impl Into<String>) -> ReconcileError {
    ReconcileError::transient(Cause::Stopped(why.into()))
}

fn nanos(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}

impl Reconciler for WasmPlugin {
    fn spec(&self) -> &ReconcilerSpec {
        &self.spec
    }

    fn digest(&self) -> Option<&str> {
        Some(&self.digest)
    }

    fn runs_guest_code(&self) -> bool {
        true
    }

    /// Reconcile in a fresh instance. **Blocking**: run it on a blocking thread
    /// ([`super::guest_threads::run`], as the controller does); WASI's sync adapters block on
    /// the Tokio runtime. Never panics; traps, timeouts and out-of-memory become `Transient` errors naming
    /// which, an invalid outcome a `Permanent` one.
    fn reconcile(&self, request: &Request, cache: &SharedCache) -> Result<Outcome, ReconcileError> {
        let Some(recorder) = &self.recorder else { return self.guarded_call(request, cache, None) };
        let wanted = recorder.wants_key(&request.key);
        if !wanted && !recorder.wants_failures() {
            return self.guarded_call(request, cache, None);
        }
        let capture = Capture::new(recorder.capture_cap());
        let result = self.guarded_call(request, cache, Some(Tap::Record(capture.clone())));
        if wanted || result.is_err() {
            // Handed to the recorder's writer thread: never blocks, never fails the reconcile.
            recorder.submit(self.recording(&capture, request, &result));
        }
        result
    }
}

impl WasmPlugin {
    /// One call, with a panic of the host side turned into an error.
    fn guarded_call(&self, request: &Request, cache: &SharedCache, tap: Option<Tap>) -> Result<Outcome, ReconcileError> {
        // Defence in depth: a panic in the host side of a call (e.g. WASI's sync adapters when
        // called on an async worker thread instead of a blocking one) becomes an error. The
        // Store is dropped while unwinding, as on any other exit.
        match catch_panic(|| self.call(request, cache, tap)) {
            Ok(result) => result,
            Err(what) => {
                bump(&self.counters.host_panics);
                Err(stopped(format!(
                    "plugin {}: the host panicked while running reconcile (is it called on a blocking thread?): {what}",
                    self.name
                )))
            }
        }
    }
}

fn new_store(
    engine: &PluginEngine,
    plugin: Arc<str>,
    key: Option<String>,
    limits: &Limits,
    grants: Arc<Grants>,
    cache: Option<SharedCache>,
    output_rate: Arc<OutputRate>,
) -> Store<HostState> {
    let state = HostState::new(plugin, key, limits, grants, cache, output_rate);
    let mut store = Store::new(engine.engine(), state);
    store.limiter(|s| &mut s.limiter);
    store.set_epoch_deadline(limits.deadline_ticks(engine.epoch_tick()));
    store.epoch_deadline_trap();
    store
}

/// A component linked for instantiation, under the contract version it was built against.
enum Pre {
    V0_3(ControllerPre<HostState>),
    V0_2(v0_2::ControllerPre<HostState>),
    V0_1(v0_1::ControllerPre<HostState>),
}

type Called<T> = wasmtime::Result<wasmtime::Result<T>>;

impl Pre {
    fn new(engine: &PluginEngine, component: &Component, contract_version: &str) -> Result<Self> {
        let link = |e: wasmtime::Error| Error::Link(format!("{e:#}"));
        let pre = engine.linker().instantiate_pre(component).map_err(|e| {
            let missing = super::imports::unprovided(engine.engine(), component, &e);
            if missing.is_empty() { link(e) } else { Error::Link(super::imports::describe(&missing)) }
        })?;
        Ok(if compatible(contract_version, v0_1::VERSION) {
            Pre::V0_1(v0_1::ControllerPre::new(pre).map_err(link)?)
        } else if compatible(contract_version, v0_2::VERSION) {
            Pre::V0_2(v0_2::ControllerPre::new(pre).map_err(link)?)
        } else {
            Pre::V0_3(ControllerPre::new(pre).map_err(link)?)
        })
    }

    fn component(&self) -> &Component {
        match self {
            Pre::V0_3(p) => p.instance_pre().component(),
            Pre::V0_2(p) => p.instance_pre().component(),
            Pre::V0_1(p) => p.instance_pre().component(),
        }
    }

    /// Instantiate (outer error) and call `metadata()` (inner error: a trap).
    async fn metadata(&self, store: &mut Store<HostState>) -> Called<wit::PluginMetadata> {
        Ok(match self {
            Pre::V0_3(pre) => pre.instantiate_async(&mut *store).await?.wasmloop_controller_plugin().call_metadata(store).await,
            Pre::V0_2(pre) => {
                let plugin = pre.instantiate_async(&mut *store).await?;
                plugin.wasmloop_controller_plugin().call_metadata(store).await.map(compat::v0_2::metadata)
            }
            Pre::V0_1(pre) => {
                let plugin = pre.instantiate_async(&mut *store).await?;
                plugin.wasmloop_controller_plugin().call_metadata(store).await.map(compat::v0_1::metadata)
            }
        })
    }

    /// Instantiate (outer error) and call `reconcile()` (inner error: a trap).
    async fn reconcile(&self, store: &mut Store<HostState>, request: &wit::Request) -> Called<Result<wit::Outcome, wit::Failure>> {
        Ok(match self {
            Pre::V0_3(pre) => pre.instantiate_async(&mut *store).await?.wasmloop_controller_plugin().call_reconcile(store, request).await,
            Pre::V0_2(pre) => {
                let plugin = pre.instantiate_async(&mut *store).await?;
                let answer = plugin.wasmloop_controller_plugin().call_reconcile(store, &compat::v0_2::request(request)).await;
                answer.map(|r| r.map(compat::v0_2::outcome).map_err(compat::v0_2::failure))
            }
            Pre::V0_1(pre) => {
                let plugin = pre.instantiate_async(&mut *store).await?;
                let answer = plugin.wasmloop_controller_plugin().call_reconcile(store, &compat::v0_1::request(request)).await;
                answer.map(|r| r.map(compat::v0_1::outcome).map_err(compat::v0_1::failure))
            }
        })
    }
}

/// `(major, minor, patch)` of a `x.y.z[-pre]` version.
fn parse_version(v: &str) -> Option<(u64, u64, u64)> {
    let core = v.split(['-', '+']).next()?;
    let mut parts = core.split('.').map(|p| p.parse::<u64>().ok());
    let v = (parts.next()??, parts.next()??, parts.next()??);
    parts.next().is_none().then_some(v)
}

/// Whether a plugin built against `found` runs on a host speaking `host`: same major, and while
/// 0.x, same minor.
pub fn compatible(found: &str, host: &str) -> bool {
    match (parse_version(found), parse_version(host)) {
        (Some((fa, fb, _)), Some((ha, hb, _))) => fa == ha && (ha != 0 || fb == hb),
        _ => false,
    }
}

fn compatible_range(host: &str) -> String {
    match parse_version(host) {
        Some((0, minor, _)) => format!("0.{minor}.x"),
        Some((major, _, _)) => format!("{major}.x.y"),
        None => host.to_owned(),
    }
}

/// Check which `wasmloop:controller/plugin` version `names` (a component's exports) carry;
/// returns the version found.
pub fn check_export_names<'a>(names: impl IntoIterator<Item = &'a str>) -> Result<String> {
    let names: Vec<&str> = names.into_iter().collect();
    let prefix = bindings::PLUGIN_INTERFACE;
    let found = names.iter().find_map(|n| match n.split_once('@') {
        Some((iface, version)) if iface == prefix => Some(Some(version)),
        None if *n == prefix => Some(None),
        _ => None,
    });
    match found {
        Some(Some(version)) if bindings::SUPPORTED.iter().any(|host| compatible(version, host)) => Ok(version.to_owned()),
        Some(found) => Err(Error::WrongVersion {
            package: bindings::PACKAGE,
            found: found.unwrap_or("(no version)").to_owned(),
            expected: bindings::VERSION,
            compatible: bindings::SUPPORTED.iter().map(|v| compatible_range(v)).collect::<Vec<_>>().join(", "),
        }),
        None => Err(Error::NoPluginExport {
            expected: prefix,
            version: bindings::VERSION,
            exports: if names.is_empty() { "nothing".into() } else { names.join(", ") },
        }),
    }
}

/// The contract version `component` exports, checked against the host's.
fn check_contract(engine: &PluginEngine, component: &Component) -> Result<String> {
    let ty = component.component_type();
    let names: Vec<&str> = ty.exports(engine.engine()).map(|(n, _)| n).collect();
    check_export_names(names)
}

/// Instantiate in a fresh Store (no cache) and call `metadata()`, within the call deadline.
fn call_metadata(engine: &PluginEngine, pre: &Pre, label: &Arc<str>, limits: &Limits, grants: Arc<Grants>) -> Result<wit::PluginMetadata> {
    let rate = Arc::new(OutputRate::new(limits.output_per_minute.as_usize()));
    let mut store = new_store(engine, label.clone(), None, limits, grants, None, rate);
    let output = store.data().output.clone();
    let run = async move {
        let result = pre.metadata(&mut store).await;
        (result, store)
    };
    let finished = within_deadline(limits.timeout, run);
    output.flush();
    match finished {
        None => Err(Error::Metadata(Failure::Timeout(limits.timeout).describe(label, "metadata()"))),
        Some((Err(e), store)) => Err(match Failure::classify(&e, store.data(), limits) {
            Failure::Host(e) => Error::Instantiate(e),
            f => Error::Instantiate(f.describe(label, "instantiation")),
        }),
        Some((Ok(described), store)) => {
            described.map_err(|e| Error::Metadata(Failure::classify(&e, store.data(), limits).describe(label, "metadata()")))
        }
    }
}

/// Run a guest call to completion on this (blocking) thread, or cancel it at `deadline`.
///
/// The epoch deadline interrupts a guest that computes; this covers a guest that waits in a host
/// call (WASI `poll` on a clock, for instance), which no epoch can interrupt. Cancelling drops
/// the future, and with it the Store and its instance slot. Uses the current Tokio runtime (the
/// controller's blocking threads), or a small one of its own when there is none (offline runs).
fn within_deadline<F: Future>(deadline: Duration, call: F) -> Option<F::Output> {
    block_on(async move { tokio::time::timeout(deadline, call).await.ok() })
}

/// Drive `f` to completion on this (blocking) thread.
fn block_on<F: Future>(f: F) -> F::Output {
    match tokio::runtime::Handle::try_current() {
        Ok(handle) => handle.block_on(f),
        Err(_) => offline_runtime().block_on(f),
    }
}

/// The runtime of calls made outside any Tokio runtime (offline runs, tests, benchmarks): one
/// for the process, built on first use (building one per call cost ~8 µs), with one worker
/// thread that drives its timers and I/O, so deadlines fire while the caller's thread waits in
/// `Handle::block_on`.
fn offline_runtime() -> &'static tokio::runtime::Handle {
    static RUNTIME: std::sync::OnceLock<tokio::runtime::Runtime> = std::sync::OnceLock::new();
    RUNTIME
        .get_or_init(|| {
            tokio::runtime::Builder::new_multi_thread()
                .worker_threads(1)
                .thread_name("wasm-offline")
                .enable_all()
                .build()
                .unwrap_or_else(|e| panic!("cannot start a runtime for guest calls: {e}"))
        })
        .handle()
}

/// `metadata()` of a component that is not loaded as a plugin (inspect).
pub(crate) fn instantiate_for_metadata(engine: &PluginEngine, component: &Component, limits: &Limits) -> Result<wit::PluginMetadata> {
    let pre = Pre::new(engine, component, &check_contract(engine, component)?)?;
    let label: Arc<str> = Arc::from("(inspect)");
    catch_panic(|| call_metadata(engine, &pre, &label, limits, Arc::new(Grants::none("(inspect)"))))
        .map_err(|what| Error::Metadata(format!("the host panicked while calling metadata(): {what}")))?
}

/// Where the fixed cost of one reconcile goes, phase by phase (for `wasmloop-bench call-cost`).
/// Not an API: the phases follow [`WasmPlugin`]'s private call path.
#[doc(hidden)]
#[derive(Clone, Copy, Debug, Default)]
pub struct CallPhases {
    /// Taking an instance slot.
    pub slot: Duration,
    /// `HostState::new`: WASI context, resource table, output streams, limiter.
    pub state: Duration,
    /// `Store::new` with its limiter and epoch deadline.
    pub store: Duration,
    /// Key and request conversion.
    pub request: Duration,
    /// Into and out of the deadline wrapper (timeout + `block_on`), without the guest work.
    pub wrapper: Duration,
    /// `instantiate_async` from the `InstancePre`.
    pub instantiate: Duration,
    /// The exported call: lowering, guest code, host imports, lifting.
    pub call: Duration,
    /// Dropping the Store (instance slot back to the pool: memory reset).
    pub drop: Duration,
    /// Flushing output and turning the result into an `Outcome`.
    pub outcome: Duration,
    pub total: Duration,
}

impl WasmPlugin {
    /// One reconcile on the same path as [`Reconciler::reconcile`], timed phase by phase.
    /// Contract 0.2 and 0.3 plugins. For measurements, not for use.
    #[doc(hidden)]
    pub fn profile_reconcile(&self, request: &Request, cache: &SharedCache) -> Result<CallPhases, ReconcileError> {
        let pre = &self.pre;
        let t0 = Instant::now();
        let slots = self.engine.reconcile_slots().clone();
        let slot = slots.try_acquire_owned().map_err(|e| stopped(e.to_string()))?;
        let t1 = Instant::now();
        let key = request.key.to_string();
        let mut state =
            HostState::new(self.name.clone(), Some(key), &self.limits, self.grants.clone(), Some(cache.clone()), self.output_rate.clone());
        state.declare_fields(self.fields.clone());
        let t2 = Instant::now();
        let mut store = Store::new(self.engine.engine(), state);
        store.limiter(|s| &mut s.limiter);
        store.set_epoch_deadline(self.limits.deadline_ticks(self.engine.epoch_tick()));
        store.epoch_deadline_trap();
        let output = store.data().output.clone();
        let t3 = Instant::now();
        let wit_request = to_wit_request(request);
        let t4 = Instant::now();
        let run = async move {
            let ta = Instant::now();
            let result = match pre {
                Pre::V0_3(pre) => match pre.instantiate_async(&mut store).await {
                    Ok(instance) => {
                        let tb = Instant::now();
                        let r = instance.wasmloop_controller_plugin().call_reconcile(&mut store, &wit_request).await;
                        Ok((r, tb))
                    }
                    Err(e) => Err(e),
                },
                Pre::V0_2(pre) => match pre.instantiate_async(&mut store).await {
                    Ok(instance) => {
                        let tb = Instant::now();
                        let request = compat::v0_2::request(&wit_request);
                        let r = instance.wasmloop_controller_plugin().call_reconcile(&mut store, &request).await;
                        Ok((r.map(|r| r.map(compat::v0_2::outcome).map_err(compat::v0_2::failure)), tb))
                    }
                    Err(e) => Err(e),
                },
                Pre::V0_1(_) => Err(wasmtime::Error::msg("contract 0.1 plugins are not profiled")),
            };
            (result, store, ta, Instant::now())
        };
        let finished = within_deadline(self.limits.timeout, run);
        let t5 = Instant::now();
        let Some((result, store, ta, tc)) = finished else { return Err(stopped("profile: timed out")) };
        let (result, tb) = result.map_err(|e| stopped(format!("profile: instantiate: {e:#}")))?;
        let reads_exhausted = store.data().reads_exhausted.is_some();
        drop(store);
        drop(slot);
        let t6 = Instant::now();
        output.flush();
        let outcome = match result {
            Ok(Ok(o)) if !reads_exhausted => to_outcome(o, &self.limits).map(drop).map_err(|e| stopped(e.to_string())),
            Ok(Ok(_)) => Err(stopped("profile: reads exhausted")),
            Ok(Err(e)) => Err(stopped(format!("profile: plugin error {e:?}"))),
            Err(e) => Err(stopped(format!("profile: trap {e:#}"))),
        };
        let t7 = Instant::now();
        outcome?;
        Ok(CallPhases {
            slot: t1 - t0,
            state: t2 - t1,
            store: t3 - t2,
            request: t4 - t3,
            wrapper: (ta - t4) + (t5 - tc),
            instantiate: tb - ta,
            call: tc - tb,
            drop: t6 - t5,
            outcome: t7 - t6,
            total: t7 - t0,
        })
    }
}

/// The deadline wrapper alone around a future that is immediately ready (for measurements).
#[doc(hidden)]
pub fn profile_wrapper(timeout: Duration) -> Duration {
    let t0 = Instant::now();
    let _ = within_deadline(timeout, async { std::hint::black_box(1) });
    t0.elapsed()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn versions_are_compatible_by_semver_rules() {
        assert!(compatible("0.1.0", "0.1.0"));
        assert!(compatible("0.1.7", "0.1.0"));
        assert!(!compatible("0.2.0", "0.1.0"));
        assert!(!compatible("1.0.0", "0.1.0"));
        assert!(compatible("1.4.0", "1.0.0"));
        assert!(!compatible("2.0.0", "1.0.0"));
        assert!(!compatible("0.1", "0.1.0"));
        assert!(compatible("0.1.0-rc.1", "0.1.0"));
    }

    #[test]
    fn export_names_are_checked() {
        assert_eq!(check_export_names(["wasmloop:controller/plugin@0.1.2"]).unwrap(), "0.1.2");
        assert_eq!(check_export_names(["wasmloop:controller/plugin@0.2.0"]).unwrap(), "0.2.0");
        assert_eq!(check_export_names(["wasmloop:controller/plugin@0.3.0"]).unwrap(), "0.3.0");
        assert_eq!(check_export_names(["wasmloop:controller/plugin@0.3.1"]).unwrap(), "0.3.1");
        let err = check_export_names(["wasmloop:controller/plugin@0.4.0"]).unwrap_err().to_string();
        assert_eq!(
            err,
            "the plugin targets wasmloop:controller@0.4.0 but this host speaks wasmloop:controller@0.3.1 \
             (compatible: 0.3.x, 0.2.x, 0.1.x); rebuild it against a matching SDK"
        );
        let err = check_export_names(["wasmloop:controller/plugin"]).unwrap_err().to_string();
        assert!(err.contains("targets wasmloop:controller@(no version)"), "{err}");
        let err = check_export_names(["wasi:http/incoming-handler@0.2.0"]).unwrap_err().to_string();
        assert!(err.contains("does not export wasmloop:controller/plugin@0.3.1 (it exports: wasi:http/incoming-handler@0.2.0)"), "{err}");
        let err = check_export_names([]).unwrap_err().to_string();
        assert!(err.contains("it exports: nothing"), "{err}");
    }

    #[test]
    fn the_host_version_matches_the_wit_file() {
        let wit = include_str!("../../../wit/controller.wit");
        let expected = format!("package {}@{};", bindings::PACKAGE, bindings::VERSION);
        assert!(wit.contains(&expected), "bindings::VERSION is out of date with wit/controller.wit ({expected})");
    }
}
