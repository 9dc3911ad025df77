//! `podset`: keeps `spec.replicas` Pods from `spec.template` for each `PodSet`
//! (`wasmloop.dev/v1alpha1`, CRD in `deploy/crds/podset.yaml`).
//!
//! Pods are named `<podset>-<n>`, taking the lowest free ordinals, so a create repeated against a
//! stale cache is an AlreadyExists (done) rather than a second Pod. Surplus Pods go highest
//! ordinal first. Pods carry the label `wasmloop.dev/podset=<name>` and a controller owner
//! reference, so deleting the PodSet garbage-collects them. `status.replicas` and
//! `status.readyReplicas` are written only when they change.
//!
//! The label is the PodSet's selector, with kube-controller-manager's claim rules: an orphan Pod
//! carrying it is adopted (a patch adding the controller reference, guarded by the Pod's uid and
//! resourceVersion), a Pod of ours that lost it is released, Pods of other controllers and
//! terminating Pods are left alone and not counted.
//!
//! This plugin shows the SDK's light path (no `k8s-openapi`): the PodSet is an
//! [`Object`] with a typed spec and the Pod template kept as JSON, and Pods are read through
//! metadata reads ([`meta`]) with one declared field, `status.conditions`, so no Pod JSON is
//! copied into the plugin or parsed there.

use std::collections::BTreeSet;
use std::time::Duration;

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value, json};
use wasmloop_sdk::meta::{self, Meta};
use wasmloop_sdk::object::Object;
use wasmloop_sdk::{Error, KindRef, Metadata, Outcome, Reconciler, Request, ResultExt, cache, kinds};

/// The reconciled kind.
pub const PODSET: KindRef = KindRef::from_static("wasmloop.dev/v1alpha1", "PodSet");
/// The label put on every Pod of a PodSet; its value is the PodSet's name.
pub const PODSET_LABEL: &str = "wasmloop.dev/podset";
/// How often a PodSet is looked at even without events.
pub const RESYNC: Duration = Duration::from_secs(30);

/// `PodSet.spec`.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PodSetSpec {
    pub replicas: i32,
    /// A Pod template (`metadata.labels`, `metadata.annotations`, `spec`), passed through as JSON.
    #[serde(default)]
    pub template: Value,
}

/// `PodSet.status`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PodSetStatus {
    #[serde(default)]
    pub replicas: i32,
    #[serde(default)]
    pub ready_replicas: Option<i32>,
}

/// A PodSet as read from the cache.
pub type PodSet = Object<PodSetSpec, PodSetStatus>;

/// The plugin's version. The `v2` feature builds a visibly different second version (its Pods
/// carry [`V2_LABEL`]) for the hot-reload tests and demo; `off-by-one` a faulty candidate that
/// keeps one Pod fewer than asked (the shadow tests: it would delete a Pod the serving version
/// keeps).
#[cfg(not(any(feature = "v2", feature = "off-by-one")))]
pub const VERSION: &str = env!("CARGO_PKG_VERSION");
#[cfg(feature = "v2")]
pub const VERSION: &str = "0.2.0";
#[cfg(all(feature = "off-by-one", not(feature = "v2")))]
pub const VERSION: &str = "0.1.1-off-by-one";
/// The label the `v2` build adds to the Pods it creates (value `v2`).
pub const V2_LABEL: &str = "wasmloop.dev/podset-version";

/// The reconciler.
pub struct PodSetReconciler;

impl Reconciler for PodSetReconciler {
    fn metadata() -> Metadata {
        Metadata::new("podset", VERSION)
            .reconciles(PODSET)
            .owns(kinds::POD)
            // Field 0 of every Pod metadata read: readiness.
            .field(kinds::POD, "status.conditions")
    }

    fn reconcile(req: Request) -> Result<Outcome, Error> {
        // Gone: owner-reference garbage collection removes its Pods. Being deleted: likewise.
        let Some(ps) = cache::get_key::<PodSet>(&req.key).context("reading the PodSet")? else {
            return Ok(Outcome::new());
        };
        if ps.metadata.is_deleting() {
            return Ok(Outcome::new());
        }
        let spec = ps.spec.as_ref().ok_or_else(|| Error::permanent("PodSet has no spec"))?;
        let desired =
            usize::try_from(spec.replicas).map_err(|_| Error::permanent(format!("spec.replicas is negative: {}", spec.replicas)))?;
        let desired = if cfg!(feature = "off-by-one") { desired.saturating_sub(1) } else { desired };
        let Some(pod_spec) = spec.template.get("spec").filter(|s| s.is_object()) else {
            return Err(Error::permanent("spec.template.spec is missing"));
        };
        let ns = req.key.ns();
        let name = &req.key.name;
        let uid = ps.metadata.uid.as_str();

        let owned = meta::owned_by(&kinds::POD, uid).context("listing the PodSet's Pods")?;
        let selector = format!("{PODSET_LABEL}={name}");
        let labelled = meta::list(&kinds::POD, ns, Some(&selector)).context("listing labelled Pods")?;
        let mut out = Outcome::new();
        let mut mine: Vec<&Meta> = Vec::new();
        for pod in &owned {
            if !pod.metadata.is_controlled_by(uid) {
                continue;
            }
            if has_label(pod, name) || pod.metadata.is_deleting() {
                mine.push(pod);
            } else {
                out = out.release(uid, &pod.object());
            }
        }
        for pod in &labelled {
            if pod.metadata.controller().is_none() && !pod.metadata.is_deleting() {
                out = out.adopt(&ps, &pod.object());
                mine.push(pod);
            }
        }
        // Names stay taken while a Pod terminates: creating one would be an AlreadyExists.
        let taken: BTreeSet<&str> = mine.iter().map(|p| p.metadata.name.as_str()).collect();
        let mut active: Vec<&Meta> = mine.into_iter().filter(|p| !p.metadata.is_deleting()).collect();
        let ready = active.iter().filter(|p| is_ready(p)).count();
        let observed = active.len();

        if observed < desired {
            let mut ordinal = 0u32;
            for _ in observed..desired {
                let pod_name = loop {
                    let candidate = format!("{name}-{ordinal}");
                    ordinal += 1;
                    // Skip names held by our Pods or by anything else in the namespace.
                    if !taken.contains(candidate.as_str()) && meta::get(&kinds::POD, ns, &candidate)?.is_none() {
                        break candidate;
                    }
                };
                out = out.create_owned(&ps, new_pod(&pod_name, name, &spec.template, pod_spec));
            }
        } else if observed > desired {
            // Pods not named <podset>-<n> first, then the highest ordinals.
            active.sort_by_key(|p| std::cmp::Reverse(ordinal_of(p, name).map_or(u64::MAX, u64::from)));
            for p in &active[..observed - desired] {
                out = out.delete_key(p.key());
            }
        }

        let status = PodSetStatus { replicas: count(observed), ready_replicas: Some(count(ready)) };
        let current = ps.status.clone().unwrap_or_default();
        if current.replicas != status.replicas || current.ready_replicas.unwrap_or(0) != count(ready) {
            out = out.status(&ps, &status);
        }
        Ok(out.requeue_after(RESYNC))
    }
}

wasmloop_sdk::export_reconciler!(PodSetReconciler);

fn count(n: usize) -> i32 {
    i32::try_from(n).unwrap_or(i32::MAX)
}

fn has_label(pod: &Meta, podset: &str) -> bool {
    pod.metadata.labels.get(PODSET_LABEL).map(String::as_str) == Some(podset)
}

/// Whether the Pod's condition `Ready` is `True`. Its conditions are read as JSON: the
/// `Value` parser is in the plugin anyway (the template), a typed one would add its own code.
fn is_ready(pod: &Meta) -> bool {
    let conditions: Value = pod.field(0).unwrap_or_default();
    conditions.as_array().into_iter().flatten().any(|c| c["type"] == "Ready" && c["status"] == "True")
}

/// `n` for a Pod named `<podset>-<n>` (canonical decimal, no leading zeros).
fn ordinal_of(pod: &Meta, podset: &str) -> Option<u32> {
    let suffix = pod.metadata.name.strip_prefix(podset)?.strip_prefix('-')?;
    let n: u32 = suffix.parse().ok()?;
    (n.to_string() == suffix).then_some(n)
}

/// A Pod named `name` from `template` (its labels plus the PodSet label, its annotations, and
/// `spec`); the owner reference is added by `create_owned`.
fn new_pod(name: &str, podset: &str, template: &Value, spec: &Value) -> Value {
    let tmeta = template.get("metadata");
    let mut labels: Map<String, Value> = tmeta.and_then(|m| m.get("labels")).and_then(Value::as_object).cloned().unwrap_or_default();
    labels.insert(PODSET_LABEL.to_owned(), podset.into());
    if cfg!(feature = "v2") {
        labels.insert(V2_LABEL.to_owned(), "v2".into());
    }
    let mut metadata = json!({"name": name, "labels": labels});
    if let Some(a) = tmeta.and_then(|m| m.get("annotations")).filter(|a| a.is_object()) {
        metadata["annotations"] = a.clone();
    }
    json!({"apiVersion": "v1", "kind": "Pod", "metadata": metadata, "spec": spec})
}

#[cfg(test)]
mod tests;
