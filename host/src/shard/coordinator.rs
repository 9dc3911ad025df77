//! [`Sharding`]: membership, assignment and the shard Leases of one replica.
//!
//! One task per replica watches every Lease in the host's Lease namespace and keeps a
//! [`LeaseTable`] of what it observed. From it, every half second and on every change:
//! - the **live members** are the holders of `wasmloop-member-*` Leases whose renewals were
//!   observed within their duration (on this replica's clock, as client-go's leader elector
//!   judges a leader, so clock skew between nodes does not matter); this replica always counts.
//!   A member whose renewals *look* stopped is counted out only after a fresh read of the Leases
//!   confirms it ([`LeaseTable::suspects`]): a replica that was paused sees every other one as
//!   dead from its stale table, and re-reads before concluding anything or taking anything;
//! - the **assignment** is [`rendezvous::assign_weighted`] of every registered shard over them,
//!   each shard weighing the object count its owner published on its Lease ([`weight`]), a
//!   shard staying with the live replica holding its Lease while that one is within the slack;
//! - this replica's member Lease and the Leases of the shards assigned here are taken as soon
//!   as they are free, or expired on this replica's clock (confirmed by a fresh read), and
//!   renewed `grace` before they expire ([`crate::lease::writer`]: optimistic concurrency, one
//!   winner; a shard's take or renewal also publishes its object count when it moved); a shard
//!   no longer assigned here has its fence closed at once, its running reconciles are let
//!   finish (at most `release_timeout`), then its Lease is released, so the next owner takes it
//!   on the event;
//! - each shard's fence is kept by its [`FenceKeeper`](crate::fence::FenceKeeper) from this
//!   replica's own takes and renewals of the shard's Lease: open until `sent + duration −
//!   grace/2` after one succeeds (never from when an answer or a watch event was seen), closed
//!   when the Lease is observed held by another, deleted or released. The fence opening after
//!   being closed is a takeover, and the shard's controller queues the shard's keys from its
//!   cache.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::coordination::v1::Lease;
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

use super::{Ownership, lease_name, rendezvous, shard_name, weight};
use crate::fence::machine::{Change, Closed};
use crate::fence::{FenceMetrics, KeeperConfig};
use crate::lease::{LeaseTable, LeaseWriter, Observed, Stamp, writer};

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
    /// How the shards' fences are kept (validity, metrics, confirming reads).
    keeping: KeeperConfig,
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
        let keeping = KeeperConfig {
            validity: config.duration.saturating_sub(config.grace / 2),
            metrics: FenceMetrics::new(registry),
            reads: Some((client.clone(), config.namespace.clone())),
        };
        member_count.set(1); // this replica, until others are seen
        registry.register("wasmloop_shard_owned", "1 for each shard this replica owns (--shard-mode plugin)", owned.clone());
        registry.register("wasmloop_shard_members", "Live replicas this replica sees (--shard-mode plugin)", member_count.clone());
        let shards = Family::<PluginLabel, Gauge>::default();
        registry.register("wasmloop_shards", "Shards of each plugin this replica has loaded (--shard-mode plugin)", shards.clone());
        let inner = Arc::new(Inner {
            writer: LeaseWriter::new(client.clone(), &config.namespace, &config.identity, config.duration),
            client,
            keeping,
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
                    let o = Arc::new(Ownership::new(plugin, count, &self.inner.keeping));
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

/// A shard as a Lease write sees it: its plugin's ownership, its index, its name.
#[derive(Clone)]
struct ShardRef {
    ownership: Arc<Ownership>,
    index: usize,
    name: String,
}

/// A Lease write this replica decided on (a take or renewal with an annotation to set), and the
/// shard whose fence its answer feeds (none for the member Lease).
enum Op {
    Acquire(String, Option<Lease>, Stamp, Option<ShardRef>),
    Renew(Lease, Stamp, Option<ShardRef>),
    Release(Lease),
}

impl Inner {
    async fn run(self: Arc<Self>) {
        let api: Api<Lease> = Api::namespaced(self.client.clone(), &self.config.namespace);
        let mut events = watcher(api, watcher::Config::default()).boxed();
        let mut stop = self.stop.subscribe();
        let mut table = LeaseTable::new(self.config.duration);
        // Shards no longer assigned here, and since when (their reconciles are let finish).
        let mut releasing: BTreeMap<String, Instant> = BTreeMap::new();
        // A Lease write conflicted: what this replica observed is stale, read the Leases again.
        let mut stale = false;
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
                stale = self.step(&mut table, &mut releasing, stale).await;
            }
        }
        self.leave(&table).await;
    }

    /// Stopping: close every fence, then release every Lease this replica holds at once.
    async fn leave(&self, table: &LeaseTable) {
        for o in self.plugins.lock().values() {
            (0..o.count()).for_each(|i| _ = o.keeper(i).lost());
        }
        let me = Some(self.config.identity.as_str());
        let mine = table.iter().filter(|(_, o)| o.holder.as_deref() == me).map(|(_, o)| self.writer.release(&o.lease));
        match tokio::time::timeout(Duration::from_secs(5), futures::future::join_all(mine)).await {
            Ok(results) => {
                let failed = results.iter().filter(|r| r.is_err()).count();
                info!(released = results.len() - failed, failed, "sharding: Leases released");
            }
            Err(_) => warn!("sharding: releasing the Leases did not finish in time"),
        }
    }

    /// Record a Lease (unless a newer version was already seen); a shard Lease held by another
    /// replica closes that shard's fence here. (Observations never open a fence: only this
    /// replica's own successful renewals do.)
    fn observe(&self, table: &mut LeaseTable, lease: &Lease) {
        if !table.observe(lease) {
            return;
        }
        let name = lease.metadata.name.as_deref().unwrap_or_default();
        let holder = lease.spec.as_ref().and_then(|s| s.holder_identity.as_deref());
        if !name.starts_with(SHARD_LEASE_PREFIX) || holder == Some(self.config.identity.as_str()) {
            return;
        }
        if let Some(shard) = self.find_shard(name) {
            if !shard.ownership.keeper(shard.index).lost().is_empty() {
                info!(shard = %shard.name, holder = ?holder, "sharding: the shard's Lease is not ours; fenced");
            }
            self.owned_gauge(&shard).set(0);
        }
    }

    /// A shard Lease was deleted: nobody may write for it until it is taken again.
    fn observe_gone(&self, name: &str) {
        if let Some(shard) = self.find_shard(name) {
            shard.ownership.keeper(shard.index).lost();
            self.owned_gauge(&shard).set(0);
        }
    }

    fn owned_gauge(&self, shard: &ShardRef) -> Gauge {
        self.owned.get_or_create(&ShardLabels { plugin: shard.ownership.plugin().to_string(), shard: shard.name.clone() }).clone()
    }

    /// The registered shard whose Lease is `lease`.
    fn find_shard(&self, lease: &str) -> Option<ShardRef> {
        self.plugins.lock().values().find_map(|o| {
            let (index, name) = o.shard_names().into_iter().enumerate().find(|(_, s)| lease_name(s) == lease)?;
            Some(ShardRef { ownership: o.clone(), index, name })
        })
    }

    /// What a change of a shard's fence means here: a takeover (its keys are queued), or the
    /// shard no longer owned.
    fn fence_changed(&self, shard: &ShardRef, changes: &[Change]) {
        for change in changes {
            match change {
                Change::Opened { .. } => {
                    info!(shard = %shard.name, "sharding: took over the shard");
                    self.owned_gauge(shard).set(1);
                    shard.ownership.taken_over(shard.index);
                }
                Change::Closed(why) => {
                    self.owned_gauge(shard).set(0);
                    if matches!(why, Closed::Expired { .. } | Closed::Conflict) {
                        info!(shard = %shard.name, reason = why.as_str(), "sharding: the shard's fence closed; renewing its Lease before writing again");
                    }
                }
                Change::Stale { .. } => {}
            }
        }
    }

    /// The live members: holders of member Leases renewed within their duration (or not yet
    /// confirmed expired by a fresh read), and this replica.
    fn live_members(&self, table: &LeaseTable) -> BTreeSet<String> {
        let now = Instant::now();
        let mut members: BTreeSet<String> = table
            .iter()
            .filter(|(name, _)| name.starts_with(MEMBER_LEASE_PREFIX) && table.holder_live(name, now))
            .filter_map(|(_, o)| o.holder.clone())
            .collect();
        members.insert(self.config.identity.clone());
        members
    }

    /// Leases whose holders look expired on this replica's clock are read again from the API
    /// server before anyone is counted out or anything is taken (a paused replica's table is
    /// stale: every other replica looks dead in it), and so are all of them after a write
    /// conflicted (`stale`). Returns whether the table is still stale (the read failed).
    async fn reread_if_stale(&self, table: &mut LeaseTable, stale: bool) -> bool {
        let suspects = table.suspects(&self.config.identity, Instant::now());
        if suspects.is_empty() && !stale {
            return false;
        }
        if !suspects.is_empty() {
            info!(suspects = ?suspects, "sharding: Leases look expired on this replica's clock; reading them again before counting anyone out");
        }
        match self.writer.list().await {
            Ok(listed) => {
                for gone in table.reread(&listed) {
                    self.observe_gone(&gone);
                }
                for lease in &listed {
                    self.observe(table, lease);
                }
                false
            }
            Err(e) => {
                warn!(error = %e, "sharding: reading the Leases again failed; nobody is counted out meanwhile");
                stale
            }
        }
    }

    /// One round: recompute the assignment, keep this replica's member Lease and the shards
    /// assigned here, release the others once their reconciles have finished. Returns whether
    /// the table is stale (a write conflicted): the next round reads the Leases again first.
    async fn step(&self, table: &mut LeaseTable, releasing: &mut BTreeMap<String, Instant>, stale: bool) -> bool {
        let plugins: Vec<Arc<Ownership>> = self.plugins.lock().values().cloned().collect();
        let shards: BTreeMap<String, ShardRef> = plugins
            .iter()
            .flat_map(|o| {
                o.shard_names()
                    .into_iter()
                    .enumerate()
                    .map(|(index, name)| (lease_name(&name), ShardRef { ownership: o.clone(), index, name }))
            })
            .collect();
        // Deadlines that passed (a pause of this process, renewals failing) close fences first.
        for shard in shards.values() {
            let changes = shard.ownership.keeper(shard.index).tick();
            self.fence_changed(shard, &changes);
        }
        let mut stale = self.reread_if_stale(table, stale).await;
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
        let names: BTreeSet<String> = shards.values().map(|s| s.name.clone()).collect();
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
                let shard = shards.get(&name).cloned();
                let counted = shard.clone();
                let stamp = |seen: Option<&Observed>| -> Stamp {
                    if name == member {
                        let said = seen.and_then(|s| s.annotation(weight::SPLIT_ANNOTATION)) == Some(weight::SPLIT_BY_OBJECTS);
                        return (!said).then(|| (weight::SPLIT_ANNOTATION, weight::SPLIT_BY_OBJECTS.to_string()));
                    }
                    let n = counted.as_ref().and_then(|s| counts.of(&s.ownership, s.index))?;
                    weight::to_publish(seen.and_then(|s| s.annotation(weight::ANNOTATION)).and_then(weight::parse), n)
                        .map(|n| (weight::ANNOTATION, n.to_string()))
                };
                self.keep(table, &name, stamp, shard, now)
            })
            .collect();
        releasing.retain(|name, _| !desired_leases.contains(name));
        for (name, observed) in table.iter() {
            if !name.starts_with(SHARD_LEASE_PREFIX) || observed.holder.as_deref() != Some(me) || desired_leases.contains(name) {
                continue;
            }
            let found = shards.get(name);
            if let Some(shard) = found {
                if !shard.ownership.keeper(shard.index).lost().is_empty() {
                    info!(shard = %shard.name, "sharding: no longer assigned here; releasing after its running reconciles");
                }
                self.owned_gauge(shard).set(0);
            }
            let since = *releasing.entry(name.clone()).or_insert(now);
            if found.is_none_or(|s| s.ownership.idle(s.index)) || now.duration_since(since) >= self.config.release_timeout {
                ops.push(Op::Release(observed.lease.clone()));
            }
        }
        releasing.retain(|name, _| table.get(name).is_some_and(|o| o.holder.as_deref() == Some(me)));
        let results = futures::future::join_all(ops.into_iter().map(|op| self.write(op))).await;
        for result in results {
            match result {
                Ok(lease) => self.observe(table, &lease),
                Err(writer::Error::Conflict(lease)) => {
                    debug!(%lease, "sharding: another replica wrote the Lease first; reading the Leases again");
                    stale = true;
                }
                Err(e) => warn!(error = %e, "sharding: writing a Lease"),
            }
        }
        stale
    }

    /// Send one Lease write (within `grace`); a shard's fence learns when it was sent and how it
    /// was answered the moment the answer is back.
    async fn write(&self, op: Op) -> writer::Result<Lease> {
        let (name, shard) = match &op {
            Op::Acquire(name, _, _, shard) => (name.clone(), shard.clone()),
            Op::Renew(seen, _, shard) => (seen.metadata.name.clone().unwrap_or_default(), shard.clone()),
            Op::Release(seen) => (seen.metadata.name.clone().unwrap_or_default(), None),
        };
        let call = async {
            match op {
                Op::Acquire(name, seen, stamp, _) => self.writer.acquire(&name, seen.as_ref(), stamp).await,
                Op::Renew(seen, stamp, _) => self.writer.renew(&seen, stamp).await,
                Op::Release(seen) => self.writer.release(&seen).await,
            }
        };
        let keeper = shard.as_ref().map(|s| s.ownership.keeper(s.index).clone());
        // Read from the clock right before the request leaves: the window counts from here.
        let renewal = keeper.as_ref().map(|k| k.sent());
        let result = tokio::time::timeout(self.config.grace, call).await.unwrap_or(Err(writer::Error::TimedOut(name)));
        if let (Some(keeper), Some(renewal), Some(shard)) = (keeper, renewal, shard) {
            let changes = match &result {
                Ok(lease) => keeper.renewed(renewal, lease),
                Err(writer::Error::Conflict(_)) => keeper.conflicted(renewal),
                Err(_) => keeper.failed(renewal),
            };
            self.fence_changed(&shard, &changes);
        }
        result
    }

    /// What the split of `names` over `members` weighs: each shard's published count and its
    /// Lease's holder, or — while some live replica does not weigh shards — every shard 1 and no
    /// holders (the split by number every version computes alike).
    fn split_inputs(
        &self,
        table: &LeaseTable,
        members: &BTreeSet<String>,
        names: &BTreeSet<String>,
    ) -> (BTreeMap<String, u64>, BTreeMap<String, String>) {
        let me = self.config.identity.as_str();
        let others = members
            .iter()
            .filter(|m| *m != me)
            .map(|m| table.get(&member_lease_name(m)).and_then(|o| o.annotation(weight::SPLIT_ANNOTATION)));
        let by_objects = weight::split_by_objects(others);
        if self.by_objects.swap(by_objects, std::sync::atomic::Ordering::Relaxed) != by_objects {
            info!(by_objects, "sharding: shards split by their objects (every live replica weighs them), else by their number");
        }
        if !by_objects {
            return (names.iter().map(|s| (s.clone(), 1)).collect(), BTreeMap::new());
        }
        let seen = |s: &str| table.get(&lease_name(s));
        let objects = |s: &str| seen(s).and_then(|o| o.annotation(weight::ANNOTATION)).and_then(weight::parse);
        let weights = weight::weights(names.iter().map(|s| (s.as_str(), objects(s))));
        let holders = names.iter().filter_map(|s| Some((s.clone(), seen(s)?.holder.clone()?))).collect();
        (weights, holders)
    }

    /// What to do to keep Lease `name` (ours, or to be taken): take it when missing, free, or
    /// expired on this replica's clock and confirmed by a fresh read; renew it `grace` before it
    /// expires, or at once when its shard's fence is closed (after a pause, a failed renewal, a
    /// flap of the assignment: only a renewal sent now reopens it). The write sets `stamp(seen)`
    /// (asked only when writing: a shard's count when it moved, a member's way of splitting
    /// when its Lease does not say it yet).
    fn keep(
        &self,
        table: &LeaseTable,
        name: &str,
        stamp: impl FnOnce(Option<&Observed>) -> Stamp,
        shard: Option<ShardRef>,
        now: Instant,
    ) -> Option<Op> {
        let Some(seen) = table.get(name) else { return Some(Op::Acquire(name.to_string(), None, stamp(None), shard)) };
        if seen.holder.as_deref() == Some(self.config.identity.as_str()) {
            let fenced = shard.as_ref().is_some_and(|s| !s.ownership.keeper(s.index).is_open());
            let due = fenced || seen.alive_until.saturating_duration_since(now) <= self.config.grace;
            return due.then(|| Op::Renew(seen.lease.clone(), stamp(Some(seen)), shard));
        }
        table.takeable(name, now).then(|| Op::Acquire(name.to_string(), Some(seen.lease.clone()), stamp(Some(seen)), shard))
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
