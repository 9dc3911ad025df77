//! The actions a reconciler returns: [`Action`], as the plugin said it, and [`Planned`], the same
//! action checked once where it enters the host, carrying its target and verb. Admission turns
//! planned actions into admitted ones ([`crate::admission::Admitted`]), the only thing the
//! [`crate::executor`] sends.

mod action;
mod planned;

pub use action::{Action, Deletion, Event, EventType, Patch, PatchType, Preconditions};
pub use planned::{MAX_PATCH_PATH_SEGMENTS, OutcomeError, PatchDoc, PlanError, Planned, plan};
