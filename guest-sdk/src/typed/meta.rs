//! Object metadata that keeps what it does not name, and the trait of typed objects.

use std::collections::BTreeMap;

use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use crate::object::OwnerReference;
use crate::types::{KindRef, ObjectKey};

/// `metadata` of a typed object: the fields reconcilers use, and every other field in `extra`
/// (unlike [`object::ObjectMeta`](crate::object::ObjectMeta), which skips them), so an object
/// read, changed and written back keeps its metadata.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct ObjectMeta {
    /// `metadata.name`.
    #[serde(skip_serializing_if = "String::is_empty")]
    pub name: String,
    /// `metadata.generateName`: a prefix the API server completes when creating without a name.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub generate_name: Option<String>,
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
    /// Metadata fields not named above, kept as read.
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

impl ObjectMeta {
    /// Metadata with this name.
    pub fn named(name: impl Into<String>) -> Self {
        Self { name: name.into(), ..Self::default() }
    }

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

/// A typed object of one kind: its `apiVersion`, `kind` and scope, and its metadata.
///
/// Implemented by the types of [`crate::typed`] and by the `CustomResource` derive (feature
/// `derive`).
pub trait Resource: Serialize + DeserializeOwned {
    /// `apiVersion`, e.g. `apps/v1`.
    const API_VERSION: &'static str;
    /// `kind`, e.g. `Deployment`.
    const KIND: &'static str;
    /// Whether objects of the kind live in a namespace.
    const NAMESPACED: bool;
    /// The kind, for cache reads and [`Metadata`](crate::Metadata).
    const KIND_REF: KindRef = KindRef::from_static(Self::API_VERSION, Self::KIND);

    /// The object's metadata.
    fn metadata(&self) -> &ObjectMeta;
    /// The object's metadata, to change.
    fn metadata_mut(&mut self) -> &mut ObjectMeta;

    /// The object's key (its kind, namespace and name).
    fn key(&self) -> ObjectKey {
        let m = self.metadata();
        Self::KIND_REF.key(m.namespace.as_deref(), m.name.clone())
    }
}
