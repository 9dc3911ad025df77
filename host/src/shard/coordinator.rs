//! [`Sharding`]: membership, assignment and the shard Leases of one replica.
//!
//! One task per replica watches every Lease in the host's Lease namespace and keeps a table of
//! what it observed. From it, every half second and on every change:
//! - the **live members** are the holders of `wasmloop-member-*` Leases whose renewals were
//!   observed within their duration (on this replica's clock, as client-go's leader elector
//!   judges a leader, so clock skew between nodes does not matter); this replica always counts;
//! - the **assignment** is [`rendezvous::assign`] of every registered shard over them;
//! - a shard assigned here gets a holder task (kube-lease-manager) that takes its Lease as soon
//!   as it is free or expired and renews it; a shard no longer assigned here has its fence
//!   closed at once, its running reconciles are let finish, then its Lease is released;
//! - each observed renewal of a shard Lease held by this replica opens that shard's fence until
//!   `observed + duration - grace/2`; the first one after the fence was closed is a takeover,
//!   and the shard's controller queues the shard's keys from its cache.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::coordination::v1::Lease;
use kube::api::Api;
use kube::runtime::watcher::{self, watcher};
use kube_lease_manager::{LeaseManagerBuilder, LeaseParams};
use parking_lot::Mutex;
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;
use tokio::sync::{Notify, oneshot, watch};
use tokio::task::JoinHandle;
use tokio::time::Instant;
use tracing::{debug, info, warn};

use super::{Ownership, lease_name, rendezvous, shard_name};

/// The prefix of the Leases that say which replicas are live.
pub const MEMBER_LEASE_PREFIX: &str = "wasmloop-member-";
/// The prefix of the Leases that own shards.
pub const SHARD_LEASE_PREFIX: &str = "wasmloop-shard-";

/// Errors starting sharding.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("lease duration {duration:?} must be longer than the grace {grace:?}")]
    Durations { duration: Duration, grace: Duration },
    #[error("taking this replica's member Lease {lease}: {source}")]
    Member { lease: String, source: kube_lease_manager::LeaseManagerError },
}

pub type Result<T, E = Error> = std::result::Result<T, E>;

/// How a replica takes part.
#[derive(Clone, Debug)]
pub struct ShardConfig {
    /// Namespace of the member and shard Leases.
    pub namespace: String,
    /// This replica's identity (the Leases' holder).
    pub identity: String,
    /// Lease duration: how long a dead replica keeps its shards.
    pub duration: Duration,
    /// Renew this long before a Lease expires.
    pub grace: Duration,
    /// How long a shard's running reconciles may take to finish before its Lease is released.
    pub release_timeout: Duration,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ShardLabels {
    plugin: String,
    shard: String,
}

/// This replica's part in sharding. Cheap to clone.
#[derive(Clone)]
pub struct Sharding {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for Sharding {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Sharding").field("identity", &self.inner.config.identity).finish_non_exhaustive()
    }
}

struct Inner {
    client: kube::Client,
    config: ShardConfig,
    plugins: Mutex<BTreeMap<String, Arc<Ownership>>>,
    /// A plugin was registered or removed.
    changed: Notify,
    /// The live members, as last computed.
    members: watch::Sender<BTreeSet<String>>,
    stop: watch::Sender<bool>,
    task: Mutex<Option<JoinHandle<()>>>,
    owned: Family<ShardLabels, Gauge>,
    member_count: Gauge,
}

impl Sharding {
    /// Take this replica's member Lease and start following the others'. Metrics go to `registry`.
    pub async fn start(client: kube::Client, config: ShardConfig, registry: &mut Registry) -> Result<Self> {
        if config.grace.is_zero() || config.grace >= config.duration {
            return Err(Error::Durations { duration: config.duration, grace: config.grace });
        }
        let lease = member_lease_name(&config.identity);
        let member = LeaseManagerBuilder::new(client.clone(), &lease)
            .with_namespace(&config.namespace)
            .with_parameters(lease_params(&config))
            .build()
            .await
            .map_err(|source| Error::Member { lease: lease.clone(), source })?;
        let owned = Family::<ShardLabels, Gauge>::default();
        let member_count = Gauge::default();
        registry.register("wasmloop_shard_owned", "1 for each shard this replica owns (--shard-mode plugin)", owned.clone());
        registry.register("wasmloop_shard_members", "Live replicas this replica sees (--shard-mode plugin)", member_count.clone());
        let inner = Arc::new(Inner {
            client,
            members: watch::Sender::new(BTreeSet::from([config.identity.clone()])),
            config,
            plugins: Mutex::new(BTreeMap::new()),
            changed: Notify::new(),
            stop: watch::Sender::new(false),
            task: Mutex::new(None),
            owned,
            member_count,
        });
        let (member_rx, member_task) = member.watch().await;
        let task = tokio::spawn(inner.clone().run(member_rx, member_task));
        *inner.task.lock() = Some(task);
        info!(identity = %inner.config.identity, %lease, "sharding: member Lease taken; following the other replicas");
        Ok(Self { inner })
    }

    /// The shards of `plugin` (`count` key-space shards; 1 = the plugin is one shard). A plugin
    /// registered again with the same count keeps its [`Ownership`].
    pub fn register(&self, plugin: &str, count: usize) -> Arc<Ownership> {
        let ownership = {
            let mut plugins = self.inner.plugins.lock();
            match plugins.get(plugin) {
                Some(o) if o.count() == count.max(1) => o.clone(),
                _ => {
                    let o = Arc::new(Ownership::new(plugin, count));
                    plugins.insert(plugin.to_string(), o.clone());
                    o
                }
            }
        };
        self.inner.changed.notify_one();
        ownership
    }

    /// `plugin` is gone: its shards are released.
    pub fn unregister(&self, plugin: &str) {
        self.inner.plugins.lock().remove(plugin);
        self.inner.changed.notify_one();
    }

    /// Whether this replica is the one that speaks for `name` (e.g. reports a plugin
    /// ConfigMap's status): its first choice by rendezvous hashing over the live members.
    pub fn speaks_for(&self, name: &str) -> bool {
        let members = self.inner.members.borrow();
        let first = members.iter().max_by_key(|m| (rendezvous::stable_hash(&[m, name]), *m));
        first.is_some_and(|m| *m == self.inner.config.identity)
    }

    /// The live members this replica sees.
    pub fn members(&self) -> BTreeSet<String> {
        self.inner.members.borrow().clone()
    }

    /// Close every fence, release every Lease (shards first, then membership) and stop.
    pub async fn shutdown(self) {
        self.inner.stop.send_replace(true);
        let task = self.inner.task.lock().take();
        if let Some(task) = task
            && tokio::time::timeout(Duration::from_secs(10), task).await.is_err()
        {
            warn!("sharding: releasing the Leases did not finish in time");
        }
    }
}

/// The member Lease of `identity` (made a valid object name).
pub fn member_lease_name(identity: &str) -> String {
    let clean: String =
        identity.to_ascii_lowercase().chars().map(|c| if c.is_ascii_alphanumeric() || c == '-' || c == '.' { c } else { '-' }).collect();
    let mut name = format!("{MEMBER_LEASE_PREFIX}{}", clean.trim_matches(['-', '.']));
    name.truncate(253);
    name
}

fn lease_params(config: &ShardConfig) -> LeaseParams {
    LeaseParams::new(config.identity.clone(), config.duration.as_secs().max(1), config.grace.as_secs().max(1))
}

/// What was observed of one Lease.
#[derive(Debug)]
struct Seen {
    holder: Option<String>,
    renew: Option<String>,
    /// Until when its holder counts as live, on this replica's clock.
    alive_until: Instant,
}

/// A shard this replica holds (or is taking): dropping `stop` releases its Lease.
struct Held {
    stop: oneshot::Sender<()>,
    task: JoinHandle<()>,
}

impl Inner {
    async fn run(
        self: Arc<Self>,
        member_rx: watch::Receiver<bool>,
        member_task: JoinHandle<kube_lease_manager::Result<kube_lease_manager::LeaseManager>>,
    ) {
        let api: Api<Lease> = Api::namespaced(self.client.clone(), &self.config.namespace);
        let mut events = watcher(api, watcher::Config::default()).boxed();
        let mut stop = self.stop.subscribe();
        let mut table: HashMap<String, Seen> = HashMap::new();
        let mut held: BTreeMap<String, Held> = BTreeMap::new();
        let mut releasing: BTreeMap<String, JoinHandle<()>> = BTreeMap::new();
        let mut tick = tokio::time::interval(Duration::from_millis(500));
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                _ = stop.wait_for(|s| *s) => break,
                event = events.next() => match event {
                    Some(Ok(watcher::Event::Apply(l) | watcher::Event::InitApply(l))) => self.observe(&mut table, &l, &held),
                    Some(Ok(watcher::Event::Delete(l))) => {
                        let name = l.metadata.name.clone().unwrap_or_default();
                        table.remove(&name);
                        self.observe_gone(&name);
                    }
                    Some(Ok(_)) => continue,
                    Some(Err(e)) => { debug!(error = %e, "sharding: watching Leases"); continue; }
                    None => break,
                },
                _ = tick.tick() => {}
                () = self.changed.notified() => {}
            }
            releasing.retain(|_, task| !task.is_finished());
            self.rebalance(&table, &mut held, &mut releasing);
        }
        // Stop: close every fence, then release shards and membership.
        for o in self.plugins.lock().values() {
            (0..o.count()).for_each(|i| o.fence(i).close());
        }
        for (_, h) in std::mem::take(&mut held) {
            drop(h.stop);
            let _ = tokio::time::timeout(Duration::from_secs(5), h.task).await;
        }
        for (_, task) in releasing {
            let _ = tokio::time::timeout(Duration::from_secs(5), task).await;
        }
        drop(member_rx);
        match tokio::time::timeout(Duration::from_secs(5), member_task).await {
            Ok(Ok(Ok(_))) => info!("sharding: member Lease released"),
            Ok(Ok(Err(e))) => warn!(error = %e, "sharding: releasing the member Lease failed"),
            _ => warn!("sharding: releasing the member Lease did not finish in time"),
        }
    }

    /// Record a Lease; a shard Lease also opens or closes that shard's fence.
    fn observe(&self, table: &mut HashMap<String, Seen>, lease: &Lease, held: &BTreeMap<String, Held>) {
        let name = lease.metadata.name.clone().unwrap_or_default();
        let spec = lease.spec.clone().unwrap_or_default();
        let duration = spec.lease_duration_seconds.map_or(self.config.duration, |s| Duration::from_secs(s.max(0) as u64));
        let renew = spec.renew_time.as_ref().map(|t| t.0.to_string());
        let now = Instant::now();
        let alive_until = match table.get(&name) {
            // A renewal observed now: live for a lease duration from here.
            Some(prev) if prev.renew == renew && prev.holder == spec.holder_identity => prev.alive_until,
            Some(_) => now + duration,
            // First sight: trust the timestamp once, so a dead replica's old Lease does not
            // count as live for a whole duration after this replica starts.
            None => {
                let age = spec.renew_time.as_ref().map_or(duration, |t| {
                    let age = k8s_openapi::jiff::Timestamp::now().duration_since(t.0);
                    Duration::try_from(age).unwrap_or(Duration::ZERO)
                });
                now + duration.saturating_sub(age)
            }
        };
        let renewed = table.get(&name).is_none_or(|p| p.renew != renew);
        table.insert(name.clone(), Seen { holder: spec.holder_identity.clone(), renew, alive_until });
        if !name.starts_with(SHARD_LEASE_PREFIX) {
            return;
        }
        let Some((ownership, index, shard)) = self.find_shard(&name) else { return };
        let fence = ownership.fence(index);
        let mine = spec.holder_identity.as_deref() == Some(self.config.identity.as_str());
        if mine && held.contains_key(&shard) {
            if renewed {
                let was_open = fence.check().is_ok();
                fence.open_until(now + duration.saturating_sub(self.config.grace / 2));
                if !was_open {
                    info!(%shard, "sharding: took over the shard");
                    self.owned_gauge(&ownership, &shard).set(1);
                    ownership.taken_over(index);
                }
            }
        } else {
            if fence.check().is_ok() {
                info!(%shard, holder = ?spec.holder_identity, "sharding: the shard's Lease is not ours; fenced");
            }
            fence.close();
            self.owned_gauge(&ownership, &shard).set(0);
        }
    }

    /// A shard Lease was deleted: nobody may write for it until it is taken again.
    fn observe_gone(&self, name: &str) {
        if let Some((ownership, index, shard)) = self.find_shard(name) {
            ownership.fence(index).close();
            self.owned_gauge(&ownership, &shard).set(0);
        }
    }

    fn owned_gauge(&self, ownership: &Ownership, shard: &str) -> Gauge {
        self.owned.get_or_create(&ShardLabels { plugin: ownership.plugin().to_string(), shard: shard.to_string() }).clone()
    }

    /// The registered shard whose Lease is `lease`.
    fn find_shard(&self, lease: &str) -> Option<(Arc<Ownership>, usize, String)> {
        self.plugins
            .lock()
            .values()
            .find_map(|o| o.shard_names().into_iter().enumerate().find(|(_, s)| lease_name(s) == lease).map(|(i, s)| (o.clone(), i, s)))
    }

    /// The live members: holders of member Leases renewed within their duration, and this replica.
    fn live_members(&self, table: &HashMap<String, Seen>) -> BTreeSet<String> {
        let now = Instant::now();
        let mut members: BTreeSet<String> = table
            .iter()
            .filter(|(name, seen)| name.starts_with(MEMBER_LEASE_PREFIX) && seen.alive_until > now)
            .filter_map(|(_, seen)| seen.holder.clone())
            .collect();
        members.insert(self.config.identity.clone());
        members
    }

    /// Take the shards assigned here and let go of the others.
    fn rebalance(
        self: &Arc<Self>,
        table: &HashMap<String, Seen>,
        held: &mut BTreeMap<String, Held>,
        releasing: &mut BTreeMap<String, JoinHandle<()>>,
    ) {
        let members = self.live_members(table);
        let changed = self.members.send_if_modified(|m| {
            let changed = *m != members;
            if changed {
                m.clone_from(&members);
            }
            changed
        });
        if changed {
            info!(members = ?members, "sharding: live replicas changed");
            self.member_count.set(members.len() as i64);
        }
        let plugins: Vec<Arc<Ownership>> = self.plugins.lock().values().cloned().collect();
        let shards: BTreeMap<String, (Arc<Ownership>, usize)> =
            plugins.iter().flat_map(|o| o.shard_names().into_iter().enumerate().map(|(i, s)| (s, (o.clone(), i)))).collect();
        let names: BTreeSet<String> = shards.keys().cloned().collect();
        let assignment = rendezvous::assign(&names, &members);
        let me = self.config.identity.as_str();
        for (shard, owner) in &assignment {
            if *owner == me && !held.contains_key(shard) && !releasing.contains_key(shard) {
                debug!(%shard, "sharding: assigned here; taking its Lease");
                held.insert(shard.clone(), self.hold(shard));
            }
        }
        let unassigned: Vec<String> = held.keys().filter(|s| assignment.get(*s).is_none_or(|o| *o != me)).cloned().collect();
        for shard in unassigned {
            let Some(h) = held.remove(&shard) else { continue };
            let found = shards.get(&shard).cloned();
            if let Some((o, i)) = &found {
                o.fence(*i).close();
                self.owned_gauge(o, &shard).set(0);
            }
            info!(%shard, "sharding: no longer assigned here; releasing after its running reconciles");
            let timeout = self.config.release_timeout;
            releasing.insert(
                shard,
                tokio::spawn(async move {
                    if let Some((o, i)) = found {
                        let deadline = Instant::now() + timeout;
                        while !o.idle(i) && Instant::now() < deadline {
                            tokio::time::sleep(Duration::from_millis(20)).await;
                        }
                    }
                    drop(h.stop);
                    let _ = tokio::time::timeout(Duration::from_secs(5), h.task).await;
                }),
            );
        }
    }

    /// A task that takes and renews `shard`'s Lease until told to stop, then releases it.
    fn hold(&self, shard: &str) -> Held {
        let (stop, mut stopped) = oneshot::channel::<()>();
        let (client, namespace, lease, params) =
            (self.client.clone(), self.config.namespace.clone(), lease_name(shard), lease_params(&self.config));
        let shard = shard.to_string();
        let task = tokio::spawn(async move {
            let manager = loop {
                let built =
                    LeaseManagerBuilder::new(client.clone(), &lease).with_namespace(&namespace).with_parameters(params.clone()).build();
                tokio::select! {
                    _ = &mut stopped => return,
                    built = built => match built {
                        Ok(m) => break m,
                        Err(e) => warn!(%shard, error = %e, "sharding: setting up the shard's Lease; retrying"),
                    },
                }
                tokio::select! {
                    _ = &mut stopped => return,
                    () = tokio::time::sleep(Duration::from_secs(1)) => {}
                }
            };
            let (leading, task) = manager.watch().await;
            let _ = stopped.await;
            // Dropping the receiver makes the Lease task release the Lease and return.
            drop(leading);
            match tokio::time::timeout(Duration::from_secs(5), task).await {
                Ok(Ok(Ok(_))) => debug!(%shard, "sharding: shard Lease released"),
                Ok(Ok(Err(e))) => warn!(%shard, error = %e, "sharding: releasing the shard's Lease failed"),
                _ => warn!(%shard, "sharding: releasing the shard's Lease did not finish in time"),
            }
        });
        Held { stop, task }
    }
}

/// Every shard name of `plugins` (for tests and tools).
pub fn shard_names(plugins: &[(&str, usize)]) -> BTreeSet<String> {
    plugins.iter().flat_map(|(p, n)| (0..(*n).max(1)).map(move |i| shard_name(p, i, (*n).max(1)))).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn member_lease_names_are_valid_object_names() {
        assert_eq!(member_lease_name("wasmloop-7d9c-xk2"), "wasmloop-member-wasmloop-7d9c-xk2");
        assert_eq!(member_lease_name("Host_1:42"), "wasmloop-member-host-1-42");
        assert!(member_lease_name(&"x".repeat(400)).len() <= 253);
    }

    #[test]
    fn shard_names_cover_every_shard() {
        let names = shard_names(&[("podset", 3), ("welcome", 1)]);
        assert_eq!(names.into_iter().collect::<Vec<_>>(), ["podset/0-of-3", "podset/1-of-3", "podset/2-of-3", "welcome"]);
    }
}
