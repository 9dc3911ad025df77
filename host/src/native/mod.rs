//! Native Rust reconcilers. They implement the same [`Reconciler`](crate::reconciler::Reconciler)
//! trait as Wasm plugins, so the two can be run and benchmarked side by side.
//!
//! [`SdkReconciler`] runs a plugin crate's own `wasmloop_sdk::Reconciler` natively: the same
//! source as the plugin's component, without the sandbox.

mod sdk;

pub use sdk::{Error, SdkReconciler};
