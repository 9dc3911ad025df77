//! What a plugin asks the host to do: one [`Action`] per write or Event, with the conditions the
//! API server checks first. [`crate::Outcome`] builds them; [`crate::patch`] has the patch
//! builders. The vocabulary is `wasmloop-model`'s, the same types the host checks and sends.
//!
//! A deletion with preconditions, built like a [`Patch`] (a mismatch is a conflict: nothing is
//! deleted and the host reconciles the key again once its cache has caught up):
//!
//! ```
//! use wasmloop_sdk::{kinds, Deletion, Outcome};
//! // Delete the ConfigMap only if it is still the one read (not deleted and re-created).
//! let out = Outcome::new().deletion(Deletion::new(kinds::CONFIG_MAP.key(Some("ns"), "c")).if_uid("uid-1"));
//! assert_eq!(out.deletions().next().unwrap().preconditions.uid.as_deref(), Some("uid-1"));
//! ```

pub use wasmloop_model::action::{Action, Deletion, Event, EventType, Patch, PatchType, Preconditions};
