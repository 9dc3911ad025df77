//! `deployment`: the `apps/v1` Deployment controller as a wasmloop plugin, with
//! kube-controller-manager v1.20's semantics (`pkg/controller/deployment/`), run beside the
//! `replicaset` plugin (which manages the Pods) and checked against KCM itself on the same API
//! server by `tests/tests/deployment_parity.rs`.
//!
//! For each Deployment it
//! - **claims** its ReplicaSets ([`claim`]): adopts matching orphans, releases those that stopped
//!   matching;
//! - finds the **new ReplicaSet** (the one whose template equals the Deployment's but for the
//!   `pod-template-hash` label, [`template`]) or creates it as KCM names it,
//!   `<deployment>-<hash>` with KCM's hash of the template and `status.collisionCount`
//!   ([`hash`]); keeps the **revision** annotations ([`annotations`]) so `kubectl rollout
//!   history` and `kubectl rollout undo` work;
//! - **rolls out** ([`rollout`]): RollingUpdate within maxSurge/maxUnavailable (counts or
//!   percentages, rounded as KCM, [`replicas`]), or Recreate; a change of `replicas` during a
//!   rollout (or while **paused**) is spread over the ReplicaSets in proportion;
//! - deletes old ReplicaSets beyond `revisionHistoryLimit` once the rollout is complete;
//! - writes the **status** KCM writes ([`status`]): the counts, `Available`, `Progressing`
//!   (with `progressDeadlineSeconds`: `ProgressDeadlineExceeded`), `ReplicaFailure`,
//!   `collisionCount`, which `kubectl rollout status` reads;
//! - honours the `deprecated.deployment.rollback.to` annotation ([`rollback`]).
//!
//! Where it differs from KCM (each one also said where it is implemented):
//! - KCM writes as it goes, so a sync that changes an object twice conflicts with itself and is
//!   retried; here one sync's changes to an object are one write ([`sync`]): a rollout can take
//!   a step one sync earlier, the states it passes through and ends in are KCM's.
//! - Pod events do not reach this controller (a Pod's controller is a ReplicaSet, and the
//!   host maps an event to its object's controller only): a Recreate rollout whose old
//!   ReplicaSets count no Pods but whose Pods are still terminating looks again every second
//!   ([`rollout::OLD_PODS_POLL`]) where KCM waits for the last Pod's deletion event.
//! - An orphan ReplicaSet that appears (or starts matching) after its Deployment was synced is
//!   adopted at the Deployment's next sync, not at once: the host has no mapping from an
//!   object's labels to the selectors that match them (KCM's `getDeploymentsForReplicaSet`).
//! - A template holding something the pod-template hash cannot rebuild from JSON (a set
//!   timestamp, a quantity beyond int64) gets a hash of its own, not KCM's ([`hash`]).

pub mod annotations;
mod claim;
pub mod hash;
pub mod model;
pub mod replicas;
mod rollback;
pub mod rollout;
pub mod status;
pub mod sync;
pub mod template;

use wasmloop_sdk::{Error, EventType, Metadata, Outcome, Reconciler, Request, Watch, cache, kinds};

use model::{Deployment, RECREATE, ROLLING_UPDATE};
use sync::{Now, Stop, Sync};

/// The reconciler.
pub struct DeploymentReconciler;

impl Reconciler for DeploymentReconciler {
    fn metadata() -> Metadata {
        Metadata::new("deployment", env!("CARGO_PKG_VERSION"))
            .reconciles(kinds::DEPLOYMENT)
            .owns(kinds::REPLICA_SET)
            // Read (a Recreate rollout waits for old Pods to go), never mapped: a Pod's
            // controller is a ReplicaSet, so Owner maps its events to no Deployment.
            .watch(Watch::new(kinds::POD, wasmloop_sdk::Mapping::Owner))
            .field(kinds::POD, "status.phase")
    }

    fn reconcile(req: Request) -> Result<Outcome, Error> {
        reconcile_at(req, Now::wall())
    }
}

wasmloop_sdk::export_reconciler!(DeploymentReconciler);

/// One reconcile at `now`.
pub fn reconcile_at(req: Request, now: Now) -> Result<Outcome, Error> {
    let Some(raw) = cache::get_raw(&req.key.kind, req.key.ns(), &req.key.name)? else {
        return Ok(Outcome::new()); // Gone: garbage collection removes its ReplicaSets.
    };
    let d: Deployment = serde_json::from_str(&raw).map_err(|e| Error::permanent(format!("parsing the Deployment: {e}")))?;
    let mut s = Sync::new(req.key, d, now, req.last_error);
    let flow = sync_deployment(&mut s);
    let out = s.into_outcome();
    match flow {
        Ok(()) | Err(Stop::Requeue) => Ok(out),
        Err(Stop::Error(e)) if out.is_empty() => Err(e),
        Err(Stop::Error(e)) => Err(e.with_actions(out)),
    }
}

/// `syncDeployment`.
fn sync_deployment(s: &mut Sync) -> sync::Flow {
    let selector = &s.d.spec.selector;
    if selector.match_labels.is_empty() && selector.match_expressions.is_empty() {
        s.event(EventType::Warning, "SelectingAll", "This deployment is selecting all pods. A non-empty selector is required.".into());
        let generation = s.d.metadata.generation.unwrap_or(0);
        if s.d.status.observed_generation < generation {
            s.d.status.observed_generation = generation;
        }
        return Ok(());
    }
    s.claim()?;
    if s.d.metadata.is_deleting() {
        return s.sync_status_only();
    }
    s.check_paused_conditions();
    if s.d.spec.paused {
        return s.sync();
    }
    if s.rollback_to().is_some() {
        return s.rollback();
    }
    if s.is_scaling_event()? {
        return s.sync();
    }
    match s.d.spec.strategy.type_.as_str() {
        RECREATE => s.rollout_recreate(),
        ROLLING_UPDATE => s.rollout_rolling(),
        other => Err(Stop::Error(Error::permanent(format!("unexpected deployment strategy type: {other}")))),
    }
}

#[cfg(test)]
mod tests;
