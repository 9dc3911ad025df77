//! The reconciler contract shared by native Rust reconcilers and Wasm plugins.

use std::time::Duration;

use crate::actions::Action;
use crate::cache::SharedCache;
use crate::kinds::KindRef;

pub use wasmloop_model::{Reason, Request};

/// What a successful reconcile returns.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Outcome {
    pub actions: Vec<Action>,
    pub requeue_after: Option<Duration>,
}

/// A failed reconcile.
#[derive(Debug, thiserror::Error, Clone, PartialEq)]
pub enum ReconcileError {
    /// Retried with exponential backoff.
    #[error("transient: {0}")]
    Transient(String),
    /// Not retried until the object (or something mapped to it) changes.
    #[error("permanent: {0}")]
    Permanent(String),
}

/// How events on a watched kind map to keys of the reconciled kind.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Mapping {
    /// The object's controller owner, if it is of the reconciled kind.
    Owner,
    /// The reconciled object named by this label's value, in the object's namespace.
    Label(String),
    /// The reconciled object with the same namespace and name.
    SameName,
    /// The reconciled object whose name is the object's namespace.
    Namespace,
}

/// A secondary kind a controller watches.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WatchSpec {
    pub kind: KindRef,
    pub mapping: Mapping,
    pub selector: Option<String>,
}

/// A declared index: `labels.<key>` or a dotted field path.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct IndexDecl {
    pub kind: KindRef,
    pub name: String,
    pub path: String,
}

/// A field a plugin reads through metadata reads (contract 0.2 `plugin-metadata.fields`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FieldDecl {
    pub kind: KindRef,
    /// Dotted path, e.g. `status.phase`.
    pub path: String,
}

/// What a reconciler says about itself: what it reconciles, watches and indexes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ReconcilerSpec {
    pub name: String,
    pub version: String,
    pub reconciles: KindRef,
    pub selector: Option<String>,
    pub watches: Vec<WatchSpec>,
    pub indexes: Vec<IndexDecl>,
    pub fields: Vec<FieldDecl>,
}

impl ReconcilerSpec {
    /// Every kind the reconciler reads: the reconciled kind first, then watched kinds, deduplicated.
    pub fn kinds(&self) -> Vec<KindRef> {
        let mut out = vec![self.reconciles.clone()];
        for k in self.watches.iter().map(|w| &w.kind).chain(self.indexes.iter().map(|i| &i.kind)) {
            if !out.contains(k) {
                out.push(k.clone());
            }
        }
        out
    }
}

/// Reconcile logic. Implemented by native Rust reconcilers and by the Wasm plugin runtime.
///
/// `reconcile` is synchronous on purpose: it reads only the in-memory cache and returns actions;
/// the controller runs it on a blocking thread and executes the actions itself. The cache comes
/// shared: what reads it during the call (a plugin's Store) holds its own reference.
pub trait Reconciler: Send + Sync + 'static {
    fn spec(&self) -> &ReconcilerSpec;
    fn reconcile(&self, request: &Request, cache: &SharedCache) -> Result<Outcome, ReconcileError>;
    /// Which build this is (a Wasm plugin's `sha256:<hex>`), for logs that must tell two
    /// versions with the same `spec().version` apart; `None` for native reconcilers.
    fn digest(&self) -> Option<&str> {
        None
    }
}
