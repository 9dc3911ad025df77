//! The parts of Deployments and ReplicaSets the controller reads and writes, as the API server
//! serves them (defaults applied). Pod templates stay JSON: they are hashed and compared
//! through their Go types ([`crate::hash`], [`crate::template`]) and copied into ReplicaSets.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use wasmloop_sdk::typed::{LabelSelector, ObjectMeta};

/// `apps/v1` `Deployment`.
#[derive(Clone, Debug, Deserialize)]
pub struct Deployment {
    /// Its metadata.
    pub metadata: ObjectMeta,
    /// Its spec.
    #[serde(default)]
    pub spec: DeploymentSpec,
    /// Its status (all zero before the controller first writes it).
    #[serde(default)]
    pub status: DeploymentStatus,
}

/// A Deployment's `spec`.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct DeploymentSpec {
    /// Desired Pods; the API server defaults it to 1.
    pub replicas: Option<i32>,
    /// Which ReplicaSets and Pods belong to the Deployment.
    pub selector: LabelSelector,
    /// The Pods to run.
    pub template: Value,
    /// How old Pods are replaced by new ones.
    pub strategy: Strategy,
    /// Seconds a new Pod must be ready before it counts as available.
    pub min_ready_seconds: i32,
    /// Old ReplicaSets kept for rollback (the API server defaults it to 10).
    pub revision_history_limit: Option<i32>,
    /// No rollout while paused (scaling still happens).
    pub paused: bool,
    /// Seconds without progress before `Progressing` turns False (defaulted to 600).
    pub progress_deadline_seconds: Option<i32>,
}

/// `spec.strategy`.
#[derive(Clone, Debug, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct Strategy {
    /// `RollingUpdate` or `Recreate`.
    #[serde(rename = "type")]
    pub type_: String,
    /// The rolling update's bounds.
    pub rolling_update: Option<RollingUpdate>,
}

impl Default for Strategy {
    /// What the API server defaults an absent strategy to.
    fn default() -> Self {
        Self {
            type_: ROLLING_UPDATE.into(),
            rolling_update: Some(RollingUpdate {
                max_surge: Some(IntOrPercent::Str("25%".into())),
                max_unavailable: Some(IntOrPercent::Str("25%".into())),
            }),
        }
    }
}

/// The RollingUpdate strategy type.
pub const ROLLING_UPDATE: &str = "RollingUpdate";
/// The Recreate strategy type.
pub const RECREATE: &str = "Recreate";

/// `spec.strategy.rollingUpdate`.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct RollingUpdate {
    /// Pods over `replicas` allowed during the update.
    pub max_surge: Option<IntOrPercent>,
    /// Pods under `replicas` allowed during the update.
    pub max_unavailable: Option<IntOrPercent>,
}

/// `intstr.IntOrString` as maxSurge/maxUnavailable use it: a count or a percentage.
#[derive(Clone, Debug, PartialEq, Eq, Deserialize)]
#[serde(untagged)]
pub enum IntOrPercent {
    /// A count.
    Int(i64),
    /// `"25%"` (any other string is invalid).
    Str(String),
}

/// A Deployment's `status`, every field KCM writes.
#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct DeploymentStatus {
    /// The generation this status was computed for.
    pub observed_generation: i64,
    /// Pods of all its ReplicaSets (their `status.replicas`).
    pub replicas: i32,
    /// Pods of the new ReplicaSet.
    pub updated_replicas: i32,
    /// Ready Pods.
    pub ready_replicas: i32,
    /// Available Pods.
    pub available_replicas: i32,
    /// Pods short of `replicas` being available (never negative).
    pub unavailable_replicas: i32,
    /// `Available`, `Progressing`, `ReplicaFailure`, in the order they were set.
    pub conditions: Vec<Condition>,
    /// Hash collisions met creating the new ReplicaSet.
    pub collision_count: Option<i32>,
}

impl DeploymentStatus {
    /// The status as a JSON merge patch's `status`: every field, so the written status is
    /// exactly this one.
    pub fn to_json(&self) -> Value {
        json!({
            "observedGeneration": self.observed_generation,
            "replicas": self.replicas,
            "updatedReplicas": self.updated_replicas,
            "readyReplicas": self.ready_replicas,
            "availableReplicas": self.available_replicas,
            "unavailableReplicas": self.unavailable_replicas,
            "conditions": if self.conditions.is_empty() { Value::Null } else { json!(self.conditions) },
            "collisionCount": self.collision_count,
        })
    }

    /// The condition of this type.
    pub fn condition(&self, type_: &str) -> Option<&Condition> {
        self.conditions.iter().find(|c| c.type_ == type_)
    }

    /// `SetDeploymentCondition`: a condition with the same status and reason as the current one
    /// leaves it as it is; one with the same status keeps its transition time; the new one goes
    /// last.
    pub fn set_condition(&mut self, mut new: Condition) {
        if let Some(current) = self.condition(&new.type_) {
            if current.status == new.status && current.reason == new.reason {
                return;
            }
            if current.status == new.status {
                new.last_transition_time.clone_from(&current.last_transition_time);
            }
        }
        self.remove_condition(&new.type_.clone());
        self.conditions.push(new);
    }

    /// `RemoveDeploymentCondition`.
    pub fn remove_condition(&mut self, type_: &str) {
        self.conditions.retain(|c| c.type_ != type_);
    }
}

/// A Deployment condition.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct Condition {
    /// `Available`, `Progressing` or `ReplicaFailure`.
    #[serde(rename = "type")]
    pub type_: String,
    /// `True`, `False` or `Unknown`.
    pub status: String,
    /// The last time it was written (RFC 3339).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub last_update_time: Option<String>,
    /// The last time its status changed.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub last_transition_time: Option<String>,
    /// Why, in one word.
    #[serde(skip_serializing_if = "String::is_empty")]
    pub reason: String,
    /// Why, for people.
    #[serde(skip_serializing_if = "String::is_empty")]
    pub message: String,
}

impl Condition {
    /// `NewDeploymentCondition`: written and transitioned `now`.
    pub fn new(type_: &str, status: &str, reason: &str, message: impl Into<String>, now: &str) -> Self {
        Self {
            type_: type_.into(),
            status: status.into(),
            last_update_time: Some(now.into()),
            last_transition_time: Some(now.into()),
            reason: reason.into(),
            message: message.into(),
        }
    }
}

/// `apps/v1` `ReplicaSet`.
#[derive(Clone, Debug, Deserialize)]
pub struct ReplicaSet {
    /// Its metadata.
    pub metadata: ObjectMeta,
    /// Its spec.
    #[serde(default)]
    pub spec: RsSpec,
    /// Its status.
    #[serde(default)]
    pub status: RsStatus,
}

/// A ReplicaSet's `spec`.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct RsSpec {
    /// Desired Pods (1 when unset, as the API server defaults it).
    pub replicas: Option<i32>,
    /// Seconds a Pod must be ready to count as available.
    pub min_ready_seconds: i32,
    /// Which Pods it owns.
    pub selector: Value,
    /// The Pods to create.
    pub template: Value,
}

/// A ReplicaSet's `status`.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct RsStatus {
    /// Pods it has.
    pub replicas: i32,
    /// Ready Pods.
    pub ready_replicas: i32,
    /// Available Pods.
    pub available_replicas: i32,
    /// The generation this status was computed for.
    pub observed_generation: i64,
    /// `ReplicaFailure`.
    pub conditions: Vec<RsCondition>,
}

/// A ReplicaSet condition.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct RsCondition {
    /// `ReplicaFailure`.
    #[serde(rename = "type")]
    pub type_: String,
    /// `True`, `False` or `Unknown`.
    pub status: String,
    /// When its status changed.
    pub last_transition_time: Option<String>,
    /// Why, in one word.
    pub reason: String,
    /// Why, for people.
    pub message: String,
}

impl ReplicaSet {
    /// `spec.replicas` (1 when unset).
    pub fn replicas(&self) -> i32 {
        self.spec.replicas.unwrap_or(1)
    }

    /// The `deployment.kubernetes.io/revision` annotation as a number: `Ok(0)` without one,
    /// an error when it is not a number (`deploymentutil.Revision`).
    pub fn revision(&self) -> Result<i64, std::num::ParseIntError> {
        self.metadata.annotations.get(crate::annotations::REVISION).map_or(Ok(0), |v| v.parse())
    }

    /// Creation time in seconds (0 when unset), for KCM's orderings.
    pub fn created(&self) -> i64 {
        self.metadata.creation_timestamp.as_deref().and_then(wasmloop_sdk::time::parse).unwrap_or(0)
    }
}

/// The labels of a template (`metadata.labels`), as strings.
pub fn template_labels(template: &Value) -> BTreeMap<String, String> {
    template
        .pointer("/metadata/labels")
        .and_then(Value::as_object)
        .map(|m| m.iter().filter_map(|(k, v)| v.as_str().map(|v| (k.clone(), v.to_owned()))).collect())
        .unwrap_or_default()
}
