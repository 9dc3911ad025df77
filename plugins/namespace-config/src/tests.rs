use serde_json::json;
use wasmloop_sdk::testing::FakeCache;
use wasmloop_sdk::{Action, ObjectKey};

use super::*;

const CLUSTER: &str = r#"
apiVersion: v1
kind: Namespace
metadata: {name: team-a, labels: {wasmloop.dev/config: gold}}
---
apiVersion: v1
kind: Namespace
metadata: {name: team-b, labels: {wasmloop.dev/config: gold}}
---
apiVersion: v1
kind: Namespace
metadata: {name: team-c, labels: {wasmloop.dev/config: silver}}
---
apiVersion: v1
kind: Namespace
metadata: {name: team-d, labels: {wasmloop.dev/config: gold}}
status: {phase: Terminating}
---
apiVersion: v1
kind: Namespace
metadata: {name: plain}
"#;

fn ns(name: &str) -> ObjectKey {
    kinds::NAMESPACE.key(None, name)
}

fn cm_key(namespace: &str) -> ObjectKey {
    kinds::CONFIG_MAP.key(Some(namespace), CONFIG_MAP_NAME)
}

fn fake() -> FakeCache {
    FakeCache::for_reconciler::<NamespaceConfig>().with_yaml(CLUSTER)
}

fn set_profile(f: &FakeCache, name: &str, profile: Option<&str>) {
    let mut n = f.get(&ns(name)).unwrap();
    n["metadata"]["labels"] = match profile {
        Some(p) => json!({PROFILE_LABEL: p}),
        None => json!({}),
    };
    f.add(n);
}

#[test]
fn metadata_declares_the_configmap_watch_and_label_index() {
    let m = NamespaceConfig::metadata();
    assert_eq!(m.reconciles, Some(kinds::NAMESPACE));
    assert_eq!(m.watches[0].kind, kinds::CONFIG_MAP);
    assert_eq!(m.watches[0].mapping, Mapping::Namespace);
    assert_eq!(m.watches[0].selector.as_deref(), Some("app.kubernetes.io/managed-by=wasmloop"));
    assert_eq!(m.indexes[0].name, PROFILE_INDEX);
    assert_eq!(m.indexes[0].path, "labels.wasmloop.dev/config");
}

#[test]
fn applies_the_config_map_with_the_profile_and_its_size() {
    let out = fake().reconcile::<NamespaceConfig>(&ns("team-a")).unwrap();
    let applied: Vec<_> = out.applied().collect();
    assert_eq!(applied.len(), 1);
    assert_eq!(
        applied[0],
        &json!({
            "apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "wasmloop-config", "namespace": "team-a",
                         "labels": {"app.kubernetes.io/managed-by": "wasmloop", "wasmloop.dev/config": "gold"}},
            // team-a and team-b; team-d is terminating.
            "data": {"profile": "gold", "managed-by": "wasmloop", "profile-namespaces": "2"},
        })
    );
    let ev = out.events().next().unwrap();
    assert_eq!((ev.regarding.clone(), ev.event_type, ev.reason.as_str()), (ns("team-a"), EventType::Normal, "ConfigApplied"));
    assert_eq!(ev.message, "applied profile \"gold\" to ConfigMap wasmloop-config (2 namespaces use it)");
    assert_eq!(out.requeue_after, Some(REFRESH));
}

#[test]
fn converged_namespaces_write_nothing() {
    let f = fake();
    let rounds = f.converge::<NamespaceConfig>(&ns("team-c"), 3).unwrap();
    assert_eq!(rounds.len(), 1);
    assert_eq!(f.get(&cm_key("team-c")).unwrap()["data"]["profile-namespaces"], "1");
    let out = f.reconcile::<NamespaceConfig>(&ns("team-c")).unwrap();
    assert!(out.is_empty(), "{out:?}");
    // Labels added to the ConfigMap by someone else do not count as drift.
    let mut cm = f.get(&cm_key("team-c")).unwrap();
    cm["metadata"]["labels"]["extra"] = json!("x");
    f.add(cm);
    assert!(f.reconcile::<NamespaceConfig>(&ns("team-c")).unwrap().is_empty());
}

#[test]
fn profile_size_changes_update_data_without_an_event() {
    let f = fake();
    f.converge::<NamespaceConfig>(&ns("team-c"), 3).unwrap();
    set_profile(&f, "plain", Some("silver"));
    let out = f.reconcile::<NamespaceConfig>(&ns("team-c")).unwrap();
    assert_eq!(out.actions.len(), 1, "{out:?}");
    assert_eq!(out.applied().next().unwrap()["data"]["profile-namespaces"], "2");
}

#[test]
fn a_profile_change_reapplies_with_an_event() {
    let f = fake();
    f.converge::<NamespaceConfig>(&ns("team-a"), 3).unwrap();
    set_profile(&f, "team-a", Some("silver"));
    let out = f.reconcile::<NamespaceConfig>(&ns("team-a")).unwrap();
    assert_eq!(out.applied().next().unwrap()["data"]["profile"], "silver");
    assert_eq!(out.applied().next().unwrap()["metadata"]["labels"][PROFILE_LABEL], "silver");
    assert_eq!(out.events().next().unwrap().reason, "ConfigApplied");
}

#[test]
fn edited_or_deleted_config_maps_are_restored() {
    let f = fake();
    f.converge::<NamespaceConfig>(&ns("team-b"), 3).unwrap();
    let mut cm = f.get(&cm_key("team-b")).unwrap();
    cm["data"]["profile"] = json!("hacked");
    f.add(cm);
    let out = f.reconcile::<NamespaceConfig>(&ns("team-b")).unwrap();
    assert_eq!(out.applied().next().unwrap()["data"]["profile"], "gold");

    f.remove(&cm_key("team-b"));
    let out = f.reconcile::<NamespaceConfig>(&ns("team-b")).unwrap();
    assert_eq!(out.applied().count(), 1);
}

#[test]
fn removing_the_label_deletes_the_config_map() {
    let f = fake();
    f.converge::<NamespaceConfig>(&ns("team-a"), 3).unwrap();
    set_profile(&f, "team-a", None);
    let out = f.reconcile::<NamespaceConfig>(&ns("team-a")).unwrap();
    assert_eq!(out.deleted().collect::<Vec<_>>(), [&cm_key("team-a")]);
    assert_eq!(out.events().next().unwrap().reason, "ConfigRemoved");
    assert_eq!(out.requeue_after, None);
    f.execute(&out);
    assert!(f.get(&cm_key("team-a")).is_none());
    assert!(f.reconcile::<NamespaceConfig>(&ns("team-a")).unwrap().is_empty());
}

#[test]
fn an_empty_profile_counts_as_no_label() {
    let f = fake();
    f.converge::<NamespaceConfig>(&ns("team-a"), 3).unwrap();
    set_profile(&f, "team-a", Some(""));
    let out = f.reconcile::<NamespaceConfig>(&ns("team-a")).unwrap();
    assert_eq!(out.deleted().count(), 1);
}

#[test]
fn config_maps_it_does_not_manage_are_left_alone() {
    // Not labelled managed-by=wasmloop: outside the watch selector, so not in the cache.
    let f = fake().with(json!({"apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": CONFIG_MAP_NAME, "namespace": "plain"}, "data": {"mine": "yes"}}));
    let out = f.reconcile::<NamespaceConfig>(&ns("plain")).unwrap();
    assert!(out.is_empty(), "{out:?}");
}

#[test]
fn gone_and_terminating_namespaces_need_nothing() {
    let f = fake();
    assert!(f.reconcile::<NamespaceConfig>(&ns("nope")).unwrap().is_empty());
    let out = f.reconcile::<NamespaceConfig>(&ns("team-d")).unwrap();
    assert!(out.is_empty());
    assert_eq!(out.requeue_after, None);
}

#[test]
fn apply_is_used_not_create() {
    let out = fake().reconcile::<NamespaceConfig>(&ns("team-a")).unwrap();
    assert!(out.actions.iter().all(|a| !matches!(a, Action::Create(_))));
}
