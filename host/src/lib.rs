//! wasmloop: a Kubernetes controller host that runs reconcile logic as sandboxed Wasm plugins.
//!
//! The control loop, module by module:
//! - [`informer`]: shared List+Watch informers that fill the cache;
//! - [`cache`]: the indexed local cache reconcilers read;
//! - [`queue`]: work queues (dedup, one key at a time, delays, rate-limited retries);
//! - [`reconciler`]: the contract native and Wasm reconcilers implement;
//! - [`controller`]: maps events to keys, runs workers and resync, calls the reconciler;
//! - [`actions`]: what reconcilers return; [`admission`] admits it (judging each write by the
//!   object it produces); [`executor`] sends what was admitted, as the plugin's own identity
//!   ([`identity`]);
//! - [`plugin`]: the wasmtime sandbox that runs Wasm reconcilers; [`grants`] what each may do;
//! - [`hotload`]: loads, swaps and removes plugins from ConfigMaps;
//! - [`fence`] and [`shard`]: who may write: the leader, or the owner of each shard, as the
//!   [`lease`]s they hold say.

// Unsafe code needs a reason: the one block (deserialising a precompiled component, which
// wasmtime cannot check fully) allows it where it is, with its SAFETY argument.
#![deny(unsafe_code)]
#![warn(missing_docs)]

// The fuzz harnesses' runner is wasmloop-model's (its `fuzz` feature, a dev-dependency here).
#[cfg(test)]
use wasmloop_model::fuzz;
pub mod actions;
pub mod admission;
pub mod bounded;
pub mod cache;
pub mod client;
pub mod controller;
pub mod crds;
pub mod duration;
pub mod executor;
#[cfg(test)]
mod fake_api;
pub mod fence;
pub mod grants;
pub(crate) mod heap;
pub mod hotload;
pub mod identity;
pub mod informer;
pub mod kinds;
pub(crate) mod labels;
pub mod leader;
pub mod lease;
pub mod native;
pub mod oci;
pub mod plugin;
pub mod plugin_state;
pub mod queue;
pub mod reconciler;
pub mod server;
pub mod shard;
