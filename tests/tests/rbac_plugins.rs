//! RBAC-managing plugins under impersonation (issue #47): Metacontroller's `clusteredparent` as
//! the `role-binder` test plugin creates, for each labelled ClusterRole, a RoleBinding to it. Its
//! writes go out as its own ServiceAccount, so the API server's escalation check applies to it:
//!
//! - a ClusterRole named in a `bind` grant (`pack --rbac` turns it into the rule `bind` with that
//!   `resourceNames`) is bound, although the plugin's account does not hold its rights;
//! - a ClusterRole it has no `bind` on is not: the API server refuses the create (an error,
//!   retried), and nothing is bound;
//! - a binding of an identity of the host's namespaces is refused by the host before anything is
//!   sent (`identity-binding`), `bind` grant or not.

use std::time::Duration;

use anyhow::{Result, bail, ensure};
use k8s_openapi::api::rbac::v1::{ClusterRole, RoleBinding};
use kube::api::{Api, DeleteParams, PostParams};
use serde_json::json;
use wasmloop::hotload::LoadEvent;
use wasmloop_tests::cluster::grant_plugin;
use wasmloop_tests::{Host, TestNamespace, apply_plugin, eventually, init_tracing, next_load, plugin_manager, plugin_path};

const WAIT: Duration = Duration::from_secs(60);

/// A ClusterRole `name` that reads Secrets, labelled for the plugin to bind in `namespace`, with
/// the binding's subject annotated when given.
fn cluster_role(name: &str, namespace: &str, subject: Option<&str>) -> Result<ClusterRole> {
    let mut role = json!({
        "metadata": {"name": name, "labels": {"role-binder.wasmloop.dev/namespace": namespace}},
        "rules": [{"apiGroups": [""], "resources": ["secrets"], "verbs": ["get", "list"]}],
    });
    if let Some(subject) = subject {
        role["metadata"]["annotations"] = json!({"role-binder.wasmloop.dev/subject": subject});
    }
    Ok(serde_json::from_value(role)?)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_rbac_managing_plugin_binds_exactly_the_roles_it_has_bind_on() -> Result<()> {
    init_tracing();
    let host = Host::new().await?;
    let plugins = TestNamespace::create(&host.client, "rbac-plugins").await?;
    let team = TestNamespace::create(&host.client, "rbac-team").await?;
    let (granted, not_granted, identity) =
        (format!("{}-reader", team.name), format!("{}-not-granted", team.name), format!("{}-identity", team.name));
    let manifest = format!(
        r#"name: role-binder
grants:
  - kinds: ["rbac.authorization.k8s.io/v1/ClusterRole"]
    verbs: [read]
  - kinds: ["rbac.authorization.k8s.io/v1/RoleBinding"]
    verbs: [read, create, delete]
  - kinds: ["rbac.authorization.k8s.io/v1/ClusterRole"]
    verbs: [bind]
    names: ["{granted}", "{identity}"]
"#
    );
    // The RBAC `wasmloop pack --rbac` prints: the bind rule is among the plugin's.
    grant_plugin(&host.client, &plugins.name, "role-binder", &manifest, (&plugins.name, "wasmloop")).await?;
    let plugin_role = Api::<ClusterRole>::all(host.client.clone()).get(&format!("wasmloop:plugin:{}:role-binder", plugins.name)).await?;
    let bind_rule = plugin_role.rules.iter().flatten().find(|r| r.verbs == ["bind"]);
    let mut named = vec![granted.clone(), identity.clone()];
    named.sort();
    ensure!(
        bind_rule.is_some_and(|r| r.resource_names.as_ref() == Some(&named)),
        "no bind rule on the named roles in {:?}",
        plugin_role.rules
    );

    let manager = plugin_manager(&host, Some(&plugins.name), None, (&plugins.name, "wasmloop")).await?;
    let mut events = manager.events();
    apply_plugin(&host.client, &plugins.name, "role-binder", &std::fs::read(plugin_path("role-binder")?)?, &manifest).await?;
    match next_load(&mut events, "role-binder").await? {
        LoadEvent::Loaded { .. } => {}
        other => bail!("role-binder did not load: {other:?}"),
    }

    let roles = Api::<ClusterRole>::all(host.client.clone());
    let identity_subject = format!("{}/wasmloop-plugin-role-binder", plugins.name);
    for role in [cluster_role(&not_granted, &team.name, None)?, cluster_role(&identity, &team.name, Some(&identity_subject))?] {
        roles.create(&PostParams::default(), &role).await?;
    }
    // Both are refused, the first by the API server as the plugin, the second by the host.
    eventually("the create without bind to fail at the API server", WAIT, || async {
        Ok((host.metrics.actions("role-binder", "create", "error") > 0).then_some(()))
    })
    .await?;
    eventually("the identity's binding to be refused by the host", WAIT, || async {
        Ok((host.metrics.actions("role-binder", "create", "refused") > 0).then_some(()))
    })
    .await?;

    roles.create(&PostParams::default(), &cluster_role(&granted, &team.name, None)?).await?;
    let bindings = Api::<RoleBinding>::namespaced(host.client.clone(), &team.name);
    let binding =
        eventually("the granted role's binding", WAIT, || async { Ok(bindings.get_opt(&format!("{granted}-binding")).await?) }).await?;
    ensure!(binding.role_ref.name == granted && binding.role_ref.kind == "ClusterRole", "{binding:?}");
    let subject = &binding.subjects.as_ref().and_then(|s| s.first().cloned()).unwrap_or_default();
    ensure!((subject.name.as_str(), subject.namespace.as_deref()) == ("default", Some(team.name.as_str())), "{subject:?}");
    let owner = binding.metadata.owner_references.iter().flatten().find(|r| r.controller == Some(true));
    ensure!(owner.is_some_and(|o| o.kind == "ClusterRole" && o.name == granted), "owned by its ClusterRole: {owner:?}");

    // The others stay unbound, retried (the API server's refusal) or waiting for a change (the host's).
    tokio::time::sleep(Duration::from_secs(2)).await;
    for refused in [&not_granted, &identity] {
        ensure!(bindings.get_opt(&format!("{refused}-binding")).await?.is_none(), "{refused} was bound");
    }
    ensure!(host.metrics.actions("role-binder", "create", "error") >= 2, "the refused create is retried with backoff");

    manager.shutdown().await;
    for role in [&granted, &not_granted, &identity] {
        roles.delete(role, &DeleteParams::default()).await?;
    }
    team.cleanup().await?;
    plugins.cleanup().await
}
