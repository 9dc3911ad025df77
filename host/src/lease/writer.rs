//! Taking, renewing and releasing a Lease with optimistic concurrency, as client-go's `LeaseLock`:
//! every write is a `replace` carrying the resourceVersion this replica last saw, so of two
//! replicas that both see a Lease free, exactly one wins and the other gets 409 Conflict.
//!
//! Deciding *when* (free, expired on this replica's clock, time to renew) is the caller's job
//! ([`super::table`]); this module only writes, and reads afresh (quorum reads, never a cache)
//! when the caller must not decide on what it last observed.

use std::time::Duration;

use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, ListParams, ObjectMeta, PostParams};

/// A Lease write (or read) that failed.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// Someone else wrote the Lease since this replica last saw it.
    #[error("Lease {0} changed since it was read (another replica wrote it)")]
    Conflict(String),
    /// No answer in time (the write may still land).
    #[error("Lease {0}: the write timed out")]
    TimedOut(String),
    /// The API server refused, or could not be reached.
    #[error("Lease {lease}: {source}")]
    Api {
        /// The Lease (`*`: the list of all of them).
        lease: String,
        /// The API server's (or the transport's) error.
        source: kube::Error,
    },
}

/// A result whose error is a Lease write's.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// An annotation a write sets on the Lease (a shard's object count, a member's way of splitting).
pub type Stamp = Option<(&'static str, String)>;

/// Set the `stamp` annotation (nothing when `None`).
fn publish(metadata: &mut ObjectMeta, stamp: Stamp) {
    if let Some((key, value)) = stamp {
        metadata.annotations.get_or_insert_with(Default::default).insert(key.to_string(), value);
    }
}

/// Writes (and reads afresh) the Leases of one namespace as `identity`.
#[derive(Clone)]
pub struct LeaseWriter {
    api: Api<Lease>,
    identity: String,
    duration: Duration,
}

impl LeaseWriter {
    /// Leases in `namespace`, held as `identity` for `duration` each.
    pub fn new(client: kube::Client, namespace: &str, identity: &str, duration: Duration) -> Self {
        Self { api: Api::namespaced(client, namespace), identity: identity.to_string(), duration }
    }

    /// Take `name`: create it, or take `seen` over (the caller judged it free or expired),
    /// setting the `stamp` annotation.
    pub async fn acquire(&self, name: &str, seen: Option<&Lease>, stamp: Stamp) -> Result<Lease> {
        let now = MicroTime(Timestamp::now());
        let Some(seen) = seen else {
            let mut metadata = ObjectMeta { name: Some(name.to_string()), ..ObjectMeta::default() };
            publish(&mut metadata, stamp);
            let lease = Lease {
                metadata,
                spec: Some(LeaseSpec {
                    holder_identity: Some(self.identity.clone()),
                    acquire_time: Some(now.clone()),
                    renew_time: Some(now),
                    lease_duration_seconds: Some(self.duration_secs()),
                    lease_transitions: Some(0),
                    ..LeaseSpec::default()
                }),
            };
            return self.api.create(&PostParams::default(), &lease).await.map_err(|e| self.error(name, e));
        };
        let mut lease = seen.clone();
        publish(&mut lease.metadata, stamp);
        let spec = lease.spec.get_or_insert_with(LeaseSpec::default);
        if spec.holder_identity.as_deref() != Some(self.identity.as_str()) {
            spec.lease_transitions = Some(spec.lease_transitions.unwrap_or(0) + 1);
            spec.acquire_time = Some(now.clone());
        }
        spec.holder_identity = Some(self.identity.clone());
        spec.renew_time = Some(now);
        spec.lease_duration_seconds = Some(self.duration_secs());
        self.replace(lease).await
    }

    /// Renew `seen`, which this replica holds, setting the `stamp` annotation.
    pub async fn renew(&self, seen: &Lease, stamp: Stamp) -> Result<Lease> {
        let mut lease = seen.clone();
        publish(&mut lease.metadata, stamp);
        let spec = lease.spec.get_or_insert_with(LeaseSpec::default);
        spec.renew_time = Some(MicroTime(Timestamp::now()));
        spec.lease_duration_seconds = Some(self.duration_secs());
        self.replace(lease).await
    }

    /// Let go of `seen`: no holder, so the next replica takes it at once.
    pub async fn release(&self, seen: &Lease) -> Result<Lease> {
        let mut lease = seen.clone();
        let spec = lease.spec.get_or_insert_with(LeaseSpec::default);
        spec.holder_identity = None;
        spec.acquire_time = None;
        spec.renew_time = Some(MicroTime(Timestamp::now()));
        self.replace(lease).await
    }

    /// Lease `name` as the API server has it now (`None`: there is none).
    pub async fn read(&self, name: &str) -> Result<Option<Lease>> {
        self.api.get_opt(name).await.map_err(|e| self.error(name, e))
    }

    /// Every Lease of the namespace as the API server has them now.
    pub async fn list(&self) -> Result<Vec<Lease>> {
        Ok(self.api.list(&ListParams::default()).await.map_err(|e| self.error("*", e))?.items)
    }

    fn duration_secs(&self) -> i32 {
        i32::try_from(self.duration.as_secs().max(1)).unwrap_or(i32::MAX)
    }

    /// Replace with the resourceVersion of what was seen: 409 if anyone wrote it since.
    async fn replace(&self, lease: Lease) -> Result<Lease> {
        let name = lease.metadata.name.clone().unwrap_or_default();
        self.api.replace(&name, &PostParams::default(), &lease).await.map_err(|e| self.error(&name, e))
    }

    fn error(&self, lease: &str, source: kube::Error) -> Error {
        match &source {
            kube::Error::Api(s) if s.code == 409 => Error::Conflict(lease.to_string()),
            _ => Error::Api { lease: lease.to_string(), source },
        }
    }
}
