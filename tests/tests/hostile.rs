//! A hostile plugin against the host's limits: it cannot stall or flood the host, run under
//! another plugin's name, or get a component past the loader's bounds; its reads follow its
//! grants. (Attacks on what it writes are `tests/containment.rs`.)
//!
//! The `hostile` test plugin returns whatever actions the reconciled ConfigMap's `data.actions`
//! lists (see tests/plugins/hostile), so each attempt is one ConfigMap.

use std::collections::BTreeMap;
use std::time::Duration;

use anyhow::{Context, Result, bail};
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, PostParams};
use serde_json::{Value, json};
use tokio::sync::broadcast;
use wasmloop::hotload::{LoadEvent, PluginManager, PluginManagerConfig, PluginMetrics};
use wasmloop::plugin::{ByteSize, PluginEngine};
use wasmloop_tests::hostile::{WAIT, case_configmap, cm, data_configmap, dynamic, rbac, start_hostile};
use wasmloop_tests::{Host, TestNamespace, apply_plugin, eventually, init_tracing, plugin_path};

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
        host.shared(),
        host.executor.clone(),
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
    let (controller, _) = tokio::time::timeout(WAIT, start_hostile(limited.shared(), limited.executor.clone(), &manifest, None))
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
    let (controller, plugin) = start_hostile(host.shared(), host.executor.clone(), &manifest, None).await?;
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
            anyhow::Ok(PluginManager::start(engine, host.shared(), host.executor.clone(), PluginMetrics::unregistered(), config).await?)
        }
    };
    let grants = format!("namespace: {}\ngrants:\n  - kinds: [v1/ConfigMap]\n    verbs: [read, update-status]\n", ns.name);
    let small = PluginManagerConfig { max_component_size: ByteSize::kib(128), ..PluginManagerConfig::new(Some(ns.name.clone())) };
    let manager = start(small).await?;
    let mut events = manager.events();
    let podset = std::fs::read(plugin_path("podset")?)?;
    assert!(podset.len() > 128 * 1024, "the podset component is {} bytes", podset.len());
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
    assert!(seen["podset"].contains("over the host's 128Ki limit for one plugin"), "{}", seen["podset"]);
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

/// A plugin ConfigMap naming 64 payload parts that do not exist waits for them, and what
/// happens to it afterwards — edits, the host's own status writes — costs no LIST or GET: parts
/// are looked up in the payload informer's cache only (it used to cost 64 LISTs per event).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn missing_payload_parts_cost_no_requests() -> Result<()> {
    use kube::api::{Patch, PatchParams};
    init_tracing();
    let host = Host::new().await?;
    let ns = TestNamespace::create(&host.client, "hostile-parts").await?;
    let engine = tokio::task::spawn_blocking(PluginEngine::new).await??;
    let wait = wasmloop::hotload::WaitPolicy { settle: Duration::ZERO, ..Default::default() };
    let config = PluginManagerConfig { wait, ..PluginManagerConfig::new(Some(ns.name.clone())) };
    let manager = PluginManager::start(engine, host.shared(), host.executor.clone(), PluginMetrics::unregistered(), config).await?;
    let mut events = manager.events();
    let parts: Vec<String> = (1..=64).map(|i| format!("parts-wasm-0123456789ab-{i}-of-64")).collect();
    let plugin_cm: ConfigMap = serde_json::from_value(json!({
        "metadata": {"name": "parts", "labels": {"wasmloop.dev/plugin": "true"}},
        "data": {"plugin.yaml": "name: parts\n", "plugin.wasm.ref": parts.join(","),
                 "plugin.wasm.digest": format!("sha256:{}", "0".repeat(64))},
    }))?;
    let cms = Api::<ConfigMap>::namespaced(host.client.clone(), &ns.name);
    cms.create(&PostParams::default(), &plugin_cm).await?;
    match next_load(&mut events, "parts").await? {
        LoadEvent::Waiting { reason, .. } => assert!(reason.contains("parts-wasm-0123456789ab-1-of-64 not found"), "{reason}"),
        other => bail!("a plugin with missing parts did not wait: {other:?}"),
    }
    // Let the status write land, then count what five edits cost.
    tokio::time::sleep(Duration::from_secs(2)).await;
    let before = host.requests.snapshot();
    for i in 0..5 {
        let patch = json!({"metadata": {"annotations": {"touched": i.to_string()}}});
        cms.patch("parts", &PatchParams::default(), &Patch::Merge(patch)).await?;
    }
    tokio::time::sleep(Duration::from_secs(3)).await;
    let after = host.requests.snapshot();
    // The test's own five patches are writes; the host reads nothing.
    println!("5 edits of a plugin ConfigMap with 64 missing parts: {:?} -> {:?}", before, after);
    assert_eq!((after.list - before.list, after.get - before.get), (0, 0), "before {before:?}, after {after:?}");
    manager.shutdown().await;
    ns.cleanup().await
}
