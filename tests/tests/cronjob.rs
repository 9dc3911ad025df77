//! The Kubebuilder book's CronJob tutorial as a plugin (plugins/cronjob) against a real
//! kube-apiserver (issue #47):
//!
//! - the tutorial's CRD as controller-gen writes it is refused by the local v1.20.2 API server,
//!   and `wasmloop::crds` says why and how to fix it; adapted, it is accepted;
//! - a CronJob's runs fire on schedule (`@every 3s`), as Jobs it controls, with
//!   `status.lastScheduleTime` and `status.active` following them; finished Jobs past its
//!   history limits are pruned (the tutorial's envtest steps);
//! - a run whose Job the API server refuses (an invalid container name) is never reported: the
//!   status written after the create does not happen, and the next reconcile reports
//!   `Degraded` / `JobCreationFailed` with the API server's reason;
//! - a reconcile recorded offline (`wasmloop reconcile --record`, clock readings and all) replays
//!   to the same outcome, its requeue exact to the microsecond.
//!
//! No kube-controller-manager runs here: Jobs never get Pods nor finish by themselves; the test
//! finishes them by writing their status, as the tutorial's test does.

use std::process::Command;
use std::time::Duration;

use anyhow::{Context, Result, ensure};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, DynamicObject, Patch, PatchParams, PostParams};
use kube::core::{ApiResource, GroupVersionKind};
use serde_json::{Value, json};
use wasmloop_tests::cluster::host_binary;
use wasmloop_tests::{Host, TestNamespace, eventually, init_tracing, plugin_path, start_plugin, workspace_root};

const WAIT: Duration = Duration::from_secs(60);
const CRD_NAME: &str = "cronjobs.batch.tutorial.kubebuilder.io";

/// The tutorial's CRD as controller-gen writes it (plugins/cronjob/config/crd.yaml).
fn tutorial_crd() -> Result<Value> {
    let text = std::fs::read_to_string(workspace_root().join("plugins/cronjob/config/crd.yaml"))?;
    Ok(serde_saphyr::from_str(&text)?)
}

/// Install the CRD, adapted for the API server when it refuses it as written (and check that it
/// says why in the words `wasmloop dev` uses), and wait until CronJobs are served.
async fn ensure_crd(host: &Host) -> Result<()> {
    let api = Api::<CustomResourceDefinition>::all(host.client.clone());
    let crd = tutorial_crd()?;
    let apply = |crd: Value| {
        let api = api.clone();
        async move { api.patch(CRD_NAME, &PatchParams::apply("wasmloop-tests").force(), &Patch::Apply(&crd)).await }
    };
    let version = host.client.apiserver_version().await?.git_version;
    if let Err(refused) = apply(crd.clone()).await {
        let why = wasmloop::crds::explain_refusal(&refused.to_string(), Some(&version))
            .with_context(|| format!("the API server {version} refused the tutorial's CRD, unexplained: {refused}"))?;
        ensure!(why.contains("kubernetes/kubernetes#99804") && why.contains("wasmloop dev --local --crd"), "{why}");
        let (adapted, changes) = wasmloop::crds::adapt_for_old_servers(&crd);
        eprintln!("cronjob: {version} refused the tutorial's CRD; adapted: {}", wasmloop::crds::summary(&changes));
        apply(adapted).await.context("the adapted CRD")?;
    }
    let kind = wasmloop::kinds::KindRef::new("batch.tutorial.kubebuilder.io/v1", "CronJob");
    eventually("CronJob in discovery", WAIT, || {
        let resolver = wasmloop::kinds::KindResolver::new(host.client.clone());
        let kind = kind.clone();
        async move { Ok(resolver.resolve(&kind).await.ok().map(|_| ())) }
    })
    .await
}

fn cronjobs(host: &Host, ns: &str) -> Api<DynamicObject> {
    let gvk = GroupVersionKind::gvk("batch.tutorial.kubebuilder.io", "v1", "CronJob");
    Api::namespaced_with(host.client.clone(), ns, &ApiResource::from_gvk_with_plural(&gvk, "cronjobs"))
}

fn cronjob(name: &str, spec: Value) -> Result<DynamicObject> {
    Ok(serde_json::from_value(json!({
        "apiVersion": "batch.tutorial.kubebuilder.io/v1", "kind": "CronJob", "metadata": {"name": name}, "spec": spec,
    }))?)
}

fn job_template(container: &str) -> Value {
    json!({"spec": {"template": {"spec": {"containers": [{"name": container, "image": "registry.invalid/test:1"}],
                                         "restartPolicy": "OnFailure"}}}})
}

/// The manifest (plugins/cronjob/cronjob.plugin.yaml), scoped to `ns`.
fn manifest(ns: &str) -> Result<String> {
    Ok(format!("namespace: {ns}\n{}", std::fs::read_to_string(workspace_root().join("plugins/cronjob/cronjob.plugin.yaml"))?))
}

/// The CronJob's condition of `type_`: (status, reason, message).
fn condition(cron: &DynamicObject, type_: &str) -> Option<(String, String, String)> {
    let list = cron.data.pointer("/status/conditions")?.as_array()?;
    let c = list.iter().find(|c| c["type"] == type_)?;
    let s = |f: &str| c[f].as_str().unwrap_or_default().to_owned();
    Some((s("status"), s("reason"), s("message")))
}

/// Every status the CronJob `name` has from now on, as its watch delivers each write.
async fn watch_statuses(crons: Api<DynamicObject>, name: &str) -> Result<std::sync::Arc<parking_lot::Mutex<Vec<Value>>>> {
    use futures::StreamExt;
    let seen = std::sync::Arc::new(parking_lot::Mutex::new(Vec::new()));
    let params = kube::api::WatchParams::default().fields(&format!("metadata.name={name}"));
    let version = crons.list(&kube::api::ListParams::default()).await?.metadata.resource_version.unwrap_or_default();
    let mut stream = crons.watch(&params, &version).await?.boxed();
    let into = seen.clone();
    tokio::spawn(async move {
        while let Some(Ok(event)) = stream.next().await {
            if let kube::api::WatchEvent::Added(o) | kube::api::WatchEvent::Modified(o) = event {
                into.lock().push(o.data.get("status").cloned().unwrap_or(Value::Null));
            }
        }
    });
    Ok(seen)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn runs_fire_on_schedule_history_is_pruned_and_a_refused_create_is_never_reported() -> Result<()> {
    init_tracing();
    let host = Host::new().await?;
    ensure_crd(&host).await?;
    let ns = TestNamespace::create(&host.client, "cronjob").await?;
    let (_controller, _wasm) = start_plugin(&host, "cronjob", &manifest(&ns.name)?).await?;
    let crons = cronjobs(&host, &ns.name);
    let jobs = Api::<k8s_openapi::api::batch::v1::Job>::namespaced(host.client.clone(), &ns.name);

    // A Job controlled by something else named like the CronJob: the owner-kind index leaves it out.
    let decoy: k8s_openapi::api::batch::v1::Job = serde_json::from_value(json!({
        "metadata": {"name": "decoy", "ownerReferences": [{"apiVersion": "apps/v1", "kind": "Deployment", "name": "every",
                                                             "uid": "d-1", "controller": true}]},
        "spec": job_template("work")["spec"].clone(),
    }))?;
    jobs.create(&PostParams::default(), &decoy).await?;

    // Runs fire on schedule, as Jobs the CronJob controls, and the status follows them.
    let spec = json!({"schedule": "@every 3s", "jobTemplate": job_template("work"), "successfulJobsHistoryLimit": 1});
    let created = crons.create(&PostParams::default(), &cronjob("every", spec)?).await?;
    let uid = created.metadata.uid.clone().context("no uid")?;
    let first = eventually("the first run's Job", WAIT, || async {
        let list = jobs.list(&Default::default()).await?;
        Ok(list.items.into_iter().find(|j| j.metadata.name.as_deref().is_some_and(|n| n.starts_with("every-"))))
    })
    .await?;
    let owner = first.metadata.owner_references.iter().flatten().find(|r| r.controller == Some(true)).context("no controller")?;
    ensure!(owner.uid == uid && owner.kind == "CronJob", "{owner:?}");
    let annotation = "batch.tutorial.kubebuilder.io/scheduled-at";
    let scheduled = first.metadata.annotations.as_ref().and_then(|a| a.get(annotation)).context("no scheduled-at")?.clone();
    let at = scheduled.parse::<k8s_openapi::jiff::Timestamp>().context("scheduled-at is a timestamp")?.as_second();
    let born = created.metadata.creation_timestamp.as_ref().map(|t| t.0.as_second()).context("no creationTimestamp")?;
    ensure!(at == born + 3, "the first run is 3 s after the CronJob's creation: {scheduled}");
    let cron = eventually("status.lastScheduleTime and status.active", WAIT, || async {
        let cron = crons.get("every").await?;
        let active = cron.data.pointer("/status/active").and_then(Value::as_array).map_or(0, Vec::len);
        Ok((cron.data.pointer("/status/lastScheduleTime").is_some() && active >= 1).then_some(cron))
    })
    .await?;
    let active = cron.data.pointer("/status/active").and_then(Value::as_array).cloned().unwrap_or_default();
    ensure!(active.iter().all(|r| r["name"] != "decoy"), "the decoy is not the CronJob's: {active:?}");
    // A second run comes 3 s later (the first is still active: the policy is Allow).
    eventually("a second run", WAIT, || async {
        let list = jobs.list(&Default::default()).await?;
        Ok((list.items.iter().filter(|j| j.metadata.name.as_deref().is_some_and(|n| n.starts_with("every-"))).count() >= 2).then_some(()))
    })
    .await?;

    // History: finish two runs; the older finished one goes (successfulJobsHistoryLimit: 1).
    crons.patch("every", &PatchParams::default(), &Patch::Merge(json!({"spec": {"suspend": true}}))).await?;
    let mut runs: Vec<String> = jobs
        .list(&Default::default())
        .await?
        .items
        .into_iter()
        .filter_map(|j| j.metadata.name)
        .filter(|n| n.starts_with("every-"))
        .collect();
    runs.sort();
    for (i, name) in runs.iter().take(2).enumerate() {
        let start = format!("2026-01-01T00:00:0{i}Z");
        let status = json!({"status": {"startTime": start, "completionTime": start,
            "conditions": [{"type": "Complete", "status": "True", "lastProbeTime": start, "lastTransitionTime": start}]}});
        jobs.patch_status(name, &PatchParams::default(), &Patch::Merge(status)).await?;
    }
    eventually("the older finished run to be pruned", WAIT, || async {
        Ok((jobs.get_opt(&runs[0]).await?.is_none() && jobs.get_opt(&runs[1]).await?.is_some()).then_some(()))
    })
    .await?;
    let suspended = eventually("Available=False Suspended", WAIT, || async {
        let cron = crons.get("every").await?;
        Ok(condition(&cron, "Available").filter(|c| c.1 == "Suspended").map(|_| cron))
    })
    .await?;
    ensure!(condition(&suspended, "Available").is_some_and(|c| c.0 == "False"), "{:?}", suspended.data["status"]);

    // A run the API server refuses (a container name that is not a DNS label): never reported,
    // in any version of the CronJob the API server ever held (every write is watched).
    let seen = watch_statuses(crons.clone(), "refused").await?;
    let bad = json!({"schedule": "@every 2s", "jobTemplate": job_template("Not_A_Name")});
    crons.create(&PostParams::default(), &cronjob("refused", bad)?).await?;
    eventually("the refused create", WAIT, || async { Ok((host.metrics.actions("cronjob", "create", "error") > 0).then_some(())) }).await?;
    // An invalid object is a permanent failure: the host waits for a change of the CronJob; its
    // next reconcile is told why (last_error) and reports it before it tries again.
    crons.patch("refused", &PatchParams::default(), &Patch::Merge(json!({"metadata": {"annotations": {"touched": "yes"}}}))).await?;
    let degraded = eventually("Degraded=True JobCreationFailed", WAIT, || async {
        let cron = crons.get("refused").await?;
        Ok(condition(&cron, "Degraded").filter(|c| c.1 == "JobCreationFailed").map(|c| (cron, c)))
    })
    .await?;
    let (cron, (status, _, message)) = degraded;
    ensure!(status == "True" && message.contains("create batch/v1/Job/") && message.contains("is invalid"), "{message}");
    tokio::time::sleep(Duration::from_secs(1)).await;
    let seen = seen.lock().clone();
    ensure!(seen.len() >= 2, "the status writes were watched: {seen:?}");
    for status in &seen {
        ensure!(status.get("lastScheduleTime").is_none_or(Value::is_null), "a refused run was reported: {status}");
        ensure!(!status.to_string().contains("JobCreated"), "JobCreated reported: {status}");
    }
    ensure!(cron.data.pointer("/status/lastScheduleTime").is_none(), "{}", cron.data["status"]);
    ensure!(
        jobs.list(&Default::default()).await?.items.iter().all(|j| !j.metadata.name.as_deref().unwrap_or_default().starts_with("refused-"))
    );
    ns.cleanup().await
}

#[test]
fn a_recorded_reconcile_replays_the_same_with_its_clock_readings() -> Result<()> {
    let dir = tempfile::tempdir()?;
    let objects = dir.path().join("objects.yaml");
    // Its CRD (for the scope) and a CronJob due a run: the reconcile reads the clock.
    std::fs::copy(workspace_root().join("plugins/cronjob/config/crd.yaml"), dir.path().join("crd.yaml"))?;
    std::fs::write(
        &objects,
        "apiVersion: batch.tutorial.kubebuilder.io/v1\nkind: CronJob\n\
         metadata: {name: nightly, namespace: ops, uid: c-1, creationTimestamp: \"2026-03-01T00:00:00Z\"}\n\
         spec: {schedule: \"@every 7s\", startingDeadlineSeconds: 60, jobTemplate: {spec: {template: {spec: {containers: [{name: c, image: i}], restartPolicy: Never}}}}}\n",
    )?;
    let recording = dir.path().join("nightly.json.zst");
    let wasm = plugin_path("cronjob")?;
    let out = Command::new(host_binary()?)
        .arg("reconcile")
        .arg(&wasm)
        .arg("--objects")
        .arg(dir.path())
        .args(["--key", "batch.tutorial.kubebuilder.io/v1/CronJob/ops/nightly", "--record"])
        .arg(&recording)
        .arg("--no-precompiled-cache")
        .output()?;
    let stdout = String::from_utf8_lossy(&out.stdout);
    ensure!(out.status.success(), "wasmloop reconcile --record: {}", String::from_utf8_lossy(&out.stderr));
    ensure!(stdout.contains("action: create") && stdout.contains("requeueAfter"), "a run due and a requeue: {stdout}");
    let rec = wasmloop::plugin::Recording::decode(&std::fs::read(&recording)?)?;
    ensure!(!rec.wall_clock.is_empty(), "the clock readings are recorded");
    ensure!(rec.wall_clock.iter().any(|ns| ns % 1_000_000_000 != 0), "with sub-second precision: {:?}", rec.wall_clock);
    let replay = Command::new(host_binary()?)
        .arg("replay")
        .arg(&recording)
        .arg("--plugin")
        .arg(&wasm)
        .args(["--count", "5", "--no-precompiled-cache"])
        .output()?;
    let text = String::from_utf8_lossy(&replay.stdout);
    ensure!(replay.status.success() && text.contains("result: same") && text.contains("distinctOutcomes: 1"), "{text}");
    Ok(())
}
