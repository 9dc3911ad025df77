//! Heap bytes per cached Pod in an `IndexedStore`, with realistic Pods (managedFields included
//! on the way in, as the API server sends them).

use std::time::Instant;

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

/// A Pod as a kubelet runs it: two containers, a projected token volume, status with IPs,
/// timestamps and container IDs — the per-Pod fields no dictionary can predict (random
/// suffixes, uids, 64-hex container IDs), across 7 image versions.
pub fn running_pod(i: usize) -> Value {
    let rs = i / 10;
    let hex = |salt: u64, n: usize| -> String {
        let mut out = String::with_capacity(n);
        let mut x = (i as u64) ^ salt.wrapping_mul(0x9e37_79b9_7f4a_7c15);
        while out.len() < n {
            x = x.wrapping_add(0x9e37_79b9_7f4a_7c15);
            let mut z = x;
            z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
            z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
            out.push_str(&format!("{:016x}", z ^ (z >> 31)));
        }
        out.truncate(n);
        out
    };
    let suffix = hex(1, 5);
    let version = rs % 7;
    let t = |s: usize| format!("2026-11-29T{:02}:{:02}:{:02}Z", 10 + s / 3600 % 12, s / 60 % 60, s % 60);
    let token = format!("kube-api-access-{}", hex(2, 5));
    json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {
            "name": format!("web-{rs}-7d4b9c8f5d-{suffix}"), "namespace": format!("ns-{}", i % 20),
            "uid": format!("{}-{}-4{}-a{}-{}", hex(3, 8), hex(4, 4), hex(5, 3), hex(6, 3), hex(7, 12)),
            "resourceVersion": format!("{}", 100000 + i * 3), "creationTimestamp": t(i),
            "generateName": format!("web-{rs}-7d4b9c8f5d-"),
            "labels": {"app": format!("web-{rs}"), "tier": "frontend", "pod-template-hash": "7d4b9c8f5d", "team": "shop",
                       "version": format!("1.4.{version}")},
            "annotations": {"kubectl.kubernetes.io/restartedAt": "2026-11-28T09:00:00Z", "prometheus.io/scrape": "true"},
            "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": format!("web-{rs}-7d4b9c8f5d"),
                                 "uid": format!("1c2d3e4f-aaaa-bbbb-cccc-{:012x}", rs), "controller": true, "blockOwnerDeletion": true}],
            "managedFields": [{"manager": "kubelet", "operation": "Update", "apiVersion": "v1", "time": t(i + 5),
                               "fieldsType": "FieldsV1", "subresource": "status",
                               "fieldsV1": {"f:status": {"f:conditions": {}, "f:containerStatuses": {}, "f:podIP": {}}}}]
        },
        "spec": {
            "containers": [
                {"name": "web", "image": format!("registry.example/shop/web:1.4.{version}"),
                 "ports": [{"containerPort": 8080, "protocol": "TCP"}],
                 "env": [{"name": "MODE", "value": "prod"}, {"name": "POD_NAME", "valueFrom": {"fieldRef": {"apiVersion": "v1", "fieldPath": "metadata.name"}}}],
                 "resources": {"requests": {"cpu": "100m", "memory": "128Mi"}, "limits": {"memory": "256Mi"}},
                 "volumeMounts": [{"name": token, "mountPath": "/var/run/secrets/kubernetes.io/serviceaccount", "readOnly": true}],
                 "terminationMessagePath": "/dev/termination-log", "terminationMessagePolicy": "File", "imagePullPolicy": "IfNotPresent"},
                {"name": "proxy", "image": "registry.example/mesh/proxy:2.1.0",
                 "args": ["proxy", "sidecar", "--concurrency", "2"],
                 "resources": {"requests": {"cpu": "10m", "memory": "40Mi"}},
                 "volumeMounts": [{"name": token, "mountPath": "/var/run/secrets/kubernetes.io/serviceaccount", "readOnly": true}],
                 "terminationMessagePath": "/dev/termination-log", "terminationMessagePolicy": "File", "imagePullPolicy": "IfNotPresent"}
            ],
            "volumes": [{"name": token, "projected": {"defaultMode": 420, "sources": [
                {"serviceAccountToken": {"expirationSeconds": 3607, "path": "token"}},
                {"configMap": {"name": "kube-root-ca.crt", "items": [{"key": "ca.crt", "path": "ca.crt"}]}}]}}],
            "restartPolicy": "Always", "terminationGracePeriodSeconds": 30, "dnsPolicy": "ClusterFirst",
            "serviceAccountName": "default", "serviceAccount": "default",
            "schedulerName": "default-scheduler", "enableServiceLinks": true, "priority": 0,
            "securityContext": {}, "nodeName": format!("node-{}", i % 50),
            "tolerations": [{"key": "node.kubernetes.io/not-ready", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 300},
                            {"key": "node.kubernetes.io/unreachable", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 300}]
        },
        "status": {
            "phase": "Running", "hostIP": format!("10.0.{}.1", i % 50), "podIP": format!("10.{}.{}.{}", 1 + i / 65536, i / 256 % 256, i % 256),
            "podIPs": [{"ip": format!("10.{}.{}.{}", 1 + i / 65536, i / 256 % 256, i % 256)}],
            "startTime": t(i + 1), "qosClass": "Burstable",
            "conditions": [
                {"type": "Initialized", "status": "True", "lastProbeTime": null, "lastTransitionTime": t(i + 1)},
                {"type": "Ready", "status": "True", "lastProbeTime": null, "lastTransitionTime": t(i + 4)},
                {"type": "ContainersReady", "status": "True", "lastProbeTime": null, "lastTransitionTime": t(i + 4)},
                {"type": "PodScheduled", "status": "True", "lastProbeTime": null, "lastTransitionTime": t(i)}
            ],
            "containerStatuses": [
                {"name": "proxy", "ready": true, "restartCount": 0, "started": true,
                 "image": "registry.example/mesh/proxy:2.1.0",
                 "imageID": "registry.example/mesh/proxy@sha256:4f8e1b7c2a9d3e6f0b5c8a1d4e7f2b9c6a3d0e5f8b1c4a7d2e9f6b3c0a5d8e1f",
                 "containerID": format!("containerd://{}", hex(8, 64)),
                 "state": {"running": {"startedAt": t(i + 3)}}, "lastState": {}},
                {"name": "web", "ready": true, "restartCount": 0, "started": true,
                 "image": format!("registry.example/shop/web:1.4.{version}"),
                 "imageID": format!("registry.example/shop/web@sha256:{:064x}", 0x5eed_0000_u64 + version as u64),
                 "containerID": format!("containerd://{}", hex(9, 64)),
                 "state": {"running": {"startedAt": t(i + 3)}}, "lastState": {}}
            ]
        }
    })
}

/// Result of one memory measurement.
#[derive(serde::Serialize, serde::Deserialize)]
pub struct CacheMemory {
    pub pods: usize,
    /// Heap bytes the store keeps per Pod, its kind's dictionary included.
    pub bytes_per_pod: f64,
    pub json_bytes_per_pod_in: f64,
    /// JSON per Pod as readers get it (managedFields stripped).
    pub json_bytes_per_pod_cached: f64,
    /// What the store holds of that JSON per Pod (compressed once the dictionary is built).
    #[serde(default)]
    pub stored_json_bytes_per_pod: f64,
    /// Heap bytes per Pod before the dictionary was built (every JSON plain).
    #[serde(default)]
    pub plain_bytes_per_pod: f64,
    /// The dictionary's content bytes, and its heap bytes prepared for both directions.
    #[serde(default)]
    pub dictionary_bytes: usize,
    #[serde(default)]
    pub dictionary_heap_bytes: usize,
    /// Wall time to build the dictionary and compress every cached Pod.
    #[serde(default)]
    pub dictionary_ms: f64,
    /// Reading one Pod's JSON into an owned string (what a plugin read does), plain / packed,
    /// median of 5 passes over every Pod.
    #[serde(default)]
    pub read_plain_ns: f64,
    #[serde(default)]
    pub read_packed_ns: f64,
    /// The same measurement with [`running_pod`]s (kubelet status, container IDs).
    #[serde(default)]
    pub running: Option<Box<CacheMemory>>,
}

/// Fill a store with `n` Pods made by `pod` (a label and a field index declared) and measure its
/// heap growth, then build the kind's dictionary as the informer does (from 1 000 objects) and
/// measure again. Each Pod is generated and consumed inside the loop, so only what the store
/// keeps remains.
pub fn measure(n: usize, pod: fn(usize) -> Value) -> anyhow::Result<CacheMemory> {
    let json_in: usize = (0..n.min(1000)).map(|i| pod(i).to_string().len()).sum::<usize>() * n / n.min(1000);
    let before = live_bytes();
    let store = IndexedStore::new(KindRef::new("v1", "Pod"));
    store.add_index("app", IndexSpec::parse("labels.app")?)?;
    store.add_index("node", IndexSpec::parse("spec.nodeName")?)?;
    for i in 0..n {
        store.apply(pod(i))?;
    }
    let plain = live_bytes() - before;
    let read_plain_ns = read_ns(&store)?;
    let started = Instant::now();
    let packing = store.wants_dictionary().then(|| store.build_dictionary());
    let dictionary_ms = started.elapsed().as_secs_f64() * 1e3;
    let kept = live_bytes() - before;
    anyhow::ensure!(store.len() == n, "expected {n} cached pods, found {}", store.len());
    let snapshot = store.snapshot();
    let cached_json: usize = snapshot.iter().map(|o| o.json_len()).sum();
    let stored_json: usize = snapshot.iter().map(|o| o.stored_json_bytes()).sum();
    drop(snapshot);
    Ok(CacheMemory {
        pods: n,
        bytes_per_pod: kept as f64 / n as f64,
        json_bytes_per_pod_in: json_in as f64 / n as f64,
        json_bytes_per_pod_cached: cached_json as f64 / n as f64,
        stored_json_bytes_per_pod: stored_json as f64 / n as f64,
        plain_bytes_per_pod: plain as f64 / n as f64,
        dictionary_bytes: packing.as_ref().map_or(0, |p| p.dictionary_bytes),
        dictionary_heap_bytes: packing.as_ref().map_or(0, |p| p.dictionary_heap_bytes),
        dictionary_ms: if packing.is_some() { dictionary_ms } else { 0.0 },
        read_plain_ns,
        read_packed_ns: if packing.is_some() { read_ns(&store)? } else { read_plain_ns },
        running: None,
    })
}

/// Nanoseconds to read one cached Pod's JSON into an owned `String`, median of 5 passes.
fn read_ns(store: &IndexedStore) -> anyhow::Result<f64> {
    let objects = store.snapshot();
    let mut passes = Vec::new();
    for _ in 0..5 {
        let started = Instant::now();
        let mut bytes = 0;
        for o in &objects {
            bytes += std::hint::black_box(o.json()?.into_owned()).len();
        }
        anyhow::ensure!(bytes > 0, "read nothing");
        passes.push(started.elapsed().as_secs_f64() * 1e9 / objects.len().max(1) as f64);
    }
    passes.sort_by(f64::total_cmp);
    Ok(passes[passes.len() / 2])
}
