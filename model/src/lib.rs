//! The contract's vocabulary and the rules that the wasmloop host, its guest SDK and its CLI
//! must apply identically. Defined once here, so they can never disagree.
//!
//! - [`action`]: the one action vocabulary ([`Action`], [`Preconditions`], [`PatchType`],
//!   [`EventType`]) and the verb each needs;
//! - [`kind`]: [`KindRef`] and [`ObjectKey`], printed and parsed in the one key syntax;
//! - [`request`]: [`Request`] and [`Reason`];
//! - [`mapping`]: how events on related objects map to keys of the reconciled kind;
//! - [`verb`]: the one verb vocabulary of grants, actions, refusals and metrics;
//! - [`name`]: DNS labels, subdomains and request-path segments;
//! - [`target`]: what object an action touches (kind, scope, namespace, name or generateName),
//!   with the syntax checks the API server applies to path segments, so a hostile plugin cannot
//!   smuggle a subresource (`name/status`), a path traversal (`..`) or a `List` body past the
//!   host's grant checks;
//! - [`field`]: what a declared field path (`status.phase`) reads from an object;
//! - [`selector`]: label selectors, parsed and matched;
//! - [`index_path`]: declared index paths, parsed and evaluated;
//! - [`packed`]: the one buffer a packed metadata read returns (contract 0.3.1), written by the
//!   host and read in place by the SDK;
//! - [`owner`]: which owner reference is the controller, and how a child is given its owner;
//! - `patch` (feature `patch`): merge and JSON patches as the host admits and applies them, and
//!   preconditions;
//! - `conformance` (feature `conformance`): the corpus of cases (`model/conformance/`) every
//!   runner (the host, the Rust, JavaScript and Python fakes) checks itself against.

#![forbid(unsafe_code)]
#![warn(missing_docs)]

pub mod action;
#[cfg(feature = "conformance")]
pub mod conformance;
pub mod field;
#[cfg(any(test, feature = "fuzz"))]
pub mod fuzz;
pub mod index_path;
pub mod kind;
pub mod mapping;
pub mod name;
pub mod owner;
pub mod packed;
#[cfg(feature = "patch")]
pub mod patch;
pub mod request;
pub mod selector;
pub mod target;
pub mod verb;

pub use action::{Action, Deletion, Event, EventType, Patch, PatchType, Preconditions};
pub use kind::{InvalidApiVersion, InvalidKey, KindRef, ObjectKey};
pub use mapping::{IndexValue, Mapping};
pub use request::{Reason, Request};
pub use target::{Naming, Target, TargetError, TargetName, json_type};
pub use verb::{UnknownVerb, Verb};
