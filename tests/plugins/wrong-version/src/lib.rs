//! Test plugin `wrong-version`: built against `wasmloop:controller@0.9.0` (a copy of the WIT in
//! this crate's `wit/`), which this host (0.1.x) must refuse to load, naming both versions.
#![cfg(target_arch = "wasm32")]

wit_bindgen::generate!({ path: "wit", world: "controller" });

use exports::wasmloop::controller::plugin::Guest;
use wasmloop::controller::types::*;

struct Plugin;
export!(Plugin);

impl Guest for Plugin {
    fn metadata() -> PluginMetadata {
        PluginMetadata {
            name: "wrong-version".into(),
            version: "0.1.0".into(),
            reconciles: KindRef { api_version: "v1".into(), kind: "ConfigMap".into() },
            selector: None,
            watches: vec![],
            indexes: vec![],
        }
    }

    fn reconcile(_request: Request) -> Result<Outcome, ReconcileError> {
        Ok(Outcome { actions: vec![], requeue_after_ms: None })
    }
}
