//! Native Rust reconcilers. They implement the same [`Reconciler`](crate::controller::Reconciler)
//! trait as Wasm plugins, so the two can be run and benchmarked side by side.

pub mod replicaset;

pub use replicaset::ReplicaSetReconciler;
