//! The actions a reconciler returns, as it returned them (planned): what admission checks and,
//! once admitted ([`crate::admission::Admitted`]), what the [`crate::executor`] sends.

mod action;

pub use action::{Action, EventType, PatchType, Preconditions};
