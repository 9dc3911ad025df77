//! [`Execute`]: the one seam between a controller and the API server. A controller sends its
//! admitted actions and the host's own reports through it; the [`Executor`] is the real one,
//! and unit tests of the worker and of applying an outcome put a recording fake in its place
//! (kube-runtime tests its applier the same way, with no cluster).

use futures::future::BoxFuture;

use super::{Executed, Executor, Result};
use crate::actions::EventType;
use crate::admission::AdmittedAction;
use crate::fence::Fence;
use crate::kinds::ObjectKey;

/// Sends a controller's admitted actions, and the Events the host itself records about them.
pub trait Execute: Send + Sync {
    /// Send one admitted action on behalf of controller `manager` (its field manager and Event
    /// source), only while `fence` is open.
    fn execute<'a>(&'a self, manager: &'a str, admitted: &'a AdmittedAction, fence: &'a Fence) -> BoxFuture<'a, Result<Executed>>;

    /// Record an Event about `regarding` as `manager`, with the host's own identity.
    fn record_event<'a>(&'a self, manager: &'a str, regarding: &'a ObjectKey, event: HostEvent<'a>) -> BoxFuture<'a, Result<Executed>>;

    /// The client admission's dry runs go out with (as the plugin); `None` when there is no API
    /// server (then results that need the server are not computed).
    fn dry_run_client(&self) -> Option<&kube::Client>;
}

/// An Event the host records itself: its type, reason and message.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct HostEvent<'a> {
    /// `Normal` or `Warning`.
    pub event_type: EventType,
    /// A short CamelCase reason.
    pub reason: &'a str,
    /// The human-readable message.
    pub message: &'a str,
}

impl Execute for Executor {
    fn execute<'a>(&'a self, manager: &'a str, admitted: &'a AdmittedAction, fence: &'a Fence) -> BoxFuture<'a, Result<Executed>> {
        Box::pin(Executor::execute(self, manager, admitted, fence))
    }

    fn record_event<'a>(&'a self, manager: &'a str, regarding: &'a ObjectKey, event: HostEvent<'a>) -> BoxFuture<'a, Result<Executed>> {
        Box::pin(Executor::record_event(self, manager, regarding, event.event_type, event.reason, event.message))
    }

    fn dry_run_client(&self) -> Option<&kube::Client> {
        Some(self.writer().client())
    }
}
