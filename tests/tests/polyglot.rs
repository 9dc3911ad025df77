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
