//! Plugins hot-loaded from ConfigMaps.
//!
//! - [`source`]: decode a plugin ConfigMap (`plugin.yaml` + the wasm: inline `plugin.wasm[.zst|.gz]`,
//!   or an immutable payload ConfigMap referenced by name and sha256);
//! - [`manifest`]: the admin's `plugin.yaml` (name, grants, limits, concurrency, queue, resync);
//! - [`lifecycle`]: the life cycle of one plugin ConfigMap as a pure state machine (what serves,
//!   what is pending, when a version is suspended or resumed), with its invariants;
//! - [`manager`]: [`PluginManager`] watches labelled ConfigMaps and drives their life cycles,
//!   carrying out the effects: a load ([`payloads`] resolves referenced payloads from the
//!   informer's cache, [`compile`] compiles in a bounded pool, [`access`] checks the plugin's
//!   identity and reads), a start, swap, suspension or removal ([`install`], [`candidates`]
//!   for `shadowOf:` versions), a report ([`report`]); [`fingerprint`] says what in a ConfigMap
//!   counts for loading it;
//! - [`claims`]: the name and memory each plugin ConfigMap holds (one holder per name, a budget);
//! - [`waiting`]: a plugin whose kinds, payload, name or RBAC are not there yet waits (tried
//!   again by itself) instead of being refused; [`served`] asks discovery which kinds are served;
//! - [`status`]: the Events and status annotations on plugin ConfigMaps (`wasmloop.dev/state`,
//!   `wasmloop.dev/digest`, `wasmloop.dev/status`, `wasmloop.dev/last-good`), written so that a
//!   deleted ConfigMap is never re-created;
//! - [`pack`]: `wasmloop pack`, a plugin as ConfigMaps (payload + plugin) ready for `kubectl apply`;
//! - [`registry`]: the component of a plugin whose manifest names an OCI artifact (`oci:`),
//!   pulled, verified and cached ([`crate::oci`]);
//! - [`rbac`]: the RBAC a manifest needs (`wasmloop pack --rbac`): the plugin's ServiceAccount and
//!   rules, the host's reads and its right to impersonate exactly that account.

mod access;
mod candidates;
mod claims;
mod compile;
mod fingerprint;
mod install;
pub mod lifecycle;
mod manager;
mod manifest;
pub mod metrics;
pub mod pack;
mod payloads;
pub mod rbac;
mod registry;
mod report;
mod served;
pub mod source;
mod status;
pub mod waiting;

pub use candidates::DIFFERENCE_EVENT_EVERY;
pub use compile::LoadOrigin;
pub use lifecycle::GonePolicy;
pub use manager::{Error, PluginManager, PluginManagerConfig};
pub use manifest::{OciPayload, PluginManifest};
pub use metrics::PluginMetrics;
pub use registry::{DOCKER_CONFIG_KEY, DOCKER_CONFIG_SECRET_TYPE, OciSettings};
pub use report::LoadEvent;
pub use status::{DIGEST_ANNOTATION, LAST_GOOD_ANNOTATION, PluginStatus, STATE_ANNOTATION, State};
pub use waiting::{WaitPolicy, WaitReason};
