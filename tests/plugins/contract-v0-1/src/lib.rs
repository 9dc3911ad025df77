//! Test plugin `contract-v0-1`: a small but real controller written against contract **0.1**
//! only (raw wit-bindgen bindings of `wit/compat/v0.1`, no SDK), kept as a permanent fixture so
//! that a 0.2 host is seen to load and run 0.1 plugins (tests/tests/contract.rs).
//!
//! For each ConfigMap `X` labelled `contract-v0-1=source` it keeps a copy `X-copy` in the same
//! namespace with the same `data`, labelled `contract-v0-1=copy` and owned by `X` (controller
//! owner reference; copies are watched with the `owner` mapping):
//! - source gone or being deleted: nothing (the garbage collector removes the copy);
//! - source labelled `copy=absent`: the copy is deleted (0.1 `delete(object-key)`);
//! - copy missing: `create` it, and an Event `Copied` on the source;
//! - copy's data differs: `apply` the full copy, and an Event `Copied`; if the copy holds keys the
//!   source no longer has, it is deleted instead (a forced apply cannot remove keys that the
//!   create's field manager owns) and created again on the next reconcile;
//! - otherwise nothing.
//!
//! Sources are the reconciled objects (selector `contract-v0-1=source`); copies are readable only
//! through the watch (selector `contract-v0-1=copy`): the host must serve reads of a kind from
//! all of its informers (a regression test: it once served only the first).
//!
//! Every reconcile reads through the 0.1 `cache.get` and logs one line through the 0.1 `log`.
#![cfg(target_arch = "wasm32")]

wit_bindgen::generate!({ path: "../../../wit/compat/v0.1", world: "controller" });

use exports::wasmloop::controller::plugin::Guest;
use serde_json::{Value, json};
use wasmloop::controller::types::*;
use wasmloop::controller::{cache, log};

struct Plugin;
export!(Plugin);

fn config_map() -> KindRef {
    KindRef { api_version: "v1".into(), kind: "ConfigMap".into() }
}

fn get(namespace: Option<&str>, name: &str) -> Result<Option<Value>, ReconcileError> {
    let found = cache::get(&config_map(), namespace, name).map_err(|e| ReconcileError::Transient(format!("cache.get {name}: {e:?}")))?;
    found
        .map(|json| serde_json::from_str(&json).map_err(|e| ReconcileError::Permanent(format!("parsing ConfigMap {name}: {e}"))))
        .transpose()
}

impl Guest for Plugin {
    fn metadata() -> PluginMetadata {
        PluginMetadata {
            name: "contract-v0-1".into(),
            version: "0.1.0".into(),
            reconciles: config_map(),
            selector: Some("contract-v0-1=source".into()),
            watches: vec![Watch { kind: config_map(), mapping: Mapping::Owner, selector: Some("contract-v0-1=copy".into()) }],
            indexes: vec![],
        }
    }

    fn reconcile(request: Request) -> Result<Outcome, ReconcileError> {
        let key = request.key;
        let ns = key.namespace.as_deref();
        let copy_name = format!("{}-copy", key.name);
        let source = get(ns, &key.name)?;
        let role = source.as_ref().map(|s| s["metadata"]["labels"]["contract-v0-1"].as_str().unwrap_or("").to_owned());
        let copy = match role.as_deref() {
            Some("source") => get(ns, &copy_name)?,
            _ => None,
        };
        log::log(
            log::Level::Info,
            &format!(
                "reconciling {} ({:?}): {}, copy {}",
                key.name,
                request.reason,
                role.map_or("absent".into(), |r| format!("labelled {r:?}")),
                if copy.is_some() { "present" } else { "absent" }
            ),
        );
        let done = |actions| Ok(Outcome { actions, requeue_after_ms: None });
        let Some(source) = source else { return done(vec![]) };
        let meta = &source["metadata"];
        if meta["labels"]["contract-v0-1"].as_str() != Some("source") || !meta["deletionTimestamp"].is_null() {
            return done(vec![]); // A copy, or a source being deleted.
        }
        let copy_key =
            ObjectKey { api_version: "v1".into(), kind: "ConfigMap".into(), namespace: key.namespace.clone(), name: copy_name.clone() };
        if meta["labels"]["copy"].as_str() == Some("absent") {
            return done(if copy.is_some() { vec![Action::Delete(copy_key)] } else { vec![] });
        }
        let uid = meta["uid"].as_str().ok_or_else(|| ReconcileError::Permanent("source without a uid".into()))?;
        let data = match &source["data"] {
            Value::Null => json!({}),
            d => d.clone(),
        };
        let desired = json!({
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {
                "name": copy_name,
                "namespace": ns,
                "labels": {"contract-v0-1": "copy"},
                "ownerReferences": [{
                    "apiVersion": "v1", "kind": "ConfigMap", "name": key.name, "uid": uid,
                    "controller": true, "blockOwnerDeletion": true,
                }],
            },
            "data": data,
        });
        let event = |message: String| {
            Action::Event(Event { regarding: key.clone(), event_type: EventType::Normal, reason: "Copied".into(), message })
        };
        let actions = match copy {
            None => vec![Action::Create(desired.to_string()), event(format!("created {copy_name}"))],
            Some(copy) => {
                let current = match &copy["data"] {
                    Value::Null => json!({}),
                    d => d.clone(),
                };
                if current == data {
                    vec![]
                } else if current.as_object().is_some_and(|c| c.keys().any(|k| data.get(k).is_none())) {
                    vec![Action::Delete(copy_key)]
                } else {
                    vec![Action::Apply(desired.to_string()), event(format!("updated {copy_name}"))]
                }
            }
        };
        done(actions)
    }
}
