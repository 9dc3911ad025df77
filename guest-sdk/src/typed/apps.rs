//! Workloads of the `apps/v1` group: Deployment, ReplicaSet and StatefulSet.

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use super::{LabelSelector, PodTemplateSpec, resource};
use crate::conditions::Condition;

resource! {
    /// `apps/v1` `Deployment`.
    pub struct Deployment("apps/v1", "Deployment", namespaced = true) {
        /// `spec`.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        pub spec: Option<DeploymentSpec>,
        /// `status`.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        pub status: Option<DeploymentStatus>,
    }
}

/// A Deployment's `spec`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct DeploymentSpec {
    /// Desired number of Pods (1 if unset).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub replicas: Option<i32>,
    /// Which Pods belong to the Deployment (must match the template's labels).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub selector: Option<LabelSelector>,
    /// The Pods to run.
    pub template: PodTemplateSpec,
    /// Seconds a new Pod must be ready before it counts as available.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub min_ready_seconds: Option<i32>,
    /// Fields not named above (strategy, paused, ...), kept as read.
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

/// A Deployment's `status`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct DeploymentStatus {
    /// The generation the controller last acted on.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    /// Pods targeted by the Deployment.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub replicas: Option<i32>,
    /// Pods with the current template.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub updated_replicas: Option<i32>,
    /// Ready Pods.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ready_replicas: Option<i32>,
    /// Pods ready for at least `minReadySeconds`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub available_replicas: Option<i32>,
    /// Pods still needed for 100% availability.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub unavailable_replicas: Option<i32>,
    /// `Available`, `Progressing`, `ReplicaFailure`.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<Condition>,
    /// Fields not named above, kept as read.
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

impl Deployment {
    /// Whether the controller has acted on the current spec and every desired Pod is updated
    /// and available (what `kubectl rollout status` waits for, without the timeout).
    pub fn is_rolled_out(&self) -> bool {
        let (Some(spec), Some(status)) = (&self.spec, &self.status) else { return false };
        let desired = spec.replicas.unwrap_or(1);
        status.observed_generation >= self.metadata.generation
            && status.updated_replicas.unwrap_or(0) >= desired
            && status.replicas.unwrap_or(0) <= status.updated_replicas.unwrap_or(0)
            && status.available_replicas.unwrap_or(0) >= status.updated_replicas.unwrap_or(0)
    }
}

resource! {
    /// `apps/v1` `ReplicaSet`.
    pub struct ReplicaSet("apps/v1", "ReplicaSet", namespaced = true) {
        /// `spec`.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        pub spec: Option<ReplicaSetSpec>,
        /// `status`.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        pub status: Option<ReplicaSetStatus>,
    }
}

/// A ReplicaSet's `spec`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct ReplicaSetSpec {
    /// Desired number of Pods (1 if unset).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub replicas: Option<i32>,
    /// Which Pods belong to the ReplicaSet.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub selector: Option<LabelSelector>,
    /// The Pods to create.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub template: Option<PodTemplateSpec>,
    /// Seconds a new Pod must be ready before it counts as available.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub min_ready_seconds: Option<i32>,
    /// Fields not named above, kept as read.
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

/// A ReplicaSet's `status`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct ReplicaSetStatus {
    /// Pods owned.
    pub replicas: i32,
    /// Pods whose labels match the template's.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub fully_labeled_replicas: Option<i32>,
    /// Ready Pods.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ready_replicas: Option<i32>,
    /// Pods ready for at least `minReadySeconds`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub available_replicas: Option<i32>,
    /// The generation the controller last acted on.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    /// `ReplicaFailure`.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<Condition>,
    /// Fields not named above, kept as read.
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

resource! {
    /// `apps/v1` `StatefulSet`.
    pub struct StatefulSet("apps/v1", "StatefulSet", namespaced = true) {
        /// `spec`.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        pub spec: Option<StatefulSetSpec>,
        /// `status`.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        pub status: Option<StatefulSetStatus>,
    }
}

/// A StatefulSet's `spec`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct StatefulSetSpec {
    /// Desired number of Pods (1 if unset).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub replicas: Option<i32>,
    /// Which Pods belong to the StatefulSet.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub selector: Option<LabelSelector>,
    /// The Pods to run.
    pub template: PodTemplateSpec,
    /// The headless Service giving the Pods their network identity.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub service_name: Option<String>,
    /// Fields not named above (volumeClaimTemplates, updateStrategy, ...), kept as read.
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

/// A StatefulSet's `status`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct StatefulSetStatus {
    /// The generation the controller last acted on.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    /// Pods created.
    pub replicas: i32,
    /// Ready Pods.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ready_replicas: Option<i32>,
    /// Pods of the current revision.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub current_replicas: Option<i32>,
    /// Pods of the update revision.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub updated_replicas: Option<i32>,
    /// Pods ready for at least `minReadySeconds`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub available_replicas: Option<i32>,
    /// The StatefulSet's conditions.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<Condition>,
    /// Fields not named above, kept as read.
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}
