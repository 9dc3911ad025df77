//! Defence in depth on the write itself: before a write goes out, read the Lease from the API
//! server and check that this replica's acquisition still holds it.
//!
//! Kubernetes has no transaction over two objects, so a write cannot be made conditional on a
//! Lease. The closest the API allows: a quorum read of the Lease **sent after the write was
//! ready**, compared with the acquisition the fence rests on ([`LeaseToken`]: the Lease's uid,
//! holder and `leaseTransitions`, which every change of holder increments). If another replica
//! took the Lease — however wrong this replica's clock or fence is — the read shows it and the
//! write is refused. What remains is the time between the read's answer and the write reaching
//! the server (a round trip), and another replica can take the Lease in it only after it saw no
//! renewal for a whole lease duration.
//!
//! Cost: one GET of a small object per write, shared: at most one read is in flight per Lease,
//! and the writes that arrive while it is (sent before they were ready, it cannot serve them)
//! wait for the next one, which goes out when it is answered and serves them all (the actions of
//! one slow-start batch, the concurrent reconciles of one shard). So a burst of writes costs two
//! reads, and a write waits at most two round trips. Counted by `wasmloop_fence_reads_total` and
//! `wasmloop_fence_read_seconds` against `wasmloop_fence_confirmations_total`.

use std::sync::{Arc, OnceLock};

use futures::FutureExt;
use futures::future::{BoxFuture, Shared};
use k8s_openapi::api::coordination::v1::Lease;
use kube::api::Api;
use parking_lot::Mutex;
use tokio::time::Instant;

use super::metrics::FenceMetrics;
use super::{Error, Result};

/// One acquisition of a Lease: who holds it, since which change of holder, of which object.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LeaseToken {
    /// The Lease object's uid (a deleted and re-created Lease is another).
    pub uid: Option<String>,
    /// The holder.
    pub holder: Option<String>,
    /// `spec.leaseTransitions`: incremented by every change of holder.
    pub transitions: i32,
}

impl LeaseToken {
    /// The acquisition `lease` shows.
    pub fn of(lease: &Lease) -> Self {
        let spec = lease.spec.as_ref();
        Self {
            uid: lease.metadata.uid.clone(),
            holder: spec.and_then(|s| s.holder_identity.clone()),
            transitions: spec.and_then(|s| s.lease_transitions).unwrap_or(0),
        }
    }
}

/// What a read of the Lease found: its acquisition (`None`: no such Lease), or why it failed.
pub type Read = std::result::Result<Option<LeaseToken>, ReadFailed>;

/// Why a read of the Lease failed: the client's error, rendered (one read is shared by every
/// write waiting for it, so its answer is cloned to each).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct ReadFailed(pub String);

/// Reads one Lease as the API server has it now (a quorum read, not a cache).
pub trait LeaseReader: Send + Sync + std::fmt::Debug {
    /// The Lease's name (for errors and logs).
    fn lease(&self) -> &str;
    /// Read it.
    fn read(&self) -> BoxFuture<'static, Read>;
}

/// [`LeaseReader`] with the host's client.
#[derive(Clone)]
pub struct KubeLeaseReader {
    api: Api<Lease>,
    name: String,
}

impl KubeLeaseReader {
    /// Reads Lease `namespace/name` with `client`.
    pub fn new(client: kube::Client, namespace: &str, name: &str) -> Self {
        Self { api: Api::namespaced(client, namespace), name: name.to_string() }
    }
}

impl std::fmt::Debug for KubeLeaseReader {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KubeLeaseReader").field("name", &self.name).finish_non_exhaustive()
    }
}

impl LeaseReader for KubeLeaseReader {
    fn lease(&self) -> &str {
        &self.name
    }

    fn read(&self) -> BoxFuture<'static, Read> {
        let (api, name) = (self.api.clone(), self.name.clone());
        // No resourceVersion: served from etcd with a quorum read, never from a watch cache.
        async move { api.get_opt(&name).await.map(|l| l.as_ref().map(LeaseToken::of)).map_err(|e| ReadFailed(e.to_string())) }.boxed()
    }
}

/// A read, queued or in flight.
struct Flight {
    /// When it was sent; unset while it waits for the read before it (it will be sent later, so
    /// it can serve any write that arrives meanwhile).
    sent: Arc<OnceLock<Instant>>,
    read: Shared<BoxFuture<'static, Read>>,
}

/// Confirms writes of one fence with reads of its Lease, one read shared by the writes waiting
/// when it was sent.
pub(super) struct Confirm {
    reader: Arc<dyn LeaseReader>,
    flight: Mutex<Option<Flight>>,
    metrics: FenceMetrics,
}

impl std::fmt::Debug for Confirm {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Confirm").field("reader", &self.reader).finish_non_exhaustive()
    }
}

impl Confirm {
    pub(super) fn new(reader: Arc<dyn LeaseReader>, metrics: FenceMetrics) -> Self {
        Self { reader, flight: Mutex::new(None), metrics }
    }

    /// Ok if a read of the Lease started after this call shows `expected()` (the acquisition the
    /// fence rests on, asked when the read is back).
    pub(super) async fn held(&self, expected: impl Fn() -> Option<LeaseToken>) -> Result<()> {
        let arrived = Instant::now();
        let read = self.join(arrived);
        let lease = self.reader.lease().to_string();
        let result = match read.await {
            Ok(found) => match expected() {
                Some(mine) if found.as_ref() == Some(&mine) => Ok(()),
                _ => Err(Error::Taken { lease, holder: found.and_then(|t| t.holder) }),
            },
            Err(ReadFailed(reason)) => Err(Error::Unconfirmed { lease, reason }),
        };
        self.metrics.confirmed(&result);
        result
    }

    /// The last read if it is (or will be) sent at or after `arrived` and not answered yet; else
    /// a new one, sent once the read in flight (sent before `arrived`) is answered.
    fn join(&self, arrived: Instant) -> Shared<BoxFuture<'static, Read>> {
        let mut flight = self.flight.lock();
        let mut previous = None;
        if let Some(f) = flight.as_ref().filter(|f| f.read.peek().is_none()) {
            if f.sent.get().is_none_or(|sent| *sent >= arrived) {
                return f.read.clone();
            }
            previous = Some(f.read.clone());
        }
        let sent = Arc::new(OnceLock::new());
        let (reader, metrics, sent_at) = (self.reader.clone(), self.metrics.clone(), sent.clone());
        let read = async move {
            if let Some(previous) = previous {
                // Its answer is no use to the writes waiting here; one read at a time.
                _ = previous.await;
            }
            let started = Instant::now();
            _ = sent_at.set(started);
            let found = reader.read().await;
            metrics.read(started.elapsed());
            found
        }
        .boxed()
        .shared();
        *flight = Some(Flight { sent, read: read.clone() });
        read
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::time::Duration;

    use super::*;
    use crate::fence::{Fence, Window};

    /// A Lease whose holder the test sets; counts reads; each answer takes 10 ms to arrive.
    #[derive(Debug, Default)]
    struct FakeLease {
        holder: Mutex<Option<LeaseToken>>,
        fail: Mutex<Option<String>>,
        reads: AtomicUsize,
    }

    impl LeaseReader for Arc<FakeLease> {
        fn lease(&self) -> &str {
            "wasmloop-shard-podset"
        }

        fn read(&self) -> BoxFuture<'static, Read> {
            let me = self.clone();
            async move {
                // The server answers with the Lease as it is when the read reaches it; the
                // answer takes 10 ms to come back.
                me.reads.fetch_add(1, Ordering::Relaxed);
                let answer = match me.fail.lock().clone() {
                    Some(reason) => Err(ReadFailed(reason)),
                    None => Ok(me.holder.lock().clone()),
                };
                tokio::time::sleep(Duration::from_millis(10)).await;
                answer
            }
            .boxed()
        }
    }

    fn token(holder: &str, transitions: i32) -> LeaseToken {
        LeaseToken { uid: Some("u1".into()), holder: Some(holder.into()), transitions }
    }

    fn confirmed_fence(lease: &Arc<FakeLease>) -> Fence {
        let fence = Fence::closed();
        assert!(fence.confirm_with(Confirm::new(Arc::new(lease.clone()), FenceMetrics::default())));
        assert!(!fence.confirm_with(Confirm::new(Arc::new(lease.clone()), FenceMetrics::default())), "one reader per fence");
        fence
    }

    #[tokio::test(start_paused = true)]
    async fn a_write_goes_out_only_while_the_read_shows_this_acquisition() {
        let lease = Arc::new(FakeLease::default());
        let fence = confirmed_fence(&lease);
        let open = |t: LeaseToken| Window { until: Some(Instant::now() + Duration::from_secs(10)), token: Some(t) };
        // Closed locally: no read at all.
        assert_eq!(fence.confirm().await, Err(Error::NotLeader));
        assert_eq!(lease.reads.load(Ordering::Relaxed), 0);

        *lease.holder.lock() = Some(token("me", 3));
        fence.publish(open(token("me", 3)));
        assert_eq!(fence.confirm().await, Ok(()));

        // The fence is (wrongly) open, but the Lease changed hands: refused.
        *lease.holder.lock() = Some(token("other", 4));
        assert_eq!(fence.confirm().await, Err(Error::Taken { lease: "wasmloop-shard-podset".into(), holder: Some("other".into()) }));
        // Taken and given back is another acquisition: refused too.
        *lease.holder.lock() = Some(token("me", 5));
        assert!(matches!(fence.confirm().await, Err(Error::Taken { .. })));
        // Deleted (and so re-created with another uid), or unreadable: refused.
        *lease.holder.lock() = None;
        assert!(matches!(fence.confirm().await, Err(Error::Taken { holder: None, .. })));
        *lease.fail.lock() = Some("connection refused".into());
        assert!(matches!(fence.confirm().await, Err(Error::Unconfirmed { .. })));
        *lease.fail.lock() = None;
        // Re-acquired: the fence's token follows, and writes go again.
        fence.publish(open(token("me", 5)));
        *lease.holder.lock() = Some(token("me", 5));
        assert_eq!(fence.confirm().await, Ok(()));
        // The local deadline still comes first, and after the read as well.
        tokio::time::advance(Duration::from_secs(10)).await;
        assert!(matches!(fence.confirm().await, Err(Error::Expired(_))));
    }

    #[tokio::test(start_paused = true)]
    async fn one_read_serves_the_writes_waiting_when_it_was_sent_and_no_later_ones() {
        let lease = Arc::new(FakeLease::default());
        let fence = confirmed_fence(&lease);
        *lease.holder.lock() = Some(token("me", 0));
        fence.publish(Window { until: Some(Instant::now() + Duration::from_secs(10)), token: Some(token("me", 0)) });
        // Eight writes of one batch: one read.
        let batch = futures::future::join_all((0..8).map(|_| fence.confirm())).await;
        assert!(batch.iter().all(Result::is_ok), "{batch:?}");
        assert_eq!(lease.reads.load(Ordering::Relaxed), 1);
        // Writes arriving one after another while a read is in flight (as the calls of a batch
        // do on a running clock): they wait for the next read, and share it.
        let first = fence.confirm();
        let others = async {
            let mut calls = Vec::new();
            for _ in 0..7 {
                tokio::time::advance(Duration::from_millis(1)).await;
                calls.push(fence.confirm().boxed());
                // Each one starts (and asks for its read) before the next arrives.
                _ = futures::poll!(calls.last_mut().expect("just pushed"));
            }
            futures::future::join_all(calls).await
        };
        let (first, others) = tokio::join!(first, others);
        assert_eq!(first, Ok(()));
        assert!(others.iter().all(Result::is_ok), "{others:?}");
        assert_eq!(lease.reads.load(Ordering::Relaxed), 3, "the 7 later writes did not share the next read");
        // A write that arrives while a read is in flight does not trust it (it was sent before
        // the write was ready): it waits for a read of its own.
        let first = fence.confirm();
        let late = async {
            tokio::time::sleep(Duration::from_millis(5)).await;
            *lease.holder.lock() = Some(token("other", 1));
            fence.confirm().await
        };
        let (first, late) = tokio::join!(first, late);
        assert_eq!(first, Ok(()), "the first read was answered before the Lease moved");
        assert!(matches!(late, Err(Error::Taken { .. })), "the late write trusted a read sent before it: {late:?}");
        assert_eq!(lease.reads.load(Ordering::Relaxed), 5);
    }
}
