//! Pods (`v1` `Pod`) and the Pod template that workloads and Jobs carry.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use super::{ObjectMeta, resource};
use crate::conditions::Condition;

resource! {
    /// `v1` `Pod`.
    pub struct Pod("v1", "Pod", namespaced = true) {
        /// `spec`.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        pub spec: Option<PodSpec>,
        /// `status`.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        pub status: Option<PodStatus>,
    }
}

impl Pod {
    /// Whether the Pod's `Ready` condition is `True`.
    pub fn is_ready(&self) -> bool {
        self.status.as_ref().is_some_and(|s| crate::conditions::is_true(&s.conditions, "Ready"))
    }
}

/// A Pod's `spec`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct PodSpec {
    /// The containers.
    pub containers: Vec<Container>,
    /// Containers run to completion before the others start.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub init_containers: Vec<Container>,
    /// `Always`, `OnFailure` or `Never`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub restart_policy: Option<String>,
    /// The node the Pod is bound to.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub node_name: Option<String>,
    /// Labels a node must have.
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub node_selector: BTreeMap<String, String>,
    /// The ServiceAccount the Pod runs as.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub service_account_name: Option<String>,
    /// Fields not named above (volumes, affinity, ...), kept as read.
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

/// One container of a Pod.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct Container {
    /// The container's name (unique in the Pod).
    pub name: String,
    /// The image.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub image: Option<String>,
    /// The entrypoint (the image's if empty).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub command: Vec<String>,
    /// Arguments to the entrypoint.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub args: Vec<String>,
    /// Environment variables.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub env: Vec<EnvVar>,
    /// Ports the container exposes.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub ports: Vec<ContainerPort>,
    /// CPU and memory requests and limits.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub resources: Option<ResourceRequirements>,
    /// Fields not named above (probes, volume mounts, ...), kept as read.
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

impl Container {
    /// A container named `name` running `image`.
    pub fn new(name: impl Into<String>, image: impl Into<String>) -> Self {
        Self { name: name.into(), image: Some(image.into()), ..Self::default() }
    }
}

/// An environment variable: a value, or a source in `value_from` (kept as JSON).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct EnvVar {
    /// The variable's name.
    pub name: String,
    /// Its value.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub value: Option<String>,
    /// Where the value comes from (`fieldRef`, `secretKeyRef`, ...).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub value_from: Option<Value>,
    /// Fields not named above, kept as read.
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

impl EnvVar {
    /// `name=value`.
    pub fn new(name: impl Into<String>, value: impl Into<String>) -> Self {
        Self { name: name.into(), value: Some(value.into()), ..Self::default() }
    }
}

/// A port a container exposes.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct ContainerPort {
    /// The port number.
    pub container_port: i32,
    /// A name Services can refer to.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// `TCP` (the default), `UDP` or `SCTP`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub protocol: Option<String>,
    /// Fields not named above, kept as read.
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

/// Requests and limits, as quantity strings (`"500m"`, `"128Mi"`).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct ResourceRequirements {
    /// The most the container may use.
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub limits: BTreeMap<String, String>,
    /// What the scheduler reserves.
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub requests: BTreeMap<String, String>,
    /// Fields not named above, kept as read.
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

/// A Pod's `status`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct PodStatus {
    /// `Pending`, `Running`, `Succeeded`, `Failed` or `Unknown`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub phase: Option<String>,
    /// `PodScheduled`, `Initialized`, `ContainersReady`, `Ready`, ...
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<Condition>,
    /// The Pod's IP address.
    #[serde(rename = "podIP", skip_serializing_if = "Option::is_none")]
    pub pod_ip: Option<String>,
    /// The node's IP address.
    #[serde(rename = "hostIP", skip_serializing_if = "Option::is_none")]
    pub host_ip: Option<String>,
    /// When the kubelet acknowledged the Pod (RFC 3339).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub start_time: Option<String>,
    /// Fields not named above (container statuses, ...), kept as read.
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

/// A Pod template: the metadata and spec of the Pods a workload creates.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct PodTemplateSpec {
    /// Labels and annotations of the Pods.
    pub metadata: ObjectMeta,
    /// The Pods' spec.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub spec: Option<PodSpec>,
    /// Fields not named above, kept as read.
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}
