use serde_json::{Value, json};
use wasmloop_sdk::testing::FakeCache;
use wasmloop_sdk::{Mapping, ObjectKey, object};

use super::*;

const RS_YAML: &str = r#"
apiVersion: apps/v1
kind: ReplicaSet
metadata: {name: web, namespace: prod, uid: rs-1, generation: 4}
spec:
  replicas: 3
  selector:
    matchLabels: {app: web}
    matchExpressions: [{key: tier, operator: NotIn, values: [db]}]
  template:
    metadata:
      labels: {app: web, version: v2}
      annotations: {note: hi}
    spec:
      containers: [{name: c, image: nginx}]
"#;

fn key() -> ObjectKey {
    kinds::REPLICA_SET.key(Some("prod"), "web")
}

fn pod(name: &str, labels: Value, ready: bool) -> Value {
    let mut p = json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": "prod", "labels": labels,
            "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "web",
                                 "uid": "rs-1", "controller": true}]},
        "spec": {"containers": [{"name": "c", "image": "nginx"}]},
    });
    if ready {
        p["status"] = json!({"phase": "Running", "conditions": [
            {"type": "PodScheduled", "status": "True"}, {"type": "Ready", "status": "True"}]});
    }
    p
}

fn full(name: &str) -> Value {
    pod(name, json!({"app": "web", "version": "v2"}), false)
}

fn fake(edit: impl FnOnce(&mut Value), pods: &[Value]) -> FakeCache {
    let f = FakeCache::for_reconciler::<ReplicaSetReconciler>().with_yaml(RS_YAML);
    let mut rs = f.get(&key()).unwrap();
    edit(&mut rs);
    f.add(rs);
    for p in pods {
        f.add(p);
    }
    f
}

fn replicas(n: i64) -> impl FnOnce(&mut Value) {
    move |rs| rs["spec"]["replicas"] = json!(n)
}

fn created_names(out: &Outcome) -> Vec<&str> {
    out.created().map(|p| object::name(p).unwrap()).collect()
}

fn deleted_names(out: &Outcome) -> Vec<&str> {
    out.deleted().map(|k| k.name.as_str()).collect()
}

#[test]
fn metadata_reconciles_replicasets_and_owns_pods() {
    let m = ReplicaSetReconciler::metadata();
    assert_eq!(m.reconciles, Some(kinds::REPLICA_SET));
    assert_eq!(
        (&m.watches[0].kind, &m.watches[0].mapping),
        (&kinds::POD, &Mapping::Owner)
    );
}

#[test]
fn creates_pods_from_the_template_with_ordinal_names() {
    let f = fake(|_| {}, &[full("web-1")]);
    let out = f.reconcile::<ReplicaSetReconciler>(&key()).unwrap();
    assert_eq!(created_names(&out), ["web-0", "web-2"]);
    let p = out.created().next().unwrap();
    assert_eq!(
        p,
        &json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "web-0", "namespace": "prod",
                "labels": {"app": "web", "version": "v2"}, "annotations": {"note": "hi"},
                "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "web", "uid": "rs-1",
                                     "controller": true, "blockOwnerDeletion": true}]},
            "spec": {"containers": [{"name": "c", "image": "nginx"}]},
        })
    );
    assert_eq!(out.requeue_after, Some(RESYNC));
}

#[test]
fn replicas_default_to_one() {
    let f = fake(
        |rs| drop(rs["spec"].as_object_mut().unwrap().remove("replicas")),
        &[],
    );
    let out = f.reconcile::<ReplicaSetReconciler>(&key()).unwrap();
    assert_eq!(created_names(&out), ["web-0"]);
}

#[test]
fn status_counts_replicas_fully_labeled_ready_and_generation() {
    let pods = [
        pod("web-0", json!({"app": "web", "version": "v2"}), true),
        pod("web-1", json!({"app": "web"}), true), // matches the selector, not the template
        pod("web-2", json!({"app": "web", "version": "v2"}), false),
        pod("web-3", json!({"app": "web", "tier": "db"}), true), // excluded by matchExpressions
        pod("web-4", json!({"app": "api"}), true),               // excluded by matchLabels
    ];
    let f = fake(|_| {}, &pods);
    let out = f.reconcile::<ReplicaSetReconciler>(&key()).unwrap();
    assert!(out.created().next().is_none() && out.deleted().next().is_none());
    let (k, status) = out.status_updates().next().unwrap();
    assert_eq!(k, &key());
    assert_eq!(
        status,
        &json!({"replicas": 3, "fullyLabeledReplicas": 2, "readyReplicas": 2, "availableReplicas": 2,
                "observedGeneration": 4})
    );
}

#[test]
fn availability_is_left_alone_with_min_ready_seconds() {
    let f = fake(
        |rs| rs["spec"]["minReadySeconds"] = json!(10),
        &[full("web-0")],
    );
    let out = f.reconcile::<ReplicaSetReconciler>(&key()).unwrap();
    let (_, status) = out.status_updates().next().unwrap();
    assert!(status.get("availableReplicas").is_none(), "{status}");
    assert_eq!(status["replicas"], 1);
}

#[test]
fn deletes_surplus_random_named_pods_first_then_highest_ordinals() {
    // Pods left by kube-controller-manager have random suffixes: they go first.
    let pods = [
        full("web-0"),
        full("web-1"),
        full("web-x7k2p"),
        full("web-2"),
        full("web-11"),
    ];
    let f = fake(replicas(2), &pods);
    let out = f.reconcile::<ReplicaSetReconciler>(&key()).unwrap();
    assert_eq!(deleted_names(&out), ["web-x7k2p", "web-11", "web-2"]);
}

#[test]
fn terminating_pods_hold_names_and_do_not_count() {
    let mut dying = full("web-0");
    dying["metadata"]["deletionTimestamp"] = json!("2024-01-01T00:00:00Z");
    let f = fake(replicas(1), &[dying]);
    let out = f.reconcile::<ReplicaSetReconciler>(&key()).unwrap();
    assert_eq!(created_names(&out), ["web-1"]);
}

#[test]
fn pods_of_other_owners_are_ignored_and_their_names_skipped() {
    let mut foreign = full("web-0");
    foreign["metadata"]["ownerReferences"][0]["uid"] = json!("someone-else");
    let f = fake(replicas(1), &[foreign]);
    let out = f.reconcile::<ReplicaSetReconciler>(&key()).unwrap();
    assert_eq!(created_names(&out), ["web-1"]);
}

#[test]
fn converges_then_writes_nothing() {
    let f = fake(|_| {}, &[]);
    let rounds = f.converge::<ReplicaSetReconciler>(&key(), 5).unwrap();
    assert_eq!(rounds.len(), 2, "create, then record status");
    assert_eq!(f.objects(&kinds::POD).len(), 3);
    let rs = f.get(&key()).unwrap();
    assert_eq!(rs["status"]["replicas"], 3);
    assert_eq!(rs["status"]["observedGeneration"], 4);

    // A spec change bumps the generation: status is rewritten even with nothing else to do.
    let mut rs = f.get(&key()).unwrap();
    rs["metadata"]["generation"] = json!(5);
    f.add(rs);
    let out = f.reconcile::<ReplicaSetReconciler>(&key()).unwrap();
    assert_eq!(out.actions.len(), 1);
    assert_eq!(
        out.status_updates().next().unwrap().1["observedGeneration"],
        5
    );
    f.execute(&out);
    assert!(
        f.reconcile::<ReplicaSetReconciler>(&key())
            .unwrap()
            .is_empty()
    );

    // Scale down and converge again.
    let mut rs = f.get(&key()).unwrap();
    rs["spec"]["replicas"] = json!(1);
    f.add(rs);
    let rounds = f.converge::<ReplicaSetReconciler>(&key(), 5).unwrap();
    assert_eq!(deleted_names(&rounds[0]), ["web-2", "web-1"]);
    assert_eq!(f.objects(&kinds::POD).len(), 1);
}

#[test]
fn gone_or_deleting_replicasets_need_nothing() {
    let f = FakeCache::for_reconciler::<ReplicaSetReconciler>();
    assert!(
        f.reconcile::<ReplicaSetReconciler>(&key())
            .unwrap()
            .is_empty()
    );
    let f = fake(
        |rs| rs["metadata"]["deletionTimestamp"] = json!("2024-01-01T00:00:00Z"),
        &[],
    );
    let out = f.reconcile::<ReplicaSetReconciler>(&key()).unwrap();
    assert!(out.is_empty());
    assert_eq!(out.requeue_after, None);
}

#[test]
fn bad_specs_are_permanent_errors() {
    let f = fake(|rs| rs["spec"]["selector"] = json!({}), &[]);
    let e = f.reconcile::<ReplicaSetReconciler>(&key()).unwrap_err();
    assert!(!e.is_transient());
    assert!(e.message().contains("selector is empty"), "{e}");

    let f = fake(
        |rs| rs["spec"]["selector"]["matchExpressions"][0]["operator"] = json!("Near"),
        &[],
    );
    let e = f.reconcile::<ReplicaSetReconciler>(&key()).unwrap_err();
    assert!(e.message().contains("unknown operator \"Near\""), "{e}");

    let f = fake(replicas(-2), &[]);
    let e = f.reconcile::<ReplicaSetReconciler>(&key()).unwrap_err();
    assert_eq!(
        (e.is_transient(), e.message()),
        (false, "spec.replicas is negative: Some(-2)")
    );
}

#[test]
fn escaped_strings_are_handled() {
    // Names never need escaping, but a JSON writer may escape anything: parsing must not fail.
    let mut p = full("web-0");
    p["metadata"]["labels"]["note"] = json!("a\"b");
    let f = fake(replicas(1), &[p]);
    f.enter(|| {
        let raw = cache::get_raw(&kinds::POD, Some("prod"), "web-0")
            .unwrap()
            .unwrap();
        let escaped = raw.replace("web-0", "web\\u002d0");
        let pod: PodLite<'_> = serde_json::from_str(&escaped).unwrap();
        assert_eq!(pod.metadata.name.0, "web-0");
        assert!(matches!(pod.metadata.name.0, Cow::Owned(_)));
        let pod: PodLite<'_> = serde_json::from_str(&raw).unwrap();
        assert!(matches!(pod.metadata.name.0, Cow::Borrowed(_)));
        assert_eq!(
            pod.metadata.labels.get("note").map(|v| v.0.as_ref()),
            Some("a\"b")
        );
    });
    assert!(
        f.reconcile::<ReplicaSetReconciler>(&key())
            .unwrap()
            .created()
            .next()
            .is_none()
    );
}

/// A Pod as kube-apiserver serves it (managedFields stripped), for the parse-cost comparison.
const REALISTIC_POD: &str = r#"{"apiVersion":"v1","kind":"Pod","metadata":{"name":"web-7","generateName":"web-","namespace":"prod","uid":"0b6e3f7c-7a51-4c1e-9d57-2f0e4f1f9a11","resourceVersion":"123456","creationTimestamp":"2024-05-01T10:00:00Z","labels":{"app":"web","pod-template-hash":"5d4f8c7b9","version":"v2"},"annotations":{"kubectl.kubernetes.io/restartedAt":"2024-05-01T09:59:00Z"},"ownerReferences":[{"apiVersion":"apps/v1","kind":"ReplicaSet","name":"web","uid":"rs-1","controller":true,"blockOwnerDeletion":true}]},"spec":{"volumes":[{"name":"kube-api-access-x","projected":{"sources":[{"serviceAccountToken":{"expirationSeconds":3607,"path":"token"}},{"configMap":{"name":"kube-root-ca.crt","items":[{"key":"ca.crt","path":"ca.crt"}]}}],"defaultMode":420}}],"containers":[{"name":"web","image":"nginx:1.25","ports":[{"containerPort":80,"protocol":"TCP"}],"env":[{"name":"MODE","value":"prod"},{"name":"POD_IP","valueFrom":{"fieldRef":{"apiVersion":"v1","fieldPath":"status.podIP"}}}],"resources":{"limits":{"cpu":"500m","memory":"256Mi"},"requests":{"cpu":"100m","memory":"128Mi"}},"volumeMounts":[{"name":"kube-api-access-x","readOnly":true,"mountPath":"/var/run/secrets/kubernetes.io/serviceaccount"}],"readinessProbe":{"httpGet":{"path":"/healthz","port":80,"scheme":"HTTP"},"timeoutSeconds":1,"periodSeconds":10,"successThreshold":1,"failureThreshold":3},"terminationMessagePath":"/dev/termination-log","terminationMessagePolicy":"File","imagePullPolicy":"IfNotPresent"}],"restartPolicy":"Always","terminationGracePeriodSeconds":30,"dnsPolicy":"ClusterFirst","serviceAccountName":"default","serviceAccount":"default","nodeName":"node-1","securityContext":{},"schedulerName":"default-scheduler","tolerations":[{"key":"node.kubernetes.io/not-ready","operator":"Exists","effect":"NoExecute","tolerationSeconds":300},{"key":"node.kubernetes.io/unreachable","operator":"Exists","effect":"NoExecute","tolerationSeconds":300}],"priority":0,"enableServiceLinks":true,"preemptionPolicy":"PreemptLowerPriority"},"status":{"phase":"Running","conditions":[{"type":"Initialized","status":"True","lastProbeTime":null,"lastTransitionTime":"2024-05-01T10:00:00Z"},{"type":"Ready","status":"True","lastProbeTime":null,"lastTransitionTime":"2024-05-01T10:00:05Z"},{"type":"ContainersReady","status":"True","lastProbeTime":null,"lastTransitionTime":"2024-05-01T10:00:05Z"},{"type":"PodScheduled","status":"True","lastProbeTime":null,"lastTransitionTime":"2024-05-01T10:00:00Z"}],"hostIP":"10.0.0.1","podIP":"10.244.1.7","podIPs":[{"ip":"10.244.1.7"}],"startTime":"2024-05-01T10:00:00Z","containerStatuses":[{"name":"web","state":{"running":{"startedAt":"2024-05-01T10:00:02Z"}},"lastState":{},"ready":true,"restartCount":0,"image":"nginx:1.25","imageID":"docker-pullable://nginx@sha256:abc","containerID":"docker://def","started":true}],"qosClass":"Burstable"}}"#;

/// The per-Pod parse cost of the candidate representations (native; run with
/// `cargo test --release -p replicaset -- --ignored parse_cost --nocapture`).
#[test]
#[ignore = "measurement, not a check; run by hand with --release"]
fn parse_cost() {
    use k8s_openapi::api::core::v1::Pod;
    use std::hint::black_box;
    use std::time::Instant;

    fn time(label: &str, n: u32, mut f: impl FnMut() -> bool) -> f64 {
        let t = Instant::now();
        let mut ok = 0u32;
        for _ in 0..n {
            ok += u32::from(black_box(f()));
        }
        assert_eq!(ok, n, "{label}: every parse finds the Pod ready");
        let ns = t.elapsed().as_nanos() as f64 / f64::from(n);
        println!("{label:<34} {ns:>8.0} ns/pod");
        ns
    }
    let n = 20_000;
    let raw = black_box(REALISTIC_POD);
    let lite = time("borrowed PodLite (plugin)", n, || {
        serde_json::from_str::<PodLite<'_>>(raw).unwrap().is_ready()
    });
    let value = time("serde_json::Value", n, || {
        let v: Value = serde_json::from_str(raw).unwrap();
        v["status"]["conditions"]
            .as_array()
            .unwrap()
            .iter()
            .any(|c| c["type"] == "Ready" && c["status"] == "True")
    });
    let k8s = time("k8s_openapi Pod", n, || {
        let p: Pod = serde_json::from_str(raw).unwrap();
        p.status
            .unwrap()
            .conditions
            .unwrap()
            .iter()
            .any(|c| c.type_ == "Ready" && c.status == "True")
    });
    println!(
        "Value / lite = {:.1}x, k8s / lite = {:.1}x",
        value / lite,
        k8s / lite
    );
    assert!(
        lite < value,
        "the plugin's representation must be the cheapest"
    );
}
