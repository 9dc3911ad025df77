//! Typed reads of the host's informer cache. Reads never reach the API server.
//!
//! Each function is generic over the type to parse objects into: a `serde_json::Value`, an
//! [`Object`](crate::object::Object), a `k8s` type, or your own `Deserialize` struct (which
//! parses only the fields it names, the fastest choice for hot paths). The `*_raw` forms return
//! the JSON text as the host sent it.
//!
//! A plugin may read only the kinds its [`Metadata`](crate::Metadata) declares (reconciled,
//! watched or indexed); other reads fail with [`Error::NotGranted`].

use std::fmt;

use serde::de::DeserializeOwned;

use crate::types::{KindRef, ObjectKey};

/// The index every kind has over the UID of its objects' controller owner
/// (`ownerReferences[controller=true]`).
pub const OWNER_INDEX: &str = "owner";
/// The index every kind has over its objects' namespace.
pub const NAMESPACE_INDEX: &str = "namespace";

/// A failed cache read.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Error {
    /// The plugin did not declare (or was not granted) read access to this kind.
    NotGranted(String),
    /// No index of that name on that kind.
    UnknownIndex(String),
    /// A malformed argument, e.g. a bad label selector.
    Invalid(String),
    /// An object did not parse into the requested type.
    Decode {
        /// The kind read, e.g. `v1/Pod`.
        kind: String,
        /// Which object, and what did not parse.
        message: String,
    },
    /// A native build with no fake cache installed (see `wasmloop_sdk::testing`).
    NoHost,
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::NotGranted(m) => write!(f, "cache read not granted: {m}"),
            Error::UnknownIndex(m) => write!(f, "unknown cache index: {m}"),
            Error::Invalid(m) => write!(f, "invalid cache read: {m}"),
            Error::Decode { kind, message } => write!(f, "cannot parse a cached {kind}: {message}"),
            Error::NoHost => f.write_str(
                "no cache: outside a wasmloop host, reads go to a wasmloop_sdk::testing::FakeCache \
                 (enable the SDK's `testing` feature and run the reconciler through it)",
            ),
        }
    }
}

impl std::error::Error for Error {}

/// The JSON of one object, or `None` if it is not in the cache.
pub fn get_raw(kind: &KindRef, namespace: Option<&str>, name: &str) -> Result<Option<String>, Error> {
    crate::sys::cache_get(kind, namespace, name)
}

/// The JSON of the objects of `kind`, optionally in one namespace and matching a label selector
/// (`app=web,tier in (a,b),!legacy`).
pub fn list_raw(kind: &KindRef, namespace: Option<&str>, selector: Option<&str>) -> Result<Vec<String>, Error> {
    crate::sys::cache_list(kind, namespace, selector)
}

/// The JSON of the objects whose index `index` has the value `value`.
pub fn by_index_raw(kind: &KindRef, index: &str, value: &str) -> Result<Vec<String>, Error> {
    crate::sys::cache_by_index(kind, index, value)
}

/// One object, or `None` if it is not in the cache (not created yet, deleted, or filtered out by
/// a selector).
pub fn get<T: DeserializeOwned>(kind: &KindRef, namespace: Option<&str>, name: &str) -> Result<Option<T>, Error> {
    get_raw(kind, namespace, name)?.map(|json| decode(kind, &json)).transpose()
}

/// The object with this key (e.g. `request.key`), or `None` if it is not in the cache.
pub fn get_key<T: DeserializeOwned>(key: &ObjectKey) -> Result<Option<T>, Error> {
    get(&key.kind, key.ns(), &key.name)
}

/// Objects of `kind`, optionally in one namespace and matching a label selector.
pub fn list<T: DeserializeOwned>(kind: &KindRef, namespace: Option<&str>, selector: Option<&str>) -> Result<Vec<T>, Error> {
    list_raw(kind, namespace, selector)?.iter().map(|json| decode(kind, json)).collect()
}

/// Objects whose index `index` has the value `value`: `namespace`, `owner`, or an index the
/// plugin declared in its metadata.
pub fn by_index<T: DeserializeOwned>(kind: &KindRef, index: &str, value: &str) -> Result<Vec<T>, Error> {
    by_index_raw(kind, index, value)?.iter().map(|json| decode(kind, json)).collect()
}

/// Objects of `kind` whose controller owner has this UID (index `owner`): the children a
/// controller made with [`Outcome::create_owned`](crate::Outcome::create_owned).
pub fn owned_by<T: DeserializeOwned>(kind: &KindRef, owner_uid: &str) -> Result<Vec<T>, Error> {
    by_index(kind, OWNER_INDEX, owner_uid)
}

fn decode<T: DeserializeOwned>(kind: &KindRef, json: &str) -> Result<T, Error> {
    serde_json::from_str(json).map_err(|e| {
        // Name the object when the JSON itself is sound (the usual case: a type mismatch).
        let name = serde_json::from_str::<serde_json::Value>(json)
            .ok()
            .and_then(|v| crate::object::key(&v).ok())
            .map(|k| format!(" {}", k.name))
            .unwrap_or_default();
        Error::Decode { kind: kind.to_string(), message: format!("object{name}: {e}") }
    })
}
