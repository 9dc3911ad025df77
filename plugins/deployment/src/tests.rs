//! The controller on the SDK's fake cache, with a stand-in ReplicaSet controller: each
//! scenario drives KCM's logic one sync at a time and checks what it wrote.

use std::cell::Cell;

use proptest::prelude::*;
use serde_json::{Value, json};
use wasmloop_sdk::testing::FakeCache;
use wasmloop_sdk::{Action, ObjectKey, PatchType};

use super::*;
use crate::annotations::{DESIRED_REPLICAS, MAX_REPLICAS, REVISION, REVISION_HISTORY};

/// 2026-01-01T00:00:00Z.
const T0: i64 = 1_767_225_600;

fn key() -> ObjectKey {
    kinds::DEPLOYMENT.key(Some("shop"), "web")
}

fn template(image: &str) -> Value {
    json!({"metadata": {"labels": {"app": "web"}, "creationTimestamp": null},
           "spec": {"containers": [{"name": "web", "image": image}]}})
}

/// A Deployment of `replicas` with the default strategy (25% / 25%), as the API server stores it.
fn deployment(replicas: i32, image: &str) -> Value {
    json!({
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": "web", "namespace": "shop", "uid": "d-1", "generation": 1, "resourceVersion": "1",
                     "creationTimestamp": "2026-01-01T00:00:00Z"},
        "spec": {"replicas": replicas, "selector": {"matchLabels": {"app": "web"}}, "template": template(image),
                 "strategy": {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": "25%", "maxUnavailable": "25%"}},
                 "revisionHistoryLimit": 10, "progressDeadlineSeconds": 600},
    })
}

/// The fake cluster, its clock (seconds after [`T0`]) and a stand-in ReplicaSet controller.
struct World {
    fake: FakeCache,
    clock: Cell<i64>,
}

impl World {
    fn new(d: Value) -> Self {
        let w = Self { fake: FakeCache::for_reconciler::<DeploymentReconciler>(), clock: Cell::new(0) };
        w.fake.add(d);
        w
    }

    fn now(&self) -> Now {
        Now::at((T0 + self.clock.get()) * 1000)
    }

    fn tick(&self, secs: i64) {
        self.clock.set(self.clock.get() + secs);
    }

    fn deployment(&self) -> Value {
        self.fake.get(&key()).expect("the Deployment")
    }

    /// Change the Deployment's spec as a user would (the API server bumps the generation).
    fn edit(&self, f: impl FnOnce(&mut Value)) {
        let mut d = self.deployment();
        f(&mut d["spec"]);
        d["metadata"]["generation"] = json!(d["metadata"]["generation"].as_i64().unwrap_or(1) + 1);
        self.fake.add(d);
    }

    fn reconcile(&self) -> Outcome {
        self.fake.enter(|| reconcile_at(Request::new(key()), self.now())).expect("reconcile")
    }

    /// Execute `out` as the v1.20 API server would: the fake, plus what it does not model —
    /// annotations written through `deployments/status` are kept (the status strategy resets
    /// only spec and labels), created objects get a creation time.
    fn execute(&self, out: &Outcome) {
        self.fake.execute(out);
        for a in &out.actions {
            match a {
                Action::Patch(p) if p.status => {
                    if let (Some(ann), Some(mut obj)) = (p.body.pointer("/metadata/annotations"), self.fake.get(&p.key)) {
                        for (k, v) in ann.as_object().into_iter().flatten() {
                            match v {
                                Value::Null => drop(obj["metadata"]["annotations"].as_object_mut().and_then(|a| a.remove(k))),
                                v => obj["metadata"]["annotations"][k] = v.clone(),
                            }
                        }
                        self.fake.add(obj);
                    }
                }
                Action::Create(obj) => {
                    let k = wasmloop_sdk::object::key(obj).unwrap();
                    // The FakeCache stamps a creation time from its own clock; these tests keep
                    // theirs (`tick`), which orders ReplicaSets as KCM does.
                    let mut o = self.fake.get(&k).unwrap();
                    o["metadata"]["creationTimestamp"] = json!(wasmloop_sdk::time::format(T0 + self.clock.get()));
                    if o["metadata"].get("generation").is_none() {
                        o["metadata"]["resourceVersion"] = json!("1");
                        o["metadata"]["generation"] = json!(1);
                    }
                    self.fake.add(o);
                }
                _ => {}
            }
        }
    }

    /// One sync, executed.
    fn step(&self) -> Outcome {
        let out = self.reconcile();
        self.execute(&out);
        out
    }

    fn replica_sets(&self) -> Vec<Value> {
        let mut rss = self.fake.objects(&kinds::REPLICA_SET);
        rss.sort_by_key(|rs| (rs["metadata"]["creationTimestamp"].as_str().unwrap_or("").to_owned(), rs["metadata"]["name"].to_string()));
        rss
    }

    /// The ReplicaSet controller, instantly: every ReplicaSet has its Pods, `available(rs)` of
    /// them available.
    fn rs_controller(&self, available: impl Fn(&Value) -> i64) {
        for mut rs in self.replica_sets() {
            let replicas = rs["spec"]["replicas"].as_i64().unwrap_or(1);
            let avail = available(&rs).min(replicas);
            rs["status"] = json!({"replicas": replicas, "readyReplicas": avail, "availableReplicas": avail,
                                  "observedGeneration": rs["metadata"]["generation"]});
            self.fake.add(rs);
        }
    }

    /// (name, spec.replicas) of each ReplicaSet, oldest first.
    fn sizes(&self) -> Vec<(String, i64)> {
        self.replica_sets()
            .iter()
            .map(|rs| (rs["metadata"]["name"].as_str().unwrap().to_owned(), rs["spec"]["replicas"].as_i64().unwrap()))
            .collect()
    }

    /// Sync until nothing is left to write, the ReplicaSets' Pods all available.
    fn settle(&self) {
        for _ in 0..50 {
            self.rs_controller(|rs| rs["spec"]["replicas"].as_i64().unwrap_or(1));
            if self.step().is_empty() {
                return;
            }
        }
        panic!("no fixed point: {:?}", self.sizes());
    }
}

fn rs_name(image: &str, collisions: Option<i32>) -> String {
    format!("web-{}", hash::compute(&template(image), collisions).value)
}

fn status_of(out: &Outcome) -> Value {
    out.patches().find(|p| p.status).map(|p| p.body.clone()).expect("a status write")
}

fn events(out: &Outcome) -> Vec<String> {
    out.events().map(|e| format!("{} {}", e.reason, e.message)).collect()
}

#[test]
fn metadata_reconciles_deployments_owns_replica_sets_and_reads_pods() {
    let m = DeploymentReconciler::metadata();
    assert_eq!(m.reconciles, Some(kinds::DEPLOYMENT));
    assert_eq!((&m.watches[0].kind, &m.watches[0].mapping), (&kinds::REPLICA_SET, &wasmloop_sdk::Mapping::Owner));
    assert_eq!(m.fields_of(&kinds::POD), vec!["status.phase"]);
}

#[test]
fn a_new_deployment_gets_its_replica_set_as_kcm_names_and_fills_it() {
    let w = World::new(deployment(10, "web:1"));
    let out = w.step();
    let rs = out.created().next().expect("the new ReplicaSet");
    let name = rs_name("web:1", None);
    let hash = name.trim_start_matches("web-");
    assert_eq!(rs["metadata"]["name"], name);
    assert_eq!(rs["metadata"]["labels"], json!({"app": "web", "pod-template-hash": hash}));
    assert_eq!(rs["spec"]["selector"], json!({"matchLabels": {"app": "web", "pod-template-hash": hash}}));
    assert_eq!(rs["spec"]["template"]["metadata"]["labels"], json!({"app": "web", "pod-template-hash": hash}));
    assert_eq!(rs["spec"]["replicas"], 10);
    assert_eq!(rs["metadata"]["annotations"], json!({REVISION: "1", DESIRED_REPLICAS: "10", MAX_REPLICAS: "13"}));
    assert_eq!(rs["metadata"]["ownerReferences"][0]["uid"], "d-1");
    assert_eq!(rs["metadata"]["ownerReferences"][0]["controller"], true);
    assert_eq!(events(&out), [format!("ScalingReplicaSet Scaled up replica set {name} to 10")]);
    let body = status_of(&out);
    assert_eq!(body["metadata"]["annotations"], json!({REVISION: "1"}));
    let conds = &body["status"]["conditions"];
    assert_eq!((&conds[0]["type"], &conds[0]["reason"]), (&json!("Progressing"), &json!("NewReplicaSetCreated")));
    assert_eq!(conds[0]["message"], format!("Created new replica set {name:?}"));
    assert_eq!(
        (&conds[1]["type"], &conds[1]["status"], &conds[1]["reason"]),
        (&json!("Available"), &json!("False"), &json!("MinimumReplicasUnavailable"))
    );
    // The status write is guarded by what was read.
    let p = out.patches().find(|p| p.status).unwrap();
    assert_eq!((p.patch_type, p.preconditions.resource_version.as_deref()), (PatchType::Merge, Some("1")));

    // Once its Pods are available: complete.
    w.settle();
    let s = &w.deployment()["status"];
    assert_eq!(
        (&s["replicas"], &s["updatedReplicas"], &s["availableReplicas"], &s["unavailableReplicas"]),
        (&json!(10), &json!(10), &json!(10), &json!(0))
    );
    let progressing = s["conditions"].as_array().unwrap().iter().find(|c| c["type"] == "Progressing").unwrap();
    assert_eq!(
        (&progressing["reason"], &progressing["message"]),
        (&json!("NewReplicaSetAvailable"), &json!(format!("ReplicaSet {name:?} has successfully progressed.")))
    );
    assert_eq!(w.deployment()["metadata"]["annotations"][REVISION], "1");
}

#[test]
fn a_rolling_update_stays_within_max_surge_and_max_unavailable() {
    let w = World::new(deployment(10, "web:1"));
    w.settle();
    w.edit(|spec| spec["template"] = template("web:2"));
    let (old, new) = (rs_name("web:1", None), rs_name("web:2", None));
    // KCM's first sync: the new one with maxSurge (3), the old one down by maxUnavailable (2).
    let out = w.step();
    assert_eq!(w.sizes(), [(old.clone(), 8), (new.clone(), 3)]);
    assert_eq!(
        events(&out),
        [format!("ScalingReplicaSet Scaled up replica set {new} to 3"), format!("ScalingReplicaSet Scaled down replica set {old} to 8")]
    );
    assert_eq!(w.fake.get(&kinds::REPLICA_SET.key(Some("shop"), &new)).unwrap()["metadata"]["annotations"][REVISION], "2");
    // Nothing new available yet: the old one at 8 leaves room for 2 more new ones (13 in all),
    // and no old one may go.
    w.rs_controller(|rs| if rs["metadata"]["name"] == json!(new.clone()) { 0 } else { 8 });
    w.step();
    assert_eq!(w.sizes(), [(old.clone(), 8), (new.clone(), 5)]);
    w.step();
    assert_eq!(w.sizes(), [(old.clone(), 8), (new.clone(), 5)]);
    // Then every step keeps Σ spec ≤ 13 as new Pods become available.
    for _ in 0..30 {
        w.rs_controller(|rs| rs["spec"]["replicas"].as_i64().unwrap());
        w.step();
        let total: i64 = w.sizes().iter().map(|(_, n)| n).sum();
        assert!(total <= 13, "{:?}", w.sizes());
    }
    assert_eq!(w.sizes(), [(old, 0), (new, 10)]);
}

#[test]
fn recreate_scales_old_to_zero_then_waits_for_their_pods() {
    let mut d = deployment(3, "web:1");
    d["spec"]["strategy"] = json!({"type": "Recreate"});
    let w = World::new(d);
    w.settle();
    w.edit(|spec| spec["template"] = template("web:2"));
    let (old, new) = (rs_name("web:1", None), rs_name("web:2", None));
    w.step();
    assert_eq!(w.sizes(), [(old.clone(), 0)], "old down first, no new one yet");
    // The old ReplicaSet still counts a Pod: wait.
    w.rs_controller(|_| 0);
    let mut rs = w.fake.get(&kinds::REPLICA_SET.key(Some("shop"), &old)).unwrap();
    rs["status"]["replicas"] = json!(1);
    w.fake.add(rs.clone());
    assert!(w.step().created().next().is_none());
    // Its Pod terminating: still waiting, looking again shortly.
    rs["status"]["replicas"] = json!(0);
    w.fake.add(rs.clone());
    w.fake.add(json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "old-pod", "namespace": "shop", "labels": {"app": "web"},
        "deletionTimestamp": "2026-01-01T00:00:00Z", "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet",
        "name": old, "uid": rs["metadata"]["uid"], "controller": true}]}, "status": {"phase": "Running"}}));
    let out = w.step();
    assert!(out.created().next().is_none());
    assert_eq!(out.requeue_after, Some(rollout::OLD_PODS_POLL));
    // Gone: the new one, at full size.
    w.fake.remove(&kinds::POD.key(Some("shop"), "old-pod"));
    w.step();
    assert_eq!(w.sizes(), [(old, 0), (new, 3)]);
}

#[test]
fn scaling_mid_rollout_is_proportional() {
    let w = World::new(deployment(10, "web:1"));
    w.settle();
    w.edit(|spec| spec["template"] = template("web:2"));
    w.step();
    let (old, new) = (rs_name("web:1", None), rs_name("web:2", None));
    assert_eq!(w.sizes(), [(old.clone(), 8), (new.clone(), 3)]);
    w.rs_controller(|rs| if rs["metadata"]["name"] == json!(new.clone()) { 0 } else { 8 });
    // 10 -> 20: 25 allowed (20 + 5 surge), 11 now: 14 to add. Each grows as if scaled from the
    // 13 it was last sized for to 25 (8 -> 15.4 -> 15, 3 -> 5.8 -> 6), the largest takes the
    // 4 left over.
    w.edit(|spec| spec["replicas"] = json!(20));
    let out = w.step();
    assert_eq!(w.sizes(), [(old.clone(), 19), (new.clone(), 6)]);
    assert_eq!(events(&out).len(), 2);
    // Both scaled for the new size.
    for rs in w.replica_sets() {
        assert_eq!(
            (&rs["metadata"]["annotations"][DESIRED_REPLICAS], &rs["metadata"]["annotations"][MAX_REPLICAS]),
            (&json!("20"), &json!("25"))
        );
    }
}

#[test]
fn a_paused_deployment_scales_but_does_not_roll_out() {
    let w = World::new(deployment(4, "web:1"));
    w.settle();
    w.edit(|spec| {
        spec["paused"] = json!(true);
        spec["template"] = template("web:2");
        spec["replicas"] = json!(6);
    });
    let out = w.step();
    assert!(out.created().next().is_none(), "no new ReplicaSet while paused");
    assert_eq!(w.sizes(), [(rs_name("web:1", None), 6)]);
    let progressing =
        status_of(&out)["status"]["conditions"].as_array().unwrap().iter().find(|c| c["type"] == "Progressing").cloned().unwrap();
    assert_eq!((&progressing["status"], &progressing["reason"]), (&json!("Unknown"), &json!("DeploymentPaused")));
    w.settle();
    w.edit(|spec| spec["paused"] = json!(false));
    let out = w.step();
    let conds = &status_of(&out)["status"]["conditions"];
    assert!(conds.as_array().unwrap().iter().any(|c| c["reason"] == "NewReplicaSetCreated"), "{conds}");
    w.settle();
    assert_eq!(w.sizes(), [(rs_name("web:1", None), 0), (rs_name("web:2", None), 6)]);
}

#[test]
fn rolling_back_revives_the_old_replica_set_with_the_next_revision() {
    let w = World::new(deployment(2, "web:1"));
    w.settle();
    w.edit(|spec| spec["template"] = template("web:2"));
    w.settle();
    assert_eq!(w.deployment()["metadata"]["annotations"][REVISION], "2");
    // `kubectl rollout undo`: the old ReplicaSet's template, without its hash label.
    w.edit(|spec| spec["template"] = template("web:1"));
    w.settle();
    let old = w.fake.get(&kinds::REPLICA_SET.key(Some("shop"), rs_name("web:1", None))).unwrap();
    assert_eq!((&old["metadata"]["annotations"][REVISION], &old["metadata"]["annotations"][REVISION_HISTORY]), (&json!("3"), &json!("1")));
    assert_eq!(w.deployment()["metadata"]["annotations"][REVISION], "3");
    assert_eq!(w.sizes(), [(rs_name("web:1", None), 2), (rs_name("web:2", None), 0)]);
}

#[test]
fn the_rollback_annotation_restores_a_revision() {
    let w = World::new(deployment(2, "web:1"));
    w.settle();
    w.edit(|spec| spec["template"] = template("web:2"));
    w.settle();
    let mut d = w.deployment();
    d["metadata"]["annotations"][annotations::ROLLBACK_TO] = json!("1");
    w.fake.add(d);
    let out = w.step();
    assert_eq!(events(&out), ["DeploymentRollback Rolled back deployment \"web\" to revision 1"]);
    let d = w.deployment();
    assert_eq!(d["spec"]["template"], template("web:1"));
    assert!(d["metadata"]["annotations"].get(annotations::ROLLBACK_TO).is_none());
    // Unknown revision: a warning, the annotation cleared.
    let mut d = w.deployment();
    d["metadata"]["annotations"][annotations::ROLLBACK_TO] = json!("7");
    w.fake.add(d);
    let out = w.step();
    assert_eq!(events(&out), ["DeploymentRollbackRevisionNotFound Unable to find the revision to rollback to."]);
}

#[test]
fn old_replica_sets_beyond_the_history_limit_are_deleted_once_complete() {
    let mut d = deployment(1, "web:0");
    d["spec"]["revisionHistoryLimit"] = json!(2);
    let w = World::new(d);
    w.settle();
    for v in 1..=4 {
        w.tick(1);
        w.edit(|spec| spec["template"] = template(&format!("web:{v}")));
        w.settle();
    }
    let names: Vec<String> = w.sizes().into_iter().map(|(n, _)| n).collect();
    assert_eq!(names, [rs_name("web:2", None), rs_name("web:3", None), rs_name("web:4", None)]);
}

#[test]
fn no_progress_within_the_deadline_times_out() {
    let mut d = deployment(2, "web:1");
    d["spec"]["progressDeadlineSeconds"] = json!(60);
    let w = World::new(d);
    w.step();
    w.rs_controller(|_| 0);
    let out = w.step();
    // No progress, not timed out: look again when the deadline passes (+1 s).
    let after = w.reconcile().requeue_after.or(out.requeue_after).expect("a look at the deadline");
    assert!((60..=62).contains(&after.as_secs()), "{after:?}");
    w.tick(61);
    let out = w.step();
    let c = status_of(&out)["status"]["conditions"].as_array().unwrap().iter().find(|c| c["type"] == "Progressing").cloned().unwrap();
    assert_eq!((&c["status"], &c["reason"]), (&json!("False"), &json!("ProgressDeadlineExceeded")));
    assert_eq!(c["message"], format!("ReplicaSet {:?} has timed out progressing.", rs_name("web:1", None)));
}

#[test]
fn orphans_are_adopted_and_replica_sets_that_stop_matching_released() {
    let w = World::new(deployment(2, "web:1"));
    let mut orphan = json!({"apiVersion": "apps/v1", "kind": "ReplicaSet",
        "metadata": {"name": "web-orphan", "namespace": "shop", "uid": "rs-o", "resourceVersion": "5", "labels": {"app": "web"},
                     "creationTimestamp": "2025-12-31T00:00:00Z"},
        "spec": {"replicas": 2, "selector": {"matchLabels": {"app": "web"}}, "template": template("web:1")}});
    w.fake.add(orphan.clone());
    let out = w.step();
    let adopt = out.patches().next().expect("an adoption");
    assert_eq!((adopt.key.name.as_str(), adopt.patch_type), ("web-orphan", PatchType::Json));
    assert!(out.created().next().is_none(), "the adopted ReplicaSet is the new one");
    // Relabeled out of the selector: released.
    orphan = w.fake.get(&kinds::REPLICA_SET.key(Some("shop"), "web-orphan")).unwrap();
    orphan["metadata"]["labels"] = json!({"app": "other"});
    w.fake.add(orphan);
    let out = w.step();
    let release = out.patches().next().expect("a release");
    assert_eq!(release.body[1]["op"], "remove");
}

#[test]
fn a_hash_collision_is_counted_and_the_next_hash_used() {
    let w = World::new(deployment(1, "web:1"));
    // Someone else's ReplicaSet under the name KCM would pick.
    w.fake.add(json!({"apiVersion": "apps/v1", "kind": "ReplicaSet",
        "metadata": {"name": rs_name("web:1", None), "namespace": "shop", "labels": {"other": "x"}},
        "spec": {"replicas": 0, "template": template("other")}}));
    let out = w.step();
    assert!(out.created().next().is_none());
    assert_eq!(status_of(&out)["status"]["collisionCount"], 1);
    let out = w.step();
    assert_eq!(out.created().next().unwrap()["metadata"]["name"], rs_name("web:1", Some(1)));
}

#[test]
fn a_failed_create_is_reported_before_trying_again() {
    let w = World::new(deployment(1, "web:1"));
    let name = rs_name("web:1", None);
    let mut req = Request::new(key());
    req.last_error = Some(format!(
        "create apps/v1/ReplicaSet/shop/{name}: replicasets.apps \"{name}\" is forbidden: exceeded quota: q (403 Forbidden) (0 of 3 actions of this outcome were executed)"
    ));
    let out = w.fake.enter(|| reconcile_at(req, w.now())).unwrap();
    assert!(matches!(out.actions[0], Action::Patch(ref p) if p.status), "the status first: {out:?}");
    let c = &status_of(&out)["status"]["conditions"][0];
    assert_eq!((&c["status"], &c["reason"]), (&json!("False"), &json!("ReplicaSetCreateError")));
    assert_eq!(
        c["message"],
        format!("Failed to create new replica set {name:?}: replicasets.apps \"{name}\" is forbidden: exceeded quota: q")
    );
    assert_eq!(out.created().count(), 1, "and it tries again");
}

#[test]
fn a_deployment_selecting_everything_only_warns() {
    let mut d = deployment(1, "web:1");
    d["spec"]["selector"] = json!({});
    d["metadata"]["generation"] = json!(3);
    let w = World::new(d);
    let out = w.step();
    assert!(out.created().next().is_none());
    assert_eq!(events(&out), ["SelectingAll This deployment is selecting all pods. A non-empty selector is required."]);
    assert_eq!(status_of(&out)["status"]["observedGeneration"], 3);
}

#[test]
fn converged_deployments_write_nothing() {
    let w = World::new(deployment(3, "web:1"));
    w.settle();
    let out = w.reconcile();
    assert!(out.is_empty(), "{out:?}");
}

proptest! {
    /// Any sequence of availability changes, image changes and scaling: Σ spec.replicas never
    /// exceeds replicas + maxSurge unless the Deployment was just scaled down (then it only
    /// shrinks), and old ReplicaSets never go below what keeps maxUnavailable.
    #[test]
    fn rollouts_keep_their_bounds(steps in proptest::collection::vec((0u8..4, 0u8..100), 1..40)) {
        let w = World::new(deployment(10, "web:0"));
        w.settle();
        let mut image = 0;
        for (what, n) in steps {
            match what {
                0 => {
                    image += 1;
                    w.tick(1);
                    w.edit(|spec| spec["template"] = template(&format!("web:{image}")));
                }
                1 => w.rs_controller(|rs| rs["spec"]["replicas"].as_i64().unwrap_or(1)),
                2 => w.rs_controller(|rs| rs["spec"]["replicas"].as_i64().unwrap_or(1) * i64::from(n) / 100),
                _ => {}
            }
            let before: i64 = w.sizes().iter().map(|(_, r)| r).sum();
            w.step();
            let after: i64 = w.sizes().iter().map(|(_, r)| r).sum();
            prop_assert!(after <= 13 || after <= before, "{before} -> {after}: {:?}", w.sizes());
            // Available Pods stay at 8 or more, counting those of ReplicaSets that still have them.
            let available: i64 = w.replica_sets().iter()
                .map(|rs| rs["status"]["availableReplicas"].as_i64().unwrap_or(0).min(rs["spec"]["replicas"].as_i64().unwrap_or(0)))
                .sum();
            let was_available: i64 = w.replica_sets().iter().map(|rs| rs["status"]["availableReplicas"].as_i64().unwrap_or(0)).sum();
            prop_assert!(available >= 8.min(was_available), "{available} of {was_available}: {:?}", w.sizes());
        }
        w.settle();
        let sizes = w.sizes();
        let current = rs_name(&format!("web:{image}"), None);
        prop_assert!(sizes.iter().all(|(name, r)| *r == if *name == current { 10 } else { 0 }), "{:?}", sizes);
    }
}
