//! The `webapp` example plugin (plugins/webapp) end to end against a real kube-apiserver: a
//! WebApp gets its Deployment and Service (owned by it) and its status conditions; an edit of
//! the ConfigMap it names reaches it through the index mapping and rolls the Deployment (the
//! latency is measured and printed); a deleted ConfigMap is reported; an invalid WebApp gets the
//! Warning Event and the condition its failure carries, and converges once fixed.
//!
//! No kube-controller-manager runs here, so Deployments never get Pods: `readyReplicas` stays 0
//! and the WebApp stays `Available=False`, `Progressing=True` (what is observable is asserted).

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{ConfigMap, Service};
use k8s_openapi::api::events::v1::Event;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, DeleteParams, DynamicObject, ListParams, Patch, PatchParams, PostParams};
use kube::core::{ApiResource, GroupVersionKind};
use serde_json::{Value, json};
use wasmloop_tests::{Host, TestNamespace, eventually, init_tracing, start_plugin, workspace_root};

const WAIT: Duration = Duration::from_secs(60);
const HASH: &str = "examples.wasmloop.dev/config-hash";

/// The deploy manifest (deploy/plugins/webapp.plugin.yaml), scoped to `ns`.
fn manifest(ns: &str) -> Result<String> {
    let text = std::fs::read_to_string(workspace_root().join("deploy/plugins/webapp.plugin.yaml"))?;
    Ok(format!("namespace: {ns}\n{text}"))
}

/// Install (or update) the WebApp CRD from deploy/crds/webapp.yaml and wait until it is served.
async fn ensure_webapp_crd(host: &Host) -> Result<()> {
    let text = std::fs::read_to_string(workspace_root().join("deploy/crds/webapp.yaml"))?;
    let crd: CustomResourceDefinition = serde_saphyr::from_str(&text)?;
    let api = Api::<CustomResourceDefinition>::all(host.client.clone());
    let name = crd.metadata.name.clone().context("CRD without a name")?;
    api.patch(&name, &PatchParams::apply("wasmloop-tests").force(), &Patch::Apply(&crd)).await?;
    let kind = wasmloop::kinds::KindRef::new("examples.wasmloop.dev/v1alpha1", "WebApp");
    eventually("WebApp in discovery", WAIT, || {
        let resolver = wasmloop::kinds::KindResolver::new(host.client.clone());
        let kind = kind.clone();
        async move { Ok(resolver.resolve(&kind).await.ok().map(|_| ())) }
    })
    .await
}

fn webapps(host: &Host, ns: &str) -> Api<DynamicObject> {
    let gvk = GroupVersionKind::gvk("examples.wasmloop.dev", "v1alpha1", "WebApp");
    Api::namespaced_with(host.client.clone(), ns, &ApiResource::from_gvk_with_plural(&gvk, "webapps"))
}

fn webapp(name: &str, spec: Value) -> Result<DynamicObject> {
    Ok(serde_json::from_value(json!({
        "apiVersion": "examples.wasmloop.dev/v1alpha1", "kind": "WebApp", "metadata": {"name": name}, "spec": spec
    }))?)
}

/// The WebApp's conditions: type → (status, reason).
async fn conditions(apps: &Api<DynamicObject>, name: &str) -> Result<BTreeMap<String, (String, String)>> {
    let app = apps.get(name).await?;
    let list = app.data.pointer("/status/conditions").and_then(Value::as_array).cloned().unwrap_or_default();
    Ok(list
        .iter()
        .map(|c| {
            let s = |f: &str| c.get(f).and_then(Value::as_str).unwrap_or_default().to_string();
            (s("type"), (s("status"), s("reason")))
        })
        .collect())
}

/// Wait until the WebApp's conditions include all of `want` (type, status, reason).
async fn wait_conditions(apps: &Api<DynamicObject>, name: &str, want: &[(&str, &str, &str)]) -> Result<BTreeMap<String, (String, String)>> {
    eventually(&format!("{name}: conditions {want:?}"), WAIT, || async move {
        let got = conditions(apps, name).await?;
        let ok = want.iter().all(|(t, s, r)| got.get(*t).is_some_and(|(gs, gr)| gs == s && gr == r));
        Ok(ok.then_some(got))
    })
    .await
}

fn template_hash(d: &Deployment) -> Option<String> {
    d.spec.as_ref()?.template.metadata.as_ref()?.annotations.as_ref()?.get(HASH).cloned()
}

fn controller_uid(meta: &kube::api::ObjectMeta) -> Option<String> {
    meta.owner_references.iter().flatten().find(|r| r.controller == Some(true)).map(|r| r.uid.clone())
}

/// Patch the ConfigMap's data and time how long until the Deployment's template carries a hash
/// other than `before` (polled every 5 ms); returns the new hash and the latency.
async fn roll(cms: &Api<ConfigMap>, deployments: &Api<Deployment>, greeting: &str, before: &str) -> Result<(String, Duration)> {
    let start = Instant::now();
    cms.patch("web-config", &PatchParams::default(), &Patch::Merge(json!({"data": {"GREETING": greeting}}))).await?;
    loop {
        let hash = template_hash(&deployments.get("web").await?).unwrap_or_default();
        if hash != before {
            return Ok((hash, start.elapsed()));
        }
        anyhow::ensure!(start.elapsed() < Duration::from_secs(10), "the Deployment did not roll within 10 s of the ConfigMap edit");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_webapp_gets_its_children_and_status_and_a_config_map_edit_rolls_its_deployment() -> Result<()> {
    init_tracing();
    let host = Host::new().await?;
    ensure_webapp_crd(&host).await?;
    let ns = TestNamespace::create(&host.client, "webapp").await?;
    let (ctl, wasm) = start_plugin(&host, "webapp", &manifest(&ns.name)?).await?;
    let apps = webapps(&host, &ns.name);
    let cms: Api<ConfigMap> = Api::namespaced(host.client.clone(), &ns.name);
    let deployments: Api<Deployment> = Api::namespaced(host.client.clone(), &ns.name);
    let services: Api<Service> = Api::namespaced(host.client.clone(), &ns.name);

    let cm: ConfigMap = serde_json::from_value(json!({"metadata": {"name": "web-config"}, "data": {"GREETING": "hello"}}))?;
    cms.create(&PostParams::default(), &cm).await?;
    let spec = json!({"image": "registry.invalid/web:1", "replicas": 2, "port": 8080, "configMapName": "web-config"});
    let app = apps.create(&PostParams::default(), &webapp("web", spec)?).await?;
    let uid = app.metadata.uid.clone().context("WebApp uid")?;

    // The children, owned by the WebApp.
    let d = eventually("the Deployment", WAIT, || async { Ok(deployments.get_opt("web").await?) }).await?;
    assert_eq!(controller_uid(&d.metadata), Some(uid.clone()), "the Deployment's controller is the WebApp");
    let dspec = d.spec.clone().context("Deployment spec")?;
    assert_eq!(dspec.replicas, Some(2));
    let container = &dspec.template.spec.as_ref().context("pod spec")?.containers[0];
    assert_eq!(container.image.as_deref(), Some("registry.invalid/web:1"));
    let env_from = container.env_from.clone().unwrap_or_default();
    assert_eq!(env_from[0].config_map_ref.as_ref().map(|r| r.name.as_str()), Some("web-config"));
    let first_hash = template_hash(&d).context("no config hash on the Pod template")?;
    let s = eventually("the Service", WAIT, || async { Ok(services.get_opt("web").await?) }).await?;
    assert_eq!(controller_uid(&s.metadata), Some(uid.clone()), "the Service's controller is the WebApp");
    let port = &s.spec.clone().context("Service spec")?.ports.unwrap_or_default()[0];
    assert_eq!((port.port, port.target_port.clone()), (8080, Some(k8s_openapi::apimachinery::pkg::util::intstr::IntOrString::Int(8080))));

    // Status: no controller runs the Deployment here, so nothing is available and it is rolling out.
    let got = wait_conditions(
        &apps,
        "web",
        &[("Available", "False", "ReplicasUnavailable"), ("Progressing", "True", "RollingOut"), ("ConfigMissing", "False", "Found")],
    )
    .await?;
    eprintln!("webapp: conditions {got:?}");
    let status = apps.get("web").await?.data["status"].clone();
    assert_eq!((status["observedGeneration"].as_i64(), status["readyReplicas"].as_i64()), (Some(1), Some(0)), "{status}");

    // A label edit changes nothing the Pods read: the template stays.
    cms.patch("web-config", &PatchParams::default(), &Patch::Merge(json!({"metadata": {"labels": {"team": "web"}}}))).await?;
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert_eq!(template_hash(&deployments.get("web").await?).as_deref(), Some(first_hash.as_str()));

    // Data edits roll the Deployment: ConfigMap event → index mapping → reconcile → apply.
    let (mut hash, mut latencies) = (first_hash.clone(), Vec::new());
    for i in 0..5 {
        let (new, took) = roll(&cms, &deployments, &format!("hello-{i}"), &hash).await?;
        hash = new;
        latencies.push(took);
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    latencies.sort();
    eprintln!(
        "webapp: ConfigMap edit → Deployment template rolled: min {:?}, median {:?}, max {:?} ({} edits)",
        latencies[0],
        latencies[latencies.len() / 2],
        latencies[latencies.len() - 1],
        latencies.len()
    );
    assert_ne!(hash, first_hash);

    // The ConfigMap goes: reported, and the Deployment is left as it is.
    cms.delete("web-config", &DeleteParams::default()).await?;
    wait_conditions(&apps, "web", &[("ConfigMissing", "True", "NotFound"), ("Progressing", "False", "ConfigMissing")]).await?;
    assert_eq!(template_hash(&deployments.get("web").await?).as_deref(), Some(hash.as_str()), "the Deployment is not touched");

    let st = wasm.stats();
    assert_eq!(st.traps + st.timeouts + st.ooms + st.invalid_outcomes + st.errors, 0, "{st:?}");
    ctl.shutdown(Duration::from_secs(5)).await;
    ns.cleanup().await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_invalid_webapp_gets_the_warning_event_and_condition_its_failure_carries() -> Result<()> {
    init_tracing();
    let host = Host::new().await?;
    ensure_webapp_crd(&host).await?;
    let ns = TestNamespace::create(&host.client, "webapp-bad").await?;
    let (ctl, wasm) = start_plugin(&host, "webapp", &manifest(&ns.name)?).await?;
    let apps = webapps(&host, &ns.name);
    apps.create(&PostParams::default(), &webapp("bad", json!({"image": "registry.invalid/web:1", "port": 70000}))?).await?;

    // The failure's actions are executed: the condition ...
    wait_conditions(&apps, "bad", &[("Progressing", "False", "InvalidSpec")]).await?;
    // ... and the Warning Event about the WebApp.
    let events: Api<Event> = Api::namespaced(host.client.clone(), &ns.name);
    let event = eventually("the InvalidSpec Warning Event", WAIT, || async {
        let list = events.list(&ListParams::default()).await?.items;
        Ok(list
            .into_iter()
            .find(|e| e.reason.as_deref() == Some("InvalidSpec") && e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some("bad")))
    })
    .await?;
    assert_eq!(event.type_.as_deref(), Some("Warning"));
    assert!(event.note.as_deref().unwrap_or_default().contains("spec.port 70000"), "{:?}", event.note);
    // The error still stands: a permanent error, counted as such, and nothing was created.
    eventually("the permanent error counted", WAIT, || async {
        Ok((host.metrics.reconciles("webapp", "permanent_error") >= 1).then_some(()))
    })
    .await?;
    let deployments: Api<Deployment> = Api::namespaced(host.client.clone(), &ns.name);
    assert!(deployments.get_opt("bad").await?.is_none(), "an invalid WebApp gets no Deployment");

    // Fixed: it converges and the condition moves on.
    apps.patch("bad", &PatchParams::default(), &Patch::Merge(json!({"spec": {"port": 8080}}))).await?;
    eventually("the fixed WebApp's Deployment", WAIT, || async { Ok(deployments.get_opt("bad").await?) }).await?;
    wait_conditions(&apps, "bad", &[("Progressing", "True", "RollingOut")]).await?;
    let st = wasm.stats();
    assert_eq!(st.traps + st.timeouts + st.ooms + st.invalid_outcomes, 0, "{st:?}");
    ctl.shutdown(Duration::from_secs(5)).await;
    ns.cleanup().await
}

/// Offline, `wasmloop reconcile` shows a failure's actions and checks them as the host would:
/// an invalid WebApp prints the error, how it is retried, and the Warning Event and condition
/// the failure carries (admitted: no `refused`).
#[test]
fn an_offline_reconcile_shows_a_failures_actions() -> Result<()> {
    let dir = tempfile::tempdir()?;
    let example = std::fs::read_to_string(workspace_root().join("deploy/examples/webapps.yaml"))?;
    let bad = example.replace("replicas: 2", "replicas: -3").replace("  name: web\n", "  name: web\n  uid: u-web\n");
    std::fs::write(dir.path().join("bad.yaml"), bad)?;
    let out = std::process::Command::new(wasmloop_tests::cluster::host_binary()?)
        .arg("reconcile")
        .arg(wasmloop_tests::plugin_path("webapp")?)
        .args(["--objects".as_ref(), dir.path().join("bad.yaml").as_os_str()])
        .args(["--objects".as_ref(), workspace_root().join("deploy/crds/webapp.yaml").as_os_str()])
        .args(["--key", "examples.wasmloop.dev/v1alpha1/WebApp/shop/web", "--no-precompiled-cache"])
        .output()?;
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(!out.status.success(), "a failed reconcile exits non-zero:\n{text}");
    let doc: Value = serde_saphyr::from_str(&text).with_context(|| format!("parsing the output:\n{text}"))?;
    assert_eq!(doc["error"], "spec.replicas is negative: -3", "{text}");
    assert_eq!(doc["retry"], "when the object changes");
    let verbs: Vec<&str> = doc["actions"].as_array().context("actions")?.iter().filter_map(|a| a["action"].as_str()).collect();
    assert_eq!(verbs, ["event", "updateStatus"], "{text}");
    assert!(doc.get("refused").is_none(), "the failure's actions pass admission: {text}");
    Ok(())
}
