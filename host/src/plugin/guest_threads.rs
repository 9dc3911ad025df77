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
//! Lowering a thread's priority needs no privilege. Where the call is refused (a seccomp
//! profile), guest threads run at normal priority and a warning says so once.

use std::sync::OnceLock;
use std::sync::atomic::{AtomicBool, Ordering};

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
pub async fn run<T: Send + 'static>(work: impl FnOnce() -> T + Send + 'static) -> Result<T, JoinError> {
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

fn runtime(lane: Lane) -> Option<&'static Runtime> {
    static SERVING: OnceLock<Option<Runtime>> = OnceLock::new();
    static CANDIDATE: OnceLock<Option<Runtime>> = OnceLock::new();
    let cell = match lane {
        Lane::Serving => &SERVING,
        Lane::Candidate => &CANDIDATE,
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

    #[tokio::test]
    async fn a_panicking_guest_call_is_an_error_not_a_crash() {
        let result = run(|| panic!("guest panicked")).await;
        assert!(result.unwrap_err().is_panic());
        assert_eq!(run(|| 7).await.unwrap(), 7, "the threads still serve");
    }
}
