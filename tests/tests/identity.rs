//! A plugin's identity is the host's to decide (issue #46): a manifest cannot make a plugin write
//! as the host's ServiceAccount, as another plugin's account (by its default name, or by naming an
//! account claimed for another plugin), and a canary writes as the candidate's own account. An
//! account that does not exist or carries no claim yet is waited for. With `--all-namespaces`,
//! a tenant namespace cannot take (or make wait) the host's own plugin names. `wasmloop pack
//! --rbac` refuses the manifests the host refuses.
//!
//! The host runs in-process with the test control plane's admin credentials and impersonates
//! plugin accounts, as `wasmloop run` does by default. This binary starts a control plane of its
//! own: the all-namespaces manager must see only this binary's plugin ConfigMaps.

use std::path::PathBuf;
use std::process::Command;
use std::sync::OnceLock;
use std::time::Duration;

use anyhow::{Result, bail, ensure};
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, Patch, PatchParams};
use serde_json::json;
use tokio::sync::broadcast;
use wasmloop::hotload::LoadEvent;
use wasmloop_tests::cluster::{DEPLOY_NS, DEPLOY_SA, apply_objects, converged, create_podset, grant_plugin, host_binary, pods};
use wasmloop_tests::{
    Host, TestNamespace, apply_plugin, ensure_podset_crd, eventually, init_tracing, next_load, plugin_manager as manager, plugin_path,
    workspace_root,
};

const WAIT: Duration = Duration::from_secs(60);

/// One test at a time: the all-namespaces manager would load the others' plugins.
static SERIAL: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// Delete the plugin ConfigMaps of `ns` (so a later all-namespaces manager does not load them).
async fn remove_plugins(client: &kube::Client, ns: &str) -> Result<()> {
    let lp = kube::api::ListParams::default().labels("wasmloop.dev/plugin=true");
    Api::<ConfigMap>::namespaced(client.clone(), ns).delete_collection(&Default::default(), &lp).await?;
    Ok(())
}

/// This binary's control plane (stopped when the binary exits).
fn kubeconfig() -> Result<PathBuf> {
    static DIR: OnceLock<Result<PathBuf, String>> = OnceLock::new();
    let dir = DIR.get_or_init(|| {
        let script = workspace_root().join("scripts/control-plane.sh");
        let out = Command::new(&script).arg("start").output().map_err(|e| e.to_string())?;
        if !out.status.success() {
            return Err(String::from_utf8_lossy(&out.stderr).into_owned());
        }
        let dir = String::from_utf8_lossy(&out.stdout).trim().to_string();
        let pid = std::process::id();
        let reaper = format!("while kill -0 {pid} 2>/dev/null; do sleep 1; done; '{}' stop '{dir}' >/dev/null 2>&1", script.display());
        Command::new("sh").arg("-c").arg(reaper).spawn().map_err(|e| e.to_string())?;
        Ok(PathBuf::from(dir))
    });
    Ok(dir.clone().map_err(|e| anyhow::anyhow!("control-plane.sh start: {e}"))?.join("kubeconfig"))
}

async fn rejected(events: &mut broadcast::Receiver<LoadEvent>, configmap: &str, expect: &str) -> Result<()> {
    match next_load(events, configmap).await? {
        LoadEvent::Rejected { error, .. } => {
            ensure!(error.contains(expect), "{configmap}: expected a refusal saying {expect:?}, got: {error}");
            Ok(())
        }
        other => bail!("{configmap} was not refused: {other:?}"),
    }
}

/// A ServiceAccount `name` in `ns` with `labels`.
async fn service_account(admin: &kube::Client, ns: &str, name: &str, labels: serde_json::Value) -> Result<()> {
    apply_objects(
        admin,
        &[json!({"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": name, "namespace": ns, "labels": labels}})],
    )
    .await
}

/// The echo test plugin's manifest, run as `name`, reconciling ConfigMaps in `work`.
fn echo_manifest(name: &str, work: &str, extra: &str) -> String {
    format!(
        "name: {name}\nplugin: echo\nnamespace: {work}\n{extra}\ngrants:\n  - kinds: [v1/ConfigMap]\n    verbs: [read, update-status]\n"
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_plugin_writes_only_as_an_account_claimed_for_it() -> Result<()> {
    init_tracing();
    let _serial = SERIAL.lock().await;
    let host = Host::with_kubeconfig(&kubeconfig()?).await?;
    let plugins = TestNamespace::create(&host.client, "identity-plugins").await?;
    let work = TestNamespace::create(&host.client, "identity-work").await?;
    let manager = manager(&host, Some(&plugins.name), None, (&plugins.name, "wasmloop")).await?;
    let mut events = manager.events();
    let echo = std::fs::read(plugin_path("echo")?)?;
    let deploy_host = (DEPLOY_NS, DEPLOY_SA);

    // The victim, with the account `wasmloop pack --rbac` makes for it.
    let victim = echo_manifest("victim", &work.name, "");
    grant_plugin(&host.client, &plugins.name, "victim", &victim, deploy_host).await?;
    apply_plugin(&host.client, &plugins.name, "victim", &echo, &victim).await?;
    ensure!(matches!(next_load(&mut events, "victim").await?, LoadEvent::Loaded { .. }), "the victim did not load");

    // The host's own account, even labelled as if it were the plugin's.
    service_account(&host.client, &plugins.name, "wasmloop", json!({"wasmloop.dev/plugin-name": "as-host"})).await?;
    let as_host = echo_manifest("as-host", &work.name, "serviceAccountName: wasmloop");
    apply_plugin(&host.client, &plugins.name, "as-host", &echo, &as_host).await?;
    rejected(&mut events, "as-host", "is the host's own ServiceAccount").await?;

    // Another plugin's default account.
    let as_victim = echo_manifest("as-victim", &work.name, "serviceAccountName: wasmloop-plugin-victim");
    apply_plugin(&host.client, &plugins.name, "as-victim", &echo, &as_victim).await?;
    rejected(&mut events, "as-victim", "default account of another plugin (plugin victim)").await?;

    // An account of another name, claimed for the victim.
    service_account(&host.client, &plugins.name, "victims-bot", json!({"wasmloop.dev/plugin-name": "victim"})).await?;
    let as_bot = echo_manifest("as-bot", &work.name, "serviceAccountName: victims-bot");
    apply_plugin(&host.client, &plugins.name, "as-bot", &echo, &as_bot).await?;
    rejected(&mut events, "as-bot", "is claimed for plugin victim").await?;

    // An account that does not exist yet is waited for, and the plugin loads once it is claimed.
    let late = echo_manifest("late", &work.name, "serviceAccountName: late-bot");
    apply_plugin(&host.client, &plugins.name, "late", &echo, &late).await?;
    match next_load(&mut events, "late").await? {
        LoadEvent::Waiting { reason, .. } => ensure!(reason.contains("does not exist"), "{reason}"),
        other => bail!("a plugin whose account is missing did not wait: {other:?}"),
    }
    service_account(&host.client, &plugins.name, "late-bot", json!({})).await?;
    match next_load(&mut events, "late").await? {
        LoadEvent::Waiting { reason, .. } => {
            ensure!(reason.contains("label serviceaccount late-bot wasmloop.dev/plugin-name=late"), "{reason}");
        }
        other => bail!("a plugin whose account is unclaimed did not wait: {other:?}"),
    }
    grant_plugin(&host.client, &plugins.name, "late", &late, deploy_host).await?;
    ensure!(matches!(next_load(&mut events, "late").await?, LoadEvent::Loaded { .. }), "the claimed account did not let it load");

    // Nothing ran as anyone else: the refused plugins never reconciled (echo would have written a
    // status only the victim and late wrote).
    let cms = Api::<ConfigMap>::namespaced(host.client.clone(), &work.name);
    cms.patch(
        "probe",
        &PatchParams::apply("identity-test"),
        &Patch::Apply(json!({"apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": "probe"}, "data": {"k": "v"}})),
    )
    .await?;
    tokio::time::sleep(Duration::from_secs(2)).await;
    for refused in ["as-host", "as-victim", "as-bot"] {
        ensure!(!manager.loaded().await.iter().any(|(cm, ..)| cm == refused), "{refused} is loaded");
    }

    // `wasmloop pack --rbac` refuses the same manifests.
    let dir = tempfile::tempdir()?;
    for (name, manifest, expect) in [("as-host", &as_host, "the host's own ServiceAccount"), ("as-victim", &as_victim, "plugin victim")] {
        let path = dir.path().join(format!("{name}.yaml"));
        std::fs::write(&path, manifest)?;
        let out = Command::new(host_binary()?)
            .arg("pack")
            .arg(plugin_path("echo")?)
            .arg("--manifest")
            .arg(&path)
            .args(["--namespace", &plugins.name, "--host-service-account", &format!("{}/wasmloop", plugins.name), "--rbac-only"])
            .output()?;
        let stderr = String::from_utf8_lossy(&out.stderr);
        ensure!(!out.status.success() && stderr.contains(expect), "pack --rbac of {name}: {}\n{stderr}", out.status);
    }
    manager.shutdown().await;
    remove_plugins(&host.client, &plugins.name).await
}

/// A canary's writes go out as the candidate's own account: without the RBAC to create Pods it
/// creates none, although the serving version's account could.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_canary_writes_as_the_candidates_own_account() -> Result<()> {
    init_tracing();
    let _serial = SERIAL.lock().await;
    let host = Host::with_kubeconfig(&kubeconfig()?).await?;
    ensure_podset_crd(&host.client).await?;
    let plugins = TestNamespace::create(&host.client, "canary-identity").await?;
    let work = TestNamespace::create(&host.client, "canary-identity-work").await?;
    let manager = manager(&host, Some(&plugins.name), None, (&plugins.name, "wasmloop")).await?;
    let mut events = manager.events();
    let podset = std::fs::read(plugin_path("podset")?)?;
    let grants = "grants:\n  - kinds: [\"wasmloop.dev/v1alpha1/PodSet\"]\n    verbs: [read, update-status, event]\n  - kinds: [\"v1/Pod\"]\n    verbs: [read, create, delete, patch]\n";
    let serving = format!("name: podset\nnamespace: {}\n{grants}", work.name);
    grant_plugin(&host.client, &plugins.name, "podset", &serving, (DEPLOY_NS, DEPLOY_SA)).await?;
    apply_plugin(&host.client, &plugins.name, "podset", &podset, &serving).await?;
    ensure!(matches!(next_load(&mut events, "podset").await?, LoadEvent::Loaded { .. }));

    // The candidate's manifest grants Pod creates (the host's own check passes), but its
    // account's RBAC only reads.
    let candidate = format!("shadowOf: podset\ncanary: {{shards: [0]}}\n{grants}");
    let reads_only = "shadowOf: podset\ngrants:\n  - kinds: [\"wasmloop.dev/v1alpha1/PodSet\", \"v1/Pod\"]\n    verbs: [read]\n";
    grant_plugin(&host.client, &plugins.name, "podset-next", reads_only, (DEPLOY_NS, DEPLOY_SA)).await?;
    apply_plugin(&host.client, &plugins.name, "podset-next", &podset, &candidate).await?;
    ensure!(matches!(next_load(&mut events, "podset-next").await?, LoadEvent::Loaded { .. }), "the canary did not load");

    create_podset(&host.client, &work.name, "web", 2).await?;
    eventually("the canary's creates to be refused by the API server", WAIT, || async {
        Ok((host.metrics.actions("podset", "create", "error") > 0).then_some(()))
    })
    .await?;
    ensure!(pods(&host.client, &work.name).await?.is_empty(), "the canary created Pods without the RBAC to");
    // Without the canary, the serving version (whose account may create Pods) converges it.
    Api::<ConfigMap>::namespaced(host.client.clone(), &plugins.name).delete("podset-next", &Default::default()).await?;
    converged(&host.client, &work.name, &[("web".to_string(), 2)].into()).await?;
    manager.shutdown().await;
    remove_plugins(&host.client, &plugins.name).await
}

/// With all namespaces, a tenant's plugin of the same name runs beside the host's own, as
/// `<name>.<namespace>`: neither waits for the other.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tenant_namespace_cannot_take_the_hosts_plugin_names() -> Result<()> {
    init_tracing();
    let _serial = SERIAL.lock().await;
    let host = Host::with_kubeconfig(&kubeconfig()?).await?;
    let home = TestNamespace::create(&host.client, "home").await?;
    let tenant = TestNamespace::create(&host.client, "tenant").await?;
    let work = TestNamespace::create(&host.client, "names-work").await?;
    let echo = std::fs::read(plugin_path("echo")?)?;
    // The tenant's ConfigMap first: it must not hold the name against the host's own.
    let manifest = format!("name: echo\nnamespace: {}\ngrants:\n  - kinds: [v1/ConfigMap]\n    verbs: [read, update-status]\n", work.name);
    for ns in [&tenant.name, &home.name] {
        grant_plugin(&host.client, ns, "echo", &manifest, (DEPLOY_NS, DEPLOY_SA)).await?;
    }
    apply_plugin(&host.client, &tenant.name, "echo", &echo, &manifest).await?;
    let manager = manager(&host, None, Some(&home.name), (DEPLOY_NS, DEPLOY_SA)).await?;
    apply_plugin(&host.client, &home.name, "echo", &echo, &manifest).await?;
    let loaded = eventually("both plugins to load", WAIT, || async {
        let mut loaded: Vec<String> = manager.loaded().await.into_iter().map(|(_, plugin, _)| plugin).collect();
        loaded.sort();
        Ok((loaded.len() == 2).then_some(loaded))
    })
    .await?;
    ensure!(loaded == ["echo".to_string(), format!("echo.{}", tenant.name)], "{loaded:?}");
    manager.shutdown().await;
    remove_plugins(&host.client, &tenant.name).await?;
    remove_plugins(&host.client, &home.name).await
}
