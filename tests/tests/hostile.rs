//! Containment, end to end: a hostile plugin tries every way out of its grants while the host
//! holds admin credentials (the test control plane's), so only the host's own checks stand
//! between the plugin and the cluster. Every attack must be refused with a message naming the
//! rule (the host records it as a Warning Event on the reconciled object) and write nothing.
//!
//! The `hostile` test plugin returns whatever actions the reconciled ConfigMap's `data.actions`
//! lists (see tests/plugins/hostile), so each attack is one ConfigMap.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, Result, bail};
use k8s_openapi::api::core::v1::ConfigMap;
use k8s_openapi::api::events::v1::Event;
use kube::api::{Api, DynamicObject, ListParams, PostParams};
use kube::core::{ApiResource, GroupVersionKind};
use serde_json::{Value, json};
use tokio::sync::broadcast;
use wasmloop::admission::{HostObjects, Protected};
use wasmloop::controller::{Controller, ControllerConfig};
use wasmloop::hotload::{LoadEvent, PluginManager, PluginManagerConfig, PluginManifest, PluginMetrics};
use wasmloop::informer::InformerKey;
use wasmloop::kinds::KindRef;
use wasmloop::plugin::{ByteSize, PluginEngine, WasmPlugin};
use wasmloop_tests::{Host, TestNamespace, apply_plugin, eventually, init_tracing, plugin_path};

const WAIT: Duration = Duration::from_secs(60);
const CASE_LABEL: &str = "wasmloop.dev/hostile-test";

/// Which of the two hostile controllers a case runs under.
#[derive(Clone, Copy, Debug)]
enum Grants {
    /// Every write verb on every kind, but only in the `team` namespace; reads of ConfigMaps
    /// there; apply on v1 ClusterRoles.
    Team,
    /// `*` on every kind everywhere: only the protected-object rules stand in the way.
    All,
}

struct Case {
    name: &'static str,
    grants: Grants,
    actions: Value,
    /// What the refusal Event must say.
    expect: &'static [&'static str],
}

fn key(api_version: &str, kind: &str, namespace: Option<&str>, name: &str) -> Value {
    json!({"apiVersion": api_version, "kind": kind, "namespace": namespace, "name": name})
}

fn cm(name: &str, namespace: Option<&str>) -> Value {
    json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name, "namespace": namespace}, "data": {"x": "pwned"}})
}

fn rbac(kind: &str, name: &str, namespace: Option<&str>) -> Value {
    json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": kind, "metadata": {"name": name, "namespace": namespace}})
}

/// Every attack, with the namespaces it needs.
fn cases(team: &str, victim: &str, host_ns: &str, all_ns: &str, host_role: &str, host_binding: &str) -> Vec<Case> {
    let admin_binding = |name: &str, subject: Value| {
        let mut b = rbac("ClusterRoleBinding", name, None);
        b["roleRef"] = json!({"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "cluster-admin"});
        b["subjects"] = json!([subject]);
        b
    };
    let host_sa = json!({"kind": "ServiceAccount", "name": "host", "namespace": host_ns});
    let mut team_crb = admin_binding("pwned-team-crb", json!({"kind": "ServiceAccount", "name": "default", "namespace": team}));
    team_crb["metadata"]["namespace"] = json!(team);
    let mut group_binding = rbac("RoleBinding", "pwned-group", Some(all_ns));
    group_binding["roleRef"] = json!({"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "admin"});
    group_binding["subjects"] = json!([{"kind": "Group", "name": format!("system:serviceaccounts:{host_ns}")}]);
    let mut grow_host_role = rbac("ClusterRole", host_role, None);
    grow_host_role["rules"] = json!([{"apiGroups": ["*"], "resources": ["*"], "verbs": ["*"]}]);
    let mut aggregating = rbac("ClusterRole", "pwned-aggregating", None);
    aggregating["metadata"]["labels"] = json!({"rbac.authorization.k8s.io/aggregate-to-admin": "true"});
    let mut plugin_cm = cm("pwned-plugin", Some(all_ns));
    plugin_cm["metadata"]["labels"] = json!({"wasmloop.dev/plugin": "true"});
    let host_pod = json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "pwned-pod", "namespace": host_ns},
        "spec": {"serviceAccountName": "host", "containers": [{"name": "c", "image": "registry.invalid/x"}]}});
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
        // Bodies: owners and Event subjects must be readable, with the uid the cache holds.
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
        // Protected objects: no grant unlocks them.
        Case { name: "plugin-label", grants: All, actions: json!([{"apply": plugin_cm}]), expect: &["(plugin-label)"] },
        Case {
            name: "host-ns-configmap",
            grants: All,
            actions: json!([{"apply": cm("precious", Some(host_ns))}]),
            expect: &["(plugin-configmap)"],
        },
        Case {
            name: "host-lease",
            grants: All,
            actions: json!([{"apply": {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
                   "metadata": {"name": "pwned-lease", "namespace": host_ns}, "spec": {"holderIdentity": "pwned"}}}]),
            expect: &["(host-lease)"],
        },
        Case {
            name: "host-role",
            grants: All,
            actions: json!([{"apply": rbac("Role", "pwned-role", Some(host_ns))}]),
            expect: &["(host-rbac)"],
        },
        Case {
            name: "host-ns-secret-pod",
            grants: All,
            actions: json!([{"create": secret_pod}]),
            expect: &["(host-service-account-pod)", "would give a Pod in the host's namespace"],
        },
        Case {
            name: "host-ns-delete",
            grants: All,
            actions: json!([{"delete": key("v1", "Namespace", None, host_ns)}]),
            expect: &["(host-namespace)"],
        },
        Case {
            name: "host-sa-pod",
            grants: All,
            actions: json!([{"create": host_pod}]),
            expect: &["(host-service-account-pod)", "would run a Pod as the host's ServiceAccount"],
        },
        Case { name: "host-sa-token", grants: All, actions: json!([{"create": token}]), expect: &["(host-service-account)"] },
        Case {
            name: "bind-host-sa",
            grants: All,
            actions: json!([{"apply": admin_binding("pwned-crb", host_sa)}]),
            expect: &["(host-rbac-binding)"],
        },
        Case { name: "bind-host-group", grants: All, actions: json!([{"apply": group_binding}]), expect: &["(host-rbac-binding)"] },
        Case {
            name: "grow-host-role",
            grants: All,
            actions: json!([{"apply": grow_host_role}]),
            expect: &["(host-rbac-role)", "is bound to the host's ServiceAccount"],
        },
        Case {
            name: "unbind-host",
            grants: All,
            actions: json!([{"delete": key("rbac.authorization.k8s.io/v1", "ClusterRoleBinding", None, host_binding)}]),
            expect: &["(host-rbac-binding)"],
        },
        Case { name: "aggregate", grants: All, actions: json!([{"apply": aggregating}]), expect: &["(host-rbac-role)", "aggregate-to"] },
        Case {
            name: "plugin-configmap",
            grants: All,
            actions: json!([{"delete": key("v1", "ConfigMap", Some(all_ns), "plugin-x")}]),
            expect: &["(plugin-configmap)"],
        },
        // Patches (contract 0.2): what they write is admitted like a body.
        Case {
            name: "patch-elsewhere",
            grants: Team,
            actions: json!([{"patch": {"key": key("v1", "ConfigMap", Some(victim), "precious"), "body": {"data": {"x": "pwned"}}}}]),
            expect: &["may not patch v1/ConfigMap precious"],
        },
        Case {
            name: "patch-owner-unreadable",
            grants: Team,
            actions: json!([{"patch": {"key": key("v1", "ConfigMap", Some(team), "patch-target"),
                   "body": {"metadata": {"ownerReferences": [{"apiVersion": "v1", "kind": "Secret", "name": "s", "uid": "x"}]}}}}]),
            expect: &["ownerReferences[0]: owner v1/Secret", "the plugin may not read it"],
        },
        Case {
            name: "json-patch-owner-unreadable",
            grants: Team,
            actions: json!([{"patch": {"key": key("v1", "ConfigMap", Some(team), "patch-target"), "type": "json",
                   "body": [{"op": "add", "path": "/metadata/ownerReferences/-", "value": {"apiVersion": "v1", "kind": "Secret", "name": "s", "uid": "x"}}]}}]),
            expect: &["ownerReferences[0]: owner v1/Secret", "the plugin may not read it"],
        },
        Case {
            name: "json-patch-copy",
            grants: Team,
            actions: json!([{"patch": {"key": key("v1", "ConfigMap", Some(team), "patch-target"), "type": "json",
                   "body": [{"op": "copy", "from": "/data", "path": "/metadata/labels"}]}}]),
            expect: &["ReconcileFailed", "op \"copy\" is not one of add, remove, replace, test"],
        },
        Case {
            name: "patch-plugin-label",
            grants: All,
            actions: json!([{"patch": {"key": key("v1", "ConfigMap", Some(all_ns), "precious"), "type": "json",
                   "body": [{"op": "add", "path": "/metadata/labels", "value": {"wasmloop.dev/plugin": "true"}}]}}]),
            expect: &["(plugin-label)"],
        },
        Case {
            name: "patch-host-lease",
            grants: All,
            actions: json!([{"patch": {"key": key("coordination.k8s.io/v1", "Lease", Some(host_ns), "wasmloop"), "body": {"spec": {"holderIdentity": "pwned"}}}}]),
            expect: &["(host-lease)"],
        },
        Case {
            name: "patch-host-binding",
            grants: All,
            actions: json!([{"patch": {"key": key("rbac.authorization.k8s.io/v1", "ClusterRoleBinding", None, host_binding),
                   "type": "json", "body": [{"op": "replace", "path": "/roleRef/name", "value": "view"}]}}]),
            expect: &["(host-rbac-binding)"],
        },
    ]
}

fn case_configmap(name: &str, actions: &Value) -> ConfigMap {
    serde_json::from_value(json!({"metadata": {"name": name, "labels": {CASE_LABEL: "true"}},
                                  "data": {"actions": actions.to_string()}}))
    .expect("a ConfigMap")
}

/// The host's Warning Event about `name`, as "Reason: note".
async fn refusal(client: &kube::Client, ns: &str, name: &str) -> Result<String> {
    let events: Api<Event> = Api::namespaced(client.clone(), ns);
    eventually(&format!("the refusal Event of {ns}/{name}"), WAIT, || {
        let events = events.clone();
        async move {
            let list = events.list(&ListParams::default()).await?;
            Ok(list.items.into_iter().find_map(|e| {
                let about = e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some(name);
                let host = e.reporting_controller.as_deref() == Some("wasmloop");
                (about && host).then(|| format!("{}: {}", e.reason.unwrap_or_default(), e.note.unwrap_or_default()))
            }))
        }
    })
    .await
}

fn dynamic(client: &kube::Client, group: &str, version: &str, kind: &str, plural: &str, ns: Option<&str>) -> Api<DynamicObject> {
    let ar = ApiResource::from_gvk_with_plural(&GroupVersionKind::gvk(group, version, kind), plural);
    match ns {
        Some(ns) => Api::namespaced_with(client.clone(), ns, &ar),
        None => Api::all_with(client.clone(), &ar),
    }
}

/// resourceVersions of the objects the attacks aim at, keyed by a description.
async fn victims(targets: &[(Api<DynamicObject>, String)]) -> Result<BTreeMap<String, String>> {
    let mut out = BTreeMap::new();
    for (api, name) in targets {
        let obj = api.get(name).await.with_context(|| format!("victim {name}"))?;
        out.insert(format!("{:?}/{name}", api.resource_url()), obj.metadata.resource_version.unwrap_or_default());
    }
    Ok(out)
}

/// Load the hostile plugin with `manifest` and start its controller on `executor`, watching
/// `namespace` (`None`: as the manifest says).
async fn start_hostile(
    host: &Host,
    executor: wasmloop::actions::Executor,
    manifest: &str,
    namespace: Option<String>,
) -> Result<(Controller, Arc<WasmPlugin>)> {
    let m = PluginManifest::parse(manifest, "hostile")?;
    let bytes = std::fs::read(plugin_path("hostile")?)?;
    let (limits, grants) = (m.limits.clone(), m.grants.clone());
    let plugin =
        tokio::task::spawn_blocking(move || -> Result<WasmPlugin> { Ok(WasmPlugin::load(&PluginEngine::new()?, &bytes, limits, grants)?) })
            .await??;
    let plugin = Arc::new(plugin);
    let config = ControllerConfig { namespace: namespace.or(m.controller.namespace.clone()), ..m.controller.clone() };
    let controller =
        Controller::start(plugin.clone(), config, plugin.grants().clone(), host.registry.clone(), executor, host.metrics.clone()).await?;
    Ok((controller, plugin))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_hostile_plugin_stays_inside_its_grants() -> Result<()> {
    init_tracing();
    let host = Host::new().await?;
    let client = host.client.clone();
    let team = TestNamespace::create(&client, "hostile-team").await?;
    let all_ns = TestNamespace::create(&client, "hostile-all").await?;
    let host_ns = TestNamespace::create(&client, "hostile-host").await?;
    let victim = TestNamespace::create(&client, "hostile-victim").await?;
    let suffix = &host_ns.name["hostile-host-".len()..];
    let (host_role, host_binding) = (format!("hostile-host-role-{suffix}"), format!("hostile-host-binding-{suffix}"));

    // What the admin set up: the host's ServiceAccount, a role bound to it, precious objects,
    // and a plugin ConfigMap outside the host namespace (as with --all-namespaces).
    let pp = PostParams::default();
    let sas = dynamic(&client, "", "v1", "ServiceAccount", "serviceaccounts", Some(&host_ns.name));
    sas.create(&pp, &serde_json::from_value(json!({"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "host"}}))?).await?;
    let roles = dynamic(&client, "rbac.authorization.k8s.io", "v1", "ClusterRole", "clusterroles", None);
    let mut role = rbac("ClusterRole", &host_role, None);
    role["rules"] = json!([{"apiGroups": [""], "resources": ["configmaps"], "verbs": ["get"]}]);
    roles.create(&pp, &serde_json::from_value(role)?).await?;
    let bindings = dynamic(&client, "rbac.authorization.k8s.io", "v1", "ClusterRoleBinding", "clusterrolebindings", None);
    let mut binding = rbac("ClusterRoleBinding", &host_binding, None);
    binding["roleRef"] = json!({"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": host_role});
    binding["subjects"] = json!([{"kind": "ServiceAccount", "name": "host", "namespace": host_ns.name}]);
    bindings.create(&pp, &serde_json::from_value(binding)?).await?;
    for ns in [&victim.name, &host_ns.name] {
        Api::<ConfigMap>::namespaced(client.clone(), ns)
            .create(&pp, &serde_json::from_value(json!({"metadata": {"name": "precious"}}))?)
            .await?;
    }
    let plugin_cm: ConfigMap =
        serde_json::from_value(json!({"metadata": {"name": "plugin-x", "labels": {"wasmloop.dev/plugin": "true"}}}))?;
    Api::<ConfigMap>::namespaced(client.clone(), &all_ns.name).create(&pp, &plugin_cm).await?;

    let hosts = HostObjects {
        plugin_namespaces: vec![host_ns.name.clone()],
        lease_namespace: Some(host_ns.name.clone()),
        service_account: Some((host_ns.name.clone(), "host".into())),
    };
    let protected = Protected::new(hosts, Some(client.clone()));
    let plugin_cms = host
        .registry
        .acquire(InformerKey::new(KindRef::new("v1", "ConfigMap"), Some(all_ns.name.clone()), Some("wasmloop.dev/plugin=true"))?)
        .await?;
    plugin_cms.wait_synced(WAIT).await?;
    protected.watch_plugin_configmaps(plugin_cms.store().clone());
    let executor = host.executor.clone().with_protected(protected);

    let team_manifest = format!(
        "name: hostile\nqueue: {{baseDelay: 50ms}}\ngrants:\n  - kinds: [\"v1/ConfigMap\"]\n    verbs: [read]\n    namespaces: [{team}]\n  - kinds: [\"*\"]\n    verbs: [create, apply, patch, delete, update-status, event]\n    namespaces: [{team}]\n  - kinds: [\"rbac.authorization.k8s.io/v1/ClusterRole\"]\n    verbs: [apply]\n",
        team = team.name
    );
    let all_manifest = "name: hostile\nqueue: {baseDelay: 50ms}\ngrants:\n  - kinds: [\"*\"]\n    verbs: [\"*\"]\n";
    // The team plugin runs cluster-wide, but its reads are granted in one namespace only.
    let (team_ctl, _) = start_hostile(&host, executor.clone(), &team_manifest, None).await?;
    let (all_ctl, _) = start_hostile(&host, executor.clone(), all_manifest, Some(all_ns.name.clone())).await?;

    // Namespace-restricted reads scope the watches: no cluster-wide ConfigMap informer.
    let running = host.registry.running();
    let cm_kind = KindRef::new("v1", "ConfigMap");
    let case_informers: Vec<_> =
        running.iter().filter(|k| k.kind == cm_kind && k.selector.as_deref() == Some("wasmloop.dev/hostile-test=true")).collect();
    assert!(case_informers.iter().all(|k| k.namespace.is_some()), "a hostile-test informer watches all namespaces: {case_informers:?}");
    assert!(case_informers.iter().any(|k| k.namespace.as_deref() == Some(&team.name)), "{case_informers:?}");

    let targets = vec![
        (dynamic(&client, "", "v1", "Namespace", "namespaces", None), victim.name.clone()),
        (dynamic(&client, "", "v1", "Namespace", "namespaces", None), host_ns.name.clone()),
        (dynamic(&client, "", "v1", "ConfigMap", "configmaps", Some(&victim.name)), "precious".to_string()),
        (dynamic(&client, "", "v1", "ConfigMap", "configmaps", Some(&host_ns.name)), "precious".to_string()),
        (dynamic(&client, "", "v1", "ConfigMap", "configmaps", Some(&all_ns.name)), "plugin-x".to_string()),
        (sas.clone(), "host".to_string()),
        (roles.clone(), host_role.clone()),
        (bindings.clone(), host_binding.clone()),
    ];
    let before = victims(&targets).await?;

    let cases = cases(&team.name, &victim.name, &host_ns.name, &all_ns.name, &host_role, &host_binding);
    for case in &cases {
        let ns = match case.grants {
            Grants::Team => &team.name,
            Grants::All => &all_ns.name,
        };
        Api::<ConfigMap>::namespaced(client.clone(), ns).create(&pp, &case_configmap(case.name, &case.actions)).await?;
    }
    // A case in a namespace the team plugin may not read is never reconciled.
    let unseen = json!([{"create": cm("pwned-unseen", Some(&victim.name))}]);
    Api::<ConfigMap>::namespaced(client.clone(), &victim.name).create(&pp, &case_configmap("unseen", &unseen)).await?;

    let mut failures = Vec::new();
    for case in &cases {
        let ns = match case.grants {
            Grants::Team => &team.name,
            Grants::All => &all_ns.name,
        };
        let message = refusal(&client, ns, case.name).await?;
        println!("{:<22} {message}", case.name);
        if let Some(missing) = case.expect.iter().find(|e| !message.contains(**e)) {
            failures.push(format!("{}: expected {missing:?} in {message:?}", case.name));
        }
    }

    // Legitimate actions still work: generateName with a verified owner, an Event on a readable object.
    let legit = json!([
        {"create": {"apiVersion": "v1", "kind": "ConfigMap",
                    "metadata": {"generateName": "gen-", "namespace": "$NS",
                                 "ownerReferences": [{"apiVersion": "v1", "kind": "ConfigMap", "name": "$NAME", "uid": "$UID"}]}}},
        {"event": {"regarding": {"apiVersion": "v1", "kind": "ConfigMap", "namespace": "$NS", "name": "$NAME"},
                   "type": "Normal", "reason": "Legit", "message": "fine"}}
    ]);
    let team_cms = Api::<ConfigMap>::namespaced(client.clone(), &team.name);
    let legit_cm = team_cms.create(&pp, &case_configmap("legit", &legit)).await?;
    let legit_uid = legit_cm.metadata.uid.clone().context("uid")?;
    let generated = eventually("the generateName ConfigMap", WAIT, || {
        let team_cms = team_cms.clone();
        let legit_uid = legit_uid.clone();
        async move {
            let list = team_cms.list(&ListParams::default()).await?;
            Ok(list.items.into_iter().find(|c| {
                c.metadata.generate_name.as_deref() == Some("gen-")
                    && c.metadata.owner_references.iter().flatten().any(|o| o.uid == legit_uid)
            }))
        }
    })
    .await?;
    assert!(generated.metadata.name.as_deref().is_some_and(|n| n.starts_with("gen-") && n.len() > 4));

    // Nothing was written: victims unchanged, no `pwned-*` object anywhere, the unseen case untouched.
    assert_eq!(victims(&targets).await?, before, "a protected or out-of-grant object changed");
    for (api, what) in [
        (dynamic(&client, "", "v1", "ConfigMap", "configmaps", None), "ConfigMaps"),
        (dynamic(&client, "", "v1", "Pod", "pods", None), "Pods"),
        (dynamic(&client, "", "v1", "Secret", "secrets", None), "Secrets"),
        (roles.clone(), "ClusterRoles"),
        (dynamic(&client, "rbac.authorization.k8s.io", "v1", "Role", "roles", None), "Roles"),
        (dynamic(&client, "coordination.k8s.io", "v1", "Lease", "leases", None), "Leases"),
        (bindings.clone(), "ClusterRoleBindings"),
        (dynamic(&client, "rbac.authorization.k8s.io", "v1", "RoleBinding", "rolebindings", None), "RoleBindings"),
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
    let unseen_events: Vec<_> = Api::<Event>::namespaced(client.clone(), &victim.name)
        .list(&ListParams::default())
        .await?
        .items
        .into_iter()
        .filter(|e| e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some("unseen"))
        .collect();
    if !unseen_events.is_empty() {
        failures.push(format!("the team plugin reconciled an object outside its read grants: {unseen_events:?}"));
    }
    let refused: u64 =
        ["create", "patch", "delete", "update-status", "event"].iter().map(|v| host.metrics.actions("hostile", v, "refused")).sum();
    assert!(refused >= 15, "refusals are counted in wasmloop metrics: {refused}");

    team_ctl.shutdown(Duration::from_secs(5)).await;
    all_ctl.shutdown(Duration::from_secs(5)).await;
    let _ = bindings.delete(&host_binding, &Default::default()).await;
    let _ = roles.delete(&host_role, &Default::default()).await;
    for ns in [team, all_ns, host_ns, victim] {
        ns.cleanup().await?;
    }
    if !failures.is_empty() {
        bail!("{} containment failures:\n{}", failures.len(), failures.join("\n"));
    }
    Ok(())
}

async fn next_load(events: &mut broadcast::Receiver<LoadEvent>, configmap: &str) -> Result<LoadEvent> {
    tokio::time::timeout(WAIT, async {
        loop {
            match events.recv().await {
                Ok(e) => {
                    let cm = match &e {
                        LoadEvent::Loaded { configmap, .. }
                        | LoadEvent::Rejected { configmap, .. }
                        | LoadEvent::Waiting { configmap, .. }
                        | LoadEvent::Removed { configmap, .. } => configmap,
                    };
                    if cm == configmap {
                        return Ok(e);
                    }
                }
                Err(broadcast::error::RecvError::Lagged(_)) => continue,
                Err(e) => bail!("load events closed: {e}"),
            }
        }
    })
    .await
    .with_context(|| format!("waiting for a load event of {configmap}"))?
}

/// A plugin runs only under its own name, and a name has one holder at a time.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn plugins_run_under_their_own_unique_name() -> Result<()> {
    init_tracing();
    let host = Host::new().await?;
    let ns = TestNamespace::create(&host.client, "hostile-identity").await?;
    let engine = tokio::task::spawn_blocking(PluginEngine::new).await??;
    let manager = PluginManager::start(
        engine,
        host.registry.clone(),
        host.executor.clone(),
        host.metrics.clone(),
        PluginMetrics::unregistered(),
        PluginManagerConfig {
            shutdown_grace: Duration::from_secs(5),
            memory_budget: Some(ByteSize::mib(160)),
            ..PluginManagerConfig::new(Some(ns.name.clone()))
        },
    )
    .await?;
    let mut events = manager.events();
    let echo = std::fs::read(plugin_path("echo")?)?;
    let grants = format!("namespace: {}\ngrants:\n  - kinds: [v1/ConfigMap]\n    verbs: [read, update-status]\n", ns.name);

    // The component calls itself `echo`; the ConfigMap (and so the manifest) says `impostor`.
    apply_plugin(&host.client, &ns.name, "impostor", &echo, &grants).await?;
    match next_load(&mut events, "impostor").await? {
        LoadEvent::Rejected { error, .. } => {
            assert!(error.contains("the plugin calls itself \"echo\" but its manifest (or ConfigMap) names it \"impostor\""), "{error}");
        }
        other => bail!("the impostor loaded: {other:?}"),
    }
    // The admin may run the component under another name on purpose, saying which it is: it
    // then runs as that name (field manager, Event reporter, metrics), never as `echo`.
    apply_plugin(&host.client, &ns.name, "impostor", &echo, &format!("plugin: echo\n{grants}")).await?;
    match next_load(&mut events, "impostor").await? {
        LoadEvent::Loaded { plugin, .. } => assert_eq!(plugin, "impostor"),
        other => bail!("an admin-named copy did not load: {other:?}"),
    }

    // Two ConfigMaps for `echo`: the first holds the name, the second waits and loads when it goes.
    let named = format!("name: echo\n{grants}");
    apply_plugin(&host.client, &ns.name, "first", &echo, &named).await?;
    assert!(matches!(next_load(&mut events, "first").await?, LoadEvent::Loaded { .. }));
    apply_plugin(&host.client, &ns.name, "second", &echo, &named).await?;
    match next_load(&mut events, "second").await? {
        LoadEvent::Waiting { reason, .. } => assert!(reason.contains("already used by ConfigMap"), "{reason}"),
        other => bail!("a second holder of the name did not wait: {other:?}"),
    }
    Api::<ConfigMap>::namespaced(host.client.clone(), &ns.name).delete("first", &Default::default()).await?;
    match next_load(&mut events, "second").await? {
        LoadEvent::Loaded { plugin, .. } => assert_eq!(plugin, "echo"),
        other => bail!("the waiting ConfigMap did not load: {other:?}"),
    }
    let mut loaded = manager.loaded().await;
    loaded.sort();
    assert_eq!(loaded.len(), 2, "{loaded:?}");
    assert_eq!((loaded[0].0.as_str(), loaded[0].1.as_str()), ("impostor", "impostor"));
    assert_eq!((loaded[1].0.as_str(), loaded[1].1.as_str()), ("second", "echo"));

    // The host's plugin memory budget (160Mi here): two echoes hold 64Mi each; 32Mi × 2 more does not fit.
    let greedy = format!("name: greedy\nlimits: {{memory: 32Mi}}\nconcurrency: 2\n{grants}");
    apply_plugin(&host.client, &ns.name, "greedy", &echo, &greedy).await?;
    match next_load(&mut events, "greedy").await? {
        LoadEvent::Rejected { error, .. } => assert!(
            error.contains(
                "needs 64Mi of plugin memory (limits.memory × concurrency), but the host's budget is 160Mi and 128Mi of it is held"
            ),
            "{error}"
        ),
        other => bail!("a plugin over the memory budget loaded: {other:?}"),
    }
    manager.shutdown().await;
    ns.cleanup().await?;
    Ok(())
}

/// A plugin whose reads are granted in one namespace runs on credentials that reach only that
/// namespace: its informers are namespaced, so the host needs no cluster-wide RBAC for it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn namespace_restricted_reads_work_under_namespace_rbac() -> Result<()> {
    init_tracing();
    let admin = Host::new().await?;
    let team = TestNamespace::create(&admin.client, "hostile-rbac").await?;
    let pp = PostParams::default();
    let sas = dynamic(&admin.client, "", "v1", "ServiceAccount", "serviceaccounts", Some(&team.name));
    sas.create(&pp, &serde_json::from_value(json!({"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "limited"}}))?)
        .await?;
    let mut role = rbac("Role", "limited", Some(&team.name));
    role["rules"] = json!([
        {"apiGroups": [""], "resources": ["configmaps"], "verbs": ["get", "list", "watch", "create", "patch"]},
        {"apiGroups": ["events.k8s.io"], "resources": ["events"], "verbs": ["create", "patch"]},
    ]);
    dynamic(&admin.client, "rbac.authorization.k8s.io", "v1", "Role", "roles", Some(&team.name))
        .create(&pp, &serde_json::from_value(role)?)
        .await?;
    let mut binding = rbac("RoleBinding", "limited", Some(&team.name));
    binding["roleRef"] = json!({"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "limited"});
    binding["subjects"] = json!([{"kind": "ServiceAccount", "name": "limited", "namespace": team.name}]);
    dynamic(&admin.client, "rbac.authorization.k8s.io", "v1", "RoleBinding", "rolebindings", Some(&team.name))
        .create(&pp, &serde_json::from_value(binding)?)
        .await?;
    let dir = tempfile::tempdir()?;
    let kubeconfig = wasmloop_tests::sa_kubeconfig(&admin.client, &team.name, "limited", dir.path()).await?;
    let limited = Host::with_kubeconfig(&kubeconfig).await?;

    let manifest = format!(
        "name: hostile\ngrants:\n  - kinds: [\"v1/ConfigMap\"]\n    verbs: [read, create]\n    namespaces: [{team}]\n",
        team = team.name
    );
    // Cluster-wide controller, namespace-scoped grants: the informers follow the grants.
    let (controller, _) = tokio::time::timeout(WAIT, start_hostile(&limited, limited.executor.clone(), &manifest, None))
        .await
        .context("the controller did not start under namespace RBAC")??;
    let child = json!([{"create": cm("child", Some("$NS"))}]);
    let cms = Api::<ConfigMap>::namespaced(admin.client.clone(), &team.name);
    cms.create(&pp, &case_configmap("parent", &child)).await?;
    eventually("the child ConfigMap", WAIT, || {
        let cms = cms.clone();
        async move { Ok(cms.get_opt("child").await?) }
    })
    .await?;
    controller.shutdown(Duration::from_secs(5)).await;
    team.cleanup().await?;
    Ok(())
}

fn data_configmap(name: &str, data: Value) -> ConfigMap {
    serde_json::from_value(json!({"metadata": {"name": name, "labels": {CASE_LABEL: "true"}}, "data": data})).expect("a ConfigMap")
}

/// Sleeping past the deadline, requeueing at 0 ms, flooding the log and the API: each is cut
/// off by a limit, and the plugin's other keys keep being served.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_plugin_cannot_stall_or_flood_the_host() -> Result<()> {
    init_tracing();
    let host = Host::new().await?;
    let ns = TestNamespace::create(&host.client, "hostile-flood").await?;
    let manifest = format!(
        "name: hostile\nnamespace: {}\nconcurrency: 1\nlimits: {{timeout: 300ms, outputPerMinute: 64Ki}}\napi: {{qps: 10, burst: 5}}\nevents: {{qps: 1, burst: 10}}\n\
         grants:\n  - kinds: [\"v1/ConfigMap\"]\n    verbs: [read, create, event]\n",
        ns.name
    );
    let (controller, plugin) = start_hostile(&host, host.executor.clone(), &manifest, None).await?;
    let cms = Api::<ConfigMap>::namespaced(host.client.clone(), &ns.name);
    let pp = PostParams::default();

    // A guest that sleeps for 30 s holds the only worker for its 300 ms deadline, not longer:
    // a well-behaved key queued behind it is served within a few deadlines.
    cms.create(&pp, &data_configmap("sleepy", json!({"sleepMs": "30000"}))).await?;
    let started = std::time::Instant::now();
    let child = json!([{"create": cm("after-sleepy", Some("$NS"))}]);
    cms.create(&pp, &data_configmap("behind-sleepy", json!({"actions": child.to_string()}))).await?;
    eventually("the key behind the sleeping one", WAIT, || {
        let cms = cms.clone();
        async move { Ok(cms.get_opt("after-sleepy").await?) }
    })
    .await?;
    let behind = started.elapsed();
    println!("key behind a sleeping guest served after {behind:?}; timeouts so far {}", plugin.stats().timeouts);
    assert!(plugin.stats().timeouts >= 1);
    assert!(behind < Duration::from_secs(5), "the sleeping guest held the worker for {behind:?}");
    cms.delete("sleepy", &Default::default()).await?;

    // requeue-after 0 ms: the floor (1 s by default) holds it to about one reconcile a second.
    let calls_before = plugin.stats().calls;
    cms.create(&pp, &data_configmap("spinner", json!({"requeueAfterMs": "0"}))).await?;
    tokio::time::sleep(Duration::from_secs(3)).await;
    let spins = plugin.stats().calls - calls_before;
    println!("requeue-after 0: {spins} reconciles in 3 s");
    // The first reconcile, three requeues, and the reconcile of the deleted `sleepy` key.
    assert!(spins <= 6, "{spins} reconciles in 3 s with a 1 s requeue floor");
    cms.delete("spinner", &Default::default()).await?;

    // A log flood: 2 MiB of log lines against a 64 KiB-per-minute allowance.
    cms.create(&pp, &data_configmap("chatty", json!({"logLines": "2048"}))).await?;
    let dropped = eventually("dropped log bytes", WAIT, || {
        let dropped = plugin.stats().output_dropped_bytes;
        async move { Ok((dropped > 0).then_some(dropped)) }
    })
    .await?;
    println!("log flood: {dropped} bytes dropped");
    assert!(dropped >= 2048 * 1024 - 64 * 1024, "only {dropped} of 2 MiB dropped under a 64 KiB allowance");

    // 1000 Events in one outcome: ten go out (the Event budget's burst), the rest are dropped.
    let noise: Vec<Value> = (0..1000)
        .map(|i| {
            json!({"event": {"regarding": {"apiVersion": "v1", "kind": "ConfigMap", "namespace": "$NS", "name": "$NAME"},
                                  "type": "Normal", "reason": "Noise", "message": format!("event {i}")}})
        })
        .collect();
    cms.create(&pp, &data_configmap("noisy", json!({"actions": Value::Array(noise).to_string()}))).await?;
    let dropped = eventually("Events over the budget dropped", WAIT, || {
        let n = host.metrics.actions("hostile", "event", "dropped");
        async move { Ok((n >= 980).then_some(n)) }
    })
    .await?;
    let sent = host.metrics.actions("hostile", "event", "ok") + host.metrics.actions("hostile", "event", "error");
    println!("1000 Events in one outcome: {sent} sent, {dropped} dropped");
    assert!(sent <= 12, "{sent} Events sent under a burst of 10");

    // 30 creates in one outcome against a 10 qps / burst 5 budget take at least 2.5 s.
    let many: Vec<Value> = (0..30).map(|i| json!({"create": cm(&format!("burst-{i}"), Some("$NS"))})).collect();
    let started = std::time::Instant::now();
    cms.create(&pp, &data_configmap("bursty", json!({"actions": Value::Array(many).to_string()}))).await?;
    eventually("30 ConfigMaps from one outcome", WAIT, || {
        let cms = cms.clone();
        async move { Ok(cms.get_opt("burst-29").await?) }
    })
    .await?;
    let took = started.elapsed();
    println!("30 actions under a 10 qps / 5 burst budget took {took:?}");
    assert!(took >= Duration::from_millis(2400), "the API budget did not hold: {took:?}");

    // Shutdown returns promptly even with a guest call in flight, and nothing panics.
    cms.create(&pp, &data_configmap("sleepy-again", json!({"sleepMs": "30000"}))).await?;
    tokio::time::sleep(Duration::from_millis(100)).await;
    let stopping = std::time::Instant::now();
    controller.shutdown(Duration::from_secs(10)).await;
    let stop = stopping.elapsed();
    println!("shutdown with a sleeping guest in flight took {stop:?}");
    assert!(stop < Duration::from_secs(2), "shutdown waited {stop:?}");
    ns.cleanup().await
}

/// Compile bombs: a component over the size limit is refused before compiling, one that takes
/// longer than the compile budget is refused at the budget, and neither blocks other ConfigMaps.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_loader_bounds_component_size_and_compile_time() -> Result<()> {
    init_tracing();
    let host = Host::new().await?;
    let ns = TestNamespace::create(&host.client, "hostile-loader").await?;
    let start = |config: PluginManagerConfig| {
        let host = &host;
        async move {
            let engine = tokio::task::spawn_blocking(PluginEngine::new).await??;
            anyhow::Ok(
                PluginManager::start(
                    engine,
                    host.registry.clone(),
                    host.executor.clone(),
                    host.metrics.clone(),
                    PluginMetrics::unregistered(),
                    config,
                )
                .await?,
            )
        }
    };
    let grants = format!("namespace: {}\ngrants:\n  - kinds: [v1/ConfigMap]\n    verbs: [read, update-status]\n", ns.name);
    let small = PluginManagerConfig { max_component_size: ByteSize::kib(256), ..PluginManagerConfig::new(Some(ns.name.clone())) };
    let manager = start(small).await?;
    let mut events = manager.events();
    let podset = std::fs::read(plugin_path("podset")?)?;
    assert!(podset.len() > 256 * 1024, "the podset component is {} bytes", podset.len());
    apply_plugin(&host.client, &ns.name, "podset", &podset, &format!("name: podset\n{grants}")).await?;
    // Meanwhile a small plugin loads.
    apply_plugin(&host.client, &ns.name, "echo", &std::fs::read(plugin_path("echo")?)?, &grants).await?;
    let mut seen = BTreeMap::new();
    while seen.len() < 2 {
        let event = tokio::time::timeout(WAIT, events.recv()).await??;
        match event {
            LoadEvent::Rejected { configmap, error } => seen.insert(configmap, error),
            LoadEvent::Loaded { configmap, .. } => seen.insert(configmap, "loaded".into()),
            LoadEvent::Removed { .. } | LoadEvent::Waiting { .. } => None,
        };
    }
    assert_eq!(seen["echo"], "loaded");
    assert!(seen["podset"].contains("over the host's 256Ki limit for one plugin"), "{}", seen["podset"]);
    manager.shutdown().await;

    // A compile budget no compile can meet.
    let hurried = PluginManagerConfig { compile_budget: Duration::from_millis(1), ..PluginManagerConfig::new(Some(ns.name.clone())) };
    let cms = Api::<ConfigMap>::namespaced(host.client.clone(), &ns.name);
    cms.delete("podset", &Default::default()).await?;
    let manager = start(hurried).await?;
    let status = eventually("echo refused for its compile time", WAIT, || {
        let cms = cms.clone();
        async move {
            let cm = cms.get("echo").await?;
            let status = cm.metadata.annotations.unwrap_or_default().get("wasmloop.dev/status").cloned().unwrap_or_default();
            Ok(status.contains("budget").then_some(status))
        }
    })
    .await?;
    assert!(status.contains("took longer than the 1ms budget"), "{status}");
    manager.shutdown().await;
    ns.cleanup().await
}
