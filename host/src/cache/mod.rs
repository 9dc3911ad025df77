//! The local cache plugins read instead of the API server (the seed's Store + Indexer).
//!
//! - [`IndexedStore`]: one kind's objects (one informer's), keyed by namespace/name, with indexes.
//! - [`IndexUse`]: a controller's use of an index shared by definition (one per definition per
//!   store, its memory counted: [`IndexedStore::index_bytes`]).
//! - [`CachedObject`]: an object as cached: its JSON (managedFields stripped) plus parsed metadata.
//! - [`CacheRead`]: cross-kind reads (`get`, `list`, `by_index`) as reconcilers see them;
//!   [`CacheView`] implements it over a set of stores (only the kinds a reconciler may read).
//! - [`Kept`]: the cache as one reconcile saw it, replayed to a shadow candidate.

mod body;
mod dictionary;
mod index;
mod object;
mod selector;
mod shared;
mod snapshot;
mod store;
mod view;

pub use dictionary::{DICTIONARY_AT, Packing};
pub use index::{IndexSpec, NAMESPACE_INDEX, OWNER_INDEX};
pub use object::{CachedObject, OwnerRef};
pub use selector::Selector;
pub use shared::IndexUse;
pub use snapshot::Kept;
pub use store::{Change, IndexedStore, Listed};
pub use view::CacheView;

use std::sync::Arc;

use crate::kinds::KindRef;

/// Errors reading or indexing the cache.
#[derive(Debug, thiserror::Error, Clone, PartialEq, Eq)]
pub enum Error {
    /// The reader may not read the kind, or did not declare it.
    #[error("kind {0} is not readable here: declare it in the plugin's metadata and grant it")]
    NotGranted(KindRef),
    /// A read names an index the kind does not have.
    #[error("no index {index:?} on kind {kind}")]
    UnknownIndex {
        /// The kind read.
        kind: KindRef,
        /// The index named.
        index: String,
    },
    /// A label selector does not parse.
    #[error("invalid label selector {selector:?}: {reason}")]
    InvalidSelector {
        /// The selector given.
        selector: String,
        /// What is wrong with it.
        reason: String,
    },
    /// An index path is not `labels.<key>` nor a dotted field path.
    #[error("invalid index path {path:?}: {reason}")]
    InvalidIndexPath {
        /// The path given.
        path: String,
        /// What is wrong with it.
        reason: String,
    },
    /// An index of this name exists with another definition.
    #[error("index {name:?} already exists with a different definition")]
    IndexConflict {
        /// The index's name.
        name: String,
    },
    /// The object is not one the cache can hold (not a JSON object, no name, ...), or does not
    /// decode as the type asked for.
    #[error("object is not valid for the cache: {0}")]
    InvalidObject(String),
}

/// A result whose error is the cache's.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// A shared, read-only cache as reconcilers receive it: whoever reads it during a call (a Wasm
/// plugin's Store, a native backend) holds its own reference, so no lifetime is erased.
pub type SharedCache = Arc<dyn CacheRead>;

/// Read access to cached objects across kinds. Never calls the API server.
pub trait CacheRead: Send + Sync {
    /// One object, or None if it is not cached.
    fn get(&self, kind: &KindRef, namespace: Option<&str>, name: &str) -> Result<Option<Arc<CachedObject>>>;
    /// Objects of `kind`, optionally in one namespace and matching a label selector.
    fn list(&self, kind: &KindRef, namespace: Option<&str>, selector: Option<&str>) -> Result<Vec<Arc<CachedObject>>>;
    /// Objects whose index `index` has value `value`.
    fn by_index(&self, kind: &KindRef, index: &str, value: &str) -> Result<Vec<Arc<CachedObject>>>;
}
