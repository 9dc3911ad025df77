//! The rollout strategies and scaling (`rolling.go`, `recreate.go`, `sync.go`'s `sync` and
//! `scale`): a rolling update grows the new ReplicaSet within maxSurge and shrinks old ones
//! within maxUnavailable, a Recreate scales old ones to zero and waits for their Pods to go
//! before scaling the new one up, and a change of `replicas` mid-rollout (or while paused) is
//! spread over the active ReplicaSets in proportion to their sizes.

use std::time::Duration;

use wasmloop_sdk::{kinds, meta};

use crate::replicas::{self, spec_sum};
use crate::status;
use crate::sync::{Flow, Sync, by_creation};

/// How often a Recreate rollout looks for its old Pods to be gone: Pod events do not reach
/// this controller (their controller is a ReplicaSet; see the crate's docs).
pub const OLD_PODS_POLL: Duration = Duration::from_secs(1);

impl Sync {
    /// `sync`: scale (a scaling event, or a paused Deployment), clean up old revisions while
    /// paused, write the status.
    pub fn sync(&mut self) -> Flow {
        let (new, old) = self.all_and_sync_revision(false)?;
        self.scale(new, &old);
        if self.d.spec.paused && self.rollback_to().is_none() {
            self.cleanup(&old);
        }
        self.sync_deployment_status(new, &old);
        Ok(())
    }

    /// `syncStatusOnly`: a Deployment being deleted only reports.
    pub fn sync_status_only(&mut self) -> Flow {
        let (new, old) = self.all_and_sync_revision(false)?;
        self.sync_deployment_status(new, &old);
        Ok(())
    }

    /// `isScalingEvent`: an active ReplicaSet was scaled for another `replicas`.
    pub fn is_scaling_event(&mut self) -> Flow<bool> {
        let (new, old) = self.all_and_sync_revision(false)?;
        let replicas = self.d.replicas();
        Ok(self.all(new, &old).into_iter().filter(|rs| rs.replicas() > 0).any(|rs| {
            crate::annotations::int(&rs.metadata.annotations, crate::annotations::DESIRED_REPLICAS).is_some_and(|d| d != replicas)
        }))
    }

    /// `scale`: the only active ReplicaSet (or the newest) takes `replicas`; a saturated new one
    /// leaves the old ones nothing; otherwise a rolling Deployment's new size (+ maxSurge) is
    /// spread over its active ReplicaSets in proportion.
    fn scale(&mut self, new: Option<usize>, old: &[usize]) {
        let replicas = self.d.replicas();
        if let Some(i) = self.active_or_latest(new, old) {
            if self.rss[i].replicas() != replicas {
                self.scale_and_record(i, replicas);
            }
            return;
        }
        if replicas::is_saturated(&self.d, new.map(|i| &self.rss[i])) {
            let mut active: Vec<usize> = old.iter().copied().filter(|&i| self.rss[i].replicas() > 0).collect();
            // FindActiveOrLatest left the old ones newest first.
            active.sort_by(|&a, &b| by_creation(&self.rss[b], &self.rss[a]));
            for i in active {
                self.scale_and_record(i, 0);
            }
            return;
        }
        if !self.d.is_rolling_update() {
            return;
        }
        let mut active: Vec<usize> = old.iter().chain(new.iter()).copied().filter(|&i| self.rss[i].replicas() > 0).collect();
        let current = spec_sum(active.iter().map(|&i| &self.rss[i]));
        let allowed = if replicas > 0 { replicas + self.d.max_surge() } else { 0 };
        let to_add = allowed - current;
        let operation = match to_add {
            0 => "",
            n if n > 0 => {
                // Larger first; of equal sizes the newer first.
                active.sort_by(|&a, &b| {
                    let (x, y) = (&self.rss[a], &self.rss[b]);
                    y.replicas().cmp(&x.replicas()).then_with(|| by_creation(y, x))
                });
                "up"
            }
            _ => {
                // Larger first; of equal sizes the older first.
                active.sort_by(|&a, &b| {
                    let (x, y) = (&self.rss[a], &self.rss[b]);
                    y.replicas().cmp(&x.replicas()).then_with(|| by_creation(x, y))
                });
                "down"
            }
        };
        let mut added = 0;
        let mut sizes = Vec::with_capacity(active.len());
        for &i in &active {
            let rs = &self.rss[i];
            if to_add == 0 {
                sizes.push(rs.replicas());
            } else {
                let p = replicas::proportion(rs, &self.d, to_add, added);
                sizes.push(rs.replicas() + p);
                added += p;
            }
        }
        for (n, &i) in active.iter().enumerate() {
            let mut size = sizes[n];
            if n == 0 && to_add != 0 {
                size = (size + to_add - added).max(0);
            }
            self.scale_replica_set(i, size, operation);
        }
    }

    /// `FindActiveOrLatest`: the one ReplicaSet with replicas, or with none the new one (else
    /// the newest old one); `None` when several have replicas.
    fn active_or_latest(&self, new: Option<usize>, old: &[usize]) -> Option<usize> {
        let active: Vec<usize> = old.iter().chain(new.iter()).copied().filter(|&i| self.rss[i].replicas() > 0).collect();
        match active.as_slice() {
            [one] => Some(*one),
            [] => new.or_else(|| old.iter().copied().max_by(|&a, &b| by_creation(&self.rss[a], &self.rss[b]))),
            _ => None,
        }
    }

    /// `rolloutRolling`.
    pub fn rollout_rolling(&mut self) -> Flow {
        let (new, old) = self.all_and_sync_revision(true)?;
        let Some(n) = new else { return Ok(()) };
        if self.reconcile_new_replica_set(n, &old)? || self.reconcile_old_replica_sets(n, &old) {
            self.sync_rollout_status(new, &old);
            return Ok(());
        }
        if status::complete(&self.d, &self.d.status) {
            self.cleanup(&old);
        }
        self.sync_rollout_status(new, &old);
        Ok(())
    }

    /// `reconcileNewReplicaSet`: whether it scaled the new ReplicaSet.
    fn reconcile_new_replica_set(&mut self, n: usize, old: &[usize]) -> Flow<bool> {
        let (have, want) = (self.rss[n].replicas(), self.d.replicas());
        if have == want {
            return Ok(false);
        }
        if have > want {
            return Ok(self.scale_and_record(n, want));
        }
        let all = self.all(Some(n), old);
        let count = replicas::new_rs_new_replicas(&self.d, &all, &self.rss[n])?;
        Ok(self.scale_and_record(n, count))
    }

    /// `reconcileOldReplicaSets`: whether it scaled old ReplicaSets down (their unhealthy Pods
    /// first, then within maxUnavailable).
    fn reconcile_old_replica_sets(&mut self, n: usize, old: &[usize]) -> bool {
        let mut active: Vec<usize> = old.iter().copied().filter(|&i| self.rss[i].replicas() > 0).collect();
        if spec_sum(active.iter().map(|&i| &self.rss[i])) == 0 {
            return false;
        }
        let all_pods = spec_sum(self.all(Some(n), old));
        let min_available = self.d.replicas() - self.d.max_unavailable();
        let new_rs = &self.rss[n];
        let new_unavailable = new_rs.replicas() - new_rs.status.available_replicas;
        let max_scaled_down = all_pods - min_available - new_unavailable;
        if max_scaled_down <= 0 {
            return false;
        }
        active.sort_by(|&a, &b| by_creation(&self.rss[a], &self.rss[b]));
        let cleaned = self.cleanup_unhealthy_replicas(&active, max_scaled_down);
        let scaled = self.scale_down_old_for_rolling_update(n, &active);
        cleaned + scaled > 0
    }

    /// `cleanupUnhealthyReplicas`: scale old ReplicaSets down by their unavailable Pods, oldest
    /// first, at most `max` in all.
    fn cleanup_unhealthy_replicas(&mut self, old: &[usize], max: i32) -> i32 {
        let mut total = 0;
        for &i in old {
            if total >= max {
                break;
            }
            let rs = &self.rss[i];
            let (replicas, available) = (rs.replicas(), rs.status.available_replicas);
            if replicas == 0 || replicas == available {
                continue;
            }
            let down = (max - total).min(replicas - available);
            self.scale_and_record(i, replicas - down);
            total += down;
        }
        total
    }

    /// `scaleDownOldReplicaSetsForRollingUpdate`: scale old ReplicaSets down by the available
    /// Pods beyond minAvailable, oldest first.
    fn scale_down_old_for_rolling_update(&mut self, n: usize, old: &[usize]) -> i32 {
        let min_available = self.d.replicas() - self.d.max_unavailable();
        let available: i32 = old.iter().chain([&n]).map(|&i| self.rss[i].status.available_replicas).sum();
        if available <= min_available {
            return 0;
        }
        let budget = available - min_available;
        let mut total = 0;
        for &i in old {
            if total >= budget {
                break;
            }
            let replicas = self.rss[i].replicas();
            if replicas == 0 {
                continue;
            }
            let down = replicas.min(budget - total);
            self.scale_and_record(i, replicas - down);
            total += down;
        }
        total
    }

    /// `rolloutRecreate`.
    pub fn rollout_recreate(&mut self) -> Flow {
        let (mut new, mut old) = self.all_and_sync_revision(false)?;
        let active: Vec<usize> = old.iter().copied().filter(|&i| self.rss[i].replicas() > 0).collect();
        let mut scaled = false;
        for i in active {
            scaled |= self.scale_and_record(i, 0);
        }
        if scaled || self.old_pods_running(new, &old)? {
            self.sync_rollout_status(new, &old);
            return Ok(());
        }
        if new.is_none() {
            (new, old) = self.all_and_sync_revision(true)?;
        }
        if let Some(n) = new {
            self.scale_and_record(n, self.d.replicas());
        }
        if status::complete(&self.d, &self.d.status) {
            self.cleanup(&old);
        }
        self.sync_rollout_status(new, &old);
        Ok(())
    }

    /// `oldPodsRunning`: old ReplicaSets still count Pods, or Pods of theirs (matching the
    /// selector, terminating ones too) are not Succeeded or Failed. Pods still terminating
    /// while their ReplicaSets count none are looked for again after [`OLD_PODS_POLL`].
    fn old_pods_running(&mut self, new: Option<usize>, old: &[usize]) -> Flow<bool> {
        if old.iter().map(|&i| self.rss[i].status.replicas).sum::<i32>() > 0 {
            return Ok(true);
        }
        for &i in old.iter().filter(|&&i| Some(i) != new) {
            let pods = meta::owned_by_packed(&kinds::POD, &self.rss[i].metadata.uid)?;
            for pod in pods.decode()? {
                let labels = pod.labels.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned())).collect();
                if !self.d.spec.selector.matches(&labels) {
                    continue;
                }
                let phase: Option<String> = pod.field(0).and_then(|p| serde_json::from_str(p).ok());
                if !matches!(phase.as_deref(), Some("Succeeded" | "Failed")) {
                    self.requeue_after(OLD_PODS_POLL);
                    return Ok(true);
                }
            }
        }
        Ok(false)
    }
}
