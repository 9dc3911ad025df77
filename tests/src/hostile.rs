//! The `hostile` test plugin's fixtures, shared by `tests/hostile.rs` (stalls, floods, names,
//! loader limits) and `tests/containment.rs` (every way out of the grants).
//!
//! The plugin returns whatever actions the reconciled ConfigMap's `data.actions` lists (see
//! tests/plugins/hostile), so each attack is one ConfigMap labelled [`CASE_LABEL`].

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, Result};
use k8s_openapi::api::core::v1::ConfigMap;
use k8s_openapi::api::events::v1::Event;
use kube::api::{Api, DynamicObject, ListParams};
use kube::core::{ApiResource, GroupVersionKind};
use serde_json::{Value, json};
use wasmloop::controller::{Controller, ControllerConfig, Shared};
use wasmloop::executor::Executor;
use wasmloop::hotload::PluginManifest;
use wasmloop::plugin::{PluginEngine, WasmPlugin};

use crate::{eventually, plugin_path};

/// The label the hostile plugin's informer selects.
pub const CASE_LABEL: &str = "wasmloop.dev/hostile-test";
/// How long a case may take to be refused.
pub const WAIT: Duration = Duration::from_secs(60);

/// An object key as the hostile plugin reads it.
pub fn key(api_version: &str, kind: &str, namespace: Option<&str>, name: &str) -> Value {
    json!({"apiVersion": api_version, "kind": kind, "namespace": namespace, "name": name})
}

/// A ConfigMap body.
pub fn cm(name: &str, namespace: Option<&str>) -> Value {
    json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name, "namespace": namespace}, "data": {"x": "pwned"}})
}

/// An RBAC object body (rules, subjects and roleRef to be added).
pub fn rbac(kind: &str, name: &str, namespace: Option<&str>) -> Value {
    json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": kind, "metadata": {"name": name, "namespace": namespace}})
}

/// A case: a ConfigMap whose `data.actions` the plugin returns.
pub fn case_configmap(name: &str, actions: &Value) -> ConfigMap {
    data_configmap(name, json!({"actions": actions.to_string()}))
}

/// A ConfigMap for the plugin with arbitrary `data` (sleeps, requeues, floods).
pub fn data_configmap(name: &str, data: Value) -> ConfigMap {
    serde_json::from_value(json!({"metadata": {"name": name, "labels": {CASE_LABEL: "true"}}, "data": data})).expect("a ConfigMap")
}

/// The host's Warning Event about `name` in `ns`, as "Reason: note".
pub async fn refusal(client: &kube::Client, ns: &str, name: &str) -> Result<String> {
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

/// A dynamic API for a kind (cluster-wide when `ns` is `None`).
pub fn dynamic(client: &kube::Client, group: &str, version: &str, kind: &str, plural: &str, ns: Option<&str>) -> Api<DynamicObject> {
    let ar = ApiResource::from_gvk_with_plural(&GroupVersionKind::gvk(group, version, kind), plural);
    match ns {
        Some(ns) => Api::namespaced_with(client.clone(), ns, &ar),
        None => Api::all_with(client.clone(), &ar),
    }
}

/// resourceVersions of the objects attacks aim at, keyed by a description.
pub async fn victims(targets: &[(Api<DynamicObject>, String)]) -> Result<BTreeMap<String, String>> {
    let mut out = BTreeMap::new();
    for (api, name) in targets {
        let obj = api.get(name).await.with_context(|| format!("victim {name}"))?;
        out.insert(format!("{:?}/{name}", api.resource_url()), obj.metadata.resource_version.unwrap_or_default());
    }
    Ok(out)
}

/// Load the hostile plugin with `manifest` and start its controller (`shared` parts, writing with
/// `executor`), watching
/// `namespace` (`None`: as the manifest says).
pub async fn start_hostile(
    shared: Shared,
    executor: Executor,
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
    let controller = Controller::start(plugin.clone(), config, plugin.grants().clone(), shared, executor).await?;
    Ok((controller, plugin))
}
