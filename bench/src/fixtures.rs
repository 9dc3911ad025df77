//! Objects as the API server returns them, and the replicaset plugin as the host loads it:
//! shared by the reconcile benchmark (criterion) and the live benchmarks.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use anyhow::{Context, Result};
use serde_json::{Value, json};
use wasmloop::cache::{CacheView, SharedCache};
use wasmloop::controller::Request;
use wasmloop::hotload::PluginManifest;
use wasmloop::kinds::{KindRef, ObjectKey};
use wasmloop::plugin::{PluginEngine, WasmPlugin};

/// The workspace root.
pub fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().expect("bench/ has a parent").to_path_buf()
}

/// `target/wasm32-wasip2/plugin/replicaset.wasm` unless `WASMLOOP_BENCH_PLUGIN` says otherwise.
pub fn replicaset_wasm_path() -> PathBuf {
    std::env::var_os("WASMLOOP_BENCH_PLUGIN")
        .map(PathBuf::from)
        .unwrap_or_else(|| workspace_root().join("target/wasm32-wasip2/plugin/replicaset.wasm"))
}

/// `deploy/plugins/replicaset.plugin.yaml`.
pub fn replicaset_manifest_path() -> PathBuf {
    workspace_root().join("deploy/plugins/replicaset.plugin.yaml")
}

pub fn rs_kind() -> KindRef {
    KindRef::new("apps/v1", "ReplicaSet")
}

pub fn pod_kind() -> KindRef {
    KindRef::new("v1", "Pod")
}

/// The ReplicaSet of the convergence workload: `replicas` copies of one small container.
pub fn replicaset_spec(name: &str, replicas: u32) -> Value {
    json!({
        "apiVersion": "apps/v1", "kind": "ReplicaSet",
        "metadata": {"name": name, "labels": {"app": name, "bench": "wasmloop"}},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": {"app": name}},
            "template": {
                "metadata": {"labels": {"app": name, "bench": "wasmloop"}},
                "spec": {"containers": [{"name": "web", "image": "registry.example/shop/web:1.4.2",
                                          "ports": [{"containerPort": 8080}],
                                          "resources": {"requests": {"cpu": "10m", "memory": "16Mi"}}}]}
            }
        }
    })
}

/// A ReplicaSet as cached: server-set metadata and a status counting `observed` Pods. When
/// `converged` that status names its spec (so neither reconciler writes status); otherwise the
/// spec was just changed (generation 2, the status names 1), so the reconcile that acts on it
/// also writes the status (observedGeneration), as KCM's does.
pub fn cached_replicaset(name: &str, uid: &str, replicas: u32, observed: usize, converged: bool) -> Value {
    let mut rs = replicaset_spec(name, replicas);
    let meta = rs["metadata"].as_object_mut().expect("metadata");
    meta.insert("namespace".into(), json!("shop"));
    meta.insert("uid".into(), json!(uid));
    meta.insert("resourceVersion".into(), json!("4711"));
    meta.insert("generation".into(), json!(if converged { 1 } else { 2 }));
    meta.insert("creationTimestamp".into(), json!("2026-11-29T10:00:00Z"));
    rs["status"] = json!({"replicas": observed, "fullyLabeledReplicas": observed, "readyReplicas": 0,
                          "availableReplicas": 0, "observedGeneration": 1});
    rs
}

/// Pod `n` of ReplicaSet `rs` as a kubelet-less API server returns it (managedFields included;
/// the cache strips them).
pub fn owned_pod(rs: &str, rs_uid: &str, n: usize) -> Value {
    json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {
            "name": format!("{rs}-{n}"), "namespace": "shop",
            "uid": format!("0b9c2d1e-7f3a-4c5b-9d8e-{n:012x}"), "resourceVersion": format!("{}", 100000 + n),
            "creationTimestamp": "2026-11-29T10:00:00Z",
            "labels": {"app": rs, "bench": "wasmloop"},
            "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": rs, "uid": rs_uid,
                                 "controller": true, "blockOwnerDeletion": true}],
            "managedFields": [{"manager": "wasmloop", "operation": "Update", "apiVersion": "v1",
                               "time": "2026-11-29T10:00:00Z", "fieldsType": "FieldsV1",
                               "fieldsV1": {"f:metadata": {"f:labels": {".": {}, "f:app": {}, "f:bench": {}},
                                            "f:ownerReferences": {".": {}}},
                                            "f:spec": {"f:containers": {}}}}]
        },
        "spec": {
            "containers": [{"name": "web", "image": "registry.example/shop/web:1.4.2",
                            "ports": [{"containerPort": 8080, "protocol": "TCP"}],
                            "resources": {"requests": {"cpu": "10m", "memory": "16Mi"}},
                            "terminationMessagePath": "/dev/termination-log", "terminationMessagePolicy": "File",
                            "imagePullPolicy": "IfNotPresent"}],
            "restartPolicy": "Always", "terminationGracePeriodSeconds": 30, "dnsPolicy": "ClusterFirst",
            "schedulerName": "default-scheduler", "enableServiceLinks": true, "priority": 0,
            "securityContext": {},
            "tolerations": [{"key": "node.kubernetes.io/not-ready", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 300}]
        },
        "status": {"phase": "Pending", "qosClass": "Burstable"}
    })
}

/// One reconcile scenario: a cache and the key to reconcile.
pub struct Scenario {
    pub name: &'static str,
    /// Owned Pods in the cache.
    pub pods: usize,
    pub cache: SharedCache,
    pub request: Request,
}

/// What a scenario holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Shape {
    /// `pods` owned Pods, `replicas` = `pods`, status up to date: no action.
    Converged,
    /// No Pods yet, `replicas` = `pods` (just scaled up from 0): `pods` creates and a status write.
    Create,
    /// `pods` owned Pods, `replicas` = 0 (just scaled down): `pods` deletes and a status write.
    ScaleDown,
    /// The key is not in the cache: the reconcile returns at the first read.
    Missing,
}

impl Shape {
    pub fn name(self) -> &'static str {
        match self {
            Shape::Converged => "converged",
            Shape::Create => "create",
            Shape::ScaleDown => "scale-down",
            Shape::Missing => "missing-key",
        }
    }
}

/// Build a scenario: one ReplicaSet `web` plus unrelated Pods of another ReplicaSet (so the
/// owner index has to select), and the Pods `shape` asks for.
pub fn scenario(shape: Shape, pods: usize) -> Result<Scenario> {
    let uid = "1c2d3e4f-aaaa-bbbb-cccc-000000000001";
    let mut objects = Vec::new();
    let (replicas, owned) = match shape {
        Shape::Converged => (pods as u32, pods),
        Shape::Create => (pods as u32, 0),
        Shape::ScaleDown => (0, pods),
        Shape::Missing => (pods as u32, pods),
    };
    objects.push(cached_replicaset("web", uid, replicas, owned, shape == Shape::Converged));
    objects.extend((0..owned).map(|n| owned_pod("web", uid, n)));
    // Another ReplicaSet's Pods in the same namespace.
    objects.push(cached_replicaset("other", "1c2d3e4f-aaaa-bbbb-cccc-000000000002", 10, 10, true));
    objects.extend((0..10).map(|n| owned_pod("other", "1c2d3e4f-aaaa-bbbb-cccc-000000000002", n)));
    let cache: SharedCache = Arc::new(CacheView::from_objects(objects).context("building the cache")?);
    let name = if shape == Shape::Missing { "no-such-replicaset" } else { "web" };
    let request = Request::new(ObjectKey::new(rs_kind(), Some("shop"), name));
    Ok(Scenario { name: shape.name(), pods, cache, request })
}

/// The replicaset plugin loaded as the host loads it: compiled by the shared engine, with the
/// limits and grants of its deploy manifest.
pub fn load_replicaset_plugin(engine: &PluginEngine) -> Result<Arc<WasmPlugin>> {
    let wasm_path = replicaset_wasm_path();
    let wasm = std::fs::read(&wasm_path)
        .with_context(|| format!("reading {} (build it with scripts/build-plugins.sh replicaset)", wasm_path.display()))?;
    let manifest_path = replicaset_manifest_path();
    let yaml = std::fs::read_to_string(&manifest_path).with_context(|| format!("reading {}", manifest_path.display()))?;
    let manifest = PluginManifest::parse(&yaml, "replicaset").context("parsing the replicaset manifest")?;
    let plugin = WasmPlugin::load(engine, &wasm, manifest.limits, manifest.grants).context("loading the replicaset plugin")?;
    Ok(Arc::new(plugin))
}

/// The admin manifest `base` (YAML) renamed to `name`, scoped to `namespace` and, with
/// `timeout_ms`, with that call timeout: a new payload for the same plugin bytes. Written as
/// JSON, which is YAML too.
pub fn manifest_variant(base: &str, name: &str, namespace: Option<&str>, timeout_ms: Option<u64>) -> Result<String> {
    let mut v: Value = serde_saphyr::from_str(base).context("parsing the base manifest")?;
    let obj = v.as_object_mut().context("the manifest is not a mapping")?;
    // The copy runs the same component under another name: say which plugin it is.
    let own = obj.get("plugin").or_else(|| obj.get("name")).cloned().context("the base manifest has no name")?;
    obj.insert("plugin".into(), own);
    obj.insert("name".into(), json!(name));
    if let Some(ns) = namespace {
        obj.insert("namespace".into(), json!(ns));
    }
    if let Some(ms) = timeout_ms {
        let limits = obj.entry("limits").or_insert_with(|| json!({}));
        limits["timeout"] = json!(format!("{ms}ms"));
    }
    let text = serde_json::to_string_pretty(&v)?;
    PluginManifest::parse(&text, name).context("the manifest variant does not parse")?;
    Ok(text)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn manifest_variants_rename_scope_and_retime() {
        let base = std::fs::read_to_string(replicaset_manifest_path()).unwrap();
        let text = manifest_variant(&base, "rs-idle-3", Some("empty"), Some(1234)).unwrap();
        let m = PluginManifest::parse(&text, "x").unwrap();
        assert_eq!(m.name, "rs-idle-3");
        assert_eq!(m.controller.namespace.as_deref(), Some("empty"));
        assert_eq!(m.limits.timeout, std::time::Duration::from_millis(1234));
        let orig = PluginManifest::parse(&base, "x").unwrap();
        assert_eq!(m.controller.workers, orig.controller.workers);
    }

    #[test]
    fn scenarios_hold_what_they_say() {
        for (shape, pods, owned) in [(Shape::Converged, 10, 10), (Shape::Create, 10, 0), (Shape::ScaleDown, 100, 100)] {
            let s = scenario(shape, pods).unwrap();
            let rs = s.cache.get(&rs_kind(), Some("shop"), "web").unwrap().unwrap();
            let found = s.cache.by_index(&pod_kind(), wasmloop::cache::OWNER_INDEX, rs.uid()).unwrap();
            assert_eq!(found.len(), owned, "{shape:?}");
        }
    }
}
