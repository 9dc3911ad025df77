//! [`Sharding`]: membership, assignment and the shard Leases of one replica.
//!
//! One task per replica watches every Lease in the host's Lease namespace and keeps a table of
//! what it observed. From it, every half second and on every change:
//! - the **live members** are the holders of `wasmloop-member-*` Leases whose renewals were
//!   observed within their duration (on this replica's clock, as client-go's leader elector
//!   judges a leader, so clock skew between nodes does not matter); this replica always counts;
//! - the **assignment** is [`rendezvous::assign_weighted`] of every registered shard over them,
//!   each shard weighing the object count its owner published on its Lease ([`weight`]), a
//!   shard staying with the live replica holding its Lease while that one is within the slack;
//! - this replica's member Lease and the Leases of the shards assigned here are taken as soon
//!   as they are free, or expired on this replica's clock, and renewed `grace` before they
//!   expire ([`super::lease`]: optimistic concurrency, one winner; a shard's take or renewal
//!   also publishes its object count when it moved); a shard no longer assigned here has its fence closed at once, its running reconciles are let finish (at most
//!   `release_timeout`), then its Lease is released, so the next owner takes it on the event;
//! - each observed renewal of a shard Lease held by this replica opens that shard's fence until
//!   `observed + duration - grace/2`; the first one after the fence was closed is a takeover,
//!   and the shard's controller queues the shard's keys from its cache.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::jiff::Timestamp;
use kube::api::Api;
use kube::runtime::watcher::{self, watcher};
use parking_lot::Mutex;
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;
use tokio::sync::{Notify, watch};
use tokio::task::JoinHandle;
use tokio::time::Instant;
use tracing::{debug, info, warn};

use super::lease::{LeaseWriter, Stamp};
use super::{Ownership, lease_name, rendezvous, shard_name, weight};

/// The prefix of the Leases that say which replicas are live.
pub const MEMBER_LEASE_PREFIX: &str = "wasmloop-member-";
/// The prefix of the Leases that own shards.
pub const SHARD_LEASE_PREFIX: &str = "wasmloop-shard-";

/// Errors starting sharding.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The lease duration is less than twice the grace.
    #[error("the lease duration {duration:?} must be at least twice the grace {grace:?} (renewals every duration - grace)")]
    Durations {
        /// The lease duration asked for.
        duration: Duration,
        /// The grace asked for.
        grace: Duration,
    },
}

/// A result whose error is sharding's.
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

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct PluginLabel {
    plugin: String,
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
    writer: LeaseWriter,
    config: ShardConfig,
    plugins: Mutex<BTreeMap<String, Arc<Ownership>>>,
    /// The shards assigned here in the last round.
    desired: Mutex<BTreeSet<String>>,
    /// A plugin was registered or removed.
    changed: Notify,
    /// The live members, as last computed.
    members: watch::Sender<BTreeSet<String>>,
    /// Whether the last round split shards by their objects ([`weight::split_by_objects`]).
    by_objects: std::sync::atomic::AtomicBool,
    stop: watch::Sender<bool>,
    task: Mutex<Option<JoinHandle<()>>>,
    owned: Family<ShardLabels, Gauge>,
    /// Shards per registered plugin: with `owned`, an alert finds a shard nobody owns.
    shards: Family<PluginLabel, Gauge>,
    member_count: Gauge,
}

impl Sharding {
    /// Join: take this replica's member Lease and start following the others'. Metrics go to
    /// `registry`.
    pub fn start(client: kube::Client, config: ShardConfig, registry: &mut Registry) -> Result<Self> {
        if config.grace.is_zero() || config.grace * 2 > config.duration {
            return Err(Error::Durations { duration: config.duration, grace: config.grace });
        }
        let owned = Family::<ShardLabels, Gauge>::default();
        let member_count = Gauge::default();
        member_count.set(1); // this replica, until others are seen
        registry.register("wasmloop_shard_owned", "1 for each shard this replica owns (--shard-mode plugin)", owned.clone());
        registry.register("wasmloop_shard_members", "Live replicas this replica sees (--shard-mode plugin)", member_count.clone());
        let shards = Family::<PluginLabel, Gauge>::default();
        registry.register("wasmloop_shards", "Shards of each plugin this replica has loaded (--shard-mode plugin)", shards.clone());
        let inner = Arc::new(Inner {
            writer: LeaseWriter::new(client.clone(), &config.namespace, &config.identity, config.duration),
            client,
            members: watch::Sender::new(BTreeSet::from([config.identity.clone()])),
            by_objects: std::sync::atomic::AtomicBool::new(true),
            config,
            plugins: Mutex::new(BTreeMap::new()),
            desired: Mutex::new(BTreeSet::new()),
            changed: Notify::new(),
            stop: watch::Sender::new(false),
            task: Mutex::new(None),
            owned,
            shards,
            member_count,
        });
        let task = tokio::spawn(inner.clone().run());
        *inner.task.lock() = Some(task);
        info!(identity = %inner.config.identity, lease = %member_lease_name(&inner.config.identity), "sharding: joining");
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
        self.inner.shards.get_or_create(&PluginLabel { plugin: plugin.to_string() }).set(count.max(1) as i64);
        self.inner.changed.notify_one();
        ownership
    }

    /// `plugin` is gone: its shards are released.
    pub fn unregister(&self, plugin: &str) {
        self.inner.plugins.lock().remove(plugin);
        self.inner.shards.remove(&PluginLabel { plugin: plugin.to_string() });
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

    /// Close every fence, release every Lease this replica holds, and stop.
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

/// What was observed of one Lease.
#[derive(Debug)]
struct Seen {
    lease: Lease,
    holder: Option<String>,
    renew: Option<String>,
    /// The object count published on it (shard Leases).
    objects: Option<u64>,
    /// How its holder splits shards (member Leases: [`weight::SPLIT_ANNOTATION`]).
    split: Option<String>,
    /// Until when its holder counts as live, on this replica's clock.
    alive_until: Instant,
}

/// A Lease write this replica decided on (a take or renewal with an annotation to set).
enum Op {
    Acquire(String, Option<Lease>, Stamp),
    Renew(Lease, Stamp),
    Release(Lease),
}

impl Inner {
    async fn run(self: Arc<Self>) {
        let api: Api<Lease> = Api::namespaced(self.client.clone(), &self.config.namespace);
        let mut events = watcher(api, watcher::Config::default()).boxed();
        let mut stop = self.stop.subscribe();
        let mut table: HashMap<String, Seen> = HashMap::new();
        // Shards no longer assigned here, and since when (their reconciles are let finish).
        let mut releasing: BTreeMap<String, Instant> = BTreeMap::new();
        let mut synced = false;
        let mut tick = tokio::time::interval(Duration::from_millis(500));
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                _ = stop.wait_for(|s| *s) => break,
                event = events.next() => match event {
                    Some(Ok(watcher::Event::Apply(l) | watcher::Event::InitApply(l))) => self.observe(&mut table, &l),
                    Some(Ok(watcher::Event::Delete(l))) => {
                        let name = l.metadata.name.clone().unwrap_or_default();
                        table.remove(&name);
                        self.observe_gone(&name);
                    }
                    Some(Ok(watcher::Event::InitDone)) => synced = true,
                    Some(Ok(watcher::Event::Init)) => continue,
                    Some(Err(e)) => { debug!(error = %e, "sharding: watching Leases"); continue; }
                    None => break,
                },
                _ = tick.tick() => {}
                () = self.changed.notified() => {}
            }
            // Nothing is decided before the first list: every Lease must be known.
            if synced {
                self.step(&mut table, &mut releasing).await;
            }
        }
        self.leave(&table).await;
    }

    /// Stopping: close every fence, then release every Lease this replica holds at once.
    async fn leave(&self, table: &HashMap<String, Seen>) {
        for o in self.plugins.lock().values() {
            (0..o.count()).for_each(|i| o.fence(i).close());
        }
        let me = Some(self.config.identity.as_str());
        let mine = table.values().filter(|s| s.holder.as_deref() == me).map(|s| self.writer.release(&s.lease));
        match tokio::time::timeout(Duration::from_secs(5), futures::future::join_all(mine)).await {
            Ok(results) => {
                let failed = results.iter().filter(|r| r.is_err()).count();
                info!(released = results.len() - failed, failed, "sharding: Leases released");
            }
            Err(_) => warn!("sharding: releasing the Leases did not finish in time"),
        }
    }

    /// Record a Lease (unless a newer version was already seen); a shard Lease also opens or
    /// closes that shard's fence.
    fn observe(&self, table: &mut HashMap<String, Seen>, lease: &Lease) {
        let name = lease.metadata.name.clone().unwrap_or_default();
        if table.get(&name).is_some_and(|prev| is_older(lease, &prev.lease)) {
            return;
        }
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
                    let age = Timestamp::now().duration_since(t.0);
                    Duration::try_from(age).unwrap_or(Duration::ZERO)
                });
                now + duration.saturating_sub(age)
            }
        };
        let renewed = table.get(&name).is_none_or(|p| p.renew != renew);
        let annotation = |key: &str| lease.metadata.annotations.as_ref().and_then(|a| a.get(key));
        let objects = annotation(weight::ANNOTATION).and_then(|v| weight::parse(v));
        let split = annotation(weight::SPLIT_ANNOTATION).cloned();
        table.insert(name.clone(), Seen { lease: lease.clone(), holder: spec.holder_identity.clone(), renew, objects, split, alive_until });
        if !name.starts_with(SHARD_LEASE_PREFIX) {
            return;
        }
        let Some((ownership, index, shard)) = self.find_shard(&name) else { return };
        let fence = ownership.fence(index);
        let mine = spec.holder_identity.as_deref() == Some(self.config.identity.as_str());
        if mine && self.desired.lock().contains(&shard) {
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

    /// One round: recompute the assignment, keep this replica's member Lease and the shards
    /// assigned here, release the others once their reconciles have finished.
    async fn step(&self, table: &mut HashMap<String, Seen>, releasing: &mut BTreeMap<String, Instant>) {
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
            plugins.iter().flat_map(|o| o.shard_names().into_iter().enumerate().map(|(i, s)| (lease_name(&s), (o.clone(), i)))).collect();
        let names: BTreeSet<String> = plugins.iter().flat_map(|o| o.shard_names()).collect();
        let me = self.config.identity.as_str();
        let (weights, holders) = self.split_inputs(table, &members, &names);
        let desired: BTreeSet<String> =
            rendezvous::assign_weighted(&weights, &members, &holders).into_iter().filter(|(_, m)| *m == me).map(|(s, _)| s).collect();
        let desired_leases: BTreeSet<String> = desired.iter().map(|s| lease_name(s)).collect();
        *self.desired.lock() = desired;

        let now = Instant::now();
        let mut counts = ObjectCounts::default();
        let member = member_lease_name(me);
        let mut ops: Vec<Op> = std::iter::once(member.clone())
            .chain(desired_leases.iter().cloned())
            .filter_map(|name| {
                let seen = table.get(&name);
                let stamp = |seen: Option<&Seen>| -> Stamp {
                    if name == member {
                        let said = seen.and_then(|s| s.split.as_deref()) == Some(weight::SPLIT_BY_OBJECTS);
                        return (!said).then(|| (weight::SPLIT_ANNOTATION, weight::SPLIT_BY_OBJECTS.to_string()));
                    }
                    let n = shards.get(&name).and_then(|(o, i)| counts.of(o, *i))?;
                    weight::to_publish(seen.and_then(|s| s.objects), n).map(|n| (weight::ANNOTATION, n.to_string()))
                };
                self.keep(&name, seen, stamp, now)
            })
            .collect();
        releasing.retain(|name, _| !desired_leases.contains(name));
        for (name, seen) in table.iter() {
            if !name.starts_with(SHARD_LEASE_PREFIX) || seen.holder.as_deref() != Some(me) || desired_leases.contains(name) {
                continue;
            }
            let found = shards.get(name);
            if let Some((o, i)) = found {
                let shard = &o.shard_names()[*i];
                if o.fence(*i).check().is_ok() {
                    info!(%shard, "sharding: no longer assigned here; releasing after its running reconciles");
                }
                o.fence(*i).close();
                self.owned_gauge(o, shard).set(0);
            }
            let since = *releasing.entry(name.clone()).or_insert(now);
            if found.is_none_or(|(o, i)| o.idle(*i)) || now.duration_since(since) >= self.config.release_timeout {
                ops.push(Op::Release(seen.lease.clone()));
            }
        }
        releasing.retain(|name, _| table.get(name).is_some_and(|s| s.holder.as_deref() == Some(me)));
        let results = futures::future::join_all(ops.into_iter().map(|op| async move {
            let call = async {
                match op {
                    Op::Acquire(name, seen, stamp) => self.writer.acquire(&name, seen.as_ref(), stamp).await,
                    Op::Renew(seen, stamp) => self.writer.renew(&seen, stamp).await,
                    Op::Release(seen) => self.writer.release(&seen).await,
                }
            };
            tokio::time::timeout(self.config.grace, call).await
        }))
        .await;
        for result in results {
            match result {
                Ok(Ok(lease)) => self.observe(table, &lease),
                Ok(Err(super::lease::Error::Conflict(lease))) => debug!(%lease, "sharding: another replica wrote the Lease first"),
                Ok(Err(e)) => warn!(error = %e, "sharding: writing a Lease"),
                Err(_) => warn!("sharding: a Lease write timed out"),
            }
        }
    }

    /// What the split of `names` over `members` weighs: each shard's published count and its
    /// Lease's holder, or — while some live replica does not weigh shards — every shard 1 and no
    /// holders (the split by number every version computes alike).
    fn split_inputs(
        &self,
        table: &HashMap<String, Seen>,
        members: &BTreeSet<String>,
        names: &BTreeSet<String>,
    ) -> (BTreeMap<String, u64>, BTreeMap<String, String>) {
        let me = self.config.identity.as_str();
        let others = members.iter().filter(|m| *m != me).map(|m| table.get(&member_lease_name(m)).and_then(|s| s.split.as_deref()));
        let by_objects = weight::split_by_objects(others);
        if self.by_objects.swap(by_objects, std::sync::atomic::Ordering::Relaxed) != by_objects {
            info!(by_objects, "sharding: shards split by their objects (every live replica weighs them), else by their number");
        }
        if !by_objects {
            return (names.iter().map(|s| (s.clone(), 1)).collect(), BTreeMap::new());
        }
        let seen = |s: &str| table.get(&lease_name(s));
        let weights = weight::weights(names.iter().map(|s| (s.as_str(), seen(s).and_then(|l| l.objects))));
        let holders = names.iter().filter_map(|s| Some((s.clone(), seen(s)?.holder.clone()?))).collect();
        (weights, holders)
    }

    /// What to do to keep Lease `name` (ours, or to be taken): take it when missing, free or
    /// expired on this replica's clock; renew it `grace` before it expires. The write sets
    /// `stamp(seen)` (asked only when writing: a shard's count when it moved, a member's way of
    /// splitting when its Lease does not say it yet).
    fn keep(&self, name: &str, seen: Option<&Seen>, stamp: impl FnOnce(Option<&Seen>) -> Stamp, now: Instant) -> Option<Op> {
        let Some(seen) = seen else { return Some(Op::Acquire(name.to_string(), None, stamp(None))) };
        if seen.holder.as_deref() == Some(self.config.identity.as_str()) {
            let due = seen.alive_until.saturating_duration_since(now) <= self.config.grace;
            return due.then(|| Op::Renew(seen.lease.clone(), stamp(Some(seen))));
        }
        let free = seen.holder.is_none() || seen.alive_until <= now;
        free.then(|| Op::Acquire(name.to_string(), Some(seen.lease.clone()), stamp(Some(seen))))
    }
}

/// Each plugin's object counts per shard, asked of its controller at most once per round.
#[derive(Default)]
struct ObjectCounts(HashMap<String, Option<Vec<u64>>>);

impl ObjectCounts {
    /// The objects in shard `index` of `ownership`'s plugin.
    fn of(&mut self, ownership: &Ownership, index: usize) -> Option<u64> {
        let counts = self.0.entry(ownership.plugin().to_string()).or_insert_with(|| ownership.objects_per_shard());
        counts.as_ref().and_then(|c| c.get(index).copied())
    }
}

/// Whether `a` is an older version than `b` (resourceVersions compared as etcd revisions when
/// both are numbers; otherwise not older).
fn is_older(a: &Lease, b: &Lease) -> bool {
    let rv = |l: &Lease| l.metadata.resource_version.as_deref().and_then(|v| v.parse::<u64>().ok());
    matches!((rv(a), rv(b)), (Some(a), Some(b)) if a < b)
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
    fn older_versions_are_told_by_their_revision() {
        let lease =
            |rv: &str| Lease { metadata: kube::api::ObjectMeta { resource_version: Some(rv.into()), ..Default::default() }, spec: None };
        assert!(is_older(&lease("9"), &lease("10")));
        assert!(!is_older(&lease("10"), &lease("9")));
        assert!(!is_older(&lease("10"), &lease("10")));
        // Opaque versions are never judged older (the event is taken).
        assert!(!is_older(&lease("a"), &lease("10")));
    }

    #[test]
    fn shard_names_cover_every_shard() {
        let names = shard_names(&[("podset", 3), ("welcome", 1)]);
        assert_eq!(names.into_iter().collect::<Vec<_>>(), ["podset/0-of-3", "podset/1-of-3", "podset/2-of-3", "welcome"]);
    }
}
