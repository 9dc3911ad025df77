//! Scale-out: plugins (and key-space shards of plugins) spread over replicas through Leases.
//!
//! With `--shard-mode plugin` every replica loads every plugin and keeps its informers warm,
//! but reconciles only the shards it owns:
//! - a **shard** is a plugin (`podset`), or one of the N key-space shards of a plugin whose
//!   manifest says `shards: N` (`podset/3-of-30`; a key belongs to the shard of its namespace's
//!   hash, a cluster-scoped key to that of its name, so a namespace's objects stay together);
//! - **membership**: each replica holds its own Lease (`wasmloop-member-<identity>`); a replica
//!   is live while its renewals keep being observed ([`coordinator`]);
//! - **assignment**: every replica computes the same owner for each shard by rendezvous hashing
//!   over the live replicas, with loads bounded in objects: each shard weighs the objects its
//!   owner counted and published on its Lease ([`rendezvous`], [`weight`]);
//! - **ownership**: the assigned replica takes the shard's own Lease (`wasmloop-shard-…`); its
//!   writes for that shard go out only within the window its own successful renewals bought,
//!   counted from when each was sent (a [`Fence`] per shard, kept by a [`FenceKeeper`], as for
//!   the single leader), and a replica that is no longer assigned a shard closes its fence, lets
//!   the shard's running reconciles finish, and only then releases the Lease. So two replicas
//!   never write for one shard at once, and a dead replica's shards move when its Leases expire.
//!
//! [`Ownership`] is what a controller sees: which shard a key is in, whether this replica may
//! write for it, and when a shard was just taken over (its keys are then queued from the cache).

pub mod coordinator;
mod rendezvous;
mod weight;

pub use coordinator::{ShardConfig, Sharding};
pub use rendezvous::assign_weighted;
pub use weight::{ANNOTATION as OBJECTS_ANNOTATION, is_current as count_is_current, parse as parse_objects, weights};

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use tokio::sync::broadcast;

use crate::fence::{Fence, FenceKeeper, KeeperConfig};
use crate::kinds::ObjectKey;

/// The shard name of shard `index` of `count` of `plugin` (`plugin` itself when unsharded).
pub fn shard_name(plugin: &str, index: usize, count: usize) -> String {
    if count <= 1 { plugin.to_string() } else { format!("{plugin}/{index}-of-{count}") }
}

/// The Lease that owns a shard.
pub fn lease_name(shard: &str) -> String {
    format!("wasmloop-shard-{}", shard.replace('/', "-"))
}

/// The key-space shard of `key` among `count`: by namespace, else (cluster-scoped) by name.
pub fn shard_of(key: &ObjectKey, count: usize) -> usize {
    shard_of_scope(key.namespace.as_deref().unwrap_or(&key.name), count)
}

/// The key-space shard among `count` of the keys in `scope` (a namespace, or the name of a
/// cluster-scoped object).
pub fn shard_of_scope(scope: &str, count: usize) -> usize {
    if count <= 1 {
        return 0;
    }
    (rendezvous::stable_hash(&[scope]) % count as u64) as usize
}

/// Counts the objects of the reconciled kind in each shard (index order) in the controller's
/// cache; `None` while there is no controller to ask.
pub type ObjectCounter = Box<dyn Fn() -> Option<Vec<u64>> + Send + Sync>;

/// One plugin's shards as seen from this replica: a write fence per shard (and its keeper), the
/// reconciles running in each, news of shards taken over, and how to count each shard's objects.
pub struct Ownership {
    plugin: String,
    keepers: Vec<Arc<FenceKeeper>>,
    running: Vec<AtomicUsize>,
    acquired: broadcast::Sender<usize>,
    counter: parking_lot::Mutex<Option<ObjectCounter>>,
}

impl std::fmt::Debug for Ownership {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Ownership").field("plugin", &self.plugin).field("shards", &self.count()).finish_non_exhaustive()
    }
}

impl Ownership {
    /// `count` shards of `plugin`, none owned yet; their fences are kept as `keeping` says.
    pub fn new(plugin: &str, count: usize, keeping: &KeeperConfig) -> Self {
        let count = count.max(1);
        Self {
            plugin: plugin.to_string(),
            keepers: (0..count).map(|i| FenceKeeper::new(Fence::closed(), &lease_name(&shard_name(plugin, i, count)), keeping)).collect(),
            running: (0..count).map(|_| AtomicUsize::new(0)).collect(),
            acquired: broadcast::channel(count.max(16)).0,
            counter: parking_lot::Mutex::new(None),
        }
    }

    /// Count each shard's objects with `counter` (the controller reconciling the plugin, set
    /// again when it is replaced): the counts become the shards' weights ([`weight`]).
    pub fn count_objects_with(&self, counter: ObjectCounter) {
        *self.counter.lock() = Some(counter);
    }

    /// The objects in each shard (index order), if a controller counts them.
    pub(crate) fn objects_per_shard(&self) -> Option<Vec<u64>> {
        let counts = self.counter.lock().as_ref().and_then(|count| count())?;
        (counts.len() == self.count()).then_some(counts)
    }

    /// The plugin whose shards these are.
    pub fn plugin(&self) -> &str {
        &self.plugin
    }

    /// How many key-space shards the plugin has (1: unsharded).
    pub fn count(&self) -> usize {
        self.keepers.len()
    }

    /// The shard `key` belongs to.
    pub fn shard_of(&self, key: &ObjectKey) -> usize {
        shard_of(key, self.count())
    }

    /// The shard names, in index order.
    pub fn shard_names(&self) -> Vec<String> {
        (0..self.count()).map(|i| shard_name(&self.plugin, i, self.count())).collect()
    }

    /// The write fence of shard `index`.
    pub fn fence(&self, index: usize) -> &Fence {
        self.keepers[index].fence()
    }

    /// The keeper of shard `index`'s fence (fed by the renewals of the shard's Lease).
    pub(crate) fn keeper(&self, index: usize) -> &Arc<FenceKeeper> {
        &self.keepers[index]
    }

    /// The write fence of the shard `key` belongs to.
    pub fn fence_for(&self, key: &ObjectKey) -> &Fence {
        self.fence(self.shard_of(key))
    }

    /// Whether this replica may write for `key` now.
    pub fn owns(&self, key: &ObjectKey) -> bool {
        self.fence_for(key).check().is_ok()
    }

    /// Count a reconcile of `key` as running until the guard drops (a shard is released only
    /// when none runs).
    pub fn running(&self, key: &ObjectKey) -> Running<'_> {
        let counter = &self.running[self.shard_of(key)];
        counter.fetch_add(1, Ordering::AcqRel);
        Running(counter)
    }

    /// Whether no reconcile of shard `index` is running.
    pub fn idle(&self, index: usize) -> bool {
        self.running[index].load(Ordering::Acquire) == 0
    }

    /// News of shards this replica just took over (their keys should be queued).
    pub fn subscribe(&self) -> broadcast::Receiver<usize> {
        self.acquired.subscribe()
    }

    /// Shard `index` was taken over.
    pub(crate) fn taken_over(&self, index: usize) {
        let _ = self.acquired.send(index);
    }
}

/// A running reconcile, counted in its shard.
pub struct Running<'a>(&'a AtomicUsize);

impl Drop for Running<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::AcqRel);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kinds::KindRef;

    fn key(ns: Option<&str>, name: &str) -> ObjectKey {
        ObjectKey::new(KindRef::new("wasmloop.dev/v1alpha1", "PodSet"), ns, name)
    }

    #[test]
    fn a_namespace_stays_in_one_shard() {
        let a = shard_of(&key(Some("shop"), "a"), 30);
        assert_eq!(a, shard_of(&key(Some("shop"), "zz"), 30));
        assert!(a < 30);
        assert_eq!(shard_of(&key(Some("shop"), "a"), 1), 0);
        // Namespaces spread: 300 of them fill every one of 30 shards.
        let used: std::collections::BTreeSet<_> = (0..300).map(|i| shard_of(&key(Some(&format!("ns-{i}")), "x"), 30)).collect();
        assert_eq!(used.len(), 30);
    }

    #[test]
    fn names_and_leases() {
        assert_eq!(shard_name("podset", 0, 1), "podset");
        assert_eq!(shard_name("podset", 3, 30), "podset/3-of-30");
        assert_eq!(lease_name("podset/3-of-30"), "wasmloop-shard-podset-3-of-30");
    }

    #[tokio::test(start_paused = true)]
    async fn ownership_follows_the_fences_and_counts_running_reconciles() {
        let keeping = KeeperConfig { validity: std::time::Duration::from_secs(5), metrics: Default::default(), reads: None };
        let o = Ownership::new("podset", 4, &keeping);
        let k = key(Some("shop"), "a");
        let shard = o.shard_of(&k);
        assert!(!o.owns(&k));
        let renewal = o.keeper(shard).sent();
        o.keeper(shard).renewed(renewal, &Default::default());
        assert!(o.owns(&k));
        assert!((0..4).filter(|i| *i != shard).all(|i| o.fence(i).check().is_err()), "one shard's renewal opened another's fence");
        let mut news = o.subscribe();
        o.taken_over(shard);
        assert_eq!(news.recv().await.unwrap(), shard);
        let running = o.running(&k);
        assert!(!o.idle(shard));
        drop(running);
        assert!(o.idle(shard));
        o.keeper(shard).lost();
        assert!(!o.owns(&k));
    }
}
