//! Test plugin `read-outside-grant`: declares only `v1/ConfigMap`, then tries to read a
//! `v1/Secret`, a ConfigMap in namespace `kube-system`, and lists ConfigMaps across all
//! namespaces. Reports what it saw as an event on its object, the message a JSON object:
//! `{"secret": "...", "otherNamespace": "...", "listedAll": "..."}`.
#![cfg(target_arch = "wasm32")]

// Built against contract 0.2 (wit/compat/v0.2): the host must keep loading 0.2 plugins, and
// these fixtures prove it on every run.
wit_bindgen::generate!({ path: "../../../wit/compat/v0.2", world: "controller" });

use exports::wasmloop::controller::plugin::Guest;
use wasmloop::controller::cache::{self, CacheError};
use wasmloop::controller::types::*;

struct Plugin;
export!(Plugin);

fn describe<T>(r: Result<T, CacheError>, ok: impl FnOnce(T) -> String) -> String {
    match r {
        Ok(v) => ok(v),
        Err(CacheError::NotGranted(m)) => format!("not-granted: {m}"),
        Err(CacheError::UnknownIndex(m)) => format!("unknown-index: {m}"),
        Err(CacheError::Invalid(m)) => format!("invalid: {m}"),
    }
}

fn json_str(s: &str) -> String {
    let mut out = String::from("\"");
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            c if (c as u32) < 0x20 => out.push_str(&format!("\\u{:04x}", c as u32)),
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

impl Guest for Plugin {
    fn metadata() -> PluginMetadata {
        PluginMetadata {
            name: "read-outside-grant".into(),
            version: "0.1.0".into(),
            reconciles: KindRef { api_version: "v1".into(), kind: "ConfigMap".into() },
            selector: None,
            watches: vec![],
            indexes: vec![],
            fields: vec![],
        }
    }

    fn reconcile(request: Request) -> Result<Outcome, ReconcileError> {
        let secret = KindRef { api_version: "v1".into(), kind: "Secret".into() };
        let config_map = KindRef { api_version: "v1".into(), kind: "ConfigMap".into() };
        let secret = describe(cache::get(&secret, request.key.namespace.as_deref(), "admin-token"), |o| {
            format!("read: {}", o.map(|j| j.len()).unwrap_or(0))
        });
        let other = describe(cache::get(&config_map, Some("kube-system"), "cluster-config"), |o| {
            format!("read: {}", o.map(|j| j.len()).unwrap_or(0))
        });
        let listed = describe(cache::list(&config_map, None, None), |v| format!("listed: {}", v.len()));
        let message =
            format!(r#"{{"secret":{},"otherNamespace":{},"listedAll":{}}}"#, json_str(&secret), json_str(&other), json_str(&listed));
        Ok(Outcome {
            actions: vec![Action::Event(Event {
                regarding: request.key,
                event_type: EventType::Warning,
                reason: "ReadOutsideGrant".into(),
                message,
            })],
            requeue_after_ms: None,
        })
    }
}
