//! The wasmtime sandbox that runs Wasm reconcilers (`wasm32-wasip2` components implementing
//! `wit/controller.wit`).
//!
//! - [`limits`]: per-plugin [`Limits`] and engine-wide [`EngineLimits`];
//! - [`engine`]: the shared [`PluginEngine`] (pooling allocator, epoch ticker, linker) and the
//!   on-disk [`PrecompiledCache`];
//! - [`function_cache`]: compiled functions kept in memory between compiles of a plugin's
//!   versions (`wasmloop dev`);
//! - [`guest_threads`]: the lower-priority threads guest code (reconciles, compiles) runs on;
//! - [`host`]: the per-call Store data: zero-capability WASI, memory limiter, the `cache` and
//!   `log` imports (reads checked against the plugin's grants);
//! - [`bindings`], `convert`, `compat`: the contract's WIT (0.2, and 0.1 still loaded) and the
//!   conversions between its types and the host's;
//! - [`runtime`]: [`WasmPlugin`], loading + validation and `impl Reconciler` (fresh Store per
//!   reconcile, traps/timeouts/OOM as transient errors, counted in [`PluginStats`]), refused
//!   loads as an [`Error`];
//! - [`contract`]: which `wasmloop:controller` versions this host runs (semver rules);
//! - `instance`: the linked component per contract version, a call's Store, the deadline;
//! - `fault`: how a guest call failed (timeout, out of memory, trap, host), as operators read it;
//! - [`phases`]: where one call's time goes ([`phases::CallPhases`], for benchmarks);
//! - [`imports`]: what a plugin imports that the host does not provide, by interface and function;
//! - [`inspect`]: describe a plugin file for `wasmloop inspect`;
//! - [`recording`]: a [`Recording`] of one reconcile's inputs and outcome (`.json.zst`);
//! - [`recorder`]: capturing them in a call, and a plugin's opt-in [`Recorder`] writing them;
//! - [`replay`]: serving a recording to a plugin again, and the [`OutcomeDiff`] of the outcomes.

pub mod address_space;
pub(crate) mod bindings;
mod compat;
pub mod contract;
pub(crate) mod convert;
pub mod engine;
mod error;
mod fault;
pub mod function_cache;
pub mod guest_threads;
pub(crate) mod host;
mod imports;
pub mod inspect;
mod instance;
mod limiter;
pub mod limits;
pub mod memory_metrics;
pub(crate) mod meta;
mod output;
pub mod phases;
pub mod recorder;
pub mod recording;
pub mod replay;
pub mod runtime;
mod stats;

pub use convert::MetadataError;
pub use engine::{Compiled, Origin, PluginEngine, PrecompiledCache};
pub use error::{Error, Result};
pub use function_cache::{FunctionCache, FunctionCacheStats};
pub use inspect::{Inspection, inspect, inspect_compiled};
pub use limits::{ByteSize, EngineLimits, Limits, LoadLimits};
pub use recorder::{RecordOptions, Recorder, RecorderStats};
pub use recording::Recording;
pub use replay::{OutcomeDiff, ReplayReport};
pub use runtime::{Replayed, WasmPlugin};
pub use stats::PluginStats;
