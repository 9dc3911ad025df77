//! The inputs of the corpus, by family: to add a case, add a line here and rerun the corpus
//! test with `WASMLOOP_BLESS=1` (the expected result is computed, never written by hand).

use serde_json::{Value, json};

/// Label sets every selector case is matched against.
fn label_sets() -> Value {
    json!([
        {},
        {"app": "web"},
        {"app": "web", "tier": "front"},
        {"app": "db", "tier": "back", "legacy": "yes"},
        {"app": "", "example.com/team": "a-1"},
    ])
}

/// Selector cases: `(name, selector)`, each matched against [`label_sets`].
pub fn selectors() -> Vec<(&'static str, Value)> {
    let long_value = format!("a={}", "x".repeat(64));
    let max_value = format!("a={}", "x".repeat(63));
    let long_name = format!("{}=1", "k".repeat(64));
    let long_prefix = format!("{}/a=1", "p".repeat(254));
    let cases: Vec<(&'static str, String)> = vec![
        ("empty selects everything", "".into()),
        ("blank selects everything", "   ".into()),
        ("equality", "app=web".into()),
        ("double equals", "app==web".into()),
        ("inequality matches a missing label", "app!=web".into()),
        ("spaces around operators", "  app = web ,tier!=db".into()),
        ("in", "tier in (front,back)".into()),
        ("notin matches a missing label", "tier notin (back)".into()),
        ("exists", "app".into()),
        ("does not exist", "!legacy".into()),
        ("empty value", "app=".into()),
        ("empty value in a list", "app=,tier".into()),
        ("prefixed key", "example.com/team in (a-1,b.2)".into()),
        ("several requirements", "app=web,tier=front,!legacy".into()),
        ("duplicate requirement", "app=web,app=web".into()),
        ("value of 63 characters", max_value),
        ("value of 64 characters", long_value),
        ("value with a bad character", "app=we$b".into()),
        ("value starting with a dash", "app=-web".into()),
        ("value ending with a dot", "app=web.".into()),
        ("set value with a bad character", "app in (a,b$)".into()),
        ("set value too long", format!("app in (a,{})", "y".repeat(64))),
        ("key name of 64 characters", long_name),
        ("key prefix of 254 characters", long_prefix),
        ("key prefix with uppercase", "Example.com/team=a".into()),
        ("key prefix empty", "/team=a".into()),
        ("key starting with a dash", "-app=1".into()),
        ("key with two slashes", "a/b/c=1".into()),
        ("trailing comma", "app=web,".into()),
        ("two commas", "a=b,,c=d".into()),
        ("missing operator", "app web".into()),
        ("in without parentheses", "app in a,b".into()),
        ("empty set", "app in ()".into()),
        ("empty value in a set", "app in (a,,b)".into()),
        ("unclosed set", "app in (a".into()),
        ("greater than", "app>3".into()),
        ("less than", "app<3".into()),
        ("no key", "=web".into()),
        ("lone bang", "!".into()),
        ("bang after a value", "app=web!".into()),
        ("two equals", "app=a=b".into()),
        ("parenthesis as a value", "app=(x)".into()),
    ];
    cases.into_iter().map(|(name, sel)| (name, json!({"selector": sel, "labels": label_sets()}))).collect()
}

/// Index path cases: `{"path", "object"}`, all on one object.
pub fn index_paths() -> Vec<(&'static str, Value)> {
    let job = json!({
        "metadata": {
            "name": "j", "namespace": "a",
            "labels": {"app": "web", "app.kubernetes.io/name": "shop", "n": 1},
            "annotations": {"example.com/owner": "team-a"},
            "ownerReferences": [
                {"apiVersion": "batch.tutorial.kubebuilder.io/v1", "kind": "CronJob", "name": "nightly", "controller": true},
                {"apiVersion": "v1", "kind": "ConfigMap", "name": "settings"},
                {"apiVersion": "other.io/v1", "kind": "CronJob", "name": "impostor", "controller": true},
            ],
        },
        "spec": {
            "nodeName": "n1",
            "replicas": 3,
            "paused": false,
            "containers": [{"name": "a", "image": "nginx"}, {"name": "b", "image": "redis"}, {"name": "c", "image": "nginx"}],
            "ports": [{"port": 80, "name": "http"}, {"port": 443, "name": "https"}],
            "mode": {"on": true, "v": "x"},
            "empty": null,
            "nested": {"deep": {"list": [["x", "y"], ["z"]]}},
        },
    });
    let paths = [
        ("a label", "labels.app"),
        ("a label under metadata", "metadata.labels.app"),
        ("a dotted label key", "labels.app.kubernetes.io/name"),
        ("a label that is not a string", "labels.n"),
        ("a missing label", "labels.tier"),
        ("an annotation with a slash", "metadata.annotations.example.com/owner"),
        ("a field", "spec.nodeName"),
        ("a number", "spec.replicas"),
        ("a boolean", "spec.paused"),
        ("null", "spec.empty"),
        ("an object gives nothing", "spec.mode"),
        ("a missing field", "spec.missing"),
        ("fan out over a list, distinct and sorted", "spec.containers.image"),
        ("a list position", "spec.containers.1.image"),
        ("a list position past the end", "spec.containers.9.image"),
        ("nested lists", "spec.nested.deep.list"),
        ("a filter on a list", "metadata.ownerReferences[controller=true][kind=CronJob][apiVersion=batch.tutorial.kubebuilder.io/v1].name"),
        ("a filter keeping two", "metadata.ownerReferences[kind=CronJob].name"),
        ("a filter on a number", "spec.ports[port=443].name"),
        ("a filter on an object", "spec.mode[on=true].v"),
        ("a filter that keeps nothing", "spec.mode[on=false].v"),
        ("empty", ""),
        ("a doubled dot", "spec..x"),
        ("a leading dot", ".spec"),
        ("a trailing dot", "spec."),
        ("a bad character", "spec.node$"),
        ("a position in brackets", "spec.containers[0].image"),
        ("an unclosed filter", "spec.ports[port=443"),
        ("a filter without a value", "spec.ports[port]"),
        ("a filter without a field", "spec.ports[=443].name"),
        ("a filter with an empty value", "spec.ports[port=].name"),
        ("a filter ending the path", "metadata.ownerReferences[kind=CronJob]"),
        ("a filter on a position", "spec.containers.0[name=a].image"),
        ("a bad label key", "labels.-app"),
        ("a label key too long", "labels.aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"),
        ("an empty label key", "labels."),
        ("a bad annotation key", "metadata.annotations.Example.com/x"),
    ];
    paths.into_iter().map(|(name, path)| (name, json!({"path": path, "object": job}))).collect()
}

fn object(api_version: Value, kind: Value, metadata: Value) -> Value {
    json!({"apiVersion": api_version, "kind": kind, "metadata": metadata})
}

fn pod(metadata: Value) -> Value {
    object(json!("v1"), json!("Pod"), metadata)
}

/// Target cases: `{"object", "verb", "namespaced"?}`.
pub fn targets() -> Vec<(&'static str, Value)> {
    let create = |o: Value| json!({"object": o, "verb": "create"});
    let apply = |o: Value| json!({"object": o, "verb": "apply"});
    let scoped = |o: Value, namespaced: bool| json!({"object": o, "verb": "create", "namespaced": namespaced});
    vec![
        ("a named pod", create(pod(json!({"name": "p", "namespace": "a"})))),
        ("generateName on create", create(pod(json!({"generateName": "web-", "namespace": "a"})))),
        ("generateName on apply", apply(pod(json!({"generateName": "web-", "namespace": "a"})))),
        ("name wins over generateName", create(pod(json!({"name": "p", "generateName": "web-", "namespace": "a"})))),
        ("no name on create", create(pod(json!({"namespace": "a"})))),
        ("no name on apply", apply(pod(json!({"namespace": "a"})))),
        ("empty name is no name", apply(pod(json!({"name": "", "namespace": "a"})))),
        ("no metadata", create(json!({"apiVersion": "v1", "kind": "Pod"}))),
        ("metadata not an object", create(json!({"apiVersion": "v1", "kind": "Pod", "metadata": "p"}))),
        ("name not a string", create(pod(json!({"name": ["p"], "namespace": "a"})))),
        (
            "a grouped cluster-scoped kind",
            apply(object(json!("rbac.authorization.k8s.io/v1"), json!("ClusterRole"), json!({"name": "system:x"}))),
        ),
        ("a dotted name", create(pod(json!({"name": "web.v1.example", "namespace": "a"})))),
        ("a subresource in the name", create(pod(json!({"name": "p/status", "namespace": "a"})))),
        ("dot-dot name", create(pod(json!({"name": "..", "namespace": "a"})))),
        ("percent in the name", create(pod(json!({"name": "a%2Fb", "namespace": "a"})))),
        ("space in the name", create(pod(json!({"name": "a b", "namespace": "a"})))),
        ("name of 253 characters", create(pod(json!({"name": "x".repeat(253), "namespace": "a"})))),
        ("name of 254 characters", create(pod(json!({"name": "x".repeat(254), "namespace": "a"})))),
        ("generateName of 248 characters", create(pod(json!({"generateName": "x".repeat(248), "namespace": "a"})))),
        ("generateName of 249 characters", create(pod(json!({"generateName": "x".repeat(249), "namespace": "a"})))),
        ("generateName with a slash", create(pod(json!({"generateName": "a/", "namespace": "a"})))),
        ("namespace traversal", create(pod(json!({"name": "p", "namespace": "../kube-system"})))),
        ("uppercase namespace", create(pod(json!({"name": "p", "namespace": "A"})))),
        ("namespace of 64 characters", create(pod(json!({"name": "p", "namespace": "n".repeat(64)})))),
        ("empty namespace is none", apply(pod(json!({"name": "p", "namespace": ""})))),
        ("a List kind", create(object(json!("v1"), json!("PodList"), json!({"name": "p"})))),
        ("a kind with a slash", create(object(json!("v1"), json!("Pod/status"), json!({"name": "p"})))),
        ("apiVersion traversal", create(object(json!("../v1"), json!("Pod"), json!({"name": "p"})))),
        ("apiVersion with three parts", create(object(json!("a/b/v1"), json!("Pod"), json!({"name": "p"})))),
        ("apiVersion not a string", create(object(json!(1), json!("Pod"), json!({"name": "p"})))),
        ("no apiVersion", create(json!({"kind": "Pod", "metadata": {"name": "p"}}))),
        ("not an object", create(json!([1]))),
        ("namespaced kind in a namespace", scoped(pod(json!({"name": "p", "namespace": "a"})), true)),
        ("namespaced kind without a namespace", scoped(pod(json!({"name": "p"})), true)),
        (
            "cluster-scoped kind in a namespace",
            scoped(object(json!("v1"), json!("Namespace"), json!({"name": "x", "namespace": "a"})), false),
        ),
        ("cluster-scoped kind without a namespace", scoped(object(json!("v1"), json!("Namespace"), json!({"name": "x"})), false)),
    ]
}

/// Children cases: `{"child", "ownerNamespace", "ownerRef"}`.
pub fn children() -> Vec<(&'static str, Value)> {
    let owner =
        json!({"apiVersion": "example.com/v1", "kind": "WebApp", "name": "w", "uid": "u1", "controller": true, "blockOwnerDeletion": true});
    let case = |child: Value, ns: Value| json!({"child": child, "ownerNamespace": ns, "ownerRef": owner.clone()});
    let cm = |meta: Value| json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": meta});
    vec![
        ("joins the owner's namespace", case(cm(json!({"name": "c"})), json!("a"))),
        ("already in the owner's namespace", case(cm(json!({"name": "c", "namespace": "a"})), json!("a"))),
        ("in another namespace", case(cm(json!({"name": "c", "namespace": "b"})), json!("a"))),
        ("cluster-scoped owner", case(cm(json!({"name": "c", "namespace": "b"})), Value::Null)),
        ("no metadata", case(json!({"apiVersion": "v1", "kind": "ConfigMap"}), json!("a"))),
        (
            "keeps other owners",
            case(
                cm(json!({"name": "c", "ownerReferences": [{"apiVersion": "v1", "kind": "ConfigMap", "name": "o", "uid": "u0"}]})),
                json!("a"),
            ),
        ),
        (
            "another controller",
            case(
                cm(
                    json!({"name": "c", "ownerReferences": [{"apiVersion": "v1", "kind": "ConfigMap", "name": "o", "uid": "u0", "controller": true}]}),
                ),
                json!("a"),
            ),
        ),
        ("the same controller", case(cm(json!({"name": "c", "namespace": "a", "ownerReferences": [owner.clone()]})), json!("a"))),
        ("ownerReferences not a list", case(cm(json!({"name": "c", "ownerReferences": {}})), json!("a"))),
        ("metadata not an object", case(json!({"metadata": 1}), json!("a"))),
        ("not an object", case(json!("c"), json!("a"))),
    ]
}

/// Merge patch cases: `{"before", "patch"}`.
pub fn merge_patches() -> Vec<(&'static str, Value)> {
    let case = |before: Value, patch: Value| json!({"before": before, "patch": patch});
    vec![
        ("adds a field", case(json!({"a": 1}), json!({"b": 2}))),
        ("replaces a field", case(json!({"a": 1}), json!({"a": "x"}))),
        ("null removes", case(json!({"a": 1, "b": 2}), json!({"a": null}))),
        ("null of a missing field", case(json!({"a": 1}), json!({"z": null}))),
        ("merges nested objects", case(json!({"m": {"x": 1, "y": 2}}), json!({"m": {"y": null, "z": 3}}))),
        ("replaces lists whole", case(json!({"l": [1, 2, 3]}), json!({"l": [4]}))),
        ("an object replaces a scalar", case(json!({"a": 1}), json!({"a": {"b": {"c": null, "d": 1}}}))),
        ("a scalar replaces an object", case(json!({"a": {"b": 1}}), json!({"a": true}))),
        ("nulls inside new objects are dropped", case(json!({}), json!({"a": {"b": null, "c": 1}}))),
        ("empty patch", case(json!({"a": 1}), json!({}))),
        (
            "labels and status",
            case(
                json!({"metadata": {"labels": {"a": "1", "b": "2"}}, "status": {"phase": "x"}}),
                json!({"metadata": {"labels": {"a": null, "c": "3"}}, "status": {"phase": "y"}}),
            ),
        ),
        ("a list is refused", case(json!({"a": 1}), json!([{"op": "add"}]))),
        ("a string is refused", case(json!({"a": 1}), json!("x"))),
        ("null is refused", case(json!({"a": 1}), Value::Null)),
        ("metadata not an object is refused", case(json!({"metadata": {"name": "x"}}), json!({"metadata": 1}))),
        ("null metadata is refused", case(json!({"metadata": {"name": "x"}}), json!({"metadata": null}))),
    ]
}

/// JSON patch cases: `{"before", "ops"}`.
pub fn json_patches() -> Vec<(&'static str, Value)> {
    let doc = json!({"metadata": {"labels": {"a": "1"}, "finalizers": ["x", "y"]}, "spec": {"n": 1}});
    let case = |ops: Value| json!({"before": doc.clone(), "ops": ops});
    let deep = format!("/{}", vec!["a"; 129].join("/"));
    vec![
        ("add a field", case(json!([{"op": "add", "path": "/spec/m", "value": 2}]))),
        ("add replaces an existing field", case(json!([{"op": "add", "path": "/spec/n", "value": 5}]))),
        ("add to the end of a list", case(json!([{"op": "add", "path": "/metadata/finalizers/-", "value": "z"}]))),
        ("add inside a list", case(json!([{"op": "add", "path": "/metadata/finalizers/1", "value": "z"}]))),
        ("add past the end of a list", case(json!([{"op": "add", "path": "/metadata/finalizers/5", "value": "z"}]))),
        ("add under a missing parent", case(json!([{"op": "add", "path": "/status/phase", "value": "x"}]))),
        ("remove a field", case(json!([{"op": "remove", "path": "/spec/n"}]))),
        ("remove a list element", case(json!([{"op": "remove", "path": "/metadata/finalizers/0"}]))),
        ("remove a missing field", case(json!([{"op": "remove", "path": "/spec/zz"}]))),
        ("replace a field", case(json!([{"op": "replace", "path": "/spec/n", "value": 3}]))),
        ("replace a missing field", case(json!([{"op": "replace", "path": "/spec/zz", "value": 3}]))),
        ("escaped key", case(json!([{"op": "add", "path": "/metadata/labels/example.com~1team", "value": "t"}]))),
        ("test passes", case(json!([{"op": "test", "path": "/spec/n", "value": 1}, {"op": "replace", "path": "/spec/n", "value": 2}]))),
        ("test fails", case(json!([{"op": "test", "path": "/spec/n", "value": 2}, {"op": "replace", "path": "/spec/n", "value": 3}]))),
        ("test of a missing field", case(json!([{"op": "test", "path": "/spec/zz", "value": 1}]))),
        ("all or nothing", case(json!([{"op": "replace", "path": "/spec/n", "value": 9}, {"op": "remove", "path": "/spec/zz"}]))),
        ("move is refused", case(json!([{"op": "move", "from": "/spec/n", "path": "/spec/m"}]))),
        ("copy is refused", case(json!([{"op": "copy", "from": "/spec/n", "path": "/spec/m"}]))),
        (
            "copy after a valid op is refused",
            case(json!([{"op": "add", "path": "/spec/m", "value": 1}, {"op": "copy", "from": "/spec/n", "path": "/spec/k"}])),
        ),
        ("unknown op", case(json!([{"op": "merge", "path": "/spec", "value": {}}]))),
        ("no op", case(json!([{"path": "/spec/n"}]))),
        ("path not a string", case(json!([{"op": "remove", "path": 1}]))),
        ("no value", case(json!([{"op": "add", "path": "/spec/m"}]))),
        ("null value", case(json!([{"op": "add", "path": "/spec/m", "value": null}]))),
        ("path too deep", case(json!([{"op": "remove", "path": deep}]))),
        ("not a list", case(json!({"op": "add", "path": "/a", "value": 1}))),
        ("empty list", case(json!([]))),
    ]
}

/// Precondition cases: `{"object", "uid"?, "resourceVersion"?}`.
pub fn preconditions() -> Vec<(&'static str, Value)> {
    let obj = json!({"metadata": {"name": "p", "uid": "u1", "resourceVersion": "7"}});
    vec![
        ("none", json!({"object": obj})),
        ("uid matches", json!({"object": obj, "uid": "u1"})),
        ("uid differs", json!({"object": obj, "uid": "u2"})),
        ("resourceVersion matches", json!({"object": obj, "resourceVersion": "7"})),
        ("resourceVersion differs", json!({"object": obj, "resourceVersion": "6"})),
        ("both match", json!({"object": obj, "uid": "u1", "resourceVersion": "7"})),
        ("one of two differs", json!({"object": obj, "uid": "u1", "resourceVersion": "8"})),
        ("empty preconditions are none", json!({"object": obj, "uid": "", "resourceVersion": ""})),
        ("uid of an object without one", json!({"object": {"metadata": {"name": "p"}}, "uid": "u1"})),
    ]
}

/// Mapping cases: `{"primary", "mapping", "index"?, "primaries", "related"}`.
pub fn mappings() -> Vec<(&'static str, Value)> {
    let rs = json!({"apiVersion": "apps/v1", "kind": "ReplicaSet", "namespaced": true});
    let ns_kind = json!({"apiVersion": "v1", "kind": "Namespace", "namespaced": false});
    let foo_kind = json!({"apiVersion": "example.com/v1", "kind": "Foo", "namespaced": true});
    let pod = |owners: Value, labels: Value| json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "namespace": "ns", "uid": "up", "ownerReferences": owners, "labels": labels}});
    let owner = |api: &str, kind: &str, name: &str, controller: Value| json!({"apiVersion": api, "kind": kind, "name": name, "uid": format!("u-{name}"), "controller": controller});
    // A fake learns whether the reconciled kind is namespaced from the primaries it holds: every
    // case on a cluster-scoped kind holds one.
    let namespace_object = json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "other", "uid": "n-other"}});
    let by = |primary: &Value, mapping: Value, related: Value| {
        let primaries = if primary["namespaced"] == false { json!([namespace_object]) } else { json!([]) };
        json!({"primary": primary, "mapping": mapping, "primaries": primaries, "related": related})
    };
    let f = |ns: &str, name: &str, dep: &str, source: &str| json!({"apiVersion": "example.com/v1", "kind": "Foo", "metadata": {"name": name, "namespace": ns, "uid": name}, "spec": {"deploymentName": dep, "source": source, "targets": [dep, "shared"]}});
    let foos =
        json!([f("a", "f1", "web", "shared/cfg"), f("a", "f2", "web", "a/cfg"), f("b", "f3", "web", "shared/cfg"), f("a", "f4", "db", "")]);
    let indexed = |index: &str, path: &str, value: Value, related: Value| json!({"primary": foo_kind, "mapping": {"tag": "index", "val": {"index": index, "value": value}}, "index": {"name": index, "path": path}, "primaries": foos, "related": related});
    let deployment = json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "web", "namespace": "a", "uid": "d"}});
    let shared_cm = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "cfg", "namespace": "shared", "uid": "c"}});
    let cluster_node = json!({"apiVersion": "v1", "kind": "Node", "metadata": {"name": "web", "uid": "n"}});
    let owner_map = json!({"tag": "owner"});
    vec![
        (
            "owner: the controller of the reconciled kind",
            by(&rs, owner_map.clone(), pod(json!([owner("apps/v1", "ReplicaSet", "rs", json!(true))]), json!({}))),
        ),
        (
            "owner: another version of the same group and kind",
            by(&rs, owner_map.clone(), pod(json!([owner("apps/v1beta2", "ReplicaSet", "rs", json!(true))]), json!({}))),
        ),
        (
            "owner: the same kind in another group",
            by(&rs, owner_map.clone(), pod(json!([owner("other.io/v1", "ReplicaSet", "rs", json!(true))]), json!({}))),
        ),
        ("owner: another kind", by(&rs, owner_map.clone(), pod(json!([owner("batch/v1", "Job", "j", json!(true))]), json!({})))),
        (
            "owner: not a controller",
            by(&rs, owner_map.clone(), pod(json!([owner("apps/v1", "ReplicaSet", "rs", json!(false))]), json!({}))),
        ),
        (
            "owner: controller flag absent",
            by(&rs, owner_map.clone(), pod(json!([owner("apps/v1", "ReplicaSet", "rs", Value::Null)]), json!({}))),
        ),
        (
            "owner: the first controller counts",
            by(
                &rs,
                owner_map.clone(),
                pod(json!([owner("batch/v1", "Job", "j", json!(true)), owner("apps/v1", "ReplicaSet", "rs", json!(true))]), json!({})),
            ),
        ),
        (
            "owner: a non-controller before the controller",
            by(
                &rs,
                owner_map.clone(),
                pod(
                    json!([owner("apps/v1", "ReplicaSet", "other", json!(false)), owner("apps/v1", "ReplicaSet", "rs", json!(true))]),
                    json!({}),
                ),
            ),
        ),
        ("owner: none", by(&rs, owner_map, pod(json!([]), json!({})))),
        ("label: the value names the primary", by(&rs, json!({"tag": "label", "val": "app"}), pod(json!([]), json!({"app": "web"})))),
        ("label: empty value", by(&rs, json!({"tag": "label", "val": "app"}), pod(json!([]), json!({"app": ""})))),
        ("label: missing", by(&rs, json!({"tag": "label", "val": "app"}), pod(json!([]), json!({"tier": "web"})))),
        (
            "label: prefixed key",
            by(&rs, json!({"tag": "label", "val": "example.com/owner"}), pod(json!([]), json!({"example.com/owner": "x"}))),
        ),
        ("same-name: namespaced", by(&rs, json!({"tag": "same-name"}), pod(json!([]), json!({})))),
        ("same-name: into a cluster-scoped kind", by(&ns_kind, json!({"tag": "same-name"}), pod(json!([]), json!({})))),
        ("namespace: the related object's namespace", by(&ns_kind, json!({"tag": "namespace"}), pod(json!([]), json!({})))),
        ("namespace: a cluster-scoped object maps to nothing", by(&ns_kind, json!({"tag": "namespace"}), cluster_node.clone())),
        (
            "index by name: only primaries in the same namespace",
            indexed("deployment", "spec.deploymentName", json!({"tag": "name"}), deployment.clone()),
        ),
        ("index by namespaced name: crosses namespaces", indexed("source", "spec.source", json!({"tag": "namespaced-name"}), shared_cm)),
        (
            "index by field",
            indexed(
                "deployment",
                "spec.deploymentName",
                json!({"tag": "field", "val": "spec.owner"}),
                json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "namespace": "a"}, "spec": {"owner": "db"}}),
            ),
        ),
        (
            "index by field: list values",
            indexed(
                "deployment",
                "spec.deploymentName",
                json!({"tag": "field", "val": "spec.owners"}),
                json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "namespace": "a"}, "spec": {"owners": ["db", "web"]}}),
            ),
        ),
        (
            "index by field: missing field",
            indexed("deployment", "spec.deploymentName", json!({"tag": "field", "val": "spec.owner"}), deployment.clone()),
        ),
        (
            "index over a list-valued path",
            indexed(
                "targets",
                "spec.targets",
                json!({"tag": "name"}),
                json!({"apiVersion": "v1", "kind": "Service", "metadata": {"name": "shared", "namespace": "b"}}),
            ),
        ),
        ("index by name of a cluster-scoped object", indexed("deployment", "spec.deploymentName", json!({"tag": "name"}), cluster_node)),
        ("index by label path", indexed("team", "labels.team", json!({"tag": "name"}), deployment)),
    ]
}
