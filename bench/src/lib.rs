//! wasmloop's benchmarks, as a library shared by the `wasmloop-bench` binary (the live
//! measurements `scripts/bench.sh` runs) and the criterion bench `benches/reconcile.rs`.
//!
//! Every module measures one section of BENCHMARKS.md and writes its raw results as JSON;
//! [`report`] turns a directory of them into the Markdown file. Nothing in the report is typed
//! in by hand: a missing or broken result is an error, not a blank cell.

pub mod alloc;
pub mod cache_memory;
pub mod cache_scale;
pub mod call_cost;
pub mod controllers;
pub mod convergence;
pub mod devloop;
pub mod fixtures;
pub mod index_memory;
pub mod kube_util;
pub mod latency;
pub mod memory;
pub mod phases;
pub mod polyglot;
pub mod procfs;
pub mod queue;
pub mod reload;
pub mod report;
pub mod rollout_race;
pub mod scaleout;
pub mod shadow;
pub mod stats;
