//! Core (`v1`) kinds besides Pods: Service, ConfigMap, Secret and Namespace.

use std::collections::BTreeMap;
use std::fmt;

use serde::de::{self, Visitor};
use serde::{Deserialize, Deserializer, Serialize, Serializer};
use serde_json::{Map, Value};

use super::resource;

resource! {
    /// `v1` `Service`.
    pub struct Service("v1", "Service", namespaced = true) {
        /// `spec`.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        pub spec: Option<ServiceSpec>,
        /// `status` (load balancer ingress, conditions), as JSON.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        pub status: Option<Value>,
    }
}

/// A Service's `spec`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct ServiceSpec {
    /// `ClusterIP` (the default), `NodePort`, `LoadBalancer` or `ExternalName`.
    #[serde(rename = "type", skip_serializing_if = "Option::is_none")]
    pub type_: Option<String>,
    /// The labels of the Pods traffic goes to.
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub selector: BTreeMap<String, String>,
    /// The ports the Service exposes.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub ports: Vec<ServicePort>,
    /// The cluster IP (assigned by the API server; `None` for a headless Service).
    #[serde(rename = "clusterIP", skip_serializing_if = "Option::is_none")]
    pub cluster_ip: Option<String>,
    /// Fields not named above, kept as read.
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

/// A port a Service exposes.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct ServicePort {
    /// The port's name (required when there are several).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// The port the Service listens on.
    pub port: i32,
    /// The Pods' port: a number or a container port's name (`port` if unset).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub target_port: Option<IntOrString>,
    /// `TCP` (the default), `UDP` or `SCTP`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub protocol: Option<String>,
    /// The port on every node, for `NodePort` and `LoadBalancer` Services.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub node_port: Option<i32>,
    /// Fields not named above, kept as read.
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

impl ServicePort {
    /// Port `port` to the Pods' `target_port`.
    pub fn new(port: i32, target_port: impl Into<IntOrString>) -> Self {
        Self { port, target_port: Some(target_port.into()), ..Self::default() }
    }
}

/// A number or a name (`intstr.IntOrString`), e.g. a Service's `targetPort`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum IntOrString {
    /// A number.
    Int(i32),
    /// A name (or a percentage, where the field allows one).
    String(String),
}

impl Default for IntOrString {
    fn default() -> Self {
        IntOrString::Int(0)
    }
}

impl From<i32> for IntOrString {
    fn from(n: i32) -> Self {
        IntOrString::Int(n)
    }
}

impl From<&str> for IntOrString {
    fn from(s: &str) -> Self {
        IntOrString::String(s.to_owned())
    }
}

impl From<String> for IntOrString {
    fn from(s: String) -> Self {
        IntOrString::String(s)
    }
}

impl Serialize for IntOrString {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self {
            IntOrString::Int(n) => s.serialize_i32(*n),
            IntOrString::String(v) => s.serialize_str(v),
        }
    }
}

impl<'de> Deserialize<'de> for IntOrString {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl Visitor<'_> for V {
            type Value = IntOrString;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a 32-bit integer or a string")
            }
            fn visit_i64<E: de::Error>(self, n: i64) -> Result<IntOrString, E> {
                i32::try_from(n).map(IntOrString::Int).map_err(|_| E::invalid_value(de::Unexpected::Signed(n), &self))
            }
            fn visit_u64<E: de::Error>(self, n: u64) -> Result<IntOrString, E> {
                i32::try_from(n).map(IntOrString::Int).map_err(|_| E::invalid_value(de::Unexpected::Unsigned(n), &self))
            }
            fn visit_str<E: de::Error>(self, s: &str) -> Result<IntOrString, E> {
                Ok(IntOrString::String(s.to_owned()))
            }
        }
        d.deserialize_any(V)
    }
}

resource! {
    /// `v1` `ConfigMap`.
    pub struct ConfigMap("v1", "ConfigMap", namespaced = true) {
        /// UTF-8 entries.
        #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
        pub data: BTreeMap<String, String>,
        /// Binary entries, base64-encoded.
        #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
        pub binary_data: BTreeMap<String, String>,
        /// Whether the data can no longer change.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        pub immutable: Option<bool>,
    }
}

resource! {
    /// `v1` `Secret`. The API server returns `data` only; `stringData` is a write-only
    /// convenience it merges into `data` (base64-encoding it).
    pub struct Secret("v1", "Secret", namespaced = true) {
        /// Entries, base64-encoded (decode with [`Secret::decoded`]).
        #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
        pub data: BTreeMap<String, String>,
        /// Entries as plain strings, for writing.
        #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
        pub string_data: BTreeMap<String, String>,
        /// `Opaque` (the default), `kubernetes.io/tls`, ...
        #[serde(rename = "type", default, skip_serializing_if = "Option::is_none")]
        pub type_: Option<String>,
        /// Whether the data can no longer change.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        pub immutable: Option<bool>,
    }
}

impl Secret {
    /// Entry `key`, base64-decoded from `data` (or taken from `stringData`); `None` if absent
    /// or not valid base64.
    pub fn decoded(&self, key: &str) -> Option<Vec<u8>> {
        match self.data.get(key) {
            Some(b64) => base64_decode(b64),
            None => self.string_data.get(key).map(|s| s.as_bytes().to_vec()),
        }
    }
}

/// Standard base64 with padding (what the API server writes), ignoring nothing.
fn base64_decode(s: &str) -> Option<Vec<u8>> {
    let b = s.as_bytes();
    if !b.len().is_multiple_of(4) {
        return None;
    }
    let val = |c: u8| -> Option<u32> {
        Some(match c {
            b'A'..=b'Z' => c - b'A',
            b'a'..=b'z' => c - b'a' + 26,
            b'0'..=b'9' => c - b'0' + 52,
            b'+' => 62,
            b'/' => 63,
            _ => return None,
        } as u32)
    };
    let mut out = Vec::with_capacity(b.len() / 4 * 3);
    for (i, chunk) in b.chunks(4).enumerate() {
        let last = i == b.len() / 4 - 1;
        let pad = chunk.iter().rev().take_while(|&&c| c == b'=').count();
        if pad > 2 || (pad > 0 && !last) {
            return None;
        }
        let mut n = 0u32;
        for &c in &chunk[..4 - pad] {
            n = n << 6 | val(c)?;
        }
        n <<= 6 * pad as u32;
        let bytes = n.to_be_bytes();
        out.extend_from_slice(&bytes[1..4 - pad]);
    }
    Some(out)
}

resource! {
    /// `v1` `Namespace` (cluster-scoped).
    pub struct Namespace("v1", "Namespace", namespaced = false) {
        /// `spec` (its finalizers), as JSON.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        pub spec: Option<Value>,
        /// `status`.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        pub status: Option<NamespaceStatus>,
    }
}

/// A Namespace's `status`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct NamespaceStatus {
    /// `Active` or `Terminating`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub phase: Option<String>,
    /// Fields not named above, kept as read.
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

impl Namespace {
    /// Whether the Namespace is being deleted (`Terminating`, or a deletion timestamp).
    pub fn is_terminating(&self) -> bool {
        self.metadata.is_deleting() || self.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Terminating")
    }
}
