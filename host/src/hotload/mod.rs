//! Plugins hot-loaded from ConfigMaps.
//!
//! - [`source`]: decode a plugin ConfigMap (`plugin.yaml` + the wasm: inline `plugin.wasm[.zst|.gz]`,
//!   or an immutable payload ConfigMap referenced by name and sha256);
//! - [`manifest`]: the admin's `plugin.yaml` (name, grants, limits, concurrency, queue, resync);
//! - [`manager`]: [`PluginManager`] watches labelled ConfigMaps and adds, swaps or removes
//!   controllers; a broken version never replaces a working one;
//! - [`pack`]: `wasmloop pack`, a plugin as ConfigMaps (payload + plugin) ready for `kubectl apply`;
//! - [`rbac`]: the RBAC a manifest needs (`wasmloop pack --rbac`): the plugin's ServiceAccount and
//!   rules, the host's reads and its right to impersonate exactly that account.

pub mod manager;
pub mod manifest;
pub mod metrics;
pub mod pack;
pub mod rbac;
pub mod source;

pub use manager::{LoadEvent, LoadOrigin, PluginManager, PluginManagerConfig};
pub use manifest::PluginManifest;
pub use metrics::PluginMetrics;
