//! Plugins hot-loaded from ConfigMaps.
//!
//! - [`source`]: decode a plugin ConfigMap (`plugin.yaml` + the wasm: inline `plugin.wasm[.zst|.gz]`,
//!   or an immutable payload ConfigMap referenced by name and sha256);
//! - [`manifest`]: the admin's `plugin.yaml` (name, grants, limits, concurrency, queue, resync);
//! - [`manager`]: [`PluginManager`] watches labelled ConfigMaps and adds, swaps or removes
//!   controllers; a broken version never replaces a working one;
//! - [`claims`]: the name and memory each plugin ConfigMap holds (one holder per name, a budget);
//! - [`waiting`]: a plugin whose kinds, payload, name or RBAC are not there yet waits (tried
//!   again by itself) instead of being refused; [`served`] asks discovery which kinds are served;
//! - [`status`]: the Events and status annotations on plugin ConfigMaps (`wasmloop.dev/state`,
//!   `wasmloop.dev/digest`, `wasmloop.dev/status`), written so that a deleted ConfigMap is never
//!   re-created;
//! - [`pack`]: `wasmloop pack`, a plugin as ConfigMaps (payload + plugin) ready for `kubectl apply`;
//! - [`rbac`]: the RBAC a manifest needs (`wasmloop pack --rbac`): the plugin's ServiceAccount and
//!   rules, the host's reads and its right to impersonate exactly that account.

mod claims;
mod manager;
mod manifest;
pub mod metrics;
pub mod pack;
pub mod rbac;
mod served;
pub mod source;
mod status;
pub mod waiting;

pub use manager::{LoadEvent, LoadOrigin, PluginManager, PluginManagerConfig};
pub use manifest::PluginManifest;
pub use metrics::PluginMetrics;
pub use status::{PluginStatus, State};
pub use waiting::{WaitPolicy, WaitReason};
