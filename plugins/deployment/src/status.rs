//! The Deployment's status (`sync.go`'s `calculateStatus`, `progress.go`): counts summed over
//! its ReplicaSets, `Available` from maxUnavailable, `Progressing` from what changed since the
//! last status and the progress deadline, `ReplicaFailure` copied from a ReplicaSet's, and the
//! paused/resumed markers that keep a resumed Deployment from timing out at once.

use std::time::Duration;

use crate::model::{Condition, Deployment, DeploymentStatus, ReplicaSet};
use crate::sync::{Sync, reason};

/// `calculateStatus`: the counts of `all` (`new` the new ReplicaSet), `Available` set;
/// `spec_total` is their `spec.replicas` summed as KCM's objects held them when it computed the
/// status (before this sync scaled any: its scaling writes return new objects that its status
/// computation never sees).
pub fn calculate(all: &[&ReplicaSet], new: Option<&ReplicaSet>, spec_total: i32, d: &Deployment, now: &str) -> DeploymentStatus {
    let sum = |f: fn(&ReplicaSet) -> i32| all.iter().map(|rs| f(rs)).sum::<i32>();
    let available = sum(|rs| rs.status.available_replicas);
    let total = spec_total;
    let mut status = DeploymentStatus {
        observed_generation: d.metadata.generation.unwrap_or(0),
        replicas: sum(|rs| rs.status.replicas),
        updated_replicas: new.map_or(0, |rs| rs.status.replicas),
        ready_replicas: sum(|rs| rs.status.ready_replicas),
        available_replicas: available,
        unavailable_replicas: (total - available).max(0),
        conditions: d.status.conditions.clone(),
        collision_count: d.status.collision_count,
    };
    let condition = if available >= d.replicas() - d.max_unavailable() {
        Condition::new(reason::AVAILABLE, "True", reason::MIN_AVAILABLE, "Deployment has minimum availability.", now)
    } else {
        Condition::new(reason::AVAILABLE, "False", reason::MIN_UNAVAILABLE, "Deployment does not have minimum availability.", now)
    };
    status.set_condition(condition);
    status
}

/// `DeploymentComplete`: every replica updated and available, the spec observed.
pub fn complete(d: &Deployment, s: &DeploymentStatus) -> bool {
    let r = d.replicas();
    s.updated_replicas == r && s.replicas == r && s.available_replicas == r && s.observed_generation >= d.metadata.generation.unwrap_or(0)
}

/// `DeploymentProgressing`: more updated, fewer old, more ready or more available replicas than
/// the status before.
fn progressing(d: &Deployment, s: &DeploymentStatus) -> bool {
    let old = &d.status;
    s.updated_replicas > old.updated_replicas
        || s.replicas - s.updated_replicas < old.replicas - old.updated_replicas
        || s.ready_replicas > old.ready_replicas
        || s.available_replicas > old.available_replicas
}

/// Milliseconds left until the progress deadline counted from the `Progressing` condition's
/// last update (`None` without a deadline or a parseable condition time).
fn deadline_left(d: &Deployment, c: &Condition, now_millis: i64) -> Option<i64> {
    let seconds = i64::from(d.spec.progress_deadline_seconds?);
    let from = wasmloop_sdk::time::parse(c.last_update_time.as_deref()?)?;
    Some((from + seconds) * 1000 - now_millis)
}

/// `DeploymentTimedOut`.
fn timed_out(d: &Deployment, s: &DeploymentStatus, now_millis: i64) -> bool {
    if !d.has_progress_deadline() {
        return false;
    }
    match s.condition(reason::PROGRESSING) {
        None => false,
        Some(c) if c.reason == reason::NEW_RS_AVAILABLE => false,
        Some(c) if c.reason == reason::TIMED_OUT => true,
        Some(c) => deadline_left(d, c, now_millis).is_some_and(|left| left < 0),
    }
}

impl Sync {
    /// The ReplicaSets `old` and `new` by index, as `allRSs` (old first).
    pub fn all<'a>(&'a self, new: Option<usize>, old: &[usize]) -> Vec<&'a ReplicaSet> {
        old.iter().chain(new.iter()).map(|&i| &self.rss[i]).collect()
    }

    /// Σ `spec.replicas` of `new` and `old` as they were before this sync scaled them.
    fn spec_total_before_scaling(&self, new: Option<usize>, old: &[usize]) -> i32 {
        old.iter().chain(new.iter()).map(|&i| self.replicas_before_scaling(i)).sum()
    }

    /// `syncDeploymentStatus`: the counts and `Available` only.
    pub fn sync_deployment_status(&mut self, new: Option<usize>, old: &[usize]) {
        let total = self.spec_total_before_scaling(new, old);
        let status = calculate(&self.all(new, old), new.map(|i| &self.rss[i]), total, &self.d, &self.now.text);
        self.set_status(status);
    }

    /// `syncRolloutStatus`: counts, `Available`, `Progressing` (with the deadline) and
    /// `ReplicaFailure`; when nothing changed, a look again at the deadline.
    pub fn sync_rollout_status(&mut self, new: Option<usize>, old: &[usize]) {
        let total = self.spec_total_before_scaling(new, old);
        let d = &self.d;
        let new_rs = new.map(|i| &self.rss[i]);
        let mut status = calculate(&self.all(new, old), new_rs, total, d, &self.now.text);
        if !d.has_progress_deadline() {
            status.remove_condition(reason::PROGRESSING);
        }
        let current = d.status.condition(reason::PROGRESSING).cloned();
        let complete_already =
            status.replicas == status.updated_replicas && current.as_ref().is_some_and(|c| c.reason == reason::NEW_RS_AVAILABLE);
        if d.has_progress_deadline() && !complete_already {
            let subject = |verb: &str| match new_rs {
                Some(rs) => format!("ReplicaSet {:?} {verb}", rs.metadata.name),
                None => format!("Deployment {:?} {verb}", d.metadata.name),
            };
            let now = &self.now.text;
            if complete(d, &status) {
                let c = Condition::new(reason::PROGRESSING, "True", reason::NEW_RS_AVAILABLE, subject("has successfully progressed."), now);
                status.set_condition(c);
            } else if progressing(d, &status) {
                let mut c = Condition::new(reason::PROGRESSING, "True", reason::RS_UPDATED, subject("is progressing."), now);
                if let Some(current) = &current {
                    if current.status == "True" {
                        c.last_transition_time.clone_from(&current.last_transition_time);
                    }
                    status.remove_condition(reason::PROGRESSING);
                }
                status.set_condition(c);
            } else if timed_out(d, &status, self.now.millis) {
                let c = Condition::new(reason::PROGRESSING, "False", reason::TIMED_OUT, subject("has timed out progressing."), now);
                status.set_condition(c);
            }
        }
        match self.replica_failure(new, old) {
            Some(c) => status.set_condition(c),
            None => status.remove_condition(reason::REPLICA_FAILURE),
        }
        if status == self.d.status {
            self.requeue_stuck(&status);
        }
        self.set_status(status);
    }

    /// `getReplicaFailures`: the new ReplicaSet's `ReplicaFailure`, else the first of any.
    fn replica_failure(&self, new: Option<usize>, old: &[usize]) -> Option<Condition> {
        let of = |rs: &ReplicaSet| {
            rs.status.conditions.iter().find(|c| c.type_ == reason::REPLICA_FAILURE).map(|c| Condition {
                type_: c.type_.clone(),
                status: c.status.clone(),
                last_update_time: c.last_transition_time.clone(),
                last_transition_time: c.last_transition_time.clone(),
                reason: c.reason.clone(),
                message: c.message.clone(),
            })
        };
        new.and_then(|i| of(&self.rss[i])).or_else(|| self.all(new, old).into_iter().find_map(of))
    }

    /// `requeueStuckDeployment`: look again when the progress deadline passes.
    fn requeue_stuck(&mut self, status: &DeploymentStatus) {
        let Some(current) = self.d.status.condition(reason::PROGRESSING) else { return };
        if !self.d.has_progress_deadline() || complete(&self.d, status) || current.reason == reason::TIMED_OUT {
            return;
        }
        let Some(left) = deadline_left(&self.d, current, self.now.millis) else { return };
        // KCM: under a second, a rate-limited requeue (at once, then backing off); else the
        // deadline plus a second.
        let after = if left < 1000 {
            Duration::from_millis(u64::try_from(left.max(0)).unwrap_or(0) + 50)
        } else {
            Duration::from_millis(u64::try_from(left).unwrap_or(0) + 1000)
        };
        self.requeue_after(after);
    }

    /// `checkPausedConditions`: `Progressing` Unknown with `DeploymentPaused` while paused,
    /// `DeploymentResumed` once resumed (a timed-out rollout keeps its condition).
    pub fn check_paused_conditions(&mut self) {
        if !self.d.has_progress_deadline() {
            return;
        }
        let current = self.d.status.condition(reason::PROGRESSING);
        if current.is_some_and(|c| c.reason == reason::TIMED_OUT) {
            return;
        }
        let paused_marked = current.is_some_and(|c| c.reason == reason::PAUSED);
        if self.d.spec.paused && !paused_marked {
            self.set_condition(reason::PROGRESSING, "Unknown", reason::PAUSED, "Deployment is paused".into());
        } else if !self.d.spec.paused && paused_marked {
            self.set_condition(reason::PROGRESSING, "Unknown", reason::RESUMED, "Deployment is resumed".into());
        }
    }
}
