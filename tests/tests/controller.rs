//! The host runtime end to end against a real kube-apiserver: informers, cache, indexes, work
//! queue, controller loop and actions executor.

use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Result;
use k8s_openapi::api::apps::v1::ReplicaSet;
use k8s_openapi::api::core::v1::{ConfigMap, Pod};
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use parking_lot::Mutex;
use serde_json::json;
use wasmloop::cache::{IndexSpec, SharedCache};
use wasmloop::controller::{Mapping, Outcome, Reason, ReconcileError, Reconciler, ReconcilerSpec, Request, WatchSpec};
use wasmloop::informer::InformerKey;
use wasmloop::kinds::KindRef;
use wasmloop_tests::{Host, TestNamespace, eventually, init_tracing};

const WAIT: Duration = Duration::from_secs(30);

fn cm_kind() -> KindRef {
    KindRef::new("v1", "ConfigMap")
}

fn cm(name: &str, labels: serde_json::Value) -> ConfigMap {
    serde_json::from_value(json!({"metadata": {"name": name, "labels": labels}, "data": {"v": "0"}})).unwrap()
}

/// One reconcile as the recorder saw it.
#[derive(Clone, Debug)]
struct Call {
    name: String,
    reason: Reason,
    found: bool,
    at: Instant,
}

/// Records every call; optionally fails the first N calls of a key, or blocks while a gate is closed.
struct Recorder {
    spec: ReconcilerSpec,
    calls: Mutex<Vec<Call>>,
    fail_first: Mutex<std::collections::HashMap<String, usize>>,
    hold: Mutex<Option<(String, Arc<std::sync::Barrier>)>>,
}

impl Recorder {
    fn new(kind: KindRef, watches: Vec<WatchSpec>) -> Arc<Self> {
        Arc::new(Self {
            spec: ReconcilerSpec {
                name: "recorder".into(),
                version: "1".into(),
                reconciles: kind,
                selector: None,
                watches,
                indexes: vec![],
                fields: vec![],
                annotation_selector: None,
            },
            calls: Mutex::new(Vec::new()),
            fail_first: Mutex::new(Default::default()),
            hold: Mutex::new(None),
        })
    }
    fn calls_for(&self, name: &str) -> Vec<Call> {
        self.calls.lock().iter().filter(|c| c.name == name).cloned().collect()
    }
    fn total(&self) -> usize {
        self.calls.lock().len()
    }
}

impl Reconciler for Recorder {
    fn spec(&self) -> &ReconcilerSpec {
        &self.spec
    }
    fn reconcile(&self, req: &Request, cache: &SharedCache) -> Result<Outcome, ReconcileError> {
        let found = cache
            .get(&req.key.kind, req.key.namespace.as_deref(), &req.key.name)
            .map_err(|e| ReconcileError::reconciler_transient(e.to_string()))?
            .is_some();
        self.calls.lock().push(Call { name: req.key.name.clone(), reason: req.reason, found, at: Instant::now() });
        let gate = self.hold.lock().as_ref().filter(|(n, _)| *n == req.key.name).map(|(_, b)| b.clone());
        if let Some(b) = gate {
            self.hold.lock().take();
            b.wait(); // the test is now inside the reconcile
            b.wait(); // until the test lets us go
        }
        let mut fail = self.fail_first.lock();
        if let Some(n) = fail.get_mut(&req.key.name).filter(|n| **n > 0) {
            *n -= 1;
            return Err(ReconcileError::reconciler_transient(format!("injected failure, {n} left")));
        }
        Ok(Outcome::default())
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn informer_lists_a_baseline_then_watches_updates_and_deletes() -> Result<()> {
    init_tracing();
    let host = Host::new().await?;
    let ns = TestNamespace::create(&host.client, "informer").await?;
    let api: Api<ConfigMap> = Api::namespaced(host.client.clone(), &ns.name);
    for i in 0..3 {
        api.create(&PostParams::default(), &cm(&format!("before-{i}"), json!({"app": "a"}))).await?;
    }
    let inf = host.registry.acquire(InformerKey::new(cm_kind(), Some(ns.name.clone()), None)?).await?;
    inf.wait_synced(WAIT).await?;
    // Baseline from the List: objects created before the informer started are cached.
    for i in 0..3 {
        assert!(inf.store().get(Some(&ns.name), &format!("before-{i}")).is_some(), "before-{i} not in the baseline");
    }
    inf.store().add_index("app", IndexSpec::parse("labels.app")?)?;
    assert_eq!(inf.store().by_index("app", "a")?.len(), 3);

    // Watch: an update reaches the cache, and the label index follows the label change.
    api.patch("before-0", &PatchParams::default(), &Patch::Merge(json!({"metadata": {"labels": {"app": "b"}}, "data": {"v": "1"}})))
        .await?;
    let store = inf.store().clone();
    let nsn = ns.name.clone();
    eventually("the update in the cache", WAIT, || {
        let store = store.clone();
        let nsn = nsn.clone();
        async move { Ok(store.get(Some(&nsn), "before-0").filter(|o| o.json().is_ok_and(|j| j.contains("\"v\":\"1\""))).map(|_| ())) }
    })
    .await?;
    let a: Vec<_> = inf.store().by_index("app", "a")?.iter().map(|o| o.name().to_string()).collect();
    let b: Vec<_> = inf.store().by_index("app", "b")?.iter().map(|o| o.name().to_string()).collect();
    assert_eq!(b, vec!["before-0"]);
    assert!(!a.contains(&"before-0".to_string()), "stale index entry: {a:?}");

    // Delete: gone from the cache and from every index.
    api.delete("before-1", &DeleteParams::default()).await?;
    eventually("the delete in the cache", WAIT, || {
        let store = store.clone();
        let nsn = nsn.clone();
        async move { Ok(store.get(Some(&nsn), "before-1").is_none().then_some(())) }
    })
    .await?;
    assert_eq!(inf.store().by_index("app", "a")?.len(), 1);
    assert_eq!(inf.store().by_index("namespace", &ns.name)?.len(), 2);
    ns.cleanup().await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_large_kind_is_kept_compressed_and_reads_back_what_the_api_server_holds() -> Result<()> {
    use futures::StreamExt;
    init_tracing();
    let host = Host::new().await?;
    let ns = TestNamespace::create(&host.client, "packed").await?;
    let api: Api<ConfigMap> = Api::namespaced(host.client.clone(), &ns.name);
    let n = wasmloop::cache::DICTIONARY_AT + 20;
    let created: Vec<Result<ConfigMap, kube::Error>> = futures::stream::iter(0..n)
        .map(|i| {
            let api = api.clone();
            let cm: ConfigMap = serde_json::from_value(json!({
                "metadata": {"name": format!("cm-{i:04}"), "labels": {"app": format!("a{}", i % 7)}},
                "data": {"index": i.to_string(), "config.yaml": format!("replicas: {}\nmode: prod\nshard: {}\n", i % 5, i % 11)}
            }))
            .unwrap();
            async move { api.create(&PostParams::default(), &cm).await }
        })
        .buffer_unordered(16)
        .collect()
        .await;
    assert!(created.iter().all(Result::is_ok), "creates failed: {:?}", created.iter().find_map(|r| r.as_ref().err()));

    let inf = host.registry.acquire(InformerKey::new(cm_kind(), Some(ns.name.clone()), None)?).await?;
    inf.wait_synced(WAIT).await?;
    let store = inf.store().clone();
    // The informer builds the kind's dictionary off the event path once the store is large.
    eventually("every cached ConfigMap compressed", WAIT, || {
        let store = store.clone();
        async move { Ok((store.len() == n && store.snapshot().iter().all(|o| o.is_packed())).then_some(())) }
    })
    .await?;
    let stored: usize = store.snapshot().iter().map(|o| o.stored_json_bytes()).sum();
    let json: usize = store.snapshot().iter().map(|o| o.json_len()).sum();
    assert!(stored * 3 < json, "compressed {stored} of {json} bytes");

    // What a reader gets is what the API server holds (without managedFields), object by object.
    let listed = api.list(&Default::default()).await?;
    assert_eq!(listed.items.len(), n);
    for mut cm in listed.items {
        cm.metadata.managed_fields = None;
        let name = cm.metadata.name.clone().unwrap_or_default();
        let cached = store.get(Some(&ns.name), &name).expect("cached");
        let mut expected = serde_json::to_value(&cm)?;
        expected["apiVersion"] = json!("v1");
        expected["kind"] = json!("ConfigMap");
        assert_eq!(cached.value(), expected, "{name} as cached");
    }

    // A watched update after that is compressed as it arrives, and indexes follow it.
    store.add_index("app", IndexSpec::parse("labels.app")?)?;
    api.patch(
        "cm-0003",
        &PatchParams::default(),
        &Patch::Merge(json!({"metadata": {"labels": {"app": "moved"}}, "data": {"index": "updated"}})),
    )
    .await?;
    let nsn = ns.name.clone();
    let updated = eventually("the update in the cache", WAIT, || {
        let store = store.clone();
        let nsn = nsn.clone();
        async move { Ok(store.get(Some(&nsn), "cm-0003").filter(|o| o.json().is_ok_and(|j| j.contains("\"index\":\"updated\"")))) }
    })
    .await?;
    assert!(updated.is_packed());
    let names: Vec<_> = store.by_index("app", "moved")?.iter().map(|o| o.name().to_string()).collect();
    assert_eq!(names, ["cm-0003"]);
    ns.cleanup().await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_controllers_on_pods_share_one_watch_and_release_it() -> Result<()> {
    init_tracing();
    let host = Host::new().await?;
    let ns = TestNamespace::create(&host.client, "shared").await?;
    let watches_before = host.requests.snapshot().watch;
    let pods = || vec![WatchSpec { kind: KindRef::new("v1", "Pod"), mapping: Mapping::Owner, selector: None, annotation_selector: None }];
    let a = host.start(Recorder::new(cm_kind(), pods()), &ns.name, |_| {}).await?;
    let b = host.start(Recorder::new(KindRef::new("apps/v1", "ReplicaSet"), pods()), &ns.name, |_| {}).await?;
    let pod_informers: Vec<_> = host.registry.running().into_iter().filter(|k| k.kind.kind == "Pod").collect();
    assert_eq!(pod_informers.len(), 1, "one Pod informer for two controllers: {pod_informers:?}");
    // Three informers (ConfigMap, ReplicaSet, Pod) → three watches, not four. A watch opens
    // just after its informer's List, so wait for them, then check no fourth one follows.
    let req = host.requests.clone();
    eventually("three watches open", WAIT, || {
        let req = req.clone();
        async move { Ok((req.snapshot().watch - watches_before >= 3).then_some(())) }
    })
    .await?;
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(host.requests.snapshot().watch - watches_before, 3, "watch requests opened");
    a.shutdown(Duration::from_secs(5)).await;
    assert_eq!(host.registry.running().iter().filter(|k| k.kind.kind == "Pod").count(), 1, "still used by b");
    b.shutdown(Duration::from_secs(5)).await;
    assert!(host.registry.running().is_empty(), "released when the last user left: {:?}", host.registry.running());
    ns.cleanup().await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deleted_object_is_reconciled_as_not_found_and_resync_makes_no_api_calls() -> Result<()> {
    init_tracing();
    let host = Host::new().await?;
    let ns = TestNamespace::create(&host.client, "resync").await?;
    let api: Api<ConfigMap> = Api::namespaced(host.client.clone(), &ns.name);
    for i in 0..5 {
        api.create(&PostParams::default(), &cm(&format!("cm-{i}"), json!({}))).await?;
    }
    let rec = Recorder::new(cm_kind(), vec![]);
    let ctl = host.start(rec.clone(), &ns.name, |c| c.resync = Some(Duration::from_millis(700))).await?;
    let r = rec.clone();
    eventually("initial reconciles", WAIT, || {
        let r = r.clone();
        async move { Ok((0..5).all(|i| !r.calls_for(&format!("cm-{i}")).is_empty()).then_some(())) }
    })
    .await?;

    // Resync: every object reconciled again, with zero requests to the API server.
    let before = host.requests.snapshot();
    let calls_before = rec.total();
    tokio::time::sleep(Duration::from_millis(2200)).await;
    let after = host.requests.snapshot();
    let resyncs = rec.calls.lock().iter().filter(|c| c.reason == Reason::Resync).count();
    assert!(resyncs >= 10, "expected at least two resync rounds of 5 objects, got {resyncs}");
    assert!(rec.total() > calls_before);
    // (Watch connections are the informers' own and may open at any time; resync must cause
    // no get, list or write.)
    assert_eq!((after.get, after.list, after.write), (before.get, before.list, before.write), "resync must not call the API server");

    // Delete: the object is reconciled once more and sees "not found".
    api.delete("cm-3", &DeleteParams::default()).await?;
    let r = rec.clone();
    eventually("a not-found reconcile of cm-3", WAIT, || {
        let r = r.clone();
        async move { Ok(r.calls_for("cm-3").iter().any(|c| !c.found && c.reason == Reason::Event).then_some(())) }
    })
    .await?;
    ctl.shutdown(Duration::from_secs(5)).await;
    ns.cleanup().await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_burst_of_five_updates_is_folded_into_one_reconcile() -> Result<()> {
    init_tracing();
    let host = Host::new().await?;
    let ns = TestNamespace::create(&host.client, "burst").await?;
    let api: Api<ConfigMap> = Api::namespaced(host.client.clone(), &ns.name);
    api.create(&PostParams::default(), &cm("hot", json!({}))).await?;
    let rec = Recorder::new(cm_kind(), vec![]);
    let gate = Arc::new(std::sync::Barrier::new(2));
    *rec.hold.lock() = Some(("hot".into(), gate.clone()));
    let ctl = host.start(rec.clone(), &ns.name, |_| {}).await?;
    // The first reconcile of "hot" is now running (held at the gate).
    let g = gate.clone();
    tokio::task::spawn_blocking(move || g.wait()).await?;
    for v in 1..=5 {
        api.patch("hot", &PatchParams::default(), &Patch::Merge(json!({"data": {"v": v.to_string()}}))).await?;
    }
    // Wait until the (shared) cache has the fifth update, then release the running reconcile.
    let inf = host.registry.acquire(InformerKey::new(cm_kind(), Some(ns.name.clone()), None)?).await?;
    let (store, nsn) = (inf.store().clone(), ns.name.clone());
    eventually("the fifth update in the cache", WAIT, || {
        let (store, nsn) = (store.clone(), nsn.clone());
        async move { Ok(store.get(Some(&nsn), "hot").filter(|o| o.json().is_ok_and(|j| j.contains("\"v\":\"5\""))).map(|_| ())) }
    })
    .await?;
    assert_eq!(rec.calls_for("hot").len(), 1, "nothing ran while the key was being processed");
    let g = gate.clone();
    tokio::task::spawn_blocking(move || g.wait()).await?;
    let r = rec.clone();
    eventually("the folded reconcile", WAIT, || {
        let r = r.clone();
        async move { Ok((r.calls_for("hot").len() >= 2).then_some(())) }
    })
    .await?;
    tokio::time::sleep(Duration::from_millis(700)).await;
    let calls = rec.calls_for("hot");
    assert_eq!(calls.len(), 2, "1 initial + 1 for the burst of 5, got {calls:?}");
    ctl.shutdown(Duration::from_secs(5)).await;
    ns.cleanup().await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn failures_are_retried_with_growing_delays_and_forgotten_after_success() -> Result<()> {
    init_tracing();
    let host = Host::new().await?;
    let ns = TestNamespace::create(&host.client, "backoff").await?;
    let api: Api<ConfigMap> = Api::namespaced(host.client.clone(), &ns.name);
    let rec = Recorder::new(cm_kind(), vec![]);
    rec.fail_first.lock().insert("flaky".into(), 5);
    let ctl = host
        .start(rec.clone(), &ns.name, |c| {
            c.rate_limits.base_delay = Duration::from_millis(50);
        })
        .await?;
    api.create(&PostParams::default(), &cm("flaky", json!({}))).await?;
    let r = rec.clone();
    eventually("5 failures and a success", WAIT, || {
        let r = r.clone();
        async move { Ok((r.calls_for("flaky").len() >= 6).then_some(())) }
    })
    .await?;
    let calls = rec.calls_for("flaky");
    let reasons: Vec<_> = calls.iter().map(|c| c.reason).collect();
    assert_eq!(reasons[1..6], [Reason::Retry(1), Reason::Retry(2), Reason::Retry(3), Reason::Retry(4), Reason::Retry(5)], "{reasons:?}");
    // Delays 50, 100, 200, 400, 800 ms: each gap at least its delay, and growing.
    let gaps: Vec<_> = calls.windows(2).take(5).map(|w| w[1].at - w[0].at).collect();
    for (i, gap) in gaps.iter().enumerate() {
        let expected = Duration::from_millis(50 << i);
        assert!(*gap >= expected, "gap {i} was {gap:?}, expected at least {expected:?} (all: {gaps:?})");
    }
    assert!(gaps[4] > gaps[0] * 4, "delays must grow: {gaps:?}");
    // Forgotten after success: the next event is an Event, and its retry would start from the base again.
    let key = wasmloop::kinds::ObjectKey::new(cm_kind(), Some(&ns.name), "flaky");
    assert_eq!(ctl.queue().num_requeues(&key), 0);
    api.patch("flaky", &PatchParams::default(), &Patch::Merge(json!({"data": {"v": "2"}}))).await?;
    let r = rec.clone();
    eventually("a reconcile for the update", WAIT, || {
        let r = r.clone();
        async move { Ok((r.calls_for("flaky").len() >= 7).then_some(())) }
    })
    .await?;
    assert_eq!(rec.calls_for("flaky")[6].reason, Reason::Event);
    ctl.shutdown(Duration::from_secs(5)).await;
    ns.cleanup().await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn native_replicaset_reconciler_converges_and_a_second_pass_writes_nothing() -> Result<()> {
    init_tracing();
    let host = Host::new().await?;
    let ns = TestNamespace::create(&host.client, "native-rs").await?;
    let rs_api: Api<ReplicaSet> = Api::namespaced(host.client.clone(), &ns.name);
    for i in 0..10 {
        let rs: ReplicaSet = serde_json::from_value(json!({
            "metadata": {"name": format!("rs-{i}")},
            "spec": {"replicas": 3, "selector": {"matchLabels": {"app": format!("rs-{i}")}},
                     "template": {"metadata": {"labels": {"app": format!("rs-{i}")}},
                                  "spec": {"containers": [{"name": "c", "image": "registry.invalid/none"}]}}}
        }))?;
        rs_api.create(&PostParams::default(), &rs).await?;
    }
    // The replicaset plugin's own source, run natively by the host.
    let rec = Arc::new(wasmloop::native::SdkReconciler::<replicaset::ReplicaSetReconciler>::new()?.named("native-rs"));
    let ctl = host.start(rec, &ns.name, |c| c.workers = 2).await?;
    let pods: Api<Pod> = Api::namespaced(host.client.clone(), &ns.name);
    let (p, r) = (pods.clone(), rs_api.clone());
    eventually("30 pods and 10 statuses at 3", Duration::from_secs(60), || {
        let (p, r) = (p.clone(), r.clone());
        async move {
            let n = p.list(&Default::default()).await?.items.len();
            let ok = r.list(&Default::default()).await?.items.iter().filter(|rs| rs.status.as_ref().map(|s| s.replicas) == Some(3)).count();
            Ok((n == 30 && ok == 10).then_some(()))
        }
    })
    .await?;
    // Settle, then a full second pass (resync of everything) must issue no writes.
    tokio::time::sleep(Duration::from_secs(1)).await;
    let writes_before = host.requests.snapshot().write;
    let successes_before = host.metrics.reconciles("native-rs", "success");
    for i in 0..10 {
        ctl.queue().add(wasmloop::kinds::ObjectKey::new(KindRef::new("apps/v1", "ReplicaSet"), Some(&ns.name), format!("rs-{i}")));
    }
    let m = host.metrics.clone();
    eventually("a second pass over all 10", WAIT, || {
        let m = m.clone();
        async move { Ok((m.reconciles("native-rs", "success") >= successes_before + 10).then_some(())) }
    })
    .await?;
    assert_eq!(host.requests.snapshot().write, writes_before, "a converged pass must not write");
    assert_eq!(pods.list(&Default::default()).await?.items.len(), 30);
    ctl.shutdown(Duration::from_secs(5)).await;
    ns.cleanup().await
}
