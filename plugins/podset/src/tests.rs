use serde_json::{Value, json};
use wasmloop_sdk::testing::FakeCache;
use wasmloop_sdk::{Mapping, ObjectKey, object};

use super::*;

const PODSET_YAML: &str = r#"
apiVersion: wasmloop.dev/v1alpha1
kind: PodSet
metadata: {name: web, namespace: prod, uid: ps-1}
spec:
  replicas: 3
  template:
    metadata:
      labels: {app: web}
      annotations: {note: hi}
    spec:
      containers: [{name: c, image: nginx}]
"#;

fn key() -> ObjectKey {
    PODSET.key(Some("prod"), "web")
}

/// A Pod of the PodSet (controller ref to `ps-1`), optionally terminating or ready.
fn pod(name: &str, terminating: bool, ready: bool) -> Value {
    let mut p = json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": "prod", "labels": {PODSET_LABEL: "web"},
            "ownerReferences": [{"apiVersion": "wasmloop.dev/v1alpha1", "kind": "PodSet", "name": "web",
                                 "uid": "ps-1", "controller": true}]},
        "spec": {"containers": [{"name": "c", "image": "nginx"}]},
    });
    if terminating {
        p["metadata"]["deletionTimestamp"] = json!("2024-01-01T00:00:00Z");
    }
    if ready {
        p["status"] = json!({"conditions": [{"type": "Ready", "status": "True"}]});
    }
    p
}

fn fake(replicas: i32, pods: &[Value]) -> FakeCache {
    let f = FakeCache::for_reconciler::<PodSetReconciler>().with_yaml(PODSET_YAML);
    let mut ps = f.get(&key()).unwrap();
    ps["spec"]["replicas"] = json!(replicas);
    f.add(ps);
    for p in pods {
        f.add(p);
    }
    f
}

fn created_names(out: &Outcome) -> Vec<&str> {
    out.created().map(|p| object::name(p).unwrap()).collect()
}

fn deleted_names(out: &Outcome) -> Vec<&str> {
    out.deleted().map(|k| k.name.as_str()).collect()
}

#[test]
fn metadata_reconciles_podsets_and_owns_pods() {
    let m = PodSetReconciler::metadata();
    assert_eq!(m.reconciles, Some(PODSET));
    assert_eq!(m.watches.len(), 1);
    assert_eq!((&m.watches[0].kind, &m.watches[0].mapping), (&kinds::POD, &Mapping::Owner));
}

#[test]
fn creates_missing_pods_from_the_template() {
    let f = fake(3, &[]);
    let out = f.reconcile::<PodSetReconciler>(&key()).unwrap();
    assert_eq!(created_names(&out), ["web-0", "web-1", "web-2"]);
    let p = out.created().next().unwrap();
    assert_eq!(p["apiVersion"], "v1");
    assert_eq!(p["kind"], "Pod");
    assert_eq!(p["metadata"]["namespace"], "prod");
    assert_eq!(p["metadata"]["labels"], json!({"app": "web", PODSET_LABEL: "web"}));
    assert_eq!(p["metadata"]["annotations"], json!({"note": "hi"}));
    assert_eq!(p["spec"]["containers"][0]["image"], "nginx");
    assert_eq!(
        p["metadata"]["ownerReferences"],
        json!([{"apiVersion": "wasmloop.dev/v1alpha1", "kind": "PodSet", "name": "web", "uid": "ps-1",
                "controller": true, "blockOwnerDeletion": true}])
    );
    // Nothing observed yet and no status: nothing to write.
    assert_eq!(out.status_updates().count(), 0);
    assert_eq!(out.requeue_after, Some(Duration::from_secs(30)));
}

#[test]
fn fills_the_lowest_free_ordinals() {
    let f = fake(4, &[pod("web-0", false, false), pod("web-2", false, false)]);
    let out = f.reconcile::<PodSetReconciler>(&key()).unwrap();
    assert_eq!(created_names(&out), ["web-1", "web-3"]);
}

#[test]
fn terminating_pods_hold_their_names_and_do_not_count() {
    let f = fake(2, &[pod("web-0", true, false), pod("web-1", false, true)]);
    let out = f.reconcile::<PodSetReconciler>(&key()).unwrap();
    assert_eq!(created_names(&out), ["web-2"]);
    let (_, status) = out.status_updates().next().unwrap();
    assert_eq!(status, &json!({"replicas": 1, "readyReplicas": 1}));
}

#[test]
fn skips_names_taken_by_pods_it_does_not_own() {
    // Without the PodSet's label: not adopted, but its name is taken.
    let mut stranger = pod("web-0", false, false);
    stranger["metadata"]["ownerReferences"] = json!([]);
    stranger["metadata"]["labels"] = json!({});
    let f = fake(1, &[stranger]);
    let out = f.reconcile::<PodSetReconciler>(&key()).unwrap();
    assert_eq!(created_names(&out), ["web-1"]);
}

#[test]
fn pods_of_another_controller_are_not_counted() {
    let mut other = pod("web-0", false, false);
    other["metadata"]["ownerReferences"][0]["uid"] = json!("someone-else");
    let f = fake(1, &[other]);
    let out = f.reconcile::<PodSetReconciler>(&key()).unwrap();
    assert_eq!(created_names(&out), ["web-1"]);
}

#[test]
fn deletes_surplus_highest_ordinals_first_and_strays_before_them() {
    let pods = [
        pod("web-0", false, false),
        pod("web-1", false, false),
        pod("web-10", false, false),
        pod("web-2", false, false),
        pod("adopted", false, false),
        pod("web-3", true, false),
    ];
    let f = fake(2, &pods);
    let out = f.reconcile::<PodSetReconciler>(&key()).unwrap();
    assert_eq!(deleted_names(&out), ["adopted", "web-10", "web-2"]);
    assert_eq!(out.created().count(), 0);
    let (k, status) = out.status_updates().next().unwrap();
    assert_eq!(k, &key());
    assert_eq!(status["replicas"], 5);
}

#[test]
fn scale_to_zero_deletes_everything() {
    let f = fake(0, &[pod("web-0", false, false), pod("web-1", false, false)]);
    let out = f.reconcile::<PodSetReconciler>(&key()).unwrap();
    assert_eq!(deleted_names(&out), ["web-1", "web-0"]);
}

#[test]
fn converges_then_writes_nothing() {
    let f = fake(3, &[]);
    let rounds = f.converge::<PodSetReconciler>(&key(), 5).unwrap();
    // Round 1 creates the Pods; round 2 records them in status; round 3 changes nothing.
    assert_eq!(rounds.len(), 2);
    assert_eq!(f.get(&key()).unwrap()["status"], json!({"replicas": 3, "readyReplicas": 0}));
    assert_eq!(f.objects(&kinds::POD).len(), 3);

    // Pods become ready: only the ready count changes.
    for mut p in f.objects(&kinds::POD) {
        p["status"] = json!({"conditions": [{"type": "Ready", "status": "True"}]});
        f.add(p);
    }
    let out = f.reconcile::<PodSetReconciler>(&key()).unwrap();
    assert_eq!(out.actions.len(), 1);
    assert_eq!(out.status_updates().next().unwrap().1, &json!({"replicas": 3, "readyReplicas": 3}));
    f.execute(&out);
    let out = f.reconcile::<PodSetReconciler>(&key()).unwrap();
    assert!(out.is_empty(), "{out:?}");
    assert_eq!(out.requeue_after, Some(RESYNC));
}

#[test]
fn a_stale_cache_repeats_the_same_creates() {
    // The first reconcile's Pods are not in the cache yet: the retry asks for the same names,
    // which the host treats as AlreadyExists (done), never as extra Pods.
    let f = fake(2, &[]);
    let first = f.reconcile::<PodSetReconciler>(&key()).unwrap();
    let second = f.reconcile::<PodSetReconciler>(&key()).unwrap();
    assert_eq!(created_names(&first), created_names(&second));
    f.execute(&first);
    f.execute(&second);
    assert_eq!(f.objects(&kinds::POD).len(), 2);
}

#[test]
fn gone_or_deleting_podsets_need_nothing() {
    let f = FakeCache::for_reconciler::<PodSetReconciler>();
    let out = f.reconcile::<PodSetReconciler>(&key()).unwrap();
    assert!(out.is_empty());
    assert_eq!(out.requeue_after, None);

    let f = fake(3, &[pod("web-0", false, false)]);
    let mut ps = f.get(&key()).unwrap();
    ps["metadata"]["deletionTimestamp"] = json!("2024-01-01T00:00:00Z");
    f.add(ps);
    let out = f.reconcile::<PodSetReconciler>(&key()).unwrap();
    assert!(out.is_empty());
}

#[test]
fn invalid_specs_are_permanent_errors() {
    let f = fake(-1, &[]);
    let e = f.reconcile::<PodSetReconciler>(&key()).unwrap_err();
    assert!(!e.is_transient());
    assert_eq!(e.message(), "spec.replicas is negative: -1");

    let f = fake(1, &[]);
    let mut ps = f.get(&key()).unwrap();
    ps["spec"]["template"].as_object_mut().unwrap().remove("spec");
    f.add(ps);
    let e = f.reconcile::<PodSetReconciler>(&key()).unwrap_err();
    assert_eq!((e.is_transient(), e.message()), (false, "spec.template.spec is missing"));
}

#[test]
fn unparsable_podsets_are_transient_errors() {
    let f = fake(1, &[]);
    let mut ps = f.get(&key()).unwrap();
    ps["spec"]["replicas"] = json!("three");
    f.add(ps);
    let e = f.reconcile::<PodSetReconciler>(&key()).unwrap_err();
    assert!(e.is_transient());
    assert!(e.message().starts_with("reading the PodSet: cannot parse a cached wasmloop.dev/v1alpha1/PodSet"), "{e}");
}

#[test]
fn crd_manifest_matches_the_plugin() {
    let crd: Value = serde_saphyr::from_str(include_str!("../../../deploy/crds/podset.yaml")).unwrap();
    let spec = &crd["spec"];
    let podset = PODSET;
    let (group, version) = podset.api_version.split_once('/').unwrap();
    assert_eq!(spec["group"], group);
    assert_eq!(spec["names"]["kind"], PODSET.kind.as_ref());
    assert_eq!(spec["scope"], "Namespaced");
    assert_eq!(crd["metadata"]["name"], format!("{}.{group}", spec["names"]["plural"].as_str().unwrap()));
    let v = &spec["versions"][0];
    assert_eq!(v["name"], version);
    assert!(v["subresources"]["status"].is_object());
    let schema = &v["schema"]["openAPIV3Schema"]["properties"];
    assert_eq!(schema["spec"]["properties"]["replicas"]["type"], "integer");
    let template = &schema["spec"]["properties"]["template"];
    assert_eq!(template["x-kubernetes-preserve-unknown-fields"], true);
    assert_eq!(template["properties"]["spec"]["x-kubernetes-preserve-unknown-fields"], true);
    // Every status field the plugin writes is in the schema (others would be pruned).
    let written = serde_json::to_value(PodSetStatus { replicas: 1, ready_replicas: Some(1) }).unwrap();
    for field in written.as_object().unwrap().keys() {
        assert!(schema["status"]["properties"][field].is_object(), "status.{field} missing from the CRD");
    }
}

#[test]
fn labelled_orphans_are_adopted_and_pods_that_lose_the_label_released() {
    let mut orphan = pod("stray", false, false);
    orphan["metadata"].as_object_mut().unwrap().remove("ownerReferences");
    orphan["metadata"]["uid"] = json!("stray-uid");
    orphan["metadata"]["resourceVersion"] = json!("5");
    let mut moved = pod("web-0", false, false);
    moved["metadata"]["labels"] = json!({"app": "elsewhere"});
    moved["metadata"]["uid"] = json!("moved-uid");
    let f = fake(2, &[orphan, moved, pod("web-1", false, false)]);
    let out = f.reconcile::<PodSetReconciler>(&key()).unwrap();
    let patched: Vec<&str> = out.patches().map(|p| p.key.name.as_str()).collect();
    assert_eq!(patched, ["web-0", "stray"], "release, then adopt");
    assert!(out.created().next().is_none(), "the adopted Pod counts: {out:?}");
    f.execute(&out);
    let adopted = f.get(&kinds::POD.key(Some("prod"), "stray")).unwrap();
    assert_eq!(adopted["metadata"]["ownerReferences"][0]["uid"], "ps-1");
    let released = f.get(&kinds::POD.key(Some("prod"), "web-0")).unwrap();
    assert_eq!(released["metadata"]["ownerReferences"], json!([]));
    assert!(f.reconcile::<PodSetReconciler>(&key()).unwrap().patches().next().is_none());
}
