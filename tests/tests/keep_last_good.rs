//! Keep-last-good through faults (issue #54): podset v2 serving, a corrupt v3 applied and
//! refused, then — each time with v3 still pending — kube-apiserver killed and restarted (three
//! times: CRD discovery is briefly incomplete after a restart), the PodSet CRD deleted and
//! re-created, the host itself restarted (a new host serves the last good version the old one
//! recorded on the ConfigMap), and v2's payload ConfigMap deleted under it. After each, v2 serves,
//! reconciles PodSets, and the status annotation says so (and never says a version serves while
//! none does).
//!
//! This binary starts a control plane of its own: the API server is killed and the CRD deleted.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use anyhow::{Context, Result, ensure};
use k8s_openapi::api::core::v1::ConfigMap;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::Client;
use kube::api::{Api, DeleteParams};
use serde_json::Value;
use wasmloop_tests::cluster::*;
use wasmloop_tests::{TestNamespace, apply_plugin_referenced, ensure_podset_crd, eventually, init_tracing, plugin_path, workspace_root};

struct OwnControlPlane(PathBuf);

impl OwnControlPlane {
    fn start() -> Result<Self> {
        let out = script().arg("start").output().context("control-plane.sh start")?;
        ensure!(out.status.success(), "control-plane.sh start: {}", String::from_utf8_lossy(&out.stderr));
        Ok(Self(PathBuf::from(String::from_utf8(out.stdout)?.trim())))
    }

    fn restart_apiserver(&self) -> Result<()> {
        for verb in ["kill", "restart"] {
            let out = script().arg(verb).arg(&self.0).arg("apiserver").output()?;
            ensure!(out.status.success(), "control-plane.sh {verb} apiserver: {}", String::from_utf8_lossy(&out.stderr));
        }
        Ok(())
    }
}

impl Drop for OwnControlPlane {
    fn drop(&mut self) {
        let _ = script().arg("stop").arg(&self.0).output();
    }
}

fn script() -> Command {
    Command::new(workspace_root().join("scripts/control-plane.sh"))
}

/// The plugin ConfigMap's `wasmloop.dev/status` JSON (`null` before the first).
async fn status(admin: &Client, ns: &str, name: &str) -> Result<Value> {
    let cm = Api::<ConfigMap>::namespaced(admin.clone(), ns).get(name).await?;
    let text = cm.metadata.annotations.unwrap_or_default().get("wasmloop.dev/status").cloned().unwrap_or_else(|| "null".into());
    Ok(serde_json::from_str(&text)?)
}

/// Wait until the status says v3 is refused while `podset 0.1.0` (v2) serves.
async fn refused_while_v2_serves(admin: &Client, ns: &str, what: &str) -> Result<Value> {
    eventually(&format!("{what}: Rejected, still serving podset 0.1.0"), Duration::from_secs(90), || async {
        let s = status(admin, ns, "podset").await?;
        Ok((s["state"] == "Rejected" && s["serving"] == "podset 0.1.0").then_some(s))
    })
    .await
}

/// A new PodSet `name` of `replicas` is reconciled (so something serves, whatever the status says).
async fn reconciles(admin: &Client, ns: &str, name: &str, replicas: usize) -> Result<()> {
    create_podset(admin, ns, name, replicas as i64).await?;
    converged(admin, ns, &[(name.to_string(), replicas)].into()).await.with_context(|| format!("PodSet {name} not reconciled"))
}

async fn start_host(kubeconfig: &Path, dir: &Path, name: &str, plugins: &str) -> Result<HostProcess> {
    let args = ["--plugin-namespace", plugins, "--rediscovery-interval", "1s", "--kind-gone-after", "3s"];
    let host = HostProcess::start(name, kubeconfig, dir, &args).await?;
    eventually("the host to be ready", Duration::from_secs(60), || async { Ok((host.get("/readyz").await?.0 == 200).then_some(())) })
        .await?;
    Ok(host)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_last_good_version_keeps_serving_through_faults_with_a_refused_version_pending() -> Result<()> {
    init_tracing();
    let cp = OwnControlPlane::start()?;
    let kc = cp.0.join("kubeconfig");
    let (admin, _) = wasmloop::client::build(Some(kc.to_str().context("kubeconfig path")?)).await?;
    ensure_podset_crd(&admin).await?;
    let ns = TestNamespace::create(&admin, "last-good").await?;
    let manifest = format!(
        "namespace: {}\ngrants:\n  - kinds: [\"wasmloop.dev/v1alpha1/PodSet\"]\n    verbs: [read, update-status, event]\n  - kinds: [\"v1/Pod\"]\n    verbs: [read, create, delete, patch]\n",
        ns.name
    );
    let plugins = plugin_namespace_for(&admin, &ns.name).await?;
    grant_plugin(&admin, &plugins, "podset", &manifest, (DEPLOY_NS, DEPLOY_SA)).await?;
    let v2 = std::fs::read(plugin_path("podset")?)?;
    apply_plugin_referenced(&admin, &plugins, "podset", &v2, &manifest).await?;
    let dir = tempfile::tempdir()?;
    let mut host = start_host(&kc, dir.path(), "last-good-a", &plugins).await?;
    eventually("v2 loaded", Duration::from_secs(60), || async {
        Ok((status(&admin, &plugins, "podset").await?["state"] == "Loaded").then_some(()))
    })
    .await?;
    reconciles(&admin, &ns.name, "before", 2).await?;

    // v3: not a component at all. Refused; v2 keeps serving.
    apply_plugin_referenced(&admin, &plugins, "podset", b"\0asm\x0d\0\x01\0 corrupt", &manifest).await?;
    refused_while_v2_serves(&admin, &plugins, "v3 applied").await?;

    // 1. The API server restarts, three times (discovery may briefly lack the CRD's kind).
    for round in 0..3 {
        cp.restart_apiserver()?;
        eventually("the API server to serve again", Duration::from_secs(60), || async {
            Ok(podsets(&admin, &ns.name).list(&Default::default()).await.ok().map(|_| ()))
        })
        .await?;
        reconciles(&admin, &ns.name, &format!("restart-{round}"), 1).await?;
        let s = refused_while_v2_serves(&admin, &plugins, "after the API server restart").await?;
        eprintln!("keep-last-good: API server restart {round}: v2 serves, status {s}");
    }
    ensure!(host.alive(), "the host exited:\n{}", host.log_tail(30));

    // 2. The CRD deleted (PodSets with it), then re-created: v2 is stopped, not forgotten, and
    //    starts again by itself; v3 stays refused.
    let crds = Api::<CustomResourceDefinition>::all(admin.clone());
    crds.delete("podsets.wasmloop.dev", &DeleteParams::default()).await?;
    let stopped = eventually("v2 stopped while PodSet is not served", Duration::from_secs(60), || async {
        let s = status(&admin, &plugins, "podset").await?;
        Ok((s["stopped"] == "podset 0.1.0").then_some(s))
    })
    .await?;
    ensure!(stopped.get("serving").is_none(), "the status claims a version serves while none runs: {stopped}");
    ensure_podset_crd(&admin).await?;
    refused_while_v2_serves(&admin, &plugins, "the CRD re-created").await?;
    reconciles(&admin, &ns.name, "after-crd", 2).await?;

    // 3. The host restarts: the new one serves v2, recorded on the ConfigMap, while v3 is pending.
    host.child.kill()?;
    host.wait_exit(Duration::from_secs(5)).await?;
    let host = start_host(&kc, dir.path(), "last-good-b", &plugins).await?;
    let annotations =
        || async { Api::<ConfigMap>::namespaced(admin.clone(), &plugins).get("podset").await.map(|c| c.metadata.annotations) };
    refused_while_v2_serves(&admin, &plugins, "a new host")
        .await
        .with_context(|| format!("the new host's log:\n{}", host.log_tail(40)))
        .with_context(|| format!("annotations: {:?}", futures::executor::block_on(annotations()).ok()))?;
    reconciles(&admin, &ns.name, "after-host-restart", 1).await?;

    // 4. v2's payload ConfigMap deleted under it: v2 keeps serving.
    let payloads = Api::<ConfigMap>::namespaced(admin.clone(), &plugins);
    let digest = wasmloop::hotload::source::sha256(&[&v2]);
    let v2_payload = format!("podset-wasm-{}", &digest[7..19]);
    payloads.delete(&v2_payload, &DeleteParams::default()).await.with_context(|| format!("deleting {v2_payload}"))?;
    tokio::time::sleep(Duration::from_secs(2)).await;
    reconciles(&admin, &ns.name, "after-payload-deleted", 2).await?;
    let s = status(&admin, &plugins, "podset").await?;
    ensure!(s["serving"] == "podset 0.1.0", "v2 does not serve after its payload was deleted: {s}");
    drop(host);
    ns.cleanup().await
}
