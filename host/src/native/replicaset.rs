//! The ReplicaSet algorithm (the seed's Reconcile), natively: count owned Pods through the
//! owner index, create the missing ones with deterministic names `<rs>-<n>` (lowest free
//! ordinals, so a create repeated against a stale cache is an AlreadyExists, i.e. done),
//! delete surplus ones (highest ordinals first), write status only when it differs.

use serde_json::{Value, json};

use crate::actions::Action;
use crate::cache::{CacheRead, CachedObject, OWNER_INDEX};
use crate::controller::{Mapping, Outcome, ReconcileError, Reconciler, ReconcilerSpec, Request, WatchSpec};
use crate::kinds::{KindRef, ObjectKey};

/// `apps/v1` ReplicaSet controller, natively.
pub struct ReplicaSetReconciler {
    spec: ReconcilerSpec,
}

impl ReplicaSetReconciler {
    pub fn new(name: impl Into<String>) -> Self {
        Self {
            spec: ReconcilerSpec {
                name: name.into(),
                version: env!("CARGO_PKG_VERSION").to_string(),
                reconciles: rs_kind(),
                selector: None,
                watches: vec![WatchSpec { kind: pod_kind(), mapping: Mapping::Owner, selector: None }],
                indexes: vec![],
                fields: vec![],
            },
        }
    }
}

fn rs_kind() -> KindRef {
    KindRef::new("apps/v1", "ReplicaSet")
}

fn pod_kind() -> KindRef {
    KindRef::new("v1", "Pod")
}

impl Reconciler for ReplicaSetReconciler {
    fn spec(&self) -> &ReconcilerSpec {
        &self.spec
    }

    fn reconcile(&self, request: &Request, cache: &dyn CacheRead) -> Result<Outcome, ReconcileError> {
        let key = &request.key;
        let transient = |e: crate::cache::Error| ReconcileError::Transient(e.to_string());
        let Some(rs) = cache.get(&key.kind, key.namespace.as_deref(), &key.name).map_err(transient)? else {
            return Ok(Outcome::default()); // gone: owner-reference GC removes its Pods
        };
        if rs.is_deleting() {
            return Ok(Outcome::default());
        }
        let rs_value = rs.value();
        let pods: Vec<_> = cache
            .by_index(&pod_kind(), OWNER_INDEX, rs.uid())
            .map_err(transient)?
            .into_iter()
            .filter(|p| !p.is_deleting())
            .collect();
        let desired = rs_value.pointer("/spec/replicas").and_then(Value::as_u64).unwrap_or(1) as usize;
        let mut actions = Vec::new();
        if pods.len() < desired {
            let used: std::collections::HashSet<usize> = pods.iter().filter_map(|p| ordinal(rs.name(), p.name())).collect();
            let free = (0..).filter(|n| !used.contains(n)).take(desired - pods.len());
            actions.extend(free.map(|n| Action::Create { object: pod_for(&rs, &rs_value, n) }));
        } else if pods.len() > desired {
            let mut by_ordinal: Vec<_> = pods.iter().map(|p| (ordinal(rs.name(), p.name()), p)).collect();
            // Pods without an ordinal name first, then the highest ordinals.
            by_ordinal.sort_by(|a, b| b.0.map(|x| x as i64).unwrap_or(i64::MAX).cmp(&a.0.map(|x| x as i64).unwrap_or(i64::MAX)));
            actions.extend(by_ordinal.iter().take(pods.len() - desired).map(|(_, p)| {
                Action::delete(ObjectKey::new(pod_kind(), p.namespace().map(str::to_string), p.name()))
            }));
        }
        let labelled = pods.iter().filter(|p| template_labels_match(&rs_value, p)).count();
        let status = json!({
            "replicas": pods.len(),
            "fullyLabeledReplicas": labelled,
            "observedGeneration": rs.generation().unwrap_or(0),
        });
        let current = rs_value.get("status").cloned().unwrap_or(Value::Null);
        let differs = ["replicas", "fullyLabeledReplicas", "observedGeneration"]
            .iter()
            .any(|f| current.get(f).and_then(Value::as_u64).unwrap_or(0) != status[f].as_u64().unwrap_or(0));
        if differs {
            actions.push(Action::UpdateStatus { key: key.clone(), status });
        }
        Ok(Outcome { actions, requeue_after: None })
    }
}

/// `web-3` is ordinal 3 of ReplicaSet `web`.
fn ordinal(rs: &str, pod: &str) -> Option<usize> {
    pod.strip_prefix(rs)?.strip_prefix('-')?.parse().ok()
}

fn template_labels_match(rs: &Value, pod: &CachedObject) -> bool {
    match rs.pointer("/spec/template/metadata/labels").and_then(Value::as_object) {
        Some(labels) => labels.iter().all(|(k, v)| pod.label(k) == v.as_str()),
        None => true,
    }
}

fn pod_for(rs: &CachedObject, rs_value: &Value, n: usize) -> Value {
    let template = rs_value.pointer("/spec/template").cloned().unwrap_or_else(|| json!({}));
    let labels = template.pointer("/metadata/labels").cloned().unwrap_or_else(|| json!({}));
    json!({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": format!("{}-{n}", rs.name()),
            "namespace": rs.namespace(),
            "labels": labels,
            "ownerReferences": [{
                "apiVersion": "apps/v1", "kind": "ReplicaSet", "name": rs.name(), "uid": rs.uid(),
                "controller": true, "blockOwnerDeletion": true,
            }],
        },
        "spec": template.get("spec").cloned().unwrap_or_else(|| json!({})),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cache::CacheView;
    use crate::controller::Reason;

    fn rs(replicas: u64, status: Value) -> Value {
        json!({"apiVersion": "apps/v1", "kind": "ReplicaSet",
               "metadata": {"name": "web", "namespace": "shop", "uid": "rs-uid", "resourceVersion": "1", "generation": 1},
               "spec": {"replicas": replicas, "template": {"metadata": {"labels": {"app": "web"}},
                        "spec": {"containers": [{"name": "c", "image": "nginx"}]}}},
               "status": status})
    }

    fn pod(n: usize) -> Value {
        json!({"apiVersion": "v1", "kind": "Pod",
               "metadata": {"name": format!("web-{n}"), "namespace": "shop", "uid": format!("p{n}"), "resourceVersion": "1",
                            "labels": {"app": "web"},
                            "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "web", "uid": "rs-uid", "controller": true}]}})
    }

    fn run(objects: Vec<Value>) -> Outcome {
        let mut objects = objects;
        objects.push(json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "other", "namespace": "shop", "resourceVersion": "1"}}));
        let cache = CacheView::from_objects(objects).unwrap();
        let req = Request::new(ObjectKey::new(rs_kind(), Some("shop".into()), "web"), Reason::Event);
        ReplicaSetReconciler::new("rs").reconcile(&req, &cache).unwrap()
    }

    #[test]
    fn creates_missing_pods_with_the_lowest_free_ordinals() {
        let out = run(vec![rs(3, json!({})), pod(1)]);
        let names: Vec<_> = out.actions.iter().filter_map(|a| match a {
            Action::Create { object } => object.pointer("/metadata/name").and_then(Value::as_str).map(str::to_string),
            _ => None,
        }).collect();
        assert_eq!(names, vec!["web-0", "web-2"]);
        let Action::Create { object } = &out.actions[0] else { panic!() };
        assert_eq!(object.pointer("/metadata/ownerReferences/0/uid"), Some(&json!("rs-uid")));
        assert_eq!(object.pointer("/spec/containers/0/image"), Some(&json!("nginx")));
    }

    #[test]
    fn deletes_the_highest_ordinals_first() {
        let out = run(vec![rs(1, json!({})), pod(0), pod(1), pod(2)]);
        let deleted: Vec<_> = out.actions.iter().filter_map(|a| match a {
            Action::Delete { key, .. } => Some(key.name.clone()),
            _ => None,
        }).collect();
        assert_eq!(deleted, vec!["web-2", "web-1"]);
    }

    #[test]
    fn converged_replicaset_yields_no_actions() {
        let status = json!({"replicas": 2, "fullyLabeledReplicas": 2, "observedGeneration": 1});
        assert_eq!(run(vec![rs(2, status), pod(0), pod(1)]).actions, vec![]);
        let out = run(vec![rs(2, json!({})), pod(0), pod(1)]);
        assert!(matches!(out.actions.as_slice(), [Action::UpdateStatus { .. }]), "{:?}", out.actions);
    }
}
