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
use std::time::Instant;

use wasmtime::component::Component;

use super::bindings::types as wit;
use super::contract::check_contract;
use super::convert::{from_wit_error, spec_from_metadata, to_outcome, to_planned, to_wit_request};
use super::engine::{Compiled, PluginEngine};
use super::fault::GuestFault;
use super::host::{HostState, Tap};
use super::instance::{CANDIDATE_PAUSES, Called, Pre, block_on, call_metadata, new_store, pause_for_serving_calls, within_deadline};
use super::limits::{self, Limits};
use super::output::OutputRate;
use super::phases::{CallPhases, Marks};
use super::recorder::{Capture, PluginInfo, Recorder};
use super::recording::{self, RecordedOutcome, RecordedRequest, Recording};
use super::replay::{OutcomeDiff, ReplayReport, Serve};
use super::stats::{Counters, PluginStats, bump};
use crate::cache::SharedCache;
use crate::grants::Grants;
use crate::reconciler::{Cause, FieldDecl, Outcome, ReconcileError, Reconciler, ReconcilerSpec, Request, catch_panic};

pub use super::error::{Error, Result};

/// Whose call a call is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Role {
    /// A serving version's: trapped at its deadline.
    Serving,
    /// A shadow candidate's: paused while serving calls are in flight.
    Candidate,
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
        self.counters.snapshot(self.output_rate.dropped_bytes())
    }

    /// One call on the real path: an instance slot, a fresh Store, the guest's `reconcile`
    /// within the deadline, and its answer judged; with the instants it passed.
    fn call(&self, request: &Request, cache: &SharedCache, tap: Option<Tap>, role: Role) -> (Result<Outcome, ReconcileError>, Marks) {
        let mut marks = Marks::at(Instant::now());
        bump(&self.counters.calls);
        // An instance slot first (waiting for one is not the plugin's time): every call ends by
        // its deadline, so no slot is held longer than that, and loading keeps slots of its own.
        let slots = self.engine.reconcile_slots().clone();
        let slot = match slots.clone().try_acquire_owned() {
            Ok(slot) => Ok(slot),
            Err(_) => block_on(slots.acquire_owned()),
        };
        marks.slot = Instant::now();
        let key = request.key.to_string();
        let mut state =
            HostState::new(self.name.clone(), Some(key), &self.limits, self.grants.clone(), Some(cache.clone()), self.output_rate.clone());
        state.declare_fields(self.fields.clone());
        if let Some(tap) = tap {
            state.tap(tap);
        }
        marks.state = Instant::now();
        let mut store = new_store(&self.engine, state, &self.limits);
        let mut wall_deadline = self.limits.timeout;
        if role == Role::Candidate {
            pause_for_serving_calls(&mut store, &self.engine, &self.limits);
            wall_deadline += CANDIDATE_PAUSES;
        }
        let output = store.data().output.clone();
        marks.store = Instant::now();
        let wit_request = to_wit_request(request);
        marks.request = Instant::now();
        let pre = &self.pre;
        let run = async move {
            let (entered, mut instantiated) = (Instant::now(), Instant::now());
            let result = pre.reconcile(&mut store, &wit_request, &mut instantiated).await;
            (result, store, [entered, instantiated, Instant::now()])
        };
        let finished = within_deadline(wall_deadline, run);
        marks.left = Instant::now();
        output.flush();
        let (answer, store) = match finished {
            // The deadline passed while the guest waited in a host call (e.g. a sleep in `poll`):
            // the call was cancelled and its Store, with the instance slot, dropped.
            None => (Answer::TimedOut, None),
            Some((called, store, [entered, instantiated, returned])) => {
                (marks.entered, marks.instantiated, marks.returned) = (entered, instantiated, returned);
                self.counters.memory_reached(store.data().limiter.peak);
                (Answer::of(called, store.data(), &self.limits), Some(store))
            }
        };
        marks.judged = Instant::now();
        drop(store);
        drop(slot);
        marks.dropped = Instant::now();
        let result = self.result_of(answer);
        marks.end = Instant::now();
        self.counters.busy(marks.end - marks.slot);
        (result, marks)
    }

    /// The reconcile's result for how the call ended, counted.
    fn result_of(&self, answer: Answer) -> Result<Outcome, ReconcileError> {
        let c = &self.counters;
        let invalid = |source| {
            bump(&c.invalid_outcomes);
            ReconcileError::permanent(Cause::InvalidOutcome { plugin: self.name.to_string(), source: Box::new(source) })
        };
        let fault = |fault: GuestFault, instantiating: bool| {
            c.fault(&fault, instantiating);
            stopped(fault.describe(&self.name, if instantiating { "instantiation" } else { "reconcile" }))
        };
        match answer {
            Answer::TimedOut => Err(fault(GuestFault::Timeout(self.limits.timeout), false)),
            Answer::NotInstantiated(f) => Err(fault(f, true)),
            Answer::Faulted(f) => Err(fault(f, false)),
            // The host copied out all it allowed; whatever the guest made of it, the call failed.
            Answer::ReadsExhausted => {
                bump(&c.errors);
                Err(stopped(format!(
                    "plugin {} read more object JSON from the cache than its per-call budget ({}) allows; \
                     the reconcile failed (raise limits.readsPerCall, or read less: by index, by namespace)",
                    self.name,
                    limits::ByteSize(self.limits.read_budget().bytes())
                )))
            }
            Answer::Returned(Ok(outcome)) => {
                let outcome = to_outcome(outcome, &self.limits).map_err(invalid)?;
                bump(&c.ok);
                Ok(outcome)
            }
            Answer::Returned(Err(failure)) => {
                let actions = to_planned(failure.actions, &self.limits).map_err(invalid)?;
                bump(&c.errors);
                Err(from_wit_error(failure.error).with_actions(actions))
            }
        }
    }

    /// One reconcile on the real path, with where its time went. For measurements
    /// (`wasmloop-bench call-cost`): counted in [`Self::stats`] as any other call.
    #[doc(hidden)]
    pub fn profile_reconcile(&self, request: &Request, cache: &SharedCache) -> Result<CallPhases, ReconcileError> {
        let (result, marks) = self.call(request, cache, None, Role::Serving);
        result.map(|_| marks.phases())
    }
}

/// How a guest call ended, told from what it returned and the state of its Store.
enum Answer {
    TimedOut,
    NotInstantiated(GuestFault),
    Faulted(GuestFault),
    ReadsExhausted,
    Returned(Result<wit::Outcome, wit::Failure>),
}

impl Answer {
    fn of(called: Called<Result<wit::Outcome, wit::Failure>>, state: &HostState, limits: &Limits) -> Self {
        match called {
            Err(e) => Answer::NotInstantiated(GuestFault::classify(&e, state, limits)),
            // Whatever the guest made of a read cut short, the call failed on that.
            Ok(_) if state.reads_exhausted.is_some() => Answer::ReadsExhausted,
            Ok(Err(e)) => Answer::Faulted(GuestFault::classify(&e, state, limits)),
            Ok(Ok(returned)) => Answer::Returned(returned),
        }
    }
}

/// A call the sandbox stopped (or that failed around the guest): retried with backoff.
fn stopped(why: impl Into<String>) -> ReconcileError {
    ReconcileError::transient(Cause::Stopped(why.into()))
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

    /// As a shadow candidate: paused whenever a serving call is in flight
    /// ([`pause_for_serving_calls`]).
    fn reconcile_as_candidate(&self, request: &Request, cache: &SharedCache) -> Result<Outcome, ReconcileError> {
        self.guarded_call_as(request, cache, None, Role::Candidate)
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
        self.guarded_call_as(request, cache, tap, Role::Serving)
    }

    /// [`WasmPlugin::guarded_call`] in `role`.
    fn guarded_call_as(&self, request: &Request, cache: &SharedCache, tap: Option<Tap>, role: Role) -> Result<Outcome, ReconcileError> {
        // Defence in depth: a panic in the host side of a call (e.g. WASI's sync adapters when
        // called on an async worker thread instead of a blocking one) becomes an error. The
        // Store is dropped while unwinding, as on any other exit.
        match catch_panic(|| self.call(request, cache, tap, role).0) {
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
