//! Plans against the fake cache: convergence, deletion by uid, conflicts left alone.

use std::collections::BTreeMap;

use serde_json::json;

use super::*;
use crate::testing::FakeCache;
use crate::typed::{ConfigMap, Resource};
use crate::{Action, Metadata, Reconciler, Request, kinds};

const FOO: KindRef = KindRef::from_static("example.com/v1", "Foo");

/// A Metacontroller-style parent: a ConfigMap `<foo>-<name>` per entry of `spec.configs`.
struct FooReconciler;

impl Reconciler for FooReconciler {
    fn metadata() -> Metadata {
        Metadata::new("foo", "0").reconciles(FOO).owns(kinds::CONFIG_MAP)
    }

    fn reconcile(req: Request) -> Result<Outcome, Error> {
        let Some(foo) = cache::get_key::<Value>(&req.key)? else { return Ok(Outcome::new()) };
        let configs: BTreeMap<String, BTreeMap<String, String>> = serde_json::from_value(foo["spec"]["configs"].clone())?;
        let desired = configs.into_iter().map(|(name, data)| {
            let mut cm = ConfigMap::new(format!("{}-{name}", req.key.name));
            cm.data = data;
            cm
        });
        Ok(Children::of(&foo).kind(ConfigMap::KIND_REF, desired).plan()?.with_warnings())
    }
}

fn foo(configs: Value) -> Value {
    json!({"apiVersion": "example.com/v1", "kind": "Foo",
           "metadata": {"name": "web", "namespace": "shop", "uid": "foo-1"}, "spec": {"configs": configs}})
}

fn foo_key() -> ObjectKey {
    FOO.key(Some("shop"), "web")
}

fn cm_key(name: &str) -> ObjectKey {
    kinds::CONFIG_MAP.key(Some("shop"), name)
}

fn fake(configs: Value) -> FakeCache {
    FakeCache::for_reconciler::<FooReconciler>().with(foo(configs))
}

#[test]
fn a_plan_converges_and_then_writes_nothing() {
    let f = fake(json!({"a": {"x": "1"}, "b": {"y": "2"}}));
    let rounds = f.converge::<FooReconciler>(&foo_key(), 5).unwrap();
    assert_eq!(rounds.len(), 1, "one round of applies: {rounds:?}");
    assert_eq!(rounds[0].applied().count(), 2);
    let a = f.get(&cm_key("web-a")).unwrap();
    assert_eq!(a["data"], json!({"x": "1"}));
    assert_eq!(a["metadata"]["ownerReferences"][0]["uid"], "foo-1");
    assert_eq!(a["metadata"]["ownerReferences"][0]["controller"], true);
    assert!(a["metadata"]["annotations"][DESIRED_HASH_ANNOTATION].is_string());
    assert!(f.reconcile::<FooReconciler>(&foo_key()).unwrap().is_empty());

    // Fields the API server adds do not make it apply again.
    let mut a = a;
    a["metadata"]["resourceVersion"] = "42".into();
    a["metadata"]["labels"] = json!({"added-by": "someone"});
    f.add(a);
    assert!(f.reconcile::<FooReconciler>(&foo_key()).unwrap().is_empty());
}

#[test]
fn drift_and_removed_fields_are_applied_again() {
    let f = fake(json!({"a": {"x": "1", "y": "2"}}));
    f.converge::<FooReconciler>(&foo_key(), 5).unwrap();
    // Someone changes a desired field: applied back.
    let mut a = f.get(&cm_key("web-a")).unwrap();
    a["data"]["x"] = "changed".into();
    f.add(a);
    let out = f.reconcile::<FooReconciler>(&foo_key()).unwrap();
    assert_eq!(out.applied().next().unwrap()["data"], json!({"x": "1", "y": "2"}));
    f.execute(&out);
    // The desired object loses a field: the cached one still contains the rest, but the hash
    // differs, so it is applied (server-side apply removes the field).
    f.add(foo(json!({"a": {"x": "1"}})));
    let out = f.reconcile::<FooReconciler>(&foo_key()).unwrap();
    assert_eq!(out.applied().next().unwrap()["data"], json!({"x": "1"}));
}

#[test]
fn removed_children_are_deleted_with_their_uid_after_the_applies() {
    let f = fake(json!({"a": {"x": "1"}, "b": {"y": "2"}}));
    f.converge::<FooReconciler>(&foo_key(), 5).unwrap();
    let b_uid = f.get(&cm_key("web-b")).unwrap()["metadata"]["uid"].as_str().unwrap().to_owned();
    f.add(foo(json!({"a": {"x": "3"}})));
    let out = f.reconcile::<FooReconciler>(&foo_key()).unwrap();
    assert!(matches!(&out.actions[..], [Action::Apply(_), Action::Delete(_)]), "{:?}", out.actions);
    let d = out.deletions().next().unwrap();
    assert_eq!(d.key, cm_key("web-b"));
    assert_eq!(d.preconditions.uid.as_deref(), Some(b_uid.as_str()));
    f.execute(&out);
    assert!(f.get(&cm_key("web-b")).is_none());
    assert!(f.reconcile::<FooReconciler>(&foo_key()).unwrap().is_empty());

    // An empty list deletes every child of the kind.
    f.add(foo(json!({})));
    let rounds = f.converge::<FooReconciler>(&foo_key(), 5).unwrap();
    assert_eq!(rounds[0].deleted().collect::<Vec<_>>(), [&cm_key("web-a")]);
    assert!(f.objects(&kinds::CONFIG_MAP).is_empty());
}

#[test]
fn the_uid_precondition_spares_a_recreated_child() {
    let f = fake(json!({"b": {"y": "2"}}));
    f.converge::<FooReconciler>(&foo_key(), 5).unwrap();
    f.add(foo(json!({})));
    let out = f.reconcile::<FooReconciler>(&foo_key()).unwrap();
    // Meanwhile web-b is deleted and re-created (another uid).
    let mut b = f.get(&cm_key("web-b")).unwrap();
    b["metadata"]["uid"] = "recreated".into();
    f.add(b);
    f.execute(&out);
    assert_eq!(f.get(&cm_key("web-b")).unwrap()["metadata"]["uid"], "recreated");
}

#[test]
fn foreign_objects_with_a_desired_name_are_reported_and_left_alone() {
    let f = fake(json!({"a": {"x": "1"}, "b": {"y": "2"}, "c": {"z": "3"}}));
    let orphan = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "web-a", "namespace": "shop", "uid": "o-1"},
                        "data": {"mine": "yes"}});
    let other = json!({"apiVersion": "v1", "kind": "ConfigMap",
                       "metadata": {"name": "web-b", "namespace": "shop", "uid": "o-2",
                                    "ownerReferences": [{"apiVersion": "v1", "kind": "X", "name": "x", "uid": "x-1", "controller": true}]}});
    f.add(&orphan).add(&other);
    let plan = f.enter(|| {
        let parent: Value = cache::get_key(&foo_key()).unwrap().unwrap();
        let desired = ["a", "b", "c"].map(|n| json!({"metadata": {"name": format!("web-{n}")}, "data": {"k": n}}));
        Children::of(&parent).kind(kinds::CONFIG_MAP, desired).plan().unwrap()
    });
    assert_eq!(plan.outcome.applied().map(|a| a["metadata"]["name"].as_str().unwrap()).collect::<Vec<_>>(), ["web-c"]);
    assert_eq!(plan.outcome.deleted().count(), 0);
    assert_eq!(plan.conflicts.len(), 2);
    assert_eq!(plan.conflicts[0].child, cm_key("web-a"));
    assert_eq!(plan.conflicts[0].controller_uid, None);
    assert_eq!(plan.conflicts[1].controller_uid.as_deref(), Some("x-1"));
    assert_eq!(
        plan.conflicts[1].to_string(),
        "ConfigMap \"web-b\" exists and is not controlled by Foo \"web\" (its controller has uid x-1)"
    );

    // With warnings: one Warning Event about the parent per conflict; the objects are untouched.
    let out = f.reconcile::<FooReconciler>(&foo_key()).unwrap();
    let warnings: Vec<_> = out.events().collect();
    assert_eq!(warnings.len(), 2);
    assert!(warnings.iter().all(|e| e.event_type == EventType::Warning && e.reason == CONFLICT_REASON && e.regarding == foo_key()));
    assert!(warnings[0].message.contains("\"web-a\" exists and is not controlled by Foo \"web\" (it has no controller)"));
    f.execute(&out);
    assert_eq!(f.get(&cm_key("web-a")).unwrap(), orphan);
    assert_eq!(f.get(&cm_key("web-b")).unwrap(), other);
    // Only the events remain to be written: nothing else ever touches them.
    let again = f.reconcile::<FooReconciler>(&foo_key()).unwrap();
    assert!(again.actions.iter().all(|a| matches!(a, Action::Event(_))), "{:?}", again.actions);
}

#[test]
fn children_being_deleted_are_not_deleted_or_applied_again() {
    let f = fake(json!({"a": {"x": "1"}, "b": {"y": "2"}}));
    f.converge::<FooReconciler>(&foo_key(), 5).unwrap();
    for name in ["web-a", "web-b"] {
        let mut cm = f.get(&cm_key(name)).unwrap();
        cm["metadata"]["finalizers"] = json!(["example.com/hold"]);
        f.add(cm);
    }
    // b is no longer desired: deleted once, then (held by its finalizer) left alone.
    f.add(foo(json!({"a": {"x": "2"}})));
    let rounds = f.converge::<FooReconciler>(&foo_key(), 5).unwrap();
    assert_eq!(rounds.len(), 1);
    assert_eq!(rounds[0].deleted().collect::<Vec<_>>(), [&cm_key("web-b")]);
    assert!(f.get(&cm_key("web-b")).unwrap()["metadata"]["deletionTimestamp"].is_string());
    // a is being deleted too: desired, but not applied until it is gone.
    f.execute(&Outcome::new().delete_key(cm_key("web-a")));
    f.add(foo(json!({"a": {"x": "3"}})));
    assert!(f.reconcile::<FooReconciler>(&foo_key()).unwrap().is_empty());
}

#[test]
fn a_parent_being_deleted_gets_an_empty_plan() {
    let mut parent = foo(json!({"a": {}}));
    parent["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:00Z".into();
    let f = FakeCache::for_reconciler::<FooReconciler>().with(&parent);
    assert!(f.reconcile::<FooReconciler>(&foo_key()).unwrap().is_empty());
}

#[test]
fn desired_children_are_completed_and_cleaned() {
    let f = fake(json!({}));
    let child = json!({"apiVersion": "v1", "kind": "ConfigMap",
                       "metadata": {"name": "c", "uid": "stale", "resourceVersion": "9", "labels": {"l": "v"},
                                    "annotations": {DESIRED_HASH_ANNOTATION: "old"}},
                       "status": {"x": 1}, "data": {"k": "v"}});
    let plan = f.enter(|| Children::of(&foo(json!({}))).kind(kinds::CONFIG_MAP, [child]).plan()).unwrap();
    let c = plan.outcome.applied().next().unwrap();
    assert_eq!(c["metadata"]["namespace"], "shop");
    assert!(c.get("status").is_none());
    assert!(c["metadata"].get("uid").is_none() && c["metadata"].get("resourceVersion").is_none());
    assert_ne!(c["metadata"]["annotations"][DESIRED_HASH_ANNOTATION], "old");
    assert_eq!(c["metadata"]["labels"], json!({"l": "v"}));
    // The same desired object hashes the same, whatever annotation it came with.
    let plain = json!({"metadata": {"name": "c", "labels": {"l": "v"}}, "data": {"k": "v"}});
    let again = f.enter(|| Children::of(&foo(json!({}))).kind(kinds::CONFIG_MAP, [plain]).plan()).unwrap();
    assert_eq!(again.outcome.applied().next().unwrap(), c);
}

#[test]
fn unusable_parents_and_children_are_permanent_errors() {
    let f = fake(json!({}));
    let plan = |parent: Value, child: Value| f.enter(|| Children::of(&parent).kind(kinds::CONFIG_MAP, [child]).plan()).unwrap_err();
    let named = |n: &str| json!({"metadata": {"name": n}});

    let mut no_uid = foo(json!({}));
    no_uid["metadata"].as_object_mut().unwrap().remove("uid");
    let e = plan(no_uid, named("c"));
    assert!(!e.is_transient());
    assert_eq!(e.message(), "children: parent: owner example.com/v1/Foo/shop/web has no metadata.uid");

    let e = plan(foo(json!({})), json!({"metadata": {"generateName": "c-"}}));
    assert_eq!(e.message(), "children: v1/ConfigMap #0: no metadata.name (children need stable names)");
    let e = plan(foo(json!({})), json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "c"}}));
    assert_eq!(e.message(), "children: v1/ConfigMap #0: kind is \"Secret\", not \"ConfigMap\"");
    let e = plan(foo(json!({})), json!({"metadata": {"name": "c", "namespace": "elsewhere"}}));
    assert!(e.message().contains("cannot be owned by an object in \"shop\""), "{e}");
    let controlled = json!({"metadata": {"name": "c", "ownerReferences": [{"uid": "x", "controller": true}]}});
    assert!(plan(foo(json!({})), controlled).message().contains("already has a controller"));
    let e = plan(foo(json!({})), json!(["not", "an", "object"]));
    assert_eq!(e.message(), "children: v1/ConfigMap #0: child is not a JSON object");

    let e = f
        .enter(|| Children::of(&foo(json!({}))).kind(kinds::CONFIG_MAP, [named("c")]).kind(kinds::CONFIG_MAP, [named("c")]).plan())
        .unwrap_err();
    assert_eq!(e.message(), "children: v1/ConfigMap/shop/c is desired twice");

    // A kind the plugin cannot read: transient (the cache's error), naming the kind.
    let e = f.enter(|| Children::of(&foo(json!({}))).kind(kinds::SECRET, [named("s")]).plan()).unwrap_err();
    assert!(e.is_transient());
    assert!(e.message().starts_with("children: v1/Secret: cache read not granted"), "{e}");
}

#[test]
fn containment_ignores_added_fields_only() {
    let cur = json!({"a": {"b": 1, "c": [{"x": 1, "y": 2}]}, "extra": true});
    assert!(contains(&cur, &json!({"a": {"c": [{"x": 1}]}})));
    assert!(contains(&cur, &json!({"a": {"gone": null}})));
    assert!(!contains(&cur, &json!({"a": {"b": null}})));
    assert!(!contains(&cur, &json!({"a": {"c": [{"x": 1}, {"x": 2}]}})));
    assert!(!contains(&cur, &json!({"a": {"b": "1"}})));
    assert!(!contains(&cur, &json!({"missing": 1})));
}
