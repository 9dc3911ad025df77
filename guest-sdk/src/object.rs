//! Light object types and helpers for plugins that stay on JSON.
//!
//! [`Object<Spec, Status>`] reads any object with `spec`/`status` (your own CRDs especially)
//! while parsing only what you type; [`ObjectMeta`] is the small part of Kubernetes metadata a
//! reconciler usually needs. The free functions read the same fields from a `serde_json::Value`.

use crate::InvalidObject;
use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::types::{KindRef, ObjectKey};

/// The metadata fields reconcilers usually need. Unknown fields are skipped when parsing.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct ObjectMeta {
    /// `metadata.name`.
    #[serde(skip_serializing_if = "String::is_empty")]
    pub name: String,
    /// `metadata.namespace` (none for cluster-scoped objects).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub namespace: Option<String>,
    /// `metadata.uid`.
    #[serde(skip_serializing_if = "String::is_empty")]
    pub uid: String,
    /// `metadata.resourceVersion`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub resource_version: Option<String>,
    /// `metadata.generation`: bumped on every spec change.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub generation: Option<i64>,
    /// `metadata.labels`.
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub labels: BTreeMap<String, String>,
    /// `metadata.annotations`.
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub annotations: BTreeMap<String, String>,
    /// `metadata.ownerReferences`.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub owner_references: Vec<OwnerReference>,
    /// `metadata.finalizers`.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub finalizers: Vec<String>,
    /// When the object was created (RFC 3339).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub creation_timestamp: Option<String>,
    /// Set when deletion has started (the object waits on finalizers or its grace period).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub deletion_timestamp: Option<String>,
}

impl ObjectMeta {
    /// Whether deletion has started.
    pub fn is_deleting(&self) -> bool {
        self.deletion_timestamp.is_some()
    }

    /// The owner reference with `controller: true`, if any.
    pub fn controller(&self) -> Option<&OwnerReference> {
        self.owner_references.iter().find(|r| r.controller == Some(true))
    }

    /// Whether the object's controller owner has this UID.
    pub fn is_controlled_by(&self, owner_uid: &str) -> bool {
        self.controller().is_some_and(|r| r.uid == owner_uid)
    }
}

/// A reference from an object to its owner (`metadata.ownerReferences[]`).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct OwnerReference {
    /// The owner's `apiVersion`.
    pub api_version: String,
    /// The owner's `kind`.
    pub kind: String,
    /// The owner's name.
    pub name: String,
    /// The owner's UID.
    pub uid: String,
    /// Whether the owner is the object's controller (at most one is).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub controller: Option<bool>,
    /// Whether foreground deletion of the owner waits for this object.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub block_owner_deletion: Option<bool>,
}

/// An object with typed `spec` and `status` (both JSON by default); other top-level fields are
/// skipped, so use it for CRDs and workloads, and `Value` or `k8s` types for e.g. ConfigMaps.
///
/// ```
/// use wasmloop_sdk::object::Object;
/// #[derive(serde::Deserialize)]
/// struct Spec { replicas: i32 }
/// let o: Object<Spec> = serde_json::from_str(r#"{"apiVersion":"wasmloop.dev/v1alpha1",
///     "kind":"PodSet","metadata":{"name":"web","namespace":"default","uid":"u1"},
///     "spec":{"replicas":3}}"#).unwrap();
/// assert_eq!(o.spec.unwrap().replicas, 3);
/// assert_eq!(o.metadata.uid, "u1");
/// ```
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Object<Spec = Value, Status = Value> {
    /// `apiVersion`.
    pub api_version: String,
    /// `kind`.
    pub kind: String,
    /// The metadata reconcilers usually need.
    #[serde(default)]
    pub metadata: ObjectMeta,
    /// `spec`, if present.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub spec: Option<Spec>,
    /// `status`, if present.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub status: Option<Status>,
}

impl<Spec, Status> Object<Spec, Status> {
    /// The object's key.
    pub fn key(&self) -> ObjectKey {
        ObjectKey {
            kind: KindRef::new(self.api_version.clone(), self.kind.clone()),
            namespace: self.metadata.namespace.clone(),
            name: self.metadata.name.clone(),
        }
    }
}

/// `metadata.name` of a JSON object.
pub fn name(obj: &Value) -> Option<&str> {
    obj.get("metadata")?.get("name")?.as_str()
}

/// `metadata.namespace` of a JSON object.
pub fn namespace(obj: &Value) -> Option<&str> {
    obj.get("metadata")?.get("namespace")?.as_str()
}

/// `metadata.uid` of a JSON object.
pub fn uid(obj: &Value) -> Option<&str> {
    obj.get("metadata")?.get("uid")?.as_str()
}

/// The value of label `key` of a JSON object.
pub fn label<'a>(obj: &'a Value, key: &str) -> Option<&'a str> {
    obj.get("metadata")?.get("labels")?.get(key)?.as_str()
}

/// The value of annotation `key` of a JSON object.
pub fn annotation<'a>(obj: &'a Value, key: &str) -> Option<&'a str> {
    obj.get("metadata")?.get("annotations")?.get(key)?.as_str()
}

/// Whether deletion of a JSON object has started (`metadata.deletionTimestamp` is set).
pub fn is_deleting(obj: &Value) -> bool {
    obj.get("metadata").and_then(|m| m.get("deletionTimestamp")).is_some_and(|t| !t.is_null())
}

/// The UID in the controller owner reference of a JSON object.
pub fn controller_uid(obj: &Value) -> Option<&str> {
    obj.get("metadata")?
        .get("ownerReferences")?
        .as_array()?
        .iter()
        .find(|r| r.get("controller").and_then(Value::as_bool) == Some(true))?
        .get("uid")?
        .as_str()
}

/// The key of a JSON object (`apiVersion`, `kind`, `metadata.namespace`, `metadata.name`).
pub fn key(obj: &Value) -> Result<ObjectKey, InvalidObject> {
    let field = |f: &str| obj.get(f).and_then(Value::as_str).filter(|s| !s.is_empty());
    let api_version = field("apiVersion").ok_or(InvalidObject::NoField("apiVersion"))?;
    let kind = field("kind").ok_or(InvalidObject::NoField("kind"))?;
    let name = name(obj).filter(|s| !s.is_empty()).ok_or_else(|| InvalidObject::NoName { kind: kind.to_owned() })?;
    Ok(KindRef::new(api_version, kind).key(namespace(obj), name))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn pod() -> Value {
        json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {
                "name": "web-0", "namespace": "default", "uid": "p1",
                "labels": {"app": "web"},
                "ownerReferences": [
                    {"apiVersion": "v1", "kind": "X", "name": "x", "uid": "other"},
                    {"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "web", "uid": "rs1", "controller": true}
                ]
            }
        })
    }

    #[test]
    fn value_helpers_read_metadata() {
        let p = pod();
        assert_eq!(name(&p), Some("web-0"));
        assert_eq!(namespace(&p), Some("default"));
        assert_eq!(uid(&p), Some("p1"));
        assert_eq!(label(&p, "app"), Some("web"));
        assert_eq!(label(&p, "tier"), None);
        assert_eq!(controller_uid(&p), Some("rs1"));
        assert!(!is_deleting(&p));
        let k = key(&p).unwrap();
        assert_eq!(k.to_string(), "v1/Pod/default/web-0");
    }

    #[test]
    fn key_of_incomplete_object_is_an_error() {
        assert_eq!(key(&json!({"kind": "Pod"})).unwrap_err().to_string(), "object has no apiVersion");
        assert_eq!(key(&json!({"apiVersion": "v1", "kind": "Pod"})).unwrap_err().to_string(), "Pod has no metadata.name");
    }

    #[test]
    fn light_meta_finds_the_controller() {
        let o: Object = serde_json::from_value(pod()).unwrap();
        assert!(o.metadata.is_controlled_by("rs1"));
        assert!(!o.metadata.is_controlled_by("other"));
        assert_eq!(o.key(), crate::kinds::POD.key(Some("default"), "web-0"));
        // Round trip skips empty fields.
        let back = serde_json::to_value(&o).unwrap();
        assert!(back.get("spec").is_none());
        assert!(back["metadata"].get("annotations").is_none());
    }
}
