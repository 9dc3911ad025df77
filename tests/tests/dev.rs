//! `wasmloop dev` on the guide's plugin, against the test control plane, run as the guide's
//! section 7 says: `wasmloop dev` in the crate's directory, `KUBECONFIG` set. The crate is the
//! one `wasmloop new welcome` generates (tests/tests/guide.rs proves it is the guide's, file for
//! file), in a temporary directory outside the workspace. This proves:
//!
//! - the first version is built, packed, applied and loaded, and reconciles Namespaces labelled
//!   before it started (from the informer's initial list) and after;
//! - an edit of `src/lib.rs` (another ConfigMap name and message) is seen in the cluster: the new
//!   version reconciles every labelled Namespace, and `wasmloop dev` says how long after the
//!   save (the test measures the same from its side: the write → the new ConfigMap seen);
//! - a failed build is shown (cargo's error, with file and line) and the loop goes on, with the
//!   last good version still reconciling new Namespaces;
//! - a manifest that does not parse is named and never applied;
//! - a version the host refuses (the manifest drops a read the plugin declares) is shown with
//!   the host's reason, the plugin ConfigMap says `Rejected`, the last good version keeps
//!   reconciling, and fixing the manifest loads the new code;
//! - SIGTERM stops it with exit status 0.
//!
//! Builds share `target/new-plugin` with tests/tests/new.rs (the dependencies are compiled once);
//! the first, cold build of a fresh clone takes a minute or two.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail, ensure};
use k8s_openapi::api::core::v1::{ConfigMap, Namespace};
use kube::Client;
use kube::api::{Api, PostParams};
use serde_json::{Value, json};
use wasmloop_tests::cluster::host_binary;
use wasmloop_tests::{client, eventually, init_tracing, kubeconfig, workspace_root};

/// The first build of a fresh clone compiles the crate's dependencies (release, LTO).
const COLD_BUILD: Duration = Duration::from_secs(900);
const WAIT: Duration = Duration::from_secs(90);
/// The session's namespace for the package `welcome` (`wasmloop-dev-<package>`).
const DEV_NS: &str = "wasmloop-dev-welcome";
const STATUS_ANNOTATION: &str = "wasmloop.dev/status";

/// `wasmloop dev` as a child process, its stderr in a file; SIGKILLed on drop if still running.
struct Dev {
    child: Child,
    log: PathBuf,
    /// Lines before this one were matched already.
    seen: usize,
}

impl Dev {
    fn start(krate: &Path, log: PathBuf, args: &[&std::ffi::OsStr]) -> Result<Self> {
        let mut cmd = Command::new(host_binary()?);
        // What a developer's shell has: none of the test runner's cargo or wasmloop variables.
        for (k, _) in std::env::vars_os() {
            let k = k.to_string_lossy();
            if (k.starts_with("CARGO_") && k != "CARGO_HOME")
                || k.starts_with("WASMLOOP_")
                || ["CARGO", "RUSTFLAGS", "RUST_LOG"].contains(&k.as_ref())
            {
                cmd.env_remove(k.as_ref());
            }
        }
        let child = cmd
            .arg("dev")
            .args(args)
            .current_dir(krate)
            .env("KUBECONFIG", kubeconfig()?)
            .env("CARGO_TARGET_DIR", workspace_root().join("target/new-plugin"))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log)?)
            .spawn()
            .context("starting wasmloop dev")?;
        Ok(Self { child, log, seen: 0 })
    }

    fn lines(&self) -> Vec<String> {
        std::fs::read_to_string(&self.log).unwrap_or_default().lines().map(str::to_string).collect()
    }

    fn tail(&self, n: usize) -> String {
        let lines = self.lines();
        lines[lines.len().saturating_sub(n)..].join("\n")
    }

    /// The first line after those already matched that contains `text`, and the lines after it
    /// that the same log entry spans (cargo's messages follow a `build failed` line).
    async fn wait_for(&mut self, text: &str, timeout: Duration) -> Result<String> {
        let deadline = Instant::now() + timeout;
        loop {
            let lines = self.lines();
            if let Some(i) = lines.iter().skip(self.seen).position(|l| l.contains(text)) {
                let at = self.seen + i;
                self.seen = at + 1;
                let entry: Vec<&str> = std::iter::once(lines[at].as_str())
                    .chain(lines[at + 1..].iter().take_while(|l| !l.starts_with("20")).map(String::as_str))
                    .collect();
                return Ok(entry.join("\n"));
            }
            if let Some(status) = self.child.try_wait()? {
                bail!("wasmloop dev exited ({status}) before logging {text:?}; its log:\n{}", self.tail(40));
            }
            if Instant::now() > deadline {
                bail!("wasmloop dev logged no {text:?} in {timeout:?}; its log (last 40 lines):\n{}", self.tail(40));
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
}

impl Drop for Dev {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The guide's plugin, as `wasmloop new welcome` generates it, in `<tmp>/welcome`.
fn guide_crate(tmp: &Path) -> Result<PathBuf> {
    let dir = tmp.join("welcome");
    let sdk = workspace_root().join("guest-sdk");
    let out = Command::new(host_binary()?).args(["new", "welcome", "--dir"]).arg(&dir).arg("--sdk").arg(&sdk).output()?;
    ensure!(out.status.success(), "wasmloop new: {}", String::from_utf8_lossy(&out.stderr));
    Ok(dir)
}

/// `src/lib.rs` with the ConfigMap named `name` and its message ending in `suffix`.
fn edited(original: &str, name: &str, suffix: &str) -> Result<String> {
    let replacements = [
        ("\"welcome\")?", format!("\"{name}\")?")),
        ("{\"name\": \"welcome\", \"namespace\"", format!("{{\"name\": \"{name}\", \"namespace\"")),
        ("Welcome to {name}!", format!("Welcome to {{name}}{suffix}!")),
    ];
    let mut text = original.to_string();
    for (from, to) in replacements {
        ensure!(text.contains(from), "the generated src/lib.rs no longer contains {from:?}: update this test with the template");
        text = text.replace(from, &to);
    }
    Ok(text)
}

/// A fresh Namespace labelled `welcome=true`.
async fn labelled_namespace(client: &Client, prefix: &str) -> Result<String> {
    let name = format!("{prefix}-{:x}", std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH)?.as_micros() & 0xffffff);
    let ns: Namespace = serde_json::from_value(json!({"metadata": {"name": name, "labels": {"welcome": "true"}}}))?;
    Api::<Namespace>::all(client.clone()).create(&PostParams::default(), &ns).await?;
    Ok(name)
}

/// ConfigMap `ns/name` exists with `message`; when it was first seen.
async fn config_map(client: &Client, ns: &str, name: &str, message: &str) -> Result<Instant> {
    let cms = Api::<ConfigMap>::namespaced(client.clone(), ns);
    eventually(&format!("ConfigMap {ns}/{name} with message {message:?}"), WAIT, || async {
        let Some(cm) = cms.get_opt(name).await? else { return Ok(None) };
        let got = cm.data.unwrap_or_default().get("message").cloned();
        ensure!(got.as_deref() == Some(message), "ConfigMap {ns}/{name} says {got:?}, not {message:?}");
        Ok(Some(Instant::now()))
    })
    .await
}

/// The state in the plugin ConfigMap's status annotation (`Loaded`, `Rejected`).
async fn plugin_state(client: &Client) -> Result<Value> {
    let cm = Api::<ConfigMap>::namespaced(client.clone(), DEV_NS).get("welcome").await?;
    let status = cm.metadata.annotations.unwrap_or_default().get(STATUS_ANNOTATION).cloned().unwrap_or_default();
    Ok(serde_json::from_str(&status).unwrap_or(Value::Null))
}

/// `X` of `version N reconciling X s after the save (...)`.
fn seconds_after_save(line: &str) -> Result<f64> {
    let rest = line.split(" reconciling ").nth(1).with_context(|| format!("no figure in {line:?}"))?;
    Ok(rest.split(' ').next().unwrap_or_default().parse()?)
}

/// (N, M) of `compiled N functions, reused M compiled before (...)`.
fn compiled_functions(line: &str) -> Option<(u64, u64)> {
    let rest = line.split("compiled ").nth(1)?;
    let (compiled, rest) = rest.split_once(" functions, reused ")?;
    let (reused, _) = rest.split_once(' ')?;
    Some((compiled.parse().ok()?, reused.parse().ok()?))
}

/// Write `files` (path relative to the crate, contents) at once; the instant before the writes.
fn save(krate: &Path, files: &[(&str, &str)]) -> Result<Instant> {
    let at = Instant::now();
    for (path, text) in files {
        std::fs::write(krate.join(path), text)?;
    }
    Ok(at)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_save_reaches_the_cluster_and_a_bad_one_never_replaces_a_good_one() -> Result<()> {
    init_tracing();
    let (client, _) = client().await?;
    let tmp = tempfile::tempdir()?;
    let krate = guide_crate(tmp.path())?;
    let lib = std::fs::read_to_string(krate.join("src/lib.rs"))?;
    let manifest = std::fs::read_to_string(krate.join("welcome.plugin.yaml"))?;
    // Labelled before the host starts: it comes from the informer's initial list, whose items
    // the API server sends without apiVersion and kind (the cache must fill them in).
    let before = labelled_namespace(&client, "dev-before").await?;
    let mut dev = Dev::start(&krate, tmp.path().join("dev.log"), &[])?;
    let result = run(&client, &krate, &lib, &manifest, &before, &mut dev).await;
    result.map_err(|e| anyhow::anyhow!("{e:#}\n---- wasmloop dev's log (last 60 lines) ----\n{}", dev.tail(60)))
}

async fn run(client: &Client, krate: &Path, lib: &str, manifest: &str, before: &str, dev: &mut Dev) -> Result<()> {
    // Version 1: built cold, loaded, then it reconciles a labelled Namespace.
    let started = Instant::now();
    dev.wait_for("version 1 ", COLD_BUILD).await?;
    eprintln!(
        "dev: version 1 running {:.1} s after the start (the first build compiles the dependencies)",
        started.elapsed().as_secs_f64()
    );
    config_map(client, before, "welcome", &format!("Welcome to {before}!")).await?;
    let a = labelled_namespace(client, "dev-a").await?;
    config_map(client, &a, "welcome", &format!("Welcome to {a}!")).await?;
    dev.wait_for(&format!("creating the welcome ConfigMap in {a}"), WAIT).await?;
    dev.wait_for(&format!("v1/Namespace/{a}: create v1/ConfigMap/{a}/welcome, event v1/Namespace/{a}"), WAIT).await?;

    // Version 2: an edit, seen in the cluster.
    let v2 = edited(lib, "welcome-v2", ", v2")?;
    let saved = save(krate, &[("src/lib.rs", &v2)])?;
    let seen = config_map(client, &a, "welcome-v2", &format!("Welcome to {a}, v2!")).await?;
    let line = dev.wait_for("version 2 reconciling", WAIT).await?;
    eprintln!(
        "dev: save → version 2 reconciling {:.2} s (wasmloop dev's figure); save → its ConfigMap seen by the test {:.2} s",
        seconds_after_save(&line)?,
        (seen - saved).as_secs_f64()
    );
    ensure!(plugin_state(client).await?["state"] == "Loaded", "version 2 is not reported Loaded");
    // Version 2 compiled only what the edit changed: most functions came from version 1's compile.
    let (compiled, reused) = dev.lines().iter().rev().find_map(|l| compiled_functions(l)).context("no `compiled N functions` line")?;
    eprintln!("dev: version 2 compiled {compiled} functions, reused {reused} from version 1");
    ensure!(reused > compiled, "version 2 reused {reused} compiled functions and compiled {compiled}: the function cache is not used");

    // A failed build: shown, and version 2 keeps reconciling.
    save(krate, &[("src/lib.rs", &format!("{v2}\nfn broken( {{\n"))])?;
    let failed = dev.wait_for("build failed", WAIT).await?;
    ensure!(failed.contains("src/lib.rs:") && failed.contains("error"), "the failed build does not show cargo's error:\n{failed}");
    let b = labelled_namespace(client, "dev-b").await?;
    config_map(client, &b, "welcome-v2", &format!("Welcome to {b}, v2!")).await?;

    // A manifest that does not parse: named, nothing applied, version 2 keeps running.
    save(krate, &[("welcome.plugin.yaml", "grants: [\n"), ("src/lib.rs", &v2)])?;
    let unparsed = dev.wait_for("welcome.plugin.yaml: ", WAIT).await?;
    ensure!(unparsed.contains("the last good version keeps running"), "the manifest error is not shown as one: {unparsed}");
    ensure!(plugin_state(client).await?["state"] == "Loaded", "a manifest that does not parse reached the host");

    // A refused version (new code, but the manifest drops the ConfigMap read the plugin
    // declares): shown with the host's reason; version 2 keeps reconciling.
    let no_read = manifest.replace("verbs: [read, create]", "verbs: [create]");
    ensure!(no_read != *manifest, "the generated manifest no longer grants ConfigMaps `[read, create]`: update this test");
    let v3 = edited(lib, "welcome-v3", ", v3")?;
    save(krate, &[("welcome.plugin.yaml", &no_read), ("src/lib.rs", &v3)])?;
    let refused = dev.wait_for("the host refused this version", WAIT).await?;
    ensure!(refused.contains("no read grant for it"), "the refusal does not give the host's reason: {refused}");
    eventually("the plugin ConfigMap to say Rejected", WAIT, || async {
        Ok((plugin_state(client).await?["state"] == "Rejected").then_some(()))
    })
    .await?;
    let c = labelled_namespace(client, "dev-c").await?;
    config_map(client, &c, "welcome-v2", &format!("Welcome to {c}, v2!")).await?;
    let cms = Api::<ConfigMap>::namespaced(client.clone(), &c);
    ensure!(cms.get_opt("welcome-v3").await?.is_none(), "the refused version ran: {c}/welcome-v3 exists");

    // The manifest fixed: version 3 (the new code) loads and reconciles every labelled Namespace.
    let saved = save(krate, &[("welcome.plugin.yaml", manifest)])?;
    let mut seen = saved;
    for ns in [before, a.as_str(), b.as_str(), c.as_str()] {
        seen = seen.max(config_map(client, ns, "welcome-v3", &format!("Welcome to {ns}, v3!")).await?);
    }
    let line = dev.wait_for("version 3 reconciling", WAIT).await?;
    eprintln!(
        "dev: save → version 3 reconciling {:.2} s (wasmloop dev's figure); save → its ConfigMaps in 4 Namespaces seen {:.2} s",
        seconds_after_save(&line)?,
        (seen - saved).as_secs_f64()
    );
    ensure!(plugin_state(client).await?["state"] == "Loaded", "version 3 is not reported Loaded");

    stop(dev).await
}

/// SIGTERM: a clean stop, with exit status 0, within 30 s.
async fn stop(dev: &mut Dev) -> Result<()> {
    let st = Command::new("kill").arg("-TERM").arg(dev.child.id().to_string()).status()?;
    ensure!(st.success(), "kill -TERM failed");
    let deadline = Instant::now() + Duration::from_secs(30);
    let status = loop {
        if let Some(status) = dev.child.try_wait()? {
            break status;
        }
        ensure!(Instant::now() < deadline, "wasmloop dev still running 30 s after SIGTERM");
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    ensure!(status.success(), "wasmloop dev exited with {status} on SIGTERM");
    dev.wait_for("stopping", Duration::from_secs(1)).await?;
    Ok(())
}

/// `--crd` with a current controller-gen CRD (the Kubebuilder tutorial's CronJob): the test
/// control plane (v1.20.2) refuses it as written, and `wasmloop dev` says why and what to do;
/// with `--local` the CRD is applied adapted to the local v1.20 server (what changed is logged)
/// and the plugin loads. Fails without the explanation (an unexplained apply error) or the
/// adaptation (the same refusal on the local server).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_crd_the_old_api_server_refuses_is_explained_and_applied_adapted_with_local() -> Result<()> {
    init_tracing();
    let tmp = tempfile::tempdir()?;
    let krate = guide_crate(tmp.path())?;
    let crd = workspace_root().join("plugins/cronjob/config/crd.yaml");
    let mut dev = Dev::start(&krate, tmp.path().join("dev.log"), &["--crd".as_ref(), crd.as_os_str()])?;
    let refused = dev.wait_for("the API server refused CRD cronjobs.batch.tutorial.kubebuilder.io", COLD_BUILD).await?;
    ensure!(refused.contains("kubernetes/kubernetes#99804") && refused.contains("wasmloop dev --local --crd"), "{refused}");
    ensure!(refused.contains("the last good version keeps running"), "{refused}");
    stop(&mut dev).await?;

    let mut local = Dev::start(&krate, tmp.path().join("dev-local.log"), &["--local".as_ref(), "--crd".as_ref(), crd.as_os_str()])?;
    let result = async {
        let adapted =
            local.wait_for("CRD cronjobs.batch.tutorial.kubebuilder.io: adapted for the local v1.20 API server", COLD_BUILD).await?;
        eprintln!("dev --local --crd: {adapted}");
        local.wait_for("version 1 ", WAIT).await?;
        ensure!(!local.lines().iter().any(|l| l.contains("refused CRD")), "refused on the local server:\n{}", local.tail(40));
        Ok(())
    }
    .await;
    // Stopped cleanly either way: SIGTERM stops the local control plane it started.
    let stopped = stop(&mut local).await;
    result
        .map_err(|e: anyhow::Error| anyhow::anyhow!("{e:#}\n---- wasmloop dev --local's log (last 60 lines) ----\n{}", local.tail(60)))?;
    stopped
}

#[test]
fn the_figure_is_read_from_the_dev_line() -> Result<()> {
    let line = "2026-12-01T20:59:18.672056Z  INFO wasmloop::dev: version 2 reconciling 0.76 s after the save (build 0.40 s, …)";
    assert_eq!(seconds_after_save(line)?, 0.76);
    assert!(seconds_after_save("version 2 loaded 1.0 s after the save").is_err());
    Ok(())
}
