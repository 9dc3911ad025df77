//! Host-side bindings generated from `wit/controller.wit` (world `controller`).
//!
//! - imports the host implements: `wasmloop:controller/cache` and `.../log` (see [`super::host`]);
//! - the export it calls: `wasmloop:controller/plugin` (`metadata`, `reconcile`).

// Exports are called asynchronously so that a call's deadline can cancel it wherever it is,
// including inside a blocking WASI import (a guest sleeping in `poll`). The host's own imports
// (`cache`, `log`) never block and stay synchronous.
wasmtime::component::bindgen!({
    path: "../wit",
    world: "controller",
    exports: { default: async },
});

pub use exports::wasmloop::controller::plugin as guest;
pub use self::wasmloop::controller::{cache, log, types};

/// The package the host speaks, e.g. `wasmloop:controller`.
pub const PACKAGE: &str = "wasmloop:controller";
/// The contract version the host was built against (the WIT package version).
pub const VERSION: &str = "0.1.0";
/// The exported interface a plugin must provide (without version).
pub const PLUGIN_INTERFACE: &str = "wasmloop:controller/plugin";
