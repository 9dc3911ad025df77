//! Test plugin `panic`: panics when the reconciled object's name starts with `panic`,
//! otherwise returns an empty outcome (so the next call shows the plugin still works).
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
            name: "panic".into(),
            version: "0.1.0".into(),
            reconciles: KindRef { api_version: "v1".into(), kind: "ConfigMap".into() },
            selector: None,
            watches: vec![],
            indexes: vec![],
            fields: vec![],
        }
    }

    fn reconcile(request: Request) -> Result<Outcome, ReconcileError> {
        if request.key.name.starts_with("panic") {
            panic!("deliberate panic while reconciling {}", request.key.name);
        }
        Ok(Outcome { actions: vec![], requeue_after_ms: None })
    }
}
