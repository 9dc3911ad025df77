//! `replicaset`: the `apps/v1` ReplicaSet controller as a wasmloop plugin.
//!
//! It keeps `spec.replicas` Pods from `spec.template`, owned by the ReplicaSet (controller owner
//! reference), and reports `status.replicas`, `fullyLabeledReplicas`, `readyReplicas`,
//! `availableReplicas` (only when `minReadySeconds` is 0) and `observedGeneration`, writing status
//! only when it changes.
//!
//! Differences from kube-controller-manager's controller:
//! - Pods are named `<replicaset>-<n>` with the lowest free ordinals, where KCM uses
//!   `generateName` (random suffixes). A create repeated against a stale cache is then an
//!   AlreadyExists, which the host counts as done, instead of a surplus Pod.
//! - Surplus Pods are deleted highest ordinal first (KCM ranks by readiness and age).
//! - Orphans matching the selector are not adopted, and owned Pods that stop matching are
//!   ignored rather than released.
//!
//! Pods are parsed into small borrowed structs (only name, labels, owner references, deletion
//! timestamp and the Ready condition), which is several times cheaper than `serde_json::Value`
//! or `k8s-openapi` types (see the `parse_cost` measurement in `src/tests.rs`).

use std::borrow::{Borrow, Cow};
use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::time::Duration;

use serde::Deserialize;
use serde::de::{IgnoredAny, Visitor};
use serde_json::{Map, Value, json};
use wasmloop_sdk::{
    Action, Error, Metadata, Outcome, Reconciler, Request, ResultExt, cache, kinds,
};

/// How often a ReplicaSet is looked at even without events.
pub const RESYNC: Duration = Duration::from_secs(30);

/// The reconciler.
pub struct ReplicaSetReconciler;

impl Reconciler for ReplicaSetReconciler {
    fn metadata() -> Metadata {
        Metadata::new("replicaset", env!("CARGO_PKG_VERSION"))
            .reconciles(kinds::REPLICA_SET)
            .owns(kinds::POD)
    }

    fn reconcile(req: Request) -> Result<Outcome, Error> {
        let Some(raw) = cache::get_raw(&req.key.kind, req.key.ns(), &req.key.name)? else {
            return Ok(Outcome::new()); // Gone: garbage collection removes its Pods.
        };
        let rs: ReplicaSet = serde_json::from_str(&raw).context("parsing the ReplicaSet")?;
        if rs.metadata.deletion_timestamp.is_some() {
            return Ok(Outcome::new());
        }
        let desired = usize::try_from(rs.spec.replicas.unwrap_or(1)).map_err(|_| {
            Error::permanent(format!("spec.replicas is negative: {:?}", rs.spec.replicas))
        })?;
        let selector = &rs.spec.selector;
        selector.validate().map_err(Error::permanent)?;
        let ns = req.key.ns();
        let name = req.key.name.as_str();
        let uid = rs.metadata.uid.0.as_ref();

        let raw_pods =
            cache::by_index_raw(&kinds::POD, cache::OWNER_INDEX, uid).context("listing Pods")?;
        let mut mine: Vec<PodLite<'_>> = Vec::with_capacity(raw_pods.len());
        for raw in &raw_pods {
            let pod: PodLite<'_> = serde_json::from_str(raw).context("parsing a Pod")?;
            if pod.metadata.is_controlled_by(uid) {
                mine.push(pod);
            }
        }
        // Names stay taken while a Pod terminates: creating one would be an AlreadyExists.
        let taken: BTreeSet<&str> = mine.iter().map(|p| p.metadata.name.0.as_ref()).collect();
        let mut active: Vec<&PodLite<'_>> = mine
            .iter()
            .filter(|p| {
                p.metadata.deletion_timestamp.is_none() && selector.matches(&p.metadata.labels)
            })
            .collect();
        let template_labels = rs.spec.template.metadata.labels.as_ref();
        let observed = active.len();
        let fully_labeled = active
            .iter()
            .filter(|p| has_all(&p.metadata.labels, template_labels))
            .count();
        let ready = active.iter().filter(|p| p.is_ready()).count();

        let mut out = Outcome::new();
        if observed < desired {
            let owner = json!([{
                "apiVersion": "apps/v1", "kind": "ReplicaSet", "name": name, "uid": uid,
                "controller": true, "blockOwnerDeletion": true,
            }]);
            let mut ordinal = 0u32;
            for _ in observed..desired {
                let pod_name = loop {
                    let candidate = format!("{name}-{ordinal}");
                    ordinal += 1;
                    if !taken.contains(candidate.as_str())
                        && cache::get_raw(&kinds::POD, ns, &candidate)?.is_none()
                    {
                        break candidate;
                    }
                };
                out.push(Action::Create(new_pod(
                    &pod_name,
                    ns,
                    &rs.spec.template,
                    &owner,
                )));
            }
        } else if observed > desired {
            // Pods not named <replicaset>-<n> first, then the highest ordinals.
            active.sort_by_key(|p| {
                std::cmp::Reverse(ordinal_of(&p.metadata.name.0, name).map_or(u64::MAX, u64::from))
            });
            for p in &active[..observed - desired] {
                out = out.delete_key(kinds::POD.key(ns, p.metadata.name.0.as_ref()));
            }
        }

        let available = (rs.spec.min_ready_seconds.unwrap_or(0) == 0).then_some(ready);
        let status = Status {
            replicas: observed,
            fully_labeled,
            ready,
            available,
            observed_generation: rs.metadata.generation,
        };
        if !status.matches(rs.status.as_ref()) {
            out = out.status_key(req.key.clone(), status.to_json());
        }
        Ok(out.requeue_after(RESYNC))
    }
}

wasmloop_sdk::export_reconciler!(ReplicaSetReconciler);

/// The parts of a ReplicaSet the controller reads.
#[derive(Deserialize)]
struct ReplicaSet<'a> {
    #[serde(borrow)]
    metadata: Meta<'a>,
    spec: RsSpec,
    #[serde(default)]
    status: Option<RsStatus>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct RsSpec {
    #[serde(default)]
    replicas: Option<i64>,
    #[serde(default)]
    min_ready_seconds: Option<i64>,
    #[serde(default)]
    selector: LabelSelector,
    #[serde(default)]
    template: Template,
}

#[derive(Default, Deserialize)]
struct Template {
    #[serde(default)]
    metadata: TemplateMeta,
    #[serde(default)]
    spec: Option<Value>,
}

#[derive(Default, Deserialize)]
struct TemplateMeta {
    #[serde(default)]
    labels: Option<Map<String, Value>>,
    #[serde(default)]
    annotations: Option<Map<String, Value>>,
}

#[derive(Default, Deserialize)]
#[serde(rename_all = "camelCase")]
struct RsStatus {
    #[serde(default)]
    replicas: Option<i64>,
    #[serde(default)]
    fully_labeled_replicas: Option<i64>,
    #[serde(default)]
    ready_replicas: Option<i64>,
    #[serde(default)]
    available_replicas: Option<i64>,
    #[serde(default)]
    observed_generation: Option<i64>,
}

/// `metav1.LabelSelector`.
#[derive(Default, Deserialize)]
#[serde(rename_all = "camelCase")]
struct LabelSelector {
    #[serde(default)]
    match_labels: BTreeMap<String, String>,
    #[serde(default)]
    match_expressions: Vec<SelectorRequirement>,
}

#[derive(Deserialize)]
struct SelectorRequirement {
    key: String,
    operator: String,
    #[serde(default)]
    values: Vec<String>,
}

impl LabelSelector {
    fn validate(&self) -> Result<(), String> {
        if self.match_labels.is_empty() && self.match_expressions.is_empty() {
            return Err("spec.selector is empty: it would select every Pod".into());
        }
        for r in &self.match_expressions {
            match r.operator.as_str() {
                "In" | "NotIn" if r.values.is_empty() => {
                    return Err(format!("selector {}: {} needs values", r.key, r.operator));
                }
                "In" | "NotIn" | "Exists" | "DoesNotExist" => {}
                other => return Err(format!("selector {}: unknown operator {other:?}", r.key)),
            }
        }
        Ok(())
    }

    fn matches(&self, labels: &BTreeMap<Str<'_>, Str<'_>>) -> bool {
        let get = |k: &str| labels.get(k).map(|v| v.0.as_ref());
        self.match_labels
            .iter()
            .all(|(k, v)| get(k) == Some(v.as_str()))
            && self.match_expressions.iter().all(|r| {
                let v = get(&r.key);
                match r.operator.as_str() {
                    "In" => v.is_some_and(|v| r.values.iter().any(|x| x == v)),
                    "NotIn" => v.is_none_or(|v| r.values.iter().all(|x| x != v)),
                    "Exists" => v.is_some(),
                    "DoesNotExist" => v.is_none(),
                    _ => false,
                }
            })
    }
}

/// The parts of object metadata the controller reads, borrowing from the JSON text.
#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Meta<'a> {
    #[serde(borrow, default)]
    name: Str<'a>,
    #[serde(borrow, default)]
    uid: Str<'a>,
    #[serde(default)]
    generation: Option<i64>,
    #[serde(borrow, default)]
    labels: BTreeMap<Str<'a>, Str<'a>>,
    #[serde(borrow, default)]
    owner_references: Vec<OwnerRef<'a>>,
    #[serde(default)]
    deletion_timestamp: Option<IgnoredAny>,
}

#[derive(Deserialize)]
struct OwnerRef<'a> {
    #[serde(borrow)]
    uid: Str<'a>,
    #[serde(default)]
    controller: Option<bool>,
}

impl Meta<'_> {
    fn is_controlled_by(&self, uid: &str) -> bool {
        self.owner_references
            .iter()
            .any(|r| r.controller == Some(true) && r.uid.0 == uid)
    }
}

/// The parts of a Pod the controller reads.
#[derive(Deserialize)]
struct PodLite<'a> {
    #[serde(borrow)]
    metadata: Meta<'a>,
    #[serde(borrow, default)]
    status: Option<PodStatusLite<'a>>,
}

#[derive(Deserialize)]
struct PodStatusLite<'a> {
    #[serde(borrow, default)]
    conditions: Vec<Condition<'a>>,
}

#[derive(Deserialize)]
struct Condition<'a> {
    #[serde(borrow, rename = "type")]
    type_: Str<'a>,
    #[serde(borrow)]
    status: Str<'a>,
}

impl PodLite<'_> {
    fn is_ready(&self) -> bool {
        self.status.as_ref().is_some_and(|s| {
            s.conditions
                .iter()
                .any(|c| c.type_.0 == "Ready" && c.status.0 == "True")
        })
    }
}

/// A string borrowed from the JSON text when it has no escapes (names, UIDs and labels never
/// do), owned otherwise. Unlike `Cow` inside a map, it borrows wherever it appears.
#[derive(Default, PartialEq, Eq, PartialOrd, Ord)]
struct Str<'a>(Cow<'a, str>);

impl Borrow<str> for Str<'_> {
    fn borrow(&self) -> &str {
        &self.0
    }
}

impl<'de: 'a, 'a> Deserialize<'de> for Str<'a> {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Str<'de>;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a string")
            }
            fn visit_borrowed_str<E>(self, v: &'de str) -> Result<Str<'de>, E> {
                Ok(Str(Cow::Borrowed(v)))
            }
            fn visit_str<E>(self, v: &str) -> Result<Str<'de>, E> {
                Ok(Str(Cow::Owned(v.to_owned())))
            }
        }
        d.deserialize_str(V)
    }
}

fn has_all(labels: &BTreeMap<Str<'_>, Str<'_>>, wanted: Option<&Map<String, Value>>) -> bool {
    wanted.is_none_or(|w| {
        w.iter()
            .all(|(k, v)| labels.get(k.as_str()).map(|x| x.0.as_ref()) == v.as_str())
    })
}

/// `n` for a Pod named `<replicaset>-<n>` (canonical decimal, no leading zeros).
fn ordinal_of(pod: &str, rs: &str) -> Option<u32> {
    let suffix = pod.strip_prefix(rs)?.strip_prefix('-')?;
    let n: u32 = suffix.parse().ok()?;
    (n.to_string() == suffix).then_some(n)
}

fn new_pod(name: &str, ns: Option<&str>, template: &Template, owner: &Value) -> Value {
    let mut meta = Map::new();
    meta.insert("name".into(), name.into());
    if let Some(ns) = ns {
        meta.insert("namespace".into(), ns.into());
    }
    if let Some(l) = &template.metadata.labels {
        meta.insert("labels".into(), Value::Object(l.clone()));
    }
    if let Some(a) = &template.metadata.annotations {
        meta.insert("annotations".into(), Value::Object(a.clone()));
    }
    meta.insert("ownerReferences".into(), owner.clone());
    let mut pod = Map::new();
    pod.insert("apiVersion".into(), "v1".into());
    pod.insert("kind".into(), "Pod".into());
    pod.insert("metadata".into(), Value::Object(meta));
    pod.insert(
        "spec".into(),
        template.spec.clone().unwrap_or_else(|| json!({})),
    );
    Value::Object(pod)
}

/// The status this reconcile observed.
struct Status {
    replicas: usize,
    fully_labeled: usize,
    ready: usize,
    /// `None` when `minReadySeconds` > 0: availability needs a clock, so it is left as it is.
    available: Option<usize>,
    observed_generation: Option<i64>,
}

impl Status {
    fn matches(&self, current: Option<&RsStatus>) -> bool {
        let empty = RsStatus::default();
        let c = current.unwrap_or(&empty);
        let n = |v: Option<i64>| v.unwrap_or(0);
        n(c.replicas) == self.replicas as i64
            && n(c.fully_labeled_replicas) == self.fully_labeled as i64
            && n(c.ready_replicas) == self.ready as i64
            && self
                .available
                .is_none_or(|a| n(c.available_replicas) == a as i64)
            && (self.observed_generation.is_none()
                || c.observed_generation == self.observed_generation)
    }

    fn to_json(&self) -> Value {
        let mut s = json!({
            "replicas": self.replicas,
            "fullyLabeledReplicas": self.fully_labeled,
            "readyReplicas": self.ready,
        });
        if let Some(a) = self.available {
            s["availableReplicas"] = a.into();
        }
        if let Some(g) = self.observed_generation {
            s["observedGeneration"] = g.into();
        }
        s
    }
}

#[cfg(test)]
mod tests;
