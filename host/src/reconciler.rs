//! The reconciler contract shared by native Rust reconcilers and Wasm plugins.

use std::time::Duration;

use crate::actions::{OutcomeError, Planned};
use crate::cache::SharedCache;
use crate::kinds::KindRef;

pub use wasmloop_model::{IndexValue, Mapping, Reason, Request};

/// What a successful reconcile returns.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Outcome {
    /// The actions, checked, in the order they are to be executed.
    pub actions: Vec<Planned>,
    /// Reconcile the key again after this long.
    pub requeue_after: Option<Duration>,
}

/// How a failed reconcile is retried.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Retry {
    /// With per-key exponential backoff (a transient error).
    Backoff,
    /// Not until the object, or something mapped to it, changes (a permanent error).
    WhenChanged,
}

/// Why a reconcile failed.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum Cause {
    /// The reconciler's own error.
    #[error("{0}")]
    Reconciler(String),
    /// The outcome breaks the contract.
    #[error("plugin {plugin} returned an invalid outcome: {source}")]
    InvalidOutcome {
        /// The plugin.
        plugin: String,
        /// The first thing wrong with it.
        #[source]
        source: Box<OutcomeError>,
    },
    /// The sandbox stopped the call (a trap, the deadline, the memory cap, the read budget) or
    /// the reconciler panicked: the text says which.
    #[error("{0}")]
    Stopped(String),
}

/// A failed reconcile: how it is retried, why, and the actions to execute anyway (a Warning
/// Event, a status condition saying why: contract 0.3). The error still drives the backoff,
/// the next request's `last-error` and the error metrics.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("{cause}")]
pub struct ReconcileError {
    /// How it is retried.
    pub retry: Retry,
    /// Why it failed.
    pub cause: Cause,
    /// Actions to execute anyway, checked as an outcome's are.
    pub actions: Vec<Planned>,
}

impl ReconcileError {
    /// A failure retried with backoff.
    pub fn transient(cause: Cause) -> Self {
        Self { retry: Retry::Backoff, cause, actions: Vec::new() }
    }

    /// A failure not retried until something changes.
    pub fn permanent(cause: Cause) -> Self {
        Self { retry: Retry::WhenChanged, cause, actions: Vec::new() }
    }

    /// The reconciler's own transient error.
    pub fn reconciler_transient(message: impl Into<String>) -> Self {
        Self::transient(Cause::Reconciler(message.into()))
    }

    /// The reconciler's own permanent error.
    pub fn reconciler_permanent(message: impl Into<String>) -> Self {
        Self::permanent(Cause::Reconciler(message.into()))
    }

    /// The same failure, with actions to execute anyway.
    #[must_use]
    pub fn with_actions(mut self, actions: Vec<Planned>) -> Self {
        self.actions = actions;
        self
    }

    /// Whether it is retried with backoff.
    pub fn is_transient(&self) -> bool {
        self.retry == Retry::Backoff
    }
}

/// The host's maximum size of one selector a reconciler declares (label or annotation), in
/// bytes: larger ones are refused when the metadata is read, before they are parsed or quoted.
/// Each plugin's own budget, at most this, is `budgets.selectorBytes`
/// ([`crate::controller::budget`]).
pub const MAX_SELECTOR_BYTES: usize = 64 * 1024;

/// The host's maximum of fields a reconciler declares for metadata reads (each is extracted per
/// object read). Each plugin's own budget, at most this, is `budgets.fields`.
pub const MAX_FIELDS: usize = 256;

/// A secondary kind a controller watches.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WatchSpec {
    /// The watched kind.
    pub kind: KindRef,
    /// How its events map to keys of the reconciled kind.
    pub mapping: Mapping,
    /// A label selector: only matching objects are watched and cached.
    pub selector: Option<String>,
    /// A selector on annotations (contract 0.3): only matching objects are cached and mapped.
    pub annotation_selector: Option<String>,
}

/// A declared index: `labels.<key>` or a dotted field path.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct IndexDecl {
    /// The kind whose objects are indexed.
    pub kind: KindRef,
    /// The index's name, as reads name it.
    pub name: String,
    /// What is indexed: `labels.<key>` or a dotted field path.
    pub path: String,
}

/// A field a plugin reads through metadata reads (contract 0.2 `plugin-metadata.fields`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FieldDecl {
    /// The kind the field belongs to.
    pub kind: KindRef,
    /// Dotted path, e.g. `status.phase`.
    pub path: String,
}

/// What a reconciler says about itself: what it reconciles, watches and indexes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ReconcilerSpec {
    /// The plugin's name (field manager, Event source, metrics label).
    pub name: String,
    /// Its own version.
    pub version: String,
    /// The kind whose keys it reconciles.
    pub reconciles: KindRef,
    /// A label selector on the reconciled kind.
    pub selector: Option<String>,
    /// A selector on the reconciled kind's annotations (contract 0.3).
    pub annotation_selector: Option<String>,
    /// Related kinds and how their events map to reconciled keys.
    pub watches: Vec<WatchSpec>,
    /// The indexes it reads through.
    pub indexes: Vec<IndexDecl>,
    /// The fields its metadata reads return, per kind, in declaration order.
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
/// the controller runs it off its event-handling tasks (a plugin on a guest thread, a native
/// reconciler in place with the runtime's other tasks handed to another thread) and executes
/// the actions itself. The cache comes
/// shared: what reads it during the call (a plugin's Store) holds its own reference.
pub trait Reconciler: Send + Sync + 'static {
    /// What the reconciler reconciles, watches and indexes; fixed for its lifetime.
    fn spec(&self) -> &ReconcilerSpec;
    /// Reconcile `request`'s key against `cache`: the actions to take, or why it failed.
    fn reconcile(&self, request: &Request, cache: &SharedCache) -> Result<Outcome, ReconcileError>;
    /// Which build this is (a Wasm plugin's `sha256:<hex>`), for logs that must tell two
    /// versions with the same `spec().version` apart; `None` for native reconcilers.
    fn digest(&self) -> Option<&str> {
        None
    }
    /// Whether `reconcile` runs untrusted guest code (a Wasm plugin): the controller then calls
    /// it on the lower-priority guest threads ([`crate::plugin::guest_threads`]), so a guest
    /// computing to its deadline cannot delay the host's own work; native reconcilers run in
    /// place on the worker's thread, its other tasks handed to another thread meanwhile
    /// (`tokio::task::block_in_place`).
    fn runs_guest_code(&self) -> bool {
        false
    }
    /// Reconcile `request` as a shadow candidate: the same as [`Reconciler::reconcile`], but
    /// giving way to serving calls (a Wasm plugin pauses while one is in flight). `cache` is
    /// usually the serving call's reads replayed ([`crate::cache::Kept`]).
    fn reconcile_as_candidate(&self, request: &Request, cache: &SharedCache) -> Result<Outcome, ReconcileError> {
        self.reconcile(request, cache)
    }
}

/// A panic of reconciler code (or of the host side of a guest call), caught: its message.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct Panicked(pub String);

/// Run `f` (reconciler code: a native reconciler, the host side of a guest call), turning a
/// panic into an error carrying its message (`panic!` with a literal or a format; `unknown
/// panic` for other payloads).
pub(crate) fn catch_panic<R>(f: impl FnOnce() -> R) -> Result<R, Panicked> {
    std::panic::catch_unwind(std::panic::AssertUnwindSafe(f)).map_err(|panic| {
        Panicked(
            panic
                .downcast_ref::<&str>()
                .map(std::string::ToString::to_string)
                .or_else(|| panic.downcast_ref::<String>().cloned())
                .unwrap_or_else(|| "unknown panic".into()),
        )
    })
}
