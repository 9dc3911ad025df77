//! Record and replay against a real kube-apiserver, with the built `wasmloop` binary.
//!
//! - The `replicaset` plugin, hot-loaded from its ConfigMap by a plugin manager configured as
//!   `wasmloop run --record-dir DIR --record-key KEY` configures it, reconciles a ReplicaSet of 10
//!   Pods; every reconcile of that key, and only those, is recorded. The recording of the one that
//!   saw all 10 Pods is at most 64 KB; `wasmloop replay` runs it offline with the same plugin and
//!   gets the same outcome (exit 0), 100 times over with one distinct outcome; every recording of
//!   the key replays the same; `wasmloop reconcile --record` of the same objects (fetched from the
//!   API server) does too; and with a changed input (the recording's ReplicaSet edited from 10 to
//!   7 replicas) replay reports the 3 deletes it did not record (exit 1).
//! - `--record-failures` records only failing reconciles, which replay to the same failure.
//! - A new version of a plugin (`podset_v2.wasm`, built by scripts/build-test-plugins.sh) replayed
//!   on what `podset.wasm` was recorded seeing reports the actions it would do differently.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use anyhow::{Context, Result, ensure};
use k8s_openapi::api::apps::v1::ReplicaSet;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, ListParams, PostParams};
use serde_json::{Value, json};
use wasmloop::hotload::{LoadEvent, PluginManager, PluginManagerConfig, PluginMetrics};
use wasmloop::plugin::recording::{Answer, Call};
use wasmloop::plugin::{PluginEngine, RecordOptions, Recording};
use wasmloop_tests::{Host, TestNamespace, apply_plugin, ensure_podset_crd, eventually, init_tracing, plugin_path, workspace_root};

const WAIT: Duration = Duration::from_secs(90);

/// The recording size target of issue #31 for a 10-Pod ReplicaSet reconcile.
const MAX_RECORDING: usize = 64 * 1024;

/// The `wasmloop` binary beside this test binary (`<target>/debug/wasmloop`), whatever the
/// target directory.
fn wasmloop_binary() -> Result<PathBuf> {
    let exe = std::env::current_exe()?;
    let bin = exe.parent().and_then(Path::parent).map(|d| d.join("wasmloop"));
    let bin = bin.filter(|b| b.exists()).unwrap_or_else(|| workspace_root().join("target/debug/wasmloop"));
    ensure!(bin.exists(), "{} is missing: run `cargo build -p wasmloop` first", bin.display());
    Ok(bin)
}

/// `wasmloop replay` on `recording` with `plugin`: (exit code, its YAML output).
fn replay(recording: &Path, plugin: &Path, extra: &[&str]) -> Result<(i32, Value)> {
    let out = Command::new(wasmloop_binary()?)
        .arg("replay")
        .arg(recording)
        .arg("--plugin")
        .arg(plugin)
        .args(extra)
        .arg("--no-precompiled-cache")
        .output()
        .context("running wasmloop replay")?;
    let stdout = String::from_utf8(out.stdout)?;
    let stderr = String::from_utf8_lossy(&out.stderr);
    let parsed: Value = serde_saphyr::from_str(&stdout).with_context(|| format!("replay output: {stdout}\nstderr: {stderr}"))?;
    Ok((out.status.code().unwrap_or(-1), parsed))
}

/// The Pods a recording's reads handed the plugin (the most of any one read), as JSON or as
/// metadata (the `replicaset` plugin's packed reads are recorded as the metadata reads they pack).
fn pods_seen(rec: &Recording) -> usize {
    rec.reads
        .iter()
        .filter(|r| {
            matches!(&r.call, Call::List { kind, .. } | Call::ByIndex { kind, .. } | Call::ListMeta { kind, .. } | Call::ByIndexMeta { kind, .. }
                if kind.kind == "Pod")
        })
        .map(|r| match &r.answer {
            Answer::Objects(objects) => objects.len(),
            Answer::Metas(metas) => metas.len(),
            _ => 0,
        })
        .max()
        .unwrap_or(0)
}

/// Every recording in `dir`, oldest first, with its size.
fn recordings(dir: &Path) -> Result<Vec<(PathBuf, usize, Recording)>> {
    let mut out = Vec::new();
    let Ok(entries) = std::fs::read_dir(dir) else { return Ok(out) };
    let mut paths: Vec<PathBuf> = entries.filter_map(|e| e.ok().map(|e| e.path())).collect();
    paths.sort();
    for path in paths {
        if path.extension().and_then(|e| e.to_str()) != Some("zst") {
            continue;
        }
        let bytes = std::fs::read(&path)?;
        let rec = Recording::decode(&bytes).with_context(|| format!("decoding {}", path.display()))?;
        out.push((path, bytes.len(), rec));
    }
    Ok(out)
}

/// The replicaset plugin's manifest, reconciling in `work`, with `extra` lines.
fn manifest(work: &str, extra: &str) -> String {
    format!(
        "name: replicaset\nnamespace: {work}\nconcurrency: 2\ngrants:\n  - kinds: [\"apps/v1/ReplicaSet\"]\n    verbs: [read, update-status]\n  - kinds: [\"v1/Pod\"]\n    verbs: [read, create, delete, patch]\n{extra}"
    )
}

fn replicaset(name: &str, replicas: i32) -> Result<ReplicaSet> {
    Ok(serde_json::from_value(json!({
        "metadata": {"name": name},
        "spec": {"replicas": replicas, "selector": {"matchLabels": {"app": name}},
                 "template": {"metadata": {"labels": {"app": name}},
                              "spec": {"containers": [{"name": "c", "image": "registry.invalid/none"}]}}}
    }))?)
}

/// A plugin manager of plugin ConfigMaps in `ns` recording with `record` (as `wasmloop run
/// --record-dir ...` starts it), its metrics registered; `plugin` applied with `manifest` and
/// loaded.
async fn start_recording(
    host: &Host,
    ns: &str,
    plugin: &str,
    record: RecordOptions,
    manifest: &str,
) -> Result<(PluginManager, prometheus_client::registry::Registry)> {
    let engine = tokio::task::spawn_blocking(PluginEngine::new).await??;
    let mut prom = prometheus_client::registry::Registry::default();
    let metrics = PluginMetrics::new(&mut prom);
    let manager = PluginManager::start(
        engine,
        host.shared(),
        host.executor.clone(),
        metrics,
        PluginManagerConfig {
            shutdown_grace: Duration::from_secs(10),
            record: Some(record),
            ..PluginManagerConfig::new(Some(ns.to_string()))
        },
    )
    .await?;
    let mut events = manager.events();
    apply_plugin(&host.client, ns, plugin, &std::fs::read(plugin_path(plugin)?)?, manifest).await?;
    let loaded = tokio::time::timeout(WAIT, async {
        loop {
            if let Ok(e @ LoadEvent::Loaded { .. }) = events.recv().await {
                return e;
            }
        }
    })
    .await
    .with_context(|| format!("waiting for the {plugin} plugin to load"))?;
    eprintln!("replay: {loaded:?}");
    Ok((manager, prom))
}

/// The value of `wasmloop_plugin_recordings_total{plugin="replicaset",result}`.
fn recordings_metric(prom: &prometheus_client::registry::Registry, result: &str) -> Result<Option<usize>> {
    let mut text = String::new();
    prometheus_client::encoding::text::encode(&mut text, prom)?;
    let prefix = format!(r#"wasmloop_plugin_recordings_total{{plugin="replicaset",result="{result}"}} "#);
    Ok(text.lines().find_map(|l| l.strip_prefix(prefix.as_str())).and_then(|v| v.parse().ok()))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_recorded_reconcile_replays_offline_with_the_same_outcome_and_a_change_shows() -> Result<()> {
    init_tracing();
    let wasm_path = plugin_path("replicaset")?;
    let host = Host::new().await?;
    let ns = TestNamespace::create(&host.client, "replay").await?;
    let work = TestNamespace::create(&host.client, "replay-work").await?;
    let record_dir = tempfile::tempdir()?;
    let key = format!("apps/v1/ReplicaSet/{}/web", work.name);

    // The manager as `wasmloop run --record-dir DIR --record-key KEY` starts it.
    let mut record = RecordOptions::new(record_dir.path().to_path_buf(), std::slice::from_ref(&key), false)?;
    record.max_kept = 50;
    let (manager, prom) = start_recording(&host, &ns.name, "replicaset", record, &manifest(&work.name, "")).await?;
    let rs_api: Api<ReplicaSet> = Api::namespaced(host.client.clone(), &work.name);
    rs_api.create(&PostParams::default(), &replicaset("web", 10)?).await?;
    let pods: Api<Pod> = Api::namespaced(host.client.clone(), &work.name);
    let (p, r) = (pods.clone(), rs_api.clone());
    eventually("10 pods and status.replicas 10", WAIT, || {
        let (p, r) = (p.clone(), r.clone());
        async move {
            let n = p.list(&ListParams::default()).await?.items.len();
            let status = r.get("web").await?.status.map(|s| s.replicas);
            Ok((n == 10 && status == Some(10)).then_some(()))
        }
    })
    .await?;

    // The recorder writes on its own thread: wait for a recording of a reconcile that saw all 10.
    let plugin_dir = record_dir.path().join("replicaset");
    let (path, size, recording) = eventually("a recording of a reconcile that saw 10 Pods", WAIT, || {
        let dir = plugin_dir.clone();
        async move { Ok(recordings(&dir)?.into_iter().rev().find(|(_, _, rec)| pods_seen(rec) == 10)) }
    })
    .await?;
    let all = recordings(&plugin_dir)?;
    eprintln!(
        "replay: {} recordings of {key} written; the 10-Pod one is {size} bytes ({} bytes of JSON; {} reads, {} wall clock readings, {} random bytes): {}",
        all.len(),
        serde_json::to_vec(&recording)?.len(),
        recording.reads.len(),
        recording.wall_clock.len(),
        recording.random.len() / 2,
        path.display()
    );
    ensure!(all.iter().all(|(_, _, r)| r.request.key == key), "only the chosen key is recorded");
    ensure!(size <= MAX_RECORDING, "the 10-Pod recording is {size} bytes, over {MAX_RECORDING}");
    ensure!(!recording.truncated);
    ensure!(recording.plugin == "replicaset" && recording.digest.starts_with("sha256:"));
    // Counted in /metrics.
    let written = recordings_metric(&prom, "written")?;
    ensure!(written.is_some_and(|n| n >= all.len()), "wasmloop_plugin_recordings_total: {written:?}, {} files", all.len());
    manager.shutdown().await;

    // Offline, the same plugin: the same outcome, exit 0; 100 replays, one outcome.
    let (code, out) = replay(&path, &wasm_path, &[])?;
    ensure!(code == 0, "replay with the same plugin: exit {code}: {out:#}");
    ensure!(out["result"] == "same" && out["difference"] == "none", "{out:#}");
    ensure!(out.get("notFromTheRecording").is_none(), "everything served from the recording: {out:#}");
    ensure!(out["outcome"]["actions"] == json!(recording.outcome.actions), "{out:#}");
    let started = std::time::Instant::now();
    let (code, out) = replay(&path, &wasm_path, &["--count", "100"])?;
    ensure!(code == 0 && out["replays"] == 100 && out["distinctOutcomes"] == 1, "exit {code}: {out:#}");
    eprintln!("replay: 100 replays in {:?}, 1 distinct outcome", started.elapsed());
    // Every reconcile recorded replays to its own outcome (those that created Pods included).
    for (p, _, _) in &all {
        let (code, out) = replay(p, &wasm_path, &[])?;
        ensure!(code == 0, "{}: exit {code}: {out:#}", p.display());
    }

    // Offline: `wasmloop reconcile --record` on the same objects, as the API server serves them.
    let mut objects = vec![serde_json::to_value(rs_api.get("web").await?)?];
    for pod in pods.list(&ListParams::default()).await?.items {
        objects.push(serde_json::to_value(pod)?);
    }
    let objects_path = record_dir.path().join("objects.json");
    std::fs::write(&objects_path, serde_json::to_vec(&json!({"apiVersion": "v1", "kind": "List", "items": objects}))?)?;
    let offline_path = record_dir.path().join("offline.json.zst");
    let out = Command::new(wasmloop_binary()?)
        .arg("reconcile")
        .arg(&wasm_path)
        .arg("--objects")
        .arg(&objects_path)
        .args(["--key", &key, "--record"])
        .arg(&offline_path)
        .arg("--no-precompiled-cache")
        .output()?;
    ensure!(out.status.success(), "wasmloop reconcile --record: {}", String::from_utf8_lossy(&out.stderr));
    let offline = Recording::decode(&std::fs::read(&offline_path)?)?;
    ensure!(pods_seen(&offline) == 10, "the offline recording saw {} Pods", pods_seen(&offline));
    let (code, out) = replay(&offline_path, &wasm_path, &["--count", "10"])?;
    ensure!(code == 0 && out["distinctOutcomes"] == 1, "exit {code}: {out:#}");
    eprintln!(
        "replay: `wasmloop reconcile --record` of the same objects: {} bytes, replays the same",
        std::fs::metadata(&offline_path)?.len()
    );

    // A changed input: the recorded ReplicaSet now wants 7 → the replay deletes 3 Pods and
    // reports a different status, exit 1.
    let mut edited = recording.clone();
    let rs_read = edited
        .reads
        .iter_mut()
        .find(|r| matches!(&r.call, Call::Get { kind, .. } if kind.kind == "ReplicaSet"))
        .context("the recording has the ReplicaSet's get")?;
    let Answer::Object(Some(text)) = &mut rs_read.answer else { anyhow::bail!("the ReplicaSet's answer: {:?}", rs_read.answer) };
    let mut object: Value = serde_json::from_str(text)?;
    object["spec"]["replicas"] = json!(7);
    *text = object.to_string();
    let edited_path = record_dir.path().join("edited.json.zst");
    std::fs::write(&edited_path, edited.encode(MAX_RECORDING)?)?;
    let (code, out) = replay(&edited_path, &wasm_path, &[])?;
    ensure!(code == 1 && out["result"] == "different", "exit {code}: {out:#}");
    let added = out["difference"]["added"].as_array().cloned().unwrap_or_default();
    let deletes = added.iter().filter(|a| a["action"] == "delete").count();
    ensure!(deletes == 3, "3 Pods deleted in the replay, none in the recording: {out:#}");
    eprintln!("replay: the edited recording's difference: {}", serde_json::to_string(&out["difference"])?);

    work.cleanup().await?;
    ns.cleanup().await
}

/// `--record-failures`: a plugin whose reads go over its per-call budget (`readsPerCall: 8Ki`,
/// less than 10 Pods) fails once the Pods exist; those reconciles, and only those, are recorded,
/// and replay under the same manifest fails the same way (exit 0: the same outcome).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn failing_reconciles_are_recorded_and_replay_to_the_same_failure() -> Result<()> {
    init_tracing();
    let wasm_path = plugin_path("replicaset")?;
    let host = Host::new().await?;
    let ns = TestNamespace::create(&host.client, "replay-fail").await?;
    let work = TestNamespace::create(&host.client, "replay-fail-work").await?;
    let record_dir = tempfile::tempdir()?;
    let manifest = manifest(&work.name, "limits:\n  readsPerCall: 8Ki\n");
    let record = RecordOptions::new(record_dir.path().to_path_buf(), &[], true)?;
    let (manager, prom) = start_recording(&host, &ns.name, "replicaset", record, &manifest).await?;
    let rs_api: Api<ReplicaSet> = Api::namespaced(host.client.clone(), &work.name);
    rs_api.create(&PostParams::default(), &replicaset("web", 10)?).await?;
    let plugin_dir = record_dir.path().join("replicaset");
    let (path, _, recording) = eventually("a recording of a failed reconcile", WAIT, || {
        let dir = plugin_dir.clone();
        async move { Ok(recordings(&dir)?.into_iter().next()) }
    })
    .await?;
    manager.shutdown().await;
    let all = recordings(&plugin_dir)?;
    ensure!(
        all.iter().all(|(_, _, r)| r.outcome.error.is_some()),
        "only failures are recorded: {:?}",
        all.iter().map(|(_, _, r)| &r.outcome).collect::<Vec<_>>()
    );
    let error = recording.outcome.error.clone().context("a failure")?;
    ensure!(error.message.contains("per-call budget") && error.transient, "{error:?}");
    ensure!(recording.reads.iter().any(|r| r.over_budget), "the read over the budget is marked");
    ensure!(recordings_metric(&prom, "written")?.is_some_and(|n| n >= all.len()));
    eprintln!("replay: {} failed reconciles recorded: {}", all.len(), error.message);

    let manifest_path = record_dir.path().join("replicaset.plugin.yaml");
    std::fs::write(&manifest_path, &manifest)?;
    let manifest_arg = manifest_path.to_str().context("a UTF-8 path")?;
    let (code, out) = replay(&path, &wasm_path, &["--manifest", manifest_arg, "--count", "20"])?;
    ensure!(code == 0 && out["result"] == "same" && out["distinctOutcomes"] == 1, "exit {code}: {out:#}");
    ensure!(out["outcome"]["error"].as_str().is_some_and(|e| e.contains("per-call budget")), "{out:#}");

    work.cleanup().await?;
    ns.cleanup().await
}

/// A new version of a plugin, replayed on what the serving one was recorded seeing: the
/// `podset` plugin's reconcile that created a PodSet's 3 Pods, recorded through the API server,
/// replays the same with `podset.wasm` and differently with `podset_v2.wasm` (whose Pods carry a
/// version label): the 3 creates are reported `changed`, exit 1.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_new_plugin_version_replayed_on_a_recording_shows_what_it_would_do_differently() -> Result<()> {
    init_tracing();
    let (v1, v2) = (plugin_path("podset")?, plugin_path("podset_v2")?);
    let host = Host::new().await?;
    ensure_podset_crd(&host.client).await?;
    let ns = TestNamespace::create(&host.client, "replay-v2").await?;
    let work = TestNamespace::create(&host.client, "replay-v2-work").await?;
    let record_dir = tempfile::tempdir()?;
    let key = format!("wasmloop.dev/v1alpha1/PodSet/{}/web", work.name);
    let manifest = format!(
        "name: podset\nnamespace: {}\ngrants:\n  - kinds: [\"wasmloop.dev/v1alpha1/PodSet\"]\n    verbs: [read, update-status, event]\n  - kinds: [\"v1/Pod\"]\n    verbs: [read, create, delete, patch]\n",
        work.name
    );
    let record = RecordOptions::new(record_dir.path().to_path_buf(), std::slice::from_ref(&key), false)?;
    let (manager, _prom) = start_recording(&host, &ns.name, "podset", record, &manifest).await?;
    wasmloop_tests::cluster::create_podset(&host.client, &work.name, "web", 3).await?;
    let plugin_dir = record_dir.path().join("podset");
    let creates = |rec: &Recording| rec.outcome.actions.iter().filter(|a| a["action"] == "create").count();
    let (path, size, recording) = eventually("a recording of the reconcile that created the Pods", WAIT, || {
        let dir = plugin_dir.clone();
        async move { Ok(recordings(&dir)?.into_iter().find(|(_, _, rec)| creates(rec) == 3)) }
    })
    .await?;
    manager.shutdown().await;
    eprintln!("replay: the podset reconcile that created 3 Pods: {size} bytes");

    let (code, out) = replay(&path, &v1, &[])?;
    ensure!(code == 0 && out["result"] == "same", "the recorded version: exit {code}: {out:#}");
    let (code, out) = replay(&path, &v2, &[])?;
    ensure!(code == 1 && out["result"] == "different", "v2: exit {code}: {out:#}");
    ensure!(out["replayed"]["digest"] != json!(recording.digest), "{out:#}");
    let changed = out["difference"]["changed"].as_array().cloned().unwrap_or_default();
    ensure!(changed.len() == 3, "the 3 creates differ: {out:#}");
    for c in &changed {
        ensure!(c["recorded"]["action"] == "create" && c["replayed"]["action"] == "create", "{c:#}");
        let label = &c["replayed"]["object"]["metadata"]["labels"]["wasmloop.dev/podset-version"];
        ensure!(label == "v2" && c["recorded"]["object"]["metadata"]["labels"].get("wasmloop.dev/podset-version").is_none(), "{c:#}");
    }
    ensure!(out["difference"].get("added").is_none() && out["difference"].get("removed").is_none(), "{out:#}");
    eprintln!("replay: podset v2 on v1's recording: {} creates changed (the v2 label)", changed.len());

    work.cleanup().await?;
    ns.cleanup().await
}
