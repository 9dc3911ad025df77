//! Differential test: kube-controller-manager's Deployment and ReplicaSet controllers (v1.20,
//! the reference) against the `deployment` and `replicaset` plugins, on the same real
//! kube-apiserver, with the simulated kubelet of `wasmloop_tests::kubelet` running the Pods.
//!
//! Every scenario of [`scenarios`] runs twice, each time in a fresh namespace:
//! 1. with KCM running its `deployment`, `replicaset` and `garbagecollector` controllers, then,
//!    once it is stopped,
//! 2. with the two plugins (one controller each per scenario namespace, from the committed
//!    manifests) and KCM running only its garbage collector (orphaning needs it).
//!
//! A run's [`Outcome`] is what it ended in, compared exactly: the Deployment (revision
//! annotation, status counts, conditions with their reasons and messages, collisionCount), each
//! ReplicaSet (its name — KCM's pod-template-hash —, owner, size, revision annotations, status
//! counts) and the Pods per ReplicaSet, at each snapshot the scenario takes once settled;
//! `kubectl rollout status` as the scenario ran it. Rollouts driven one Pod at a time (the
//! kubelet makes one Pod ready, then waits for everything to be quiet) also compare their
//! sequence of (new, old) replica counts, and are held to their invariants, watched as they
//! happen: never more than replicas + maxSurge Pods (nor Σ spec.replicas), never fewer than
//! replicas − maxUnavailable available.
//!
//! KCM's outcome is also checked against each scenario's hand-written expectation (so a broken
//! KCM setup cannot make the comparison vacuous), including that its ReplicaSet names are the
//! plugin's `deployment::hash` of their templates. All divergences are reported together.

use std::collections::{BTreeMap, HashMap};
use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail, ensure};
use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::apps::v1::{Deployment, ReplicaSet};
use k8s_openapi::api::core::v1::Pod;
use kube::Client;
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
use kube::runtime::watcher::{self, Event};
use parking_lot::Mutex;
use serde_json::{Value, json};
use wasmloop_tests::driver::{self, PluginDriver};
use wasmloop_tests::kcm::Kcm;
use wasmloop_tests::kubelet::{Kubelet, KubeletConfig, NEVER_READY};
use wasmloop_tests::{Host, eventually, init_tracing, workspace_root};

/// How long a scenario may take to settle; past it, the last state seen is its outcome.
const SETTLE_TIMEOUT: Duration = Duration::from_secs(90);
/// How long the state must stay the same to count as settled.
const QUIET: Duration = Duration::from_secs(2);
/// How long nothing must change before a stepped rollout makes its next Pod ready.
const STEP_QUIET: Duration = Duration::from_millis(800);
/// Waits for intermediate steps.
const WAIT: Duration = Duration::from_secs(90);
/// Pods never run; the image does not need to exist.
const IMAGE: &str = "registry.invalid/web";
/// The client budget both contestants get.
const BUDGET: [&str; 2] = ["--kube-api-qps=1000", "--kube-api-burst=1000"];

/// The committed manifest of plugin `name`, limited to namespace `ns`.
fn manifest(name: &str, ns: &str) -> String {
    let path = workspace_root().join(format!("deploy/plugins/{name}.plugin.yaml"));
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    format!("{text}\nnamespace: {ns}\n")
}

fn deployment_manifest(ns: &str) -> String {
    manifest("deployment", ns)
}

fn replicaset_manifest(ns: &str) -> String {
    manifest("replicaset", ns)
}

// ---------------------------------------------------------------------------------------------
// The scenarios.
// ---------------------------------------------------------------------------------------------

type ScenarioFn = for<'a> fn(&'a Cx) -> Pin<Box<dyn Future<Output = Result<Outcome>> + 'a>>;

struct Scenario {
    name: &'static str,
    run: ScenarioFn,
    /// What KCM v1.20 ends in (`pkg/controller/deployment`), checked on KCM's outcome.
    expected: fn(&Outcome) -> Result<()>,
}

fn scenarios() -> Vec<Scenario> {
    vec![
        Scenario { name: "create", run: |cx| Box::pin(create(cx)), expected: expect_create },
        Scenario { name: "rolling-counts", run: |cx| Box::pin(rolling_counts(cx)), expected: expect_rolling_counts },
        Scenario { name: "rolling-percent", run: |cx| Box::pin(rolling_percent(cx)), expected: expect_rolling_percent },
        Scenario { name: "recreate", run: |cx| Box::pin(recreate(cx)), expected: expect_recreate },
        Scenario { name: "rollback", run: |cx| Box::pin(rollback(cx)), expected: expect_rollback },
        Scenario { name: "pause-resume", run: |cx| Box::pin(pause_resume(cx)), expected: expect_pause_resume },
        Scenario { name: "proportional", run: |cx| Box::pin(proportional(cx)), expected: expect_proportional },
        Scenario { name: "deadline", run: |cx| Box::pin(deadline(cx)), expected: expect_deadline },
        Scenario { name: "history-limit", run: |cx| Box::pin(history_limit(cx)), expected: expect_history_limit },
        Scenario { name: "min-ready", run: |cx| Box::pin(min_ready(cx)), expected: expect_min_ready },
        Scenario { name: "adopt", run: |cx| Box::pin(adopt(cx)), expected: expect_adopt },
        Scenario { name: "orphan-readopt", run: |cx| Box::pin(orphan_readopt(cx)), expected: expect_orphan_readopt },
        Scenario { name: "release-collide", run: |cx| Box::pin(release_collide(cx)), expected: expect_release_collide },
    ]
}

/// 3 replicas from nothing; `kubectl rollout status` waits for them.
async fn create(cx: &Cx) -> Result<Outcome> {
    let _k = cx.kubelet(KubeletConfig::ready_after(Duration::from_millis(300))).await?;
    cx.create(deployment("v1", 3)).await?;
    let status = cx.rollout_status().await;
    let mut o = cx.outcome("done").await?;
    o.notes.push(status);
    Ok(o)
}

/// 10 replicas, maxSurge 3 and maxUnavailable 2, rolled from v1 to v2 one ready Pod at a time.
async fn rolling_counts(cx: &Cx) -> Result<Outcome> {
    stepped_rolling(cx, 10, json!(3), json!(2)).await
}

/// 7 replicas, maxSurge 30% (2.1: rounded up to 3) and maxUnavailable 10% (0.7: down to 0).
async fn rolling_percent(cx: &Cx) -> Result<Outcome> {
    stepped_rolling(cx, 7, json!("30%"), json!("10%")).await
}

async fn stepped_rolling(cx: &Cx, replicas: i32, surge: Value, unavailable: Value) -> Result<Outcome> {
    let kubelet = cx.kubelet(KubeletConfig::manual()).await?;
    let mut d = deployment("v1", replicas);
    d["spec"]["strategy"] = json!({"type": "RollingUpdate", "rollingUpdate": {"maxSurge": surge, "maxUnavailable": unavailable}});
    cx.create(d).await?;
    cx.step_until_complete(&kubelet, None).await?;
    let monitor = Monitor::start(cx).await?;
    cx.set_image("v2").await?;
    let sequence = cx.step_until_complete(&kubelet, Some(&monitor)).await?;
    let mut o = cx.outcome("done").await?;
    o.rollout = Some(Rollout { sequence, seen: monitor.stop() });
    kubelet.shutdown().await?;
    Ok(o)
}

/// Recreate, 3 replicas; deleted Pods take a second to terminate: the new ReplicaSet waits.
async fn recreate(cx: &Cx) -> Result<Outcome> {
    let _k = cx
        .kubelet(KubeletConfig { terminate_after: Duration::from_secs(1), ..KubeletConfig::ready_after(Duration::from_millis(300)) })
        .await?;
    let mut d = deployment("v1", 3);
    d["spec"]["strategy"] = json!({"type": "Recreate"});
    cx.create(d).await?;
    cx.settle().await?;
    let monitor = Monitor::start(cx).await?;
    cx.set_image("v2").await?;
    let mut o = cx.outcome("done").await?;
    o.rollout = Some(Rollout { sequence: vec![], seen: monitor.stop() });
    Ok(o)
}

/// v1, then v2, then `kubectl rollout undo`: v1's ReplicaSet comes back as revision 3.
async fn rollback(cx: &Cx) -> Result<Outcome> {
    let _k = cx.kubelet(KubeletConfig::ready_after(Duration::from_millis(200))).await?;
    cx.create(deployment("v1", 2)).await?;
    cx.settle().await?;
    cx.set_image("v2").await?;
    cx.settle().await?;
    let undo = cx.kubectl(&["rollout", "undo", "deployment/web"]).await?;
    let status = cx.rollout_status().await;
    let mut o = cx.outcome("undone").await?;
    o.notes.extend([undo.trim().to_owned(), status]);
    Ok(o)
}

/// 4 replicas paused, then a new image and 6 replicas: scaled, not rolled out; then resumed.
async fn pause_resume(cx: &Cx) -> Result<Outcome> {
    let _k = cx.kubelet(KubeletConfig::ready_after(Duration::from_millis(200))).await?;
    cx.create(deployment("v1", 4)).await?;
    cx.settle().await?;
    cx.patch(json!({"spec": {"paused": true}})).await?;
    cx.settle().await?;
    cx.patch(json!({"spec": {"replicas": 6, "template": template("v2")}})).await?;
    let mut o = cx.outcome("paused").await?;
    cx.patch(json!({"spec": {"paused": false}})).await?;
    o.snapshots.extend(cx.outcome("resumed").await?.snapshots);
    Ok(o)
}

/// 10 replicas rolling to a v2 whose Pods never become ready: stuck; then scaled to 20 mid-way.
async fn proportional(cx: &Cx) -> Result<Outcome> {
    let _k = cx.kubelet(KubeletConfig::ready_after(Duration::from_millis(200))).await?;
    cx.create(deployment("v1", 10)).await?;
    cx.settle().await?;
    cx.patch(json!({"spec": {"template": never_ready(template("v2"))}})).await?;
    let mut o = cx.outcome("stuck").await?;
    cx.patch(json!({"spec": {"replicas": 20}})).await?;
    o.snapshots.extend(cx.outcome("scaled").await?.snapshots);
    Ok(o)
}

/// A 5-second progress deadline and a v2 that never becomes ready: ProgressDeadlineExceeded,
/// which `kubectl rollout status` reports.
async fn deadline(cx: &Cx) -> Result<Outcome> {
    let _k = cx.kubelet(KubeletConfig::ready_after(Duration::from_millis(200))).await?;
    let mut d = deployment("v1", 2);
    d["spec"]["progressDeadlineSeconds"] = json!(5);
    cx.create(d).await?;
    cx.settle().await?;
    cx.patch(json!({"spec": {"template": never_ready(template("v2"))}})).await?;
    let status = cx.rollout_status().await;
    let mut o = cx.outcome("timed-out").await?;
    o.notes.push(status);
    Ok(o)
}

/// revisionHistoryLimit 1 over v1 → v2 → v3: v1's ReplicaSet is deleted.
async fn history_limit(cx: &Cx) -> Result<Outcome> {
    let _k = cx.kubelet(KubeletConfig::ready_after(Duration::from_millis(200))).await?;
    let mut d = deployment("v1", 2);
    d["spec"]["revisionHistoryLimit"] = json!(1);
    cx.create(d).await?;
    for v in ["v2", "v3"] {
        cx.settle().await?;
        cx.set_image(v).await?;
    }
    cx.outcome("done").await
}

/// minReadySeconds 3600 (the progress deadline must be longer): ready, never available.
async fn min_ready(cx: &Cx) -> Result<Outcome> {
    let _k = cx.kubelet(KubeletConfig::ready_after(Duration::from_millis(200))).await?;
    let mut d = deployment("v1", 2);
    d["spec"]["minReadySeconds"] = json!(3600);
    d["spec"]["progressDeadlineSeconds"] = json!(7200);
    cx.create(d).await?;
    cx.outcome("done").await
}

/// An orphan ReplicaSet with the Deployment's template exists first: adopted, and it is the
/// Deployment's new ReplicaSet (no other is created).
async fn adopt(cx: &Cx) -> Result<Outcome> {
    let _k = cx.kubelet(KubeletConfig::ready_after(Duration::from_millis(200))).await?;
    let rs = json!({"metadata": {"name": "web-orphan", "labels": {"app": "web"}},
                    "spec": {"replicas": 1, "selector": {"matchLabels": {"app": "web"}}, "template": template("v1")}});
    cx.sets().create(&PostParams::default(), &serde_json::from_value(rs)?).await?;
    // Both controllers read ReplicaSets from the informer their ReplicaSet controller shares:
    // once that one has counted the orphan's Pod, the Deployment's sync sees the orphan.
    eventually("the orphan's Pod counted", WAIT, || async {
        Ok((cx.sets().get("web-orphan").await?.status.is_some_and(|s| s.replicas == 1)).then_some(()))
    })
    .await?;
    cx.create(deployment("v1", 2)).await?;
    cx.outcome("done").await
}

/// 2 replicas; the Deployment deleted with propagationPolicy Orphan (the garbage collector
/// removes the owner references), then created again: its ReplicaSet is adopted back.
async fn orphan_readopt(cx: &Cx) -> Result<Outcome> {
    let _k = cx.kubelet(KubeletConfig::ready_after(Duration::from_millis(200))).await?;
    cx.create(deployment("v1", 2)).await?;
    let mut o = cx.outcome("first").await?;
    cx.deployments().delete("web", &DeleteParams::orphan()).await?;
    eventually("the ReplicaSets orphaned", WAIT, || async {
        let sets = cx.sets().list(&ListParams::default()).await?.items;
        let orphaned = sets.iter().all(|rs| rs.metadata.owner_references.as_ref().is_none_or(Vec::is_empty));
        let gone = cx.deployments().get_opt("web").await?.is_none();
        Ok((orphaned && gone && !sets.is_empty()).then_some(()))
    })
    .await?;
    cx.create(deployment("v1", 2)).await?;
    o.snapshots.extend(cx.outcome("readopted").await?.snapshots);
    Ok(o)
}

/// 2 replicas; their ReplicaSet relabelled out of the selector: released (its owner reference
/// removed, its Pods kept). The ReplicaSet the Deployment then needs has the released one's
/// name: a hash collision, so collisionCount becomes 1 and the next one is named from it.
async fn release_collide(cx: &Cx) -> Result<Outcome> {
    let _k = cx.kubelet(KubeletConfig::ready_after(Duration::from_millis(200))).await?;
    cx.create(deployment("v1", 2)).await?;
    let mut o = cx.outcome("first").await?;
    let name = o.snapshot("first")?.sets.first().context("no ReplicaSet")?.name.clone();
    let relabel = json!({"metadata": {"labels": {"app": "released"}}});
    cx.sets().patch(&name, &PatchParams::default(), &Patch::Merge(relabel)).await?;
    o.snapshots.extend(cx.outcome("released").await?.snapshots);
    Ok(o)
}

// ---------------------------------------------------------------------------------------------
// KCM's expected outcomes (pkg/controller/deployment v1.20, worked out by hand).
// ---------------------------------------------------------------------------------------------

const AVAILABLE: (&str, &str, &str) = ("Available", "True", "MinimumReplicasAvailable");
const UNAVAILABLE: (&str, &str, &str) = ("Available", "False", "MinimumReplicasUnavailable");
const COMPLETE: (&str, &str, &str) = ("Progressing", "True", "NewReplicaSetAvailable");
const UPDATED: (&str, &str, &str) = ("Progressing", "True", "ReplicaSetUpdated");

/// Check snapshot `snap` of `o`: the Deployment's revision and counts
/// [replicas, updated, ready, available, unavailable], its conditions (type, status, reason),
/// and its ReplicaSets as (image, spec.replicas, revision), oldest first.
fn check(
    o: &Outcome,
    snap: &str,
    revision: &str,
    counts: [i64; 5],
    conditions: &[(&str, &str, &str)],
    sets: &[(&str, i64, &str)],
) -> Result<()> {
    let s = o.snapshot(snap)?;
    let d = s.deployment.as_ref().context("no Deployment")?;
    ensure!(d.revision == revision, "{snap}: revision {} (expected {revision})", d.revision);
    ensure!(d.counts == counts, "{snap}: counts {:?} (expected {counts:?})", d.counts);
    let mut got: Vec<(&str, &str, &str)> = d.conditions.iter().map(|c| (c.0.as_str(), c.1.as_str(), c.2.as_str())).collect();
    got.sort_unstable();
    let mut want = conditions.to_vec();
    want.sort_unstable();
    ensure!(got == want, "{snap}: conditions {got:?} (expected {want:?})");
    let rows: Vec<(&str, i64, &str)> = s.sets.iter().map(|r| (r.image.as_str(), r.replicas, r.revision.as_str())).collect();
    ensure!(rows == sets, "{snap}: ReplicaSets {rows:?} (expected {sets:?})");
    Ok(())
}

fn expect_create(o: &Outcome) -> Result<()> {
    check(o, "done", "1", [3, 3, 3, 3, 0], &[AVAILABLE, COMPLETE], &[("v1", 3, "1")])?;
    ensure!(o.notes[0].contains("successfully rolled out"), "kubectl rollout status: {}", o.notes[0]);
    Ok(())
}

/// A stepped rollout's outcome: complete, through `sequence` (the (new, old) sizes at each quiet
/// point), within its bounds.
fn expect_stepped(o: &Outcome, replicas: i64, surge: i64, unavailable: i64, sequence: &[(i64, i64)]) -> Result<()> {
    check(o, "done", "2", [replicas, replicas, replicas, replicas, 0], &[AVAILABLE, COMPLETE], &[("v1", 0, "1"), ("v2", replicas, "2")])?;
    let r = o.rollout.as_ref().context("no rollout recorded")?;
    ensure!(r.sequence == sequence, "the rollout went {:?} (expected {sequence:?})", r.sequence);
    ensure!(r.seen.max_spec <= replicas + surge, "Σ spec.replicas reached {} > {replicas} + {surge}", r.seen.max_spec);
    ensure!(r.seen.max_pods_quiet <= replicas + surge, "{} Pods at a quiet point > {replicas} + {surge}", r.seen.max_pods_quiet);
    ensure!(r.seen.min_available >= replicas - unavailable, "{} available < {replicas} - {unavailable}", r.seen.min_available);
    Ok(())
}

fn expect_rolling_counts(o: &Outcome) -> Result<()> {
    // v2 created with the surge (3), v1 down to the 8 that must stay available, v2 up to the 13
    // allowed; then each new ready Pod lets one old one go and a new one come, until v2 has
    // all 10 and the old ones go one by one.
    let sequence = [(5, 8), (6, 7), (7, 6), (8, 5), (9, 4), (10, 3), (10, 2), (10, 1), (10, 0)];
    expect_stepped(o, 10, 3, 2, &sequence)
}

fn expect_rolling_percent(o: &Outcome) -> Result<()> {
    // No Pod may be unavailable: v1 keeps its 7 until a v2 Pod is ready.
    let sequence = [(3, 7), (4, 6), (5, 5), (6, 4), (7, 3), (7, 2), (7, 1), (7, 0)];
    expect_stepped(o, 7, 3, 0, &sequence)
}

fn expect_recreate(o: &Outcome) -> Result<()> {
    check(o, "done", "2", [3, 3, 3, 3, 0], &[AVAILABLE, COMPLETE], &[("v1", 0, "1"), ("v2", 3, "2")])?;
    let r = o.rollout.as_ref().context("no rollout recorded")?;
    ensure!(r.seen.max_pods <= 3, "{} Pods at once", r.seen.max_pods);
    ensure!(!r.seen.old_and_new_together, "a new Pod ran beside an old one");
    Ok(())
}

fn expect_rollback(o: &Outcome) -> Result<()> {
    check(o, "undone", "3", [2, 2, 2, 2, 0], &[AVAILABLE, COMPLETE], &[("v1", 2, "3"), ("v2", 0, "2")])?;
    let v1 = &o.snapshot("undone")?.sets[0];
    ensure!(v1.revision_history == "1", "v1's revision history: {:?}", v1.revision_history);
    ensure!(o.notes[0].contains("rolled back"), "kubectl rollout undo: {}", o.notes[0]);
    ensure!(o.notes[1].contains("successfully rolled out"), "kubectl rollout status: {}", o.notes[1]);
    Ok(())
}

fn expect_pause_resume(o: &Outcome) -> Result<()> {
    let paused = ("Progressing", "Unknown", "DeploymentPaused");
    // No ReplicaSet has the new template while paused: none of the 6 is updated.
    check(o, "paused", "1", [6, 0, 6, 6, 0], &[AVAILABLE, paused], &[("v1", 6, "1")])?;
    check(o, "resumed", "2", [6, 6, 6, 6, 0], &[AVAILABLE, COMPLETE], &[("v1", 0, "1"), ("v2", 6, "2")])
}

fn expect_proportional(o: &Outcome) -> Result<()> {
    // 25%/25% of 10: v2 gets 3 (surge), v1 goes to 8, then v2 to 5 (13 in all); stuck.
    check(o, "stuck", "2", [13, 5, 8, 8, 5], &[AVAILABLE, UPDATED], &[("v1", 8, "1"), ("v2", 5, "2")])?;
    // 20 (+5 surge): 12 to add over 8 and 5, each as sized from 13 to 25 (15.4 -> 15, 9.6 -> 10),
    // the largest taking what is left: 8 + 7 + 0, 5 + 5.
    check(o, "scaled", "2", [25, 10, 15, 15, 10], &[AVAILABLE, UPDATED], &[("v1", 15, "1"), ("v2", 10, "2")])
}

fn expect_deadline(o: &Outcome) -> Result<()> {
    let timed_out = ("Progressing", "False", "ProgressDeadlineExceeded");
    // 25% of 2: surge 1, unavailable 0: v2 gets 1, v1 keeps 2.
    check(o, "timed-out", "2", [3, 1, 2, 2, 1], &[AVAILABLE, timed_out], &[("v1", 2, "1"), ("v2", 1, "2")])?;
    ensure!(o.notes[0].contains("exceeded its progress deadline"), "kubectl rollout status: {}", o.notes[0]);
    Ok(())
}

fn expect_history_limit(o: &Outcome) -> Result<()> {
    check(o, "done", "3", [2, 2, 2, 2, 0], &[AVAILABLE, COMPLETE], &[("v2", 0, "2"), ("v3", 2, "3")])
}

fn expect_min_ready(o: &Outcome) -> Result<()> {
    // maxUnavailable 25% of 2 rounds down to 0: both must be available, neither is.
    check(o, "done", "1", [2, 2, 2, 0, 2], &[UNAVAILABLE, UPDATED], &[("v1", 2, "1")])
}

fn expect_adopt(o: &Outcome) -> Result<()> {
    check(o, "done", "1", [2, 2, 2, 2, 0], &[AVAILABLE, COMPLETE], &[("v1", 2, "1")])?;
    let s = o.snapshot("done")?;
    ensure!(s.sets[0].name == "web-orphan" && s.sets[0].owner == "Deployment/web", "adopted: {:?}", s.sets[0]);
    Ok(())
}

fn expect_orphan_readopt(o: &Outcome) -> Result<()> {
    check(o, "first", "1", [2, 2, 2, 2, 0], &[AVAILABLE, COMPLETE], &[("v1", 2, "1")])?;
    check(o, "readopted", "1", [2, 2, 2, 2, 0], &[AVAILABLE, COMPLETE], &[("v1", 2, "1")])?;
    let (a, b) = (&o.snapshot("first")?.sets[0], &o.snapshot("readopted")?.sets[0]);
    ensure!(a.name == b.name && b.owner == "Deployment/web", "readopted: {a:?} then {b:?}");
    Ok(())
}

fn expect_release_collide(o: &Outcome) -> Result<()> {
    check(o, "first", "1", [2, 2, 2, 2, 0], &[AVAILABLE, COMPLETE], &[("v1", 2, "1")])?;
    // The released one keeps its Pods; the new one starts again at revision 1 (no old ones).
    check(o, "released", "1", [2, 2, 2, 2, 0], &[AVAILABLE, COMPLETE], &[("v1", 2, "1"), ("v1", 2, "1")])?;
    let s = o.snapshot("released")?;
    let d = s.deployment.as_ref().context("no Deployment")?;
    ensure!(d.collision_count == Some(1), "collisionCount {:?} (expected 1)", d.collision_count);
    let (released, new) = (&s.sets[0], &s.sets[1]);
    ensure!(released.name == o.snapshot("first")?.sets[0].name && released.owner == "none", "released: {released:?}");
    // Not the released one's name (collisionCount none): named from a count the collision set.
    ensure!(new.owner == "Deployment/web" && new.hash_is_ours && new.name != released.name, "the new ReplicaSet: {new:?}");
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// Objects and steps.
// ---------------------------------------------------------------------------------------------

fn template(version: &str) -> Value {
    json!({"metadata": {"labels": {"app": "web"}}, "spec": {"containers": [{"name": "web", "image": format!("{IMAGE}:{version}")}]}})
}

fn never_ready(mut template: Value) -> Value {
    template["metadata"]["labels"][NEVER_READY] = json!("true");
    template
}

/// Deployment `web` of `replicas` Pods of image `version`, API defaults otherwise (RollingUpdate
/// 25%/25%, revisionHistoryLimit 10, progressDeadlineSeconds 600).
fn deployment(version: &str, replicas: i32) -> Value {
    json!({"metadata": {"name": "web"},
           "spec": {"replicas": replicas, "selector": {"matchLabels": {"app": "web"}}, "template": template(version)}})
}

/// One scenario run: its namespace and client.
struct Cx {
    client: Client,
    ns: String,
}

impl Cx {
    fn deployments(&self) -> Api<Deployment> {
        Api::namespaced(self.client.clone(), &self.ns)
    }

    fn sets(&self) -> Api<ReplicaSet> {
        Api::namespaced(self.client.clone(), &self.ns)
    }

    fn pods(&self) -> Api<Pod> {
        Api::namespaced(self.client.clone(), &self.ns)
    }

    async fn kubelet(&self, config: KubeletConfig) -> Result<Kubelet> {
        Kubelet::start(self.client.clone(), Some(&self.ns), config).await
    }

    async fn create(&self, d: Value) -> Result<()> {
        self.deployments().create(&PostParams::default(), &serde_json::from_value(d)?).await?;
        Ok(())
    }

    async fn patch(&self, patch: Value) -> Result<()> {
        self.deployments().patch("web", &PatchParams::default(), &Patch::Merge(patch)).await?;
        Ok(())
    }

    async fn set_image(&self, version: &str) -> Result<()> {
        self.patch(json!({"spec": {"template": template(version)}})).await
    }

    /// `kubectl` against this namespace (blocking, off the runtime's threads).
    async fn kubectl(&self, args: &[&str]) -> Result<String> {
        let mut all: Vec<String> = vec!["-n".into(), self.ns.clone()];
        all.extend(args.iter().map(|a| (*a).to_owned()));
        tokio::task::spawn_blocking(move || {
            let args: Vec<&str> = all.iter().map(String::as_str).collect();
            wasmloop_tests::cluster::kubectl(&args)
        })
        .await?
    }

    /// `kubectl rollout status deployment/web` (its output, or its failure's).
    async fn rollout_status(&self) -> String {
        match self.kubectl(&["rollout", "status", "deployment/web", "--timeout=90s"]).await {
            Ok(out) => out.lines().last().unwrap_or_default().to_owned(),
            Err(e) => format!("failed: {}", e.to_string().lines().last().unwrap_or_default()),
        }
    }

    /// The state, as compared.
    async fn summary(&self) -> Result<Summary> {
        Summary::of(self).await
    }

    /// Wait until settled (observed generations, nothing changing for [`QUIET`]), then take
    /// snapshot `name`. Past [`SETTLE_TIMEOUT`], the last state seen.
    async fn outcome(&self, name: &str) -> Result<Outcome> {
        let summary = self.settle().await?;
        Ok(Outcome { snapshots: vec![(name.to_owned(), summary)], rollout: None, notes: vec![] })
    }

    async fn settle(&self) -> Result<Summary> {
        let last: Mutex<Option<(Summary, Instant)>> = Mutex::new(None);
        let last = &last;
        let settled = eventually(&format!("{} to settle", self.ns), SETTLE_TIMEOUT, || async move {
            let now = self.summary().await?;
            let mut last = last.lock();
            match &*last {
                Some((before, since)) if *before == now => Ok((now.observed && since.elapsed() >= QUIET).then_some(now)),
                _ => {
                    *last = Some((now, Instant::now()));
                    Ok(None)
                }
            }
        })
        .await;
        match (settled, last.lock().take()) {
            (Ok(summary), _) => Ok(summary),
            (Err(e), Some((summary, _))) => {
                eprintln!("deployment_parity: {}: {e:#}; taking the last state seen", self.ns);
                Ok(summary)
            }
            (Err(e), None) => Err(e),
        }
    }

    /// A fingerprint of everything that moves: ReplicaSets, the Deployment's status, Pods.
    async fn fingerprint(&self) -> Result<String> {
        let lp = ListParams::default();
        let mut parts = Vec::new();
        for rs in self.sets().list(&lp).await?.items {
            parts.push(format!("{:?}{:?}{:?}", rs.metadata.name, rs.spec.map(|s| s.replicas), rs.status));
        }
        for d in self.deployments().list(&lp).await?.items {
            parts.push(format!("{:?}", d.status));
        }
        for p in self.pods().list(&lp).await?.items {
            parts.push(format!("{:?}{:?}{:?}", p.metadata.name, p.metadata.deletion_timestamp, p.status.map(|s| s.conditions)));
        }
        parts.sort();
        Ok(parts.join("\n"))
    }

    /// Wait until nothing changed for [`STEP_QUIET`].
    async fn quiet(&self) -> Result<()> {
        let mut last = (self.fingerprint().await?, Instant::now());
        let deadline = Instant::now() + WAIT;
        loop {
            tokio::time::sleep(Duration::from_millis(100)).await;
            let now = self.fingerprint().await?;
            if now != last.0 {
                last = (now, Instant::now());
            } else if last.1.elapsed() >= STEP_QUIET {
                return Ok(());
            }
            ensure!(Instant::now() < deadline, "{}: never quiet for {STEP_QUIET:?}", self.ns);
        }
    }

    /// (Σ spec.replicas of the ReplicaSets with the Deployment's image, of the others).
    async fn new_and_old(&self) -> Result<(i64, i64)> {
        let d = self.deployments().get("web").await?;
        let image = image_of(d.spec.as_ref().map(|s| &s.template));
        let (mut new, mut old) = (0, 0);
        for rs in self.sets().list(&ListParams::default()).await?.items {
            let replicas = i64::from(rs.spec.as_ref().and_then(|s| s.replicas).unwrap_or(1));
            if image_of(rs.spec.as_ref().and_then(|s| s.template.as_ref())) == image {
                new += replicas;
            } else {
                old += replicas;
            }
        }
        Ok((new, old))
    }

    /// Drive the rollout with a manual kubelet: wait until quiet, note (new, old), make one Pod
    /// ready; until the rollout is complete. The (new, old) counts seen at each quiet point
    /// (and the Pods then, into `monitor`).
    async fn step_until_complete(&self, kubelet: &Kubelet, monitor: Option<&Monitor>) -> Result<Vec<(i64, i64)>> {
        let mut sequence: Vec<(i64, i64)> = Vec::new();
        let mut idle = 0;
        for _ in 0..200 {
            self.quiet().await?;
            if let Some(m) = monitor {
                let active = self.pods().list(&ListParams::default()).await?.items.iter().filter(|p| is_active(p)).count();
                let mut seen = m.seen.lock();
                seen.max_pods_quiet = seen.max_pods_quiet.max(active as i64);
            }
            let counts = self.new_and_old().await?;
            if sequence.last() != Some(&counts) {
                sequence.push(counts);
            }
            if kubelet.ready_next().await?.is_some() {
                idle = 0;
                continue;
            }
            if self.summary().await?.complete() {
                return Ok(sequence);
            }
            idle += 1;
            ensure!(idle < 20, "{}: no Pod to make ready and the rollout is not complete: {sequence:?}", self.ns);
        }
        bail!("{}: the rollout did not complete in 200 steps: {sequence:?}", self.ns)
    }
}

fn image_of(t: Option<&k8s_openapi::api::core::v1::PodTemplateSpec>) -> String {
    t.and_then(|t| t.spec.as_ref()).and_then(|s| s.containers.first()).and_then(|c| c.image.clone()).unwrap_or_default()
}

// ---------------------------------------------------------------------------------------------
// Watching a rollout's invariants.
// ---------------------------------------------------------------------------------------------

/// The extremes seen while a rollout ran.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
struct Seen {
    /// Most Pods at once (not terminating, not finished), at any moment: the ReplicaSet
    /// controllers' race (one creating the new ReplicaSet's Pod, the other deleting the old
    /// one's, both on the same ReplicaSet events) can take it past replicas + maxSurge for a
    /// moment; reported, bounded only at quiet points ([`Seen::max_pods_quiet`]).
    max_pods: i64,
    /// Most Pods at a quiet point of a stepped rollout (every controller caught up).
    max_pods_quiet: i64,
    /// Fewest of them ready at once.
    min_available: i64,
    /// Largest Σ spec.replicas of the ReplicaSets.
    max_spec: i64,
    /// Whether a Pod of the Deployment's image ran beside one of another (Recreate forbids it).
    old_and_new_together: bool,
}

/// Watches the namespace's Pods and ReplicaSets and keeps [`Seen`] up to date.
struct Monitor {
    seen: Arc<Mutex<Seen>>,
    task: tokio::task::JoinHandle<()>,
}

enum Change {
    Pod(Event<Pod>),
    Rs(Event<ReplicaSet>),
}

impl Monitor {
    async fn start(cx: &Cx) -> Result<Self> {
        let image = image_of(cx.deployments().get("web").await?.spec.as_ref().map(|s| &s.template));
        let pods = watcher::watcher(cx.pods(), watcher::Config::default()).map_ok(Change::Pod).boxed();
        let sets = watcher::watcher(cx.sets(), watcher::Config::default()).map_ok(Change::Rs).boxed();
        let mut changes = futures::stream::select(pods, sets);
        let seen = Arc::new(Mutex::new(Seen { min_available: i64::MAX, ..Seen::default() }));
        let (me, started) = (seen.clone(), tokio::sync::oneshot::channel::<()>());
        let (ready_tx, ready_rx) = started;
        let task = tokio::spawn(async move {
            let mut pods: HashMap<String, Pod> = HashMap::new();
            let mut sets: HashMap<String, i64> = HashMap::new();
            let mut synced = (false, false);
            let mut ready_tx = Some(ready_tx);
            while let Ok(Some(change)) = changes.try_next().await {
                match change {
                    Change::Pod(Event::Apply(p) | Event::InitApply(p)) => drop(pods.insert(p.metadata.name.clone().unwrap_or_default(), p)),
                    Change::Pod(Event::Delete(p)) => drop(pods.remove(p.metadata.name.as_deref().unwrap_or_default())),
                    Change::Pod(Event::InitDone) => synced.0 = true,
                    Change::Rs(Event::Apply(rs) | Event::InitApply(rs)) => {
                        let n = i64::from(rs.spec.as_ref().and_then(|s| s.replicas).unwrap_or(1));
                        sets.insert(rs.metadata.name.clone().unwrap_or_default(), n);
                    }
                    Change::Rs(Event::Delete(rs)) => drop(sets.remove(rs.metadata.name.as_deref().unwrap_or_default())),
                    Change::Rs(Event::InitDone) => synced.1 = true,
                    Change::Pod(Event::Init) | Change::Rs(Event::Init) => {}
                }
                if synced != (true, true) {
                    continue;
                }
                if let Some(tx) = ready_tx.take() {
                    let _ = tx.send(());
                }
                let active: Vec<&Pod> = pods.values().filter(|p| is_active(p)).collect();
                let available = active.iter().filter(|p| is_ready(p)).count();
                let new = active.iter().filter(|p| image_of_pod(p) == image).count();
                let mut s = me.lock();
                s.max_pods = s.max_pods.max(active.len() as i64);
                s.min_available = s.min_available.min(available as i64);
                s.max_spec = s.max_spec.max(sets.values().sum());
                s.old_and_new_together |= new > 0 && new < active.len();
            }
        });
        ready_rx.await.context("the monitor's watches ended before listing")?;
        Ok(Self { seen, task })
    }

    fn stop(self) -> Seen {
        self.task.abort();
        self.seen.lock().clone()
    }
}

fn is_active(p: &Pod) -> bool {
    let phase = p.status.as_ref().and_then(|s| s.phase.as_deref()).unwrap_or_default();
    p.metadata.deletion_timestamp.is_none() && phase != "Succeeded" && phase != "Failed"
}

fn is_ready(p: &Pod) -> bool {
    p.status.as_ref().and_then(|s| s.conditions.as_ref()).is_some_and(|c| c.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
}

fn image_of_pod(p: &Pod) -> String {
    p.spec.as_ref().and_then(|s| s.containers.first()).and_then(|c| c.image.clone()).unwrap_or_default()
}

// ---------------------------------------------------------------------------------------------
// The outcome of a scenario.
// ---------------------------------------------------------------------------------------------

#[derive(Clone, Debug, PartialEq, Eq)]
struct DeploymentRow {
    /// `deployment.kubernetes.io/revision`.
    revision: String,
    /// [replicas, updatedReplicas, readyReplicas, availableReplicas, unavailableReplicas].
    counts: [i64; 5],
    /// `status.observedGeneration == metadata.generation`.
    observed: bool,
    /// (type, status, reason, message), sorted.
    conditions: Vec<(String, String, String, String)>,
    collision_count: Option<i32>,
}

#[derive(Clone, Debug, PartialEq, Eq)]
struct SetRow {
    /// The name: `web-<pod-template-hash>` as KCM names it.
    name: String,
    /// `Kind/name` of the controller owner, or `none`.
    owner: String,
    /// The image tag of its template (`v1`, ...).
    image: String,
    replicas: i64,
    revision: String,
    revision_history: String,
    /// desired-replicas and max-replicas annotations.
    scaled_for: (String, String),
    /// [replicas, readyReplicas, availableReplicas].
    status: [i64; 3],
    /// Whether its name is `<deployment>-<pod-template-hash label>` and that label is the plugin's
    /// `deployment::hash` of its template (without the label) and a collisionCount the
    /// Deployment had (none, or one up to its current count).
    hash_is_ours: bool,
}

#[derive(Clone, Debug, PartialEq, Eq)]
struct Summary {
    deployment: Option<DeploymentRow>,
    /// Oldest first.
    sets: Vec<SetRow>,
    /// Pods per (controller, terminating).
    pods: BTreeMap<(String, bool), usize>,
    /// Every status names its object's generation.
    observed: bool,
}

impl Summary {
    async fn of(cx: &Cx) -> Result<Self> {
        let lp = ListParams::default();
        let d = cx.deployments().get_opt("web").await?;
        let mut sets = cx.sets().list(&lp).await?.items;
        sets.sort_by(|a, b| (&a.metadata.creation_timestamp, &a.metadata.name).cmp(&(&b.metadata.creation_timestamp, &b.metadata.name)));
        let pods = cx.pods().list(&lp).await?.items;
        let collision = d.as_ref().and_then(|d| d.status.as_ref()).and_then(|s| s.collision_count);
        let ann = |m: &k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta, k: &str| {
            m.annotations.as_ref().and_then(|a| a.get(k)).cloned().unwrap_or_default()
        };
        let deployment = d.as_ref().map(|d| {
            let s = d.status.clone().unwrap_or_default();
            let mut conditions: Vec<_> = s
                .conditions
                .iter()
                .flatten()
                .map(|c| (c.type_.clone(), c.status.clone(), c.reason.clone().unwrap_or_default(), c.message.clone().unwrap_or_default()))
                .collect();
            conditions.sort();
            DeploymentRow {
                revision: ann(&d.metadata, "deployment.kubernetes.io/revision"),
                counts: [
                    s.replicas.unwrap_or(0),
                    s.updated_replicas.unwrap_or(0),
                    s.ready_replicas.unwrap_or(0),
                    s.available_replicas.unwrap_or(0),
                    s.unavailable_replicas.unwrap_or(0),
                ]
                .map(i64::from),
                observed: s.observed_generation.is_some() && s.observed_generation == d.metadata.generation,
                conditions,
                collision_count: s.collision_count,
            }
        });
        let owner_of = |refs: &Option<Vec<k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference>>| {
            refs.iter()
                .flatten()
                .find(|r| r.controller == Some(true))
                .map_or_else(|| "none".to_owned(), |r| format!("{}/{}", r.kind, r.name))
        };
        let mut observed = deployment.as_ref().is_none_or(|d| d.observed);
        let rows = sets
            .iter()
            .map(|rs| {
                let spec = rs.spec.clone().unwrap_or_default();
                let status = rs.status.clone().unwrap_or_default();
                observed &= status.observed_generation.is_some() && status.observed_generation == rs.metadata.generation;
                let template = serde_json::to_value(&spec.template).unwrap_or(Value::Null);
                let label = template.pointer("/metadata/labels/pod-template-hash").and_then(Value::as_str).unwrap_or_default().to_owned();
                // Named with the collisionCount of its creation: none, or one up to today's.
                let bare = deployment::template::without_hash(&template);
                let counts = std::iter::once(None).chain((0..=collision.unwrap_or(-1)).map(Some));
                let hashed = counts.map(|c| deployment::hash::compute(&bare, c).value).any(|h| h == label);
                let name = rs.metadata.name.clone().unwrap_or_default();
                SetRow {
                    hash_is_ours: name == format!("web-{label}") && hashed,
                    owner: owner_of(&rs.metadata.owner_references),
                    image: image_of(spec.template.as_ref()).rsplit(':').next().unwrap_or_default().to_owned(),
                    replicas: i64::from(spec.replicas.unwrap_or(1)),
                    revision: ann(&rs.metadata, "deployment.kubernetes.io/revision"),
                    revision_history: ann(&rs.metadata, "deployment.kubernetes.io/revision-history"),
                    scaled_for: (
                        ann(&rs.metadata, "deployment.kubernetes.io/desired-replicas"),
                        ann(&rs.metadata, "deployment.kubernetes.io/max-replicas"),
                    ),
                    status: [
                        i64::from(status.replicas),
                        i64::from(status.ready_replicas.unwrap_or(0)),
                        i64::from(status.available_replicas.unwrap_or(0)),
                    ],
                    name,
                }
            })
            .collect();
        let names: HashMap<String, String> =
            sets.iter().map(|rs| (rs.metadata.uid.clone().unwrap_or_default(), rs.metadata.name.clone().unwrap_or_default())).collect();
        let mut pod_rows = BTreeMap::new();
        for p in &pods {
            let owner = p.metadata.owner_references.iter().flatten().find(|r| r.controller == Some(true));
            let owner =
                owner.map_or_else(|| "none".to_owned(), |r| names.get(&r.uid).cloned().unwrap_or_else(|| format!("{}(gone)", r.name)));
            *pod_rows.entry((owner, p.metadata.deletion_timestamp.is_some())).or_default() += 1;
        }
        Ok(Self { deployment, sets: rows, pods: pod_rows, observed })
    }

    /// The Deployment's rollout is complete: as `kubectl rollout status` reads it.
    fn complete(&self) -> bool {
        let Some(d) = &self.deployment else { return false };
        let [replicas, updated, _, available, _] = d.counts;
        let desired = self.sets.iter().map(|s| s.replicas).sum::<i64>();
        d.observed && updated == replicas && available == replicas && replicas == desired
    }
}

/// A scenario's outcome: named snapshots of the state, the rollout it drove, notes (kubectl).
#[derive(Clone, Debug, PartialEq, Eq)]
struct Outcome {
    snapshots: Vec<(String, Summary)>,
    rollout: Option<Rollout>,
    notes: Vec<String>,
}

#[derive(Clone, Debug, PartialEq, Eq)]
struct Rollout {
    /// (new, old) Σ spec.replicas at each quiet point of a stepped rollout.
    sequence: Vec<(i64, i64)>,
    seen: Seen,
}

impl Outcome {
    fn snapshot(&self, name: &str) -> Result<&Summary> {
        self.snapshots.iter().find(|(n, _)| n == name).map(|(_, s)| s).with_context(|| format!("no snapshot {name}"))
    }

    /// Whether the two contestants agree: on everything but the extremes the invariants bound
    /// (those are checked against the bounds, not compared: Pod creation and deletion race each
    /// other in both).
    fn same_as(&self, other: &Self) -> bool {
        let sequence = |o: &Self| o.rollout.as_ref().map(|r| r.sequence.clone());
        self.snapshots == other.snapshots && sequence(self) == sequence(other) && self.notes == other.notes
    }
}

impl fmt::Display for Outcome {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (name, s) in &self.snapshots {
            write!(f, "[{name}] ")?;
            if let Some(d) = &s.deployment {
                write!(f, "deploy rev={} counts={:?}{}", d.revision, d.counts, if d.observed { "" } else { " (not observed)" })?;
                for (t, st, r, m) in &d.conditions {
                    write!(f, " {t}={st}/{r}({m})")?;
                }
                if let Some(c) = d.collision_count {
                    write!(f, " collisions={c}")?;
                }
            }
            for r in &s.sets {
                write!(
                    f,
                    "; rs {} {} owner={} replicas={} rev={} hist={:?} scaledFor={:?} status={:?}{}",
                    r.name,
                    r.image,
                    r.owner,
                    r.replicas,
                    r.revision,
                    r.revision_history,
                    r.scaled_for,
                    r.status,
                    if r.hash_is_ours { "" } else { " HASH-DIFFERS" }
                )?;
            }
            write!(f, "; pods {:?}. ", s.pods)?;
        }
        if let Some(r) = &self.rollout {
            write!(f, "rollout {:?} seen {:?}. ", r.sequence, r.seen)?;
        }
        if !self.notes.is_empty() {
            write!(f, "notes {:?}", self.notes)?;
        }
        Ok(())
    }
}

fn show(o: &Result<Outcome>) -> String {
    match o {
        Ok(o) => o.to_string(),
        Err(e) => format!("ERROR {e:#}"),
    }
}

// ---------------------------------------------------------------------------------------------
// The two contestants.
// ---------------------------------------------------------------------------------------------

/// Every scenario at once, each in a namespace of its own, with `plugins` or with KCM
/// ([`driver::run_phase`]).
async fn run_phase(client: &Client, tag: &str, scenarios: &[Scenario], plugins: Option<(&Host, &[PluginDriver])>) -> Vec<Result<Outcome>> {
    let play = |sc: &Scenario, ns| {
        let run = sc.run;
        async move { run(&Cx { client: client.clone(), ns }).await }
    };
    driver::run_phase(client, tag, scenarios, |s| s.name, plugins, play).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn deployment_plugin_matches_kube_controller_manager() -> Result<()> {
    init_tracing();
    let host = Host::new().await?;
    let client = host.client.clone();
    // `DEPLOYMENT_PARITY_SCENARIOS=rolling-counts,adopt` runs only those (while working on one).
    let only = std::env::var("DEPLOYMENT_PARITY_SCENARIOS").ok();
    let scenarios: Vec<Scenario> =
        scenarios().into_iter().filter(|s| only.as_deref().is_none_or(|o| o.split(',').any(|n| n == s.name))).collect();
    ensure!(!scenarios.is_empty(), "DEPLOYMENT_PARITY_SCENARIOS={only:?} names no scenario");
    let kubeconfig = wasmloop_tests::kubeconfig()?;
    let dir = kubeconfig.parent().context("kubeconfig without a directory")?;

    // Phase 1: kube-controller-manager, the reference.
    let t = Instant::now();
    let flags = [&["--controllers=deployment,replicaset,garbagecollector"][..], &BUDGET[..]].concat();
    let kcm = Kcm::start(dir, &flags, &["deployment", "ReplicaSet", "garbage collector"]).await?;
    let by_kcm = run_phase(&client, "kcm", &scenarios, None).await;
    let kcm_exited = kcm.stop().err();
    eprintln!("deployment_parity: KCM phase: {:?}", t.elapsed());

    // Phase 2: the plugins, KCM running only its garbage collector.
    let t = Instant::now();
    let flags = [&["--controllers=garbagecollector"][..], &BUDGET[..]].concat();
    let gc = Kcm::start(dir, &flags, &["garbage collector"]).await?;
    let loaded = futures::future::try_join(
        PluginDriver::load("replicaset", replicaset_manifest),
        PluginDriver::load("deployment", deployment_manifest),
    )
    .await;
    let by_plugin = match loaded {
        Ok((rs, d)) => {
            let drivers = [rs, d];
            let outcomes = run_phase(&client, "wasm", &scenarios, Some((&host, &drivers))).await;
            eprintln!("deployment_parity: plugin phase: {:?}; deployment plugin {:?}", t.elapsed(), drivers[1].wasm.stats());
            outcomes
        }
        Err(e) => scenarios.iter().map(|_| Err(anyhow::anyhow!("loading the plugins: {e:#}"))).collect(),
    };
    let gc_exited = gc.stop().err();

    let mut failures: Vec<String> = kcm_exited.iter().chain(&gc_exited).map(|e| format!("{e:#}")).collect();
    for ((sc, kcm), wasm) in scenarios.iter().zip(&by_kcm).zip(&by_plugin) {
        eprintln!("deployment_parity: {:<16} KCM:    {}", sc.name, show(kcm));
        eprintln!("deployment_parity: {:<16} plugin: {}", sc.name, show(wasm));
        match kcm {
            Ok(k) => {
                if let Err(e) = (sc.expected)(k) {
                    failures.push(format!("scenario {}: KCM's outcome is not the expected one: {e:#}\n  KCM: {k}", sc.name));
                }
                let foreign: Vec<&str> = k
                    .snapshots
                    .iter()
                    .flat_map(|(_, s)| &s.sets)
                    .filter(|r| !r.hash_is_ours && r.name != "web-orphan")
                    .map(|r| r.name.as_str())
                    .collect();
                if !foreign.is_empty() {
                    failures
                        .push(format!("scenario {}: KCM named ReplicaSets {foreign:?}: not deployment::hash of their templates", sc.name));
                }
            }
            Err(e) => failures.push(format!("scenario {}: KCM: {e:#}", sc.name)),
        }
        match (kcm, wasm) {
            (Ok(k), Ok(w)) if k.same_as(w) => {
                if let Err(e) = (sc.expected)(w) {
                    failures.push(format!("scenario {}: the plugin's rollout breaks an invariant: {e:#}", sc.name));
                }
            }
            _ => failures.push(format!(
                "scenario {}: the plugins diverge from KCM\n  KCM:    {}\n  plugin: {}",
                sc.name,
                show(kcm),
                show(wasm)
            )),
        }
    }
    if !failures.is_empty() {
        bail!("{} failure(s):\n{}", failures.len(), failures.join("\n"));
    }
    Ok(())
}
