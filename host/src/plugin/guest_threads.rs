//! Where guest code runs: blocking threads of their own, at a lower OS priority than the host's.
//!
//! A plugin's reconcile (and compiling a plugin's component) runs on a thread; a guest that
//! computes until its deadline keeps that thread busy for up to the deadline. On the host's own
//! threads it would compete as an equal with what must not wait for guests: event handling,
//! queue bookkeeping, `/healthz`, Lease renewals. Here guest work runs on the blocking threads of
//! a small runtime of its own whose threads run at [`GUEST_NICE`]: when the host wants a core, it
//! takes it from a guest at once (CFS gives a nice-0 thread ~9× a nice-10 thread's share and
//! preempts in its favour on wake-up); when the host is idle, guests get every core. Shadowed
//! candidate versions run lower still, on the pool's [`Lane::Candidate`] at [`CANDIDATE_NICE`]:
//! a separate set of threads, because a thread's priority, once lowered, cannot be raised again
//! without privilege.
//!
//! A candidate must not run beside a serving call at all, not even at the lowest priority and on
//! another core: the two share caches, memory bandwidth and the kernel's lock on the process's
//! address space (a fresh instance faults its pages in; another instance's setup and reset map
//! and unmap), and on this project's 2-core machines that alone cost the serving p99 1.6–1.9×.
//! So the pool counts the serving calls in flight; a candidate starts only once there has been
//! none for [`QUIET`] ([`wait_until_serving_quiet`]), and a running one is paused as soon as a
//! serving call starts: the serving call's start advances the epoch of the engines of running
//! candidates ([`CandidateRunning`]), whose Stores check at every epoch whether a serving call
//! is in flight and then wait for the lane to be quiet again before going on.
//!
//! Lowering a thread's priority needs no privilege. Where the call is refused (a seccomp
//! profile), guest threads run at normal priority and a warning says so once.

use std::sync::OnceLock;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use parking_lot::Mutex;

use tokio::runtime::{Builder, Runtime};
use tokio::task::JoinError;

/// The OS priority (nice value) of the threads serving versions' guest code runs on.
pub const GUEST_NICE: i32 = 10;

/// The OS priority of the threads candidate versions run on: the lowest, so a candidate gets
/// CPU only when nothing else of the host (serving reconciles, event handling, Lease renewals)
/// wants it.
pub const CANDIDATE_NICE: i32 = 19;

/// Which threads of the pool guest work runs on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Lane {
    /// Serving versions' reconciles, compiles, index mappings: at [`GUEST_NICE`].
    Serving,
    /// Shadowed candidate versions: at [`CANDIDATE_NICE`].
    Candidate,
}

impl Lane {
    fn nice(self) -> i32 {
        match self {
            Lane::Serving => GUEST_NICE,
            Lane::Candidate => CANDIDATE_NICE,
        }
    }

    fn thread_name(self) -> &'static str {
        match self {
            Lane::Serving => "wasm-guest",
            Lane::Candidate => "wasm-candidate",
        }
    }
}

/// Run `work` (guest code: a reconcile, a compile) on a serving guest thread and wait for it.
///
/// The call counts as in flight from here until `work` returns (or is dropped unrun), queued
/// or running: candidates wait for it ([`wait_until_serving_quiet`]).
pub async fn run<T: Send + 'static>(work: impl FnOnce() -> T + Send + 'static) -> Result<T, JoinError> {
    let in_flight = InFlight::enter();
    let work = move || {
        let _in_flight = in_flight;
        work()
    };
    match runtime(Lane::Serving) {
        Some(guests) => guests.spawn_blocking(work).await,
        // No runtime of its own (its threads could not start): the caller's blocking pool.
        None => tokio::task::spawn_blocking(work).await,
    }
}

/// Start `work` on a thread of `lane` without waiting for it (a candidate's reconcile, whose
/// answer comes back on a channel); false if no thread of the lane could be started.
pub fn start(lane: Lane, work: impl FnOnce() + Send + 'static) -> bool {
    runtime(lane).map(|guests| drop(guests.spawn_blocking(work))).is_some()
}

/// How long the serving lane must have been idle before a candidate starts or goes on: a worker
/// between two reconciles it has queued leaves gaps shorter than this, and a candidate squeezed
/// into them slows the next serving call (it shares caches, memory bandwidth and the address
/// space's lock even on another core).
pub const QUIET: Duration = Duration::from_micros(300);

/// The longest a waiting candidate sleeps between two looks at the serving lane.
const LONGEST_NAP: Duration = Duration::from_millis(5);

/// Block the calling thread (a candidate's) until no serving call has been queued or running
/// for [`QUIET`], or until `timeout` has passed: whether the serving lane is quiet.
///
/// The candidate looks, sleeps and looks again (sleeping longer, up to [`LONGEST_NAP`], while
/// the lane stays busy); serving calls never wake it: a wake-up of another core's thread at the
/// end of every serving call cost the next serving call more than anything else here.
pub fn wait_until_serving_quiet(timeout: Duration) -> bool {
    let deadline = Instant::now() + timeout;
    let mut nap = QUIET;
    loop {
        let (started, idle) = (SERVING.started.load(Ordering::Acquire), !serving_in_flight());
        if Instant::now() + nap > deadline {
            return false;
        }
        std::thread::sleep(nap);
        if idle && !serving_in_flight() && SERVING.started.load(Ordering::Acquire) == started {
            return true;
        }
        nap = if idle { QUIET } else { (nap * 2).min(LONGEST_NAP) };
    }
}

/// Whether a serving call is queued or running.
pub fn serving_in_flight() -> bool {
    SERVING.calls.load(Ordering::Acquire) > 0
}

/// The serving calls in flight, and how many ever started.
struct ServingCalls {
    calls: AtomicUsize,
    /// Serving calls ever started (a quiet period is one in which it did not change).
    started: AtomicUsize,
}

static SERVING: ServingCalls = ServingCalls { calls: AtomicUsize::new(0), started: AtomicUsize::new(0) };

/// One serving call in flight, until dropped.
struct InFlight;

impl InFlight {
    fn enter() -> Self {
        SERVING.calls.fetch_add(1, Ordering::AcqRel);
        SERVING.started.fetch_add(1, Ordering::AcqRel);
        // Running candidates pause at their next epoch check: make it now.
        if CANDIDATES.running.load(Ordering::Acquire) > 0 {
            let engines = CANDIDATES.engines.lock();
            for (i, engine) in engines.iter().enumerate() {
                if !engines[..i].iter().any(|e| wasmtime::Engine::same(e, engine)) {
                    engine.increment_epoch();
                }
            }
        }
        InFlight
    }
}

impl Drop for InFlight {
    fn drop(&mut self) {
        SERVING.calls.fetch_sub(1, Ordering::AcqRel);
    }
}

/// The candidate calls running (not paused), and the engines of all candidate calls.
struct Candidates {
    running: AtomicUsize,
    engines: Mutex<Vec<wasmtime::Engine>>,
}

static CANDIDATES: Candidates = Candidates { running: AtomicUsize::new(0), engines: Mutex::new(Vec::new()) };

/// A candidate's call on `engine`, running from [`CandidateRunning::enter`] until dropped, with
/// [`CandidateRunning::pause`]s: a serving call that starts meanwhile advances the engine's
/// epoch, so the candidate's Store checks at once and pauses.
///
/// An advance also brings the Stores of other calls on the engine one tick nearer their
/// deadlines. It happens only when a serving call starts while a candidate runs, and a
/// candidate runs only once no serving call is in flight, then pauses at the first advance:
/// a serving call sees at most the advances of calls started within that instant.
pub struct CandidateRunning {
    engine: wasmtime::Engine,
    running: bool,
}

impl CandidateRunning {
    /// A candidate call on `engine` starts running.
    pub fn enter(engine: &wasmtime::Engine) -> Self {
        CANDIDATES.engines.lock().push(engine.clone());
        CANDIDATES.running.fetch_add(1, Ordering::AcqRel);
        Self { engine: engine.clone(), running: true }
    }

    /// The call pauses (it waits for [`wait_until_serving_quiet`]): serving calls no longer
    /// advance epochs for it.
    pub fn pause(&mut self) {
        if std::mem::replace(&mut self.running, false) {
            CANDIDATES.running.fetch_sub(1, Ordering::AcqRel);
        }
    }

    /// The call goes on after a pause.
    pub fn resume(&mut self) {
        if !std::mem::replace(&mut self.running, true) {
            CANDIDATES.running.fetch_add(1, Ordering::AcqRel);
        }
    }
}

impl Drop for CandidateRunning {
    fn drop(&mut self) {
        self.pause();
        let mut engines = CANDIDATES.engines.lock();
        if let Some(i) = engines.iter().position(|e| wasmtime::Engine::same(e, &self.engine)) {
            engines.swap_remove(i);
        }
    }
}

fn runtime(lane: Lane) -> Option<&'static Runtime> {
    static SERVING_LANE: OnceLock<Option<Runtime>> = OnceLock::new();
    static CANDIDATE_LANE: OnceLock<Option<Runtime>> = OnceLock::new();
    let cell = match lane {
        Lane::Serving => &SERVING_LANE,
        Lane::Candidate => &CANDIDATE_LANE,
    };
    cell.get_or_init(|| {
        // One worker (it drives the timers WASI's sync adapters wait on, in `block_on` on the
        // guest's own thread), blocking threads as tokio's default pool.
        Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .thread_name(lane.thread_name())
            .on_thread_start(move || lower_priority(lane))
            .build()
            .inspect_err(|e| tracing::warn!(error = %e, ?lane, "cannot start the guest threads' runtime"))
            .ok()
    })
    .as_ref()
}

/// Set the calling thread's nice value to `lane`'s (best effort, warned about once).
fn lower_priority(lane: Lane) {
    static WARNED: AtomicBool = AtomicBool::new(false);
    if let Err(e) = rustix::process::setpriority_process(Some(rustix::thread::gettid()), lane.nice())
        && !WARNED.swap(true, Ordering::Relaxed)
    {
        tracing::warn!(error = %e, "cannot lower the priority of guest threads; guests compete with the host's threads as equals");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn guest_work_runs_on_a_lower_priority_thread_of_its_own() {
        let (name, nice) = run(|| {
            let name = std::thread::current().name().map(str::to_string);
            (name, rustix::process::getpriority_process(Some(rustix::thread::gettid())).unwrap())
        })
        .await
        .unwrap();
        assert_eq!(name.as_deref(), Some("wasm-guest"));
        let own = rustix::process::getpriority_process(Some(rustix::thread::gettid())).unwrap();
        assert_eq!(nice, GUEST_NICE.max(own), "a guest thread's nice value");
    }

    #[tokio::test]
    async fn candidate_work_runs_lower_still_on_threads_of_its_own() {
        let (tx, rx) = tokio::sync::oneshot::channel();
        assert!(start(Lane::Candidate, move || {
            let name = std::thread::current().name().map(str::to_string);
            let _ = tx.send((name, rustix::process::getpriority_process(Some(rustix::thread::gettid())).unwrap()));
        }));
        let (name, nice) = rx.await.unwrap();
        assert_eq!(name.as_deref(), Some("wasm-candidate"));
        let own = rustix::process::getpriority_process(Some(rustix::thread::gettid())).unwrap();
        assert_eq!(nice, CANDIDATE_NICE.max(own), "a candidate thread's nice value");
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_candidate_waits_until_the_serving_lane_is_quiet() {
        let (release, held) = std::sync::mpsc::channel::<()>();
        let (started, running) = tokio::sync::oneshot::channel();
        let serving = tokio::spawn(run(move || {
            let _ = started.send(());
            held.recv().unwrap();
        }));
        running.await.unwrap();
        // Other tests of this binary may run serving calls too: only the answer while ours is
        // held is certain.
        assert!(!wait_until_serving_quiet(Duration::from_millis(30)), "quiet while a serving call runs");
        let waiter = std::thread::spawn(|| wait_until_serving_quiet(Duration::from_secs(30)));
        std::thread::sleep(Duration::from_millis(20));
        assert!(!waiter.is_finished(), "the candidate went on while the serving call ran");
        release.send(()).unwrap();
        serving.await.unwrap().unwrap();
        assert!(waiter.join().unwrap(), "the candidate was not woken once the serving lane was quiet");
    }

    #[tokio::test]
    async fn a_panicking_guest_call_is_an_error_not_a_crash() {
        let result = run(|| panic!("guest panicked")).await;
        assert!(result.unwrap_err().is_panic());
        assert_eq!(run(|| 7).await.unwrap(), 7, "the threads still serve");
    }
}
