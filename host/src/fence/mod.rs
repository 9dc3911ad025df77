//! [`Fence`]: writes go out only while this replica holds the Lease that owns them (the leader's
//! with `--leader-elect`, a shard's with `--shard-mode plugin`).
//!
//! A replica that was frozen (SIGSTOP, a long pause, a suspended VM, a throttled cgroup) learns
//! that it lost its Lease only after it runs again, and its workers may run first. So the fence
//! keeps its own deadline on the local monotonic clock, and every write checks it right before
//! it is sent:
//! - [`machine`]: the rules, as a pure state machine. The deadline is counted from when the
//!   renewal that succeeded was **sent**, never from when its answer arrived; after a gap (the
//!   clock jumped past the deadline) only a renewal sent after the gap reopens it; watching the
//!   Lease can close it but never open it;
//! - [`keeper`]: [`FenceKeeper`], fed by whoever writes the Lease (the leader election, the
//!   sharding coordinator): each renewal sent and its answer, a Lease lost; it publishes the
//!   deadline, logs every opening and closing and counts them ([`FenceMetrics`]);
//! - [`confirm`]: defence in depth on the write itself: before a write goes out,
//!   [`Fence::confirm`] reads the Lease from the API server (one read shared by the writes that
//!   wait for it) and refuses the write unless this replica still holds it with the same
//!   acquisition (uid and `leaseTransitions`), so a bug in the deadline (or a clock that did not
//!   count a pause) cannot become a write after another replica took the Lease.
//!
//! The controllers' workers wait for the fence too ([`Fence::wait_open`]): a warm standby keeps
//! its informers synced and its plugins loaded, and its workers start the moment it may write.

pub mod confirm;
pub mod keeper;
pub mod machine;
mod metrics;

pub use confirm::{LeaseReader, LeaseToken};
pub use keeper::{FenceKeeper, KeeperConfig};
pub use metrics::FenceMetrics;

use std::sync::{Arc, OnceLock};
use std::time::Duration;

use tokio::sync::watch;
use tokio::time::Instant;

/// Why a write was not sent.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Error {
    /// This replica does not hold the Lease (or has not renewed it since it last closed).
    #[error("not sent: this replica does not hold the Lease")]
    NotLeader,
    /// The last successful renewal's window ended this long ago.
    #[error("not sent: this replica's Lease expired {0:?} ago (fenced)")]
    Expired(Duration),
    /// The API server says the Lease is no longer this replica's acquisition.
    #[error("not sent: the Lease {lease} is held by {holder:?} now, not by this replica's acquisition (fenced by a read)")]
    Taken {
        /// The Lease.
        lease: String,
        /// Its holder, as read.
        holder: Option<String>,
    },
    /// The Lease could not be read to confirm this replica still holds it.
    #[error("not sent: could not confirm the Lease {lease} is still held: {reason}")]
    Unconfirmed {
        /// The Lease.
        lease: String,
        /// Why the read failed.
        reason: String,
    },
}

/// A result whose error is a write the fence held back.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// What writers see of the fence: until when they may write, and which acquisition of the Lease
/// that rests on.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Window {
    /// Writes may go out before this instant; `None`: closed.
    pub until: Option<Instant>,
    /// The acquisition of the Lease the window rests on (from the last successful renewal).
    pub token: Option<LeaseToken>,
}

/// Whether this replica may write now. Cheap to clone; clones share the state.
#[derive(Clone, Debug, Default)]
pub struct Fence {
    /// `None`: no Lease, always open. Otherwise the window published by the fence's keeper; a
    /// watch channel, so waiters learn of each change.
    state: Option<Arc<State>>,
}

#[derive(Debug)]
struct State {
    window: watch::Sender<Window>,
    /// How writes are confirmed with the API server (set by the keeper; none: no reads).
    confirm: OnceLock<confirm::Confirm>,
}

impl Fence {
    /// No Lease: every write may go out.
    pub fn open() -> Self {
        Self { state: None }
    }

    /// Kept by a Lease: closed until a [`FenceKeeper`] sees a renewal succeed.
    pub fn closed() -> Self {
        Self { state: Some(Arc::new(State { window: watch::Sender::new(Window::default()), confirm: OnceLock::new() })) }
    }

    /// Whether the fence follows a Lease (false: [`Fence::open`]).
    pub fn is_kept(&self) -> bool {
        self.state.is_some()
    }

    /// The current window (`None` without a Lease).
    pub fn window(&self) -> Option<Window> {
        self.state.as_ref().map(|s| s.window.borrow().clone())
    }

    /// Ok if a write may be sent now, by the local deadline (no request).
    pub fn check(&self) -> Result<()> {
        let Some(state) = &self.state else { return Ok(()) };
        let until = state.window.borrow().until;
        judge(until, Instant::now())
    }

    /// Ok if a write may be sent now: the local deadline ([`Fence::check`]), then — when the
    /// fence's keeper reads its Lease — a read of the Lease sent after this call began, which
    /// must show this replica's acquisition still holding it.
    pub async fn confirm(&self) -> Result<()> {
        let Some(state) = &self.state else { return Ok(()) };
        self.check()?;
        let Some(confirm) = state.confirm.get() else { return Ok(()) };
        confirm.held(|| state.window.borrow().token.clone()).await?;
        // The read took time: the deadline is judged again.
        self.check()
    }

    /// Wait until a write may be sent (at once without a Lease).
    pub async fn wait_open(&self) {
        self.wait_for(true).await;
    }

    /// Wait until writes are held back (never returns without a Lease).
    pub async fn wait_closed(&self) {
        if self.state.is_none() {
            return std::future::pending().await;
        }
        self.wait_for(false).await;
    }

    async fn wait_for(&self, open: bool) {
        let Some(state) = &self.state else { return };
        // Subscribed before checking: a change between the check and the wait is not missed.
        let mut changes = state.window.subscribe();
        loop {
            if self.check().is_ok() == open {
                return;
            }
            let until = state.window.borrow().until;
            let deadline = async {
                // An open fence also closes by itself, at its deadline.
                match until {
                    Some(until) if !open => tokio::time::sleep_until(until).await,
                    _ => std::future::pending().await,
                }
            };
            tokio::select! {
                changed = changes.changed() => if changed.is_err() { return }, // unreachable: this fence holds the sender
                () = deadline => {}
            }
        }
    }

    /// Publish `window` (the keeper's); wakes waiters only when it changed.
    fn publish(&self, window: Window) {
        if let Some(state) = &self.state {
            state.window.send_if_modified(|w| {
                let changed = *w != window;
                *w = window;
                changed
            });
        }
    }

    /// Confirm writes with `confirm` from now on; false if the fence has no Lease or already
    /// confirms with another.
    fn confirm_with(&self, confirm: confirm::Confirm) -> bool {
        self.state.as_ref().is_some_and(|s| s.confirm.set(confirm).is_ok())
    }
}

/// Whether a write may go out at `now` before `until`.
fn judge(until: Option<Instant>, now: Instant) -> Result<()> {
    match until {
        None => Err(Error::NotLeader),
        Some(until) if now < until => Ok(()),
        Some(until) => Err(Error::Expired(now - until)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn open_fences_never_refuse() {
        let f = Fence::open();
        assert_eq!(f.check(), Ok(()));
        assert!(!f.is_kept());
        assert_eq!(f.window(), None);
    }

    #[tokio::test(start_paused = true)]
    async fn a_published_window_opens_the_fence_until_its_deadline() {
        let f = Fence::closed();
        assert_eq!(f.check(), Err(Error::NotLeader));
        f.publish(Window { until: Some(Instant::now() + Duration::from_secs(3)), token: None });
        assert_eq!(f.check(), Ok(()));
        assert_eq!(f.confirm().await, Ok(()), "no reader: the local deadline decides");
        tokio::time::advance(Duration::from_millis(2999)).await;
        assert_eq!(f.check(), Ok(()));
        // A replica frozen past its deadline wakes up fenced, before its keeper says anything.
        tokio::time::advance(Duration::from_secs(6)).await;
        assert!(matches!(f.check(), Err(Error::Expired(d)) if d >= Duration::from_secs(5)));
        assert!(matches!(f.confirm().await, Err(Error::Expired(_))));
        f.publish(Window::default());
        assert_eq!(f.check(), Err(Error::NotLeader));
    }

    #[tokio::test(start_paused = true)]
    async fn waiters_start_when_the_fence_opens_and_see_it_close_at_its_deadline() {
        let f = Fence::closed();
        let waiter = tokio::spawn({
            let f = f.clone();
            async move { f.wait_open().await }
        });
        tokio::time::advance(Duration::from_secs(10)).await;
        assert!(!waiter.is_finished(), "a waiter passed a closed fence");
        f.publish(Window { until: Some(Instant::now() + Duration::from_secs(3)), token: None });
        tokio::time::timeout(Duration::from_millis(1), waiter).await.expect("the waiter did not start").unwrap();
        // Open: no wait at all; an open fence without a Lease never blocks.
        tokio::time::timeout(Duration::ZERO, f.wait_open()).await.unwrap();
        tokio::time::timeout(Duration::ZERO, Fence::open().wait_open()).await.unwrap();
        // Nobody publishes anything: the deadline alone closes it, and a waiter sees that.
        let closing = tokio::time::timeout(Duration::from_secs(4), f.wait_closed()).await;
        assert!(closing.is_ok(), "wait_closed missed the deadline");
        assert!(f.check().is_err());
        assert!(tokio::time::timeout(Duration::from_secs(60), Fence::open().wait_closed()).await.is_err());
    }
}
