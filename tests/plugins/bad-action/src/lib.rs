//! Test plugin `bad-action`: returns malformed actions, chosen by the object's name:
//! - `invalid-json`: action 0 is a valid event, action 1 a create whose JSON does not parse;
//! - `no-name`: action 0 is an apply of an object without `metadata.name`;
//! - anything else: a create of a JSON array (not an object).
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
            name: "bad-action".into(),
            version: "0.1.0".into(),
            reconciles: KindRef { api_version: "v1".into(), kind: "ConfigMap".into() },
            selector: None,
            watches: vec![],
            indexes: vec![],
            fields: vec![],
        }
    }

    fn reconcile(request: Request) -> Result<Outcome, ReconcileError> {
        let actions = match request.key.name.as_str() {
            "invalid-json" => vec![
                Action::Event(Event {
                    regarding: request.key.clone(),
                    event_type: EventType::Normal,
                    reason: "Fine".into(),
                    message: "this one is valid".into(),
                }),
                Action::Create(r#"{"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "#.into()),
            ],
            "no-name" => vec![Action::Apply(r#"{"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"namespace": "default"}}"#.into())],
            _ => vec![Action::Create("[1, 2, 3]".into())],
        };
        Ok(Outcome { actions, requeue_after_ms: None })
    }
}
