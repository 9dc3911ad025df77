//! Metadata reads (contract 0.2): an object's metadata and the fields the plugin declared
//! ([`Metadata::field`](crate::Metadata::field)), without copying or parsing its JSON in the
//! plugin. For reconcilers that only need names, labels, owners and a few fields of many
//! objects (a ReplicaSet's Pods), this is the cheap read.
//!
//! ```no_run
//! use wasmloop_sdk::{cache, kinds, meta};
//! # fn f() -> Result<(), wasmloop_sdk::cache::Error> {
//! for pod in meta::list(&kinds::POD, Some("shop"), Some("app=web"))? {
//!     let phase: Option<String> = pod.field(0); // the first field declared for Pods
//!     println!("{} {:?} {:?}", pod.name, pod.controller_uid(), phase);
//! }
//! # Ok(()) }
//! ```

use std::collections::BTreeMap;

use serde::de::DeserializeOwned;

use crate::cache::Error;
use crate::sys;
use crate::types::KindRef;

/// An owner reference.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct OwnerReference {
    pub api_version: String,
    pub kind: String,
    pub name: String,
    pub uid: String,
    pub controller: bool,
    pub block_owner_deletion: bool,
}

/// An object's metadata, and the values of the fields declared for its kind.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ObjectMeta {
    pub namespace: Option<String>,
    pub name: String,
    pub uid: String,
    pub resource_version: String,
    pub generation: Option<i64>,
    /// RFC 3339, as the API server writes it.
    pub creation_timestamp: Option<String>,
    pub deletion_timestamp: Option<String>,
    pub labels: BTreeMap<String, String>,
    pub annotations: BTreeMap<String, String>,
    pub owner_references: Vec<OwnerReference>,
    pub finalizers: Vec<String>,
    /// The declared fields of this kind, in declaration order, as JSON text (`None`: absent).
    pub fields: Vec<Option<String>>,
}

impl ObjectMeta {
    /// Declared field number `i` of this kind, parsed; `None` if absent or of another type.
    pub fn field<T: DeserializeOwned>(&self, i: usize) -> Option<T> {
        serde_json::from_str(self.fields.get(i)?.as_deref()?).ok()
    }

    /// The uid of the controller owner (`controller: true`), if any.
    pub fn controller_uid(&self) -> Option<&str> {
        self.owner_references.iter().find(|r| r.controller).map(|r| r.uid.as_str())
    }

    /// Being deleted (`deletionTimestamp` set).
    pub fn is_deleting(&self) -> bool {
        self.deletion_timestamp.is_some()
    }
}

/// The metadata of one object, or `None` if it is not cached.
pub fn get(kind: &KindRef, namespace: Option<&str>, name: &str) -> Result<Option<ObjectMeta>, Error> {
    sys::cache_get_meta(kind, namespace, name)
}

/// The metadata of the objects of `kind`, optionally in one namespace and matching a label
/// selector.
pub fn list(kind: &KindRef, namespace: Option<&str>, selector: Option<&str>) -> Result<Vec<ObjectMeta>, Error> {
    sys::cache_list_meta(kind, namespace, selector)
}

/// The metadata of the objects whose index `index` has `value`.
pub fn by_index(kind: &KindRef, index: &str, value: &str) -> Result<Vec<ObjectMeta>, Error> {
    sys::cache_by_index_meta(kind, index, value)
}

/// The metadata of the objects controlled by the owner with this uid.
pub fn owned_by(kind: &KindRef, owner_uid: &str) -> Result<Vec<ObjectMeta>, Error> {
    by_index(kind, crate::cache::OWNER_INDEX, owner_uid)
}
