//! Test plugin `memory-bomb`: `reconcile` allocates 1 MiB chunks (touching each) until
//! allocation fails, which aborts the guest.
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
            name: "memory-bomb".into(),
            version: "0.1.0".into(),
            reconciles: KindRef { api_version: "v1".into(), kind: "ConfigMap".into() },
            selector: None,
            watches: vec![],
            indexes: vec![],
            fields: vec![],
        }
    }

    fn reconcile(_request: Request) -> Result<Outcome, ReconcileError> {
        let mut hoard: Vec<Vec<u8>> = Vec::new();
        loop {
            let mut chunk = vec![0u8; 1 << 20];
            let last = chunk.len() - 1;
            chunk[last] = 1;
            hoard.push(std::hint::black_box(chunk));
        }
    }
}
