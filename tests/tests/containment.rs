//! Containment, end to end: a hostile plugin tries every way out of its grants — whole bodies,
//! merge and JSON patches, partial server-side applies, the deprecated `serviceAccount` alias,
//! RBAC patches, aliases of other kinds and versions, an admission-amplifying outcome — and
//! every attempt must be refused with a message naming the rule (a Warning Event on the
//! reconciled object), change nothing (the victims' resourceVersions), and cost the host no
//! LIST or GET per action.
//!
//! The suite runs twice, at the same time:
//! - the host holding the control plane's admin credentials, writing as itself
//!   (`--plugin-identity host`), so only the host's own checks stand between plugin and cluster;
//! - the host as a ServiceAccount with only the RBAC a deploy gives it, writing as the plugin's
//!   own ServiceAccount (impersonation): here one more case shows the API server stopping a
//!   write the plugin's grants allow but its RBAC does not (a host bug cannot give more).
//!
//! Legitimate writes of the same shapes (a JSON patch of a Deployment, an RBAC patch and a
//! server-side apply outside the host's namespaces, generateName with a verified owner, an
//! Event) still go through, so the rules are not just refusing everything.

use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

use anyhow::{Context, Result, bail};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::ConfigMap;
use k8s_openapi::api::events::v1::Event;
use kube::api::{Api, DynamicObject, ListParams, PostParams};
use serde_json::{Value, json};
use wasmloop::admission::{HostObjects, Protected};
use wasmloop::identity::Identity;
use wasmloop::informer::InformerKey;
use wasmloop::kinds::KindRef;
use wasmloop_tests::hostile::{WAIT, case_configmap, cm, dynamic, key, rbac, refusal, start_hostile, victims};
use wasmloop_tests::{Host, TestNamespace, eventually, init_tracing};

/// Which of the two hostile controllers a case runs under.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Grants {
    /// Every write verb on every kind, but only in the `team` namespace; reads of ConfigMaps
    /// there; apply on v1 ClusterRoles.
    Team,
    /// `*` on every kind everywhere: only the protected-object rules stand in the way.
    All,
}

/// How the host authenticates and whose identity plugin writes carry.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Mode {
    /// Admin credentials; plugin writes as the host.
    Admin,
    /// The host's ServiceAccount with its own RBAC; plugin writes as the plugin's account.
    Impersonating,
}

struct Case {
    name: &'static str,
    grants: Grants,
    actions: Value,
    /// What the refusal Event must say.
    expect: &'static [&'static str],
}

/// The namespaces and names one run of the suite uses (each run has its own).
struct World {
    team: String,
    victim: String,
    /// The host's namespace: its ServiceAccount `host`, the plugin's `wasmloop-plugin-hostile`,
    /// its Lease namespace and its plugin namespace.
    host_ns: String,
    /// Where the `All` controller reads its cases.
    all_ns: String,
    /// Holds a plugin ConfigMap, as with `--all-namespaces`: a namespace of the host's too.
    plugins_ns: String,
    /// The ClusterRole the host is bound to (its real rights in the impersonating run).
    host_role: String,
    host_binding: String,
    /// cluster-admin bound to `<victim>/host` (same name as the host's ServiceAccount).
    admin_binding: String,
    /// A legitimate ClusterRole the `All` plugin applies.
    legit_role: String,
}

impl World {
    fn host_sa(&self) -> Value {
        json!({"kind": "ServiceAccount", "name": "host", "namespace": self.host_ns})
    }
}

/// A pod template running as `sa`, with containers `containers`.
fn deployment(name: &str, ns: &str, sa: &str) -> Value {
    json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": name, "namespace": ns},
           "spec": {"replicas": 0, "selector": {"matchLabels": {"app": name}},
                    "template": {"metadata": {"labels": {"app": name}},
                                 "spec": {"serviceAccountName": sa, "containers": [{"name": "c", "image": "registry.invalid/host:1"}]}}}})
}

fn patch(key: Value, kind: &str, body: Value) -> Value {
    json!({"patch": {"key": key, "type": kind, "body": body}})
}

/// Every attack.
fn cases(w: &World) -> Vec<Case> {
    let (team, victim, host_ns, all_ns) = (w.team.as_str(), w.victim.as_str(), w.host_ns.as_str(), w.all_ns.as_str());
    let admin_binding = |name: &str, subject: Value| {
        let mut b = rbac("ClusterRoleBinding", name, None);
        b["roleRef"] = json!({"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "cluster-admin"});
        b["subjects"] = json!([subject]);
        b
    };
    let mut team_crb = admin_binding("pwned-team-crb", json!({"kind": "ServiceAccount", "name": "default", "namespace": team}));
    team_crb["metadata"]["namespace"] = json!(team);
    let mut group_binding = rbac("RoleBinding", "pwned-group", Some(all_ns));
    group_binding["roleRef"] = json!({"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "admin"});
    group_binding["subjects"] = json!([{"kind": "Group", "name": format!("system:serviceaccounts:{host_ns}")}]);
    let mut grow_host_role = rbac("ClusterRole", &w.host_role, None);
    grow_host_role["rules"] = json!([{"apiGroups": ["*"], "resources": ["*"], "verbs": ["*"]}]);
    let mut aggregating = rbac("ClusterRole", "pwned-aggregating", None);
    aggregating["metadata"]["labels"] = json!({"rbac.authorization.k8s.io/aggregate-to-admin": "true"});
    let mut plugin_cm = cm("pwned-plugin", Some(all_ns));
    plugin_cm["metadata"]["labels"] = json!({"wasmloop.dev/plugin": "true"});
    let host_pod = json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "pwned-pod", "namespace": host_ns},
        "spec": {"serviceAccountName": "host", "containers": [{"name": "c", "image": "registry.invalid/x"}]}});
    let alias_pod = json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "pwned-alias-pod", "namespace": host_ns},
        "spec": {"serviceAccountName": "", "serviceAccount": "host", "containers": [{"name": "c", "image": "registry.invalid/x"}]}});
    let secret_pod = json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "pwned-secret-pod", "namespace": host_ns},
        "spec": {"containers": [{"name": "c", "image": "registry.invalid/x"}],
                 "volumes": [{"name": "t", "secret": {"secretName": "host-token"}}]}});
    let token = json!({"apiVersion": "v1", "kind": "Secret", "type": "kubernetes.io/service-account-token",
        "metadata": {"name": "pwned-token", "namespace": host_ns, "annotations": {"kubernetes.io/service-account.name": "host"}}});
    let owned = |name: &str, owner_kind: &str, owner: &str, uid: &str| {
        let mut o = cm(name, Some(team));
        o["metadata"]["ownerReferences"] = json!([{"apiVersion": "v1", "kind": owner_kind, "name": owner, "uid": uid}]);
        o
    };
    let host_deploy = key("apps/v1", "Deployment", Some(host_ns), "host-deploy");
    let other_deploy = key("apps/v1", "Deployment", Some(host_ns), "other-deploy");
    let host_pod_key = key("v1", "Pod", Some(host_ns), "host-pod");
    let image = json!({"spec": {"template": {"spec": {"containers": [{"name": "c", "image": "registry.invalid/pwned:1"}]}}}});
    let partial_apply = json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "host-deploy", "namespace": host_ns},
        "spec": {"template": {"spec": {"containers": [{"name": "c", "image": "registry.invalid/pwned:1"}]}}}});
    let admin_crb = key("rbac.authorization.k8s.io/v1", "ClusterRoleBinding", None, &w.admin_binding);
    let group_rb = key("rbac.authorization.k8s.io/v1", "RoleBinding", Some(victim), "team-b-group");
    let mut bind_by_apply = rbac("ClusterRoleBinding", &w.admin_binding, None);
    bind_by_apply["roleRef"] = json!({"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "cluster-admin"});
    bind_by_apply["subjects"] = json!([w.host_sa()]);
    use Grants::{All, Team};
    vec![
        // A namespace on a cluster-scoped kind does not make it namespaced.
        Case {
            name: "ns-delete-in-team",
            grants: Team,
            actions: json!([{"delete": key("v1", "Namespace", Some(team), victim)}]),
            expect: &["invalid action", "v1/Namespace is cluster-scoped, but the action names namespace"],
        },
        Case {
            name: "crb-in-team",
            grants: Team,
            actions: json!([{"apply": team_crb}]),
            expect: &["rbac.authorization.k8s.io/v1/ClusterRoleBinding is cluster-scoped, but the action names namespace"],
        },
        Case {
            name: "ns-delete",
            grants: Team,
            actions: json!([{"delete": key("v1", "Namespace", None, victim)}]),
            expect: &["may not delete v1/Namespace", "(cluster-scoped)"],
        },
        Case {
            name: "pod-elsewhere",
            grants: Team,
            actions: json!([{"create": {"apiVersion": "v1", "kind": "Pod",
                   "metadata": {"name": "pwned-pod", "namespace": victim}, "spec": {"containers": [{"name": "c", "image": "x"}]}}}]),
            expect: &["may not create v1/Pod pwned-pod in namespace", "granted only in namespaces"],
        },
        Case {
            name: "status-elsewhere",
            grants: Team,
            actions: json!([{"updateStatus": {"key": key("v1", "ConfigMap", Some(victim), "precious"), "status": {"p": 1}}}]),
            expect: &["may not update-status v1/ConfigMap precious"],
        },
        Case {
            name: "namespaced-without-ns",
            grants: Team,
            actions: json!([{"create": cm("pwned-nons", None)}]),
            expect: &["v1/ConfigMap is namespaced, but the action names no namespace"],
        },
        Case {
            name: "other-api-version",
            grants: Team,
            actions: json!([{"apply": {"apiVersion": "rbac.authorization.k8s.io/v1beta1",
                   "kind": "ClusterRole", "metadata": {"name": "pwned-beta"}}}]),
            expect: &["may not apply rbac.authorization.k8s.io/v1beta1/ClusterRole pwned-beta"],
        },
        // Targets the API server would read as something else.
        Case {
            name: "subresource",
            grants: Team,
            actions: json!([{"delete": key("v1", "Pod", Some(team), "x/status")}]),
            expect: &["ReconcileFailed", "subresources are not action targets"],
        },
        Case {
            name: "dotdot",
            grants: Team,
            actions: json!([{"delete": key("v1", "ConfigMap", Some(team), "..")}]),
            expect: &["`.` and `..` are not names"],
        },
        Case {
            name: "ns-traversal",
            grants: Team,
            actions: json!([{"create": cm("pwned-trav", Some("../kube-system"))}]),
            expect: &["invalid namespace \"../kube-system\""],
        },
        Case {
            name: "list-body",
            grants: Team,
            actions: json!([{"create": {"apiVersion": "v1", "kind": "List",
                   "metadata": {"name": "pwned-list", "namespace": team}, "items": [cm("pwned-in-list", Some(victim))]}}]),
            expect: &["kind List is a list"],
        },
        // Owners and Event subjects must be readable, with the uid the cache holds.
        Case {
            name: "owner-unreadable",
            grants: Team,
            actions: json!([{"create": owned("pwned-owner1", "Secret", "s", "x")}]),
            expect: &["ownerReferences[0]: owner v1/Secret", "the plugin may not read it"],
        },
        Case {
            name: "owner-wrong-uid",
            grants: Team,
            actions: json!([{"create": owned("pwned-owner2", "ConfigMap", "owner-wrong-uid", "bogus")}]),
            expect: &["the reference says bogus"],
        },
        Case {
            name: "event-unreadable",
            grants: Team,
            actions: json!([{"event": {"regarding": key("v1", "Secret", Some(team), "s"),
                   "type": "Normal", "reason": "Hi", "message": "m"}}]),
            expect: &["an Event may only be about an object the plugin may read"],
        },
        // One refused action refuses the whole outcome.
        Case {
            name: "all-or-nothing",
            grants: Team,
            actions: json!([{"create": cm("pwned-first", Some(team))}, {"delete": key("v1", "Namespace", None, victim)}]),
            expect: &["action 1 (delete v1/Namespace"],
        },
        Case {
            name: "patch-elsewhere",
            grants: Team,
            actions: json!([patch(key("v1", "ConfigMap", Some(victim), "precious"), "merge", json!({"data": {"x": "pwned"}}))]),
            expect: &["may not patch v1/ConfigMap precious"],
        },
        Case {
            name: "patch-owner-unreadable",
            grants: Team,
            actions: json!([patch(
                key("v1", "ConfigMap", Some(team), "patch-target"),
                "merge",
                json!({"metadata": {"ownerReferences": [{"apiVersion": "v1", "kind": "Secret", "name": "s", "uid": "x"}]}})
            )]),
            expect: &["ownerReferences[0]: owner v1/Secret", "the plugin may not read it"],
        },
        Case {
            name: "json-patch-owner-unreadable",
            grants: Team,
            actions: json!([patch(
                key("v1", "ConfigMap", Some(team), "patch-target"),
                "json",
                json!([{"op": "add", "path": "/metadata/ownerReferences/-", "value": {"apiVersion": "v1", "kind": "Secret", "name": "s", "uid": "x"}}])
            )]),
            expect: &["ownerReferences[0]: owner v1/Secret", "the plugin may not read it"],
        },
        Case {
            name: "json-patch-copy",
            grants: Team,
            actions: json!([patch(
                key("v1", "ConfigMap", Some(team), "patch-target"),
                "json",
                json!([{"op": "copy", "from": "/data", "path": "/metadata/labels"}])
            )]),
            expect: &["ReconcileFailed", "op \"copy\" is not one of add, remove, replace, test"],
        },
        // The host's namespaces: nothing but Events, whatever the body, patch or alias.
        Case {
            name: "host-ns-configmap",
            grants: All,
            actions: json!([{"apply": cm("precious", Some(host_ns))}]),
            expect: &["(host-namespace)", "plugins write nothing there but Events"],
        },
        Case {
            name: "host-lease",
            grants: All,
            actions: json!([{"apply": {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
                   "metadata": {"name": "pwned-lease", "namespace": host_ns}, "spec": {"holderIdentity": "pwned"}}}]),
            expect: &["(host-namespace)"],
        },
        Case {
            name: "host-role",
            grants: All,
            actions: json!([{"apply": rbac("Role", "pwned-role", Some(host_ns))}]),
            expect: &["(host-namespace)"],
        },
        Case { name: "host-ns-secret-pod", grants: All, actions: json!([{"create": secret_pod}]), expect: &["(host-namespace)"] },
        Case {
            name: "host-ns-delete",
            grants: All,
            actions: json!([{"delete": key("v1", "Namespace", None, host_ns)}]),
            expect: &["(host-namespace)", "is one of the host's"],
        },
        Case { name: "host-sa-pod", grants: All, actions: json!([{"create": host_pod}]), expect: &["(host-namespace)"] },
        Case { name: "host-sa-alias-pod", grants: All, actions: json!([{"create": alias_pod}]), expect: &["(host-namespace)"] },
        Case { name: "host-sa-token", grants: All, actions: json!([{"create": token}]), expect: &["(host-namespace)"] },
        Case {
            name: "merge-patch-host-image",
            grants: All,
            actions: json!([patch(host_deploy.clone(), "merge", image.clone())]),
            expect: &["(host-namespace)", "patch apps/v1/Deployment/"],
        },
        Case {
            name: "json-patch-host-image",
            grants: All,
            actions: json!([patch(
                host_deploy.clone(),
                "json",
                json!([{"op": "replace", "path": "/spec/template/spec/containers/0/image", "value": "registry.invalid/pwned:1"}])
            )]),
            expect: &["(host-namespace)"],
        },
        Case { name: "partial-apply-host-image", grants: All, actions: json!([{"apply": partial_apply}]), expect: &["(host-namespace)"] },
        Case {
            name: "patch-run-as-host",
            grants: All,
            actions: json!([patch(other_deploy.clone(), "merge", json!({"spec": {"template": {"spec": {"serviceAccountName": "host"}}}}))]),
            expect: &["(host-namespace)"],
        },
        Case {
            name: "json-patch-alias",
            grants: All,
            actions: json!([patch(
                other_deploy.clone(),
                "json",
                json!([
                   {"op": "remove", "path": "/spec/template/spec/serviceAccountName"},
                   {"op": "add", "path": "/spec/template/spec/serviceAccount", "value": "host"}])
            )]),
            expect: &["(host-namespace)"],
        },
        Case {
            name: "merge-patch-cat-token",
            grants: All,
            actions: json!([patch(
                host_deploy.clone(),
                "merge",
                json!({"spec": {"template": {"spec": {"containers": [
                   {"name": "c", "image": "busybox", "command": ["cat", "/var/run/secrets/kubernetes.io/serviceaccount/token"]}]}}}})
            )]),
            expect: &["(host-namespace)"],
        },
        Case {
            name: "patch-host-pod-image",
            grants: All,
            actions: json!([patch(
                host_pod_key,
                "json",
                json!([{"op": "replace", "path": "/spec/containers/0/image", "value": "registry.invalid/pwned:1"}])
            )]),
            expect: &["(host-namespace)"],
        },
        Case {
            name: "merge-patch-secret-volume",
            grants: All,
            actions: json!([patch(
                other_deploy.clone(),
                "merge",
                json!({"spec": {"template": {"spec": {"volumes": [{"name": "t", "secret": {"secretName": "host-token"}}]}}}})
            )]),
            expect: &["(host-namespace)"],
        },
        Case {
            name: "two-json-patches",
            grants: All,
            actions: json!([
                patch(
                    other_deploy.clone(),
                    "json",
                    json!([{"op": "add", "path": "/spec/template/spec/volumes", "value": [{"name": "t", "secret": {"secretName": "host-token"}}]}])
                ),
                patch(
                    other_deploy,
                    "json",
                    json!([{"op": "add", "path": "/spec/template/spec/containers/0/volumeMounts", "value": [{"name": "t", "mountPath": "/t"}]}])
                ),
            ]),
            expect: &["action 0 (patch", "(host-namespace)"],
        },
        Case {
            name: "plugin-configmap",
            grants: All,
            actions: json!([{"delete": key("v1", "ConfigMap", Some(&w.plugins_ns), "plugin-x")}]),
            expect: &["(host-namespace)"],
        },
        // Plugin code, anywhere.
        Case { name: "plugin-label", grants: All, actions: json!([{"apply": plugin_cm}]), expect: &["(plugin-label)"] },
        Case {
            name: "patch-plugin-label",
            grants: All,
            actions: json!([patch(
                key("v1", "ConfigMap", Some(all_ns), "precious"),
                "json",
                json!([{"op": "add", "path": "/metadata/labels", "value": {"wasmloop.dev/plugin": "true"}}])
            )]),
            expect: &["(plugin-label)"],
        },
        // RBAC, judged by what it will be.
        Case {
            name: "bind-host-sa",
            grants: All,
            actions: json!([{"apply": admin_binding("pwned-crb", w.host_sa())}]),
            expect: &["(identity-binding)", "would bind ServiceAccount \"host\""],
        },
        Case { name: "bind-host-group", grants: All, actions: json!([{"apply": group_binding}]), expect: &["(identity-binding)"] },
        Case {
            name: "grow-host-role",
            grants: All,
            actions: json!([{"apply": grow_host_role}]),
            expect: &["(identity-role)", "is bound to an identity of the host's"],
        },
        Case {
            name: "unbind-host",
            grants: All,
            actions: json!([{"delete": key("rbac.authorization.k8s.io/v1", "ClusterRoleBinding", None, &w.host_binding)}]),
            expect: &["(identity-binding)", " binds "],
        },
        Case { name: "aggregate", grants: All, actions: json!([{"apply": aggregating}]), expect: &["(identity-role)", "aggregate-to"] },
        Case {
            name: "patch-host-binding",
            grants: All,
            actions: json!([patch(
                key("rbac.authorization.k8s.io/v1", "ClusterRoleBinding", None, &w.host_binding),
                "json",
                json!([{"op": "replace", "path": "/roleRef/name", "value": "view"}])
            )]),
            expect: &["(identity-binding)"],
        },
        Case {
            name: "json-patch-subject-namespace",
            grants: All,
            actions: json!([patch(
                admin_crb.clone(),
                "json",
                json!([{"op": "replace", "path": "/subjects/0/namespace", "value": host_ns}])
            )]),
            expect: &["(identity-binding)", "would bind ServiceAccount \"host\""],
        },
        Case {
            name: "merge-patch-subjects",
            grants: All,
            actions: json!([patch(admin_crb, "merge", json!({"subjects": [{"kind": "Group", "name": "system:authenticated"}]}))]),
            expect: &["(identity-binding)", "Group \"system:authenticated\""],
        },
        Case {
            name: "partial-apply-subjects",
            grants: All,
            actions: json!([{"apply": bind_by_apply}]),
            expect: &["(identity-binding)", "would bind"],
        },
        Case {
            name: "json-patch-group-subject",
            grants: All,
            actions: json!([patch(
                group_rb,
                "json",
                json!([{"op": "replace", "path": "/subjects/0/name", "value": format!("system:serviceaccounts:{host_ns}")}])
            )]),
            expect: &["(identity-binding)", "Group \"system:serviceaccounts:"],
        },
    ]
}

/// The amplifier case (run last, alone, with the API requests counted around it).
fn amplifier(w: &World) -> Value {
    let mut actions: Vec<Value> = (0..999)
        .map(|i| {
            json!({"event": {"regarding": key("rbac.authorization.k8s.io/v1", "ClusterRole", None, &w.host_role),
                             "type": "Normal", "reason": "Noise", "message": format!("event {i}")}})
        })
        .collect();
    actions.push(json!({"delete": key("v1", "Namespace", None, &w.host_ns)}));
    Value::Array(actions)
}

/// The admin's set-up: namespaces, the host's account bound to its role, the victims.
async fn world(admin: &kube::Client, prefix: &str) -> Result<(World, Vec<TestNamespace>)> {
    let team = TestNamespace::create(admin, &format!("{prefix}-team")).await?;
    let all_ns = TestNamespace::create(admin, &format!("{prefix}-all")).await?;
    let host_ns = TestNamespace::create(admin, &format!("{prefix}-host")).await?;
    let victim = TestNamespace::create(admin, &format!("{prefix}-victim")).await?;
    let plugins_ns = TestNamespace::create(admin, &format!("{prefix}-plugins")).await?;
    let suffix = host_ns.name.rsplit('-').next().unwrap_or_default().to_owned();
    let w = World {
        team: team.name.clone(),
        victim: victim.name.clone(),
        host_ns: host_ns.name.clone(),
        all_ns: all_ns.name.clone(),
        plugins_ns: plugins_ns.name.clone(),
        host_role: format!("{prefix}-host-role-{suffix}"),
        host_binding: format!("{prefix}-host-binding-{suffix}"),
        admin_binding: format!("{prefix}-admin-{suffix}"),
        legit_role: format!("{prefix}-legit-{suffix}"),
    };
    let pp = PostParams::default();
    let create = |api: Api<DynamicObject>, body: Value| {
        let pp = pp.clone();
        async move { api.create(&pp, &serde_json::from_value(body)?).await.map(|_| ()).map_err(anyhow::Error::from) }
    };
    let rbac_api = |kind: &str, plural: &str, ns: Option<&str>| dynamic(admin, "rbac.authorization.k8s.io", "v1", kind, plural, ns);
    for (ns, sa) in [(&w.host_ns, "host"), (&w.host_ns, "wasmloop-plugin-hostile"), (&w.victim, "host")] {
        create(dynamic(admin, "", "v1", "ServiceAccount", "serviceaccounts", Some(ns)), json!({"metadata": {"name": sa}})).await?;
    }
    // The host's own rights: what a deploy gives it for this plugin (reads of the cases and of
    // plugin ConfigMaps, Events, the RBAC informers, impersonating the plugin's account).
    let mut role = rbac("ClusterRole", &w.host_role, None);
    role["rules"] = json!([
        {"apiGroups": [""], "resources": ["configmaps"], "verbs": ["list", "watch"]},
        {"apiGroups": ["events.k8s.io"], "resources": ["events"], "verbs": ["create", "patch"]},
        {"apiGroups": ["rbac.authorization.k8s.io"], "resources": ["roles", "clusterroles", "rolebindings", "clusterrolebindings"], "verbs": ["list", "watch"]},
        {"apiGroups": [""], "resources": ["serviceaccounts"], "verbs": ["impersonate"], "resourceNames": ["wasmloop-plugin-hostile"]},
    ]);
    create(rbac_api("ClusterRole", "clusterroles", None), role).await?;
    let mut binding = rbac("ClusterRoleBinding", &w.host_binding, None);
    binding["roleRef"] = json!({"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": w.host_role});
    binding["subjects"] = json!([w.host_sa()]);
    create(rbac_api("ClusterRoleBinding", "clusterrolebindings", None), binding).await?;
    // The plugin's own rights: only what its legitimate cases need (no delete anywhere).
    let mut plugin_role = rbac("ClusterRole", &format!("{}-plugin", w.host_role), None);
    plugin_role["rules"] = json!([
        {"apiGroups": [""], "resources": ["configmaps"], "verbs": ["create"]},
        {"apiGroups": ["apps"], "resources": ["deployments"], "verbs": ["patch"]},
        {"apiGroups": ["rbac.authorization.k8s.io"], "resources": ["rolebindings", "clusterroles"], "verbs": ["create", "patch"]},
        {"apiGroups": ["rbac.authorization.k8s.io"], "resources": ["clusterroles"], "verbs": ["bind"], "resourceNames": ["view"]},
    ]);
    create(rbac_api("ClusterRole", "clusterroles", None), plugin_role).await?;
    let mut plugin_binding = rbac("ClusterRoleBinding", &format!("{}-plugin", w.host_role), None);
    plugin_binding["roleRef"] =
        json!({"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": format!("{}-plugin", w.host_role)});
    plugin_binding["subjects"] = json!([{"kind": "ServiceAccount", "name": "wasmloop-plugin-hostile", "namespace": w.host_ns}]);
    create(rbac_api("ClusterRoleBinding", "clusterrolebindings", None), plugin_binding).await?;
    // Victims.
    let mut crb = rbac("ClusterRoleBinding", &w.admin_binding, None);
    crb["roleRef"] = json!({"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "cluster-admin"});
    crb["subjects"] = json!([{"kind": "ServiceAccount", "name": "host", "namespace": w.victim}]);
    create(rbac_api("ClusterRoleBinding", "clusterrolebindings", None), crb).await?;
    for (name, role, subject) in [
        ("team-b-group", "admin", json!({"kind": "Group", "name": format!("system:serviceaccounts:{}", w.victim)})),
        ("team-b-viewer", "view", json!({"kind": "ServiceAccount", "name": "host", "namespace": w.victim})),
    ] {
        let mut rb = rbac("RoleBinding", name, Some(&w.victim));
        rb["roleRef"] = json!({"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": role});
        rb["subjects"] = json!([subject]);
        create(rbac_api("RoleBinding", "rolebindings", Some(&w.victim)), rb).await?;
    }
    let deployments = |ns: &str| dynamic(admin, "apps", "v1", "Deployment", "deployments", Some(ns));
    create(deployments(&w.host_ns), deployment("host-deploy", &w.host_ns, "host")).await?;
    create(deployments(&w.host_ns), deployment("other-deploy", &w.host_ns, "default")).await?;
    create(deployments(&w.team), deployment("team-deploy", &w.team, "default")).await?;
    let pod = json!({"metadata": {"name": "host-pod"}, "spec": {"serviceAccountName": "host", "containers": [{"name": "c", "image": "registry.invalid/host:1"}]}});
    create(dynamic(admin, "", "v1", "Pod", "pods", Some(&w.host_ns)), pod).await?;
    for ns in [&w.victim, &w.host_ns, &w.all_ns, &w.team] {
        create(dynamic(admin, "", "v1", "ConfigMap", "configmaps", Some(ns)), json!({"metadata": {"name": "precious"}})).await?;
    }
    create(dynamic(admin, "", "v1", "ConfigMap", "configmaps", Some(&w.team)), json!({"metadata": {"name": "keep"}})).await?;
    let plugin_cm = json!({"metadata": {"name": "plugin-x", "labels": {"wasmloop.dev/plugin": "true"}}});
    create(dynamic(admin, "", "v1", "ConfigMap", "configmaps", Some(&w.plugins_ns)), plugin_cm).await?;
    Ok((w, vec![team, all_ns, host_ns, victim, plugins_ns]))
}

/// The objects attacks aim at.
fn targets(admin: &kube::Client, w: &World) -> Vec<(Api<DynamicObject>, String)> {
    let rbac_api = |kind: &str, plural: &str, ns: Option<&str>| dynamic(admin, "rbac.authorization.k8s.io", "v1", kind, plural, ns);
    let ns_api = dynamic(admin, "", "v1", "Namespace", "namespaces", None);
    vec![
        (ns_api.clone(), w.victim.clone()),
        (ns_api, w.host_ns.clone()),
        (dynamic(admin, "", "v1", "ConfigMap", "configmaps", Some(&w.victim)), "precious".into()),
        (dynamic(admin, "", "v1", "ConfigMap", "configmaps", Some(&w.host_ns)), "precious".into()),
        (dynamic(admin, "", "v1", "ConfigMap", "configmaps", Some(&w.plugins_ns)), "plugin-x".into()),
        (dynamic(admin, "", "v1", "ConfigMap", "configmaps", Some(&w.team)), "keep".into()),
        (dynamic(admin, "", "v1", "ServiceAccount", "serviceaccounts", Some(&w.host_ns)), "host".into()),
        (dynamic(admin, "", "v1", "Pod", "pods", Some(&w.host_ns)), "host-pod".into()),
        (dynamic(admin, "apps", "v1", "Deployment", "deployments", Some(&w.host_ns)), "host-deploy".into()),
        (dynamic(admin, "apps", "v1", "Deployment", "deployments", Some(&w.host_ns)), "other-deploy".into()),
        (rbac_api("ClusterRole", "clusterroles", None), w.host_role.clone()),
        (rbac_api("ClusterRoleBinding", "clusterrolebindings", None), w.host_binding.clone()),
        (rbac_api("ClusterRoleBinding", "clusterrolebindings", None), w.admin_binding.clone()),
        (rbac_api("RoleBinding", "rolebindings", Some(&w.victim)), "team-b-group".into()),
    ]
}

/// One run of the suite in `mode`.
async fn suite(mode: Mode, prefix: &str) -> Result<()> {
    init_tracing();
    let admin = Host::new().await?;
    let (w, namespaces) = world(&admin.client, prefix).await?;
    let dir = tempfile::tempdir()?;
    let host = match mode {
        Mode::Admin => Host::new().await?,
        Mode::Impersonating => {
            let kubeconfig = wasmloop_tests::sa_kubeconfig(&admin.client, &w.host_ns, "host", dir.path()).await?;
            Host::with_kubeconfig(Path::new(&kubeconfig)).await?
        }
    };
    let hosts = HostObjects {
        plugin_namespaces: vec![w.host_ns.clone()],
        lease_namespace: Some(w.host_ns.clone()),
        service_account: Some((w.host_ns.clone(), "host".into())),
    };
    let protected = Protected::new(hosts, host.registry.clone());
    let plugin_cms = host
        .registry
        .acquire(InformerKey::new(KindRef::new("v1", "ConfigMap"), Some(w.plugins_ns.clone()), Some("wasmloop.dev/plugin=true"))?)
        .await?;
    plugin_cms.wait_synced(WAIT).await?;
    protected.watch_plugin_configmaps(plugin_cms.store().clone());
    let identity =
        (mode == Mode::Impersonating).then(|| Identity::of_plugin(&w.host_ns, "hostile", wasmloop::identity::Role::Serving, None));
    let shared = host.shared_with(protected);
    let executor = host.executor.acting_as(identity.as_ref())?;

    let team_manifest = format!(
        "name: hostile\nqueue: {{baseDelay: 50ms}}\ngrants:\n  - kinds: [\"v1/ConfigMap\"]\n    verbs: [read]\n    namespaces: [{team}]\n  - kinds: [\"*\"]\n    verbs: [create, apply, patch, delete, update-status, event]\n    namespaces: [{team}]\n  - kinds: [\"rbac.authorization.k8s.io/v1/ClusterRole\"]\n    verbs: [apply]\n",
        team = w.team
    );
    let all_manifest = "name: hostile\nqueue: {baseDelay: 50ms}\ngrants:\n  - kinds: [\"*\"]\n    verbs: [\"*\"]\n";
    // The team plugin runs cluster-wide, but its reads are granted in one namespace only.
    let (team_ctl, _) = start_hostile(shared.clone(), executor.clone(), &team_manifest, None).await?;
    let (all_ctl, _) = start_hostile(shared.clone(), executor.clone(), all_manifest, Some(w.all_ns.clone())).await?;

    // Namespace-restricted reads scope the watches: no cluster-wide ConfigMap informer.
    let cm_kind = KindRef::new("v1", "ConfigMap");
    let case_informers: Vec<_> = host
        .registry
        .running()
        .into_iter()
        .filter(|k| k.kind == cm_kind && k.selector.as_deref() == Some("wasmloop.dev/hostile-test=true"))
        .collect();
    assert!(case_informers.iter().all(|k| k.namespace.is_some()), "a hostile-test informer watches all namespaces: {case_informers:?}");

    let targets = targets(&admin.client, &w);
    let before = victims(&targets).await?;
    let pp = PostParams::default();
    let ns_of = |g: Grants| if g == Grants::Team { &w.team } else { &w.all_ns };
    let cases = cases(&w);
    for case in &cases {
        Api::<ConfigMap>::namespaced(admin.client.clone(), ns_of(case.grants))
            .create(&pp, &case_configmap(case.name, &case.actions))
            .await?;
    }
    // A case in a namespace the team plugin may not read is never reconciled.
    let unseen = json!([{"create": cm("pwned-unseen", Some(&w.victim))}]);
    Api::<ConfigMap>::namespaced(admin.client.clone(), &w.victim).create(&pp, &case_configmap("unseen", &unseen)).await?;

    let mut failures = Vec::new();
    for case in &cases {
        let message = refusal(&admin.client, ns_of(case.grants), case.name).await?;
        println!("{mode:?} {:<28} {message}", case.name);
        if let Some(missing) = case.expect.iter().find(|e| !message.contains(**e)) {
            failures.push(format!("{}: expected {missing:?} in {message:?}", case.name));
        }
    }

    // Amplification: with the RBAC informers running (the cases above started them), an outcome
    // of 999 Events about a ClusterRole and one refused action costs no LIST and no GET.
    let requests = host.requests.snapshot();
    Api::<ConfigMap>::namespaced(admin.client.clone(), &w.all_ns).create(&pp, &case_configmap("amplifier", &amplifier(&w))).await?;
    let message = refusal(&admin.client, &w.all_ns, "amplifier").await?;
    let after = host.requests.snapshot();
    println!("{mode:?} amplifier: {message}; {} LISTs, {} GETs while admitting it", after.list - requests.list, after.get - requests.get);
    if !message.contains("action 999 (delete v1/Namespace") || !message.contains("(host-namespace)") {
        failures.push(format!("amplifier: {message}"));
    }
    if after.list - requests.list > 2 || after.get - requests.get > 2 {
        failures.push(format!("amplifier: {} LISTs and {} GETs", after.list - requests.list, after.get - requests.get));
    }

    legitimate_writes_go_through(&admin.client, &w, &mut failures).await?;
    failures_carry_actions_through_admission(&admin.client, &w, &mut failures).await?;
    if mode == Mode::Impersonating {
        rbac_bounds_what_grants_allow(&admin.client, &host, &w, &mut failures).await?;
    }

    // Nothing was written: victims unchanged, no `pwned-*` object anywhere, the unseen case untouched.
    if victims(&targets).await? != before {
        failures.push(format!("a protected or out-of-grant object changed: {before:?} → {:?}", victims(&targets).await?));
    }
    nothing_pwned(&admin.client, &w, &mut failures).await?;
    let refused: u64 = ["create", "apply", "patch", "delete", "update-status", "event"]
        .iter()
        .map(|v| host.metrics.actions("hostile", v, "refused"))
        .sum();
    if refused < 40 {
        failures.push(format!("refusals counted in the metrics: {refused}"));
    }

    team_ctl.shutdown(Duration::from_secs(5)).await;
    all_ctl.shutdown(Duration::from_secs(5)).await;
    let crbs = dynamic(&admin.client, "rbac.authorization.k8s.io", "v1", "ClusterRoleBinding", "clusterrolebindings", None);
    let crs = dynamic(&admin.client, "rbac.authorization.k8s.io", "v1", "ClusterRole", "clusterroles", None);
    for name in [&w.host_binding, &w.admin_binding, &format!("{}-plugin", w.host_role)] {
        let _ = crbs.delete(name, &Default::default()).await;
    }
    for name in [&w.host_role, &w.legit_role, &format!("{}-plugin", w.host_role)] {
        let _ = crs.delete(name, &Default::default()).await;
    }
    for ns in namespaces {
        ns.cleanup().await?;
    }
    if !failures.is_empty() {
        bail!("{mode:?}: {} containment failures:\n{}", failures.len(), failures.join("\n"));
    }
    Ok(())
}

/// The same shapes, outside the host's namespaces and rules, are written: a JSON patch of a
/// Deployment, a merge patch of a RoleBinding (checked on its result, sent with its
/// resourceVersion), a server-side apply of a ClusterRole (checked on the dry run's result),
/// generateName with a verified owner, an Event.
async fn legitimate_writes_go_through(admin: &kube::Client, w: &World, failures: &mut Vec<String>) -> Result<()> {
    let pp = PostParams::default();
    let team_cms = Api::<ConfigMap>::namespaced(admin.clone(), &w.team);
    let team_legit = json!([
        {"create": {"apiVersion": "v1", "kind": "ConfigMap",
                    "metadata": {"generateName": "gen-", "namespace": "$NS",
                                 "ownerReferences": [{"apiVersion": "v1", "kind": "ConfigMap", "name": "$NAME", "uid": "$UID"}]}}},
        {"event": {"regarding": {"apiVersion": "v1", "kind": "ConfigMap", "namespace": "$NS", "name": "$NAME"},
                   "type": "Normal", "reason": "Legit", "message": "fine"}},
        patch(key("apps/v1", "Deployment", Some(&w.team), "team-deploy"), "json",
              json!([{"op": "replace", "path": "/spec/template/spec/containers/0/image", "value": "registry.invalid/patched:2"}])),
    ]);
    let legit_cm = team_cms.create(&pp, &case_configmap("legit", &team_legit)).await?;
    let legit_uid = legit_cm.metadata.uid.clone().context("uid")?;
    let mut legit_role = rbac("ClusterRole", &w.legit_role, None);
    legit_role["rules"] = json!([]);
    let all_legit = json!([
        patch(key("rbac.authorization.k8s.io/v1", "RoleBinding", Some(&w.victim), "team-b-viewer"), "merge",
              json!({"subjects": [{"kind": "ServiceAccount", "name": "host", "namespace": w.victim},
                                  {"kind": "ServiceAccount", "name": "reader", "namespace": w.victim}]})),
        {"apply": legit_role},
    ]);
    Api::<ConfigMap>::namespaced(admin.clone(), &w.all_ns).create(&pp, &case_configmap("legit-rbac", &all_legit)).await?;

    let generated = eventually("the generateName ConfigMap", WAIT, || {
        let (team_cms, legit_uid) = (team_cms.clone(), legit_uid.clone());
        async move {
            let list = team_cms.list(&ListParams::default()).await?;
            Ok(list.items.into_iter().find(|c| {
                c.metadata.generate_name.as_deref() == Some("gen-")
                    && c.metadata.owner_references.iter().flatten().any(|o| o.uid == legit_uid)
            }))
        }
    })
    .await;
    if let Err(e) = generated {
        failures.push(format!("legit generateName create: {e:#}"));
    }
    let deployments = Api::<Deployment>::namespaced(admin.clone(), &w.team);
    let patched = eventually("the team Deployment's image patched", WAIT, || {
        let deployments = deployments.clone();
        async move {
            let d = deployments.get("team-deploy").await?;
            let image = d.spec.and_then(|s| s.template.spec).and_then(|s| s.containers.first().and_then(|c| c.image.clone()));
            Ok((image.as_deref() == Some("registry.invalid/patched:2")).then_some(()))
        }
    })
    .await;
    if let Err(e) = patched {
        failures.push(format!("legit JSON patch of a Deployment: {e:#}"));
    }
    let rbs = dynamic(admin, "rbac.authorization.k8s.io", "v1", "RoleBinding", "rolebindings", Some(&w.victim));
    let crs = dynamic(admin, "rbac.authorization.k8s.io", "v1", "ClusterRole", "clusterroles", None);
    let rbac_written = eventually("the legit RBAC writes", WAIT, || {
        let (rbs, crs, name) = (rbs.clone(), crs.clone(), w.legit_role.clone());
        async move {
            let rb = rbs.get("team-b-viewer").await?;
            let subjects = rb.data.get("subjects").and_then(Value::as_array).map_or(0, Vec::len);
            Ok((subjects == 2 && crs.get_opt(&name).await?.is_some()).then_some(()))
        }
    })
    .await;
    if let Err(e) = rbac_written {
        let events = Api::<Event>::namespaced(admin.clone(), &w.all_ns).list(&ListParams::default()).await?;
        let about: Vec<String> = events
            .items
            .into_iter()
            .filter(|e| e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some("legit-rbac"))
            .map(|e| e.note.unwrap_or_default())
            .collect();
        failures.push(format!("legit RBAC patch and apply: {e:#}; Events: {about:?}"));
    }
    Ok(())
}

/// Contract 0.3: a failed reconcile's actions are admitted exactly like an outcome's. A
/// permanent failure whose action writes in the host's namespace is refused (and reported), the
/// write never happens; a transient failure's Event about its own object is recorded.
async fn failures_carry_actions_through_admission(admin: &kube::Client, w: &World, failures: &mut Vec<String>) -> Result<()> {
    let pp = PostParams::default();
    let pod = json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "pwned-by-failure", "namespace": w.host_ns},
                     "spec": {"containers": [{"name": "c", "image": "registry.invalid/x"}]}});
    let refused = wasmloop_tests::hostile::data_configmap(
        "fail-refused",
        json!({"actions": json!([{"create": pod}]).to_string(), "fail": "permanent"}),
    );
    Api::<ConfigMap>::namespaced(admin.clone(), &w.all_ns).create(&pp, &refused).await?;
    let message = refusal(admin, &w.all_ns, "fail-refused").await?;
    if !message.contains("(host-namespace)") {
        failures.push(format!("a failure's action into the host namespace: {message}"));
    }
    let said = json!([{"event": {"regarding": {"apiVersion": "v1", "kind": "ConfigMap", "namespace": "$NS", "name": "$NAME"},
                                 "type": "Warning", "reason": "FailedButSaid", "message": "quota exceeded"}}]);
    let legit = wasmloop_tests::hostile::data_configmap("fail-legit", json!({"actions": said.to_string(), "fail": "transient"}));
    Api::<ConfigMap>::namespaced(admin.clone(), &w.team).create(&pp, &legit).await?;
    let events = Api::<Event>::namespaced(admin.clone(), &w.team);
    let recorded = eventually("the failed reconcile's Event", WAIT, || {
        let events = events.clone();
        async move {
            let list = events.list(&ListParams::default()).await?;
            Ok(list.items.into_iter().find(|e| {
                e.reason.as_deref() == Some("FailedButSaid") && e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some("fail-legit")
            }))
        }
    })
    .await;
    if let Err(e) = recorded {
        failures.push(format!("a transient failure's Event: {e:#}"));
    }
    Ok(())
}

/// Impersonating: a delete the plugin's grants allow (`delete` on everything in `team`) but its
/// own RBAC does not is stopped by the API server, and nothing is deleted.
async fn rbac_bounds_what_grants_allow(admin: &kube::Client, host: &Host, w: &World, failures: &mut Vec<String>) -> Result<()> {
    let errors = host.metrics.actions("hostile", "delete", "error");
    let delete = json!([{"delete": key("v1", "ConfigMap", Some(&w.team), "keep")}]);
    Api::<ConfigMap>::namespaced(admin.clone(), &w.team).create(&PostParams::default(), &case_configmap("beyond-rbac", &delete)).await?;
    let failed = eventually("the API server's refusal of a delete beyond the plugin's RBAC", WAIT, || {
        let n = host.metrics.actions("hostile", "delete", "error");
        async move { Ok((n > errors).then_some(n)) }
    })
    .await;
    match failed {
        Ok(n) => println!("Impersonating beyond-rbac: {} delete(s) refused by the API server (403), keep still there", n - errors),
        Err(e) => failures.push(format!("beyond-rbac: {e:#}")),
    }
    if Api::<ConfigMap>::namespaced(admin.clone(), &w.team).get_opt("keep").await?.is_none() {
        failures.push("beyond-rbac: the plugin deleted a ConfigMap its RBAC does not let it delete".into());
    }
    Ok(())
}

/// No object named `pwned-*` exists anywhere, and the team plugin never reconciled `unseen`.
async fn nothing_pwned(admin: &kube::Client, w: &World, failures: &mut Vec<String>) -> Result<()> {
    let rbac_api = |kind: &str, plural: &str| dynamic(admin, "rbac.authorization.k8s.io", "v1", kind, plural, None);
    for (api, what) in [
        (dynamic(admin, "", "v1", "ConfigMap", "configmaps", None), "ConfigMaps"),
        (dynamic(admin, "", "v1", "Pod", "pods", None), "Pods"),
        (dynamic(admin, "", "v1", "Secret", "secrets", None), "Secrets"),
        (rbac_api("ClusterRole", "clusterroles"), "ClusterRoles"),
        (rbac_api("Role", "roles"), "Roles"),
        (dynamic(admin, "coordination.k8s.io", "v1", "Lease", "leases", None), "Leases"),
        (rbac_api("ClusterRoleBinding", "clusterrolebindings"), "ClusterRoleBindings"),
        (rbac_api("RoleBinding", "rolebindings"), "RoleBindings"),
    ] {
        let written: Vec<String> = api
            .list(&ListParams::default())
            .await?
            .items
            .into_iter()
            .filter_map(|o| o.metadata.name)
            .filter(|n| n.starts_with("pwned-"))
            .collect();
        if !written.is_empty() {
            failures.push(format!("{what} were written: {written:?}"));
        }
    }
    let unseen: BTreeMap<String, String> = Api::<Event>::namespaced(admin.clone(), &w.victim)
        .list(&ListParams::default())
        .await?
        .items
        .into_iter()
        .filter(|e| e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some("unseen"))
        .map(|e| (e.metadata.name.unwrap_or_default(), e.note.unwrap_or_default()))
        .collect();
    if !unseen.is_empty() {
        failures.push(format!("the team plugin reconciled an object outside its read grants: {unseen:?}"));
    }
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_hostile_plugin_stays_inside_its_grants_with_admin_credentials() -> Result<()> {
    suite(Mode::Admin, "contain-admin").await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_hostile_plugin_stays_inside_its_grants_and_rbac_under_impersonation() -> Result<()> {
    suite(Mode::Impersonating, "contain-imp").await
}
