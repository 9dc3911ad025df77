//! Typed objects: lossless round trips of API server JSON, cache reads, outcome builders.

use std::collections::BTreeMap;

use serde::de::DeserializeOwned;
use serde_json::{Value, json};

use super::*;
use crate::testing::FakeCache;
use crate::{Metadata, Outcome, cache, kinds};

/// Parse `raw` as `T` and serialize it back: nothing may be lost or added.
fn round_trip<T: Resource + std::fmt::Debug>(raw: &Value) -> T {
    let typed: T = serde_json::from_value(raw.clone()).unwrap();
    assert_eq!(&serde_json::to_value(&typed).unwrap(), raw, "{} does not round-trip", T::KIND);
    // Through text too, as the cache hands objects over.
    let again: T = serde_json::from_str(&raw.to_string()).unwrap();
    assert_eq!(serde_json::to_value(&again).unwrap(), *raw);
    typed
}

fn metadata(name: &str) -> Value {
    json!({"name": name, "namespace": "shop", "uid": format!("{name}-uid"), "resourceVersion": "12", "generation": 3,
           "creationTimestamp": "2024-05-01T10:00:00Z", "labels": {"app": "web"}, "annotations": {"a": "b"},
           "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "web", "uid": "rs-1",
                                "controller": true, "blockOwnerDeletion": true}],
           "finalizers": ["f"], "selfLink": "/kept", "managedFields": [{"manager": "kept"}]})
}

fn pod_spec() -> Value {
    json!({"containers": [{"name": "web", "image": "nginx:1.27", "command": ["nginx"], "args": ["-g", "daemon off;"],
                           "env": [{"name": "MODE", "value": "prod"},
                                   {"name": "IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}}],
                           "ports": [{"containerPort": 80, "name": "http", "protocol": "TCP", "hostPort": 8080}],
                           "resources": {"limits": {"cpu": "500m"}, "requests": {"memory": "128Mi"}, "claims": [{"name": "gpu"}]},
                           "readinessProbe": {"httpGet": {"path": "/healthz", "port": 80}}}],
           "initContainers": [{"name": "init", "image": "busybox"}],
           "restartPolicy": "Always", "nodeName": "n1", "nodeSelector": {"zone": "a"}, "serviceAccountName": "sa",
           "volumes": [{"name": "v", "emptyDir": {}}], "dnsPolicy": "ClusterFirst"})
}

fn template() -> Value {
    json!({"metadata": {"labels": {"app": "web"}, "annotations": {"x": "y"}}, "spec": pod_spec()})
}

fn conditions() -> Value {
    json!([{"type": "Available", "status": "True", "lastUpdateTime": "2024-05-01T10:00:05Z",
            "lastTransitionTime": "2024-05-01T10:00:05Z", "reason": "MinimumReplicasAvailable", "message": "ok"}])
}

#[test]
fn pods_round_trip_and_read_their_fields() {
    let raw = json!({"apiVersion": "v1", "kind": "Pod", "metadata": metadata("web-0"), "spec": pod_spec(),
                     "status": {"phase": "Running", "podIP": "10.0.0.7", "hostIP": "192.168.0.1", "startTime": "2024-05-01T10:00:00Z",
                                "conditions": [{"type": "Ready", "status": "True", "lastProbeTime": null,
                                                "lastTransitionTime": "2024-05-01T10:00:05Z", "reason": "", "message": ""}],
                                "containerStatuses": [{"name": "web", "ready": true}], "qosClass": "Burstable"}});
    let pod: Pod = round_trip(&raw);
    assert!(pod.is_ready());
    let status = pod.status.as_ref().unwrap();
    assert_eq!((status.phase.as_deref(), status.pod_ip.as_deref()), (Some("Running"), Some("10.0.0.7")));
    let spec = pod.spec.as_ref().unwrap();
    let c = &spec.containers[0];
    assert_eq!((c.name.as_str(), c.image.as_deref()), ("web", Some("nginx:1.27")));
    assert_eq!(c.ports[0].container_port, 80);
    assert_eq!(c.env[1].value_from.as_ref().unwrap()["fieldRef"]["fieldPath"], "status.podIP");
    assert_eq!(c.resources.as_ref().unwrap().limits["cpu"], "500m");
    assert_eq!(spec.node_name.as_deref(), Some("n1"));
    assert!(spec.extra.contains_key("volumes"));
    assert_eq!(pod.metadata.extra["selfLink"], "/kept");
    assert!(pod.metadata.is_controlled_by("rs-1"));
    assert_eq!(pod.key(), kinds::POD.key(Some("shop"), "web-0"));
}

#[test]
fn workloads_round_trip() {
    let selector = json!({"matchLabels": {"app": "web"}, "matchExpressions": [{"key": "tier", "operator": "In", "values": ["a"]}]});
    let raw = json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": metadata("web"),
                     "spec": {"replicas": 3, "selector": selector, "template": template(), "minReadySeconds": 5,
                              "strategy": {"type": "RollingUpdate"}, "revisionHistoryLimit": 10},
                     "status": {"observedGeneration": 3, "replicas": 3, "updatedReplicas": 3, "readyReplicas": 3,
                                "availableReplicas": 3, "conditions": conditions(), "collisionCount": 1}});
    let d: Deployment = round_trip(&raw);
    assert!(d.is_rolled_out());
    let status = d.status.as_ref().unwrap();
    assert_eq!(status.conditions[0].extra["lastUpdateTime"], "2024-05-01T10:00:05Z");
    assert!(crate::conditions::is_true(&status.conditions, "Available"));
    let spec = d.spec.as_ref().unwrap();
    assert_eq!(spec.selector.as_ref().unwrap().to_query().unwrap(), "app=web,tier in (a)");
    assert_eq!(spec.template.metadata.labels["app"], "web");

    let raw = json!({"apiVersion": "apps/v1", "kind": "ReplicaSet", "metadata": metadata("web-5d4f"),
                     "spec": {"replicas": 2, "selector": {"matchLabels": {"app": "web"}}, "template": template()},
                     "status": {"replicas": 2, "fullyLabeledReplicas": 2, "readyReplicas": 1, "availableReplicas": 1,
                                "observedGeneration": 3}});
    let rs: ReplicaSet = round_trip(&raw);
    assert_eq!(rs.status.unwrap().ready_replicas, Some(1));

    let raw = json!({"apiVersion": "apps/v1", "kind": "StatefulSet", "metadata": metadata("db"),
                     "spec": {"replicas": 1, "serviceName": "db", "selector": {"matchLabels": {"app": "db"}}, "template": template(),
                              "volumeClaimTemplates": [{"metadata": {"name": "data"}}]},
                     "status": {"replicas": 1, "readyReplicas": 1, "currentReplicas": 1, "updatedReplicas": 1,
                                "availableReplicas": 1, "observedGeneration": 3, "currentRevision": "db-1"}});
    let sts: StatefulSet = round_trip(&raw);
    assert_eq!(sts.spec.unwrap().service_name.as_deref(), Some("db"));

    let raw = json!({"apiVersion": "batch/v1", "kind": "Job", "metadata": metadata("migrate"),
                     "spec": {"template": template(), "parallelism": 1, "completions": 1, "backoffLimit": 4,
                              "activeDeadlineSeconds": 600, "ttlSecondsAfterFinished": 60,
                              "selector": {"matchLabels": {"batch.kubernetes.io/controller-uid": "j"}}, "completionMode": "NonIndexed"},
                     "status": {"succeeded": 1, "startTime": "2024-05-01T10:00:00Z", "completionTime": "2024-05-01T10:01:00Z",
                                "conditions": [{"type": "Complete", "status": "True", "lastProbeTime": "2024-05-01T10:01:00Z",
                                                "lastTransitionTime": "2024-05-01T10:01:00Z", "reason": "", "message": ""}],
                                "ready": 0}});
    let job: Job = round_trip(&raw);
    assert!(job.is_complete() && !job.is_failed());
}

#[test]
fn core_kinds_round_trip() {
    let raw = json!({"apiVersion": "v1", "kind": "Service", "metadata": metadata("web"),
                     "spec": {"type": "NodePort", "selector": {"app": "web"}, "clusterIP": "10.96.0.10", "clusterIPs": ["10.96.0.10"],
                              "ports": [{"name": "http", "port": 80, "targetPort": "http", "protocol": "TCP", "nodePort": 30080},
                                        {"name": "metrics", "port": 9090, "targetPort": 9090, "appProtocol": "http"}]},
                     "status": {"loadBalancer": {}}});
    let svc: Service = round_trip(&raw);
    let spec = svc.spec.unwrap();
    assert_eq!(spec.ports[0].target_port, Some(IntOrString::String("http".into())));
    assert_eq!(spec.ports[1].target_port, Some(IntOrString::Int(9090)));
    assert_eq!((spec.type_.as_deref(), spec.cluster_ip.as_deref()), (Some("NodePort"), Some("10.96.0.10")));

    let raw = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": metadata("cfg"), "data": {"k": "v"},
                     "binaryData": {"b": "AAE="}, "immutable": true});
    let cm: ConfigMap = round_trip(&raw);
    assert_eq!(cm.data["k"], "v");

    let raw = json!({"apiVersion": "v1", "kind": "Secret", "metadata": metadata("s"), "type": "Opaque",
                     "data": {"password": "aHVudGVyMg==", "empty": "", "one": "YQ==", "two": "YWI=", "bad": "a!=="}});
    let secret: Secret = round_trip(&raw);
    assert_eq!(secret.decoded("password").as_deref(), Some(&b"hunter2"[..]));
    assert_eq!(secret.decoded("empty").as_deref(), Some(&b""[..]));
    assert_eq!(secret.decoded("one").as_deref(), Some(&b"a"[..]));
    assert_eq!(secret.decoded("two").as_deref(), Some(&b"ab"[..]));
    assert_eq!(secret.decoded("bad"), None);
    assert_eq!(secret.decoded("missing"), None);
    let mut writing = Secret::new("s");
    writing.string_data.insert("token".into(), "t".into());
    assert_eq!(writing.decoded("token").as_deref(), Some(&b"t"[..]));
    for bad in ["YQ=", "Y===", "YQ==YQ==", "Y=Q="] {
        let s = Secret { data: BTreeMap::from([("k".into(), bad.into())]), ..Secret::default() };
        assert_eq!(s.decoded("k"), None, "{bad}");
    }

    let raw = json!({"apiVersion": "v1", "kind": "Namespace",
                     "metadata": {"name": "team-a", "uid": "ns-1", "labels": {"kubernetes.io/metadata.name": "team-a"}},
                     "spec": {"finalizers": ["kubernetes"]}, "status": {"phase": "Terminating", "conditions": []}});
    let ns: Namespace = round_trip(&raw);
    assert!(ns.is_terminating());
    assert_eq!([Namespace::NAMESPACED, Service::NAMESPACED], [false, true]);
    assert_eq!(ns.key(), kinds::NAMESPACE.key(None, "team-a"));
}

#[test]
fn kinds_match_the_well_known_constants() {
    let pairs = [
        (Pod::KIND_REF, kinds::POD),
        (Deployment::KIND_REF, kinds::DEPLOYMENT),
        (ReplicaSet::KIND_REF, kinds::REPLICA_SET),
        (StatefulSet::KIND_REF, kinds::STATEFUL_SET),
        (Service::KIND_REF, kinds::SERVICE),
        (ConfigMap::KIND_REF, kinds::CONFIG_MAP),
        (Secret::KIND_REF, kinds::SECRET),
        (Namespace::KIND_REF, kinds::NAMESPACE),
        (Job::KIND_REF, kinds::JOB),
    ];
    for (typed, known) in pairs {
        assert_eq!(typed, known);
    }
}

#[test]
fn new_objects_carry_their_kind_and_skip_empty_fields() {
    let cm = ConfigMap::new("c");
    assert_eq!(serde_json::to_value(&cm).unwrap(), json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c"}}));
    assert_eq!(Deployment::default().api_version, "apps/v1");
    let mut svc = Service::new("web");
    svc.spec = Some(ServiceSpec { ports: vec![ServicePort::new(80, "http")], ..ServiceSpec::default() });
    assert_eq!(serde_json::to_value(&svc).unwrap()["spec"], json!({"ports": [{"port": 80, "targetPort": "http"}]}));
    let c = Container { env: vec![EnvVar::new("A", "1")], ..Container::new("c", "img") };
    assert_eq!(serde_json::to_value(&c).unwrap(), json!({"name": "c", "image": "img", "env": [{"name": "A", "value": "1"}]}));
}

fn read<T: DeserializeOwned>(f: &FakeCache, kind: &crate::KindRef, name: &str) -> T {
    f.enter(|| cache::get(kind, Some("shop"), name)).unwrap().unwrap()
}

#[test]
fn cache_reads_and_outcomes_work_with_typed_objects() {
    let meta = Metadata::new("t", "0").reconciles(Deployment::KIND_REF).owns(Service::KIND_REF);
    let f = FakeCache::new(meta)
        .with(json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": metadata("web"),
                     "spec": {"replicas": 1, "template": template(), "paused": false}}))
        .with(json!({"apiVersion": "v1", "kind": "Service", "metadata": {"name": "web", "namespace": "shop"},
                     "spec": {"ports": [{"port": 80}], "ipFamilies": ["IPv4"]}}));
    // Read, modify, apply: fields the types do not name survive.
    let mut d: Deployment = read(&f, &Deployment::KIND_REF, "web");
    d.spec.as_mut().unwrap().replicas = Some(5);
    let out = Outcome::new().apply(&d);
    f.execute(&out);
    let stored = f.get(&d.key()).unwrap();
    assert_eq!(stored["spec"]["replicas"], 5);
    assert_eq!(stored["spec"]["paused"], false);
    assert_eq!(stored["spec"]["template"]["spec"]["volumes"], pod_spec()["volumes"]);
    assert_eq!(stored["metadata"]["selfLink"], "/kept");

    let services: Vec<Service> = f.enter(|| cache::list(&Service::KIND_REF, Some("shop"), None)).unwrap();
    assert_eq!(services[0].spec.as_ref().unwrap().extra["ipFamilies"], json!(["IPv4"]));
    // Owned creation from typed objects.
    let mut svc = Service::new("web-2");
    svc.spec = Some(ServiceSpec { selector: [("app".into(), "web".into())].into(), ..ServiceSpec::default() });
    let out = Outcome::new().create_owned(&d, &svc).into_result().unwrap();
    let created = out.created().next().unwrap();
    assert_eq!(created["metadata"]["namespace"], "shop");
    assert_eq!(created["metadata"]["ownerReferences"][0]["uid"], "web-uid");
    // A typed value that does not fit is a decode error naming the object, not a panic.
    let f = FakeCache::new(Metadata::new("t", "0").reconciles(kinds::POD))
        .with(json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "namespace": "shop"}, "spec": {"containers": "no"}}));
    let e = f.enter(|| cache::get::<Pod>(&kinds::POD, Some("shop"), "p")).unwrap_err();
    assert!(e.to_string().contains("object p:"), "{e}");
}

#[test]
fn selectors_match_and_render() {
    let labels: BTreeMap<String, String> = [("app".into(), "web".into()), ("tier".into(), "fe".into())].into();
    let mut s = LabelSelector::from_labels([("app".to_owned(), "web".to_owned())]);
    assert!(s.matches(&labels));
    let req = |key: &str, op: &str, values: &[&str]| LabelSelectorRequirement {
        key: key.into(),
        operator: op.into(),
        values: values.iter().map(|v| (*v).to_owned()).collect(),
        ..Default::default()
    };
    s.match_expressions = vec![req("tier", "In", &["fe", "be"]), req("legacy", "DoesNotExist", &[]), req("env", "NotIn", &["prod"])];
    assert!(s.matches(&labels));
    assert_eq!(s.to_query().unwrap(), "app=web,tier in (fe,be),!legacy,env notin (prod)");
    s.match_expressions.push(req("tier", "Exists", &[]));
    assert!(s.matches(&labels));
    s.match_expressions.push(req("x", "Near", &[]));
    assert!(!s.matches(&labels));
    assert_eq!(s.to_query().unwrap_err().to_string(), "selector x: unknown operator \"Near\"");
    assert!(LabelSelector::default().matches(&labels));
    assert_eq!(
        LabelSelector { match_expressions: vec![req("a", "In", &[])], ..Default::default() }.to_query().unwrap_err().to_string(),
        "selector a: In needs values"
    );
}

/// Custom resources from `#[derive(CustomResource)]` behave as the built-in typed objects.
#[cfg(feature = "derive")]
mod custom_resource {
    use serde::{Deserialize, Serialize};
    use serde_json::{Value, json};

    use crate::children::Children;
    use crate::testing::FakeCache;
    use crate::typed::{ConfigMap, Resource};
    use crate::{CustomResource, KindRef, Metadata, Outcome, cache};

    #[derive(CustomResource, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
    #[resource(group = "example.com", version = "v1alpha1", kind = "Greeter", namespaced, status = "GreeterStatus")]
    #[serde(rename_all = "camelCase")]
    pub struct GreeterSpec {
        pub greeting: String,
        #[serde(default)]
        pub copies: u32,
    }

    #[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
    #[serde(rename_all = "camelCase")]
    pub struct GreeterStatus {
        pub observed_generation: Option<i64>,
    }

    /// Cluster-scoped, no status.
    #[derive(CustomResource, Serialize, Deserialize, Clone, Debug)]
    #[resource(group = "example.com", version = "v1", kind = "Tenant")]
    pub struct TenantSpec {
        pub owner: String,
    }

    #[test]
    fn the_generated_type_names_its_kind_and_round_trips() {
        assert_eq!(Greeter::KIND_REF, KindRef::from_static("example.com/v1alpha1", "Greeter"));
        assert_eq!((Greeter::NAMESPACED, Tenant::NAMESPACED), (true, false));
        let raw = json!({"apiVersion": "example.com/v1alpha1", "kind": "Greeter",
                         "metadata": {"name": "hi", "namespace": "ns", "uid": "g-1", "generation": 2, "generateName": "h"},
                         "spec": {"greeting": "hello", "copies": 2}, "status": {"observedGeneration": 1, "extra": true}});
        let g: Greeter = serde_json::from_value(raw.clone()).unwrap();
        assert_eq!(g.spec, GreeterSpec { greeting: "hello".into(), copies: 2 });
        assert_eq!(g.status.as_ref().unwrap().observed_generation, Some(1));
        assert_eq!(g.key(), Greeter::KIND_REF.key(Some("ns"), "hi"));
        // Unknown fields of the spec and status are the spec's business (serde's defaults drop
        // them); everything else round-trips.
        let mut expected = raw;
        expected["status"].as_object_mut().unwrap().remove("extra");
        assert_eq!(serde_json::to_value(&g).unwrap(), expected);

        let t = Tenant::new("acme", TenantSpec { owner: "ops".into() });
        assert_eq!(
            serde_json::to_value(&t).unwrap(),
            json!({"apiVersion": "example.com/v1", "kind": "Tenant", "metadata": {"name": "acme"}, "spec": {"owner": "ops"}})
        );
        assert_eq!(t.key().to_string(), "example.com/v1/Tenant/acme");
        // A spec that does not parse is an error, not a panic.
        assert!(
            serde_json::from_value::<Tenant>(json!({"apiVersion": "example.com/v1", "kind": "Tenant", "metadata": {"name": "x"}})).is_err()
        );
    }

    #[test]
    fn custom_resources_are_read_from_the_cache_and_parent_children() {
        let f = FakeCache::new(Metadata::new("greeter", "0").reconciles(Greeter::KIND_REF).owns(ConfigMap::KIND_REF)).with(json!({
            "apiVersion": "example.com/v1alpha1", "kind": "Greeter",
            "metadata": {"name": "hi", "namespace": "ns", "uid": "g-1"}, "spec": {"greeting": "hello", "copies": 2}}));
        let plan = f
            .enter(|| -> Result<_, crate::Error> {
                let g: Greeter = cache::get_key(&Greeter::KIND_REF.key(Some("ns"), "hi"))?.unwrap();
                let copies = (0..g.spec.copies).map(|i| {
                    let mut cm = ConfigMap::new(format!("hi-{i}"));
                    cm.data.insert("greeting".into(), g.spec.greeting.clone());
                    cm
                });
                Children::of(&g).kind(ConfigMap::KIND_REF, copies).plan()
            })
            .unwrap();
        assert_eq!(plan.outcome.applied().count(), 2);
        f.execute(&plan.outcome);
        let cm: Value = f.get(&ConfigMap::KIND_REF.key(Some("ns"), "hi-1")).unwrap();
        assert_eq!(cm["metadata"]["ownerReferences"][0]["kind"], "Greeter");
        // The status through the typed object.
        let mut g = Greeter::new("hi", GreeterSpec::default());
        g.metadata.namespace = Some("ns".into());
        let out = Outcome::new().status(&g, GreeterStatus { observed_generation: Some(3) });
        assert_eq!(out.status_updates().next().unwrap().1, &json!({"observedGeneration": 3}));
    }
}
