//! A component linked for instantiation ([`Pre`], one per loaded plugin, under the contract
//! version it was built against), the fresh Store each call runs in, and running a guest call to
//! completion, or to its deadline, from a blocking thread.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use wasmtime::component::Component;
use wasmtime::{Store, UpdateDeadline};

use super::bindings::{ControllerPre, types as wit, v0_1, v0_2};
use super::compat;
use super::contract::{check_contract, compatible};
use super::engine::PluginEngine;
use super::error::{Error, Result};
use super::fault::GuestFault;
use super::guest_threads::{self, CandidateRunning};
use super::host::HostState;
use super::limits::Limits;
use super::output::OutputRate;
use crate::grants::Grants;
use crate::reconciler::catch_panic;

/// A component linked for instantiation, under the contract version it was built against.
pub(super) enum Pre {
    V0_3(ControllerPre<HostState>),
    V0_2(v0_2::ControllerPre<HostState>),
    V0_1(v0_1::ControllerPre<HostState>),
}

/// Instantiation (outer) and the call (inner) can each fail.
pub(super) type Called<T> = wasmtime::Result<wasmtime::Result<T>>;

impl Pre {
    /// Link `component`, built against `contract_version`, with the engine's linker.
    pub(super) fn new(engine: &PluginEngine, component: &Component, contract_version: &str) -> Result<Self> {
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

    /// The compiled component.
    pub(super) fn component(&self) -> &Component {
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

    /// Instantiate (outer error) and call `reconcile()` (inner error: a trap); `instantiated`
    /// is set when the instance is ready, so callers can tell the two apart in time.
    pub(super) async fn reconcile(
        &self,
        store: &mut Store<HostState>,
        request: &wit::Request,
        instantiated: &mut Instant,
    ) -> Called<Result<wit::Outcome, wit::Failure>> {
        Ok(match self {
            Pre::V0_3(pre) => {
                let plugin = pre.instantiate_async(&mut *store).await?;
                *instantiated = Instant::now();
                plugin.wasmloop_controller_plugin().call_reconcile(store, request).await
            }
            Pre::V0_2(pre) => {
                let plugin = pre.instantiate_async(&mut *store).await?;
                *instantiated = Instant::now();
                let answer = plugin.wasmloop_controller_plugin().call_reconcile(store, &compat::v0_2::request(request)).await;
                answer.map(|r| r.map(compat::v0_2::outcome).map_err(compat::v0_2::failure))
            }
            Pre::V0_1(pre) => {
                let plugin = pre.instantiate_async(&mut *store).await?;
                *instantiated = Instant::now();
                let answer = plugin.wasmloop_controller_plugin().call_reconcile(store, &compat::v0_1::request(request)).await;
                answer.map(|r| r.map(compat::v0_1::outcome).map_err(compat::v0_1::failure))
            }
        })
    }
}

/// A Store for one call holding `state`: its memory limiter and the epoch deadline of `limits`.
pub(super) fn new_store(engine: &PluginEngine, state: HostState, limits: &Limits) -> Store<HostState> {
    let mut store = Store::new(engine.engine(), state);
    store.limiter(|s| &mut s.limiter);
    store.set_epoch_deadline(limits.deadline_ticks(engine.epoch_tick()));
    store.epoch_deadline_trap();
    store
}

/// How long a shadow candidate's call may be paused for serving calls in all; past it, it goes
/// on beside them (at the lowest priority) rather than hold its slot indefinitely.
pub(super) const CANDIDATE_PAUSES: Duration = Duration::from_secs(5);

/// Make `store` a shadow candidate's: instead of trapping at its deadline, it checks at every
/// epoch (every tick, and whenever a serving call starts: [`CandidateRunning`]) whether a
/// serving call is in flight and, if so, waits until none is before going on (up to
/// [`CANDIDATE_PAUSES`] in all). Its timeout counts only the time it was not paused; it traps
/// as an interrupt past it, as any call's deadline does. The call must be run within
/// `limits.timeout + CANDIDATE_PAUSES`.
pub(super) fn pause_for_serving_calls(store: &mut Store<HostState>, engine: &PluginEngine, limits: &Limits) {
    let running = Arc::new(parking_lot::Mutex::new(CandidateRunning::enter(engine.engine())));
    let (budget, started) = (limits.timeout, Instant::now());
    let paused_nanos = Arc::new(AtomicU64::new(0));
    store.set_epoch_deadline(1);
    store.epoch_deadline_callback(move |_| {
        let paused = Duration::from_nanos(paused_nanos.load(Ordering::Acquire));
        if started.elapsed().saturating_sub(paused) > budget {
            return Ok(UpdateDeadline::Interrupt);
        }
        let allowance = CANDIDATE_PAUSES.saturating_sub(paused);
        if !guest_threads::serving_in_flight() || allowance.is_zero() {
            return Ok(UpdateDeadline::Continue(1));
        }
        running.lock().pause();
        let (running, paused_nanos) = (running.clone(), paused_nanos.clone());
        Ok(UpdateDeadline::YieldCustom(
            1,
            // Blocking here blocks only the candidate's own thread (its call runs there, in
            // `block_on`): no other task waits on it.
            Box::pin(async move {
                let since = Instant::now();
                guest_threads::wait_until_serving_quiet(allowance);
                paused_nanos.fetch_add(u64::try_from(since.elapsed().as_nanos()).unwrap_or(u64::MAX), Ordering::AcqRel);
                running.lock().resume();
            }),
        ))
    });
}

/// Instantiate in a fresh Store (no cache) and call `metadata()`, within the call deadline.
pub(super) fn call_metadata(
    engine: &PluginEngine,
    pre: &Pre,
    label: &Arc<str>,
    limits: &Limits,
    grants: Arc<Grants>,
) -> Result<wit::PluginMetadata> {
    let rate = Arc::new(OutputRate::new(limits.output_per_minute.as_usize()));
    let mut store = new_store(engine, HostState::new(label.clone(), None, limits, grants, None, rate), limits);
    let output = store.data().output.clone();
    let run = async move {
        let result = pre.metadata(&mut store).await;
        (result, store)
    };
    let finished = within_deadline(limits.timeout, run);
    output.flush();
    match finished {
        None => Err(Error::Metadata(GuestFault::Timeout(limits.timeout).describe(label, "metadata()"))),
        Some((Err(e), store)) => Err(match GuestFault::classify(&e, store.data(), limits) {
            GuestFault::Host(e) => Error::Instantiate(e),
            f => Error::Instantiate(f.describe(label, "instantiation")),
        }),
        Some((Ok(described), store)) => {
            described.map_err(|e| Error::Metadata(GuestFault::classify(&e, store.data(), limits).describe(label, "metadata()")))
        }
    }
}

/// `metadata()` of a component that is not loaded as a plugin (inspect).
pub(crate) fn instantiate_for_metadata(engine: &PluginEngine, component: &Component, limits: &Limits) -> Result<wit::PluginMetadata> {
    let pre = Pre::new(engine, component, &check_contract(engine, component)?)?;
    let label: Arc<str> = Arc::from("(inspect)");
    catch_panic(|| call_metadata(engine, &pre, &label, limits, Arc::new(Grants::none("(inspect)"))))
        .map_err(|what| Error::Metadata(format!("the host panicked while calling metadata(): {what}")))?
}

/// Run a guest call to completion on this (blocking) thread, or cancel it at `deadline`.
///
/// The epoch deadline interrupts a guest that computes; this covers a guest that waits in a host
/// call (WASI `poll` on a clock, for instance), which no epoch can interrupt. Cancelling drops
/// the future, and with it the Store and its instance slot. Uses the current Tokio runtime (the
/// controller's blocking threads), or a small one of its own when there is none (offline runs).
pub(super) fn within_deadline<F: Future>(deadline: Duration, call: F) -> Option<F::Output> {
    block_on(async move { tokio::time::timeout(deadline, call).await.ok() })
}

/// Drive `f` to completion on this (blocking) thread.
pub(super) fn block_on<F: Future>(f: F) -> F::Output {
    match tokio::runtime::Handle::try_current() {
        Ok(handle) => handle.block_on(f),
        Err(_) => offline_runtime().block_on(f),
    }
}

/// The runtime of calls made outside any Tokio runtime (offline runs, tests, benchmarks): one
/// for the process, built on first use, with one worker thread that drives its timers and I/O,
/// so deadlines fire while the caller's thread waits in `Handle::block_on`.
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
