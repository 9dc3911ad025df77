//! Hot-loading plugins from ConfigMaps, end to end against a real kube-apiserver: load, swap
//! under load (no key lost), refuse a corrupt version (last good keeps serving, Event +
//! annotation name the error), re-apply, restart (plugins come back, precompiled cache hit),
//! delete (no more actions). Both forms: the wasm inline in the plugin ConfigMap, and in an
//! immutable payload ConfigMap referenced by digest (manifest-only reloads, mismatches, a payload
//! applied after its plugin ConfigMap).

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::{ConfigMap, Pod};
use k8s_openapi::api::events::v1::Event;
use kube::api::{Api, DeleteParams, DynamicObject, ListParams, Patch, PatchParams, PostParams};
use kube::core::{ApiResource, GroupVersionKind};
use serde_json::json;
use tokio::sync::broadcast;
use wasmloop::hotload::{LoadEvent, LoadOrigin, PluginManager, PluginManagerConfig, PluginMetrics};
use wasmloop::plugin::PluginEngine;
use wasmloop_tests::{Host, TestNamespace, apply_configmap, apply_plugin, ensure_podset_crd, eventually, init_tracing, plugin_path};

const WAIT: Duration = Duration::from_secs(60);

fn podsets(client: &kube::Client, ns: &str) -> Api<DynamicObject> {
    let ar = ApiResource::from_gvk_with_plural(&GroupVersionKind::gvk("wasmloop.dev", "v1alpha1", "PodSet"), "podsets");
    Api::namespaced_with(client.clone(), ns, &ar)
}

fn podset(name: &str, replicas: u32) -> DynamicObject {
    serde_json::from_value(json!({
        "apiVersion": "wasmloop.dev/v1alpha1", "kind": "PodSet",
        "metadata": {"name": name},
        "spec": {"replicas": replicas, "template": {"metadata": {"labels": {"app": name}},
                 "spec": {"containers": [{"name": "c", "image": "registry.invalid/none"}]}}}
    }))
    .unwrap()
}

fn manifest(ns: &str) -> String {
    format!(
        "name: podset\nnamespace: {ns}\nconcurrency: 2\ngrants:\n  - kinds: [\"wasmloop.dev/v1alpha1/PodSet\"]\n    verbs: [read, update-status, event]\n  - kinds: [\"v1/Pod\"]\n    verbs: [read, create, delete, patch]\n"
    )
}

async fn next_load(events: &mut broadcast::Receiver<LoadEvent>, what: &str) -> Result<LoadEvent> {
    tokio::time::timeout(WAIT, async {
        loop {
            match events.recv().await {
                Ok(e) => return Ok(e),
                Err(broadcast::error::RecvError::Lagged(_)) => continue,
                Err(e) => bail!("load events closed: {e}"),
            }
        }
    })
    .await
    .with_context(|| format!("waiting for {what}"))?
}

async fn start_manager(host: &Host, ns: &str, precompiled: &std::path::Path) -> Result<PluginManager> {
    let engine = tokio::task::spawn_blocking(PluginEngine::new).await??;
    Ok(PluginManager::start(
        engine,
        host.shared(),
        host.executor.clone(),
        PluginMetrics::unregistered(),
        PluginManagerConfig {
            precompiled_dir: Some(precompiled.to_path_buf()),
            shutdown_grace: Duration::from_secs(10),
            ..PluginManagerConfig::new(Some(ns.to_string()))
        },
    )
    .await?)
}

async fn pods_of(pods: &Api<Pod>, podset: &str) -> Result<Vec<Pod>> {
    let lp = ListParams::default().labels(&format!("wasmloop.dev/podset={podset}"));
    Ok(pods.list(&lp).await?.items.into_iter().filter(|p| p.metadata.deletion_timestamp.is_none()).collect())
}

fn is_v2(p: &Pod) -> bool {
    p.metadata.labels.as_ref().and_then(|l| l.get("wasmloop.dev/podset-version")).map(String::as_str) == Some("v2")
}

async fn status_annotation(cms: &Api<ConfigMap>) -> Result<serde_json::Value> {
    let cm = cms.get("podset").await?;
    let text = cm.metadata.annotations.unwrap_or_default().get("wasmloop.dev/status").cloned().unwrap_or_default();
    Ok(serde_json::from_str(&text).unwrap_or(serde_json::Value::Null))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn plugins_are_loaded_swapped_refused_restarted_and_removed_from_configmaps() -> Result<()> {
    init_tracing();
    let v1 = std::fs::read(plugin_path("podset")?)?;
    let v2 = std::fs::read(plugin_path("podset_v2")?)?;
    let mut host = Host::new().await?;
    ensure_podset_crd(&host.client).await?;
    let ns = TestNamespace::create(&host.client, "hotload").await?;
    // The PodSets and their Pods live apart from the plugin ConfigMaps (plugins write nothing in
    // a namespace that holds plugin ConfigMaps).
    let work = TestNamespace::create(&host.client, &format!("{}-work", "hotload")).await?;
    let precompiled = tempfile::tempdir()?;
    let (client, n, w) = (host.client.clone(), ns.name.clone(), work.name.clone());
    let (sets, pods, cms) =
        (podsets(&client, &w), Api::<Pod>::namespaced(client.clone(), &w), Api::<ConfigMap>::namespaced(client.clone(), &n));

    // 1. Apply the podset ConfigMap → the plugin loads (compiled) → PodSets reconcile.
    let manager = start_manager(&host, &n, precompiled.path()).await?;
    let mut events = manager.events();
    apply_plugin(&client, &n, "podset", &v1, &manifest(&w)).await?;
    match next_load(&mut events, "v1 to load").await? {
        LoadEvent::Loaded { version, origin, took, .. } => {
            assert_eq!(version, "0.1.0");
            assert_eq!(origin, LoadOrigin::Compiled);
            eprintln!("hotload: v1 apply → loaded (compile) in {took:?}");
        }
        other => bail!("expected v1 loaded, got {other:?}"),
    }
    for i in 0..5 {
        sets.create(&PostParams::default(), &podset(&format!("ps-{i}"), 2)).await?;
    }
    eventually("10 pods for 5 PodSets", WAIT, || {
        let pods = pods.clone();
        async move { Ok((pods.list(&ListParams::default()).await?.items.len() == 10).then_some(())) }
    })
    .await?;

    // 2. Apply v2 while PodSets keep arriving: none is lost, and Pods created after the swap carry v2's label.
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let creator = {
        let (sets, stop) = (sets.clone(), stop.clone());
        tokio::spawn(async move {
            let mut i = 5;
            while !stop.load(std::sync::atomic::Ordering::SeqCst) && i < 300 {
                sets.create(&PostParams::default(), &podset(&format!("ps-{i}"), 1)).await?;
                tokio::time::sleep(Duration::from_millis(80)).await;
                i += 1;
            }
            anyhow::Ok(i)
        })
    };
    tokio::time::sleep(Duration::from_millis(300)).await;
    let applied = Instant::now();
    apply_plugin(&client, &n, "podset", &v2, &manifest(&w)).await?;
    match next_load(&mut events, "v2 to load").await? {
        LoadEvent::Loaded { version, .. } => assert_eq!(version, "0.2.0"),
        other => bail!("expected v2 loaded, got {other:?}"),
    }
    let swapped = applied.elapsed();
    let p = pods.clone();
    let first_v2 = eventually("a pod created by v2", WAIT, || {
        let p = p.clone();
        async move { Ok(p.list(&ListParams::default()).await?.items.iter().any(is_v2).then(|| applied.elapsed())) }
    })
    .await?;
    eprintln!("hotload: v2 apply → v2 serving in {swapped:?}; apply → first v2 Pod observed in {first_v2:?}");
    stop.store(true, std::sync::atomic::Ordering::SeqCst);
    let created = creator.await??;
    eprintln!("hotload: {} PodSets created while swapping", created - 5);
    for i in 0..created {
        let want = if i < 5 { 2 } else { 1 };
        let name = format!("ps-{i}");
        let p = pods.clone();
        let got = eventually(&format!("{want} pods for {name} (no key lost across the swap)"), WAIT, || {
            let (p, name) = (p.clone(), name.clone());
            async move {
                let n = pods_of(&p, &name).await?.len();
                Ok((n == want).then_some(n))
            }
        })
        .await?;
        assert_eq!(got, want);
    }
    // The swap kept the queue: PodSets created after v2 was serving have v2 Pods.
    sets.create(&PostParams::default(), &podset("after-v2", 2)).await?;
    let p = pods.clone();
    let after = eventually("pods of after-v2", WAIT, || {
        let p = p.clone();
        async move {
            let v = pods_of(&p, "after-v2").await?;
            Ok((v.len() == 2).then_some(v))
        }
    })
    .await?;
    assert!(after.iter().all(is_v2), "new Pods must carry v2's label");

    // 3. A corrupt v3 is refused: v2 keeps serving; the annotation and an Event name the error.
    let mut garbage = b"\0asm\x0d\x00\x01\x00".to_vec();
    garbage.extend((0..4096u32).map(|i| (i.wrapping_mul(2654435761) >> 13) as u8));
    let corrupt = ConfigMap {
        metadata: kube::api::ObjectMeta {
            name: Some("podset".into()),
            labels: Some(BTreeMap::from([("wasmloop.dev/plugin".to_string(), "true".to_string())])),
            ..Default::default()
        },
        binary_data: Some(BTreeMap::from([("plugin.wasm.zst".to_string(), ByteString(zstd::encode_all(&garbage[..], 3)?))])),
        data: Some(BTreeMap::from([("plugin.yaml".to_string(), manifest(&w))])),
        ..Default::default()
    };
    apply_configmap(&client, &n, corrupt).await?;
    let error = match next_load(&mut events, "v3 to be refused").await? {
        LoadEvent::Rejected { error, .. } => error,
        other => bail!("expected v3 refused, got {other:?}"),
    };
    let c = cms.clone();
    let status = eventually("the Rejected annotation", WAIT, || {
        let c = c.clone();
        async move {
            let s = status_annotation(&c).await?;
            Ok((s["state"] == "Rejected").then_some(s))
        }
    })
    .await?;
    assert_eq!(status["error"], json!(error), "the annotation names the error");
    assert!(status["serving"].as_str().is_some_and(|s| s.contains("0.2.0")), "{status}");
    let ev = Api::<Event>::namespaced(client.clone(), &n);
    let rejected = eventually("a PluginRejected Event", WAIT, || {
        let ev = ev.clone();
        async move { Ok(ev.list(&ListParams::default()).await?.items.into_iter().find(|e| e.reason.as_deref() == Some("PluginRejected"))) }
    })
    .await?;
    let note = rejected.note.unwrap_or_default();
    assert!(note.contains("still serving podset 0.2.0"), "{note}");
    eprintln!("hotload: v3 refused with: {error}");
    sets.patch("ps-0", &PatchParams::default(), &Patch::Merge(json!({"spec": {"replicas": 3}}))).await?;
    let p = pods.clone();
    let ps0 = eventually("ps-0 scaled by v2 while v3 is refused", WAIT, || {
        let p = p.clone();
        async move {
            let v = pods_of(&p, "ps-0").await?;
            Ok((v.len() == 3).then_some(v))
        }
    })
    .await?;
    assert!(ps0.iter().any(is_v2), "the new ps-0 Pod comes from v2");

    // 4. Re-apply v2: back to Loaded without compiling (it is the version serving).
    apply_plugin(&client, &n, "podset", &v2, &manifest(&w)).await?;
    match next_load(&mut events, "v2 re-applied").await? {
        LoadEvent::Loaded { version, origin, took, .. } => {
            assert_eq!(version, "0.2.0");
            assert_eq!(origin, LoadOrigin::Unchanged, "no compile for the version already serving");
            eprintln!("hotload: re-apply v2 → Loaded again in {took:?} (no compile)");
        }
        other => bail!("expected v2 loaded, got {other:?}"),
    }
    let c = cms.clone();
    eventually("the annotation back at Loaded", WAIT, || {
        let c = c.clone();
        async move { Ok((status_annotation(&c).await?["state"] == "Loaded").then_some(())) }
    })
    .await?;

    // 5. Restart the host (new manager, new informers, same precompiled dir): v2 comes back from
    //    its ConfigMap without a compile, and reconciles.
    manager.shutdown().await;
    host = Host::new().await?;
    let started = Instant::now();
    let manager = start_manager(&host, &n, precompiled.path()).await?;
    eprintln!("hotload: restart → plugins loaded in {:?}", started.elapsed());
    let loaded = manager.loaded().await;
    assert_eq!(loaded, vec![("podset".to_string(), "podset".to_string(), "0.2.0".to_string())]);
    let c = cms.clone();
    let s = eventually("the annotation after restart", WAIT, || {
        let c = c.clone();
        async move {
            let s = status_annotation(&c).await?;
            Ok((s["origin"] == "from the precompiled cache").then_some(s))
        }
    })
    .await?;
    eprintln!("hotload: restart loaded v2 from the precompiled cache in {} ms", s["loadMillis"]);
    sets.patch("ps-1", &PatchParams::default(), &Patch::Merge(json!({"spec": {"replicas": 3}}))).await?;
    let p = pods.clone();
    eventually("ps-1 scaled after the restart", WAIT, || {
        let p = p.clone();
        async move { Ok((pods_of(&p, "ps-1").await?.len() == 3).then_some(())) }
    })
    .await?;

    // 6. Delete the ConfigMap: the controller stops and no action of it reaches the API server.
    let mut events = manager.events();
    cms.delete("podset", &DeleteParams::default()).await?;
    match next_load(&mut events, "the plugin to be removed").await? {
        LoadEvent::Removed { plugin, .. } => assert_eq!(plugin, "podset"),
        other => bail!("expected removal, got {other:?}"),
    }
    let writes = host.requests.snapshot().write;
    sets.create(&PostParams::default(), &podset("after-delete", 2)).await?;
    sets.patch("ps-2", &PatchParams::default(), &Patch::Merge(json!({"spec": {"replicas": 5}}))).await?;
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert!(pods_of(&pods, "after-delete").await?.is_empty(), "a removed plugin must not act");
    assert_eq!(pods_of(&pods, "ps-2").await?.len(), 2);
    assert_eq!(host.requests.snapshot().write, writes, "no write from the removed plugin");
    assert!(manager.loaded().await.is_empty());
    manager.shutdown().await;
    work.cleanup().await?;
    ns.cleanup().await
}

fn pack_ref(ns: &str, wasm: &[u8], manifest: &str) -> Result<wasmloop::hotload::pack::PackedRef> {
    use wasmloop::hotload::pack;
    Ok(pack::pack_referenced(pack::PackInput {
        wasm,
        path: "podset.wasm",
        manifest: manifest.to_string(),
        name: "podset".into(),
        namespace: Some(ns.to_string()),
    })?)
}

/// The next load event other than a wait for a payload the informer has not delivered yet
/// (payloads are looked up in its cache only, so one applied a moment before its plugin
/// ConfigMap may be waited for first).
async fn next_settled(events: &mut broadcast::Receiver<LoadEvent>, what: &str) -> Result<LoadEvent> {
    loop {
        match next_load(events, what).await? {
            LoadEvent::Waiting { reason, .. } if reason.contains("not found (a ConfigMap labelled wasmloop.dev/plugin-payload") => {}
            other => return Ok(other),
        }
    }
}

async fn next_loaded(events: &mut broadcast::Receiver<LoadEvent>, what: &str) -> Result<(String, LoadOrigin, Duration, String)> {
    match next_settled(events, what).await? {
        LoadEvent::Loaded { version, origin, took, digest, .. } => Ok((version, origin, took, digest)),
        other => bail!("expected {what} (Loaded), got {other:?}"),
    }
}

async fn next_rejected(events: &mut broadcast::Receiver<LoadEvent>, what: &str) -> Result<String> {
    match next_settled(events, what).await? {
        LoadEvent::Rejected { error, .. } => Ok(error),
        other => bail!("expected {what} (Rejected), got {other:?}"),
    }
}

/// The referenced form (`wasmloop pack`'s default): an immutable payload ConfigMap holds the wasm,
/// the small plugin ConfigMap references it by name and digest. Loads; a grants-only change
/// reloads without reading the payload (the loaded component is reused); a restart loads from the
/// precompiled cache; a digest mismatch and a mutable payload are refused while the last good
/// version keeps serving; a plugin ConfigMap applied before its payload loads when it appears.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn referenced_payloads_load_reload_on_manifest_changes_refuse_mismatches_and_wait_for_the_payload() -> Result<()> {
    init_tracing();
    let v1 = std::fs::read(plugin_path("podset")?)?;
    let v2 = std::fs::read(plugin_path("podset_v2")?)?;
    let mut host = Host::new().await?;
    ensure_podset_crd(&host.client).await?;
    let ns = TestNamespace::create(&host.client, "hotload-ref").await?;
    // The PodSets and their Pods live apart from the plugin ConfigMaps (plugins write nothing in
    // a namespace that holds plugin ConfigMaps).
    let work = TestNamespace::create(&host.client, &format!("{}-work", "hotload-ref")).await?;
    let precompiled = tempfile::tempdir()?;
    let (client, n, w) = (host.client.clone(), ns.name.clone(), work.name.clone());
    let (sets, pods, cms) =
        (podsets(&client, &w), Api::<Pod>::namespaced(client.clone(), &w), Api::<ConfigMap>::namespaced(client.clone(), &n));
    let manager = start_manager(&host, &n, precompiled.path()).await?;
    let mut events = manager.events();

    // 1. Pack both objects, apply them (payload first, as in the YAML stream): v1 loads.
    let p1 = pack_ref(&n, &v1, &manifest(&w))?;
    let payload1 = p1.payloads[0].metadata.name.clone().context("payload name")?;
    assert!(payload1.starts_with("podset-wasm-") && payload1.len() == "podset-wasm-".len() + 12, "{payload1}");
    apply_configmap(&client, &n, p1.payloads[0].clone()).await?;
    apply_configmap(&client, &n, p1.plugin.clone()).await?;
    let (version, origin, _, digest) = next_loaded(&mut events, "v1 from its payload").await?;
    assert_eq!((version.as_str(), origin), ("0.1.0", LoadOrigin::Compiled));
    assert_eq!(digest, p1.digest, "the loaded component is the one the digest names");
    let c = cms.clone();
    let status = eventually("the Loaded annotation naming the payload", WAIT, || {
        let c = c.clone();
        async move {
            let s = status_annotation(&c).await?;
            Ok((s["state"] == "Loaded").then_some(s))
        }
    })
    .await?;
    assert_eq!(status["payload"], json!(payload1));
    assert_eq!(status["digest"], json!(p1.digest));
    sets.create(&PostParams::default(), &podset("ref-0", 2)).await?;
    let p = pods.clone();
    eventually("2 pods for ref-0 from v1", WAIT, || {
        let p = p.clone();
        async move { Ok((pods_of(&p, "ref-0").await?.len() == 2).then_some(())) }
    })
    .await?;

    // 2. Grants only (one more verb): only the small ConfigMap is written; the loaded component is
    //    reused (no payload read, decompress, compile or deserialise).
    let more = manifest(&w).replace("verbs: [read, update-status, event]", "verbs: [read, update-status, event, patch]");
    assert_ne!(more, manifest(&w));
    let mut small = p1.plugin.clone();
    small.data.as_mut().unwrap().insert("plugin.yaml".into(), more.clone());
    let before = host.requests.snapshot();
    let applied = Instant::now();
    apply_configmap(&client, &n, small).await?;
    let (version, origin, took, digest) = next_loaded(&mut events, "the grants-only change").await?;
    let total = applied.elapsed();
    assert_eq!((version.as_str(), origin, digest.as_str()), ("0.1.0", LoadOrigin::Reused, p1.digest.as_str()));
    eprintln!("hotload-ref: grants-only apply → Loaded in {total:?} (the manager's load {took:?})");
    let after = host.requests.snapshot();
    eprintln!(
        "hotload-ref: API requests on the test's client during the reload: {} get, {} list, {} writes (the apply and what the host reported so far)",
        after.get - before.get,
        after.list - before.list,
        after.write - before.write
    );
    let c = cms.clone();
    eventually("the annotation of the reused component", WAIT, || {
        let c = c.clone();
        async move {
            let s = status_annotation(&c).await?;
            Ok(s["origin"].as_str().is_some_and(|o| o.starts_with("reusing")).then_some(()))
        }
    })
    .await?;
    sets.patch("ref-0", &PatchParams::default(), &Patch::Merge(json!({"spec": {"replicas": 3}}))).await?;
    let p = pods.clone();
    eventually("ref-0 scaled after the grants change", WAIT, || {
        let p = p.clone();
        async move { Ok((pods_of(&p, "ref-0").await?.len() == 3).then_some(())) }
    })
    .await?;

    // 3. Restart: the payload is read and checked once, the component comes from the precompiled cache.
    manager.shutdown().await;
    host = Host::new().await?;
    let manager = start_manager(&host, &n, precompiled.path()).await?;
    let mut events = manager.events();
    assert_eq!(manager.loaded().await, vec![("podset".to_string(), "podset".to_string(), "0.1.0".to_string())]);
    let c = cms.clone();
    eventually("the annotation after the restart", WAIT, || {
        let c = c.clone();
        async move {
            let s = status_annotation(&c).await?;
            Ok((s["origin"] == "from the precompiled cache").then_some(()))
        }
    })
    .await?;

    // 4. A digest that does not match the payload: refused, v1 keeps serving.
    let p2 = pack_ref(&n, &v2, &more)?;
    let mut lying = p1.plugin.clone();
    let data = lying.data.as_mut().unwrap();
    data.insert("plugin.yaml".into(), more.clone());
    data.insert("plugin.wasm.digest".into(), p2.digest.clone());
    apply_configmap(&client, &n, lying).await?;
    let error = next_rejected(&mut events, "the digest mismatch").await?;
    assert!(error.contains("does not match the digest") && error.contains(&p2.digest) && error.contains(&p1.digest), "{error}");
    let c = cms.clone();
    let status = eventually("the Rejected annotation", WAIT, || {
        let c = c.clone();
        async move {
            let s = status_annotation(&c).await?;
            Ok((s["state"] == "Rejected").then_some(s))
        }
    })
    .await?;
    assert!(status["serving"].as_str().is_some_and(|s| s.contains("0.1.0")), "{status}");
    let ev = Api::<Event>::namespaced(client.clone(), &n);
    eventually("a PluginRejected Event naming the mismatch", WAIT, || {
        let ev = ev.clone();
        async move {
            Ok(ev.list(&ListParams::default()).await?.items.into_iter().find(|e| {
                e.reason.as_deref() == Some("PluginRejected") && e.note.as_deref().is_some_and(|n| n.contains("does not match the digest"))
            }))
        }
    })
    .await?;
    sets.patch("ref-0", &PatchParams::default(), &Patch::Merge(json!({"spec": {"replicas": 4}}))).await?;
    let p = pods.clone();
    eventually("ref-0 scaled by v1 while the mismatch is refused", WAIT, || {
        let p = p.clone();
        async move { Ok((pods_of(&p, "ref-0").await?.len() == 4).then_some(())) }
    })
    .await?;

    // 5. A payload that is not immutable: refused.
    let mut mutable = p2.payloads[0].clone();
    mutable.metadata.name = Some("podset-wasm-mutable".into());
    mutable.immutable = None;
    apply_configmap(&client, &n, mutable).await?;
    let mut pointing = p2.plugin.clone();
    pointing.data.as_mut().unwrap().insert("plugin.wasm.ref".into(), "podset-wasm-mutable".into());
    apply_configmap(&client, &n, pointing).await?;
    let error = next_rejected(&mut events, "the mutable payload").await?;
    assert!(error.contains("not immutable"), "{error}");

    // 6. The plugin ConfigMap before its payload: waits for it (the same payload in another
    //    namespace is not looked at), loaded when the payload appears in its own namespace.
    let other = TestNamespace::create(&host.client, "hotload-ref-other").await?;
    let mut elsewhere = p2.payloads[0].clone();
    elsewhere.metadata.namespace = Some(other.name.clone());
    apply_configmap(&client, &other.name, elsewhere).await?;
    apply_configmap(&client, &n, p2.plugin.clone()).await?;
    let reason = match next_load(&mut events, "the missing payload").await? {
        LoadEvent::Waiting { reason, .. } => reason,
        other => bail!("expected the plugin ConfigMap to wait for its payload, got {other:?}"),
    };
    assert!(reason.contains("not found") && reason.contains(p2.payloads[0].metadata.name.as_deref().unwrap()), "{reason}");
    // Reported once the wait lasted a second: Waiting, naming the payload, v2's declared digest,
    // and the version that still serves.
    let c = cms.clone();
    let status = eventually("the Waiting annotation", WAIT, || {
        let c = c.clone();
        async move {
            let s = status_annotation(&c).await?;
            Ok((s["state"] == "Waiting").then_some(s))
        }
    })
    .await?;
    assert_eq!(status["reason"], "PayloadMissing", "{status}");
    assert_eq!(status["digest"], json!(p2.digest), "{status}");
    assert!(status["serving"].as_str().is_some_and(|s| s.contains("0.1.0")), "{status}");
    apply_configmap(&client, &n, p2.payloads[0].clone()).await?;
    let (version, origin, _, digest) = next_loaded(&mut events, "v2 once its payload appeared").await?;
    assert_eq!((version.as_str(), origin, digest.as_str()), ("0.2.0", LoadOrigin::Compiled, p2.digest.as_str()));
    sets.create(&PostParams::default(), &podset("ref-v2", 2)).await?;
    let p = pods.clone();
    let made = eventually("ref-v2's pods from v2", WAIT, || {
        let p = p.clone();
        async move {
            let v = pods_of(&p, "ref-v2").await?;
            Ok((v.len() == 2).then_some(v))
        }
    })
    .await?;
    assert!(made.iter().all(is_v2), "v2 serves");

    // 7. Delete: removed.
    cms.delete("podset", &DeleteParams::default()).await?;
    match next_load(&mut events, "the plugin to be removed").await? {
        LoadEvent::Removed { plugin, .. } => assert_eq!(plugin, "podset"),
        other => bail!("expected removal, got {other:?}"),
    }
    manager.shutdown().await;
    other.cleanup().await?;
    work.cleanup().await?;
    ns.cleanup().await
}

/// A payload split over several immutable ConfigMaps (`wasmloop pack` does this for components
/// whose compressed form is over one ConfigMap, such as a Python plugin's; small parts here, on
/// the podset plugin, make the same shape quickly): it loads only once every part is there (a
/// missing part is waited for, named); a part of another version is refused while the last good
/// version keeps serving; the right part in its place loads the new version.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn split_payloads_load_whole_wait_for_missing_parts_and_refuse_foreign_ones() -> Result<()> {
    use wasmloop::hotload::pack;
    init_tracing();
    let v1 = std::fs::read(plugin_path("podset")?)?;
    let v2 = std::fs::read(plugin_path("podset_v2")?)?;
    let host = Host::new().await?;
    ensure_podset_crd(&host.client).await?;
    let ns = TestNamespace::create(&host.client, "hotload-split").await?;
    let work = TestNamespace::create(&host.client, "hotload-split-work").await?;
    let precompiled = tempfile::tempdir()?;
    let (client, n, w) = (host.client.clone(), ns.name.clone(), work.name.clone());
    let (sets, pods, cms) =
        (podsets(&client, &w), Api::<Pod>::namespaced(client.clone(), &w), Api::<ConfigMap>::namespaced(client.clone(), &n));
    let manager = start_manager(&host, &n, precompiled.path()).await?;
    let mut events = manager.events();
    let split = |wasm: &[u8]| {
        pack::pack_referenced_parts(
            pack::PackInput { wasm, path: "podset.wasm", manifest: manifest(&w), name: "podset".into(), namespace: Some(n.clone()) },
            32 << 10,
        )
    };

    // 1. v1 in parts, the plugin ConfigMap first: it waits for the first part, then loads once
    //    every part is there.
    let p1 = split(&v1)?;
    assert!(p1.payloads.len() >= 3, "{} parts", p1.payloads.len());
    apply_configmap(&client, &n, p1.plugin.clone()).await?;
    let first = p1.payloads[0].metadata.name.clone().context("part name")?;
    match next_load(&mut events, "v1 without its parts").await? {
        LoadEvent::Waiting { reason, .. } => assert!(reason.contains(&first), "{reason}"),
        other => bail!("expected Waiting for {first}, got {other:?}"),
    }
    for part in &p1.payloads {
        apply_configmap(&client, &n, part.clone()).await?;
    }
    let (version, _, _, digest) = loop {
        match next_load(&mut events, "v1 once its parts are there").await? {
            LoadEvent::Loaded { version, origin, took, digest, .. } => break (version, origin, took, digest),
            LoadEvent::Waiting { .. } => continue,
            other => bail!("expected v1 to load, got {other:?}"),
        }
    };
    assert_eq!((version.as_str(), digest.as_str()), ("0.1.0", p1.digest.as_str()));
    sets.create(&PostParams::default(), &podset("split-0", 2)).await?;
    let p = pods.clone();
    eventually("2 pods for split-0 from v1", WAIT, || {
        let p = p.clone();
        async move { Ok((pods_of(&p, "split-0").await?.len() == 2).then_some(())) }
    })
    .await?;

    // 2. v2 with its second part missing: waits, naming that part; v1 keeps serving.
    let p2 = split(&v2)?;
    let missing = p2.payloads[1].metadata.name.clone().context("part name")?;
    for (i, part) in p2.payloads.iter().enumerate() {
        if i != 1 {
            apply_configmap(&client, &n, part.clone()).await?;
        }
    }
    apply_configmap(&client, &n, p2.plugin.clone()).await?;
    let reason = loop {
        match next_load(&mut events, "v2 without its second part").await? {
            LoadEvent::Waiting { reason, .. } if reason.contains(&missing) => break reason,
            LoadEvent::Waiting { .. } => continue,
            other => bail!("expected Waiting for {missing}, got {other:?}"),
        }
    };
    assert!(reason.contains("not found"), "{reason}");

    // 3. A part of v1 under the missing part's name: refused, v1 keeps serving.
    let mut foreign = p1.payloads[1].clone();
    foreign.metadata.name = Some(missing.clone());
    apply_configmap(&client, &n, foreign).await?;
    let error = next_rejected(&mut events, "a part of another version").await?;
    assert!(error.contains(&missing) && error.contains("is part of the component") && error.contains(&p1.digest), "{error}");
    sets.patch("split-0", &PatchParams::default(), &Patch::Merge(json!({"spec": {"replicas": 3}}))).await?;
    let p = pods.clone();
    eventually("split-0 scaled by v1 while v2 is refused", WAIT, || {
        let p = p.clone();
        async move { Ok((pods_of(&p, "split-0").await?.len() == 3).then_some(())) }
    })
    .await?;

    // 4. The right part in its place (immutable: deleted and created again): v2 loads.
    cms.delete(&missing, &DeleteParams::default()).await?;
    let c = cms.clone();
    let gone = missing.clone();
    eventually("the foreign part gone", WAIT, || {
        let (c, gone) = (c.clone(), gone.clone());
        async move { Ok(c.get_opt(&gone).await?.is_none().then_some(())) }
    })
    .await?;
    apply_configmap(&client, &n, p2.payloads[1].clone()).await?;
    let digest = loop {
        match next_load(&mut events, "v2 once its part is right").await? {
            LoadEvent::Loaded { digest, .. } => break digest,
            LoadEvent::Waiting { .. } | LoadEvent::Rejected { .. } => continue,
            other => bail!("expected v2 to load, got {other:?}"),
        }
    };
    assert_eq!(digest, p2.digest);
    manager.shutdown().await;
    work.cleanup().await?;
    ns.cleanup().await
}
