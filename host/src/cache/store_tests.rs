//! Unit tests of [`IndexedStore`]: indexes kept exact through applies, relists, deletes and
//! dictionary packing, and readers that see consistent states.

use serde_json::json;

use super::*;
use crate::cache::DICTIONARY_AT;
use crate::cache::dictionary::DICTIONARY_BYTES;

fn store() -> IndexedStore {
    IndexedStore::new(KindRef::new("v1", "Pod"))
}

fn pod(ns: &str, name: &str, rv: &str, app: &str, node: &str) -> Value {
    json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"namespace": ns, "name": name, "uid": format!("uid-{ns}-{name}"),
                     "resourceVersion": rv, "labels": {"app": app}},
        "spec": {"nodeName": node}
    })
}

fn owned(mut v: Value, owner_uid: &str, controller: bool) -> Value {
    v["metadata"]["ownerReferences"] = json!([{
        "apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "rs", "uid": owner_uid,
        "controller": controller
    }]);
    v
}

fn keys(objs: &[Arc<CachedObject>]) -> Vec<&str> {
    objs.iter().map(|o| o.key()).collect()
}

fn by(s: &IndexedStore, index: &str, value: &str) -> Vec<String> {
    s.by_index(index, value).unwrap().iter().map(|o| o.key().to_string()).collect()
}

/// No index holds an empty set or a key that is not cached, and every cached object is
/// indexed under exactly the values it has now.
fn assert_consistent(s: &IndexedStore) {
    let inner = s.inner.read();
    for index in &inner.indexes {
        for (value, keys) in &index.map {
            assert!(!keys.is_empty(), "empty set left for {}={value}", index.name);
            for k in keys {
                let e = inner.objects.get(k).expect("index points at a cached object");
                let json = e.obj.value();
                let now = index.spec.values(&e.obj, &json);
                assert!(now.iter().any(|v| v == &**value), "{k} is stale under {}={value}", index.name);
            }
        }
    }
    for (k, e) in &inner.objects {
        assert_eq!(e.field_values.len(), inner.indexes.iter().filter(|i| i.spec.reads_json()).count());
        let values = indexed_values(&inner.indexes, e);
        assert_eq!(values.len(), inner.indexes.len());
        for (index, values) in inner.indexes.iter().zip(&values) {
            for v in values {
                assert!(index.map.get(&**v).is_some_and(|ks| ks.contains(k)), "{k} missing under {v}");
            }
        }
    }
}

#[test]
fn apply_adds_updates_and_skips_same_resource_version() {
    let s = store();
    assert!(matches!(s.apply(pod("a", "p", "1", "web", "n1")).unwrap(), Change::Added(_)));
    let cached = s.get(Some("a"), "p").unwrap();
    // Same resourceVersion, even with different content: nothing happens.
    let change = s.apply(pod("a", "p", "1", "CHANGED", "n1")).unwrap();
    assert!(change.is_unchanged());
    assert!(Arc::ptr_eq(change.object(), &cached));
    assert!(Arc::ptr_eq(&s.get(Some("a"), "p").unwrap(), &cached));
    assert_eq!(s.get(Some("a"), "p").unwrap().label("app"), Some("web"));
    match s.apply(pod("a", "p", "2", "db", "n1")).unwrap() {
        Change::Updated { old, new } => {
            assert_eq!((old.resource_version(), new.resource_version()), ("1", "2"));
            assert_eq!(new.label("app"), Some("db"));
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(s.len(), 1);
    assert!(s.get(Some("b"), "p").is_none());
    assert!(s.get(None, "p").is_none());
    // Without resourceVersions, equal JSON is Unchanged and different JSON an update.
    let bare = |app: &str| json!({"metadata": {"name": "q", "labels": {"app": app}}});
    assert!(matches!(s.apply(bare("x")).unwrap(), Change::Added(_)));
    assert!(s.apply(bare("x")).unwrap().is_unchanged());
    assert!(matches!(s.apply(bare("y")).unwrap(), Change::Updated { .. }));
    assert!(s.apply(json!({"metadata": {}})).is_err());
    assert_consistent(&s);
}

#[test]
fn label_index_follows_label_changes() {
    let s = store();
    s.add_index("app", IndexSpec::parse("labels.app").unwrap()).unwrap();
    s.apply(pod("a", "p1", "1", "web", "n1")).unwrap();
    s.apply(pod("a", "p2", "1", "web", "n1")).unwrap();
    assert_eq!(by(&s, "app", "web"), ["a/p1", "a/p2"]);
    s.apply(pod("a", "p1", "2", "db", "n1")).unwrap();
    assert_eq!(by(&s, "app", "web"), ["a/p2"]);
    assert_eq!(by(&s, "app", "db"), ["a/p1"]);
    let mut unlabelled = pod("a", "p2", "2", "", "n1");
    unlabelled["metadata"].as_object_mut().unwrap().remove("labels");
    s.apply(unlabelled).unwrap();
    assert!(by(&s, "app", "web").is_empty());
    assert!(by(&s, "app", "").is_empty());
    assert_consistent(&s);
}

#[test]
fn field_index_handles_scalars_arrays_and_missing_fields() {
    let s = store();
    s.add_index("node", IndexSpec::parse("spec.nodeName").unwrap()).unwrap();
    s.add_index("port", IndexSpec::parse("spec.containers.ports.containerPort").unwrap()).unwrap();
    let mut p1 = pod("a", "p1", "1", "web", "n1");
    p1["spec"]["containers"] = json!([
        {"name": "app", "ports": [{"containerPort": 80}, {"containerPort": 443}]},
        {"name": "sidecar", "ports": [{"containerPort": 80}]}
    ]);
    s.apply(p1).unwrap();
    let mut pending = pod("a", "p2", "1", "web", "");
    pending["spec"].as_object_mut().unwrap().remove("nodeName");
    s.apply(pending).unwrap();
    assert_eq!(by(&s, "node", "n1"), ["a/p1"]);
    assert!(by(&s, "node", "").is_empty(), "missing field is not indexed");
    assert_eq!(by(&s, "port", "80"), ["a/p1"]);
    assert_eq!(by(&s, "port", "443"), ["a/p1"]);
    // Scheduling p2 moves it into the index; rescheduling p1 moves it out of n1.
    s.apply(pod("a", "p2", "2", "web", "n1")).unwrap();
    s.apply(pod("a", "p1", "2", "web", "n2")).unwrap();
    assert_eq!(by(&s, "node", "n1"), ["a/p2"]);
    assert_eq!(by(&s, "node", "n2"), ["a/p1"]);
    assert!(by(&s, "port", "80").is_empty(), "p1 lost its containers");
    assert_consistent(&s);
}

#[test]
fn owner_index_uses_the_controller_owner_only() {
    let s = store();
    s.apply(owned(pod("a", "p1", "1", "web", "n1"), "rs-1", true)).unwrap();
    s.apply(owned(pod("a", "p2", "1", "web", "n1"), "rs-1", true)).unwrap();
    s.apply(owned(pod("a", "p3", "1", "web", "n1"), "rs-2", false)).unwrap();
    s.apply(pod("a", "p4", "1", "web", "n1")).unwrap();
    assert_eq!(by(&s, OWNER_INDEX, "rs-1"), ["a/p1", "a/p2"]);
    assert!(by(&s, OWNER_INDEX, "rs-2").is_empty(), "non-controller owners are not indexed");
    // Adoption by another controller moves the pod.
    s.apply(owned(pod("a", "p2", "2", "web", "n1"), "rs-3", true)).unwrap();
    assert_eq!(by(&s, OWNER_INDEX, "rs-1"), ["a/p1"]);
    assert_eq!(by(&s, OWNER_INDEX, "rs-3"), ["a/p2"]);
    assert_consistent(&s);
}

#[test]
fn list_by_namespace_and_selector() {
    let s = store();
    s.apply(pod("b", "p2", "1", "web", "n1")).unwrap();
    s.apply(pod("a", "p1", "1", "web", "n1")).unwrap();
    s.apply(pod("a", "p0", "1", "db", "n1")).unwrap();
    s.apply(pod("c", "p3", "1", "db", "n1")).unwrap();
    assert_eq!(keys(&s.list(Some("a"), None)), ["a/p0", "a/p1"]);
    assert_eq!(keys(&s.list(None, None)), ["a/p0", "a/p1", "b/p2", "c/p3"]);
    assert_eq!(keys(&s.list(Some(""), None)), ["a/p0", "a/p1", "b/p2", "c/p3"]);
    let web = Selector::parse("app=web").unwrap();
    assert_eq!(keys(&s.list(Some("a"), Some(&web))), ["a/p1"]);
    assert_eq!(keys(&s.list(None, Some(&web))), ["a/p1", "b/p2"]);
    assert!(s.list(Some("zz"), None).is_empty());
    assert_eq!(keys(&s.snapshot()), ["a/p0", "a/p1", "b/p2", "c/p3"]);
    assert_eq!(by(&s, NAMESPACE_INDEX, "a"), ["a/p0", "a/p1"]);
}

#[test]
fn selector_lists_read_the_label_index_and_agree_with_a_full_scan() {
    let s = store();
    for i in 0..60 {
        let (ns, app) = (format!("n{}", i % 3), ["web", "db", "cache"][i % 3 / 2 + i % 2]);
        let mut p = pod(&ns, &format!("p{i:02}"), "1", app, "n1");
        if i % 5 == 0 {
            p["metadata"]["labels"]["tier"] = json!("front");
        }
        s.apply(p).unwrap();
    }
    // Updates and deletes move objects between label sets.
    s.apply(pod("n0", "p00", "2", "db", "n1")).unwrap();
    s.delete(Some("n1"), "p01");
    assert_eq!(by(&s, LABEL_PAIRS_INDEX, "tier=front").len(), 11);
    let scan = |ns: Option<&str>, sel: &Selector| -> Vec<String> {
        let all = s.snapshot();
        all.iter().filter(|o| ns.is_none_or(|ns| o.namespace() == Some(ns)) && sel.matches(o)).map(|o| o.key().to_string()).collect()
    };
    for sel in ["app=web", "app=db,tier=front", "app in (web,cache)", "tier=front,app!=db", "app=none", "tier", "!tier", "app notin (db)"] {
        let sel = Selector::parse(sel).unwrap();
        for ns in [None, Some("n0"), Some("n1"), Some("zz")] {
            assert_eq!(keys(&s.list(ns, Some(&sel))), scan(ns, &sel), "{sel} in {ns:?}");
        }
    }
}

#[test]
fn delete_removes_the_object_from_every_index() {
    let s = store();
    s.add_index("app", IndexSpec::parse("labels.app").unwrap()).unwrap();
    s.add_index("node", IndexSpec::parse("spec.nodeName").unwrap()).unwrap();
    s.apply(owned(pod("a", "p1", "1", "web", "n1"), "rs-1", true)).unwrap();
    s.apply(pod("a", "p2", "1", "db", "n2")).unwrap();
    match s.delete(Some("a"), "p1") {
        Some(Change::Deleted(o)) => assert_eq!(o.key(), "a/p1"),
        other => panic!("{other:?}"),
    }
    assert!(s.delete(Some("a"), "p1").is_none());
    assert!(s.get(Some("a"), "p1").is_none());
    assert!(by(&s, OWNER_INDEX, "rs-1").is_empty());
    assert!(by(&s, "app", "web").is_empty());
    assert!(by(&s, "node", "n1").is_empty());
    assert_eq!(by(&s, NAMESPACE_INDEX, "a"), ["a/p2"]);
    s.delete(Some("a"), "p2");
    assert!(s.is_empty());
    assert!(s.inner.read().indexes.iter().all(|i| i.map.is_empty()), "no empty sets left");
}

#[test]
fn replace_reports_changes_and_fixes_indexes() {
    let s = store();
    s.add_index("app", IndexSpec::parse("labels.app").unwrap()).unwrap();
    s.apply(pod("a", "keep", "1", "web", "n1")).unwrap();
    s.apply(pod("a", "change", "1", "web", "n1")).unwrap();
    s.apply(pod("a", "gone", "1", "web", "n1")).unwrap();
    let keep = s.get(Some("a"), "keep").unwrap();
    let changes = s
        .replace(vec![pod("a", "keep", "1", "web", "n1"), pod("a", "change", "2", "db", "n1"), pod("b", "new", "1", "web", "n1")])
        .unwrap();
    let summary: Vec<(&str, &str)> = changes
        .iter()
        .map(|c| {
            let what = match c {
                Change::Added(_) => "added",
                Change::Updated { .. } => "updated",
                Change::Deleted(_) => "deleted",
                Change::Unchanged(_) => "unchanged",
            };
            (what, c.object().key())
        })
        .collect();
    assert_eq!(summary, [("unchanged", "a/keep"), ("updated", "a/change"), ("added", "b/new"), ("deleted", "a/gone")]);
    assert!(Arc::ptr_eq(&s.get(Some("a"), "keep").unwrap(), &keep), "unchanged object kept");
    assert_eq!(by(&s, "app", "web"), ["a/keep", "b/new"]);
    assert_eq!(by(&s, "app", "db"), ["a/change"]);
    assert_eq!(by(&s, NAMESPACE_INDEX, "a"), ["a/change", "a/keep"]);
    assert_consistent(&s);

    // One invalid object rejects the whole relist.
    let err = s.replace(vec![pod("c", "x", "1", "web", "n1"), json!({"metadata": {}})]);
    assert!(matches!(err, Err(Error::InvalidObject(_))));
    assert_eq!(s.len(), 3);
    // An empty relist deletes everything.
    assert_eq!(s.replace(vec![]).unwrap().len(), 3);
    assert!(s.is_empty());
    assert!(s.inner.read().indexes.iter().all(|i| i.map.is_empty()));
}

#[test]
fn add_index_covers_objects_already_cached() {
    let s = store();
    s.apply(pod("a", "p1", "1", "web", "n1")).unwrap();
    s.apply(pod("a", "p2", "1", "db", "n2")).unwrap();
    s.add_index("node", IndexSpec::parse("spec.nodeName").unwrap()).unwrap();
    s.add_index("app", IndexSpec::Label("app".into())).unwrap();
    assert_eq!(by(&s, "node", "n1"), ["a/p1"]);
    assert_eq!(by(&s, "app", "db"), ["a/p2"]);
    s.apply(pod("a", "p2", "2", "web", "n1")).unwrap();
    assert_eq!(by(&s, "node", "n1"), ["a/p1", "a/p2"]);
    assert_eq!(by(&s, "app", "web"), ["a/p1", "a/p2"]);
    assert_consistent(&s);
}

#[test]
fn index_names_conflicts_and_unknown_indexes() {
    let s = store();
    assert_eq!(s.index_names(), [NAMESPACE_INDEX, OWNER_INDEX, LABEL_PAIRS_INDEX]);
    let node = IndexSpec::parse("spec.nodeName").unwrap();
    s.add_index("node", node.clone()).unwrap();
    s.add_index("node", node).unwrap();
    assert_eq!(s.index_names(), [NAMESPACE_INDEX, OWNER_INDEX, LABEL_PAIRS_INDEX, "node"]);
    assert_eq!(s.add_index("node", IndexSpec::Label("node".into())), Err(Error::IndexConflict { name: "node".into() }));
    assert_eq!(s.add_index(OWNER_INDEX, IndexSpec::Label("x".into())), Err(Error::IndexConflict { name: OWNER_INDEX.into() }));
    s.add_index(NAMESPACE_INDEX, IndexSpec::Namespace).unwrap();
    assert_eq!(s.index_names().len(), 4);
    assert_eq!(s.by_index("nope", "x").unwrap_err(), Error::UnknownIndex { kind: KindRef::new("v1", "Pod"), index: "nope".into() });
}

#[test]
fn cluster_scoped_objects_are_keyed_by_name() {
    let s = IndexedStore::new(KindRef::new("v1", "Namespace"));
    s.apply(json!({"metadata": {"name": "team-a", "resourceVersion": "1"}})).unwrap();
    assert_eq!(s.get(None, "team-a").unwrap().key(), "team-a");
    assert_eq!(s.get(Some(""), "team-a").unwrap().name(), "team-a");
    assert!(s.list(Some("team-a"), None).is_empty());
    assert!(matches!(s.delete(Some(""), "team-a"), Some(Change::Deleted(_))));
    assert!(s.is_empty());
}

#[test]
fn readers_see_consistent_indexes_during_updates() {
    let s = Arc::new(store());
    s.add_index("app", IndexSpec::parse("labels.app").unwrap()).unwrap();
    for i in 0..50 {
        s.apply(pod("a", &format!("p{i}"), "0", "v0", "n1")).unwrap();
    }
    let writer = {
        let s = s.clone();
        std::thread::spawn(move || {
            for round in 1..=40 {
                for i in 0..50 {
                    let app = format!("v{}", round % 3);
                    s.apply(pod("a", &format!("p{i}"), &round.to_string(), &app, "n1")).unwrap();
                }
            }
        })
    };
    let mut reads = 0;
    while !writer.is_finished() || reads == 0 {
        for app in ["v0", "v1", "v2"] {
            for o in s.by_index("app", app).unwrap() {
                assert_eq!(o.label("app"), Some(app), "{} returned for app={app}", o.key());
            }
            reads += 1;
        }
    }
    writer.join().unwrap();
    assert_eq!(by(&s, "app", "v1").len(), 50); // round 40 → v1
    assert_consistent(&s);
}

/// A Pod as an API server returns it: labels, annotations, a container, status and a
/// managedFields block.
fn realistic_pod(i: usize) -> Value {
    let rs = i % 50;
    json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {
            "name": format!("web-{rs}-{i:05}"), "namespace": format!("team-{}", i % 10),
            "uid": format!("6f1c2d3e-0000-4000-8000-{i:012}"), "resourceVersion": format!("{}", 100000 + i),
            "generation": 1, "creationTimestamp": "2024-05-01T10:00:00Z",
            "labels": {
                "app.kubernetes.io/name": "web", "app.kubernetes.io/instance": format!("web-{rs}"),
                "app.kubernetes.io/version": "1.4.2", "app.kubernetes.io/component": "frontend",
                "app.kubernetes.io/part-of": "shop", "app.kubernetes.io/managed-by": "wasmloop",
                "pod-template-hash": format!("7d9f8c{rs:04}"), "tier": "front", "env": "prod",
                "team": format!("team-{}", i % 10)
            },
            "annotations": {
                "prometheus.io/scrape": "true", "prometheus.io/port": "9090",
                "kubectl.kubernetes.io/restartedAt": "2024-05-01T09:59:00Z",
                "example.com/owner": "platform", "example.com/revision": "42"
            },
            "ownerReferences": [{
                "apiVersion": "apps/v1", "kind": "ReplicaSet", "name": format!("web-{rs}"),
                "uid": format!("rs-uid-{rs}"), "controller": true, "blockOwnerDeletion": true
            }],
            "managedFields": [{
                "manager": "kube-controller-manager", "operation": "Update", "apiVersion": "v1",
                "time": "2024-05-01T10:00:00Z", "fieldsType": "FieldsV1",
                "fieldsV1": {"f:metadata": {"f:labels": {".": {}, "f:app": {}, "f:tier": {}},
                             "f:ownerReferences": {".": {}, "k:{\"uid\":\"x\"}": {}}},
                             "f:spec": {"f:containers": {"k:{\"name\":\"web\"}": {
                                 ".": {}, "f:image": {}, "f:name": {}, "f:ports": {}}}}}
            }, {
                "manager": "kubelet", "operation": "Update", "apiVersion": "v1",
                "time": "2024-05-01T10:00:05Z", "fieldsType": "FieldsV1", "subresource": "status",
                "fieldsV1": {"f:status": {"f:conditions": {}, "f:containerStatuses": {},
                             "f:hostIP": {}, "f:phase": {}, "f:podIP": {}, "f:startTime": {}}}
            }]
        },
        "spec": {
            "nodeName": format!("node-{}", i % 100),
            "containers": [{
                "name": "web", "image": "registry.example.com/shop/web:1.4.2",
                "ports": [{"containerPort": 8080, "protocol": "TCP"}],
                "resources": {"requests": {"cpu": "100m", "memory": "128Mi"},
                              "limits": {"memory": "256Mi"}},
                "env": [{"name": "MODE", "value": "prod"}],
                "volumeMounts": [{"name": "kube-api-access", "mountPath": "/var/run/secrets/kubernetes.io/serviceaccount", "readOnly": true}],
                "terminationMessagePath": "/dev/termination-log", "imagePullPolicy": "IfNotPresent"
            }],
            "restartPolicy": "Always", "terminationGracePeriodSeconds": 30, "dnsPolicy": "ClusterFirst",
            "serviceAccountName": "default", "schedulerName": "default-scheduler",
            "tolerations": [{"key": "node.kubernetes.io/not-ready", "operator": "Exists",
                             "effect": "NoExecute", "tolerationSeconds": 300}]
        },
        "status": {
            "phase": "Running", "hostIP": "10.0.0.1", "podIP": format!("10.1.{}.{}", i / 250, i % 250),
            "startTime": "2024-05-01T10:00:01Z", "qosClass": "Burstable",
            "conditions": [
                {"type": "Ready", "status": "True", "lastTransitionTime": "2024-05-01T10:00:05Z"},
                {"type": "PodScheduled", "status": "True", "lastTransitionTime": "2024-05-01T10:00:00Z"}
            ],
            "containerStatuses": [{"name": "web", "ready": true, "restartCount": 0,
                                   "image": "registry.example.com/shop/web:1.4.2",
                                   "state": {"running": {"startedAt": "2024-05-01T10:00:04Z"}}}]
        }
    })
}

#[test]
fn ten_thousand_pods_index_exactly() {
    const N: usize = 10_000;
    let s = store();
    s.add_index("node", IndexSpec::parse("spec.nodeName").unwrap()).unwrap();
    s.add_index("instance", IndexSpec::parse("labels.app.kubernetes.io/instance").unwrap()).unwrap();
    let pods: Vec<Value> = (0..N).map(realistic_pod).collect();
    let raw_bytes: usize = pods.iter().map(|p| p.to_string().len()).sum();
    let changes = s.replace(pods).unwrap();
    assert_eq!(changes.len(), N);
    assert!(changes.iter().all(|c| matches!(c, Change::Added(_))));
    assert_eq!(s.len(), N);

    let expect = |pred: &dyn Fn(usize) -> bool| {
        let mut keys: Vec<String> = (0..N).filter(|&i| pred(i)).map(|i| format!("team-{}/web-{}-{i:05}", i % 10, i % 50)).collect();
        keys.sort();
        keys
    };
    assert_eq!(by(&s, "node", "node-7"), expect(&|i| i % 100 == 7));
    assert_eq!(by(&s, OWNER_INDEX, "rs-uid-13"), expect(&|i| i % 50 == 13));
    assert_eq!(by(&s, "instance", "web-13"), expect(&|i| i % 50 == 13));
    assert_eq!(by(&s, NAMESPACE_INDEX, "team-3").len(), N / 10);
    let sel = Selector::parse("team=team-3,app.kubernetes.io/instance in (web-13,web-23)").unwrap();
    let listed: Vec<String> = s.list(Some("team-3"), Some(&sel)).iter().map(|o| o.key().into()).collect();
    assert_eq!(listed, expect(&|i| i % 10 == 3 && (i % 50 == 13 || i % 50 == 23)));

    let all = s.snapshot();
    assert!(all.iter().all(|o| !o.json().unwrap().contains("managedFields")));
    // A lower bound (no allocator overhead, no map slots), for orientation only.
    let cached: usize = all.iter().map(|o| o.approx_heap_bytes()).sum();
    eprintln!("{N} pods: {} bytes of JSON each as received, ~{} bytes each cached (lower bound)", raw_bytes / N, cached / N);

    // A relist with nothing changed reports everything unchanged and keeps the indexes.
    let changes = s.replace((0..N).map(realistic_pod).collect()).unwrap();
    assert!(changes.iter().all(Change::is_unchanged));
    assert_eq!(by(&s, "node", "node-7").len(), N / 100);
}

#[test]
fn a_dictionary_is_wanted_once_and_packs_every_object_keeping_reads_and_indexes() {
    let s = store();
    s.add_index("node", IndexSpec::parse("spec.nodeName").unwrap()).unwrap();
    s.replace((0..DICTIONARY_AT - 1).map(realistic_pod).collect()).unwrap();
    assert!(!s.wants_dictionary(), "below the threshold");
    s.apply(realistic_pod(DICTIONARY_AT - 1)).unwrap();
    let before: Vec<(String, String)> = s.snapshot().iter().map(|o| (o.key().into(), o.json().unwrap().into_owned())).collect();
    assert!(s.wants_dictionary());
    assert!(!s.wants_dictionary(), "claimed once");

    let packing = s.build_dictionary();
    assert!(packing.dictionary_bytes > 0 && packing.dictionary_bytes <= DICTIONARY_BYTES, "{packing:?}");
    assert_eq!(packing.packed, DICTIONARY_AT);
    assert!(packing.packed_bytes * 5 < packing.json_bytes, "{packing:?}");
    let after: Vec<(String, String)> = s.snapshot().iter().map(|o| (o.key().into(), o.json().unwrap().into_owned())).collect();
    assert_eq!(before, after, "every object reads back the same JSON");
    assert!(s.snapshot().iter().all(|o| o.is_packed()));
    assert_consistent(&s);
    assert_eq!(by(&s, "node", "node-7").len(), DICTIONARY_AT / 100);

    // Objects arriving later are packed as they come, updates and relists included.
    s.apply(realistic_pod(5000)).unwrap();
    let mut changed = realistic_pod(3);
    changed["metadata"]["resourceVersion"] = json!("9");
    changed["spec"]["nodeName"] = json!("node-new");
    assert!(matches!(s.apply(changed.clone()).unwrap(), Change::Updated { .. }));
    let read = s.get(Some("team-3"), "web-3-00003").unwrap();
    assert!(read.is_packed());
    changed["metadata"].as_object_mut().unwrap().remove("managedFields");
    assert_eq!(read.value(), changed);
    assert_eq!(by(&s, "node", "node-new"), ["team-3/web-3-00003"]);
    let changes = s.replace((0..DICTIONARY_AT).map(realistic_pod).collect()).unwrap();
    assert_eq!(changes.iter().filter(|c| matches!(c, Change::Updated { .. })).count(), 1, "pod 3 back to its listed version");
    assert!(s.snapshot().iter().all(|o| o.is_packed()));
    assert_consistent(&s);
    assert!(!s.wants_dictionary(), "built once");
}

#[test]
fn small_objects_pack_and_read_back_exactly() {
    let s = store();
    for i in 0..DICTIONARY_AT {
        s.apply(json!({"metadata": {"name": format!("n{i}"), "resourceVersion": "1"}})).unwrap();
    }
    assert!(s.wants_dictionary());
    let packing = s.build_dictionary();
    assert!(packing.packed == DICTIONARY_AT && packing.packed_bytes < packing.json_bytes, "{packing:?}");
    assert_eq!(s.get(None, "n7").unwrap().json().unwrap(), r#"{"metadata":{"name":"n7","resourceVersion":"1"}}"#);
}

#[test]
fn a_long_first_list_is_compressed_as_it_arrives_from_its_dictionary_at_object() {
    let s = store();
    let mut listed: Vec<Listed> = (0..DICTIONARY_AT - 1).map(|i| s.prepare(realistic_pod(i)).unwrap()).collect();
    assert!(s.dictionary_for_list(&mut listed).is_none(), "one object short");
    listed.push(s.prepare(realistic_pod(DICTIONARY_AT - 1)).unwrap());
    let packing = s.dictionary_for_list(&mut listed).expect("built from the list");
    assert!(packing.packed == DICTIONARY_AT && packing.packed_bytes < packing.json_bytes, "{packing:?}");
    // Objects prepared from now on arrive compressed.
    listed.push(s.prepare(realistic_pod(DICTIONARY_AT)).unwrap());
    assert!(s.dictionary_for_list(&mut listed).is_none(), "built once");
    assert!(!s.wants_dictionary(), "the owner's post-list build is not due either");
    let changes = s.replace_listed(listed);
    assert_eq!(changes.len(), DICTIONARY_AT + 1);
    assert!(s.snapshot().iter().all(|o| o.is_packed()));
    let mut want = realistic_pod(7);
    want["metadata"].as_object_mut().unwrap().remove("managedFields");
    let key = key_of(&want).unwrap();
    let (ns, name) = key.split_once('/').map_or((None, key.as_str()), |(n, m)| (Some(n), m));
    assert_eq!(s.get(ns, name).unwrap().value(), want);
    assert_consistent(&s);
}
