//! [`Fence`]: with leader election, writes go out only while this replica's Lease is valid.
//!
//! The Lease manager says when leadership is gained or lost, but a replica that was frozen
//! (SIGSTOP, a long GC-like pause, a suspended VM) learns that only after it runs again, and
//! its workers may run first. So the fence keeps its own deadline on the local monotonic clock,
//! as client-go's leader elector does with its observed renew time: each renewal this replica
//! observes opens it until `observed + lease duration - margin`, and every action checks it
//! right before it is sent. A frozen replica wakes up with its deadline in the past and sends
//! nothing; the standby that took over may already be writing.
//!
//! The controllers' workers wait for the fence too ([`Fence::wait_open`]): a warm standby keeps
//! its informers synced and its plugins loaded, and its workers start the moment it may write.

use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::coordination::v1::Lease;
use kube::api::Api;
use kube::runtime::watcher::{self, watcher};
use tokio::sync::watch;
use tokio::time::Instant;

/// Why a write was not sent.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Error {
    /// This replica is not (or no longer) the leader.
    #[error("not sent: this replica does not hold the Lease")]
    NotLeader,
    /// The Lease ran out this long ago without a renewal.
    #[error("not sent: this replica's Lease expired {0:?} ago (fenced)")]
    Expired(Duration),
}

/// A result whose error is a write the fence held back.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Whether this replica may write now. Cheap to clone; clones share the state.
#[derive(Clone, Debug, Default)]
pub struct Fence {
    /// `None`: no leader election, always open. Otherwise the deadline of the last renewal
    /// observed (`None`: not leading); a watch channel, so waiters learn of each change.
    state: Option<Arc<watch::Sender<Option<Instant>>>>,
}

impl Fence {
    /// No leader election: every write may go out.
    pub fn open() -> Self {
        Self { state: None }
    }

    /// Leader election: closed until a renewal is observed.
    pub fn closed() -> Self {
        Self { state: Some(Arc::new(watch::Sender::new(None))) }
    }

    /// Writes may go out until `until`.
    pub fn open_until(&self, until: Instant) {
        if let Some(state) = &self.state {
            state.send_replace(Some(until));
        }
    }

    /// No more writes (leadership lost).
    pub fn close(&self) {
        if let Some(state) = &self.state {
            state.send_replace(None);
        }
    }

    /// Ok if a write may be sent now.
    pub fn check(&self) -> Result<()> {
        let Some(state) = &self.state else { return Ok(()) };
        match *state.borrow() {
            None => Err(Error::NotLeader),
            Some(until) => {
                let now = Instant::now();
                if now < until { Ok(()) } else { Err(Error::Expired(now - until)) }
            }
        }
    }

    /// Wait until a write may be sent (at once without leader election).
    pub async fn wait_open(&self) {
        let Some(state) = &self.state else { return };
        // Subscribed before checking: a renewal between the check and the wait is not missed.
        let mut changes = state.subscribe();
        while self.check().is_err() {
            if changes.changed().await.is_err() {
                return; // unreachable: this fence holds the sender
            }
        }
    }

    /// Follow the Lease `namespace/name`: each version held by `identity` opens the fence for
    /// `duration - margin` from when it is observed; any other holder closes it. Runs until the
    /// returned task is aborted.
    pub fn track(
        &self,
        client: kube::Client,
        namespace: &str,
        name: &str,
        identity: String,
        duration: Duration,
        margin: Duration,
    ) -> tokio::task::JoinHandle<()> {
        let fence = self.clone();
        let api: Api<Lease> = Api::namespaced(client, namespace);
        let config = watcher::Config::default().fields(&format!("metadata.name={name}"));
        tokio::spawn(async move {
            let mut events = watcher(api, config).boxed();
            while let Some(event) = events.next().await {
                let lease = match event {
                    Ok(watcher::Event::Apply(l) | watcher::Event::InitApply(l)) => l,
                    Ok(watcher::Event::Delete(_)) => {
                        fence.close();
                        continue;
                    }
                    Ok(_) => continue,
                    Err(e) => {
                        tracing::debug!(error = %e, "watching the Lease for the write fence");
                        continue;
                    }
                };
                let holder = lease.spec.as_ref().and_then(|s| s.holder_identity.as_deref());
                if holder == Some(identity.as_str()) {
                    fence.open_until(Instant::now() + duration.saturating_sub(margin));
                } else {
                    fence.close();
                }
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn open_fences_never_refuse() {
        let f = Fence::open();
        f.close();
        assert_eq!(f.check(), Ok(()));
    }

    #[tokio::test(start_paused = true)]
    async fn a_renewal_opens_the_fence_until_its_deadline() {
        let f = Fence::closed();
        assert_eq!(f.check(), Err(Error::NotLeader));
        f.open_until(Instant::now() + Duration::from_secs(3));
        assert_eq!(f.check(), Ok(()));
        tokio::time::advance(Duration::from_millis(2999)).await;
        assert_eq!(f.check(), Ok(()));
        // A replica frozen past its deadline wakes up fenced, before any renewal is observed.
        tokio::time::advance(Duration::from_secs(6)).await;
        assert!(matches!(f.check(), Err(Error::Expired(d)) if d >= Duration::from_secs(5)));
        f.open_until(Instant::now() + Duration::from_secs(3));
        assert_eq!(f.check(), Ok(()));
        f.close();
        assert_eq!(f.check(), Err(Error::NotLeader));
    }

    #[tokio::test(start_paused = true)]
    async fn waiters_start_when_a_renewal_opens_the_fence() {
        let f = Fence::closed();
        let waiter = tokio::spawn({
            let f = f.clone();
            async move { f.wait_open().await }
        });
        tokio::time::advance(Duration::from_secs(10)).await;
        assert!(!waiter.is_finished(), "a waiter passed a closed fence");
        f.open_until(Instant::now() + Duration::from_secs(3));
        tokio::time::timeout(Duration::from_millis(1), waiter).await.expect("the waiter did not start").unwrap();
        // Open: no wait at all; an open fence without leader election never blocks.
        tokio::time::timeout(Duration::ZERO, f.wait_open()).await.unwrap();
        tokio::time::timeout(Duration::ZERO, Fence::open().wait_open()).await.unwrap();
    }
}
