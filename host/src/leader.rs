//! Leader election (`wasmloop run --leader-elect`): one replica reconciles, the others stand by
//! warm (informers synced, plugins loaded), their writes held at the [`Fence`].
//!
//! The Lease is kube-lease-manager's (its renewals and releases); the fence opens only while a
//! renewal this replica observed is fresh (renewal + duration − grace/2, [`Fence::track`]), so a
//! replica that stops renewing stops writing before another can take the Lease. Leadership lost
//! closes the fence at once: nothing more goes out, even from reconciles still running.

use std::time::Duration;

use kube_lease_manager::{LeaseManagerBuilder, LeaseParams};
use tokio::sync::watch;
use tokio::task::JoinHandle;
use tracing::{info, warn};

use crate::fence::Fence;

/// Why leader election could not start.
#[derive(Debug, thiserror::Error)]
#[error("setting up leader election on Lease {namespace}/{name}: {source}")]
pub struct Error {
    namespace: String,
    name: String,
    #[source]
    source: kube_lease_manager::LeaseManagerError,
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
    leader: watch::Receiver<bool>,
    lease_task: JoinHandle<Result<kube_lease_manager::LeaseManager, kube_lease_manager::LeaseManagerError>>,
    tracker: JoinHandle<()>,
}

impl Election {
    /// Join the election for `config`'s Lease; `fence` opens while this replica leads.
    pub async fn join(client: kube::Client, fence: Fence, config: LeaseConfig) -> Result<Self, Error> {
        let lease = LeaseManagerBuilder::new(client.clone(), &config.name)
            .with_namespace(&config.namespace)
            .with_parameters(LeaseParams::new(config.identity.clone(), config.duration.as_secs(), config.grace.as_secs()))
            .build()
            .await
            .map_err(|source| Error { namespace: config.namespace.clone(), name: config.name.clone(), source })?;
        let (leader, lease_task) = lease.watch().await;
        let tracker = fence.track(client, &config.namespace, &config.name, config.identity.clone(), config.duration, config.grace / 2);
        Ok(Self { identity: config.identity, fence, leader, lease_task, tracker })
    }

    /// Follow leadership until `stop`: `leading(true)` when this replica becomes leader,
    /// `leading(false)` when it loses the Lease (the fence closes then) or stops.
    pub async fn follow(&mut self, stop: &watch::Receiver<bool>, leading: impl Fn(bool)) {
        let identity = self.identity.clone();
        loop {
            let mut s = stop.clone();
            tokio::select! {
                _ = s.wait_for(|s| *s) => break,
                changed = self.leader.wait_for(|l| *l) => if changed.is_err() { warn!("leader election stopped"); break; },
            }
            info!(%identity, "became leader; reconciling");
            leading(true);
            let mut s = stop.clone();
            let lost = tokio::select! {
                _ = s.wait_for(|s| *s) => false,
                _ = self.leader.wait_for(|l| !*l) => true,
            };
            leading(false);
            if !lost {
                break;
            }
            // Nothing more goes out, even from reconciles still running; back to standby.
            self.fence.close();
            warn!(%identity, "lost leadership; standing by");
        }
    }

    /// Leave the election: close the fence and release the Lease (within `timeout`).
    pub async fn leave(self, timeout: Duration) {
        self.tracker.abort();
        self.fence.close();
        // Dropping the receiver makes the lease task release the Lease and return.
        drop(self.leader);
        match tokio::time::timeout(timeout, self.lease_task).await {
            Ok(Ok(Ok(_))) => info!("lease released"),
            Ok(Ok(Err(e))) => warn!(error = %e, "releasing the lease failed"),
            _ => warn!("releasing the lease did not finish in time"),
        }
    }
}
