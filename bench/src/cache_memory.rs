//! Heap bytes per cached Pod in an `IndexedStore`, with realistic Pods (managedFields included
//! on the way in, as the API server sends them).

use serde_json::{Value, json};
use wasmloop::cache::{IndexSpec, IndexedStore};
use wasmloop::kinds::KindRef;

use crate::alloc::live_bytes;

/// A Pod as a ReplicaSet controller creates it and a kubelet-less apiserver returns it.
pub fn realistic_pod(i: usize) -> Value {
    let rs = i / 10;
    json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {
            "name": format!("web-{rs}-{i}"), "namespace": format!("ns-{}", i % 20),
            "uid": format!("0b9c2d1e-7f3a-4c5b-9d8e-{:012x}", i), "resourceVersion": format!("{}", 100000 + i),
            "creationTimestamp": "2026-11-29T10:00:00Z", "generateName": format!("web-{rs}-"),
            "labels": {"app": format!("web-{rs}"), "tier": "frontend", "pod-template-hash": "7d4b9c8f5d", "team": "shop"},
            "annotations": {"kubectl.kubernetes.io/restartedAt": "2026-11-28T09:00:00Z"},
            "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": format!("web-{rs}"),
                                 "uid": format!("1c2d3e4f-aaaa-bbbb-cccc-{:012x}", rs), "controller": true, "blockOwnerDeletion": true}],
            "managedFields": [{"manager": "kube-controller-manager", "operation": "Update", "apiVersion": "v1",
                               "time": "2026-11-29T10:00:00Z", "fieldsType": "FieldsV1",
                               "fieldsV1": {"f:metadata": {"f:generateName": {}, "f:labels": {".": {}, "f:app": {}, "f:tier": {}, "f:pod-template-hash": {}},
                                            "f:ownerReferences": {".": {}, "k:{\"uid\":\"x\"}": {}}},
                                            "f:spec": {"f:containers": {"k:{\"name\":\"web\"}": {".": {}, "f:image": {}, "f:name": {}, "f:ports": {}, "f:resources": {}}},
                                                       "f:dnsPolicy": {}, "f:restartPolicy": {}, "f:schedulerName": {}, "f:terminationGracePeriodSeconds": {}}}}]
        },
        "spec": {
            "containers": [{"name": "web", "image": "registry.example/shop/web:1.4.2",
                            "ports": [{"containerPort": 8080, "protocol": "TCP"}],
                            "resources": {"requests": {"cpu": "100m", "memory": "128Mi"}, "limits": {"memory": "256Mi"}},
                            "terminationMessagePath": "/dev/termination-log", "terminationMessagePolicy": "File", "imagePullPolicy": "IfNotPresent"}],
            "restartPolicy": "Always", "terminationGracePeriodSeconds": 30, "dnsPolicy": "ClusterFirst",
            "schedulerName": "default-scheduler", "enableServiceLinks": true, "priority": 0,
            "securityContext": {}, "nodeName": format!("node-{}", i % 50),
            "tolerations": [{"key": "node.kubernetes.io/not-ready", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 300}]
        },
        "status": {"phase": "Pending", "qosClass": "Burstable"}
    })
}

/// Result of one memory measurement.
#[derive(serde::Serialize, serde::Deserialize)]
pub struct CacheMemory {
    pub pods: usize,
    pub bytes_per_pod: f64,
    pub json_bytes_per_pod_in: f64,
    pub json_bytes_per_pod_cached: f64,
}

/// Fill a store with `n` Pods (a label and a field index declared) and measure its heap growth.
/// Each Pod is generated and consumed inside the loop, so only what the store keeps remains.
pub fn measure(n: usize) -> anyhow::Result<CacheMemory> {
    let json_in: usize = (0..n.min(1000)).map(|i| realistic_pod(i).to_string().len()).sum::<usize>() * n / n.min(1000);
    let before = live_bytes();
    let store = IndexedStore::new(KindRef::new("v1", "Pod"));
    store.add_index("app", IndexSpec::parse("labels.app")?)?;
    store.add_index("node", IndexSpec::parse("spec.nodeName")?)?;
    for i in 0..n {
        store.apply(realistic_pod(i))?;
    }
    let kept = live_bytes() - before;
    anyhow::ensure!(store.len() == n, "expected {n} cached pods, found {}", store.len());
    let cached_json: usize = store.snapshot().iter().map(|o| o.json().len()).sum();
    Ok(CacheMemory {
        pods: n,
        bytes_per_pod: kept as f64 / n as f64,
        json_bytes_per_pod_in: json_in as f64 / n as f64,
        json_bytes_per_pod_cached: cached_json as f64 / n as f64,
    })
}
