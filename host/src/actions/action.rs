//! The actions a reconciler returns, in the contract's one vocabulary: `wasmloop-model`'s, the
//! same types the guest SDK builds (what `wasmloop reconcile` prints is their JSON form).

pub use wasmloop_model::action::{Action, Deletion, Event, EventType, Patch, PatchType, Preconditions};
