//! How one reconcile of a key ends ([`Settled`]): a requeue asked for, or a failure
//! ([`Failed`]) with how it is retried ([`Handling`]) and why ([`FailCause`]). The worker settles
//! keys by it; apply produces it.

use std::time::Duration;

use crate::admission;
use crate::executor;
use crate::reconciler::Cause;

/// How a failed reconcile of a key is retried.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Handling {
    /// With per-key backoff; the next request carries the error.
    Backoff,
    /// Not until the object (or something mapped to it) changes.
    WhenChanged,
    /// A precondition failed: the plugin's view was stale. Reconciled again, not an error.
    Again,
}

/// Why a reconcile of a key failed.
#[derive(Debug, thiserror::Error)]
pub(super) enum FailCause {
    /// The reconciler failed: its own error, an invalid outcome, the sandbox.
    #[error(transparent)]
    Reconcile(Cause),
    /// Admission refused an action of the outcome.
    #[error("plugin {plugin}: {refusal}")]
    Refused { plugin: String, refusal: Box<admission::Refusal> },
    /// Admission could not judge an action now, or found the plugin's view stale.
    #[error(transparent)]
    Admission(admission::Error),
    /// An action failed after `done` of the outcome's `total` were executed.
    #[error("{source} ({done} of {total} actions of this outcome were executed)")]
    Action { source: executor::Error, done: usize, total: usize },
    /// The reconciler failed, and so did the actions it returned with its error.
    #[error("{cause} (and the actions returned with the error failed: {actions})")]
    WithActions { cause: Cause, actions: Box<FailCause> },
}

/// A failed reconcile: how it is retried and why.
#[derive(Debug)]
pub(super) struct Failed {
    pub(super) handling: Handling,
    pub(super) cause: Box<FailCause>,
}

impl Failed {
    pub(super) fn new(handling: Handling, cause: FailCause) -> Self {
        Self { handling, cause: Box::new(cause) }
    }

    /// A failed action, with how far the outcome got (nothing is half-applied silently).
    pub(super) fn action(source: executor::Error, done: usize, total: usize) -> Self {
        let handling = if source.is_conflict() {
            Handling::Again
        } else if source.is_permanent() {
            Handling::WhenChanged
        } else {
            Handling::Backoff
        };
        Self::new(handling, FailCause::Action { source, done, total })
    }
}

/// The result of one reconcile of a key: a requeue asked for, or a failure.
pub(super) type Settled = Result<Option<Duration>, Failed>;

/// The `result` label of a reconcile in metrics and the reconcile line.
pub(super) fn result_label(r: &Settled) -> &'static str {
    match r {
        Ok(Some(_)) => "requeue_after",
        Ok(None) => "success",
        Err(f) => match f.handling {
            Handling::Backoff => "error",
            Handling::WhenChanged => "permanent_error",
            Handling::Again => "conflict",
        },
    }
}
