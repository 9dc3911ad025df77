//! Install, upgrade and uninstall a CRD-based plugin as an operator does, against the real
//! API server, with the real `wasmloop run` and the control plane's `kubectl` (v1.20):
//!
//! 1. plugin and CRD in one kustomization (`kubectl apply -k`, the plugin listed first): the
//!    plugin loads once the kind is served, and reconciles;
//! 2. the CRD deleted under the running plugin: it goes back to Waiting (status, a Normal Event
//!    naming the kind), and starts again by itself when the CRD is re-created;
//! 3. an upgrade while the CRD gains a version (one `kubectl apply -k` of both): the new version
//!    waits for its kind if it must, the old one serves meanwhile, then the new one serves;
//! 4. `kubectl delete -k`: the plugin stops and nothing it was loaded from is left;
//! 5. the other order: the plugin ConfigMaps first, alone, waiting (reported), then the CRD;
//!    uninstalled by `kubectl delete -k` of a kustomization listing the CRD first.
//!
//! Each step asserts the status annotations, the Events, and in the end that the host logged no
//! ERROR and recorded no `PluginRejected`. The status is waited for with the documented
//! commands: `kubectl wait --for=jsonpath=...` when a kubectl ≥ 1.23 is on PATH (it is run too,
//! and said so), and always the fallback loop for older kubectl, with the project's v1.20.
//!
//! Needs `cargo build -p wasmloop` and `scripts/build-test-plugins.sh` (widget, widget_v2).

use std::path::PathBuf;
use std::process::Command;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail, ensure};
use k8s_openapi::api::core::v1::ConfigMap;
use k8s_openapi::api::events::v1::Event;
use kube::api::{Api, DynamicObject, ListParams, PostParams};
use kube::core::{ApiResource, GroupVersionKind};
use serde_json::{Value, json};
use wasmloop_tests::cluster::{HostProcess, host_binary, kubectl_path};
use wasmloop_tests::{TestNamespace, client, eventually, init_tracing, kubeconfig, plugin_path};

const WAIT: Duration = Duration::from_secs(60);
const GROUP: &str = "lifecycle.wasmloop.dev";
const CRD_NAME: &str = "widgets.lifecycle.wasmloop.dev";

/// The Widget CRD serving `versions` (the last one stored).
fn crd(versions: &[&str]) -> String {
    let mut out = format!(
        "apiVersion: apiextensions.k8s.io/v1\nkind: CustomResourceDefinition\nmetadata:\n  name: {CRD_NAME}\nspec:\n  group: {GROUP}\n  \
         scope: Namespaced\n  names: {{plural: widgets, singular: widget, kind: Widget, listKind: WidgetList}}\n  versions:\n"
    );
    for (i, v) in versions.iter().enumerate() {
        let storage = i + 1 == versions.len();
        out.push_str(&format!(
            "    - name: {v}\n      served: true\n      storage: {storage}\n      schema:\n        openAPIV3Schema:\n          type: object\n          \
             x-kubernetes-preserve-unknown-fields: true\n"
        ));
    }
    out
}

/// The admin's manifest: read the Widgets of `version`, read and create ConfigMaps, in `ns` (not
/// the plugin namespace, whose ConfigMaps no plugin may write).
fn manifest(ns: &str, version: &str) -> String {
    format!(
        "name: widget\nnamespace: {ns}\ngrants:\n  - kinds: [\"{GROUP}/{version}/Widget\"]\n    verbs: [read]\n  \
         - kinds: [\"v1/ConfigMap\"]\n    verbs: [read, create]\n"
    )
}

/// A directory of kustomizations and the commands an operator types.
struct Operator {
    dir: PathBuf,
    kubeconfig: PathBuf,
    /// The plugin namespace (the host's `--plugin-namespace`).
    ns: String,
    /// Where the Widgets and their ConfigMaps are.
    apps: String,
    /// A kubectl ≥ 1.23 on PATH, for `kubectl wait --for=jsonpath` (the project's is 1.20).
    new_kubectl: Option<PathBuf>,
}

impl Operator {
    /// `wasmloop pack` of `wasm` with the manifest for `version`, into `<name>/plugin.yaml`; a
    /// kustomization `<name>/kustomization.yaml` listing `resources` (`plugin.yaml`, `crd.yaml`)
    /// in that order, with `crd.yaml` serving `versions`.
    fn kustomization(&self, name: &str, wasm: &str, version: &str, versions: &[&str], resources: &[&str]) -> Result<PathBuf> {
        let dir = self.dir.join(name);
        std::fs::create_dir_all(&dir)?;
        std::fs::write(dir.join("widget.plugin.yaml"), manifest(&self.apps, version))?;
        std::fs::write(dir.join("crd.yaml"), crd(versions))?;
        let out = Command::new(host_binary()?)
            .arg("pack")
            .arg(plugin_path(wasm)?)
            .args(["--manifest", "widget.plugin.yaml", "--namespace", &self.ns, "--rbac", "-o", "plugin.yaml"])
            .current_dir(&dir)
            .output()?;
        ensure!(out.status.success(), "wasmloop pack: {}", String::from_utf8_lossy(&out.stderr));
        let list: Vec<String> = resources.iter().map(|r| format!("  - {r}\n")).collect();
        std::fs::write(dir.join("kustomization.yaml"), format!("resources:\n{}", list.concat()))?;
        Ok(dir)
    }

    fn kubectl(&self, args: &[&str]) -> Result<String> {
        let out = Command::new(kubectl_path()?).arg("--kubeconfig").arg(&self.kubeconfig).args(args).current_dir(&self.dir).output()?;
        ensure!(
            out.status.success(),
            "kubectl {}: {}{}",
            args.join(" "),
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    }

    /// The documented wait for the plugin ConfigMap's state: the loop for kubectl before 1.23
    /// (with the project's kubectl), then, if there is one, `kubectl wait --for=jsonpath`.
    fn wait_state(&self, state: &str) -> Result<()> {
        let fallback = format!(
            "timeout 60 sh -c 'until [ \"$(kubectl -n {ns} get configmap widget -o jsonpath=\"{{.metadata.annotations.wasmloop\\.dev/state}}\")\" = {state} ]; \
             do sleep 1; done'",
            ns = self.ns
        );
        let kubectl_dir = kubectl_path()?.parent().context("kubectl path")?.to_path_buf();
        let path =
            std::env::join_paths(std::iter::once(kubectl_dir).chain(std::env::split_paths(&std::env::var_os("PATH").unwrap_or_default())))?;
        let out = Command::new("bash").arg("-c").arg(&fallback).env("PATH", path).env("KUBECONFIG", &self.kubeconfig).output()?;
        ensure!(out.status.success(), "`{fallback}` failed: {}", String::from_utf8_lossy(&out.stderr));
        if let Some(kubectl) = &self.new_kubectl {
            let jsonpath = format!("--for=jsonpath={{.metadata.annotations.wasmloop\\.dev/state}}={state}");
            let out = Command::new(kubectl)
                .arg("--kubeconfig")
                .arg(&self.kubeconfig)
                .args(["-n", &self.ns, "wait", "configmap/widget", &jsonpath, "--timeout=60s"])
                .output()?;
            ensure!(out.status.success(), "kubectl wait {jsonpath}: {}", String::from_utf8_lossy(&out.stderr));
        }
        Ok(())
    }
}

/// A kubectl on PATH whose client is 1.23 or newer, if any.
fn new_kubectl() -> Option<PathBuf> {
    let out = Command::new("kubectl").args(["version", "--client", "-o", "json"]).output().ok()?;
    let v: Value = serde_json::from_slice(&out.stdout).ok()?;
    let minor: u32 = v["clientVersion"]["minor"].as_str()?.trim_end_matches('+').parse().ok()?;
    (v["clientVersion"]["major"] == "1" && minor >= 23).then(|| PathBuf::from("kubectl"))
}

/// The plugin ConfigMap's status JSON and its state and digest annotations.
async fn status(cms: &Api<ConfigMap>) -> Result<Option<(Value, String, String)>> {
    let Some(cm) = cms.get_opt("widget").await? else { return Ok(None) };
    let a = cm.metadata.annotations.unwrap_or_default();
    let json = serde_json::from_str(a.get("wasmloop.dev/status").map_or("null", String::as_str))?;
    Ok(Some((json, a.get("wasmloop.dev/state").cloned().unwrap_or_default(), a.get("wasmloop.dev/digest").cloned().unwrap_or_default())))
}

/// Wait until the status says `state` (and, if given, `reason`), and return it.
async fn status_is(cms: &Api<ConfigMap>, state: &str, reason: Option<&str>) -> Result<Value> {
    eventually(&format!("status {state} {reason:?}"), WAIT, || async {
        Ok(status(cms).await?.and_then(|(json, s, _)| (s == state && reason.is_none_or(|r| json["reason"] == r)).then_some(json)))
    })
    .await
}

/// The Events about the plugin ConfigMap: (type, reason, note).
async fn plugin_events(events: &Api<Event>) -> Result<Vec<(String, String, String)>> {
    Ok(events
        .list(&ListParams::default())
        .await?
        .items
        .into_iter()
        .filter(|e| e.regarding.as_ref().is_some_and(|r| r.kind.as_deref() == Some("ConfigMap") && r.name.as_deref() == Some("widget")))
        .map(|e| (e.type_.unwrap_or_default(), e.reason.unwrap_or_default(), e.note.unwrap_or_default()))
        .collect())
}

/// Wait for an Event with `reason` whose note contains `text`.
async fn event_seen(events: &Api<Event>, reason: &str, text: &str) -> Result<(String, String, String)> {
    eventually(&format!("an Event {reason} saying {text:?}"), WAIT, || async {
        Ok(plugin_events(events).await?.into_iter().find(|(_, r, note)| r == reason && note.contains(text)))
    })
    .await
}

fn widgets(client: &kube::Client, ns: &str, version: &str) -> Api<DynamicObject> {
    let ar = ApiResource::from_gvk_with_plural(&GroupVersionKind::gvk(GROUP, version, "Widget"), "widgets");
    Api::namespaced_with(client.clone(), ns, &ar)
}

/// Create Widget `name` through `version`, and wait for its ConfigMap, read through `version`
/// by the plugin version `by`.
async fn reconciled(client: &kube::Client, ns: &str, version: &str, name: &str, by: &str) -> Result<()> {
    let w: DynamicObject = serde_json::from_value(json!({
        "apiVersion": format!("{GROUP}/{version}"), "kind": "Widget",
        "metadata": {"name": name}, "spec": {"message": format!("hello {name}")}
    }))?;
    // Right after the CRD (re)appears, discovery may serve it a moment before its storage does.
    eventually(&format!("Widget {name} created"), WAIT, || async {
        Ok(widgets(client, ns, version).create(&PostParams::default(), &w).await.ok())
    })
    .await?;
    let cms = Api::<ConfigMap>::namespaced(client.clone(), ns);
    let child =
        eventually(&format!("ConfigMap widget-{name}"), WAIT, || async { Ok(cms.get_opt(&format!("widget-{name}")).await?) }).await?;
    let data = child.data.unwrap_or_default();
    ensure!(data.get("message").map(String::as_str) == Some(&format!("hello {name}")), "{data:?}");
    ensure!(
        data.get("readAs").map(String::as_str) == Some(&format!("{GROUP}/{version}")) && data.get("by").map(String::as_str) == Some(by),
        "{data:?}"
    );
    Ok(())
}

/// No plugin or payload ConfigMap is left in `ns`, and the host logged that the plugin was
/// removed (so a status write that re-created its ConfigMap would have happened by now).
async fn nothing_left(client: &kube::Client, ns: &str, host: &HostProcess, removals: usize) -> Result<()> {
    eventually("the host to log the plugin's removal", WAIT, || async {
        let removed = host.log_lines().iter().filter(|l| l["message"] == "plugin removed").count();
        Ok((removed >= removals).then_some(()))
    })
    .await?;
    let cms = Api::<ConfigMap>::namespaced(client.clone(), ns);
    for label in ["wasmloop.dev/plugin", "wasmloop.dev/plugin-payload"] {
        let left: Vec<String> =
            cms.list(&ListParams::default().labels(label)).await?.items.into_iter().filter_map(|c| c.metadata.name).collect();
        ensure!(left.is_empty(), "ConfigMaps labelled {label} left behind: {left:?}");
    }
    ensure!(cms.get_opt("widget").await?.is_none(), "the plugin ConfigMap came back");
    Ok(())
}

/// The host logged no ERROR and no refusal, and recorded no PluginRejected Event.
async fn no_errors(host: &HostProcess, events: &Api<Event>) -> Result<()> {
    let errors: Vec<String> = host
        .log_lines()
        .into_iter()
        .filter(|l| l["level"] == "ERROR" || l["message"] == "plugin rejected")
        .map(|l| l.to_string())
        .collect();
    ensure!(errors.is_empty(), "the host logged errors or refusals:\n{}", errors.join("\n"));
    let rejected: Vec<_> = plugin_events(events).await?.into_iter().filter(|(_, r, _)| r == "PluginRejected").collect();
    ensure!(rejected.is_empty(), "PluginRejected Events: {rejected:?}");
    Ok(())
}

async fn crd_gone(client: &kube::Client) -> Result<()> {
    use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
    let crds = Api::<CustomResourceDefinition>::all(client.clone());
    eventually("the Widget CRD to be gone", WAIT, || async { Ok(crds.get_opt(CRD_NAME).await?.is_none().then_some(())) }).await
}

fn lap(clock: &mut Instant, what: &str) {
    eprintln!("lifecycle: {:>6.1} s  {what}", clock.elapsed().as_secs_f64());
    *clock = Instant::now();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_crd_based_plugin_installs_survives_its_crd_upgrades_and_uninstalls_cleanly() -> Result<()> {
    init_tracing();
    let (admin, _) = client().await?;
    let ns = TestNamespace::create(&admin, "lifecycle").await?;
    let apps = TestNamespace::create(&admin, "lifecycle-apps").await?;
    let tmp = tempfile::tempdir()?;
    let op = Operator {
        dir: tmp.path().to_path_buf(),
        kubeconfig: kubeconfig()?,
        ns: ns.name.clone(),
        apps: apps.name.clone(),
        new_kubectl: new_kubectl(),
    };
    match &op.new_kubectl {
        Some(k) => {
            eprintln!("lifecycle: `kubectl wait --for=jsonpath` with {} (≥ 1.23), and the fallback loop with kubectl 1.20", k.display());
        }
        None => eprintln!("lifecycle: no kubectl ≥ 1.23 on PATH: only the fallback loop (kubectl 1.20) is run"),
    }
    let host = HostProcess::start("lifecycle", &op.kubeconfig, tmp.path(), &["--plugin-namespace", &ns.name]).await?;
    let (cms, events) = (Api::<ConfigMap>::namespaced(admin.clone(), &ns.name), Api::<Event>::namespaced(admin.clone(), &ns.name));
    let mut clock = Instant::now();
    let run = async {
        // 1. Plugin and CRD in one kustomization, the plugin listed first.
        let v1 = op.kustomization("v1", "widget", "v1", &["v1"], &["plugin.yaml", "crd.yaml"])?;
        op.kubectl(&["apply", "-k", v1.to_str().context("path")?])?;
        op.wait_state("Loaded")?;
        let loaded = status_is(&cms, "Loaded", None).await?;
        ensure!(loaded["version"] == "0.1.0" && loaded["plugin"] == "widget", "{loaded}");
        let (_, _, digest) = status(&cms).await?.context("the plugin ConfigMap")?;
        ensure!(digest == loaded["digest"], "the digest annotation {digest} is the loaded one: {loaded}");
        event_seen(&events, "PluginLoaded", "widget 0.1.0").await?;
        reconciled(&admin, &apps.name, "v1", "one", "0.1.0").await?;
        lap(&mut clock, "plugin + CRD in one `kubectl apply -k`: Loaded, reconciling");

        // 2. The CRD deleted under the running plugin, then re-created.
        op.kubectl(&["delete", "-f", v1.join("crd.yaml").to_str().context("path")?])?;
        crd_gone(&admin).await?;
        let waiting = status_is(&cms, "Waiting", Some("KindNotServed")).await?;
        ensure!(waiting["waitingFor"] == format!("{GROUP}/v1/Widget"), "{waiting}");
        ensure!(waiting["serving"].is_null(), "nothing serves while the kind is gone: {waiting}");
        let (kind, _, note) = event_seen(&events, "PluginWaiting", &format!("{GROUP}/v1/Widget")).await?;
        ensure!(kind == "Normal", "a wait is a Normal Event: {note}");
        lap(&mut clock, "CRD deleted: Waiting (KindNotServed), Normal Event PluginWaiting");
        op.kubectl(&["create", "-f", v1.join("crd.yaml").to_str().context("path")?])?;
        op.wait_state("Loaded")?;
        reconciled(&admin, &apps.name, "v1", "two", "0.1.0").await?;
        lap(&mut clock, "CRD re-created: Loaded again by itself, reconciling");

        // 3. Upgrade while the CRD gains a version: plugin 0.2.0 reads v2.
        let v2 = op.kustomization("v2", "widget_v2", "v2", &["v1", "v2"], &["plugin.yaml", "crd.yaml"])?;
        op.kubectl(&["apply", "-k", v2.to_str().context("path")?])?;
        let upgraded = eventually("0.2.0 Loaded", WAIT, || async {
            Ok(status(&cms).await?.and_then(|(json, s, _)| (s == "Loaded" && json["version"] == "0.2.0").then_some(json)))
        })
        .await?;
        let packed = std::fs::read_to_string(v2.join("plugin.yaml"))?;
        ensure!(upgraded["digest"].as_str().is_some_and(|d| packed.contains(d)), "the loaded digest is the packed v2's: {upgraded}");
        event_seen(&events, "PluginLoaded", "widget 0.2.0").await?;
        reconciled(&admin, &apps.name, "v2", "three", "0.2.0").await?;
        lap(&mut clock, "upgrade with the CRD's new version in one `kubectl apply -k`: 0.2.0 Loaded, reading v2");

        // 4. Uninstall: `kubectl delete -k`, then the older payload the upgrade left (as documented).
        op.kubectl(&["delete", "-k", v2.to_str().context("path")?])?;
        op.kubectl(&["-n", &ns.name, "delete", "configmap", "-l", "wasmloop.dev/plugin-payload=true"])?;
        crd_gone(&admin).await?;
        nothing_left(&admin, &ns.name, &host, 1).await?;
        lap(&mut clock, "`kubectl delete -k`: removed, nothing left");

        // 5. The other order: the plugin alone first (its kind is not served: it waits, and says
        //    so), then the CRD; uninstalled with a kustomization listing the CRD first.
        let late = op.kustomization("late", "widget", "v1", &["v1"], &["crd.yaml", "plugin.yaml"])?;
        op.kubectl(&["apply", "-f", late.join("plugin.yaml").to_str().context("path")?])?;
        op.wait_state("Waiting")?;
        let waiting = status_is(&cms, "Waiting", Some("KindNotServed")).await?;
        ensure!(waiting["version"] == "0.1.0" && waiting["digest"].is_string(), "the waiting version is named: {waiting}");
        lap(&mut clock, "plugin before its CRD: Waiting (KindNotServed)");
        op.kubectl(&["apply", "-f", late.join("crd.yaml").to_str().context("path")?])?;
        op.wait_state("Loaded")?;
        reconciled(&admin, &apps.name, "v1", "four", "0.1.0").await?;
        lap(&mut clock, "CRD applied after: Loaded by itself, reconciling");
        op.kubectl(&["delete", "-k", late.to_str().context("path")?])?;
        crd_gone(&admin).await?;
        nothing_left(&admin, &ns.name, &host, 2).await?;
        lap(&mut clock, "`kubectl delete -k` (CRD listed first): removed, nothing left");
        no_errors(&host, &events).await
    };
    if let Err(e) = run.await {
        bail!("{e:#}\n---- the host's log (last 60 lines) ----\n{}", host.log_tail(60));
    }
    drop(host);
    apps.cleanup().await?;
    ns.cleanup().await
}

#[test]
fn the_crd_serves_its_versions_and_stores_the_last() -> Result<()> {
    let text = crd(&["v1", "v2"]);
    let v: Value = serde_saphyr::from_str(&text)?;
    let versions = v["spec"]["versions"].as_array().context("versions")?;
    let served: Vec<(&str, bool)> = versions.iter().map(|v| (v["name"].as_str().unwrap_or_default(), v["storage"] == true)).collect();
    assert_eq!(served, [("v1", false), ("v2", true)]);
    let m = wasmloop::hotload::PluginManifest::parse(&manifest("ns", "v2"), "widget")?;
    assert_eq!(m.name, "widget");
    Ok(())
}
