//! Tests of the fake itself: reads as the host answers them, execution, convergence.

use super::*;
use crate::kinds;
use crate::{Mapping, Watch, cache};
use serde_json::json;

struct Probe;
impl Reconciler for Probe {
    fn metadata() -> Metadata {
        Metadata::new("probe", "0")
            .reconciles(kinds::REPLICA_SET)
            .owns(kinds::POD)
            .watch(Watch::new(kinds::CONFIG_MAP, Mapping::SameName).selector("team=a"))
            .index(kinds::POD, "node", "spec.nodeName")
            .index(kinds::POD, "app", "labels.app.kubernetes.io/name")
            .index(kinds::POD, "ports", "spec.ports")
            .index(kinds::POD, "image", "spec.containers.image")
            .index(kinds::POD, "team", "metadata.annotations.example.com/team")
    }
    fn reconcile(req: Request) -> Result<Outcome, Error> {
        let pods: Vec<Value> = cache::list(&kinds::POD, req.key.ns(), None)?;
        crate::info!("{} pods", pods.len());
        Ok(Outcome::new())
    }
}

const FIXTURE: &str = r#"
apiVersion: v1
kind: List
items:
- apiVersion: apps/v1
  kind: ReplicaSet
  metadata: {name: web, namespace: prod, uid: rs-1, managedFields: [{manager: x}]}
- apiVersion: v1
  kind: Pod
  metadata:
    name: web-0
    namespace: prod
    labels: {app.kubernetes.io/name: web}
    annotations: {example.com/team: blue}
    ownerReferences:
    - {apiVersion: v1, kind: ConfigMap, name: a, uid: cm-1}
    - {apiVersion: apps/v1, kind: ReplicaSet, name: web, uid: rs-1, controller: true}
  spec:
    nodeName: n1
    ports: [80, 443]
    containers: [{name: a, image: nginx}, {name: b, image: envoy}]
---
apiVersion: v1
kind: Pod
metadata: {name: other, namespace: dev}
spec: {nodeName: n2}
---
apiVersion: v1
kind: ConfigMap
metadata: {name: a, namespace: prod, labels: {team: a}}
---
apiVersion: v1
kind: ConfigMap
metadata: {name: b, namespace: prod, labels: {team: b}}
---
apiVersion: v1
kind: Secret
metadata: {name: s, namespace: prod}
"#;

fn fake() -> FakeCache {
    FakeCache::for_reconciler::<Probe>().with_yaml(FIXTURE)
}

fn names(jsons: Vec<Value>) -> Vec<String> {
    jsons.iter().map(|v| object::name(v).unwrap().to_owned()).collect()
}

#[test]
fn yaml_lists_load_and_get_strips_managed_fields() {
    let f = fake();
    f.enter(|| {
        let rs: Value = cache::get(&kinds::REPLICA_SET, Some("prod"), "web").unwrap().unwrap();
        assert!(rs["metadata"].get("managedFields").is_none());
        assert_eq!(rs["metadata"]["uid"], "rs-1");
        let p: Value = cache::get(&kinds::POD, Some("dev"), "other").unwrap().unwrap();
        assert!(object::uid(&p).unwrap().starts_with("fake-uid-"));
        assert!(cache::get::<Value>(&kinds::POD, Some("prod"), "nope").unwrap().is_none());
    });
}

#[test]
fn builtin_and_declared_indexes_answer_like_the_host() {
    fake().enter(|| {
        assert_eq!(names(cache::owned_by(&kinds::POD, "rs-1").unwrap()), ["web-0"]);
        assert_eq!(names(cache::by_index(&kinds::POD, "namespace", "dev").unwrap()), ["other"]);
        assert_eq!(names(cache::by_index(&kinds::POD, "node", "n2").unwrap()), ["other"]);
        assert_eq!(names(cache::by_index(&kinds::POD, "app", "web").unwrap()), ["web-0"]);
        assert_eq!(names(cache::by_index(&kinds::POD, "ports", "443").unwrap()), ["web-0"]);
        assert!(cache::by_index::<Value>(&kinds::POD, "node", "n3").unwrap().is_empty());
        let e = cache::by_index::<Value>(&kinds::POD, "zone", "x").unwrap_err();
        assert!(matches!(e, cache::Error::UnknownIndex(_)), "{e}");
        // Declared on Pods, not on ConfigMaps.
        let e = cache::by_index::<Value>(&kinds::CONFIG_MAP, "node", "n1").unwrap_err();
        assert!(matches!(e, cache::Error::UnknownIndex(_)), "{e}");
    });
}

#[test]
fn undeclared_kinds_are_not_granted() {
    fake().enter(|| {
        let e = cache::get::<Value>(&kinds::SECRET, Some("prod"), "s").unwrap_err();
        assert!(matches!(&e, cache::Error::NotGranted(m) if m.contains("v1/Secret")), "{e}");
        assert!(cache::list::<Value>(&kinds::SECRET, None, None).is_err());
        assert!(cache::by_index::<Value>(&kinds::SECRET, "namespace", "prod").is_err());
        // `?` in a reconciler turns it into a transient error.
        let e: Error = e.into();
        assert!(e.is_transient());
    });
}

#[test]
fn watch_selectors_limit_what_is_cached() {
    fake().enter(|| {
        assert_eq!(names(cache::list(&kinds::CONFIG_MAP, Some("prod"), None).unwrap()), ["a"]);
        assert!(cache::get::<Value>(&kinds::CONFIG_MAP, Some("prod"), "b").unwrap().is_none());
    });
}

#[test]
fn list_filters_by_namespace_and_selector() {
    fake().enter(|| {
        assert_eq!(names(cache::list(&kinds::POD, None, None).unwrap()), ["other", "web-0"]);
        assert_eq!(names(cache::list(&kinds::POD, Some("prod"), None).unwrap()), ["web-0"]);
        assert_eq!(names(cache::list(&kinds::POD, None, Some("!app.kubernetes.io/name")).unwrap()), ["other"]);
        let e = cache::list::<Value>(&kinds::POD, None, Some("a in (b")).unwrap_err();
        assert!(matches!(e, cache::Error::Invalid(_)), "{e}");
    });
}

#[test]
fn decode_errors_name_the_object() {
    #[derive(serde::Deserialize, Debug)]
    #[allow(dead_code)]
    struct Wrong {
        spec: u32,
    }
    fake().enter(|| {
        let e = cache::get::<Wrong>(&kinds::POD, Some("dev"), "other").unwrap_err();
        assert!(e.to_string().starts_with("cannot parse a cached v1/Pod: object other: invalid type"), "{e}");
    });
}

#[test]
fn reconcile_captures_logs_and_reads_outside_are_no_host() {
    let f = fake();
    let out = f.reconcile::<Probe>(&kinds::REPLICA_SET.key(Some("prod"), "web")).unwrap();
    assert!(out.is_empty());
    assert_eq!(f.logs(), [(Level::Info, "1 pods".to_owned())]);
    assert_eq!(cache::get::<Value>(&kinds::POD, None, "x").unwrap_err(), cache::Error::NoHost);
}

#[test]
fn execute_names_generate_name_creates_and_refuses_what_the_host_refuses() {
    let fake = FakeCache::new(Metadata::new("t", "0.1.0").reconciles(kinds::POD));
    let pod = json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"generateName": "web-", "namespace": "prod"}});
    fake.execute(&Outcome::new().create(&pod).create(&pod));
    let names: Vec<String> = fake.objects(&kinds::POD).iter().map(|p| object::name(p).unwrap().to_owned()).collect();
    assert_eq!(names.len(), 2, "{names:?}");
    assert!(names.iter().all(|n| n.starts_with("web-") && n.len() == 9), "{names:?}");
    let bad = json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p/status", "namespace": "prod"}});
    let panic = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| fake.execute(&Outcome::new().create(&bad))));
    let message = *panic.unwrap_err().downcast::<String>().unwrap();
    assert!(message.contains("subresources are not action targets"), "{message}");
}

#[test]
fn execute_plays_the_host() {
    let f = fake();
    let rs_key = kinds::REPLICA_SET.key(Some("prod"), "web");
    let rs = f.get(&rs_key).unwrap();
    let out = Outcome::new()
        .create_owned(&rs, json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "web-1"}}))
        .create(&json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "web-0", "namespace": "prod"}}))
        .delete_key(kinds::POD.key(Some("dev"), "other"))
        .delete_key(kinds::POD.key(Some("dev"), "missing"))
        .status(&rs, json!({"replicas": 2}))
        .apply(&json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "a", "namespace": "prod"},
                           "data": {"k": "v"}}))
        .event(&rs, crate::EventType::Normal, "Scaled", "up");
    f.execute(&out);
    let web1 = f.get(&kinds::POD.key(Some("prod"), "web-1")).unwrap();
    assert_eq!(object::controller_uid(&web1), Some("rs-1"));
    // An existing object is not replaced by a create.
    let web0 = f.get(&kinds::POD.key(Some("prod"), "web-0")).unwrap();
    assert_eq!(web0["spec"]["nodeName"], "n1");
    assert!(f.get(&kinds::POD.key(Some("dev"), "other")).is_none());
    assert_eq!(f.get(&rs_key).unwrap()["status"], json!({"replicas": 2}));
    let cm = f.get(&kinds::CONFIG_MAP.key(Some("prod"), "a")).unwrap();
    assert_eq!((cm["data"]["k"].as_str(), cm["metadata"]["labels"]["team"].as_str()), (Some("v"), Some("a")));
    assert_eq!(f.events()[0].reason, "Scaled");
}

#[test]
fn deletes_check_their_preconditions() {
    let f = fake();
    let key = kinds::POD.key(Some("prod"), "web-0");
    let other = crate::Deletion::new(key.clone()).if_uid("not-its-uid");
    f.execute(&Outcome::new().deletion(other).deletion(crate::Deletion::new(key.clone()).if_resource_version("7")));
    assert!(f.get(&key).is_some(), "a failed precondition deletes nothing");
    // An empty precondition is none, as the host reads it.
    f.execute(&Outcome::new().deletion(crate::Deletion::new(key.clone()).if_uid("")));
    assert!(f.get(&key).is_none());
    let rs = kinds::REPLICA_SET.key(Some("prod"), "web");
    let out = Outcome::new().deletion(crate::Deletion::new(rs.clone()).if_uid("rs-1"));
    assert_eq!(out.deleted().collect::<Vec<_>>(), [&rs]);
    f.execute(&out);
    assert!(f.get(&rs).is_none());
}

#[test]
#[should_panic(expected = "only reconciles keys of the reconciled kind")]
fn reconciling_another_kind_is_a_test_bug() {
    let _ = fake().reconcile::<Probe>(&kinds::POD.key(Some("prod"), "web-0"));
}

#[test]
#[should_panic(expected = "index \"x\" on v1/Pod: invalid path \"spec.containers[0].image\"")]
fn invalid_index_paths_are_refused_like_the_host_does() {
    FakeCache::new(Metadata::new("p", "0").reconciles(kinds::POD).index(kinds::POD, "x", "spec.containers[0].image"));
}

#[test]
fn index_path_checks() {
    for ok in [
        "labels.app.kubernetes.io/name",
        "metadata.labels.app",
        "spec.nodeName",
        "spec.containers.0.image",
        "metadata.annotations.example.com/x",
    ] {
        assert!(check_index_path(ok).is_ok(), "{ok}");
    }
    for bad in ["", "labels.", "spec..x", ".spec", "spec.", "labels.a b", "metadata.annotations."] {
        assert!(check_index_path(bad).is_err(), "{bad:?}");
    }
}

#[test]
fn directories_of_fixtures_load() {
    let dir = std::env::temp_dir().join(format!("wasmloop-sdk-fixtures-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("a.yaml"), FIXTURE).unwrap();
    std::fs::write(dir.join("b.json"), r#"{"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "j", "namespace": "dev"}}"#).unwrap();
    std::fs::write(dir.join("notes.txt"), "not: [an object").unwrap();
    let f = FakeCache::for_reconciler::<Probe>().with_dir(&dir);
    std::fs::remove_dir_all(&dir).unwrap();
    assert_eq!(names(f.objects(&kinds::POD)), ["j", "other", "web-0"]);
    assert_eq!(f.objects(&kinds::CONFIG_MAP).len(), 2);
}

#[test]
#[should_panic(expected = "has no metadata.name")]
fn fixtures_without_names_are_rejected() {
    FakeCache::for_reconciler::<Probe>().with_json(r#"{"apiVersion": "v1", "kind": "Pod", "metadata": {}}"#);
}

#[test]
fn metadata_reads_give_metadata_and_declared_fields() {
    let meta = Metadata::new("m", "0.1.0")
        .reconciles(crate::kinds::POD)
        .field(crate::kinds::POD, "status.phase")
        .field(crate::kinds::POD, "spec.nodeName");
    let f = FakeCache::new(meta).with(serde_json::json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "p", "namespace": "ns", "uid": "u", "resourceVersion": "3", "labels": {"app": "web"},
                     "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "rs", "uid": "rs-1", "controller": true}]},
        "status": {"phase": "Running"},
    }));
    f.enter(|| {
        let pods = crate::meta::list(&crate::kinds::POD, Some("ns"), Some("app=web")).unwrap();
        assert_eq!(pods.len(), 1);
        let p = &pods[0];
        let m = &p.metadata;
        assert_eq!((m.name.as_str(), m.uid.as_str(), m.resource_version.as_deref()), ("p", "u", Some("3")));
        assert!(m.is_controlled_by("rs-1"));
        assert_eq!(p.object().key(), crate::kinds::POD.key(Some("ns"), "p"));
        assert_eq!(p.field::<String>(0).as_deref(), Some("Running"));
        assert_eq!(p.field::<String>(1), None);
        let owned = crate::meta::owned_by(&crate::kinds::POD, "rs-1").unwrap();
        assert_eq!(owned, pods);
        assert_eq!(crate::meta::get(&crate::kinds::POD, Some("ns"), "p").unwrap().as_ref(), Some(p));
        assert!(crate::meta::get(&crate::kinds::CONFIG_MAP, Some("ns"), "p").is_err());
    });
}

/// A custom resource that names a Deployment (`spec.deploymentName`) and a ConfigMap in any
/// namespace (`spec.source`, `<namespace>/<name>`), and manages only annotated ConfigMaps.
struct Namer;
const FOO: KindRef = KindRef::from_static("example.com/v1", "Foo");
impl Reconciler for Namer {
    fn metadata() -> Metadata {
        Metadata::new("namer", "0")
            .reconciles(FOO)
            .named_by(kinds::DEPLOYMENT, "deployment", "spec.deploymentName", crate::IndexValue::Name)
            .named_by(kinds::CONFIG_MAP, "source", "spec.source", crate::IndexValue::NamespacedName)
            .watch(Watch::new(kinds::SECRET, Mapping::SameName).annotation_selector("example.com/managed=true"))
    }
    fn reconcile(req: Request) -> Result<Outcome, Error> {
        let foo: Value = cache::get_key(&req.key)?.ok_or_else(|| Error::permanent("gone"))?;
        if object::label(&foo, "broken").is_some() {
            let say = Outcome::new().event(&foo, crate::EventType::Warning, "Broken", "cannot work with this");
            return Err(Error::transient("broken on purpose").with_actions(say));
        }
        Ok(Outcome::new())
    }
}

const NAMER_FIXTURE: &str = r#"
apiVersion: example.com/v1
kind: Foo
metadata: {name: f1, namespace: a, uid: f1}
spec: {deploymentName: web, source: shared/cfg}
---
apiVersion: example.com/v1
kind: Foo
metadata: {name: f2, namespace: b, uid: f2}
spec: {deploymentName: web, source: shared/cfg}
---
apiVersion: apps/v1
kind: Deployment
metadata: {name: web, namespace: a}
---
apiVersion: v1
kind: ConfigMap
metadata: {name: cfg, namespace: shared}
---
apiVersion: v1
kind: Secret
metadata: {name: f1, namespace: a, annotations: {example.com/managed: "true"}}
---
apiVersion: v1
kind: Secret
metadata: {name: f2, namespace: b}
"#;

#[test]
fn index_mappings_reach_the_primaries_that_name_an_object_as_the_host_maps_them() {
    let fake = FakeCache::for_reconciler::<Namer>().with_yaml(NAMER_FIXTURE);
    // By name: only the Foo in the Deployment's namespace.
    assert_eq!(fake.mapped_keys(&kinds::DEPLOYMENT.key(Some("a"), "web")), vec![FOO.key(Some("a"), "f1")]);
    // By namespace/name: Foos anywhere that name the ConfigMap.
    let mut keys = fake.mapped_keys(&kinds::CONFIG_MAP.key(Some("shared"), "cfg"));
    keys.sort();
    assert_eq!(keys, vec![FOO.key(Some("a"), "f1"), FOO.key(Some("b"), "f2")]);
    // An object no primary names maps to nothing; an unannotated Secret is not even cached.
    fake.add_yaml("apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: db, namespace: a}");
    assert!(fake.mapped_keys(&kinds::DEPLOYMENT.key(Some("a"), "db")).is_empty());
    assert_eq!(fake.mapped_keys(&kinds::SECRET.key(Some("a"), "f1")), vec![FOO.key(Some("a"), "f1")]);
    assert!(fake.mapped_keys(&kinds::SECRET.key(Some("b"), "f2")).is_empty());
    fake.enter(|| {
        let secrets: Vec<Value> = cache::list(&kinds::SECRET, None, None).unwrap();
        assert_eq!(secrets.len(), 1, "the annotation selector limits what is cached");
    });
}

#[test]
fn a_failure_carries_its_actions_and_converge_executes_them() {
    let fake = FakeCache::for_reconciler::<Namer>().with_yaml(NAMER_FIXTURE);
    let mut broken = fake.get(&FOO.key(Some("a"), "f1")).unwrap();
    broken["metadata"]["labels"] = json!({"broken": "yes"});
    fake.add(broken);
    let err = fake.reconcile::<Namer>(&FOO.key(Some("a"), "f1")).unwrap_err();
    assert!(err.is_transient());
    assert_eq!(err.actions().map(|o| o.actions.len()), Some(1));
    let failed = fake.converge::<Namer>(&FOO.key(Some("a"), "f1"), 3).unwrap_err();
    assert!(failed.contains("broken on purpose"), "{failed}");
    assert_eq!(fake.events().iter().map(|e| e.reason.as_str()).collect::<Vec<_>>(), ["Broken"]);
}

#[test]
#[should_panic(expected = "names index \"nope\", which is not declared on example.com/v1/Foo")]
fn an_index_mapping_must_name_an_index_of_the_reconciled_kind() {
    let m = Metadata::new("x", "0")
        .reconciles(FOO)
        .watches(kinds::DEPLOYMENT, Mapping::Index { index: "nope".into(), value: crate::IndexValue::Name });
    let _ = FakeCache::new(m);
}

/// An index on the reconciled kind is built on its informer, as the host does: the reconciled
/// kind's annotation selector still limits what is cached and what the index answers.
#[test]
fn an_index_on_the_reconciled_kind_keeps_its_selectors() {
    let meta = Metadata::new("a", "0").reconciles(kinds::CONFIG_MAP).annotation_selector("example.com/managed=true").index(
        kinds::CONFIG_MAP,
        "by-app",
        "labels.app",
    );
    let f = FakeCache::new(meta)
        .with(serde_json::json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "yes", "namespace": "n",
            "labels": {"app": "x"}, "annotations": {"example.com/managed": "true"}}}))
        .with(serde_json::json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "no", "namespace": "n",
            "labels": {"app": "x"}}}));
    f.enter(|| {
        assert_eq!(names(cache::list(&kinds::CONFIG_MAP, None, None).unwrap()), ["yes"]);
        assert_eq!(names(cache::by_index(&kinds::CONFIG_MAP, "by-app", "x").unwrap()), ["yes"]);
    });
}

/// On every hour: a ConfigMap `tick-<unix time>` in the Namespace, then a requeue at the next
/// hour — schedule logic on the fake's clock.
struct Hourly;
impl Reconciler for Hourly {
    fn metadata() -> Metadata {
        Metadata::new("hourly", "0").reconciles(kinds::NAMESPACE).owns(kinds::CONFIG_MAP)
    }
    fn reconcile(req: Request) -> Result<Outcome, Error> {
        let Some(ns) = cache::get_key::<Value>(&req.key)? else { return Ok(Outcome::new()) };
        let now = crate::time::now();
        let hour = now - now.rem_euclid(3600);
        let next = std::time::Duration::from_secs(u64::try_from(hour + 3600 - now).unwrap_or(0));
        let name = format!("tick-{hour}");
        if cache::get::<Value>(&kinds::CONFIG_MAP, Some(&req.key.name), &name)?.is_some() {
            return Ok(Outcome::new().requeue_after(next));
        }
        let cm = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name, "namespace": req.key.name},
                        "data": {"at": crate::time::now_micros_rfc3339()}});
        Ok(Outcome::new().create_owned(&ns, cm).requeue_after(next))
    }
}

fn hourly() -> FakeCache {
    FakeCache::for_reconciler::<Hourly>()
        .with_time("2026-03-01T10:59:30.25Z")
        .with_yaml("apiVersion: v1\nkind: Namespace\nmetadata: {name: ns, uid: ns-1}\n")
}

#[test]
fn the_clock_is_the_fakes_and_converge_moves_it_to_the_requeue() {
    let fake = hourly();
    let key = kinds::NAMESPACE.key(None, "ns");
    assert_eq!(fake.now_rfc3339(), "2026-03-01T10:59:30Z");
    let done = fake.converge::<Hourly>(&key, 3).unwrap();
    let cm = done[0].created().next().unwrap();
    assert_eq!(cm["metadata"]["name"], format!("tick-{}", crate::time::parse("2026-03-01T10:00:00Z").unwrap()));
    assert_eq!(cm["data"]["at"], "2026-03-01T10:59:30.250000Z", "sub-second time from the fake's clock");
    let stored = fake.get(&kinds::CONFIG_MAP.key(Some("ns"), cm["metadata"]["name"].as_str().unwrap())).unwrap();
    assert_eq!(stored["metadata"]["creationTimestamp"], "2026-03-01T10:59:30Z", "created at the fake's now");
    // The converged reconcile asked for the next hour: the clock is there, and the next tick fires.
    assert_eq!(fake.now_micros(), crate::time::parse_micros("2026-03-01T11:00:00.25Z").unwrap());
    assert_eq!(fake.now_rfc3339(), "2026-03-01T11:00:00Z");
    assert_eq!(fake.converge::<Hourly>(&key, 3).unwrap().len(), 1);
}

#[test]
fn run_until_plays_a_schedule_out_and_stops_at_the_deadline() {
    let fake = hourly();
    let key = kinds::NAMESPACE.key(None, "ns");
    let done = fake.run_until::<Hourly>(&key, "2026-03-01T13:30:00Z", 50).unwrap();
    let names: Vec<&str> = done.iter().flat_map(Outcome::created).filter_map(|c| c["metadata"]["name"].as_str()).collect();
    let tick = |t: &str| format!("tick-{}", crate::time::parse(t).unwrap());
    assert_eq!(
        names,
        [tick("2026-03-01T10:00:00Z"), tick("2026-03-01T11:00:00Z"), tick("2026-03-01T12:00:00Z"), tick("2026-03-01T13:00:00Z")]
    );
    assert_eq!(fake.now_rfc3339(), "2026-03-01T13:30:00Z");
    fake.advance(std::time::Duration::from_secs(1800));
    assert_eq!(fake.converge::<Hourly>(&key, 3).unwrap().len(), 1, "14:00 fires once the clock is moved there");
    assert_eq!(fake.now_rfc3339(), "2026-03-01T15:00:00Z", "converge moved it to the next requeue");
    assert_eq!(fake.run_until::<Hourly>(&key, "2026-03-01T15:10:00Z", 5).unwrap().len(), 1);
    assert!(fake.run_until::<Hourly>(&key, "2026-03-01T15:50:00Z", 5).unwrap().is_empty(), "nothing due before 16:00");
    assert_eq!(fake.now_rfc3339(), "2026-03-01T15:50:00Z");
}

/// Creates a ConfigMap and says so in the Namespace's status, the status after the write.
struct Reporter;
impl Reconciler for Reporter {
    fn metadata() -> Metadata {
        Metadata::new("reporter", "0").reconciles(kinds::NAMESPACE).owns(kinds::CONFIG_MAP)
    }
    fn reconcile(req: Request) -> Result<Outcome, Error> {
        let Some(ns) = cache::get_key::<Value>(&req.key)? else { return Ok(Outcome::new()) };
        if let Some(failed) = &req.last_error {
            return Ok(Outcome::new().status(&ns, json!({"failed": failed})).create_owned(&ns, report(&req)));
        }
        if cache::get::<Value>(&kinds::CONFIG_MAP, Some(&req.key.name), "report")?.is_some() {
            return Ok(Outcome::new());
        }
        Ok(Outcome::new().status_after_writes(&ns, json!({"created": "report"})).create_owned(&ns, report(&req)))
    }
}

fn report(req: &Request) -> Value {
    json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "report", "namespace": req.key.name}})
}

#[test]
fn a_failing_create_stops_the_outcome_and_its_status_after_writes_is_not_written() {
    let fake = FakeCache::for_reconciler::<Reporter>().with_yaml("apiVersion: v1\nkind: Namespace\nmetadata: {name: ns, uid: ns-1}\n");
    let key = kinds::NAMESPACE.key(None, "ns");
    fake.fail_creates(&kinds::CONFIG_MAP, "configmaps \"report\" is forbidden: exceeded quota");
    let err = fake.converge::<Reporter>(&key, 3).unwrap_err();
    assert!(err.contains("create v1/ConfigMap/ns/report: configmaps \"report\" is forbidden"), "{err}");
    assert_eq!(fake.get(&key).unwrap().get("status"), None, "the status after the failed create was not written");
    assert!(fake.get(&kinds::CONFIG_MAP.key(Some("ns"), "report")).is_none());
    // The next reconcile is told why (as the host's request), and says so.
    assert_eq!(fake.last_error(&key).as_deref(), Some("create v1/ConfigMap/ns/report: configmaps \"report\" is forbidden: exceeded quota"));
    let out = fake.reconcile::<Reporter>(&key).unwrap();
    fake.execute(&out);
    assert_eq!(
        fake.get(&key).unwrap()["status"]["failed"],
        "create v1/ConfigMap/ns/report: configmaps \"report\" is forbidden: exceeded quota"
    );
    // Once the create goes through, the status says it and the error is gone.
    fake.clear_failures();
    fake.converge::<Reporter>(&key, 3).unwrap();
    assert_eq!(fake.last_error(&key), None);
    assert!(fake.get(&kinds::CONFIG_MAP.key(Some("ns"), "report")).is_some());
}

#[test]
fn an_index_over_the_controller_owner_of_one_kind() {
    const CRON: crate::KindRef = crate::KindRef::from_static("batch.tutorial.kubebuilder.io/v1", "CronJob");
    let m = Metadata::new("cron", "0").reconciles(CRON).owns(kinds::JOB).controller_index(kinds::JOB, "cron", &CRON);
    let owner = |kind: &str, api: &str, controller: bool| json!([{"apiVersion": api, "kind": kind, "name": "nightly", "uid": "u", "controller": controller}]);
    let job = |name: &str, owners: Value| json!({"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": name, "namespace": "ns", "ownerReferences": owners}});
    let fake = FakeCache::new(m)
        .with(job("mine", owner("CronJob", "batch.tutorial.kubebuilder.io/v1", true)))
        .with(job("other-group", owner("CronJob", "batch/v1", true)))
        .with(job("not-controller", owner("CronJob", "batch.tutorial.kubebuilder.io/v1", false)))
        .with(job("other-kind", owner("Deployment", "apps/v1", true)));
    let names: Vec<String> = fake
        .enter(|| cache::by_index::<Value>(&kinds::JOB, "cron", "nightly"))
        .unwrap()
        .iter()
        .filter_map(|j| object::name(j).map(str::to_owned))
        .collect();
    assert_eq!(names, ["mine"]);
}

#[test]
#[should_panic(expected = "filters ([field=value]) are for indexes")]
fn a_field_with_a_filter_is_refused_as_the_host_refuses_it() {
    FakeCache::new(Metadata::new("x", "0").reconciles(kinds::POD).field(kinds::POD, "spec.containers[name=a].image"));
}
