//! Shadow versions, end to end against a real kube-apiserver: a candidate version (a ConfigMap
//! whose manifest says `shadowOf: podset`) runs beside the serving podset on every reconcile;
//! a faulty candidate that would delete a Pod the serving version keeps is reported (the
//! difference in the shadow log and `/shadow`, a `CandidateDiffers` Event on its ConfigMap) and
//! writes nothing; a candidate that behaves the same is counted as such; removing it stops it.
//! As a canary on 3 of 10 shards, a candidate serves only the keys of those shards; one whose
//! reconciles fail there (its outcomes refused) is rolled back by itself and says so.
//!
//! The tests run one at a time (both load a plugin named podset).

use std::time::Duration;

use anyhow::{Context, Result, bail};
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::api::events::v1::Event;
use kube::api::{Api, DeleteParams, DynamicObject, ListParams, Patch, PatchParams, PostParams};
use kube::core::{ApiResource, GroupVersionKind};
use serde_json::json;
use tokio::sync::broadcast;
use wasmloop::controller::shadow::PluginReport;
use wasmloop::hotload::{LoadEvent, PluginManager, PluginManagerConfig, PluginMetrics};
use wasmloop::plugin::PluginEngine;
use wasmloop_tests::{Host, TestNamespace, apply_plugin, ensure_podset_crd, eventually, init_tracing, plugin_path};

const WAIT: Duration = Duration::from_secs(60);

/// One test at a time: both load a plugin named podset.
static SERIAL: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

fn podsets(client: &kube::Client, ns: &str) -> Api<DynamicObject> {
    let ar = ApiResource::from_gvk_with_plural(&GroupVersionKind::gvk("wasmloop.dev", "v1alpha1", "PodSet"), "podsets");
    Api::namespaced_with(client.clone(), ns, &ar)
}

fn grants(work: &str) -> String {
    format!(
        "namespace: {work}\ngrants:\n  - kinds: [\"wasmloop.dev/v1alpha1/PodSet\"]\n    verbs: [read, update-status, event]\n  - kinds: [\"v1/Pod\"]\n    verbs: [read, create, delete, patch]\n"
    )
}

async fn next_load(events: &mut broadcast::Receiver<LoadEvent>, configmap: &str) -> Result<LoadEvent> {
    tokio::time::timeout(WAIT, async {
        loop {
            match events.recv().await {
                Ok(e @ LoadEvent::Loaded { .. }) if matches!(&e, LoadEvent::Loaded { configmap: cm, .. } if cm == configmap) => {
                    return Ok(e);
                }
                Ok(e @ LoadEvent::Removed { .. }) if matches!(&e, LoadEvent::Removed { configmap: cm, .. } if cm == configmap) => {
                    return Ok(e);
                }
                Ok(LoadEvent::Rejected { configmap: cm, error }) if cm == configmap => bail!("{configmap} was rejected: {error}"),
                Ok(_) | Err(broadcast::error::RecvError::Lagged(_)) => continue,
                Err(e) => bail!("load events closed: {e}"),
            }
        }
    })
    .await
    .with_context(|| format!("waiting for {configmap} to load or go"))?
}

/// Reconcile the PodSet again (an annotation edit is an event) and wait until the shadow log
/// has compared `n` more of its reconciles than `before`.
async fn touch_and_compare(sets: &Api<DynamicObject>, shadows: &wasmloop::controller::ShadowLog, i: u32) -> Result<PluginReport> {
    let before = report(shadows);
    let seen = before.same + before.different;
    let patch = json!({"metadata": {"annotations": {"test/touch": i.to_string()}}});
    sets.patch("web", &PatchParams::default(), &Patch::Merge(&patch)).await?;
    eventually("the candidate to shadow the reconcile", WAIT, || {
        let now = report(shadows);
        async move { Ok((now.same + now.different > seen).then_some(now)) }
    })
    .await
}

fn report(shadows: &wasmloop::controller::ShadowLog) -> PluginReport {
    shadows.reports(Some("podset")).into_iter().next().unwrap_or_default()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_candidate_version_is_compared_on_every_reconcile_and_never_writes() -> Result<()> {
    init_tracing();
    let _serial = SERIAL.lock().await;
    let serving = std::fs::read(plugin_path("podset")?)?;
    let faulty = std::fs::read(plugin_path("podset_off_by_one")?)?;
    let host = Host::new().await?;
    ensure_podset_crd(&host.client).await?;
    let ns = TestNamespace::create(&host.client, "shadow").await?;
    let work = TestNamespace::create(&host.client, "shadow-work").await?;
    let (client, n, w) = (host.client.clone(), ns.name.clone(), work.name.clone());
    let (sets, pods) = (podsets(&client, &w), Api::<Pod>::namespaced(client.clone(), &w));

    let shared = host.shared();
    let shadows = shared.shadows.clone();
    let engine = tokio::task::spawn_blocking(PluginEngine::new).await??;
    let config = PluginManagerConfig { shutdown_grace: Duration::from_secs(10), ..PluginManagerConfig::new(Some(n.clone())) };
    let manager = PluginManager::start(engine, shared, host.executor.clone(), PluginMetrics::unregistered(), config).await?;
    let mut events = manager.events();

    // 1. The serving version keeps 3 Pods for PodSet web.
    apply_plugin(&client, &n, "podset", &serving, &format!("name: podset\n{}", grants(&w))).await?;
    next_load(&mut events, "podset").await?;
    let podset = json!({
        "apiVersion": "wasmloop.dev/v1alpha1", "kind": "PodSet", "metadata": {"name": "web"},
        "spec": {"replicas": 3, "template": {"metadata": {"labels": {"app": "web"}},
                 "spec": {"containers": [{"name": "c", "image": "registry.invalid/none"}]}}}
    });
    sets.create(&PostParams::default(), &serde_json::from_value(podset)?).await?;
    let live = |pods: Vec<Pod>| pods.into_iter().filter(|p| p.metadata.deletion_timestamp.is_none()).collect::<Vec<_>>();
    eventually("3 Pods for web", WAIT, || {
        let pods = pods.clone();
        async move { Ok((live(pods.list(&ListParams::default()).await?.items).len() == 3).then_some(())) }
    })
    .await?;
    let before: Vec<(String, String)> = live(pods.list(&ListParams::default()).await?.items)
        .into_iter()
        .map(|p| (p.metadata.name.unwrap_or_default(), p.metadata.resource_version.unwrap_or_default()))
        .collect();

    // 2. A faulty candidate (one Pod fewer) shadows it: the difference is reported, nothing deleted.
    let candidate = format!("shadowOf: podset\n{}", grants(&w));
    apply_plugin(&client, &n, "podset-candidate", &faulty, &candidate).await?;
    next_load(&mut events, "podset-candidate").await?;
    let r = touch_and_compare(&sets, &shadows, 1).await?;
    assert!(r.different >= 1, "the faulty candidate differs: {r:?}");
    let d = r.differences.last().context("a recorded difference")?;
    assert_eq!(d.key, format!("wasmloop.dev/v1alpha1/PodSet/{w}/web"));
    assert!(d.serving.actions.iter().all(|a| !a.contains("\"delete\"")), "the serving version deletes nothing: {d:?}");
    let deletes: Vec<_> = d.only_candidate().into_iter().filter(|a| a.contains("\"action\":\"delete\"")).collect();
    assert_eq!(deletes.len(), 1, "the candidate would delete one Pod: {d:?}");
    assert_ne!(d.serving_digest, d.candidate_digest);
    // What the candidate would have deleted is still there, untouched; no delete went out.
    let after: Vec<(String, String)> = live(pods.list(&ListParams::default()).await?.items)
        .into_iter()
        .map(|p| (p.metadata.name.unwrap_or_default(), p.metadata.resource_version.unwrap_or_default()))
        .collect();
    assert_eq!(after, before, "the candidate wrote nothing");
    assert_eq!(host.metrics.actions("podset", "delete", "ok"), 0, "no delete was executed");
    // Sampled into an Event on the candidate's ConfigMap.
    let events_api = Api::<Event>::namespaced(client.clone(), &n);
    let note = eventually("a CandidateDiffers Event on podset-candidate", WAIT, || {
        let events_api = events_api.clone();
        async move {
            let list = events_api.list(&ListParams::default()).await?.items;
            Ok(list.into_iter().find(|e| {
                e.reason.as_deref() == Some("CandidateDiffers")
                    && e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some("podset-candidate")
            }))
        }
    })
    .await?;
    let text = note.note.unwrap_or_default();
    assert!(text.contains("/web") && text.contains("only candidate: [{\"action\":\"delete\""), "{text}");

    // `wasmloop diff` shows it from the host's /shadow: exit code 1, the delete only the candidate returns.
    let (addr, _http) = wasmloop::server::serve(
        "127.0.0.1:0".parse()?,
        std::sync::Arc::new(parking_lot::Mutex::new(prometheus_client::registry::Registry::default())),
        wasmloop::server::Readiness::default(),
        shadows.clone(),
        std::future::pending(),
    )
    .await?;
    let url = format!("http://{addr}");
    let out = tokio::process::Command::new(wasmloop_tests::cluster::host_binary()?)
        .args(["diff", "--url", &url, "--plugin", "podset"])
        .output()
        .await?;
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(1), "a difference exits 1: {text} {}", String::from_utf8_lossy(&out.stderr));
    assert!(text.contains("plugin podset: ") && text.contains(&format!("PodSet/{w}/web")), "{text}");
    assert!(text.contains(&format!("+ delete v1/Pod {w}/web-")), "{text}");

    // 3. A candidate that behaves as the serving version: compared as the same.
    apply_plugin(&client, &n, "podset-candidate", &serving, &candidate).await?;
    next_load(&mut events, "podset-candidate").await?;
    let before = report(&shadows);
    let r = touch_and_compare(&sets, &shadows, 2).await?;
    assert!(r.same > before.same, "an identical candidate compares as the same: {r:?}");
    assert_eq!(r.different, before.different, "and adds no difference: {r:?}");

    // 4. Deleting the candidate's ConfigMap stops the shadowing; the serving version goes on.
    Api::<k8s_openapi::api::core::v1::ConfigMap>::namespaced(client.clone(), &n)
        .delete("podset-candidate", &DeleteParams::default())
        .await?;
    match next_load(&mut events, "podset-candidate").await? {
        LoadEvent::Removed { .. } => {}
        other => bail!("expected the candidate removed, got {other:?}"),
    }
    let compared = report(&shadows);
    sets.patch("web", &PatchParams::default(), &Patch::Merge(&json!({"spec": {"replicas": 4}}))).await?;
    eventually("4 Pods for web", WAIT, || {
        let pods = pods.clone();
        async move { Ok((live(pods.list(&ListParams::default()).await?.items).len() == 4).then_some(())) }
    })
    .await?;
    let r = report(&shadows);
    assert_eq!((r.same, r.different, r.skipped), (compared.same, compared.different, compared.skipped), "nothing shadowed any more");

    manager.shutdown().await;
    work.cleanup().await?;
    ns.cleanup().await?;
    Ok(())
}

const V2_LABEL: &str = "wasmloop.dev/podset-version";

fn podset(name: &str) -> Result<DynamicObject> {
    Ok(serde_json::from_value(json!({
        "apiVersion": "wasmloop.dev/v1alpha1", "kind": "PodSet", "metadata": {"name": name},
        "spec": {"replicas": 1, "template": {"metadata": {"labels": {"app": name}},
                 "spec": {"containers": [{"name": "c", "image": "registry.invalid/none"}]}}}
    }))?)
}

/// The live Pods of namespace `ns`: how many carry the v2 build's label, of how many.
async fn v2_pods(client: &kube::Client, ns: &str) -> Result<(usize, usize)> {
    let pods = Api::<Pod>::namespaced(client.clone(), ns).list(&ListParams::default()).await?.items;
    let live: Vec<Pod> = pods.into_iter().filter(|p| p.metadata.deletion_timestamp.is_none()).collect();
    let v2 = live.iter().filter(|p| p.metadata.labels.as_ref().is_some_and(|l| l.get(V2_LABEL).is_some_and(|v| v == "v2"))).count();
    Ok((v2, live.len()))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_canary_serves_only_its_shards_and_is_rolled_back_when_it_fails_there() -> Result<()> {
    init_tracing();
    let _serial = SERIAL.lock().await;
    let serving = std::fs::read(plugin_path("podset")?)?;
    let v2 = std::fs::read(plugin_path("podset_v2")?)?;
    let host = Host::new().await?;
    ensure_podset_crd(&host.client).await?;
    let client = host.client.clone();
    let ns = TestNamespace::create(&client, "canary").await?;
    let mut work = Vec::new();
    for i in 0..6 {
        work.push(TestNamespace::create(&client, &format!("canary-w{i}")).await?);
    }
    // The shards (of 10, by namespace) of the work namespaces; the canary takes those of the
    // first two and a third shard no other namespace has, so some namespaces stay outside.
    const SHARDS: usize = 10;
    let shard = |ns: &str| {
        wasmloop::shard::shard_of(&wasmloop::kinds::KindRef::new("wasmloop.dev/v1alpha1", "PodSet").key(Some(ns), "web"), SHARDS)
    };
    let mut canary: std::collections::BTreeSet<usize> = work[..2].iter().map(|w| shard(&w.name)).collect();
    let others: std::collections::BTreeSet<usize> = work[2..].iter().map(|w| shard(&w.name)).collect();
    for s in 0..SHARDS {
        if canary.len() < 3 && !canary.contains(&s) && !others.contains(&s) {
            canary.insert(s);
        }
    }
    let inside: Vec<&str> = work.iter().filter(|w| canary.contains(&shard(&w.name))).map(|w| w.name.as_str()).collect();
    let outside: Vec<&str> = work.iter().filter(|w| !canary.contains(&shard(&w.name))).map(|w| w.name.as_str()).collect();
    assert!(!outside.is_empty(), "some work namespace is outside the canary shards {canary:?}");
    eprintln!("canary: shards {canary:?} of {SHARDS}: {} namespaces inside, {} outside", inside.len(), outside.len());

    let namespaces = work.iter().map(|w| format!("{:?}", w.name)).collect::<Vec<_>>().join(", ");
    let grants = |pod_verbs: &str| {
        format!(
            "grants:\n  - kinds: [\"wasmloop.dev/v1alpha1/PodSet\"]\n    verbs: [read, update-status, event]\n    namespaces: [{namespaces}]\n  - kinds: [\"v1/Pod\"]\n    verbs: [{pod_verbs}]\n    namespaces: [{namespaces}]\n"
        )
    };
    let shards = canary.iter().map(ToString::to_string).collect::<Vec<_>>().join(", ");
    let shared = host.shared();
    let shadows = shared.shadows.clone();
    let engine = tokio::task::spawn_blocking(PluginEngine::new).await??;
    let config = PluginManagerConfig { shutdown_grace: Duration::from_secs(10), ..PluginManagerConfig::new(Some(ns.name.clone())) };
    let manager = PluginManager::start(engine, shared, host.executor.clone(), PluginMetrics::unregistered(), config).await?;
    let mut events = manager.events();
    apply_plugin(
        &client,
        &ns.name,
        "podset",
        &serving,
        &format!("name: podset\nshards: {SHARDS}\n{}", grants("read, create, delete, patch")),
    )
    .await?;
    next_load(&mut events, "podset").await?;

    // 1. v2 as a canary on 3 of 10 shards: only the namespaces of those shards get v2's Pods.
    let candidate =
        |pod_verbs: &str, extra: &str| format!("shadowOf: podset\ncanary: {{shards: [{shards}]{extra}}}\n{}", grants(pod_verbs));
    apply_plugin(&client, &ns.name, "podset-candidate", &v2, &candidate("read, create, delete, patch", "")).await?;
    next_load(&mut events, "podset-candidate").await?;
    for w in &work {
        podsets(&client, &w.name).create(&PostParams::default(), &podset("web")?).await?;
    }
    for w in &work {
        let (client, name) = (client.clone(), w.name.clone());
        let (v2s, all) = eventually("a Pod per PodSet", WAIT, || {
            let (client, name) = (client.clone(), name.clone());
            async move { Ok(v2_pods(&client, &name).await.ok().filter(|(_, all)| *all == 1)) }
        })
        .await?;
        let expected = usize::from(inside.contains(&w.name.as_str()));
        assert_eq!((v2s, all), (expected, 1), "namespace {} (shard {}): v2's Pod only inside the canary", w.name, shard(&w.name));
    }
    assert_eq!(host.metrics.actions("podset", "create", "ok"), 6, "one create per PodSet, by one version or the other");

    // 2. A candidate whose outcomes are refused there (it may not create Pods) is rolled back by
    // itself once over half of at least 2 of its reconciles failed (the first two namespaces are
    // inside: two refused reconciles at once), says so, and the serving
    // version takes its shards back.
    let events_api = Api::<Event>::namespaced(client.clone(), &ns.name);
    apply_plugin(&client, &ns.name, "podset-candidate", &v2, &candidate("read, delete, patch", ", maxFailureRate: 0.5, minReconciles: 2"))
        .await?;
    next_load(&mut events, "podset-candidate").await?;
    for name in &inside {
        let patch = json!({"spec": {"replicas": 2}});
        podsets(&client, name).patch("web", &PatchParams::default(), &Patch::Merge(&patch)).await?;
    }
    let note = eventually("a CanaryRolledBack Event on podset-candidate", WAIT, || {
        let events_api = events_api.clone();
        async move {
            let list = events_api.list(&ListParams::default()).await?.items;
            Ok(list.into_iter().find(|e| e.reason.as_deref() == Some("CanaryRolledBack")))
        }
    })
    .await?;
    let text = note.note.unwrap_or_default();
    assert!(text.contains("rolled back") && text.contains("of its") && text.contains("only shadows"), "{text}");
    assert_eq!(report(&shadows).rollbacks, 1, "{:?}", report(&shadows));
    for name in &inside {
        let (client, name) = (client.clone(), name.to_string());
        let (v2s, all) = eventually("the serving version to scale the canary's PodSets", WAIT, || {
            let (client, name) = (client.clone(), name.clone());
            async move { Ok(v2_pods(&client, &name).await.ok().filter(|(_, all)| *all == 2)) }
        })
        .await?;
        assert_eq!((v2s, all), (1, 2), "namespace {name}: the new Pod is the serving version's");
    }

    manager.shutdown().await;
    for w in work {
        w.cleanup().await?;
    }
    ns.cleanup().await?;
    Ok(())
}

/// A candidate is given the serving call's reads, so it sees what the serving version saw even
/// when the cache has moved on by the time it runs: with the cache as the serving call read it
/// (a 3-replica ReplicaSet, no Pods) both create 3 Pods; a candidate reading the moved-on cache
/// (its 3 Pods there) would create none. No cluster: the replicaset plugin loaded twice.
#[test]
fn a_candidate_replays_the_serving_calls_reads_not_the_cache_as_it_is_later() -> Result<()> {
    use std::sync::Arc;
    use wasmloop::cache::{CacheView, SharedCache};
    use wasmloop::controller::Reconciler;
    use wasmloop::kinds::{KindRef, ObjectKey};
    use wasmloop::reconciler::Request;

    let rs_uid = "1c2d3e4f-aaaa-bbbb-cccc-000000000001";
    let replicaset = json!({
        "apiVersion": "apps/v1", "kind": "ReplicaSet",
        "metadata": {"name": "web", "namespace": "shop", "uid": rs_uid, "resourceVersion": "4711", "generation": 1,
                     "labels": {"app": "web"}},
        "spec": {"replicas": 3, "selector": {"matchLabels": {"app": "web"}},
                 "template": {"metadata": {"labels": {"app": "web"}}, "spec": {"containers": [{"name": "web", "image": "web:1"}]}}},
        "status": {"replicas": 0, "observedGeneration": 1}
    });
    let pod = |n: usize| {
        json!({"apiVersion": "v1", "kind": "Pod",
               "metadata": {"name": format!("web-{n}"), "namespace": "shop", "uid": format!("0b9c2d1e-7f3a-4c5b-9d8e-{n:012x}"),
                            "resourceVersion": format!("{}", 100 + n), "labels": {"app": "web"},
                            "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "web", "uid": rs_uid,
                                                 "controller": true}]},
               "spec": {"containers": [{"name": "web", "image": "web:1"}]}})
    };
    // Another app's Pod in both (the cache holds Pods at all).
    let unrelated = json!({"apiVersion": "v1", "kind": "Pod",
                           "metadata": {"name": "db-0", "namespace": "shop", "uid": "0b9c2d1e-7f3a-4c5b-9d8e-ffffffffffff",
                                        "resourceVersion": "99", "labels": {"app": "db"}},
                           "spec": {"containers": [{"name": "db", "image": "db:1"}]}});
    let before: SharedCache = Arc::new(CacheView::from_objects([replicaset.clone(), unrelated.clone()])?);
    let later: SharedCache = Arc::new(CacheView::from_objects([replicaset, unrelated, pod(0), pod(1), pod(2)])?);
    let request = Request::new(ObjectKey::new(KindRef::new("apps/v1", "ReplicaSet"), Some("shop"), "web"));

    let engine = PluginEngine::new()?;
    let wasm = std::fs::read(plugin_path("replicaset")?)?;
    let yaml = std::fs::read_to_string(wasmloop_tests::workspace_root().join("deploy/plugins/replicaset.plugin.yaml"))?;
    let manifest = wasmloop::hotload::PluginManifest::parse(&yaml, "replicaset")?;
    let load = || wasmloop::plugin::WasmPlugin::load(&engine, &wasm, manifest.limits.clone(), manifest.grants.clone());
    let (serving, candidate) = (load()?, load()?);
    let creates = |r: &Result<wasmloop::reconciler::Outcome, wasmloop::reconciler::ReconcileError>| -> Result<usize> {
        let outcome = r.as_ref().map_err(|e| anyhow::anyhow!("reconcile failed: {e}"))?;
        Ok(outcome.actions.iter().filter(|a| a.verb() == wasmloop::grants::Verb::Create).count())
    };

    // The serving call reads through a `Kept` cache, as the worker's does when it is shadowed.
    let kept = Arc::new(wasmloop::cache::Kept::new(before));
    let serving_view: SharedCache = kept.clone();
    let result = std::thread::scope(|s| s.spawn(|| serving.reconcile(&request, &serving_view)).join())
        .map_err(|_| anyhow::anyhow!("the serving call panicked"))?;
    assert_eq!(creates(&result)?, 3, "the serving version, on an empty ReplicaSet");
    assert!(!kept.is_empty(), "the serving call's reads were kept");
    let replaying = kept.replaying(later.clone());
    let (replayed, live) = std::thread::scope(|s| {
        let replayed = s.spawn(|| candidate.reconcile_as_candidate(&request, &replaying)).join();
        let live = s.spawn(|| candidate.reconcile(&request, &later)).join();
        (replayed, live)
    });
    let (replayed, live) = (replayed.map_err(|_| anyhow::anyhow!("panicked"))?, live.map_err(|_| anyhow::anyhow!("panicked"))?);
    assert_eq!(creates(&replayed)?, 3, "the candidate given the serving call's reads creates what the serving one did");
    assert_eq!(creates(&live)?, 0, "reading the cache as it is later, it would have seen the Pods");
    Ok(())
}
