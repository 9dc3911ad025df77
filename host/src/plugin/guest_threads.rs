//! Where guest code runs: blocking threads of their own, at a lower OS priority than the host's.
//!
//! A plugin's reconcile (and compiling a plugin's component) runs on a thread; a guest that
//! computes until its deadline keeps that thread busy for up to the deadline. On the host's own
//! threads it would compete as an equal with what must not wait for guests: event handling,
//! queue bookkeeping, `/healthz`, Lease renewals. Here guest work runs on the blocking threads of
//! a small runtime of its own whose threads run at [`GUEST_NICE`]: when the host wants a core, it
//! takes it from a guest at once (CFS gives a nice-0 thread ~9× a nice-10 thread's share and
//! preempts in its favour on wake-up); when the host is idle, guests get every core. Shadowed
//! candidate versions run lower still (`controller::shadow::CANDIDATE_NICE`).
//!
//! Lowering a thread's priority needs no privilege. Where the call is refused (a seccomp
//! profile), guest threads run at normal priority and a warning says so once.

use std::sync::OnceLock;
use std::sync::atomic::{AtomicBool, Ordering};

use tokio::runtime::{Builder, Runtime};
use tokio::task::JoinError;

/// The OS priority (nice value) of the threads guest code runs on.
pub const GUEST_NICE: i32 = 10;

/// Run `work` (guest code: a reconcile, a compile) on a guest thread and wait for it.
pub async fn run<T: Send + 'static>(work: impl FnOnce() -> T + Send + 'static) -> Result<T, JoinError> {
    match runtime() {
        Some(guests) => guests.spawn_blocking(work).await,
        // No runtime of its own (its threads could not start): the caller's blocking pool.
        None => tokio::task::spawn_blocking(work).await,
    }
}

fn runtime() -> Option<&'static Runtime> {
    static RUNTIME: OnceLock<Option<Runtime>> = OnceLock::new();
    RUNTIME
        .get_or_init(|| {
            // One worker (it drives the timers WASI's sync adapters wait on, in `block_on` on the
            // guest's own thread), blocking threads as tokio's default pool.
            Builder::new_multi_thread()
                .worker_threads(1)
                .enable_all()
                .thread_name("wasm-guest")
                .on_thread_start(lower_priority)
                .build()
                .inspect_err(|e| tracing::warn!(error = %e, "cannot start the guest threads' runtime; guests run on the host's threads"))
                .ok()
        })
        .as_ref()
}

/// Set the calling thread's nice value to [`GUEST_NICE`] (best effort, warned about once).
fn lower_priority() {
    static WARNED: AtomicBool = AtomicBool::new(false);
    if let Err(e) = rustix::process::setpriority_process(Some(rustix::thread::gettid()), GUEST_NICE)
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
    async fn a_panicking_guest_call_is_an_error_not_a_crash() {
        let result = run(|| panic!("guest panicked")).await;
        assert!(result.unwrap_err().is_panic());
        assert_eq!(run(|| 7).await.unwrap(), 7, "the threads still serve");
    }
}
