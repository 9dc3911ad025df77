//! Property tests of admission against an oracle: random merge patches, JSON patches, creates,
//! partial applies and deletes of workloads (Deployments, Pods, a custom resource with a pod
//! template) and of RBAC bindings, each refused **exactly when** the object it produces breaks a
//! rule, as an independent, simpler reading of the rules says:
//!
//! - a write in the host's namespace is refused; elsewhere a workload write is refused exactly
//!   when its result carries a plugin label;
//! - a binding write is refused exactly when the binding before or after it (the patch applied by
//!   `json_patch`, independently) names an identity of the host's namespace — or when the patch
//!   does not apply to the object at all.
//!
//! Run with [`crate::fuzz::run`] (`scripts/fuzz.sh` for the long run).

use proptest::prelude::*;
use serde_json::{Value, json};

use super::protected::HostObjects;
use super::rbac::Stores;
use super::{Admission, Context, Error, Protected, Scopes};
use crate::actions::{Action, Patch, PatchType, Preconditions};
use crate::cache::CacheView;
use crate::grants::Grants;
use crate::kinds::{KindRef, ObjectKey};

const HOST_NS: &str = "wasmloop";
const GROUP: &str = "rbac.authorization.k8s.io";

fn admission(bindings: &[Value]) -> Admission {
    let hosts = HostObjects {
        plugin_namespaces: vec![HOST_NS.into()],
        lease_namespace: None,
        service_account: Some((HOST_NS.into(), "wasmloop".into())),
    };
    Admission::new(Scopes::Builtin, Protected::with_rbac(hosts, Stores::of(bindings)))
}

fn admit(admission: &Admission, action: Action) -> Result<(), Error> {
    let grants = Grants::all().named("fuzz");
    let cache = CacheView::new();
    let ctx = Context { grants: &grants, cache: &cache, client: None, manager: "fuzz", budget: None };
    let planned = crate::actions::Planned::new(action).expect("the fuzzer's actions are valid");
    futures::executor::block_on(admission.admit(ctx, vec![planned])).map(|_| ())
}

// --- the oracle: the rules, read plainly -------------------------------------------------------

/// Whether `binding` names a ServiceAccount of the host's namespace, in any of the forms the
/// API server reads.
fn oracle_binds(binding: &Value) -> bool {
    let binding_ns = binding["metadata"]["namespace"].as_str();
    let Some(subjects) = binding["subjects"].as_array() else { return false };
    subjects.iter().any(|s| {
        let name = s["name"].as_str().unwrap_or("");
        match s["kind"].as_str() {
            Some("ServiceAccount") => {
                let ns = s["namespace"].as_str().filter(|n| !n.is_empty()).or(binding_ns);
                ns == Some(HOST_NS)
            }
            Some("Group") => ["system:serviceaccounts", "system:authenticated", "system:serviceaccounts:wasmloop"].contains(&name),
            Some("User") => name.starts_with("system:serviceaccount:wasmloop:"),
            _ => false,
        }
    })
}

fn oracle_labelled(object: &Value) -> bool {
    object["metadata"]["labels"]
        .as_object()
        .is_some_and(|l| l.contains_key("wasmloop.dev/plugin") || l.contains_key("wasmloop.dev/plugin-payload"))
}

// --- generators -----------------------------------------------------------------------------

fn subject() -> impl Strategy<Value = Value> {
    let ns = prop_oneof![Just(Value::Null), Just(json!("")), Just(json!(HOST_NS)), Just(json!("team-b"))];
    prop_oneof![
        (prop::sample::select(vec!["wasmloop", "default", "wasmloop-plugin-x"]), ns)
            .prop_map(|(name, ns)| json!({"kind": "ServiceAccount", "name": name, "namespace": ns})),
        prop::sample::select(vec![
            "system:serviceaccounts",
            "system:serviceaccounts:wasmloop",
            "system:serviceaccounts:team-b",
            "system:authenticated",
            "devs",
        ])
        .prop_map(|g| json!({"kind": "Group", "name": g})),
        prop::sample::select(vec!["system:serviceaccount:wasmloop:anyone", "system:serviceaccount:team-b:wasmloop", "alice"])
            .prop_map(|u| json!({"kind": "User", "name": u})),
    ]
}

/// A binding in team-b (RoleBinding) or cluster-scoped, as the cache holds it.
fn binding() -> impl Strategy<Value = Value> {
    (any::<bool>(), prop::collection::vec(subject(), 0..3)).prop_map(|(cluster, subjects)| {
        let (kind, ns) = if cluster { ("ClusterRoleBinding", Value::Null) } else { ("RoleBinding", json!("team-b")) };
        json!({"apiVersion": format!("{GROUP}/v1"), "kind": kind,
               "metadata": {"name": "b", "namespace": ns, "resourceVersion": "7", "uid": "u-b"},
               "roleRef": {"apiGroup": GROUP, "kind": "ClusterRole", "name": "cluster-admin"}, "subjects": subjects})
    })
}

/// A JSON patch of a binding's subjects (some do not apply: an index past the end).
fn binding_json_patch() -> impl Strategy<Value = Value> {
    let op = prop_oneof![
        (0..3usize, prop::sample::select(vec![HOST_NS, "team-b", ""]))
            .prop_map(|(i, ns)| json!({"op": "replace", "path": format!("/subjects/{i}/namespace"), "value": ns})),
        (0..3usize, prop::sample::select(vec!["system:serviceaccounts:wasmloop", "wasmloop", "devs"]))
            .prop_map(|(i, n)| json!({"op": "replace", "path": format!("/subjects/{i}/name"), "value": n})),
        (0..3usize, prop::sample::select(vec!["ServiceAccount", "Group", "User"]))
            .prop_map(|(i, k)| json!({"op": "replace", "path": format!("/subjects/{i}/kind"), "value": k})),
        subject().prop_map(|s| json!({"op": "add", "path": "/subjects/-", "value": s})),
        (0..3usize).prop_map(|i| json!({"op": "remove", "path": format!("/subjects/{i}")})),
        prop::collection::vec(subject(), 0..2).prop_map(|s| json!({"op": "replace", "path": "/subjects", "value": s})),
        Just(json!({"op": "add", "path": "/metadata/labels", "value": {"wasmloop.dev/plugin": "true"}})),
    ];
    prop::collection::vec(op, 1..4).prop_map(Value::Array)
}

fn binding_merge_patch() -> impl Strategy<Value = Value> {
    prop_oneof![
        prop::collection::vec(subject(), 0..3).prop_map(|s| json!({"subjects": s})),
        Just(json!({"metadata": {"labels": {"team": "b"}}})),
        Just(json!({"subjects": null})),
    ]
}

#[derive(Debug, Clone)]
enum Write {
    Json(Value),
    Merge(Value),
    Delete,
}

/// A workload body in `ns`, with or without a plugin label, running as some account.
fn workload() -> impl Strategy<Value = (Value, bool)> {
    let ns = prop::sample::select(vec![HOST_NS, "team-a"]);
    let kind = prop::sample::select(vec![("apps/v1", "Deployment"), ("v1", "Pod"), ("example.com/v1", "Runner")]);
    let sa = prop::sample::select(vec!["", "wasmloop", "default"]);
    (ns, kind, sa, any::<bool>()).prop_map(|(ns, (api_version, kind), sa, labelled)| {
        let spec = json!({"serviceAccountName": sa, "serviceAccount": "wasmloop", "containers": [{"name": "c", "image": "x"}]});
        let mut o = json!({"apiVersion": api_version, "kind": kind, "metadata": {"name": "w", "namespace": ns}});
        o["spec"] = if kind == "Pod" { spec } else { json!({"template": {"spec": spec}}) };
        if labelled {
            o["metadata"]["labels"] = json!({"wasmloop.dev/plugin": "true"});
        }
        (o, ns == HOST_NS)
    })
}

fn workload_patch() -> impl Strategy<Value = (PatchType, Value)> {
    prop_oneof![
        Just((PatchType::Merge, json!({"spec": {"template": {"spec": {"serviceAccountName": "wasmloop"}}}}))),
        Just((PatchType::Merge, json!({"metadata": {"labels": {"wasmloop.dev/plugin": "true"}}}))),
        Just((PatchType::Merge, json!({"metadata": {"labels": {"app": "web"}}}))),
        Just((PatchType::Json, json!([{"op": "replace", "path": "/spec/template/spec/containers/0/image", "value": "evil"}]))),
        Just((PatchType::Json, json!([{"op": "add", "path": "/metadata/labels/wasmloop.dev~1plugin-payload", "value": "x"}]))),
        Just((
            PatchType::Json,
            json!([{"op": "remove", "path": "/spec/template/spec/serviceAccountName"},
                                      {"op": "add", "path": "/spec/template/spec/serviceAccount", "value": "wasmloop"}])
        )),
    ]
}

#[test]
fn fuzz_binding_writes_are_refused_exactly_when_their_result_binds_an_identity() {
    let write = prop_oneof![binding_json_patch().prop_map(Write::Json), binding_merge_patch().prop_map(Write::Merge), Just(Write::Delete),];
    crate::fuzz::run(file!(), "admission-binding", (binding(), write), |(before, write)| {
        let admission = admission(std::slice::from_ref(&before));
        let kind = KindRef::new(format!("{GROUP}/v1"), before["kind"].as_str().unwrap_or_default());
        let key = ObjectKey::new(kind, before["metadata"]["namespace"].as_str(), "b");
        let (action, after) = match &write {
            Write::Json(ops) => {
                let mut after = before.clone();
                let parsed: json_patch::Patch = serde_json::from_value(ops.clone()).expect("generated ops parse");
                let applied = json_patch::patch(&mut after, &parsed).is_ok();
                let action = Action::Patch(Patch {
                    key,
                    status: false,
                    patch_type: PatchType::Json,
                    body: ops.clone(),
                    preconditions: Preconditions::default(),
                });
                (action, applied.then_some(after))
            }
            Write::Merge(body) => {
                let mut after = before.clone();
                json_patch::merge(&mut after, body);
                let action = Action::Patch(Patch {
                    key,
                    status: false,
                    patch_type: PatchType::Merge,
                    body: body.clone(),
                    preconditions: Preconditions::default(),
                });
                (action, Some(after))
            }
            Write::Delete => (Action::delete(key), Some(Value::Null)),
        };
        let should_refuse = match &after {
            None => true,
            Some(after) => oracle_binds(&before) || oracle_binds(after) || oracle_labelled(after),
        };
        let result = admit(&admission, action);
        prop_assert!(!matches!(result, Err(Error::Unverifiable { .. } | Error::Conflict { .. })), "{result:?}");
        prop_assert_eq!(
            result.is_err(),
            should_refuse,
            "before {} write {:?} after {:?}: {:?}",
            before,
            write,
            after,
            result.err().map(|e| e.to_string())
        );
        Ok(result.is_ok())
    });
}

#[test]
fn fuzz_workload_writes_are_refused_exactly_in_the_host_namespace_or_with_a_plugin_label() {
    let kind_of_write = prop_oneof![Just(0u8), Just(1), Just(2)];
    crate::fuzz::run(
        file!(),
        "admission-workload",
        (workload(), workload_patch(), kind_of_write),
        |((body, in_host_ns), (patch_type, patch), which)| {
            let admission = admission(&[]);
            let kind = KindRef::new(body["apiVersion"].as_str().unwrap_or_default(), body["kind"].as_str().unwrap_or_default());
            let key = ObjectKey::new(kind, body["metadata"]["namespace"].as_str(), "w");
            let (action, labelled) = match which {
                0 => (Action::Create(body.clone()), oracle_labelled(&body)),
                1 => (Action::Apply(body.clone()), oracle_labelled(&body)),
                _ => {
                    // What the patch makes of an unlabelled object: the label comes from the patch only.
                    let mut after = json!({"metadata": {"name": "w", "labels": {"app": "w"}}, "spec": {"template": {"spec": {"serviceAccountName": "x", "containers": [{"name": "c"}]}}}});
                    let labelled = match patch_type {
                        PatchType::Merge => {
                            json_patch::merge(&mut after, &patch);
                            oracle_labelled(&after)
                        }
                        PatchType::Json => {
                            let ops: json_patch::Patch = serde_json::from_value(patch.clone()).expect("ops");
                            json_patch::patch(&mut after, &ops).is_ok() && oracle_labelled(&after)
                        }
                    };
                    (
                        Action::Patch(Patch {
                            key,
                            status: false,
                            patch_type,
                            body: patch.clone(),
                            preconditions: Preconditions::default(),
                        }),
                        labelled,
                    )
                }
            };
            let result = admit(&admission, action);
            let refused_by = result.as_ref().err().map(ToString::to_string).unwrap_or_default();
            prop_assert_eq!(result.is_err(), in_host_ns || labelled, "{}", refused_by);
            if in_host_ns {
                prop_assert!(refused_by.contains("(host-namespace)"), "{}", refused_by);
            }
            Ok(result.is_ok())
        },
    );
}

/// A plugin granted `bind` on a ClusterRole may create RoleBindings to it (the API server checks
/// the escalation, as the plugin), but never of an identity of the host's namespaces, however it
/// names one: the identity rules do not read the grants.
#[test]
fn a_bind_grant_never_lets_an_identity_be_bound() {
    let yaml = "grants:\n  - kinds: [\"rbac.authorization.k8s.io/v1/RoleBinding\"]\n    verbs: [read, create]\n  \
                - kinds: [\"rbac.authorization.k8s.io/v1/ClusterRole\"]\n    verbs: [bind, escalate]\n    names: [secret-reader]\n";
    let grants = Grants::from_yaml("binder", yaml).expect("grants");
    let admission = admission(&[]);
    let create = |subject: Value| {
        let object = json!({"apiVersion": format!("{GROUP}/v1"), "kind": "RoleBinding",
            "metadata": {"name": "read-secrets", "namespace": "team-a"},
            "roleRef": {"apiGroup": GROUP, "kind": "ClusterRole", "name": "secret-reader"}, "subjects": [subject]});
        let cache = CacheView::new();
        let ctx = Context { grants: &grants, cache: &cache, client: None, manager: "binder", budget: None };
        let planned = crate::actions::Planned::new(Action::Create(object)).expect("a valid action");
        futures::executor::block_on(admission.admit(ctx, vec![planned])).map(|_| ())
    };
    assert!(create(json!({"kind": "ServiceAccount", "name": "default", "namespace": "team-a"})).is_ok());
    for subject in [
        json!({"kind": "ServiceAccount", "name": "wasmloop-plugin-binder", "namespace": HOST_NS}),
        json!({"kind": "ServiceAccount", "name": "wasmloop", "namespace": HOST_NS}),
        json!({"kind": "Group", "name": format!("system:serviceaccounts:{HOST_NS}")}),
        json!({"kind": "User", "name": format!("system:serviceaccount:{HOST_NS}:wasmloop")}),
    ] {
        let err = create(subject.clone()).expect_err("an identity bound").to_string();
        assert!(err.contains("(identity-binding)"), "{subject}: {err}");
    }
}
