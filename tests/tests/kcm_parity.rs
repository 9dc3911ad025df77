//! Differential test: kube-controller-manager's ReplicaSet controller (v1.20, the reference)
//! against the `replicaset` Wasm plugin, on the same real kube-apiserver.
//!
//! Every scenario of [`scenarios`] runs twice, each time in a fresh namespace:
//! 1. with kube-controller-manager running only its `replicaset` controller
//!    (`scripts/control-plane.sh kcm DIR --controllers=replicaset`), then, once KCM is stopped
//!    (it watches every namespace, so the two never run at the same time),
//! 2. with the plugin: one controller per scenario namespace, from a manifest
//!    `namespace: <ns>` with the grants an admin would give it.
//!
//! Each run is reduced to a [`Summary`] once it has settled (every ReplicaSet's
//! `status.observedGeneration` equals its `metadata.generation` and nothing changed for 2 s):
//! the Pods grouped by (controller, terminating, `role` label, `generateName`) and each
//! ReplicaSet's status counts and conditions (type, status, reason). Pod names carry random
//! suffixes and are never compared; owners are resolved by uid.
//!
//! It proves: KCM's outcome of every scenario is the hand-written expectation (so a broken KCM
//! setup cannot make the comparison vacuous), and the plugin's outcome is KCM's. Nothing runs
//! Pods here (no kubelet, no scheduler): the test binds Pods and writes their status itself.
//! One line per scenario and controller shows both summaries; all divergences are reported
//! together at the end.

use std::cell::RefCell;
use std::collections::{BTreeMap, HashMap};
use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use k8s_openapi::api::apps::v1::{ReplicaSet, ReplicaSetStatus};
use k8s_openapi::api::core::v1::{ConfigMap, Pod, ResourceQuota};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::Client;
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
use serde_json::{Value, json};
use wasmloop_tests::driver::{self, PluginDriver};
use wasmloop_tests::kcm::Kcm;
use wasmloop_tests::{Host, eventually, init_tracing};

/// How long a scenario may take to settle; past it, the last state seen is its outcome.
const SETTLE_TIMEOUT: Duration = Duration::from_secs(60);
/// How long the outcome must stay the same to count as settled.
const QUIET: Duration = Duration::from_secs(2);
/// Waits for intermediate steps (Pods to exist, a status to be reached).
const WAIT: Duration = Duration::from_secs(60);
/// How long to give a controller to observe a ReplicaSet's deletion before going on anyway.
const OBSERVE_DELETION: Duration = Duration::from_secs(10);
/// A finalizer of the test's own, to keep a Pod or ReplicaSet terminating.
const HOLD: &str = "test.wasmloop.dev/hold";
/// Pods never run; the image does not need to exist.
const IMAGE: &str = "registry.invalid/none";
/// Flags for kube-controller-manager beyond those `control-plane.sh kcm` sets.
const KCM_FLAGS: [&str; 3] = ["--controllers=replicaset", "--kube-api-qps=1000", "--kube-api-burst=1000"];

/// The plugin's manifest for one scenario namespace.
fn plugin_manifest(ns: &str) -> String {
    format!(
        "name: replicaset\nnamespace: {ns}\nconcurrency: 4\nqueue: {{qps: 1000, burst: 1000}}\napi: {{qps: 1000, burst: 1000}}\n\
         grants:\n  - kinds: [\"apps/v1/ReplicaSet\"]\n    verbs: [read, update-status]\n  - kinds: [\"v1/Pod\"]\n    verbs: [read, create, delete, patch]\n"
    )
}

// ---------------------------------------------------------------------------------------------
// The scenarios.
// ---------------------------------------------------------------------------------------------

type ScenarioFn = for<'a> fn(&'a Cx) -> Pin<Box<dyn Future<Output = Result<Summary>> + 'a>>;

struct Scenario {
    name: &'static str,
    run: ScenarioFn,
    /// KCM's outcome, written by hand from `pkg/controller/replicaset` v1.20.
    expected: fn() -> Summary,
}

const ACTIVE: bool = false;
const TERMINATING: bool = true;

fn scenarios() -> Vec<Scenario> {
    vec![
        Scenario {
            name: "scale-up",
            run: |cx| Box::pin(scale_up(cx)),
            expected: || summary(&[("ReplicaSet/web", ACTIVE, "", "web-", 5)], vec![set("web", [5, 5, 0, 0], &[])]),
        },
        Scenario {
            name: "adopt-orphans",
            run: |cx| Box::pin(adopt_orphans(cx)),
            expected: || {
                summary(
                    &[("ReplicaSet/web", ACTIVE, "", "web-", 2), ("ReplicaSet/web", ACTIVE, "orphan", "", 3)],
                    vec![set("web", [5, 5, 0, 0], &[])],
                )
            },
        },
        Scenario {
            name: "release",
            run: |cx| Box::pin(release(cx)),
            expected: || {
                summary(
                    &[("ReplicaSet/web", ACTIVE, "", "web-", 3), ("none", ACTIVE, "released", "web-", 1)],
                    vec![set("web", [3, 3, 0, 0], &[])],
                )
            },
        },
        Scenario {
            name: "foreign-controller",
            run: |cx| Box::pin(foreign_controller(cx)),
            expected: || {
                summary(
                    &[("ConfigMap/other", ACTIVE, "foreign", "", 1), ("ReplicaSet/web", ACTIVE, "", "web-", 2)],
                    vec![set("web", [2, 2, 0, 0], &[])],
                )
            },
        },
        Scenario {
            name: "terminating-not-counted",
            run: |cx| Box::pin(terminating_not_counted(cx)),
            expected: || {
                summary(
                    &[("ReplicaSet/web", ACTIVE, "", "web-", 3), ("ReplicaSet/web", TERMINATING, "held", "web-", 1)],
                    vec![set("web", [3, 3, 0, 0], &[])],
                )
            },
        },
        Scenario {
            name: "scale-down-order",
            run: |cx| Box::pin(scale_down_order(cx)),
            // Unassigned before assigned, Pending before Running, not ready before ready. The
            // bound Pod is deleted gracefully (30 s) and, with no kubelet, stays terminating.
            expected: || {
                summary(
                    &[
                        ("ReplicaSet/web", ACTIVE, "ready", "web-", 1),
                        ("ReplicaSet/web", ACTIVE, "running", "web-", 1),
                        ("ReplicaSet/web", TERMINATING, "bound", "web-", 1),
                    ],
                    vec![set("web", [2, 2, 1, 1], &[])],
                )
            },
        },
        Scenario {
            name: "replica-failure",
            run: |cx| Box::pin(replica_failure(cx)),
            expected: || {
                summary(
                    &[("ReplicaSet/web", ACTIVE, "", "web-", 2)],
                    vec![set("web", [2, 2, 0, 0], &[("ReplicaFailure", "True", "FailedCreate")])],
                )
            },
        },
        Scenario {
            name: "min-ready-seconds",
            run: |cx| Box::pin(min_ready_seconds(cx)),
            expected: || {
                summary(
                    &[("ReplicaSet/fast", ACTIVE, "", "fast-", 2), ("ReplicaSet/slow", ACTIVE, "", "slow-", 2)],
                    vec![set("fast", [2, 2, 2, 2], &[]), set("slow", [2, 2, 2, 0], &[])],
                )
            },
        },
        Scenario {
            name: "deleting-rs-does-not-adopt",
            run: |cx| Box::pin(deleting_rs_does_not_adopt(cx)),
            expected: || summary(&[("none", ACTIVE, "orphan", "", 1)], vec![set("web", [0, 0, 0, 0], &[])]),
        },
    ]
}

/// RS replicas 5 → 5 Pods named `web-…` (generateName), controlled by it.
async fn scale_up(cx: &Cx) -> Result<Summary> {
    cx.create_rs(replicaset("web", 5)).await?;
    cx.settle().await
}

/// 3 orphans matching the selector exist first; RS replicas 5 adopts them and creates 2.
///
/// "First" means the controller has seen them before it sees the ReplicaSet ([`Cx::barrier`]):
/// its Pod and ReplicaSet informers are separate watches, so without the barrier a controller
/// under load may sync the ReplicaSet before its Pod cache holds the last orphan, create 3, adopt
/// that orphan later and delete one (CI saw KCM do exactly this).
async fn adopt_orphans(cx: &Cx) -> Result<Summary> {
    for i in 0..3 {
        cx.create_pod(pod(&format!("orphan-{i}"), json!({"app": "web", "role": "orphan"}))).await?;
    }
    cx.barrier().await?;
    cx.create_rs(replicaset("web", 5)).await?;
    cx.settle().await
}

/// RS replicas 3; one of its Pods is relabeled out of the selector: released (no owner
/// reference any more) and replaced.
async fn release(cx: &Cx) -> Result<Summary> {
    cx.create_rs(replicaset("web", 3)).await?;
    let pods = cx.wait_controlled("web", 3).await?;
    cx.patch_pod(name_of(&pods[0]), json!({"metadata": {"labels": {"app": "released", "role": "released"}}})).await?;
    cx.settle().await
}

/// A Pod matching the selector but controlled by a ConfigMap exists first: neither adopted nor
/// counted; RS replicas 2 creates 2.
async fn foreign_controller(cx: &Cx) -> Result<Summary> {
    let cm: ConfigMap = serde_json::from_value(json!({"metadata": {"name": "other"}}))?;
    let cm = Api::<ConfigMap>::namespaced(cx.client.clone(), &cx.ns).create(&PostParams::default(), &cm).await?;
    let mut p = pod("foreign", json!({"app": "web", "role": "foreign"}));
    p["metadata"]["ownerReferences"] = json!([{
        "apiVersion": "v1", "kind": "ConfigMap", "name": "other",
        "uid": cm.metadata.uid.context("ConfigMap without uid")?, "controller": true,
    }]);
    cx.create_pod(p).await?;
    cx.create_rs(replicaset("web", 2)).await?;
    cx.settle().await
}

/// RS replicas 3; one Pod, held by a finalizer, is deleted: it stays terminating, is not
/// counted, and is replaced.
async fn terminating_not_counted(cx: &Cx) -> Result<Summary> {
    cx.create_rs(replicaset("web", 3)).await?;
    let pods = cx.wait_controlled("web", 3).await?;
    let held = name_of(&pods[0]).to_string();
    cx.patch_pod(&held, json!({"metadata": {"finalizers": [HOLD], "labels": {"role": "held"}}})).await?;
    cx.pods().delete(&held, &DeleteParams::default()).await?;
    let outcome = cx.settle().await;
    cx.patch_pod(&held, json!({"metadata": {"finalizers": null}})).await?;
    outcome
}

/// RS replicas 4; the Pods are made unassigned / bound / running / ready; scaled to 2, the
/// running and the ready one survive.
async fn scale_down_order(cx: &Cx) -> Result<Summary> {
    cx.create_rs(replicaset("web", 4)).await?;
    let pods = cx.wait_controlled("web", 4).await?;
    let [unassigned, bound, running, ready] = [0, 1, 2, 3].map(|i| name_of(&pods[i]).to_string());
    for (name, role) in [(&unassigned, "unassigned"), (&bound, "bound"), (&running, "running"), (&ready, "ready")] {
        cx.patch_pod(name, json!({"metadata": {"labels": {"role": role}}})).await?;
    }
    for name in [&bound, &running, &ready] {
        cx.bind(name).await?;
    }
    cx.set_running(&running, false).await?;
    cx.set_running(&ready, true).await?; // last: seeing it means the controller saw the others
    cx.wait_status("web", "readyReplicas 1", WAIT, |s| s.ready_replicas.unwrap_or(0) == 1).await?;
    cx.sets().patch("web", &PatchParams::default(), &Patch::Merge(json!({"spec": {"replicas": 2}}))).await?;
    cx.settle().await
}

/// A ResourceQuota of 2 Pods (its status written by the test: no quota controller runs); RS
/// replicas 3 → 2 Pods and the condition ReplicaFailure/True/FailedCreate.
async fn replica_failure(cx: &Cx) -> Result<Summary> {
    let quotas = Api::<ResourceQuota>::namespaced(cx.client.clone(), &cx.ns);
    let quota: ResourceQuota = serde_json::from_value(json!({"metadata": {"name": "pods"}, "spec": {"hard": {"pods": "2"}}}))?;
    quotas.create(&PostParams::default(), &quota).await?;
    quotas
        .patch_status("pods", &PatchParams::default(), &Patch::Merge(json!({"status": {"hard": {"pods": "2"}, "used": {"pods": "0"}}})))
        .await?;
    cx.create_rs(replicaset("web", 3)).await?;
    cx.settle().await
}

/// Two RSs of 2 with minReadySeconds 3600 and 0, all Pods bound, Running and Ready: all ready,
/// only the second's available.
async fn min_ready_seconds(cx: &Cx) -> Result<Summary> {
    for (name, min_ready) in [("slow", 3600), ("fast", 0)] {
        let mut rs = replicaset(name, 2);
        rs["spec"]["minReadySeconds"] = min_ready.into();
        cx.create_rs(rs).await?;
    }
    for name in ["slow", "fast"] {
        for p in cx.wait_controlled(name, 2).await? {
            cx.bind(name_of(&p)).await?;
            cx.set_running(name_of(&p), true).await?;
        }
    }
    cx.settle().await
}

/// RS replicas 1 held by a finalizer is deleted; then an orphan matching it appears and its own
/// Pod is deleted: no adoption, no replacement.
async fn deleting_rs_does_not_adopt(cx: &Cx) -> Result<Summary> {
    let mut rs = replicaset("web", 1);
    rs["metadata"]["finalizers"] = json!([HOLD]);
    cx.create_rs(rs).await?;
    let own = name_of(&cx.wait_controlled("web", 1).await?[0]).to_string();
    cx.sets().delete("web", &DeleteParams::default()).await?;
    // The deletion bumps the generation; once the controller has observed it, it knows. (If it
    // never does, the outcome below shows it.)
    if let Err(e) = cx.wait_status("web", "the deletion observed", OBSERVE_DELETION, |_| true).await {
        eprintln!("kcm_parity: {}: {e:#}; going on", cx.ns);
    }
    cx.create_pod(pod("orphan", json!({"app": "web", "role": "orphan"}))).await?;
    cx.pods().delete(&own, &DeleteParams::default()).await?;
    let outcome = cx.settle().await;
    cx.sets().patch("web", &PatchParams::default(), &Patch::Merge(json!({"metadata": {"finalizers": null}}))).await?;
    outcome
}

// ---------------------------------------------------------------------------------------------
// Objects and steps.
// ---------------------------------------------------------------------------------------------

fn pod_spec() -> Value {
    json!({"containers": [{"name": "c", "image": IMAGE}]})
}

/// A ReplicaSet selecting and labelling `app: <name>`.
fn replicaset(name: &str, replicas: i32) -> Value {
    json!({
        "metadata": {"name": name},
        "spec": {"replicas": replicas, "selector": {"matchLabels": {"app": name}},
                 "template": {"metadata": {"labels": {"app": name}}, "spec": pod_spec()}}
    })
}

fn pod(name: &str, labels: Value) -> Value {
    json!({"metadata": {"name": name, "labels": labels}, "spec": pod_spec()})
}

fn name_of(p: &Pod) -> &str {
    p.metadata.name.as_deref().unwrap_or_default()
}

fn controller_uid(p: &Pod) -> Option<&str> {
    p.metadata.owner_references.iter().flatten().find(|o| o.controller == Some(true)).map(|o| o.uid.as_str())
}

/// One scenario run: its namespace and client.
struct Cx {
    client: Client,
    ns: String,
}

impl Cx {
    fn pods(&self) -> Api<Pod> {
        Api::namespaced(self.client.clone(), &self.ns)
    }

    fn sets(&self) -> Api<ReplicaSet> {
        Api::namespaced(self.client.clone(), &self.ns)
    }

    async fn create_rs(&self, rs: Value) -> Result<()> {
        self.sets().create(&PostParams::default(), &serde_json::from_value(rs)?).await?;
        Ok(())
    }

    async fn create_pod(&self, pod: Value) -> Result<()> {
        self.pods().create(&PostParams::default(), &serde_json::from_value(pod)?).await?;
        Ok(())
    }

    async fn patch_pod(&self, name: &str, patch: Value) -> Result<()> {
        self.pods().patch(name, &PatchParams::default(), &Patch::Merge(patch)).await?;
        Ok(())
    }

    /// `spec.nodeName` through the `binding` subresource, as a scheduler would.
    async fn bind(&self, name: &str) -> Result<()> {
        let binding = json!({"apiVersion": "v1", "kind": "Binding", "metadata": {"name": name},
                             "target": {"apiVersion": "v1", "kind": "Node", "name": "node-1"}});
        self.pods()
            .create_subresource::<_, Value>("binding", name, &PostParams::default(), &binding)
            .await
            .with_context(|| format!("binding {name}"))?;
        Ok(())
    }

    /// Phase Running, and Ready since now if `ready`, as a kubelet would report.
    async fn set_running(&self, name: &str, ready: bool) -> Result<()> {
        let conditions = if ready {
            json!([{"type": "Ready", "status": "True", "lastTransitionTime": Time(k8s_openapi::jiff::Timestamp::now())}])
        } else {
            json!([])
        };
        self.pods()
            .patch_status(name, &PatchParams::default(), &Patch::Merge(json!({"status": {"phase": "Running", "conditions": conditions}})))
            .await?;
        Ok(())
    }

    /// Wait until exactly `n` active Pods are controlled by ReplicaSet `rs` (by uid); sorted by name.
    async fn wait_controlled(&self, rs: &str, n: usize) -> Result<Vec<Pod>> {
        eventually(&format!("{n} active Pods controlled by ReplicaSet {rs} in {}", self.ns), WAIT, || async move {
            let uid = self.sets().get(rs).await?.metadata.uid.context("ReplicaSet without uid")?;
            let mut pods: Vec<Pod> = (self.pods().list(&ListParams::default()).await?.items.into_iter())
                .filter(|p| p.metadata.deletion_timestamp.is_none() && controller_uid(p) == Some(uid.as_str()))
                .collect();
            pods.sort_by(|a, b| a.metadata.name.cmp(&b.metadata.name));
            Ok((pods.len() == n).then_some(pods))
        })
        .await
    }

    /// Wait until the controller's Pod cache holds every Pod created so far, then leave nothing
    /// behind: a ReplicaSet `barrier` of 1 replica is created, and its status counting its Pod
    /// proves the controller's Pod watch delivered that Pod, hence every earlier one (a watch
    /// delivers events in resourceVersion order); it is then scaled to 0 (the controller deletes
    /// the Pod; unscheduled, it goes at once) and deleted.
    async fn barrier(&self) -> Result<()> {
        const NAME: &str = "barrier";
        self.create_rs(replicaset(NAME, 1)).await?;
        self.wait_status(NAME, "its Pod counted", WAIT, |s| s.replicas == 1).await?;
        self.sets().patch(NAME, &PatchParams::default(), &Patch::Merge(json!({"spec": {"replicas": 0}}))).await?;
        self.wait_status(NAME, "scaled to 0", WAIT, |s| s.replicas == 0).await?;
        self.sets().delete(NAME, &DeleteParams::default()).await?;
        Ok(())
    }

    /// Wait until ReplicaSet `rs` has observed its current generation and `check` holds.
    async fn wait_status(&self, rs: &str, what: &str, timeout: Duration, check: impl Fn(&ReplicaSetStatus) -> bool) -> Result<()> {
        let check = &check;
        eventually(&format!("ReplicaSet {rs} in {}: {what}", self.ns), timeout, || async move {
            let rs = self.sets().get(rs).await?;
            let status = rs.status.unwrap_or_default();
            Ok((status.observed_generation.is_some() && status.observed_generation == rs.metadata.generation && check(&status))
                .then_some(()))
        })
        .await
    }

    /// The outcome once settled: every ReplicaSet has observed its generation and the summary
    /// stayed the same for [`QUIET`]. Past [`SETTLE_TIMEOUT`], the last summary seen (which then
    /// shows what did not settle).
    async fn settle(&self) -> Result<Summary> {
        let last: RefCell<Option<(Summary, Instant)>> = RefCell::new(None);
        let last = &last;
        let settled = eventually(&format!("{} to settle", self.ns), SETTLE_TIMEOUT, || async move {
            let now = Summary::of(self).await?;
            let mut last = last.borrow_mut();
            match &*last {
                Some((before, since)) if *before == now => Ok((now.observed() && since.elapsed() >= QUIET).then_some(now)),
                _ => {
                    *last = Some((now, Instant::now()));
                    Ok(None)
                }
            }
        })
        .await;
        match (settled, last.take()) {
            (Ok(summary), _) => Ok(summary),
            (Err(e), Some((summary, _))) => {
                eprintln!("kcm_parity: {}: {e:#}; taking the last state seen", self.ns);
                Ok(summary)
            }
            (Err(e), None) => Err(e),
        }
    }
}

// ---------------------------------------------------------------------------------------------
// The outcome of a scenario.
// ---------------------------------------------------------------------------------------------

/// Pods with the same row are counted together.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
struct PodRow {
    /// `Kind/name` of the object the controller reference points at (resolved by uid among the
    /// namespace's ReplicaSets and ConfigMaps), or `none`.
    controller: String,
    terminating: bool,
    /// The test's `role` label, or "".
    role: String,
    /// `metadata.generateName`, or "".
    generate_name: String,
}

#[derive(Clone, Debug, PartialEq, Eq)]
struct SetStatus {
    name: String,
    /// `replicas`, `fullyLabeledReplicas`, `readyReplicas`, `availableReplicas` (absent = 0).
    counts: [i32; 4],
    /// `status.observedGeneration == metadata.generation`.
    observed: bool,
    /// (type, status, reason), sorted.
    conditions: Vec<(String, String, String)>,
}

#[derive(Clone, Debug, PartialEq, Eq)]
struct Summary {
    pods: BTreeMap<PodRow, usize>,
    /// By name.
    sets: Vec<SetStatus>,
}

impl Summary {
    async fn of(cx: &Cx) -> Result<Self> {
        let lp = ListParams::default();
        let sets = cx.sets().list(&lp).await?.items;
        let pods = cx.pods().list(&lp).await?.items;
        let mut owners: HashMap<String, String> = HashMap::new();
        for rs in &sets {
            owners.insert(
                rs.metadata.uid.clone().unwrap_or_default(),
                format!("ReplicaSet/{}", rs.metadata.name.as_deref().unwrap_or_default()),
            );
        }
        let foreign = |p: &Pod| controller_uid(p).is_some_and(|uid| !owners.contains_key(uid));
        if pods.iter().any(foreign) {
            for cm in Api::<ConfigMap>::namespaced(cx.client.clone(), &cx.ns).list(&lp).await?.items {
                owners.insert(
                    cm.metadata.uid.clone().unwrap_or_default(),
                    format!("ConfigMap/{}", cm.metadata.name.as_deref().unwrap_or_default()),
                );
            }
        }
        let mut rows = BTreeMap::new();
        for p in &pods {
            let controller = match p.metadata.owner_references.iter().flatten().find(|o| o.controller == Some(true)) {
                None => "none".to_string(),
                Some(o) => owners.get(&o.uid).cloned().unwrap_or_else(|| format!("{}/{}(unknown uid)", o.kind, o.name)),
            };
            let row = PodRow {
                controller,
                terminating: p.metadata.deletion_timestamp.is_some(),
                role: p.metadata.labels.as_ref().and_then(|l| l.get("role")).cloned().unwrap_or_default(),
                generate_name: p.metadata.generate_name.clone().unwrap_or_default(),
            };
            *rows.entry(row).or_default() += 1;
        }
        let mut statuses: Vec<SetStatus> = sets
            .iter()
            .map(|rs| {
                let s = rs.status.clone().unwrap_or_default();
                let mut conditions: Vec<_> = s
                    .conditions
                    .iter()
                    .flatten()
                    .map(|c| (c.type_.clone(), c.status.clone(), c.reason.clone().unwrap_or_default()))
                    .collect();
                conditions.sort();
                SetStatus {
                    name: rs.metadata.name.clone().unwrap_or_default(),
                    counts: [
                        s.replicas,
                        s.fully_labeled_replicas.unwrap_or(0),
                        s.ready_replicas.unwrap_or(0),
                        s.available_replicas.unwrap_or(0),
                    ],
                    observed: s.observed_generation.is_some() && s.observed_generation == rs.metadata.generation,
                    conditions,
                }
            })
            .collect();
        statuses.sort_by(|a, b| a.name.cmp(&b.name));
        Ok(Self { pods: rows, sets: statuses })
    }

    /// Whether every ReplicaSet has observed its generation (and there is one).
    fn observed(&self) -> bool {
        !self.sets.is_empty() && self.sets.iter().all(|s| s.observed)
    }
}

/// A hand-written summary: (controller, terminating, role, generateName, count) rows.
fn summary(pods: &[(&str, bool, &str, &str, usize)], sets: Vec<SetStatus>) -> Summary {
    let pods = pods
        .iter()
        .map(|&(controller, terminating, role, generate_name, n)| {
            (PodRow { controller: controller.into(), terminating, role: role.into(), generate_name: generate_name.into() }, n)
        })
        .collect();
    Summary { pods, sets }
}

/// A hand-written, observed ReplicaSet status: [replicas, fullyLabeled, ready, available].
fn set(name: &str, counts: [i32; 4], conditions: &[(&str, &str, &str)]) -> SetStatus {
    let mut conditions: Vec<_> = conditions.iter().map(|&(t, s, r)| (t.into(), s.into(), r.into())).collect();
    conditions.sort();
    SetStatus { name: name.into(), counts, observed: true, conditions }
}

impl fmt::Display for Summary {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "pods[")?;
        for (i, (row, n)) in self.pods.iter().enumerate() {
            let sep = if i > 0 { ", " } else { "" };
            write!(f, "{sep}{n}× {}{}", row.controller, if row.terminating { " terminating" } else { "" })?;
            if !row.role.is_empty() {
                write!(f, " role={}", row.role)?;
            }
            if !row.generate_name.is_empty() {
                write!(f, " generateName={}", row.generate_name)?;
            }
        }
        write!(f, "] rs[")?;
        for (i, s) in self.sets.iter().enumerate() {
            let [replicas, fully, ready, available] = s.counts;
            let sep = if i > 0 { ", " } else { "" };
            write!(f, "{sep}{}: replicas={replicas} fullyLabeled={fully} ready={ready} available={available}", s.name)?;
            if !s.observed {
                write!(f, " observedGeneration-behind")?;
            }
            for (t, st, r) in &s.conditions {
                write!(f, " {t}={st}/{r}")?;
            }
        }
        write!(f, "]")
    }
}

fn show(outcome: &Result<Summary>) -> String {
    match outcome {
        Ok(s) => s.to_string(),
        Err(e) => format!("ERROR {e:#}"),
    }
}

// ---------------------------------------------------------------------------------------------
// The two controllers.
// ---------------------------------------------------------------------------------------------

/// Every scenario at once, each in a namespace of its own, with `plugin` or with KCM
/// ([`driver::run_phase`]).
async fn run_phase(client: &Client, tag: &str, scenarios: &[Scenario], plugin: Option<(&Host, &PluginDriver)>) -> Vec<Result<Summary>> {
    let plugins = plugin.map(|(h, p)| (h, std::slice::from_ref(p)));
    let play = |sc: &Scenario, ns| {
        let run = sc.run;
        async move { run(&Cx { client: client.clone(), ns }).await }
    };
    driver::run_phase(client, tag, scenarios, |s| s.name, plugins, play).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn replicaset_plugin_matches_kube_controller_manager() -> Result<()> {
    init_tracing();
    let host = Host::new().await?;
    let client = host.client.clone();
    let scenarios = scenarios();
    let kubeconfig = wasmloop_tests::kubeconfig()?;
    let dir = kubeconfig.parent().context("kubeconfig without a directory")?;

    // Phase 1: kube-controller-manager, the reference.
    let t = Instant::now();
    let kcm = Kcm::start(dir, &KCM_FLAGS, &["ReplicaSet"]).await?;
    let by_kcm = run_phase(&client, "kcm", &scenarios, None).await;
    let kcm_exited = kcm.stop().err();
    eprintln!("kcm_parity: KCM phase: {:?}", t.elapsed());

    // Phase 2: the plugin, KCM stopped.
    let t = Instant::now();
    let by_plugin = match PluginDriver::load("replicaset", plugin_manifest).await {
        Ok(plugin) => {
            let outcomes = run_phase(&client, "wasm", &scenarios, Some((&host, &plugin))).await;
            eprintln!("kcm_parity: plugin phase: {:?}; plugin {:?}", t.elapsed(), plugin.wasm.stats());
            outcomes
        }
        // Still check and show KCM's outcomes.
        Err(e) => scenarios.iter().map(|_| Err(anyhow::anyhow!("loading the plugin: {e:#}"))).collect(),
    };

    let mut failures: Vec<String> = kcm_exited.iter().map(|e| format!("{e:#}")).collect();
    for ((sc, kcm), wasm) in scenarios.iter().zip(&by_kcm).zip(&by_plugin) {
        eprintln!("kcm_parity: {:<27} KCM:    {}", sc.name, show(kcm));
        eprintln!("kcm_parity: {:<27} plugin: {}", sc.name, show(wasm));
        let expected = (sc.expected)();
        match kcm {
            Ok(k) if *k == expected => {}
            _ => failures.push(format!(
                "scenario {}: KCM's outcome is not the expected one\n  expected: {expected}\n  KCM:      {}",
                sc.name,
                show(kcm)
            )),
        }
        match (kcm, wasm) {
            (Ok(k), Ok(w)) if k == w => {}
            _ => failures.push(format!(
                "scenario {}: the plugin diverges from KCM\n  KCM:    {}\n  plugin: {}",
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
