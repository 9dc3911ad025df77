//! Test plugin `spin-loop`: `reconcile` never returns (the host must interrupt it).
#![cfg(target_arch = "wasm32")]

// Built against contract 0.2 (wit/compat/v0.2): the host must keep loading 0.2 plugins, and
// these fixtures prove it on every run.
wit_bindgen::generate!({ path: "../../../wit/compat/v0.2", world: "controller" });

use exports::wasmloop::controller::plugin::Guest;
use wasmloop::controller::types::*;

struct Plugin;
export!(Plugin);

impl Guest for Plugin {
    fn metadata() -> PluginMetadata {
        PluginMetadata {
            name: "spin-loop".into(),
            version: "0.1.0".into(),
            reconciles: KindRef { api_version: "v1".into(), kind: "ConfigMap".into() },
            selector: None,
            watches: vec![],
            indexes: vec![],
            fields: vec![],
        }
    }

    fn reconcile(_request: Request) -> Result<Outcome, ReconcileError> {
        let mut i: u64 = 0;
        loop {
            i = std::hint::black_box(i.wrapping_add(1));
        }
    }
}
