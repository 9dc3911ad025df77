//! `replicaset`: the `apps/v1` ReplicaSet controller as a wasmloop plugin, with
//! kube-controller-manager v1.20's semantics (`pkg/controller/replicaset/`), checked against
//! KCM itself on the same API server by `tests/tests/kcm_parity.rs`.
//!
//! For each ReplicaSet it
//! - **claims** Pods as KCM's `ClaimPods` does: active Pods (not terminating, not Succeeded or
//!   Failed) it controls and that match the selector are its own; matching orphans are
//!   **adopted** (a JSON patch adding the controller reference, guarded by the Pod's uid and
//!   resourceVersion), never while the ReplicaSet is being deleted; Pods it controls that no longer
//!   match are **released** (the reference removed, guarded by a `test` of its uid); Pods
//!   controlled by another owner are neither adopted nor counted;
//! - keeps `spec.replicas` of them: missing Pods are created from the template with
//!   `generateName: <replicaset>-` (the host's expectations make sure a stale cache never
//!   creates twice, see `host/src/controller/expectations.rs`), surplus Pods deleted in KCM's
//!   order ([`rank`]); at most 500 of either per reconcile (KCM's `burstReplicas`); nothing while
//!   the ReplicaSet is being deleted;
//! - writes the status KCM writes, only when it changes: `replicas`, `fullyLabeledReplicas`,
//!   `readyReplicas`, `availableReplicas` (ready for `minReadySeconds`, rechecked when the next
//!   Pod becomes available), `observedGeneration`, and the `ReplicaFailure` condition while
//!   creating or deleting Pods fails (the host passes the failed action's error as
//!   `request.last_error`), removed once it succeeds.
//!
//! It reads its Pods as packed metadata (`wasmloop_sdk::meta::list_packed`, contract 0.3.1)
//! with four declared fields (`model::POD_FIELDS`): their JSON stays in the host, which
//! extracts what the controller needs in one native pass; only the ReplicaSet is parsed here.
//!
//! Where it differs from KCM: the host sends the creates and deletes of one reconcile in
//! slow-start batches as KCM does, stopping at the first failing batch, but a reconcile's first
//! batch is the size this controller's calls have proven rather than always one
//! (`host/src/controller/slow_start.rs`; one again after any failure); Events about each created or
//! deleted Pod are not recorded (the host records failures); a reconcile whose creates or deletes
//! close the gap to `spec.replicas` (at most one burst) leaves the status they are about to change
//! to the reconcile that sees them (the host parks the key until its cache does), unless it
//! reports a failure or a new spec (KCM writes both, the first one stale as it lands); the
//! co-location rank of the deletion order counts Pods *controlled* by ReplicaSets of the same
//! controller, where KCM counts Pods matching their selectors.

mod model;
mod rank;

use std::collections::{BTreeMap, BTreeSet};

use serde_json::{Map, Value, json};
use wasmloop_sdk::{Error, Metadata, ObjectKey, Outcome, Patch, Reconciler, Request, ResultExt, cache, kinds, meta, time};

use model::{POD_FIELDS, Pod, ReplicaSet, RsStatus};

/// Most Pods created or deleted by one reconcile (KCM's `burstReplicas`).
pub const BURST_REPLICAS: usize = 500;

/// The reconciler.
pub struct ReplicaSetReconciler;

impl Reconciler for ReplicaSetReconciler {
    fn metadata() -> Metadata {
        let metadata = Metadata::new("replicaset", env!("CARGO_PKG_VERSION")).reconciles(kinds::REPLICA_SET).owns(kinds::POD);
        POD_FIELDS.iter().fold(metadata, |m, path| m.field(kinds::POD, *path))
    }

    fn reconcile(req: Request) -> Result<Outcome, Error> {
        let Some(raw) = cache::get_raw(&req.key.kind, req.key.ns(), &req.key.name)? else {
            return Ok(Outcome::new()); // Gone: garbage collection removes its Pods.
        };
        let rs: ReplicaSet = serde_json::from_str(&raw).context("parsing the ReplicaSet")?;
        let desired = usize::try_from(rs.spec.replicas.unwrap_or(1))
            .map_err(|_| Error::permanent(format!("spec.replicas is negative: {:?}", rs.spec.replicas)))?;
        rs.spec.selector.validate().map_err(Error::permanent)?;
        let ns = req.key.ns();

        // Candidates: Pods matching the selector (filtered by the cache) and Pods this
        // ReplicaSet controls (which may have stopped matching), as packed metadata: their JSON
        // stays in the host.
        let matching = meta::list_packed(&kinds::POD, ns, Some(&rs.spec.selector.to_query())).context("listing matching Pods")?;
        let owned = meta::owned_by_packed(&kinds::POD, rs.metadata.uid.as_str()).context("listing owned Pods")?;
        let mut seen = BTreeSet::new();
        let mut pods: Vec<Pod<'_>> = Vec::new();
        for view in matching.decode()?.into_iter().chain(owned.decode()?) {
            if seen.insert(view.uid) {
                pods.push(Pod::from_meta(view).map_err(Error::permanent)?);
            }
        }

        let mut out = Outcome::new();
        let claimed = claim(&rs, &req.key, &pods, &mut out);
        let failure = req.last_error.as_deref().filter(|e| is_manage_error(e));
        let now = time::now();
        let status = Status::observe(&rs, &claimed, desired, failure, now);
        if !status.matches(&rs) && !status_waits_for_the_gap(&rs, claimed.len(), desired, failure) {
            out = out.status_key(req.key.clone(), status.to_json());
        }
        if rs.metadata.is_deleting() {
            return Ok(out);
        }
        if claimed.len() < desired {
            let owner = controller_ref(&rs, &req.key);
            for _ in 0..(desired - claimed.len()).min(BURST_REPLICAS) {
                out = out.create(&new_pod(&rs, ns, &owner));
            }
        } else if claimed.len() > desired {
            let surplus = (claimed.len() - desired).min(BURST_REPLICAS);
            let colocated = colocated(&rs, ns)?;
            for pod in rank::deletion_order(claimed, &colocated).iter().take(surplus) {
                out = out.delete_key(kinds::POD.key(ns, pod.metadata.name));
            }
        }
        if let Some(after) = status.next_available_in {
            out = out.requeue_after(after);
        }
        Ok(out)
    }
}

wasmloop_sdk::export_reconciler!(ReplicaSetReconciler);

/// Whether this reconcile leaves its status to the next one: its creates or deletes close the
/// gap to `desired`, so the status would be stale the moment they land, and the host parks the
/// key until its cache shows them and then reconciles it again, which writes the status they
/// produced (one write instead of two). Written now all the same: a failure to report, a gap
/// wider than one burst (progress worth showing), and a spec the status does not name yet
/// (`observedGeneration` tells whoever changed it that the controller saw it) unless it is the
/// first spec of a ReplicaSet that has no status yet.
fn status_waits_for_the_gap(rs: &ReplicaSet<'_>, claimed: usize, desired: usize, failure: Option<&str>) -> bool {
    let closes_gap = claimed != desired && claimed.abs_diff(desired) <= BURST_REPLICAS;
    let observed = rs.status.as_ref().and_then(|s| s.observed_generation);
    let spec_seen = match (rs.metadata.generation, observed) {
        (Some(g), Some(o)) => g == o,
        (Some(g), None) => g == 1,
        (None, _) => true,
    };
    closes_gap && spec_seen && failure.is_none() && !rs.metadata.is_deleting()
}

/// KCM's `ClaimPods`: the active Pods this ReplicaSet owns after adopting matching orphans
/// (patches added to `out`) and releasing owned Pods that stopped matching.
fn claim<'p, 'a>(rs: &ReplicaSet<'_>, key: &ObjectKey, pods: &'p [Pod<'a>], out: &mut Outcome) -> Vec<&'p Pod<'a>> {
    let uid = rs.metadata.uid.as_str();
    let deleting = rs.metadata.is_deleting();
    let mut claimed = Vec::new();
    for pod in pods.iter().filter(|p| p.is_active()) {
        let matches = rs.spec.selector.matches(&pod.metadata.labels);
        let pod_key = kinds::POD.key(key.ns(), pod.metadata.name);
        match pod.metadata.controller_uid() {
            Some(owner) if owner == uid && matches => claimed.push(pod),
            Some(owner) if owner == uid && !deleting => {
                let i = pod.metadata.owner_index(uid).expect("the controller reference is an owner reference");
                let path = format!("/metadata/ownerReferences/{i}");
                let ops = json!([{"op": "test", "path": format!("{path}/uid"), "value": uid}, {"op": "remove", "path": path}]);
                *out = std::mem::take(out).patch(Patch::json(pod_key, ops).if_uid(pod.metadata.uid));
            }
            Some(_) => {}
            None if matches && !deleting => {
                let reference = controller_ref(rs, key);
                // An empty list reads as none: adding the whole list replaces an empty one.
                let ops = if !pod.metadata.owner_references.is_empty() {
                    json!([{"op": "add", "path": "/metadata/ownerReferences/-", "value": reference}])
                } else {
                    json!([{"op": "add", "path": "/metadata/ownerReferences", "value": [reference]}])
                };
                let patch = Patch::json(pod_key, ops).if_uid(pod.metadata.uid).if_resource_version(pod.metadata.resource_version);
                *out = std::mem::take(out).patch(patch);
                claimed.push(pod);
            }
            None => {}
        }
    }
    claimed
}

/// Whether the previous reconcile failed creating or deleting Pods (the host's action errors
/// start with the verb): what KCM reports as `ReplicaFailure`.
fn is_manage_error(e: &str) -> bool {
    e.starts_with("create ") || e.starts_with("delete ")
}

fn controller_ref(rs: &ReplicaSet<'_>, key: &ObjectKey) -> Value {
    json!({
        "apiVersion": "apps/v1", "kind": "ReplicaSet", "name": key.name, "uid": rs.metadata.uid.as_str(),
        "controller": true, "blockOwnerDeletion": true,
    })
}

/// A Pod from the template (KCM's `GetPodFromTemplate`).
fn new_pod(rs: &ReplicaSet<'_>, ns: Option<&str>, owner: &Value) -> Value {
    let t = &rs.spec.template;
    let mut meta = Map::new();
    meta.insert("generateName".into(), format!("{}-", rs.metadata.name.as_str()).into());
    if let Some(ns) = ns {
        meta.insert("namespace".into(), ns.into());
    }
    if let Some(l) = &t.metadata.labels {
        meta.insert("labels".into(), Value::Object(l.clone()));
    }
    if let Some(a) = &t.metadata.annotations {
        meta.insert("annotations".into(), Value::Object(a.clone()));
    }
    if let Some(f) = &t.metadata.finalizers {
        meta.insert("finalizers".into(), Value::Array(f.clone()));
    }
    meta.insert("ownerReferences".into(), json!([owner]));
    json!({"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": t.spec.clone().unwrap_or_else(|| json!({}))})
}

/// Active Pods per node controlled by ReplicaSets with the same controller as `rs` (a
/// Deployment's), for the deletion rank; empty for a ReplicaSet without a controller.
fn colocated(rs: &ReplicaSet<'_>, ns: Option<&str>) -> Result<BTreeMap<String, usize>, Error> {
    let mut on_node = BTreeMap::new();
    let Some(controller) = rs.metadata.controller_uid() else { return Ok(on_node) };
    for raw in cache::list_raw(&kinds::REPLICA_SET, ns, None).context("listing ReplicaSets")? {
        let related: ReplicaSet<'_> = serde_json::from_str(&raw).context("parsing a ReplicaSet")?;
        if related.metadata.controller_uid() != Some(controller) {
            continue;
        }
        let owned = meta::owned_by_packed(&kinds::POD, related.metadata.uid.as_str())?;
        for view in owned.decode()? {
            let pod = Pod::from_meta(view).map_err(Error::permanent)?;
            if pod.is_active() {
                *on_node.entry(pod.node_name().to_owned()).or_insert(0) += 1;
            }
        }
    }
    Ok(on_node)
}

/// The status this reconcile observed (KCM's `calculateStatus`).
struct Status {
    replicas: usize,
    fully_labeled: usize,
    ready: usize,
    available: usize,
    observed_generation: Option<i64>,
    conditions: Vec<Value>,
    /// When to look again for a ready Pod becoming available (KCM requeues after
    /// `minReadySeconds` when all are ready but not all available; this waits only as long as
    /// the first one needs).
    next_available_in: Option<std::time::Duration>,
}

impl Status {
    fn observe(rs: &ReplicaSet<'_>, claimed: &[&Pod<'_>], desired: usize, failure: Option<&str>, now: i64) -> Self {
        let template_labels = rs.spec.template.metadata.labels.as_ref();
        let min_ready = rs.spec.min_ready_seconds.unwrap_or(0).max(0);
        let (mut fully_labeled, mut ready, mut available, mut next) = (0, 0, 0, None::<i64>);
        for pod in claimed {
            if template_labels.is_none_or(|t| t.iter().all(|(k, v)| pod.metadata.label(k) == v.as_str())) {
                fully_labeled += 1;
            }
            if pod.is_ready() {
                ready += 1;
                let since = pod.ready_since().and_then(time::parse);
                match since {
                    _ if min_ready == 0 => available += 1,
                    Some(t) if t + min_ready < now => available += 1,
                    Some(t) => next = Some(next.map_or(t + min_ready - now, |n: i64| n.min(t + min_ready - now))),
                    None => {}
                }
            }
        }
        let mut conditions = rs.status.as_ref().map(|s| s.conditions.clone()).unwrap_or_default();
        let has_failure = conditions.iter().any(|c| c["type"] == "ReplicaFailure");
        match failure {
            Some(message) if !has_failure => {
                let reason = if claimed.len() < desired { "FailedCreate" } else { "FailedDelete" };
                conditions.push(json!({
                    "type": "ReplicaFailure", "status": "True", "lastTransitionTime": time::format(now),
                    "reason": reason, "message": message,
                }));
            }
            None if has_failure => conditions.retain(|c| c["type"] != "ReplicaFailure"),
            _ => {}
        }
        Status {
            replicas: claimed.len(),
            fully_labeled,
            ready,
            available,
            observed_generation: rs.metadata.generation,
            conditions,
            next_available_in: next.map(|n| std::time::Duration::from_secs(u64::try_from(n.max(1)).unwrap_or(1))),
        }
    }

    fn matches(&self, rs: &ReplicaSet<'_>) -> bool {
        let empty = RsStatus::default();
        let c = rs.status.as_ref().unwrap_or(&empty);
        let n = |v: Option<i64>| v.unwrap_or(0);
        n(c.replicas) == self.replicas as i64
            && n(c.fully_labeled_replicas) == self.fully_labeled as i64
            && n(c.ready_replicas) == self.ready as i64
            && n(c.available_replicas) == self.available as i64
            && (self.observed_generation.is_none() || c.observed_generation == self.observed_generation)
            && c.conditions == self.conditions
    }

    fn to_json(&self) -> Value {
        let mut s = json!({
            "replicas": self.replicas,
            "fullyLabeledReplicas": self.fully_labeled,
            "readyReplicas": self.ready,
            "availableReplicas": self.available,
            "conditions": if self.conditions.is_empty() { Value::Null } else { Value::Array(self.conditions.clone()) },
        });
        if let Some(g) = self.observed_generation {
            s["observedGeneration"] = g.into();
        }
        s
    }
}

#[cfg(test)]
mod tests;
