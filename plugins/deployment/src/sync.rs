//! One sync of one Deployment: KCM's `syncDeployment` (`sync.go`), on local copies of the
//! Deployment and its ReplicaSets that change as KCM's do after each of its writes, with the
//! writes collected into one outcome ([`Sync::into_outcome`]).
//!
//! KCM writes as it goes (an RS update, a status update, another status update...), each write
//! with the resourceVersion it read; the second write of the same object in one sync then fails
//! with a conflict and the sync is retried. Here the writes of one object are merged: a
//! ReplicaSet gets one patch with everything this sync changed in it, the Deployment one status
//! patch (its revision annotation included, as KCM writes it through `/status`), each guarded by
//! the resourceVersion read, so a stale view still conflicts as KCM's does.

use std::collections::BTreeMap;
use std::time::Duration;

use serde_json::{Value, json};
use wasmloop_sdk::{Deletion, Error, EventType, ObjectKey, Outcome, Patch, kinds};

use crate::annotations::{self, Annotations};
use crate::hash;
use crate::model::{Condition, Deployment, DeploymentStatus, ReplicaSet};
use crate::replicas::{self, BadIntOrPercent};
use crate::template;

/// Condition types and reasons (`deploymentutil`).
pub mod reason {
    /// Condition type: enough Pods are available.
    pub const AVAILABLE: &str = "Available";
    /// Condition type: the rollout makes progress.
    pub const PROGRESSING: &str = "Progressing";
    /// Condition type: a ReplicaSet cannot create or delete Pods.
    pub const REPLICA_FAILURE: &str = "ReplicaFailure";
    /// The new ReplicaSet gained, or old ones lost, Pods.
    pub const RS_UPDATED: &str = "ReplicaSetUpdated";
    /// The new ReplicaSet could not be created.
    pub const FAILED_RS_CREATE: &str = "ReplicaSetCreateError";
    /// The new ReplicaSet was created.
    pub const NEW_RS: &str = "NewReplicaSetCreated";
    /// The new ReplicaSet was found (progress is tracked from now).
    pub const FOUND_NEW_RS: &str = "FoundNewReplicaSet";
    /// The rollout is complete.
    pub const NEW_RS_AVAILABLE: &str = "NewReplicaSetAvailable";
    /// No progress within `progressDeadlineSeconds`.
    pub const TIMED_OUT: &str = "ProgressDeadlineExceeded";
    /// Paused.
    pub const PAUSED: &str = "DeploymentPaused";
    /// Resumed.
    pub const RESUMED: &str = "DeploymentResumed";
    /// `Available` True.
    pub const MIN_AVAILABLE: &str = "MinimumReplicasAvailable";
    /// `Available` False.
    pub const MIN_UNAVAILABLE: &str = "MinimumReplicasUnavailable";
}

/// Why a sync stopped before its end (KCM's `return err`).
pub enum Stop {
    /// What was written so far stands; the writes' events bring the next sync (a hash
    /// collision counted, a failed create reported).
    Requeue,
    /// A spec the controller cannot act on, or a read that failed.
    Error(Error),
}

impl From<Error> for Stop {
    fn from(e: Error) -> Self {
        Stop::Error(e)
    }
}

impl From<BadIntOrPercent> for Stop {
    fn from(e: BadIntOrPercent) -> Self {
        Stop::Error(Error::permanent(e.to_string()))
    }
}

impl From<wasmloop_sdk::cache::Error> for Stop {
    fn from(e: wasmloop_sdk::cache::Error) -> Self {
        Stop::Error(e.into())
    }
}

/// The result of a step of the sync.
pub type Flow<T = ()> = Result<T, Stop>;

/// The clock of one sync.
pub struct Now {
    /// Milliseconds since the epoch.
    pub millis: i64,
    /// As the API server writes times (whole seconds).
    pub text: String,
}

impl Now {
    /// The wall clock.
    pub fn wall() -> Self {
        let millis = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX));
        Self::at(millis)
    }

    /// A given instant (tests).
    pub fn at(millis: i64) -> Self {
        Self { millis, text: wasmloop_sdk::time::format(millis.div_euclid(1000)) }
    }
}

/// A Deployment being synced: KCM's `d` and `rsList`, and what was written.
pub struct Sync {
    /// The Deployment's key.
    pub key: ObjectKey,
    /// The Deployment as KCM's sync holds it (status and annotations change as it writes).
    pub d: Deployment,
    /// The ReplicaSets it controls (claimed), as this sync left them.
    pub rss: Vec<ReplicaSet>,
    /// The clock.
    pub now: Now,
    /// Why the previous reconcile of this key failed, if it did.
    pub last_error: Option<String>,
    /// The Deployment as read.
    read: Deployment,
    /// The ReplicaSets as read (`None` for one this sync creates), by index in `rss`.
    read_rss: Vec<Option<ReplicaSet>>,
    /// ReplicaSets changed, in the order they were first changed.
    touched: Vec<usize>,
    /// Adoption and release patches.
    pub(crate) claims: Outcome,
    /// ReplicaSets to delete (revision history cleanup).
    deletes: Vec<Deletion>,
    /// A write of the Deployment itself (a rollback).
    deployment_patch: Option<Patch>,
    /// Write the status before creating (it reports the failure of the previous create).
    status_first: bool,
    /// Events, recorded after the writes.
    events: Vec<(EventType, &'static str, String)>,
    /// When to look again (a progress deadline, old Pods still terminating).
    requeue: Option<Duration>,
    /// `spec.replicas` of each ReplicaSet when the new one was last found or created: what
    /// KCM's status computation reads ([`crate::status::calculate`]).
    before_scaling: Vec<i32>,
}

impl Sync {
    /// A sync of `d` (as read) at `now`.
    pub fn new(key: ObjectKey, d: Deployment, now: Now, last_error: Option<String>) -> Self {
        Self {
            key,
            read: d.clone(),
            d,
            rss: Vec::new(),
            now,
            last_error,
            read_rss: Vec::new(),
            touched: Vec::new(),
            claims: Outcome::new(),
            deletes: Vec::new(),
            deployment_patch: None,
            status_first: false,
            events: Vec::new(),
            requeue: None,
            before_scaling: Vec::new(),
        }
    }

    /// `spec.replicas` of ReplicaSet `i` before this sync scaled it.
    pub fn replicas_before_scaling(&self, i: usize) -> i32 {
        self.before_scaling.get(i).copied().unwrap_or_else(|| self.rss[i].replicas())
    }

    fn snapshot_before_scaling(&mut self) {
        self.before_scaling = self.rss.iter().map(ReplicaSet::replicas).collect();
    }

    /// Set the claimed ReplicaSets (as read).
    pub fn set_replica_sets(&mut self, rss: Vec<ReplicaSet>) {
        self.read_rss = rss.iter().cloned().map(Some).collect();
        self.rss = rss;
    }

    /// Record an Event about the Deployment.
    pub fn event(&mut self, kind: EventType, reason: &'static str, message: String) {
        self.events.push((kind, reason, message));
    }

    /// Look again after `after` (the earliest asked for wins).
    pub fn requeue_after(&mut self, after: Duration) {
        self.requeue = Some(self.requeue.map_or(after, |r| r.min(after)));
    }

    fn touch(&mut self, i: usize) {
        if !self.touched.contains(&i) {
            self.touched.push(i);
        }
    }

    /// `FindNewReplicaSet` (oldest first among equal templates) and `FindOldReplicaSets`'s
    /// second list (every other one), both in creation order.
    pub fn new_and_old(&self) -> (Option<usize>, Vec<usize>) {
        let mut order: Vec<usize> = (0..self.rss.len()).collect();
        order.sort_by(|&a, &b| by_creation(&self.rss[a], &self.rss[b]));
        let new = order.iter().copied().find(|&i| template::equal_ignore_hash(&self.rss[i].spec.template, &self.d.spec.template));
        (new, order.into_iter().filter(|&i| Some(i) != new).collect())
    }

    /// `getAllReplicaSetsAndSyncRevision` (`getNewReplicaSet`): the new ReplicaSet with its
    /// revision raised past the old ones' and the Deployment's revision set from it, created
    /// when `create` and missing.
    pub fn all_and_sync_revision(&mut self, create: bool) -> Flow<(Option<usize>, Vec<usize>)> {
        let found = self.find_or_create(create);
        self.snapshot_before_scaling();
        found
    }

    fn find_or_create(&mut self, create: bool) -> Flow<(Option<usize>, Vec<usize>)> {
        let (existing, old) = self.new_and_old();
        let max_old = old.iter().filter_map(|&i| self.rss[i].revision().ok()).max().unwrap_or(0);
        let new_revision = max_old + 1;
        if let Some(n) = existing {
            let replicas = (self.d.replicas(), self.d.replicas() + self.d.max_surge());
            let rs = &mut self.rss[n];
            let changed =
                annotations::set_new_replica_set(&self.d.metadata.annotations, &mut rs.metadata.annotations, new_revision, true, replicas);
            if changed || rs.spec.min_ready_seconds != self.d.spec.min_ready_seconds {
                rs.spec.min_ready_seconds = self.d.spec.min_ready_seconds;
                self.touch(n);
                return Ok((Some(n), old));
            }
            let revision = self.rss[n].metadata.annotations.get(annotations::REVISION).cloned().unwrap_or_default();
            self.set_revision(&revision);
            if self.d.has_progress_deadline() && self.d.status.condition(reason::PROGRESSING).is_none() {
                let msg = format!("Found new replica set {:?}", self.rss[n].metadata.name);
                self.set_condition(reason::PROGRESSING, "True", reason::FOUND_NEW_RS, msg);
            }
            return Ok((Some(n), old));
        }
        if !create {
            return Ok((None, old));
        }
        self.create_new_replica_set(new_revision, old)
    }

    fn create_new_replica_set(&mut self, new_revision: i64, old: Vec<usize>) -> Flow<(Option<usize>, Vec<usize>)> {
        let h = hash::compute(&self.d.spec.template, self.d.status.collision_count);
        let name = format!("{}-{}", self.d.metadata.name, h.value);
        let ns = self.key.ns();
        if let Some(raw) = wasmloop_sdk::cache::get_raw(&kinds::REPLICA_SET, ns, &name)? {
            let found: ReplicaSet = serde_json::from_str(&raw).map_err(|e| Error::permanent(format!("ReplicaSet {name}: {e}")))?;
            let ours = found.metadata.is_controlled_by(&self.d.metadata.uid);
            if !(ours && template::equal_ignore_hash(&self.d.spec.template, &found.spec.template)) {
                // A hash collision: count it, and the next sync hashes with the new count.
                let count = self.d.status.collision_count.unwrap_or(0);
                self.d.status.collision_count = Some(count.wrapping_add(1));
                return Err(Stop::Requeue);
            }
            // Ours, but not claimed (it does not match the selector): KCM takes it as created.
            self.rss.push(found.clone());
            self.read_rss.push(Some(found));
            self.set_revision(&new_revision.to_string());
            return Ok((Some(self.rss.len() - 1), old));
        }
        let mut template = self.d.spec.template.clone();
        insert_label(&mut template, &h.value);
        let mut selector = serde_json::to_value(&self.d.spec.selector).unwrap_or_else(|_| json!({}));
        if let Some(s) = selector.as_object_mut() {
            let labels = s.entry("matchLabels").or_insert_with(|| json!({}));
            if let Some(l) = labels.as_object_mut() {
                l.insert(hash::POD_TEMPLATE_HASH.into(), h.value.clone().into());
            }
        }
        let mut rs: ReplicaSet = serde_json::from_value(json!({
            "metadata": {"name": name, "namespace": ns, "labels": template["metadata"]["labels"].clone(),
                         "ownerReferences": [self.controller_ref()]},
            "spec": {"replicas": 0, "minReadySeconds": self.d.spec.min_ready_seconds, "selector": selector, "template": template},
        }))
        .map_err(|e| Error::permanent(format!("building ReplicaSet {name}: {e}")))?;
        let all: Vec<&ReplicaSet> = old.iter().map(|&i| &self.rss[i]).chain([&rs]).collect();
        let count = replicas::new_rs_new_replicas(&self.d, &all, &rs)?;
        rs.spec.replicas = Some(count);
        let replicas = (self.d.replicas(), self.d.replicas() + self.d.max_surge());
        annotations::set_new_replica_set(&self.d.metadata.annotations, &mut rs.metadata.annotations, new_revision, false, replicas);
        self.rss.push(rs);
        self.read_rss.push(None);
        let n = self.rss.len() - 1;
        self.touch(n);
        if let Some(message) = self.failed_create_of(&name) {
            // The previous reconcile's create of this ReplicaSet failed: report it as KCM does
            // (before trying again), and let the next sync go on.
            let msg = format!("Failed to create new replica set {name:?}: {message}");
            if self.d.has_progress_deadline() {
                self.set_condition(reason::PROGRESSING, "False", reason::FAILED_RS_CREATE, msg.clone());
            }
            self.event(EventType::Warning, reason::FAILED_RS_CREATE, msg);
            self.status_first = true;
            return Err(Stop::Requeue);
        }
        if count > 0 {
            self.event(EventType::Normal, "ScalingReplicaSet", format!("Scaled up replica set {name} to {count}"));
        }
        self.set_revision(&new_revision.to_string());
        if self.d.has_progress_deadline() {
            self.set_condition(reason::PROGRESSING, "True", reason::NEW_RS, format!("Created new replica set {name:?}"));
        }
        Ok((Some(n), old))
    }

    /// The API server's message if the previous reconcile failed creating ReplicaSet `name`.
    fn failed_create_of(&self, name: &str) -> Option<String> {
        let e = self.last_error.as_deref()?;
        let prefix = format!("create apps/v1/ReplicaSet/{}/{name}: ", self.key.ns().unwrap_or_default());
        let rest = e.strip_prefix(&prefix)?;
        // The host's form: `<message> (<code> <reason>) (<n> of <m> actions ...)`.
        let rest = rest.rsplit_once(" actions of this outcome were executed)").map_or(rest, |(r, _)| r);
        let rest = rest.rsplit_once(" (").map_or(rest, |(r, _)| r);
        Some(rest.rsplit_once(" (").map_or(rest, |(r, _)| r).to_owned())
    }

    /// `metav1.NewControllerRef` to the Deployment.
    pub fn controller_ref(&self) -> Value {
        json!({"apiVersion": "apps/v1", "kind": "Deployment", "name": self.d.metadata.name, "uid": self.d.metadata.uid,
               "controller": true, "blockOwnerDeletion": true})
    }

    /// `SetDeploymentRevision`.
    fn set_revision(&mut self, revision: &str) {
        if self.d.metadata.annotations.get(annotations::REVISION).map(String::as_str) != Some(revision) {
            self.d.metadata.annotations.insert(annotations::REVISION.into(), revision.into());
        }
    }

    /// `SetDeploymentCondition(&d.Status, NewDeploymentCondition(...))`.
    pub fn set_condition(&mut self, type_: &str, status: &str, reason: &str, message: String) {
        let c = Condition::new(type_, status, reason, message, &self.now.text);
        self.d.status.set_condition(c);
    }

    /// `scaleReplicaSetAndRecordEvent`: whether it scaled.
    pub fn scale_and_record(&mut self, i: usize, scale: i32) -> bool {
        let current = self.rss[i].replicas();
        if current == scale {
            return false;
        }
        self.scale_replica_set(i, scale, if current < scale { "up" } else { "down" })
    }

    /// `scaleReplicaSet`: the size and the replica annotations; whether the size changed.
    pub fn scale_replica_set(&mut self, i: usize, scale: i32, operation: &str) -> bool {
        let (desired, max) = (self.d.replicas(), self.d.replicas() + self.d.max_surge());
        let rs = &mut self.rss[i];
        let size = rs.replicas() != scale;
        if !size && !annotations::replicas_need_update(&rs.metadata.annotations, desired, max) {
            return false;
        }
        rs.spec.replicas = Some(scale);
        annotations::set_replicas(&mut rs.metadata.annotations, desired, max);
        let name = rs.metadata.name.clone();
        self.touch(i);
        if size {
            self.event(EventType::Normal, "ScalingReplicaSet", format!("Scaled {operation} replica set {name} to {scale}"));
        }
        size
    }

    /// `cleanupDeployment`: delete the oldest old ReplicaSets beyond `revisionHistoryLimit`
    /// that have no Pods and whose controller has seen their spec.
    pub fn cleanup(&mut self, old: &[usize]) {
        let Some(limit) = self.d.revision_history_limit() else { return };
        let mut alive: Vec<usize> = old.iter().copied().filter(|&i| self.rss[i].metadata.deletion_timestamp.is_none()).collect();
        let excess = i64::try_from(alive.len()).unwrap_or(i64::MAX) - i64::from(limit);
        if excess <= 0 {
            return;
        }
        alive.sort_by(|&a, &b| by_creation(&self.rss[a], &self.rss[b]));
        for &i in alive.iter().take(usize::try_from(excess).unwrap_or(0)) {
            let rs = &self.rss[i];
            let generation = rs.metadata.generation.unwrap_or(0);
            if rs.status.replicas != 0 || rs.replicas() != 0 || generation > rs.status.observed_generation {
                continue;
            }
            let key = kinds::REPLICA_SET.key(self.key.ns(), rs.metadata.name.clone());
            self.deletes.push(Deletion::new(key).if_uid(rs.metadata.uid.clone()));
        }
    }

    /// Stop the rollout here with `status` as the Deployment's (KCM's last status write).
    pub fn set_status(&mut self, status: DeploymentStatus) {
        self.d.status = status;
    }

    /// Replace the Deployment's template and annotations (a rollback): one update of the
    /// Deployment itself.
    pub fn update_deployment(&mut self) {
        let ops = json!([
            {"op": "replace", "path": "/spec/template", "value": self.d.spec.template},
            {"op": "add", "path": "/metadata/annotations", "value": self.d.metadata.annotations},
        ]);
        self.deployment_patch = Some(Patch::json(self.key.clone(), ops).if_uid(self.d.metadata.uid.clone()));
    }

    /// The writes, in KCM's order: claims, the status when it reports a failed create, new
    /// ReplicaSets, ReplicaSet updates, deletions, the status, a rollback, then the Events.
    pub fn into_outcome(self) -> Outcome {
        let mut out = self.claims.clone();
        let status = self.status_patch();
        if self.status_first
            && let Some(p) = status.clone()
        {
            out = out.patch(p);
        }
        let ns = self.key.ns();
        for &i in &self.touched {
            let rs = &self.rss[i];
            match &self.read_rss[i] {
                None => out = out.create(&creation(rs, ns)),
                Some(read) => {
                    if let Some(p) = rs_patch(read, rs, ns) {
                        out = out.patch(p);
                    }
                }
            }
        }
        for d in self.deletes.iter().cloned() {
            out = out.deletion(d);
        }
        if !self.status_first
            && let Some(p) = status
        {
            out = out.patch(p);
        }
        if let Some(p) = self.deployment_patch.clone() {
            out = out.patch(p);
        }
        for (kind, reason, message) in &self.events {
            out = out.event_key(self.key.clone(), *kind, *reason, message.clone());
        }
        if let Some(after) = self.requeue {
            out = out.requeue_after(after);
        }
        out
    }

    /// The status write if the status or the revision changed, with the revision annotation
    /// (KCM sets it on its copy of the Deployment and writes it through `/status`, whose
    /// strategy keeps annotations; a rollback's other annotation changes go with its update).
    fn status_patch(&self) -> Option<Patch> {
        let revision = |d: &Deployment| d.metadata.annotations.get(annotations::REVISION).cloned();
        let revision_changed = revision(&self.d) != revision(&self.read);
        if self.d.status == self.read.status && !revision_changed {
            return None;
        }
        let mut body = json!({"status": self.d.status.to_json()});
        if revision_changed {
            body["metadata"] = json!({"annotations": {annotations::REVISION: revision(&self.d)}});
        }
        let mut p = Patch::merge(self.key.clone(), body).status().if_uid(self.d.metadata.uid.clone());
        if let Some(rv) = &self.read.metadata.resource_version {
            p = p.if_resource_version(rv.clone());
        }
        Some(p)
    }
}

/// KCM's `ReplicaSetsByCreationTimestamp`: older first, then by name.
pub fn by_creation(a: &ReplicaSet, b: &ReplicaSet) -> std::cmp::Ordering {
    a.created().cmp(&b.created()).then_with(|| a.metadata.name.cmp(&b.metadata.name))
}

fn insert_label(template: &mut Value, hash: &str) {
    if !template.is_object() {
        *template = json!({});
    }
    let meta = template.as_object_mut().map(|t| t.entry("metadata").or_insert_with(|| json!({})));
    if let Some(meta) = meta.and_then(Value::as_object_mut) {
        let labels = meta.entry("labels").or_insert_with(|| json!({}));
        if !labels.is_object() {
            *labels = json!({});
        }
        if let Some(l) = labels.as_object_mut() {
            l.insert(hash::POD_TEMPLATE_HASH.into(), hash.into());
        }
    }
}

/// The create of a new ReplicaSet.
fn creation(rs: &ReplicaSet, ns: Option<&str>) -> Value {
    json!({
        "apiVersion": "apps/v1", "kind": "ReplicaSet",
        "metadata": {"name": rs.metadata.name, "namespace": ns, "labels": rs.metadata.labels,
                     "annotations": rs.metadata.annotations, "ownerReferences": rs.metadata.owner_references},
        "spec": {"replicas": rs.replicas(), "minReadySeconds": rs.spec.min_ready_seconds, "selector": rs.spec.selector,
                 "template": rs.spec.template},
    })
}

/// The update of a ReplicaSet this sync changed: its size, its minReadySeconds and the
/// annotations it set (KCM only ever adds or changes ReplicaSet annotations), guarded by the
/// resourceVersion read.
fn rs_patch(read: &ReplicaSet, now: &ReplicaSet, ns: Option<&str>) -> Option<Patch> {
    let mut body = serde_json::Map::new();
    let mut spec = serde_json::Map::new();
    if read.replicas() != now.replicas() {
        spec.insert("replicas".into(), now.replicas().into());
    }
    if read.spec.min_ready_seconds != now.spec.min_ready_seconds {
        spec.insert("minReadySeconds".into(), now.spec.min_ready_seconds.into());
    }
    if !spec.is_empty() {
        body.insert("spec".into(), spec.into());
    }
    if read.metadata.annotations != now.metadata.annotations {
        body.insert("metadata".into(), json!({"annotations": changed_entries(&read.metadata.annotations, &now.metadata.annotations)}));
    }
    if body.is_empty() {
        return None;
    }
    let key = kinds::REPLICA_SET.key(ns, now.metadata.name.clone());
    let mut p = Patch::merge(key, body.into()).if_uid(now.metadata.uid.clone());
    if let Some(rv) = &read.metadata.resource_version {
        p = p.if_resource_version(rv.clone());
    }
    Some(p)
}

/// A merge patch of annotations from `before` to `after`: changed and new entries, removed
/// ones as null.
fn changed_entries(before: &Annotations, after: &Annotations) -> BTreeMap<String, Value> {
    let mut m: BTreeMap<String, Value> =
        after.iter().filter(|(k, v)| before.get(*k) != Some(*v)).map(|(k, v)| (k.clone(), Value::String(v.clone()))).collect();
    for k in before.keys().filter(|k| !after.contains_key(*k)) {
        m.insert(k.clone(), Value::Null);
    }
    m
}
