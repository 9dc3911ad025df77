//! Restarts under load (issue #16): the host reconciling PodSets while its kube-apiserver is
//! killed and restarted, while etcd is killed and restarted, and while the host itself is killed
//! with SIGKILL and started again. Every PodSet converges exactly (its Pods named `<podset>-0..n-1`,
//! no orphans, `status.replicas` right), the host never exits on its own, and the restarted host
//! loads its plugin from the precompiled cache instead of compiling it.
//!
//! This binary starts a control plane of its own (`scripts/control-plane.sh start`, stopped on
//! drop): killing etcd and the apiserver must not disturb the run's shared one.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::Command;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, ensure};
use kube::Client;
use kube::api::{Patch, PatchParams};
use serde_json::json;
use wasmloop_tests::cluster::*;
use wasmloop_tests::{TestNamespace, apply_plugin, ensure_podset_crd, eventually, init_tracing, plugin_path, workspace_root};

/// A control plane of this test's own: etcd and kube-apiserver that may be killed.
struct OwnControlPlane {
    dir: PathBuf,
}

impl OwnControlPlane {
    fn start() -> Result<Self> {
        let out = script().arg("start").output().context("control-plane.sh start")?;
        ensure!(out.status.success(), "control-plane.sh start: {}", String::from_utf8_lossy(&out.stderr));
        Ok(Self { dir: PathBuf::from(String::from_utf8(out.stdout)?.trim()) })
    }

    fn kubeconfig(&self) -> PathBuf {
        self.dir.join("kubeconfig")
    }

    /// `control-plane.sh kill|restart DIR etcd|apiserver`.
    fn run(&self, verb: &str, what: &str) -> Result<()> {
        let out = script().arg(verb).arg(&self.dir).arg(what).output()?;
        ensure!(out.status.success(), "control-plane.sh {verb} {what}: {}", String::from_utf8_lossy(&out.stderr));
        Ok(())
    }
}

impl Drop for OwnControlPlane {
    fn drop(&mut self) {
        let _ = script().arg("stop").arg(&self.dir).output();
    }
}

fn script() -> Command {
    Command::new(workspace_root().join("scripts/control-plane.sh"))
}

/// PodSets `prefix-0..n` of `replicas` each, added to `want`.
async fn create_podsets(
    admin: &Client,
    ns: &str,
    prefix: &str,
    n: usize,
    replicas: usize,
    want: &mut BTreeMap<String, usize>,
) -> Result<()> {
    for i in 0..n {
        let name = format!("{prefix}-{i}");
        create_podset(admin, ns, &name, replicas as i64).await?;
        want.insert(name, replicas);
    }
    Ok(())
}

/// Converged exactly, and no Pod is left without a PodSet.
async fn converged_exactly(admin: &Client, ns: &str, want: &BTreeMap<String, usize>, what: &str) -> Result<Duration> {
    let started = Instant::now();
    converged(admin, ns, want).await.with_context(|| format!("after {what}"))?;
    let orphans = pods_by_podset(admin, ns).await?.remove("").unwrap_or_default();
    ensure!(orphans.is_empty(), "after {what}: Pods owned by no PodSet: {orphans:?}");
    Ok(started.elapsed())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn converges_exactly_through_apiserver_etcd_and_host_restarts() -> Result<()> {
    init_tracing();
    let cp = OwnControlPlane::start()?;
    let kc = cp.kubeconfig();
    let (admin, _) = wasmloop::client::build(Some(kc.to_str().context("kubeconfig path")?)).await?;
    ensure_podset_crd(&admin).await?;
    let ns = TestNamespace::create(&admin, "faults").await?;
    let manifest = format!(
        "namespace: {}\nconcurrency: 2\ngrants:\n  - kinds: [\"wasmloop.dev/v1alpha1/PodSet\"]\n    verbs: [read, update-status, event]\n  - kinds: [\"v1/Pod\"]\n    verbs: [read, create, delete, patch]\n",
        ns.name
    );
    apply_plugin(&admin, &ns.name, "podset", &std::fs::read(plugin_path("podset")?)?, &manifest).await?;
    let dir = tempfile::tempdir()?;
    let args = ["--plugin-namespace", ns.name.as_str()];
    let mut host = HostProcess::start("faults-a", &kc, dir.path(), &args).await?;
    eventually("the host to be ready", Duration::from_secs(60), || async { Ok((host.get("/readyz").await?.0 == 200).then_some(())) })
        .await?;
    let mut want = BTreeMap::new();

    // kube-apiserver killed while PodSets are being created, then started again.
    create_podsets(&admin, &ns.name, "a", 5, 3, &mut want).await?;
    cp.run("kill", "apiserver")?;
    tokio::time::sleep(Duration::from_secs(2)).await;
    cp.run("restart", "apiserver")?;
    create_podsets(&admin, &ns.name, "b", 5, 3, &mut want).await?;
    let took = converged_exactly(&admin, &ns.name, &want, "the apiserver restart").await?;
    eprintln!("faults: apiserver killed and restarted: converged {:.2}s after it served again", took.as_secs_f64());
    ensure!(host.alive(), "the host exited when the apiserver went away:\n{}", host.log_tail(30));

    // etcd killed while PodSets are scaled, then started again (the apiserver stays up).
    for i in 0..5 {
        let name = format!("a-{i}");
        podsets(&admin, &ns.name).patch(&name, &PatchParams::default(), &Patch::Merge(json!({"spec": {"replicas": 5}}))).await?;
        want.insert(name, 5);
    }
    cp.run("kill", "etcd")?;
    tokio::time::sleep(Duration::from_secs(2)).await;
    cp.run("restart", "etcd")?;
    let ready = eventually("the apiserver to serve again after etcd", Duration::from_secs(60), || async {
        Ok(podsets(&admin, &ns.name).list(&Default::default()).await.ok().map(|_| ()))
    });
    ready.await?;
    create_podsets(&admin, &ns.name, "c", 3, 2, &mut want).await?;
    let took = converged_exactly(&admin, &ns.name, &want, "the etcd restart").await?;
    eprintln!("faults: etcd killed and restarted: converged {:.2}s after it served again", took.as_secs_f64());
    ensure!(host.alive(), "the host exited when etcd went away:\n{}", host.log_tail(30));

    // The host itself killed in the middle of new work, then started again.
    create_podsets(&admin, &ns.name, "d", 10, 3, &mut want).await?;
    host.child.kill()?;
    host.wait_exit(Duration::from_secs(5)).await?;
    let restarted = Instant::now();
    let host = HostProcess::start("faults-b", &kc, dir.path(), &args).await?;
    let took = converged_exactly(&admin, &ns.name, &want, "the host's kill -9 and restart").await?;
    eprintln!(
        "faults: host killed with SIGKILL and started again: all {} PodSets converged {:.2}s after the restart",
        want.len(),
        restarted.elapsed().as_secs_f64().max(took.as_secs_f64())
    );
    let m = host.metrics().await?;
    let precompiled = m.sum("wasmloop_plugin_load_seconds_count", &[("origin", "precompiled")]);
    let compiled = m.sum("wasmloop_plugin_load_seconds_count", &[("origin", "compiled")]);
    ensure!(precompiled >= 1.0 && compiled == 0.0, "the restarted host compiled instead of loading the precompiled plugin:\n{}", m.0);
    drop(host);
    ns.cleanup().await
}
