//! Rules that the wasmloop host and the guest SDK's test fake must apply identically.
//!
//! - [`target`]: what object an action touches (kind, scope, namespace, name or generateName),
//!   with the syntax checks the API server applies to path segments, so a hostile plugin cannot
//!   smuggle a subresource (`name/status`), a path traversal (`..`) or a `List` body past the
//!   host's grant checks;
//! - [`field`]: what a declared field path (`status.phase`) reads from an object;
//! - [`selector`]: label selectors, parsed and matched;
//! - [`index_path`]: declared index paths, parsed and evaluated;
//! - [`verb`]: the one verb vocabulary of grants, actions, refusals and metrics.

#![forbid(unsafe_code)]

pub mod field;
#[cfg(test)]
mod fuzz;
pub mod index_path;
pub mod selector;
pub mod target;
pub mod verb;

pub use target::{Naming, Target, TargetError, TargetName, json_type};
pub use verb::{UnknownVerb, Verb};
