//! The same plugin three times: `namespace-config` in Rust (plugins/namespace-config), in
//! TypeScript (plugins/namespace-config-ts, QuickJS) and in Python (plugins/namespace-config-py,
//! componentize-py) give identical outcomes on the same objects.
//!
//! Each component runs in the host's offline `wasmloop reconcile` on the fixtures of
//! tests/fixtures/namespace-config (the host's own load checks, limits, admission), for every
//! scenario: the actions, requeue, refusal and error must be the same, and the expected ones.
//! Needs the components built: `scripts/build-plugins.sh` (which builds the TypeScript and
//! Python ports with the toolchains `scripts/setup.sh` installs).

use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{Context, Result, ensure};
use serde_json::Value;
use wasmloop_tests::{plugin_path, workspace_root};

/// The three builds: (language, component).
fn builds() -> Result<Vec<(&'static str, PathBuf)>> {
    Ok(vec![
        ("rust", plugin_path("namespace-config")?),
        ("typescript", plugin_path("namespace-config-ts")?),
        ("python", plugin_path("namespace-config-py")?),
    ])
}

/// One scenario: fixture files, the key, and what the outcome must hold.
struct Scenario {
    files: &'static [&'static str],
    key: &'static str,
    /// `(action, target)` for each expected action, in order: e.g. `("apply", "team-a")`.
    actions: &'static [(&'static str, &'static str)],
    requeue: Option<&'static str>,
}

const SCENARIOS: &[Scenario] = &[
    Scenario {
        files: &["cluster.yaml"],
        key: "v1/Namespace/team-a",
        actions: &[("apply", "team-a"), ("event", "ConfigApplied")],
        requeue: Some("5m"),
    },
    Scenario {
        files: &["cluster.yaml"],
        key: "v1/Namespace/team-c",
        actions: &[("apply", "team-c"), ("event", "ConfigApplied")],
        requeue: Some("5m"),
    },
    Scenario { files: &["cluster.yaml"], key: "v1/Namespace/team-d", actions: &[], requeue: None },
    Scenario { files: &["cluster.yaml"], key: "v1/Namespace/plain", actions: &[], requeue: None },
    Scenario { files: &["cluster.yaml"], key: "v1/Namespace/nope", actions: &[], requeue: None },
    Scenario { files: &["cluster.yaml", "converged.yaml"], key: "v1/Namespace/team-c", actions: &[], requeue: Some("5m") },
    Scenario { files: &["cluster.yaml", "drifted.yaml"], key: "v1/Namespace/team-a", actions: &[("apply", "team-a")], requeue: Some("5m") },
    Scenario {
        files: &["cluster.yaml", "drifted.yaml"],
        key: "v1/Namespace/team-b",
        actions: &[("apply", "team-b"), ("event", "ConfigApplied")],
        requeue: Some("5m"),
    },
    Scenario {
        files: &["cluster.yaml", "stale.yaml"],
        key: "v1/Namespace/plain",
        actions: &[("delete", "plain"), ("event", "ConfigRemoved")],
        requeue: None,
    },
    Scenario {
        files: &["cluster.yaml", "stale.yaml"],
        key: "v1/Namespace/team-e",
        actions: &[("delete", "team-e"), ("event", "ConfigRemoved")],
        requeue: None,
    },
    Scenario { files: &["cluster.yaml", "stale.yaml"], key: "v1/Namespace/team-d", actions: &[], requeue: None },
];

fn wasmloop() -> Result<PathBuf> {
    let bin = workspace_root().join("target/debug/wasmloop");
    ensure!(bin.exists(), "{} is not built (cargo build -p wasmloop)", bin.display());
    Ok(bin)
}

/// `wasmloop reconcile` of `wasm` on the scenario: its output, parsed.
fn reconcile(bin: &Path, wasm: &Path, s: &Scenario) -> Result<Value> {
    let fixtures = workspace_root().join("tests/fixtures/namespace-config");
    let mut cmd = Command::new(bin);
    cmd.arg("reconcile").arg(wasm).arg("--objects");
    for f in s.files {
        cmd.arg(fixtures.join(f));
    }
    cmd.args(["--key", s.key, "--manifest"]).arg(workspace_root().join("deploy/plugins/namespace-config.plugin.yaml"));
    let out = cmd.output().with_context(|| format!("running wasmloop reconcile {}", wasm.display()))?;
    let stdout = String::from_utf8(out.stdout)?;
    ensure!(out.status.success(), "wasmloop reconcile {} {}: {}\n{}", wasm.display(), s.key, stdout, String::from_utf8_lossy(&out.stderr));
    serde_saphyr::from_str(&stdout).with_context(|| format!("parsing:\n{stdout}"))
}

/// What must be the same across the builds: the actions, the requeue, a refusal or an error.
fn outcome(v: &Value) -> Value {
    serde_json::json!({
        "actions": v.get("actions").cloned().unwrap_or(Value::Null),
        "requeueAfter": v.get("requeueAfter").cloned().unwrap_or(Value::Null),
        "refused": v.get("refused").cloned().unwrap_or(Value::Null),
        "error": v.get("error").cloned().unwrap_or(Value::Null),
    })
}

/// `(action, target)` of each action: the object's namespace for apply and delete, the reason for events.
fn summary(v: &Value) -> Vec<(String, String)> {
    let text = |v: &Value, p: &str| v.pointer(p).and_then(Value::as_str).unwrap_or_default().to_string();
    v["actions"]
        .as_array()
        .map(|actions| {
            actions
                .iter()
                .map(|a| {
                    let what = text(a, "/action");
                    let target = match what.as_str() {
                        "apply" | "create" => text(a, "/object/metadata/namespace"),
                        "delete" => text(a, "/key/namespace"),
                        "event" => text(a, "/reason"),
                        _ => String::new(),
                    };
                    (what, target)
                })
                .collect()
        })
        .unwrap_or_default()
}

#[test]
fn rust_typescript_and_python_builds_give_identical_outcomes() -> Result<()> {
    let bin = wasmloop()?;
    let builds = builds()?;
    for s in SCENARIOS {
        let mut first: Option<(&str, Value)> = None;
        for (lang, wasm) in &builds {
            let out = reconcile(&bin, wasm, s)?;
            ensure!(out.get("error").is_none() && out.get("refused").is_none(), "{lang} {} {:?}: {out}", s.key, s.files);
            let got = outcome(&out);
            match &first {
                None => {
                    let want: Vec<(String, String)> = s.actions.iter().map(|(a, t)| (a.to_string(), t.to_string())).collect();
                    ensure!(summary(&out) == want, "{lang} {} {:?}: expected {want:?}, got {}", s.key, s.files, out["actions"]);
                    ensure!(
                        out.get("requeueAfter").and_then(Value::as_str) == s.requeue,
                        "{lang} {} {:?}: requeue {:?}, expected {:?}",
                        s.key,
                        s.files,
                        out.get("requeueAfter"),
                        s.requeue
                    );
                    first = Some((lang, got));
                }
                Some((first_lang, want)) => ensure!(
                    &got == want,
                    "{lang} and {first_lang} differ on {} {:?}:\n{lang}: {got:#}\n{first_lang}: {want:#}",
                    s.key,
                    s.files
                ),
            }
        }
        eprintln!("{} {:?}: identical in {} builds: {:?}", s.key, s.files, builds.len(), s.actions);
    }
    Ok(())
}

#[test]
fn the_three_builds_declare_the_same_metadata() -> Result<()> {
    let bin = wasmloop()?;
    let mut seen: Option<String> = None;
    for (lang, wasm) in builds()? {
        let out = Command::new(&bin).arg("inspect").arg(&wasm).output()?;
        let text = String::from_utf8(out.stdout)?;
        ensure!(out.status.success(), "inspect {lang}: {text}\n{}", String::from_utf8_lossy(&out.stderr));
        // The description up to its exports, without what differs by build (size, digest, compile time).
        let metadata: String = text
            .lines()
            .take_while(|l| !l.starts_with("exports:"))
            .filter(|l| !["size:", "digest:", "compiled:"].iter().any(|p| l.starts_with(p)))
            .collect::<Vec<_>>()
            .join("\n");
        ensure!(metadata.contains("reconciles: v1/Namespace") && metadata.contains("config-profile"), "{lang}: {text}");
        match &seen {
            None => seen = Some(metadata),
            Some(first) => ensure!(*first == metadata, "{lang} declares other metadata:\n{metadata}\nvs\n{first}"),
        }
    }
    Ok(())
}

/// End to end against the test control plane: each build in turn, loaded by a plugin manager
/// from `wasmloop pack`'s ConfigMaps (the Python component split over several payloads), converges
/// the same Namespaces: a ConfigMap per labelled Namespace with the profile and the count of its
/// members, deleted when the label goes. Profiles carry the language so the three runs do not
/// count each other's Namespaces; the ConfigMaps, read back with the language taken out, must be
/// the same for the three.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_three_builds_converge_the_same_namespaces_against_the_api_server() -> Result<()> {
    use std::time::Duration;

    use k8s_openapi::api::core::v1::{ConfigMap, Namespace};
    use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
    use wasmloop::hotload::{LoadEvent, PluginManager, PluginManagerConfig, PluginMetrics, pack};
    use wasmloop::plugin::PluginEngine;
    use wasmloop_tests::{Host, TestNamespace, apply_configmap, eventually, init_tracing};

    const WAIT: Duration = Duration::from_secs(120);
    init_tracing();
    let host = Host::new().await?;
    let manifest = std::fs::read_to_string(workspace_root().join("deploy/plugins/namespace-config.plugin.yaml"))?;
    let namespaces = Api::<Namespace>::all(host.client.clone());
    let mut seen: Option<(String, Value)> = None;
    for (lang, wasm) in builds()? {
        let plugins = TestNamespace::create(&host.client, &format!("poly-plugins-{lang}")).await?;
        let precompiled = tempfile::tempdir()?;
        let start = |host: &Host| {
            let (shared, executor) = (host.shared(), host.executor.clone());
            let (precompiled, namespace) = (precompiled.path().to_path_buf(), plugins.name.clone());
            async move {
                let engine = tokio::task::spawn_blocking(PluginEngine::new).await??;
                anyhow::Ok(
                    PluginManager::start(
                        engine,
                        shared,
                        executor,
                        PluginMetrics::unregistered(),
                        PluginManagerConfig {
                            precompiled_dir: Some(precompiled),
                            shutdown_grace: Duration::from_secs(10),
                            ..PluginManagerConfig::new(Some(namespace))
                        },
                    )
                    .await?,
                )
            }
        };
        let manager = start(&host).await?;
        let mut events = manager.events();
        let bytes = std::fs::read(&wasm)?;
        let packed = pack::pack_referenced(pack::PackInput {
            wasm: &bytes,
            path: &wasm.display().to_string(),
            manifest: manifest.clone(),
            name: "namespace-config".into(),
            namespace: Some(plugins.name.clone()),
        })?;
        for cm in packed.config_maps() {
            apply_configmap(&host.client, &plugins.name, cm.clone()).await?;
        }
        let started = std::time::Instant::now();
        tokio::time::timeout(WAIT, async {
            loop {
                match events.recv().await {
                    Ok(LoadEvent::Loaded { .. }) => return Ok(()),
                    Ok(LoadEvent::Rejected { error, .. }) => anyhow::bail!("{lang}: refused: {error}"),
                    Ok(_) | Err(tokio::sync::broadcast::error::RecvError::Lagged(_)) => continue,
                    Err(e) => anyhow::bail!("{e}"),
                }
            }
        })
        .await
        .with_context(|| format!("{lang}: waiting for the plugin to load"))??;
        eprintln!(
            "polyglot: {lang}: loaded from {} payload ConfigMap(s) in {:.1} s",
            packed.payloads.len(),
            started.elapsed().as_secs_f64()
        );

        // Three Namespaces: two of one profile, one of another.
        let (gold, silver) = (format!("gold-{lang}"), format!("silver-{lang}"));
        let names: Vec<String> = ["a", "b", "c"].iter().map(|s| format!("poly-{lang}-{s}")).collect();
        for (name, profile) in names.iter().zip([&gold, &gold, &silver]) {
            let ns: Namespace =
                serde_json::from_value(serde_json::json!({"metadata": {"name": name, "labels": {"wasmloop.dev/config": profile}}}))?;
            namespaces.create(&PostParams::default(), &ns).await?;
        }
        let read = |ns: String| {
            let api = Api::<ConfigMap>::namespaced(host.client.clone(), &ns);
            async move { Ok::<_, anyhow::Error>(api.get_opt("wasmloop-config").await?) }
        };
        let mut state = serde_json::Map::new();
        for (i, name) in names.iter().enumerate() {
            let want_count = if i < 2 { "2" } else { "1" };
            let cm = eventually(&format!("{lang}: the ConfigMap in {name}"), WAIT, || {
                let f = read(name.clone());
                async move {
                    Ok(f.await?
                        .filter(|cm| cm.data.as_ref().and_then(|d| d.get("profile-namespaces")).map(String::as_str) == Some(want_count)))
                }
            })
            .await?;
            let data = serde_json::to_string(&cm.data)?.replace(&format!("-{lang}"), "");
            let labels = serde_json::to_string(&cm.metadata.labels)?.replace(&format!("-{lang}"), "");
            state.insert(format!("ns-{i}"), serde_json::json!({"data": data, "labels": labels}));
        }
        // The label goes: the ConfigMap goes.
        namespaces
            .patch(
                &names[1],
                &PatchParams::default(),
                &Patch::Merge(serde_json::json!({"metadata": {"labels": {"wasmloop.dev/config": null}}})),
            )
            .await?;
        eventually(&format!("{lang}: the ConfigMap in {} deleted", names[1]), WAIT, || {
            let f = read(names[1].clone());
            async move { Ok(f.await?.is_none().then_some(())) }
        })
        .await?;
        let state = Value::Object(state);
        match &seen {
            None => seen = Some((lang.to_string(), state)),
            Some((first, want)) => ensure!(*want == state, "{lang} converged otherwise than {first}:\n{state:#}\nvs\n{want:#}"),
        }
        eprintln!("polyglot: {lang}: converged {} Namespaces, label removal deleted its ConfigMap", names.len());
        // A restart (a new process: its own connection and informers) takes the component from
        // the precompiled cache.
        manager.shutdown().await;
        let restarted = std::time::Instant::now();
        let again = Host::new().await?;
        let manager = start(&again).await?;
        let c = Api::<ConfigMap>::namespaced(host.client.clone(), &plugins.name);
        eventually(&format!("{lang}: Loaded again after the restart"), WAIT, || {
            let (c, digest) = (c.clone(), packed.digest.clone());
            async move {
                let cm = c.get("namespace-config").await?;
                let text = cm.metadata.annotations.unwrap_or_default().get("wasmloop.dev/status").cloned().unwrap_or_default();
                let status: Value = serde_json::from_str(&text).unwrap_or(Value::Null);
                let from_cache = status["origin"] == "from the precompiled cache";
                Ok((status["state"] == "Loaded" && status["digest"] == digest.as_str() && from_cache).then_some(()))
            }
        })
        .await?;
        eprintln!(
            "polyglot: {lang}: restarted, loaded from the precompiled cache ({:.1} s to the status)",
            restarted.elapsed().as_secs_f64()
        );
        manager.shutdown().await;
        for name in &names {
            let _ = namespaces.delete(name, &DeleteParams::default()).await;
        }
        plugins.cleanup().await?;
    }
    Ok(())
}
