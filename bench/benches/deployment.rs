//! Section 10 of BENCHMARKS.md, per reconcile: the `deployment` plugin's crate run natively by the
//! host (`wasmloop::native::SdkReconciler`) and as its Wasm component, on the same host cache,
//! with criterion, in the three shapes a rollout's reconciles take: a converged Deployment (no
//! action), a rollout step (an old ReplicaSet scaled down), a new Deployment (its ReplicaSet
//! created, the status written).
//!
//! Run through `scripts/bench.sh`, or: `cargo bench -p wasmloop-bench --bench deployment`
//! (`WASMLOOP_BENCH_DEPLOYMENT_PLUGIN` names the component, default
//! `target/wasm32-wasip2/plugin/deployment.wasm`).

use std::hint::black_box;
use std::sync::Arc;

use anyhow::{Context, Result, ensure};
use criterion::{BenchmarkId, Criterion};
use serde_json::{Value, json};
use wasmloop::cache::{CacheView, IndexedStore, SharedCache};
use wasmloop::controller::{Reconciler, Request};
use wasmloop::hotload::PluginManifest;
use wasmloop::kinds::{KindRef, ObjectKey};
use wasmloop::native::SdkReconciler;
use wasmloop::plugin::{PluginEngine, WasmPlugin};
use wasmloop_bench::fixtures::workspace_root;

const UID: &str = "9f1c2d3e-aaaa-bbbb-cccc-000000000001";

fn template(version: &str) -> Value {
    json!({"metadata": {"labels": {"app": "web"}, "creationTimestamp": null},
           "spec": {"containers": [{"name": "web", "image": format!("registry.example/shop/web:{version}"),
                                     "resources": {"requests": {"cpu": "10m", "memory": "16Mi"}},
                                     "terminationMessagePath": "/dev/termination-log", "terminationMessagePolicy": "File",
                                     "imagePullPolicy": "IfNotPresent"}],
                    "restartPolicy": "Always", "terminationGracePeriodSeconds": 30, "dnsPolicy": "ClusterFirst",
                    "securityContext": {}, "schedulerName": "default-scheduler"}})
}

/// Deployment `web` of 10 at `version` (generation `generation`), with `status`; no progress
/// deadline, so no outcome depends on the clock.
fn deployment(version: &str, generation: i64, status: Value) -> Value {
    json!({"apiVersion": "apps/v1", "kind": "Deployment",
           "metadata": {"name": "web", "namespace": "shop", "uid": UID, "generation": generation, "resourceVersion": "100",
                        "creationTimestamp": "2026-11-29T10:00:00Z", "annotations": {"deployment.kubernetes.io/revision": "2"}},
           "spec": {"replicas": 10, "selector": {"matchLabels": {"app": "web"}}, "template": template(version),
                    "strategy": {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": "25%", "maxUnavailable": "25%"}},
                    "revisionHistoryLimit": 10},
           "status": status})
}

/// ReplicaSet `web-<hash>` of the Deployment at `version` with `replicas`, `available` of them
/// available.
fn replica_set(version: &str, revision: &str, replicas: i64, available: i64, created: &str) -> Value {
    let hash = deployment::hash::compute(&template(version), None).value;
    let mut t = template(version);
    t["metadata"]["labels"]["pod-template-hash"] = json!(hash);
    json!({"apiVersion": "apps/v1", "kind": "ReplicaSet",
           "metadata": {"name": format!("web-{hash}"), "namespace": "shop", "uid": format!("rs-{version}"), "generation": 1,
                        "resourceVersion": "50", "creationTimestamp": created,
                        "labels": {"app": "web", "pod-template-hash": hash},
                        "annotations": {"deployment.kubernetes.io/revision": revision, "deployment.kubernetes.io/desired-replicas": "10",
                                        "deployment.kubernetes.io/max-replicas": "13"},
                        "ownerReferences": [{"apiVersion": "apps/v1", "kind": "Deployment", "name": "web", "uid": UID,
                                             "controller": true, "blockOwnerDeletion": true}]},
           "spec": {"replicas": replicas, "selector": {"matchLabels": {"app": "web", "pod-template-hash": hash}}, "template": t},
           "status": {"replicas": replicas, "readyReplicas": available, "availableReplicas": available, "observedGeneration": 1}})
}

fn status(replicas: i64, updated: i64, available: i64) -> Value {
    json!({"observedGeneration": 2, "replicas": replicas, "updatedReplicas": updated, "readyReplicas": available,
           "availableReplicas": available, "unavailableReplicas": (replicas - available).max(0),
           "conditions": [{"type": "Available", "status": "True", "lastUpdateTime": "2026-11-29T10:00:00Z",
                           "lastTransitionTime": "2026-11-29T10:00:00Z", "reason": "MinimumReplicasAvailable",
                           "message": "Deployment has minimum availability."}]})
}

struct Scenario {
    name: &'static str,
    cache: SharedCache,
    request: Request,
    /// Actions the outcome must have.
    actions: usize,
}

fn scenario(name: &'static str, objects: Vec<Value>, actions: usize) -> Result<Scenario> {
    let mut view = CacheView::from_objects(objects).context("building the cache")?;
    // Every kind the plugin reads has a store, as under the host, empty if no object of it is
    // given (a new Deployment's ReplicaSets; the Pods no RollingUpdate step reads).
    for kind in [KindRef::new("apps/v1", "ReplicaSet"), KindRef::new("v1", "Pod")] {
        if view.stores(&kind).is_empty() {
            view.insert(Arc::new(IndexedStore::new(kind)));
        }
    }
    let cache: SharedCache = Arc::new(view);
    let request = Request::new(ObjectKey::new(KindRef::new("apps/v1", "Deployment"), Some("shop"), "web"));
    Ok(Scenario { name, cache, request, actions })
}

/// The outcome with its timestamps (RFC 3339, whole seconds) blanked: a new Deployment's status
/// carries the clock, which moves between the native and the Wasm call.
fn without_times(text: &str) -> String {
    let b = text.as_bytes();
    let mut out = String::with_capacity(text.len());
    let mut i = 0;
    while i < b.len() {
        let is_time = b.len() >= i + 20
            && b[i..i + 4].iter().all(u8::is_ascii_digit)
            && b[i + 4] == b'-'
            && b[i + 10] == b'T'
            && b[i + 13] == b':'
            && b[i + 19] == b'Z';
        if is_time {
            out.push_str("<time>");
            i += 20;
        } else {
            out.push(char::from(b[i]));
            i += 1;
        }
    }
    out
}

fn main() -> Result<()> {
    let path = std::env::var_os("WASMLOOP_BENCH_DEPLOYMENT_PLUGIN")
        .map_or_else(|| workspace_root().join("target/wasm32-wasip2/plugin/deployment.wasm"), Into::into);
    let bytes = std::fs::read(&path).with_context(|| format!("reading {} (scripts/build-plugins.sh deployment)", path.display()))?;
    let yaml = std::fs::read_to_string(workspace_root().join("deploy/plugins/deployment.plugin.yaml"))?;
    let manifest = PluginManifest::parse(&yaml, "deployment")?;
    let engine = PluginEngine::new().context("creating the plugin engine")?;
    let wasm =
        WasmPlugin::load(&engine, &bytes, manifest.limits.clone(), manifest.grants.clone()).context("loading the deployment plugin")?;
    let native = SdkReconciler::<deployment::DeploymentReconciler>::new()
        .context("running the deployment crate natively")?
        .named(wasm.name())
        .with_limits(wasm.limits().clone());
    let reconcilers: [(&str, &dyn Reconciler); 2] = [("native", &native), ("wasm", &wasm)];

    let (old, new) = ("2026-11-29T10:00:00Z", "2026-11-29T11:00:00Z");
    let scenarios = [
        // Rolled out: v2 has all 10, v1 none.
        scenario(
            "converged",
            vec![deployment("2", 2, status(10, 10, 10)), replica_set("1", "1", 0, 0, old), replica_set("2", "2", 10, 10, new)],
            0,
        )?,
        // Mid-rollout: v1 at 8, v2 at 5 with 3 available: 11 available, 8 needed: v1 down by 3
        // (a patch and its Event; the status, computed before scaling, is unchanged).
        scenario(
            "rollout-step",
            vec![deployment("2", 2, status(13, 5, 11)), replica_set("1", "1", 8, 8, old), replica_set("2", "2", 5, 3, new)],
            2,
        )?,
        // New: its ReplicaSet created with 10, the status and revision written, an Event.
        scenario("create", vec![deployment("1", 1, json!({}))], 3)?,
    ];
    for s in &scenarios {
        let n = native.reconcile(&s.request, &s.cache).map_err(|e| anyhow::anyhow!("native {}: {e}", s.name))?;
        let w = wasm.reconcile(&s.request, &s.cache).map_err(|e| anyhow::anyhow!("wasm {}: {e}", s.name))?;
        let (n_text, w_text) = (without_times(&format!("{n:?}")), without_times(&format!("{w:?}")));
        ensure!(n_text == w_text, "{}: native and wasm outcomes differ:\nnative: {n_text}\nwasm:   {w_text}", s.name);
        ensure!(n.actions.len() == s.actions, "{}: expected {} actions, got {}: {n:?}", s.name, s.actions, n.actions.len());
    }

    let mut c = Criterion::default().configure_from_args();
    let mut group = c.benchmark_group("deployment");
    for s in &scenarios {
        for (label, r) in reconcilers {
            group.bench_with_input(BenchmarkId::new(format!("{label}-{}", s.name), 2), s, |b, s| {
                b.iter(|| r.reconcile(black_box(&s.request), &s.cache).expect("reconcile failed"));
            });
        }
    }
    group.finish();
    c.final_summary();
    let stats = wasm.stats();
    ensure!(stats.traps + stats.timeouts + stats.ooms + stats.instantiation_failures == 0, "the plugin failed calls: {stats:?}");
    Ok(())
}
