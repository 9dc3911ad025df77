//! Plugins hot-loaded from ConfigMaps.
//!
//! - [`source`]: decode a plugin ConfigMap (`plugin.wasm[.zst|.gz]` + `plugin.yaml`);
//! - [`manifest`]: the admin's `plugin.yaml` (name, grants, limits, concurrency, queue, resync);
//! - [`manager`]: [`PluginManager`] watches labelled ConfigMaps and adds, swaps or removes
//!   controllers; a broken version never replaces a working one;
//! - [`pack`]: `wasmloop pack`, a plugin as a ConfigMap ready for `kubectl apply`.

pub mod manager;
pub mod manifest;
pub mod metrics;
pub mod pack;
pub mod source;

pub use manager::{LoadEvent, LoadOrigin, PluginManager, PluginManagerConfig};
pub use manifest::PluginManifest;
pub use metrics::PluginMetrics;
