//! Record and replay against a real kube-apiserver: the `replicaset` plugin, hot-loaded from its
//! ConfigMap by a plugin manager configured as `wasmloop run --record-dir DIR --record-key KEY`
//! configures it, reconciles a ReplicaSet of 10 Pods and records every reconcile of its key.
//! The recording of the reconcile that saw all 10 Pods is at most 64 KB; `wasmloop reconcile
//! --record` of the same objects (fetched from the API server) replays the same too; `wasmloop replay`
//! (the built binary) runs it offline with the same plugin and gets the same outcome (exit 0),
//! 100 times over with one distinct outcome; and with a changed input (the recording's
//! ReplicaSet edited from 10 to 7 replicas, as a plugin reading it differently would see it)
//! it reports which actions differ (exit 1).

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
use wasmloop_tests::{Host, TestNamespace, apply_plugin, eventually, init_tracing, plugin_path, workspace_root};

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

/// The Pods a recording's reads handed the plugin (the most of any one read).
fn pods_seen(rec: &Recording) -> usize {
    rec.reads
        .iter()
        .filter(|r| matches!(&r.call, Call::List { kind, .. } | Call::ByIndex { kind, .. } if kind.kind == "Pod"))
        .map(|r| match &r.answer {
            Answer::Objects(objects) => objects.len(),
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

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_recorded_reconcile_replays_offline_with_the_same_outcome_and_a_change_shows() -> Result<()> {
    init_tracing();
    let wasm_path = plugin_path("replicaset")?;
    let wasm = std::fs::read(&wasm_path)?;
    let host = Host::new().await?;
    let ns = TestNamespace::create(&host.client, "replay").await?;
    let work = TestNamespace::create(&host.client, "replay-work").await?;
    let record_dir = tempfile::tempdir()?;
    let key = format!("apps/v1/ReplicaSet/{}/web", work.name);

    // The manager as `wasmloop run --record-dir DIR --record-key KEY` starts it.
    let mut record = RecordOptions::new(record_dir.path().to_path_buf(), std::slice::from_ref(&key), false)?;
    record.max_kept = 50;
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
            ..PluginManagerConfig::new(Some(ns.name.clone()))
        },
    )
    .await?;
    let mut events = manager.events();
    let manifest = format!(
        "name: replicaset\nnamespace: {}\nconcurrency: 2\ngrants:\n  - kinds: [\"apps/v1/ReplicaSet\"]\n    verbs: [read, update-status]\n  - kinds: [\"v1/Pod\"]\n    verbs: [read, create, delete, patch]\n",
        work.name
    );
    apply_plugin(&host.client, &ns.name, "replicaset", &wasm, &manifest).await?;
    let loaded = tokio::time::timeout(WAIT, async {
        loop {
            if let Ok(e @ LoadEvent::Loaded { .. }) = events.recv().await {
                return e;
            }
        }
    })
    .await
    .context("waiting for the replicaset plugin to load")?;
    eprintln!("replay: {loaded:?}");

    let rs_api: Api<ReplicaSet> = Api::namespaced(host.client.clone(), &work.name);
    let rs: ReplicaSet = serde_json::from_value(json!({
        "metadata": {"name": "web"},
        "spec": {"replicas": 10, "selector": {"matchLabels": {"app": "web"}},
                 "template": {"metadata": {"labels": {"app": "web"}},
                              "spec": {"containers": [{"name": "c", "image": "registry.invalid/none"}]}}}
    }))?;
    rs_api.create(&PostParams::default(), &rs).await?;
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
    let mut text = String::new();
    prometheus_client::encoding::text::encode(&mut text, &prom)?;
    let written = text
        .lines()
        .find_map(|l| l.strip_prefix(r#"wasmloop_plugin_recordings_total{plugin="replicaset",result="written"} "#))
        .and_then(|v| v.parse::<usize>().ok());
    ensure!(written.is_some_and(|n| n >= all.len()), "wasmloop_plugin_recordings_total: {written:?}, {} files:\n{text}", all.len());
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
