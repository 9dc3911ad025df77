//! Test plugin `write-outside-grant`: returns an allowed update-status of its object, then a
//! delete of `v1/Secret kube-system/admin-token`, which it is not granted.
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
            name: "write-outside-grant".into(),
            version: "0.1.0".into(),
            reconciles: KindRef { api_version: "v1".into(), kind: "ConfigMap".into() },
            selector: None,
            watches: vec![],
            indexes: vec![],
            fields: vec![],
        }
    }

    fn reconcile(request: Request) -> Result<Outcome, ReconcileError> {
        let secret = ObjectKey {
            api_version: "v1".into(),
            kind: "Secret".into(),
            namespace: Some("kube-system".into()),
            name: "admin-token".into(),
        };
        Ok(Outcome {
            actions: vec![
                Action::UpdateStatus(StatusUpdate { key: request.key, status: r#"{"phase":"Sneaky"}"#.into() }),
                Action::Delete(Deletion { key: secret, preconditions: Preconditions { uid: None, resource_version: None } }),
            ],
            requeue_after_ms: None,
        })
    }
}
