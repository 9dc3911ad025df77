//! The Wasm plugins end to end against a real kube-apiserver: `podset` through its whole
//! lifecycle, `replicaset` at 100 × 10, `namespace-config` with its label index, and every
//! misbehaving plugin contained while a good one keeps reconciling.

use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use k8s_openapi::api::apps::v1::ReplicaSet;
use k8s_openapi::api::core::v1::{ConfigMap, Namespace, Pod};
use kube::api::{Api, DeleteParams, DynamicObject, ListParams, Patch, PatchParams, PostParams};
use kube::core::{ApiResource, GroupVersionKind};
use serde_json::json;
use wasmloop_tests::{Host, TestNamespace, ensure_podset_crd, eventually, init_tracing, start_plugin, workspace_root};

const WAIT: Duration = Duration::from_secs(90);

fn podset_manifest(ns: &str) -> String {
    format!(
        "namespace: {ns}\nconcurrency: 2\ngrants:\n  - kinds: [\"wasmloop.dev/v1alpha1/PodSet\"]\n    verbs: [read, update-status, event]\n  - kinds: [\"v1/Pod\"]\n    verbs: [read, create, delete, patch]\n"
    )
}

fn podsets(client: &kube::Client, ns: &str) -> Api<DynamicObject> {
    let ar = ApiResource::from_gvk_with_plural(&GroupVersionKind::gvk("wasmloop.dev", "v1alpha1", "PodSet"), "podsets");
    Api::namespaced_with(client.clone(), ns, &ar)
}

fn podset(name: &str, replicas: u32) -> DynamicObject {
    serde_json::from_value(json!({
        "apiVersion": "wasmloop.dev/v1alpha1", "kind": "PodSet", "metadata": {"name": name},
        "spec": {"replicas": replicas, "template": {"metadata": {"labels": {"app": name}},
                 "spec": {"containers": [{"name": "c", "image": "registry.invalid/none"}]}}}
    }))
    .unwrap()
}

/// Live pods per PodSet name (by the plugin's label), ignoring those being deleted.
async fn pod_counts(pods: &Api<Pod>) -> Result<std::collections::BTreeMap<String, usize>> {
    let mut out = std::collections::BTreeMap::new();
    for p in pods.list(&ListParams::default()).await?.items {
        if p.metadata.deletion_timestamp.is_some() {
            continue;
        }
        if let Some(owner) = p.metadata.labels.as_ref().and_then(|l| l.get("wasmloop.dev/podset")) {
            *out.entry(owner.clone()).or_default() += 1;
        }
    }
    Ok(out)
}

async fn statuses(sets: &Api<DynamicObject>) -> Result<std::collections::BTreeMap<String, i64>> {
    Ok(sets
        .list(&ListParams::default())
        .await?
        .items
        .into_iter()
        .map(|s| {
            (
                s.metadata.name.clone().unwrap_or_default(),
                s.data.pointer("/status/replicas").and_then(serde_json::Value::as_i64).unwrap_or(-1),
            )
        })
        .collect())
}

/// kube-controller-manager running only its garbage collector (owner references → deletes),
/// stopped when dropped.
struct GarbageCollector(Child);

impl GarbageCollector {
    fn start() -> Result<Self> {
        let kcm = Command::new(workspace_root().join("scripts/control-plane.sh")).args(["bin", "kube-controller-manager"]).output()?;
        let kcm = String::from_utf8(kcm.stdout)?.trim().to_string();
        let kubeconfig = wasmloop_tests::kubeconfig()?;
        let child = Command::new(kcm)
            .args(["--controllers=garbagecollector", "--leader-elect=false", "--port=0", "--secure-port=0"])
            .arg(format!("--kubeconfig={}", kubeconfig.display()))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .context("starting kube-controller-manager (garbage collector)")?;
        Ok(Self(child))
    }
}

impl Drop for GarbageCollector {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// The examples stay small (issue: a plugin using the typed Deployment and Service ≤ 300 KB raw,
/// podset on the SDK's light path, no k8s-openapi): a dependency or a change that brings a big
/// (de)serializer back fails here, not in a review. Sizes as `scripts/build-plugins.sh` builds
/// them: the `plugin` profile, then `wasmloop optimize` (Binaryen's wasm-opt, which
/// `scripts/setup.sh` installs).
#[test]
fn example_plugins_stay_within_their_size_budgets() -> Result<()> {
    for (plugin, budget) in [("podset", 260_000), ("namespace_config", 140_000), ("webapp", 300_000)] {
        let path = wasmloop_tests::plugin_path(plugin)?;
        let size = std::fs::metadata(&path).with_context(|| format!("{}", path.display()))?.len();
        eprintln!("{plugin}: {size} bytes (budget {budget})");
        assert!(
            size <= budget,
            "{plugin} is {size} bytes, over its {budget}-byte budget ({}; built by scripts/build-plugins.sh with wasm-opt installed?)",
            path.display()
        );
    }
    Ok(())
}

/// The example plugins are linked with a 128 KiB shadow stack (this workspace's
/// `.cargo/config.toml`), not Rust's 1 MiB: what a call touches then stays within the part of
/// the memory slot the host resets in place (`KEEP_RESIDENT_PLAIN`), so calls take no page faults.
#[test]
fn example_plugins_are_linked_with_a_small_stack() -> Result<()> {
    for plugin in ["podset", "replicaset", "namespace_config", "webapp"] {
        let path = wasmloop_tests::plugin_path(plugin)?;
        let bytes = std::fs::read(&path).with_context(|| format!("{}", path.display()))?;
        let stack = initial_stack_pointer(&bytes).with_context(|| format!("{plugin}: {}", path.display()))?;
        eprintln!("{plugin}: stack {stack} bytes");
        assert_eq!(stack, 128 * 1024, "{plugin}'s stack pointer starts at {stack} (built without .cargo/config.toml's rustflags?)");
    }
    Ok(())
}

/// The initial value of the first core module's `__stack_pointer`: its first mutable `i32`
/// global, which wasm-ld places first and initialises to the top of the stack.
fn initial_stack_pointer(component: &[u8]) -> Result<u32> {
    use wasmparser::{Operator, Parser, Payload, ValType};
    for payload in Parser::new(0).parse_all(component) {
        let Payload::GlobalSection(globals) = payload? else { continue };
        for global in globals {
            let global = global?;
            if global.ty.mutable
                && global.ty.content_type == ValType::I32
                && let Operator::I32Const { value } = global.init_expr.get_operators_reader().read()?
            {
                return Ok(value as u32);
            }
        }
        anyhow::bail!("the first core module has no mutable i32 global");
    }
    anyhow::bail!("no core module with globals")
}

/// `wasmloop optimize` on a plugin as rustc builds it (the `echo` test plugin, which
/// `scripts/build-test-plugins.sh` does not optimise): smaller, and still the same plugin to
/// the host; a broken input or a failing wasm-opt is named and leaves the file as it was.
#[test]
fn optimize_shrinks_a_component_and_keeps_it_the_same_plugin() -> Result<()> {
    let bin = wasmloop_tests::cluster::host_binary()?;
    let dir = tempfile::tempdir()?;
    let original = std::fs::read(wasmloop_tests::plugin_path("echo")?)?;
    let plugin = dir.path().join("echo.wasm");
    std::fs::write(&plugin, &original)?;
    let run = |args: &[&str]| -> Result<std::process::Output> {
        Ok(Command::new(&bin).args(args).env("WASMLOOP_NO_PRECOMPILED_CACHE", "true").output()?)
    };
    let text = |o: &std::process::Output| format!("{}{}", String::from_utf8_lossy(&o.stdout), String::from_utf8_lossy(&o.stderr));

    let out = run(&["optimize", plugin.to_str().context("path")?])?;
    anyhow::ensure!(out.status.success(), "wasmloop optimize failed: {}", text(&out));
    assert!(text(&out).contains("same imports, exports and metadata"), "{}", text(&out));
    let optimized = std::fs::read(&plugin)?;
    eprintln!("echo: {} → {} bytes", original.len(), optimized.len());
    assert!(optimized.len() < original.len() * 95 / 100, "{} → {} bytes: not smaller", original.len(), optimized.len());
    let inspect = run(&["inspect", plugin.to_str().context("path")?])?;
    assert!(inspect.status.success(), "the optimised plugin does not inspect: {}", text(&inspect));
    assert!(text(&inspect).contains("echo"), "{}", text(&inspect));

    // A truncated component: named, with where; the file is left as it was.
    let broken = dir.path().join("broken.wasm");
    std::fs::write(&broken, &original[..original.len() / 2])?;
    let out = run(&["optimize", broken.to_str().context("path")?])?;
    assert!(!out.status.success() && text(&out).contains("bytes announced"), "{}", text(&out));
    assert_eq!(std::fs::read(&broken)?.len(), original.len() / 2);

    // A wasm-opt that fails: its error is shown; nothing is written.
    let copy = dir.path().join("copy.wasm");
    std::fs::write(&copy, &original)?;
    let out = run(&["optimize", "--wasm-opt", "false", copy.to_str().context("path")?])?;
    assert!(!out.status.success() && text(&out).contains("optimising the core module"), "{}", text(&out));
    assert_eq!(std::fs::read(&copy)?, original);
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn podset_plugin_creates_scales_and_deletes_ten_podsets_idempotently() -> Result<()> {
    init_tracing();
    let host = Host::new().await?;
    ensure_podset_crd(&host.client).await?;
    let ns = TestNamespace::create(&host.client, "podset").await?;
    let (sets, pods) = (podsets(&host.client, &ns.name), Api::<Pod>::namespaced(host.client.clone(), &ns.name));
    let (ctl, wasm) = start_plugin(&host, "podset", &podset_manifest(&ns.name)).await?;
    let _gc = GarbageCollector::start()?;

    let converged = |want: Vec<(String, usize)>| {
        let (sets, pods) = (sets.clone(), pods.clone());
        async move {
            let counts = pod_counts(&pods).await?;
            let status = statuses(&sets).await?;
            let ok = want.iter().all(|(n, c)| counts.get(n).copied().unwrap_or(0) == *c && status.get(n) == Some(&(*c as i64)))
                && counts.len() == want.iter().filter(|(_, c)| *c > 0).count();
            anyhow::Ok(ok.then_some(()))
        }
    };
    // Create: 10 PodSets × 3.
    for i in 0..10 {
        sets.create(&PostParams::default(), &podset(&format!("ps-{i}"), 3)).await?;
    }
    let want: Vec<_> = (0..10).map(|i| (format!("ps-{i}"), 3)).collect();
    let t = Instant::now();
    eventually("10 PodSets × 3 Pods with status", WAIT, || converged(want.clone())).await?;
    eprintln!("podset: 10 × 3 converged in {:?}", t.elapsed());

    // Scale up (0..5 → 5) and down (5..10 → 1).
    for i in 0..10 {
        let r = if i < 5 { 5 } else { 1 };
        sets.patch(&format!("ps-{i}"), &PatchParams::default(), &Patch::Merge(json!({"spec": {"replicas": r}}))).await?;
    }
    let want: Vec<_> = (0..10).map(|i| (format!("ps-{i}"), if i < 5 { 5 } else { 1 })).collect();
    eventually("scaled up and down", WAIT, || converged(want.clone())).await?;
    // Scaled down from the highest ordinals: ps-7 keeps ps-7-0.
    assert!(pods.get_opt("ps-7-0").await?.is_some_and(|p| p.metadata.deletion_timestamp.is_none()));

    // Idempotent: ten more passes over a converged PodSet write nothing.
    tokio::time::sleep(Duration::from_secs(1)).await;
    let writes = host.requests.snapshot().write;
    let ok_before = wasm.stats().ok;
    for _ in 0..10 {
        ctl.queue().add(wasmloop::kinds::ObjectKey::new(
            wasmloop::kinds::KindRef::new("wasmloop.dev/v1alpha1", "PodSet"),
            Some(&ns.name),
            "ps-3",
        ));
        let w = wasm.clone();
        let target = w.stats().ok + 1;
        eventually("one more reconcile", WAIT, || {
            let w = w.clone();
            async move { Ok((w.stats().ok >= target).then_some(())) }
        })
        .await?;
    }
    assert!(wasm.stats().ok >= ok_before + 10);
    assert_eq!(host.requests.snapshot().write, writes, "reconciling a converged PodSet ten times must write nothing");

    // Delete: the PodSets go, their Pods are garbage-collected through the owner references,
    // and reconciling a deleted PodSet does nothing.
    for i in 5..10 {
        sets.delete(&format!("ps-{i}"), &DeleteParams::default()).await?;
    }
    let want: Vec<_> = (0..5).map(|i| (format!("ps-{i}"), 5)).collect();
    eventually("deleted PodSets' Pods gone", WAIT, || converged(want.clone())).await?;
    assert_eq!(wasm.stats().traps + wasm.stats().timeouts + wasm.stats().ooms, 0);
    ctl.shutdown(Duration::from_secs(5)).await;
    ns.cleanup().await
}

/// KCM's claim rules in podset, on the real server: a labelled orphan is adopted (patch with uid
/// and resourceVersion preconditions), an owned Pod relabelled away is released and replaced.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn podset_adopts_labelled_orphans_and_releases_pods_that_lose_the_label() -> Result<()> {
    init_tracing();
    let host = Host::new().await?;
    ensure_podset_crd(&host.client).await?;
    let ns = TestNamespace::create(&host.client, "podset-claim").await?;
    let (sets, pods) = (podsets(&host.client, &ns.name), Api::<Pod>::namespaced(host.client.clone(), &ns.name));
    let orphan: Pod = serde_json::from_value(json!({
        "metadata": {"name": "stray", "labels": {"wasmloop.dev/podset": "web"}},
        "spec": {"containers": [{"name": "c", "image": "registry.invalid/none"}]}
    }))?;
    pods.create(&PostParams::default(), &orphan).await?;
    let (ctl, wasm) = start_plugin(&host, "podset", &podset_manifest(&ns.name)).await?;
    let ps = sets.create(&PostParams::default(), &podset("web", 2)).await?;
    let uid = ps.metadata.uid.clone().context("PodSet uid")?;
    let owned_by = |pods: Api<Pod>, uid: String| async move {
        let list = pods.list(&ListParams::default()).await?.items;
        let owned: Vec<String> = list
            .iter()
            .filter(|p| p.metadata.owner_references.iter().flatten().any(|r| r.uid == uid && r.controller == Some(true)))
            .filter_map(|p| p.metadata.name.clone())
            .collect();
        anyhow::Ok((list.len(), owned))
    };
    let (p, u) = (pods.clone(), uid.clone());
    let owned =
        eventually("the orphan adopted and one Pod created", WAIT, || {
            let (p, u) = (p.clone(), u.clone());
            async move {
                Ok(Some(owned_by(p, u).await?).filter(|(n, owned)| *n == 2 && owned.len() == 2 && owned.contains(&"stray".to_string())))
            }
        })
        .await?;
    eprintln!("podset claim: adopted, owned {:?}", owned.1);

    pods.patch("stray", &PatchParams::default(), &Patch::Merge(json!({"metadata": {"labels": {"wasmloop.dev/podset": "elsewhere"}}})))
        .await?;
    let (p, u) = (pods.clone(), uid.clone());
    eventually("the relabelled Pod released and replaced", WAIT, || {
        let (p, u) = (p.clone(), u.clone());
        async move {
            let (n, owned) = owned_by(p.clone(), u).await?;
            let stray_free = p.get("stray").await?.metadata.owner_references.unwrap_or_default().is_empty();
            Ok((n == 3 && owned.len() == 2 && !owned.contains(&"stray".to_string()) && stray_free).then_some(()))
        }
    })
    .await?;
    assert_eq!(wasm.stats().traps + wasm.stats().timeouts + wasm.stats().errors, 0, "{:?}", wasm.stats());
    ctl.shutdown(Duration::from_secs(5)).await;
    ns.cleanup().await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn replicaset_plugin_converges_100_replicasets_of_10() -> Result<()> {
    init_tracing();
    let host = Host::new().await?;
    let ns = TestNamespace::create(&host.client, "rs100").await?;
    let manifest = format!(
        "namespace: {}\nconcurrency: 4\nqueue: {{qps: 1000, burst: 1000}}\napi: {{qps: 1000, burst: 1000}}\ngrants:\n  - kinds: [\"apps/v1/ReplicaSet\"]\n    verbs: [read, update-status]\n  - kinds: [\"v1/Pod\"]\n    verbs: [read, create, delete, patch]\n",
        ns.name
    );
    let (ctl, wasm) = start_plugin(&host, "replicaset", &manifest).await?;
    let rs_api: Api<ReplicaSet> = Api::namespaced(host.client.clone(), &ns.name);
    let start = Instant::now();
    for i in 0..100 {
        let rs: ReplicaSet = serde_json::from_value(json!({
            "metadata": {"name": format!("rs-{i}")},
            "spec": {"replicas": 10, "selector": {"matchLabels": {"app": format!("rs-{i}")}},
                     "template": {"metadata": {"labels": {"app": format!("rs-{i}")}},
                                  "spec": {"containers": [{"name": "c", "image": "registry.invalid/none"}]}}}
        }))?;
        rs_api.create(&PostParams::default(), &rs).await?;
    }
    let pods: Api<Pod> = Api::namespaced(host.client.clone(), &ns.name);
    let (p, r) = (pods.clone(), rs_api.clone());
    eventually("1000 pods and 100 statuses at 10", Duration::from_secs(180), || {
        let (p, r) = (p.clone(), r.clone());
        async move {
            let n = p.list(&ListParams::default()).await?.items.len();
            let done =
                r.list(&ListParams::default()).await?.items.iter().filter(|rs| rs.status.as_ref().map(|s| s.replicas) == Some(10)).count();
            Ok((n == 1000 && done == 100).then_some(()))
        }
    })
    .await?;
    eprintln!("replicaset: 100 × 10 converged in {:?} ({} reconciles)", start.elapsed(), wasm.stats().calls);
    // No duplicates: every ReplicaSet controls exactly 10 Pods, named from its generateName.
    let mut per_owner = std::collections::BTreeMap::<String, usize>::new();
    for p in pods.list(&ListParams::default()).await?.items {
        let name = p.metadata.name.clone().unwrap_or_default();
        let owner = p
            .metadata
            .owner_references
            .unwrap_or_default()
            .into_iter()
            .find(|o| o.controller == Some(true))
            .context("a Pod without controller")?;
        assert!(name.starts_with(&format!("{}-", owner.name)), "Pod {name} is not named after its ReplicaSet {}", owner.name);
        *per_owner.entry(owner.name).or_default() += 1;
    }
    assert!(per_owner.len() == 100 && per_owner.values().all(|n| *n == 10), "{per_owner:?}");
    ctl.shutdown(Duration::from_secs(5)).await;
    ns.cleanup().await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn namespace_config_plugin_follows_the_namespace_label() -> Result<()> {
    init_tracing();
    let host = Host::new().await?;
    let text = std::fs::read_to_string(workspace_root().join("deploy/plugins/namespace-config.plugin.yaml"))?;
    let (ctl, wasm) = start_plugin(&host, "namespace-config", &text).await?;
    let nss: Api<Namespace> = Api::all(host.client.clone());
    let name = format!("nscfg-{}", std::process::id());
    let ns: Namespace = serde_json::from_value(json!({"metadata": {"name": name, "labels": {"wasmloop.dev/config": "gold"}}}))?;
    nss.create(&PostParams::default(), &ns).await?;
    let cms: Api<ConfigMap> = Api::namespaced(host.client.clone(), &name);
    let c = cms.clone();
    let cm = eventually("the managed ConfigMap", WAIT, || {
        let c = c.clone();
        async move { Ok(c.get_opt("wasmloop-config").await?) }
    })
    .await?;
    let data = cm.data.unwrap_or_default();
    assert_eq!(data.get("profile").map(String::as_str), Some("gold"), "{data:?}");

    // Relabel: the ConfigMap follows.
    nss.patch(&name, &PatchParams::default(), &Patch::Merge(json!({"metadata": {"labels": {"wasmloop.dev/config": "silver"}}}))).await?;
    let c = cms.clone();
    eventually("profile silver", WAIT, || {
        let c = c.clone();
        async move {
            let cm = c.get_opt("wasmloop-config").await?;
            Ok(cm.and_then(|c| c.data).and_then(|d| d.get("profile").cloned()).filter(|p| p == "silver").map(|_| ()))
        }
    })
    .await?;
    // Someone deletes the managed ConfigMap: the plugin (watching ConfigMaps → Namespace) puts it back.
    cms.delete("wasmloop-config", &DeleteParams::default()).await?;
    let c = cms.clone();
    eventually("the ConfigMap restored", WAIT, || {
        let c = c.clone();
        async move { Ok(c.get_opt("wasmloop-config").await?.filter(|c| c.metadata.deletion_timestamp.is_none()).map(|_| ())) }
    })
    .await?;
    // Label removed: the ConfigMap is cleaned up.
    nss.patch(&name, &PatchParams::default(), &Patch::Merge(json!({"metadata": {"labels": {"wasmloop.dev/config": null}}}))).await?;
    let c = cms.clone();
    eventually("the ConfigMap deleted", WAIT, || {
        let c = c.clone();
        async move { Ok(c.get_opt("wasmloop-config").await?.is_none().then_some(())) }
    })
    .await?;
    assert_eq!(wasm.stats().traps, 0);
    ctl.shutdown(Duration::from_secs(5)).await;
    nss.delete(&name, &DeleteParams::default()).await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn misbehaving_plugins_are_contained_while_a_good_one_keeps_reconciling() -> Result<()> {
    init_tracing();
    let good_host = Host::new().await?;
    ensure_podset_crd(&good_host.client).await?;
    let ns = TestNamespace::create(&good_host.client, "contain").await?;
    let cms: Api<ConfigMap> = Api::namespaced(good_host.client.clone(), &ns.name);
    // The test plugins choose their misbehaviour by object name.
    for name in ["cm-0", "cm-1", "panic-1", "invalid-json", "no-name"] {
        let cm: ConfigMap = serde_json::from_value(json!({"metadata": {"name": name}, "data": {"k": "v"}}))?;
        cms.create(&PostParams::default(), &cm).await?;
    }
    // The bad plugins get their own client, so we can see exactly what they send.
    let bad_host = Host::new().await?;
    let cm_manifest = |extra: &str| {
        format!(
            "namespace: {}\nlimits: {{memory: 16Mi, timeout: 200ms}}\nqueue: {{baseDelay: 100ms}}\ngrants:\n  - kinds: [\"v1/ConfigMap\"]\n    verbs: [read, update-status, event]\n{extra}",
            ns.name
        )
    };
    let mut bad = Vec::new();
    for name in ["spin-loop", "memory-bomb", "panic", "bad-action", "write-outside-grant", "read-outside-grant"] {
        bad.push((name, start_plugin(&bad_host, name, &cm_manifest("")).await?));
    }
    let bad_writes_before = bad_host.requests.snapshot().write;

    // Meanwhile the good plugin converges PodSets.
    let (good, good_wasm) = start_plugin(&good_host, "podset", &podset_manifest(&ns.name)).await?;
    let (sets, pods) = (podsets(&good_host.client, &ns.name), Api::<Pod>::namespaced(good_host.client.clone(), &ns.name));
    for i in 0..5 {
        sets.create(&PostParams::default(), &podset(&format!("ps-{i}"), 2)).await?;
    }
    let p = pods.clone();
    eventually("the good plugin converges while the bad ones fail", WAIT, || {
        let p = p.clone();
        async move {
            let c = pod_counts(&p).await?;
            Ok((c.len() == 5 && c.values().all(|n| *n == 2)).then_some(()))
        }
    })
    .await?;
    // Let the bad ones fail a few times each.
    tokio::time::sleep(Duration::from_secs(3)).await;
    let stats = |n: &str| bad.iter().find(|(b, _)| *b == n).map(|(_, (_, w))| w.stats()).unwrap();
    assert!(stats("spin-loop").timeouts >= 3, "{:?}", stats("spin-loop"));
    assert!(stats("memory-bomb").ooms >= 3, "{:?}", stats("memory-bomb"));
    assert!(stats("panic").traps >= 3, "{:?}", stats("panic"));
    assert!(stats("bad-action").invalid_outcomes >= 3, "{:?}", stats("bad-action"));
    // write-outside-grant returns an allowed status update AND a forbidden delete: the whole
    // outcome is refused before anything is sent (no half-applied state).
    assert!(good_host.metrics.reconciles("write-outside-grant", "permanent_error") == 0);
    assert!(bad_host.metrics.reconciles("write-outside-grant", "permanent_error") >= 3);
    assert_eq!(
        bad_host.metrics.actions("write-outside-grant", "update-status", "ok")
            + bad_host.metrics.actions("write-outside-grant", "update-status", "error"),
        0
    );
    // read-outside-grant saw `not-granted` from the cache and said so in an event (its only
    // write); the host's own writes are the Warning Events about permanent failures.
    let secrets_read = bad_host.requests.snapshot();
    let events = |c: &str| bad_host.metrics.actions(c, "event", "ok") + bad_host.metrics.actions(c, "event", "error");
    assert!(events("wasmloop") >= 2, "the host reports refused and invalid outcomes as Events");
    // (The Event recorder folds repeats into series, so there may be fewer writes than publishes.)
    let writes = secrets_read.write - bad_writes_before;
    assert!(
        writes >= 1 && writes <= events("read-outside-grant") + events("wasmloop"),
        "the only writes of the bad plugins are read-outside-grant's events and the host's reports: {writes} writes"
    );
    // The good plugin never failed and still serves: scale one more.
    sets.patch("ps-0", &PatchParams::default(), &Patch::Merge(json!({"spec": {"replicas": 4}}))).await?;
    let p = pods.clone();
    eventually("ps-0 scaled to 4", WAIT, || {
        let p = p.clone();
        async move { Ok((pod_counts(&p).await?.get("ps-0") == Some(&4)).then_some(())) }
    })
    .await?;
    let g = good_wasm.stats();
    assert_eq!(g.traps + g.timeouts + g.ooms + g.invalid_outcomes, 0, "{g:?}");
    for (_, (ctl, _)) in bad {
        ctl.shutdown(Duration::from_secs(2)).await;
    }
    good.shutdown(Duration::from_secs(5)).await;
    ns.cleanup().await
}
