//! [`Request`]: what the host asks a reconciler, and [`Reason`]: why.

use crate::kind::ObjectKey;

/// Why a key was queued (the first cause, when several were folded into one reconcile).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Reason {
    /// An add, update or delete of the object or of an object that maps to it.
    Event,
    /// The periodic resync replayed the cache.
    Resync,
    /// The previous reconcile asked for a requeue.
    Requeue,
    /// The previous reconcile failed; this is attempt number N (1 = first retry).
    Retry(u32),
}

/// One reconcile request: which object, and why.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Request {
    /// The object to reconcile (always of the reconciled kind).
    pub key: ObjectKey,
    /// Why it was queued; a reconcile should not depend on it for correctness.
    pub reason: Reason,
    /// Why the previous reconcile of this key failed, while it keeps failing (an action the
    /// API server refused, say): a controller reports it in the object's status, as
    /// kube-controller-manager's `ReplicaFailure` condition.
    pub last_error: Option<String>,
}

impl Request {
    /// A request caused by an event, with no failure before it (the common case).
    pub fn new(key: ObjectKey) -> Self {
        Self { key, reason: Reason::Event, last_error: None }
    }

    /// The same request, queued for `reason`.
    #[must_use]
    pub fn because(mut self, reason: Reason) -> Self {
        self.reason = reason;
        self
    }
}
