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
    let plugins = plugin_namespace_for(&admin, &ns.name).await?;
    grant_plugin(&admin, &plugins, "podset", &manifest, (DEPLOY_NS, DEPLOY_SA)).await?;
    apply_plugin(&admin, &plugins, "podset", &std::fs::read(plugin_path("podset")?)?, &manifest).await?;
    let dir = tempfile::tempdir()?;
    let args = ["--plugin-namespace", plugins.as_str()];
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

/// PodSets created, scaled and deleted throughout while a proxy between the host and the API
/// server delays requests, answers 429 (with `Retry-After`), 500, 503 and 409 on status writes,
/// cuts watches and resets lists mid-body: every PodSet converges exactly, every throttled
/// request was retried only after its `Retry-After`, and the host's own counters account for
/// every injected answer.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn podsets_converge_exactly_through_injected_api_faults() -> Result<()> {
    use std::sync::atomic::Ordering::Relaxed;
    use wasmloop_tests::fault_proxy::{FaultProxy, Faults};
    init_tracing();
    let (admin, _) = wasmloop_tests::client().await?;
    ensure_podset_crd(&admin).await?;
    let ns = TestNamespace::create(&admin, "faults-proxy").await?;
    let manifest = format!(
        "namespace: {}\nconcurrency: 4\ngrants:\n  - kinds: [\"wasmloop.dev/v1alpha1/PodSet\"]\n    verbs: [read, update-status, event]\n  - kinds: [\"v1/Pod\"]\n    verbs: [read, create, delete, patch]\n",
        ns.name
    );
    let plugins = plugin_namespace_for(&admin, &ns.name).await?;
    grant_plugin(&admin, &plugins, "podset", &manifest, (DEPLOY_NS, DEPLOY_SA)).await?;
    apply_plugin(&admin, &plugins, "podset", &std::fs::read(plugin_path("podset")?)?, &manifest).await?;
    let dir = tempfile::tempdir()?;
    let proxy = FaultProxy::start(&wasmloop_tests::kubeconfig()?, dir.path(), Faults::default()).await?;
    // Armed from the start: the host's discovery, first lists and watches go through the faults too.
    proxy.arm(true);
    let mut host = HostProcess::start("faults-proxy", &proxy.kubeconfig, dir.path(), &["--plugin-namespace", plugins.as_str()]).await?;
    eventually("the host to be ready", Duration::from_secs(60), || async { Ok((host.get("/readyz").await?.0 == 200).then_some(())) })
        .await?;

    // Churn: waves of creates, scales and deletes while the faults are on.
    let mut want = BTreeMap::new();
    for wave in 0..4 {
        create_podsets(&admin, &ns.name, &format!("w{wave}"), 5, 2, &mut want).await?;
        if wave > 0 {
            let prev = format!("w{}", wave - 1);
            for i in 0..2 {
                let name = format!("{prev}-{i}");
                podsets(&admin, &ns.name).patch(&name, &PatchParams::default(), &Patch::Merge(json!({"spec": {"replicas": 4}}))).await?;
                want.insert(name, 4);
            }
            let gone = format!("{prev}-4");
            podsets(&admin, &ns.name).delete(&gone, &Default::default()).await?;
            want.remove(&gone);
            // No garbage collector runs here: remove its Pods as kube-controller-manager's would.
            let pods = kube::Api::<k8s_openapi::api::core::v1::Pod>::namespaced(admin.clone(), &ns.name);
            pods.delete_collection(&Default::default(), &kube::api::ListParams::default().labels(&format!("app={gone}"))).await?;
        }
        tokio::time::sleep(Duration::from_secs(2)).await;
    }
    let took = converged_exactly(&admin, &ns.name, &want, "injected API faults").await?;
    proxy.arm(false);
    ensure!(host.alive(), "the host exited under injected faults:\n{}", host.log_tail(30));
    // Settle: no request of the faulty phase still in flight when the counters are compared.
    tokio::time::sleep(Duration::from_secs(3)).await;
    converged_exactly(&admin, &ns.name, &want, "disarming the proxy").await?;

    let i = &proxy.injected;
    let after = host.metrics().await?;
    let answered = |code: &str| after.sum("wasmloop_api_responses_total", &[("code", code)]);
    let sent = |verb: &str| after.sum("wasmloop_api_requests_total", &[("verb", verb)]);
    eprintln!(
        "faults: {} requests through the proxy; injected: {} delays, {} × 429, {} × 500, {} × 503, {} × 409 on status, {} watch cuts, \
         {} resets mid-body; Retry-After honoured {} times, violated {}; the host counted 429: {}, 500: {}, 503: {}, 409: {}, \
         watches: {}, lists: {}; converged {:.1}s after the last wave",
        i.requests.load(Relaxed),
        i.delayed.load(Relaxed),
        i.throttled.load(Relaxed),
        i.internal_errors.load(Relaxed),
        i.unavailable.load(Relaxed),
        i.status_conflicts.load(Relaxed),
        i.watch_cuts.load(Relaxed),
        i.resets.load(Relaxed),
        i.retry_after_honoured.load(Relaxed),
        i.retry_after_violations.load(Relaxed),
        answered("429"),
        answered("500"),
        answered("503"),
        answered("409"),
        sent("watch"),
        sent("list"),
        took.as_secs_f64()
    );
    for (what, n) in [
        ("delays", &i.delayed),
        ("429s", &i.throttled),
        ("500s", &i.internal_errors),
        ("503s", &i.unavailable),
        ("409s on status writes", &i.status_conflicts),
        ("watch cuts", &i.watch_cuts),
        ("resets mid-body", &i.resets),
    ] {
        ensure!(n.load(Relaxed) > 0, "no {what} were injected: the test did not exercise them");
    }
    ensure!(i.retry_after_violations.load(Relaxed) == 0, "writes came back before their Retry-After: {:?}", i.violations.lock());
    ensure!(i.retry_after_honoured.load(Relaxed) > 0, "no throttled request was seen again");
    // Every injected answer reached the host's counters (its retries included).
    ensure!(answered("429") == i.throttled.load(Relaxed) as f64, "429: host {} vs injected {}", answered("429"), i.throttled.load(Relaxed));
    ensure!(
        answered("500") >= i.internal_errors.load(Relaxed) as f64,
        "500: host {} vs injected {}",
        answered("500"),
        i.internal_errors.load(Relaxed)
    );
    ensure!(
        answered("503") >= i.unavailable.load(Relaxed) as f64,
        "503: host {} vs injected {}",
        answered("503"),
        i.unavailable.load(Relaxed)
    );
    ensure!(
        answered("409") >= i.status_conflicts.load(Relaxed) as f64,
        "409: host {} vs injected {}",
        answered("409"),
        i.status_conflicts.load(Relaxed)
    );
    ensure!(
        sent("watch") >= i.watch_cuts.load(Relaxed) as f64,
        "every cut watch is watched again: {} watches, {} cuts",
        sent("watch"),
        i.watch_cuts.load(Relaxed)
    );
    ensure!(
        sent("list") >= i.resets.load(Relaxed) as f64,
        "every reset list is listed again: {} lists, {} resets",
        sent("list"),
        i.resets.load(Relaxed)
    );
    drop(host);
    ns.cleanup().await
}
