//! Test plugin `echo`, the well-behaved one: reads its primary object from the cache (as JSON,
//! and through a metadata read with the declared field `data.k`) and returns an update-status
//! describing what it saw, the request's last error, and how many reconciles this instance has
//! served (always 1 when every reconcile gets a fresh instance). Logs one line through the `log`
//! import and one through stdout.
#![cfg(target_arch = "wasm32")]

// Built against contract 0.2 (wit/compat/v0.2): the host must keep loading 0.2 plugins, and
// these fixtures prove it on every run.
wit_bindgen::generate!({ path: "../../../wit/compat/v0.2", world: "controller" });

use std::sync::atomic::{AtomicU32, Ordering};

use exports::wasmloop::controller::plugin::Guest;
use wasmloop::controller::types::*;
use wasmloop::controller::{cache, log};

static CALLS: AtomicU32 = AtomicU32::new(0);

struct Plugin;
export!(Plugin);

impl Guest for Plugin {
    fn metadata() -> PluginMetadata {
        PluginMetadata {
            name: "echo".into(),
            version: "0.1.0".into(),
            reconciles: KindRef { api_version: "v1".into(), kind: "ConfigMap".into() },
            selector: None,
            watches: vec![],
            indexes: vec![],
            fields: vec![Field { kind: KindRef { api_version: "v1".into(), kind: "ConfigMap".into() }, path: "data.k".into() }],
        }
    }

    fn reconcile(request: Request) -> Result<Outcome, ReconcileError> {
        let calls = CALLS.fetch_add(1, Ordering::Relaxed) + 1;
        let key = request.key;
        let kind = KindRef { api_version: key.api_version.clone(), kind: key.kind.clone() };
        let found = cache::get(&kind, key.namespace.as_deref(), &key.name)
            .map_err(|e| ReconcileError::Transient(format!("cache read failed: {e:?}")))?;
        let Some(json) = found else {
            return Ok(Outcome { actions: vec![], requeue_after_ms: None });
        };
        log::log(log::Level::Info, &format!("echo: {} is {} bytes", key.name, json.len()));
        println!("echo: stdout works");
        let reason = match request.reason {
            Reason::Event => "event".to_string(),
            Reason::Resync => "resync".to_string(),
            Reason::Requeue => "requeue".to_string(),
            Reason::Retry(n) => format!("retry-{n}"),
        };
        let meta = cache::get_meta(&kind, key.namespace.as_deref(), &key.name)
            .map_err(|e| ReconcileError::Transient(format!("metadata read failed: {e:?}")))?
            .ok_or_else(|| ReconcileError::Transient("metadata read found nothing".into()))?;
        let field = meta.fields.first().cloned().flatten().unwrap_or_else(|| "null".into());
        let last_error = request.last_error.map_or("null".to_string(), |e| format!("{e:?}"));
        let status = format!(
            r#"{{"observedBytes":{},"callsInThisInstance":{calls},"reason":"{reason}","metaName":"{}","metaUidLen":{},"declaredField":{field},"lastError":{last_error}}}"#,
            json.len(),
            meta.name,
            meta.uid.len(),
        );
        Ok(Outcome { actions: vec![Action::UpdateStatus(StatusUpdate { key, status })], requeue_after_ms: Some(30_000) })
    }
}
