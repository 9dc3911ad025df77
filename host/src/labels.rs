//! The labels by which the host knows its own objects: plugin ConfigMaps and their payloads.
//! Defined here, apart from the hot-loader that reads them and the admission rules that protect
//! them, so neither depends on the other.

/// The label that marks a ConfigMap as a plugin (`wasmloop.dev/plugin=true`).
pub const PLUGIN_LABEL: &str = "wasmloop.dev/plugin";

/// The label that marks a ConfigMap as a plugin payload (wasm only, referenced by digest).
pub const PAYLOAD_LABEL: &str = "wasmloop.dev/plugin-payload";
