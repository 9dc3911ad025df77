//! Host-side bindings generated from the contract's WIT (world `controller`).
//!
//! - the current contract, `wit/controller.wit` (0.3): the types the host speaks;
//! - [`v0_2`] and [`v0_1`], the previous ones (`wit/compat/v0.2/`, `wit/compat/v0.1/`), still
//!   loaded: [`super::compat`] converts their calls, so the rest of the host only sees 0.3 types.
//!
//! Each version's imports (`cache`, `log`) are linked under their own versioned names, so one
//! linker serves plugins of both.

// Exports are called asynchronously so that a call's deadline can cancel it wherever it is,
// including inside a blocking WASI import (a guest sleeping in `poll`). The host's own imports
// (`cache`, `log`) never block and stay synchronous.
wasmtime::component::bindgen!({
    path: "../wit",
    world: "controller",
    exports: { default: async },
});

pub use self::wasmloop::controller::{cache, log, types};

/// The 0.2 contract (`wasmloop:controller@0.2.0`).
pub mod v0_2 {
    wasmtime::component::bindgen!({
        path: "../wit/compat/v0.2",
        world: "controller",
        exports: { default: async },
    });

    pub use self::wasmloop::controller::{cache, log, types};

    /// The version of this contract.
    pub const VERSION: &str = "0.2.0";
}

/// The 0.1 contract (`wasmloop:controller@0.1.0`).
pub mod v0_1 {
    wasmtime::component::bindgen!({
        path: "../wit/compat/v0.1",
        world: "controller",
        exports: { default: async },
    });

    pub use self::wasmloop::controller::{cache, log, types};

    /// The version of this contract.
    pub const VERSION: &str = "0.1.0";
}

/// The package the host speaks, e.g. `wasmloop:controller`.
pub const PACKAGE: &str = "wasmloop:controller";
/// The contract version the host was built against (the WIT package version).
pub const VERSION: &str = "0.3.1";
/// Every contract version the host loads, newest first.
pub const SUPPORTED: &[&str] = &[VERSION, v0_2::VERSION, v0_1::VERSION];
/// The exported interface a plugin must provide (without version).
pub const PLUGIN_INTERFACE: &str = "wasmloop:controller/plugin";
