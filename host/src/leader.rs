//! Leader election (`wasmloop run --leader-elect`): one replica reconciles, the others stand by
//! warm (informers synced, plugins loaded), their writes held at the [`Fence`].
//!
//! One task per replica follows the Lease (a watch, and a tick) in a [`LeaseTable`] and writes
//! it with [`LeaseWriter`] (optimistic concurrency: of two replicas taking it, one wins):
//! - the holder renews it `grace` before it expires on its own clock, and at once when its fence
//!   is closed (after a pause, or a renewal that failed);
//! - a standby takes it when it is free (released by a leader that stopped), or when its
//!   holder's renewals stopped for a whole lease duration **on the standby's own clock** and a
//!   fresh read of the Lease confirms no renewal since (so wall-clock skew between nodes does
//!   not matter, and a standby that was paused does not take it on its stale view);
//! - the fence is kept by a [`FenceKeeper`] from this replica's own takes and renewals: open
//!   until `sent + duration − grace/2` after one succeeds, counted from when it was sent; the
//!   Lease observed held by another closes it at once. Leadership *is* the fence being open:
//!   a leader that loses the Lease (or cannot renew it in time) stops writing, even from
//!   reconciles still running, and stands by again, warm.

use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::coordination::v1::Lease;
use kube::api::Api;
use kube::runtime::watcher::{self, watcher};
use tokio::sync::watch;
use tokio::task::JoinHandle;
use tokio::time::Instant;
use tracing::{debug, info, warn};

use crate::fence::{Fence, FenceKeeper, FenceMetrics, KeeperConfig};
use crate::lease::{LeaseTable, LeaseWriter, writer};

/// Why leader election could not start.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The lease duration is less than twice the grace.
    #[error("leader election on Lease {lease}: the lease duration {duration:?} must be at least twice the grace {grace:?}")]
    Durations {
        /// The Lease.
        lease: String,
        /// The lease duration asked for.
        duration: Duration,
        /// The grace asked for.
        grace: Duration,
    },
    /// The fence given does not follow a Lease ([`Fence::open`]).
    #[error("leader election on Lease {0}: the write fence must be one a Lease keeps (Fence::closed)")]
    OpenFence(String),
}

/// The Lease and how it is held.
#[derive(Clone, Debug)]
pub struct LeaseConfig {
    /// The Lease's namespace.
    pub namespace: String,
    /// The Lease's name.
    pub name: String,
    /// This replica's identity (the Lease's holder while it leads).
    pub identity: String,
    /// How long a renewal is valid.
    pub duration: Duration,
    /// The margin kept before a renewal expires (renewals start this long before).
    pub grace: Duration,
}

/// A replica taking part in the election for one Lease.
pub struct Election {
    identity: String,
    fence: Fence,
    stop: watch::Sender<bool>,
    task: JoinHandle<()>,
}

impl Election {
    /// Join the election for `config`'s Lease; `fence` opens while this replica leads. The
    /// fence's openings and closings are counted in `metrics`.
    pub async fn join(client: kube::Client, fence: Fence, config: LeaseConfig, metrics: FenceMetrics) -> Result<Self, Error> {
        let lease = format!("{}/{}", config.namespace, config.name);
        if config.grace.is_zero() || config.grace * 2 > config.duration {
            return Err(Error::Durations { lease, duration: config.duration, grace: config.grace });
        }
        if !fence.is_kept() {
            return Err(Error::OpenFence(lease));
        }
        let keeping = KeeperConfig {
            validity: config.duration.saturating_sub(config.grace / 2),
            metrics,
            reads: Some((client.clone(), config.namespace.clone())),
        };
        let keeper = FenceKeeper::new(fence.clone(), &config.name, &keeping);
        let writer = LeaseWriter::new(client.clone(), &config.namespace, &config.identity, config.duration);
        let (stop, stopped) = watch::channel(false);
        let follower = Follower { client, writer, keeper, table: LeaseTable::new(config.duration), config: config.clone() };
        let task = tokio::spawn(follower.run(stopped));
        Ok(Self { identity: config.identity, fence, stop, task })
    }

    /// Follow leadership until `stop`: `leading(true)` when this replica becomes leader (its
    /// fence opens), `leading(false)` when it loses the Lease (its fence closes) or stops.
    pub async fn follow(&mut self, stop: &watch::Receiver<bool>, leading: impl Fn(bool)) {
        let identity = self.identity.clone();
        loop {
            let mut s = stop.clone();
            tokio::select! {
                _ = s.wait_for(|s| *s) => break,
                () = self.fence.wait_open() => {}
            }
            info!(%identity, "became leader; reconciling");
            leading(true);
            let mut s = stop.clone();
            let lost = tokio::select! {
                _ = s.wait_for(|s| *s) => false,
                () = self.fence.wait_closed() => true,
            };
            leading(false);
            if !lost {
                break;
            }
            // Nothing more goes out, even from reconciles still running; back to standby.
            warn!(%identity, "lost leadership (the fence closed); standing by");
        }
    }

    /// Leave the election: close the fence and release the Lease (within `timeout`).
    pub async fn leave(self, timeout: Duration) {
        self.stop.send_replace(true);
        if tokio::time::timeout(timeout, self.task).await.is_err() {
            warn!("releasing the lease did not finish in time");
        }
    }
}

/// The task that follows and writes the Lease.
struct Follower {
    client: kube::Client,
    writer: LeaseWriter,
    keeper: Arc<FenceKeeper>,
    table: LeaseTable,
    config: LeaseConfig,
}

impl Follower {
    async fn run(mut self, mut stop: watch::Receiver<bool>) {
        let api: Api<Lease> = Api::namespaced(self.client.clone(), &self.config.namespace);
        let selector = watcher::Config::default().fields(&format!("metadata.name={}", self.config.name));
        let mut events = watcher(api, selector).boxed();
        let mut synced = false;
        let mut tick = tokio::time::interval(Duration::from_millis(500));
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            let wake = self.next_wake();
            tokio::select! {
                _ = stop.wait_for(|s| *s) => break,
                event = events.next() => match event {
                    Some(Ok(watcher::Event::Apply(l) | watcher::Event::InitApply(l))) => self.observe(&l),
                    Some(Ok(watcher::Event::Delete(l))) => {
                        self.table.remove(l.metadata.name.as_deref().unwrap_or_default());
                        self.keeper.lost();
                    }
                    Some(Ok(watcher::Event::InitDone)) => synced = true,
                    Some(Ok(watcher::Event::Init)) => continue,
                    Some(Err(e)) => { debug!(error = %e, "leader election: watching the Lease"); continue; }
                    None => break,
                },
                _ = tick.tick() => {}
                () = tokio::time::sleep_until(wake) => {}
            }
            // Nothing is decided before the first list: the Lease must be known.
            if synced {
                self.keeper.tick();
                self.step().await;
            }
        }
        self.leave().await;
    }

    /// Record the Lease (unless older than what was seen); held by another, it closes the fence.
    fn observe(&mut self, lease: &Lease) {
        if !self.table.observe(lease) {
            return;
        }
        let holder = lease.spec.as_ref().and_then(|s| s.holder_identity.as_deref());
        if holder != Some(self.config.identity.as_str()) {
            self.keeper.lost();
        }
    }

    /// When to look again: the renewal due time of a held Lease, else when its holder expires;
    /// not sooner than 100 ms from now (a write that keeps failing is not a busy loop).
    fn next_wake(&self) -> Instant {
        let now = Instant::now();
        let Some(seen) = self.table.get(&self.config.name) else { return now + Duration::from_secs(3600) };
        let wake = if seen.holder.as_deref() == Some(self.config.identity.as_str()) {
            seen.alive_until.checked_sub(self.config.grace).unwrap_or(seen.alive_until)
        } else {
            seen.alive_until
        };
        wake.max(now + Duration::from_millis(100))
    }

    /// Read the Lease afresh (after a conflict, or before taking it from a holder that looks
    /// gone): what this replica observed of it may be stale.
    async fn reread(&mut self) {
        match self.writer.read(&self.config.name).await {
            Ok(found) => {
                self.table.reread(found.as_slice());
                let holder = self.table.get(&self.config.name).and_then(|o| o.holder.as_deref());
                if holder != Some(self.config.identity.as_str()) {
                    self.keeper.lost();
                }
            }
            Err(e) => warn!(error = %e, "leader election: reading the Lease again failed; not taking it meanwhile"),
        }
    }

    /// Renew the Lease when due, or take it when it is free or confirmed expired.
    async fn step(&mut self) {
        let name = self.config.name.clone();
        let me = self.config.identity.clone();
        let me = me.as_str();
        if !self.table.suspects(me, Instant::now()).is_empty() {
            // Its holder looks gone on this replica's clock: read it afresh before taking it.
            self.reread().await;
        }
        let seen = self.table.get(&name).cloned();
        let now = Instant::now();
        let write = match &seen {
            None => Some(None),
            Some(seen) if seen.holder.as_deref() == Some(me) => {
                let due = !self.keeper.is_open() || seen.alive_until.saturating_duration_since(now) <= self.config.grace;
                due.then_some(Some(seen))
            }
            Some(seen) => self.table.takeable(&name, now).then_some(Some(seen)),
        };
        let Some(seen) = write else { return };
        let holding = seen.is_some_and(|s| s.holder.as_deref() == Some(me));
        // Read from the clock right before the request leaves: the window counts from here.
        let renewal = self.keeper.sent();
        let call = async {
            match seen {
                Some(seen) if holding => self.writer.renew(&seen.lease, None).await,
                _ => self.writer.acquire(&name, seen.map(|s| &s.lease), None).await,
            }
        };
        let result = tokio::time::timeout(self.config.grace, call).await.unwrap_or(Err(writer::Error::TimedOut(name)));
        match result {
            Ok(lease) => {
                self.keeper.renewed(renewal, &lease);
                self.table.observe(&lease);
            }
            Err(writer::Error::Conflict(lease)) => {
                self.keeper.conflicted(renewal);
                debug!(%lease, "leader election: another replica wrote the Lease first; reading it again");
                self.reread().await;
            }
            Err(e) => {
                self.keeper.failed(renewal);
                warn!(error = %e, "leader election: writing the Lease");
            }
        }
    }

    /// Stopping: close the fence, then release the Lease if this replica holds it.
    async fn leave(self) {
        self.keeper.lost();
        let Some(seen) = self.table.get(&self.config.name) else { return };
        if seen.holder.as_deref() != Some(self.config.identity.as_str()) {
            return;
        }
        match self.writer.release(&seen.lease).await {
            Ok(_) => info!("lease released"),
            Err(e) => warn!(error = %e, "releasing the lease failed"),
        }
    }
}
