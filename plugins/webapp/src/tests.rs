use serde_json::{Value, json};
use wasmloop_sdk::children::CONFLICT_REASON;
use wasmloop_sdk::testing::FakeCache;
use wasmloop_sdk::typed::ConfigMap;
use wasmloop_sdk::{ErrorKind, Mapping, ObjectKey, object};

use super::*;

const WEBAPP_YAML: &str = r#"
apiVersion: examples.wasmloop.dev/v1alpha1
kind: WebApp
metadata: {name: shop, namespace: prod, uid: app-1, generation: 2}
spec: {image: "nginx:1.27", replicas: 2, port: 8080, configMapName: shop-config}
---
apiVersion: v1
kind: ConfigMap
metadata: {name: shop-config, namespace: prod, resourceVersion: "10"}
data: {GREETING: hello}
"#;

fn key() -> ObjectKey {
    WebApp::KIND_REF.key(Some("prod"), "shop")
}

fn config_key() -> ObjectKey {
    kinds::CONFIG_MAP.key(Some("prod"), "shop-config")
}

fn fake() -> FakeCache {
    FakeCache::for_reconciler::<WebAppReconciler>().with_yaml(WEBAPP_YAML)
}

fn deployment_in(f: &FakeCache) -> Value {
    f.get(&kinds::DEPLOYMENT.key(Some("prod"), "shop")).expect("the Deployment")
}

fn template_hash(d: &Value) -> Option<&str> {
    d.pointer("/spec/template/metadata/annotations").and_then(|a| a.get(CONFIG_HASH_ANNOTATION)).and_then(Value::as_str)
}

fn condition(f: &FakeCache, type_: &str) -> Condition {
    let app = f.get(&key()).unwrap();
    conditions::find_in(&app["status"], type_).unwrap().unwrap_or_else(|| panic!("no condition {type_}: {}", app["status"]))
}

/// Set the WebApp's spec field `field` (a JSON merge of `{spec: {field: value}}`).
fn set_spec(f: &FakeCache, field: &str, value: Value) {
    let mut app = f.get(&key()).unwrap();
    app["spec"][field] = value;
    f.add(app);
}

#[test]
fn metadata_owns_the_children_and_maps_the_named_config_map_through_an_index() {
    let m = WebAppReconciler::metadata();
    assert_eq!(m.reconciles, Some(WebApp::KIND_REF));
    let watch = |k| m.watches.iter().find(|w| w.kind == k).map(|w| w.mapping.clone());
    assert_eq!(watch(kinds::DEPLOYMENT), Some(Mapping::Owner));
    assert_eq!(watch(kinds::SERVICE), Some(Mapping::Owner));
    assert_eq!(watch(kinds::CONFIG_MAP), Some(Mapping::Index { index: CONFIG_MAP_INDEX.into(), value: IndexValue::Name }));
    assert_eq!((m.indexes[0].kind.clone(), m.indexes[0].path.as_str()), (WebApp::KIND_REF, "spec.configMapName"));
}

#[test]
fn converges_to_a_deployment_and_a_service_owned_by_the_webapp_then_writes_nothing() {
    let f = fake();
    let rounds = f.converge::<WebAppReconciler>(&key(), 5).unwrap();
    assert!(!rounds.is_empty());

    let d = deployment_in(&f);
    assert_eq!(object::controller_uid(&d), Some("app-1"));
    assert_eq!(d["spec"]["replicas"], 2);
    assert_eq!(d["spec"]["selector"]["matchLabels"][INSTANCE_LABEL], "shop");
    let c = &d["spec"]["template"]["spec"]["containers"][0];
    assert_eq!((c["image"].as_str(), &c["ports"][0]["containerPort"]), (Some("nginx:1.27"), &json!(8080)));
    assert_eq!(c["envFrom"], json!([{"configMapRef": {"name": "shop-config"}}]));
    let cm: ConfigMap = serde_json::from_value(f.get(&config_key()).unwrap()).unwrap();
    assert_eq!(template_hash(&d), Some(config_hash(&cm.data, &cm.binary_data).as_str()));

    let s = f.get(&kinds::SERVICE.key(Some("prod"), "shop")).expect("the Service");
    assert_eq!(object::controller_uid(&s), Some("app-1"));
    assert_eq!(s["spec"]["ports"][0], json!({"name": "http", "port": 8080, "targetPort": 8080, "protocol": "TCP"}));
    assert_eq!(s["spec"]["selector"], d["spec"]["template"]["metadata"]["labels"]);

    // The Deployment exists but no controller has acted on it: not available, rolling out.
    let app = f.get(&key()).unwrap();
    assert_eq!(app["status"]["observedGeneration"], 2);
    assert_eq!(app["status"]["availableReplicas"], 0);
    let available = condition(&f, AVAILABLE);
    assert_eq!((available.status, available.reason.as_str()), (false.into(), "ReplicasUnavailable"));
    assert_eq!(condition(&f, PROGRESSING).reason, "RollingOut");
    assert_eq!(condition(&f, CONFIG_MISSING).status, false.into());
    assert_eq!(available.observed_generation, Some(2));

    // No empty messages: a v1.20 API server refuses `message: ""` in a status merge patch.
    let conds = conditions::read(&app["status"]).unwrap();
    assert!(conds.iter().all(|c| !c.message.is_empty()), "{conds:?}");

    // Converged: reconciling again writes nothing.
    assert!(f.reconcile::<WebAppReconciler>(&key()).unwrap().is_empty());
}

#[test]
fn the_deployments_status_is_copied_and_a_rolled_out_deployment_is_available() {
    let f = fake();
    f.converge::<WebAppReconciler>(&key(), 5).unwrap();
    let mut d = deployment_in(&f);
    d["metadata"]["generation"] = json!(1);
    d["status"] = json!({"observedGeneration": 1, "replicas": 2, "updatedReplicas": 2, "readyReplicas": 2, "availableReplicas": 2});
    f.add(d);
    let out = f.reconcile::<WebAppReconciler>(&key()).unwrap();
    let (_, status) = out.status_updates().next().expect("a status update");
    assert_eq!(
        (status["replicas"].as_i64(), status["readyReplicas"].as_i64(), status["availableReplicas"].as_i64()),
        (Some(2), Some(2), Some(2))
    );
    f.execute(&out);
    assert!(conditions::is_true(&[condition(&f, AVAILABLE)], AVAILABLE));
    assert_eq!((condition(&f, PROGRESSING).status, condition(&f, PROGRESSING).reason.as_str()), (false.into(), "RolledOut"));
    assert!(f.reconcile::<WebAppReconciler>(&key()).unwrap().is_empty());
}

#[test]
fn a_config_map_change_reaches_the_webapps_that_name_it_and_rolls_the_deployment() {
    let f = fake().with_yaml(
        r#"
apiVersion: examples.wasmloop.dev/v1alpha1
kind: WebApp
metadata: {name: other, namespace: prod, uid: app-2}
spec: {image: "nginx:1.27", port: 80, configMapName: other-config}
---
apiVersion: examples.wasmloop.dev/v1alpha1
kind: WebApp
metadata: {name: shop, namespace: staging, uid: app-3}
spec: {image: "nginx:1.27", port: 80, configMapName: shop-config}
"#,
    );
    // The host would enqueue exactly the WebApp that names this ConfigMap in its namespace.
    assert_eq!(f.mapped_keys(&config_key()), vec![key()]);
    f.converge::<WebAppReconciler>(&key(), 5).unwrap();
    let before = template_hash(&deployment_in(&f)).unwrap().to_owned();

    // A label edit changes nothing the Pods read: no new template.
    let mut cm = f.get(&config_key()).unwrap();
    cm["metadata"]["labels"] = json!({"team": "shop"});
    f.add(cm.clone());
    assert!(f.reconcile::<WebAppReconciler>(&key()).unwrap().is_empty());

    // A data edit does: the Deployment is applied with the new hash (and nothing else changes).
    cm["data"]["GREETING"] = json!("bonjour");
    f.add(cm);
    let out = f.reconcile::<WebAppReconciler>(&key()).unwrap();
    let applied: Vec<&Value> = out.applied().collect();
    assert_eq!(applied.len(), 1, "{out:?}");
    assert_eq!(applied[0]["kind"], "Deployment");
    let after = template_hash(applied[0]).unwrap();
    assert_ne!(after, before);
    f.execute(&out);
    assert!(f.reconcile::<WebAppReconciler>(&key()).unwrap().is_empty());
}

#[test]
fn a_missing_config_map_is_reported_and_the_deployment_waits_for_it() {
    let f = fake();
    let cm = f.remove(&config_key()).unwrap();
    f.converge::<WebAppReconciler>(&key(), 5).unwrap();
    assert!(f.get(&kinds::DEPLOYMENT.key(Some("prod"), "shop")).is_none(), "no Deployment without its ConfigMap");
    assert!(f.get(&kinds::SERVICE.key(Some("prod"), "shop")).is_some(), "the Service does not need it");
    let missing = condition(&f, CONFIG_MISSING);
    assert_eq!((missing.status, missing.reason.as_str()), (true.into(), "NotFound"));
    assert_eq!(condition(&f, PROGRESSING).reason, "ConfigMissing");

    // It appears: its event reaches the WebApp, which gets its Deployment.
    f.add(cm);
    assert_eq!(f.mapped_keys(&config_key()), vec![key()]);
    f.converge::<WebAppReconciler>(&key(), 5).unwrap();
    assert!(template_hash(&deployment_in(&f)).is_some());
    assert_eq!(condition(&f, CONFIG_MISSING).status, false.into());
}

#[test]
fn without_a_config_map_name_nothing_is_mapped_or_mounted() {
    let f = fake();
    let mut app = f.get(&key()).unwrap();
    app["spec"].as_object_mut().unwrap().remove("configMapName");
    f.add(app);
    assert!(f.mapped_keys(&config_key()).is_empty());
    f.converge::<WebAppReconciler>(&key(), 5).unwrap();
    let d = deployment_in(&f);
    assert!(template_hash(&d).is_none());
    assert!(d["spec"]["template"]["spec"]["containers"][0].get("envFrom").is_none());
}

#[test]
fn an_invalid_spec_fails_permanently_with_a_warning_event_and_a_condition() {
    let f = fake();
    set_spec(&f, "port", json!(70000));
    let err = f.reconcile::<WebAppReconciler>(&key()).unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Permanent);
    assert!(err.message().contains("spec.port 70000"), "{err}");
    let actions = err.actions().expect("the failure's actions");
    let event = actions.events().next().expect("an Event");
    assert_eq!((event.event_type, event.reason.as_str(), &event.regarding), (EventType::Warning, "InvalidSpec", &key()));
    assert_eq!(actions.status_updates().count(), 1);
    assert_eq!(actions.applied().count(), 0, "nothing else is done");

    // As the host: the failure's actions are executed, the error stands.
    assert!(f.converge::<WebAppReconciler>(&key(), 5).unwrap_err().contains("permanent: spec.port 70000"));
    assert_eq!(f.events().len(), 1);
    let progressing = condition(&f, PROGRESSING);
    assert_eq!((progressing.status, progressing.reason.as_str()), (false.into(), "InvalidSpec"));
    // The status write brings the WebApp back: it fails again, without repeating the actions.
    let again = f.reconcile::<WebAppReconciler>(&key()).unwrap_err();
    assert!(again.actions().is_none_or(Outcome::is_empty), "{again:?}");

    // Fixed: the WebApp converges and the condition moves on.
    set_spec(&f, "port", json!(8080));
    f.converge::<WebAppReconciler>(&key(), 5).unwrap();
    assert_eq!(condition(&f, PROGRESSING).reason, "RollingOut");
}

#[test]
fn validation() {
    let ok = WebAppSpec { image: "nginx:1.27".into(), replicas: 1, port: 80, config_map_name: Some("web.config-1".into()) };
    assert_eq!(validate(&ok), Ok(()));
    let bad = [
        WebAppSpec { image: " ".into(), ..ok.clone() },
        WebAppSpec { image: "nginx latest".into(), ..ok.clone() },
        WebAppSpec { replicas: -1, ..ok.clone() },
        WebAppSpec { port: 0, ..ok.clone() },
        WebAppSpec { config_map_name: Some("Web_Config".into()), ..ok.clone() },
        WebAppSpec { config_map_name: Some("-web".into()), ..ok.clone() },
        WebAppSpec { config_map_name: Some(String::new()), ..ok.clone() },
    ];
    for spec in bad {
        assert!(validate(&spec).is_err(), "{spec:?}");
    }
}

#[test]
fn a_foreign_object_with_the_childs_name_is_left_alone_and_reported() {
    let f = fake().with_yaml(
        r#"
apiVersion: apps/v1
kind: Deployment
metadata: {name: shop, namespace: prod, uid: theirs}
spec: {replicas: 5}
status: {replicas: 5, availableReplicas: 5}
"#,
    );
    let out = f.reconcile::<WebAppReconciler>(&key()).unwrap();
    assert!(out.applied().all(|o| o["kind"] != "Deployment"), "the foreign Deployment is not touched");
    assert!(out.events().any(|e| e.reason == CONFLICT_REASON && e.event_type == EventType::Warning));
    let (_, status) = out.status_updates().next().unwrap();
    assert_eq!(status["availableReplicas"], 0, "its status is not ours");
}

#[test]
fn the_config_hash_follows_the_data_only() {
    let data = |pairs: &[(&str, &str)]| -> Data { pairs.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned())).collect() };
    let h = config_hash(&data(&[("a", "1")]), &Data::new());
    assert_eq!(h.len(), 16);
    assert_eq!(config_hash(&data(&[("a", "1")]), &Data::new()), h);
    assert_ne!(config_hash(&data(&[("a", "2")]), &Data::new()), h);
    // Data and binary data, keys and values are delimited.
    assert_ne!(config_hash(&Data::new(), &data(&[("a", "1")])), h);
    assert_ne!(config_hash(&data(&[("ab", "")]), &Data::new()), config_hash(&data(&[("a", "b")]), &Data::new()));
}
