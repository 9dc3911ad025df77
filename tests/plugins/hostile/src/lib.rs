//! Test plugin `hostile`: a data-driven fixture for the containment suite. Every action an
//! attacker might return comes from the object it reconciles, so one plugin build covers every
//! case: the test writes the actions into a ConfigMap and checks what the host lets through.
//!
//! It reconciles `v1/ConfigMap` objects labelled `wasmloop.dev/hostile-test=true`. On each
//! reconcile it reads the object from the cache (absent: no actions) and parses its
//! `data.actions`, a JSON array; each element is an object with exactly one key naming the action:
//!
//! ```json
//! [
//!   {"create": {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "x", "namespace": "$NS"}}},
//!   {"apply":  {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "x", "namespace": "$NS"}}},
//!   {"delete": {"apiVersion": "v1", "kind": "Secret", "namespace": "kube-system", "name": "admin-token"}},
//!   {"updateStatus": {"key": {"apiVersion": "v1", "kind": "ConfigMap", "namespace": "$NS", "name": "$NAME"},
//!                     "status": {"phase": "Pwned"}}},
//!   {"event": {"regarding": {"apiVersion": "v1", "kind": "ConfigMap", "namespace": "$NS", "name": "$NAME"},
//!              "type": "Warning", "reason": "Hostile", "message": "hello"}}
//! ]
//! ```
//!
//! - `create` / `apply`: the value (any JSON, normally an object) is re-serialised and returned
//!   as `create(json)` / `apply(json)`.
//! - `delete`: an object key; `namespace` may be absent or `null` (cluster-scoped).
//! - `updateStatus`: `key` is an object key, `status` any JSON (re-serialised).
//! - `event`: `regarding` is an object key, `type` is `Normal` or `Warning`.
//!
//! Before conversion, every JSON string value (recursively, not object member names) has the
//! literal tokens `$NS`, `$NAME` and `$UID` replaced by the request key's namespace (empty if
//! none), the request key's name and the reconciled object's `metadata.uid` (empty if none).
//!
//! Besides actions, the ConfigMap can ask for the other ways a plugin can try to stall or flood
//! the host (all optional, numbers as strings):
//! - `data.sleepMs`: sleep that long first (WASI `poll` on a monotonic-clock deadline);
//! - `data.requeueAfterMs`: return `requeue-after-ms` with that value;
//! - `data.logLines`: log that many 1 KiB lines through the `log` import;
//! - `data.pollables`: create that many WASI pollables and keep them (host resources).
//!
//! - `data.fail`: `transient` or `permanent`: return the actions with a failed reconcile
//!   instead of an outcome (contract 0.3's `failure`), so the containment suite sees them
//!   admitted exactly like an outcome's.
//!
//! A missing `data.actions` means no actions; an unparsable one, a malformed element or an
//! unknown action key yields `permanent(<what was wrong>)`; a cache error yields `transient(..)`.
#![cfg(target_arch = "wasm32")]

wit_bindgen::generate!({ path: "../../../wit", world: "controller" });

use exports::wasmloop::controller::plugin::Guest;
use serde_json::{Map, Value};
use wasmloop::controller::cache::{self, CacheError};
use wasmloop::controller::types::*;

struct Plugin;
export!(Plugin);

/// Values substituted for the `$NS`, `$NAME` and `$UID` tokens.
struct Tokens {
    namespace: String,
    name: String,
    uid: String,
}

impl Tokens {
    fn substitute(&self, value: &mut Value) {
        match value {
            Value::String(s) => {
                if s.contains('$') {
                    *s = s.replace("$NS", &self.namespace).replace("$NAME", &self.name).replace("$UID", &self.uid);
                }
            }
            Value::Array(items) => items.iter_mut().for_each(|v| self.substitute(v)),
            Value::Object(map) => map.values_mut().for_each(|v| self.substitute(v)),
            Value::Null | Value::Bool(_) | Value::Number(_) => {}
        }
    }
}

fn permanent(message: impl Into<String>) -> ReconcileError {
    ReconcileError::Permanent(message.into())
}

fn as_object<'a>(value: &'a Value, what: &str) -> Result<&'a Map<String, Value>, ReconcileError> {
    value.as_object().ok_or_else(|| permanent(format!("{what}: expected a JSON object, got {value}")))
}

fn string_field(map: &Map<String, Value>, field: &str, what: &str) -> Result<String, ReconcileError> {
    match map.get(field) {
        Some(Value::String(s)) => Ok(s.clone()),
        Some(other) => Err(permanent(format!("{what}: field `{field}` must be a string, got {other}"))),
        None => Err(permanent(format!("{what}: missing string field `{field}`"))),
    }
}

fn object_key(value: &Value, what: &str) -> Result<ObjectKey, ReconcileError> {
    let map = as_object(value, what)?;
    let namespace = match map.get("namespace") {
        None | Some(Value::Null) => None,
        Some(Value::String(s)) => Some(s.clone()),
        Some(other) => {
            return Err(permanent(format!("{what}: field `namespace` must be a string or null, got {other}")));
        }
    };
    Ok(ObjectKey {
        api_version: string_field(map, "apiVersion", what)?,
        kind: string_field(map, "kind", what)?,
        namespace,
        name: string_field(map, "name", what)?,
    })
}

fn required<'a>(map: &'a Map<String, Value>, field: &str, what: &str) -> Result<&'a Value, ReconcileError> {
    map.get(field).ok_or_else(|| permanent(format!("{what}: missing field `{field}`")))
}

fn action(index: usize, element: &Value) -> Result<Action, ReconcileError> {
    let map = as_object(element, &format!("actions[{index}]"))?;
    let mut entries = map.iter();
    let (name, body) = match (entries.next(), entries.next()) {
        (Some(entry), None) => entry,
        _ => {
            return Err(permanent(format!(
                "actions[{index}]: expected an object with exactly one key (the action), got {} keys",
                map.len()
            )));
        }
    };
    let what = format!("actions[{index}].{name}");
    match name.as_str() {
        "create" => Ok(Action::Create(body.to_string())),
        "apply" => Ok(Action::Apply(body.to_string())),
        "delete" => Ok(Action::Delete(Deletion {
            key: object_key(body, &what)?,
            preconditions: Preconditions { uid: None, resource_version: None },
        })),
        "patch" => {
            // {"key": {...}, "status": bool, "type": "merge" | "json", "body": <JSON>}
            let body = as_object(body, &what)?;
            let patch_type = match body.get("type").and_then(Value::as_str) {
                Some("json") => PatchType::Json,
                _ => PatchType::Merge,
            };
            Ok(Action::Patch(Patch {
                key: object_key(required(body, "key", &what)?, &format!("{what}.key"))?,
                status: body.get("status").and_then(Value::as_bool).unwrap_or(false),
                patch_type,
                body: required(body, "body", &what)?.to_string(),
                preconditions: Preconditions { uid: None, resource_version: None },
            }))
        }
        "updateStatus" => {
            let body = as_object(body, &what)?;
            Ok(Action::UpdateStatus(StatusUpdate {
                key: object_key(required(body, "key", &what)?, &format!("{what}.key"))?,
                status: required(body, "status", &what)?.to_string(),
            }))
        }
        "event" => {
            let body = as_object(body, &what)?;
            let event_type = match string_field(body, "type", &what)?.as_str() {
                "Normal" => EventType::Normal,
                "Warning" => EventType::Warning,
                other => {
                    return Err(permanent(format!("{what}: `type` must be \"Normal\" or \"Warning\", got {other:?}")));
                }
            };
            Ok(Action::Event(Event {
                regarding: object_key(required(body, "regarding", &what)?, &format!("{what}.regarding"))?,
                event_type,
                reason: string_field(body, "reason", &what)?,
                message: string_field(body, "message", &what)?,
            }))
        }
        other => {
            Err(permanent(format!("actions[{index}]: unknown action {other:?} (expected create, apply, delete, updateStatus or event)")))
        }
    }
}

fn cache_error(e: CacheError) -> ReconcileError {
    ReconcileError::Transient(match e {
        CacheError::NotGranted(m) => format!("cache get: not-granted: {m}"),
        CacheError::UnknownIndex(m) => format!("cache get: unknown-index: {m}"),
        CacheError::Invalid(m) => format!("cache get: invalid: {m}"),
    })
}

impl Guest for Plugin {
    fn metadata() -> PluginMetadata {
        PluginMetadata {
            name: "hostile".into(),
            version: "0.1.0".into(),
            reconciles: KindRef { api_version: "v1".into(), kind: "ConfigMap".into() },
            selector: Some("wasmloop.dev/hostile-test=true".into()),
            annotation_selector: None,
            watches: vec![],
            indexes: vec![],
            fields: vec![],
        }
    }

    fn reconcile(request: Request) -> Result<Outcome, Failure> {
        let failed = |error| Failure { error, actions: vec![] };
        let (outcome, fail) = reconcile(request).map_err(failed)?;
        match fail {
            None => Ok(outcome),
            Some(error) => Err(Failure { error, actions: outcome.actions }),
        }
    }
}

/// The outcome the ConfigMap asks for, and the error to return it with (`data.fail`), if any.
fn reconcile(request: Request) -> Result<(Outcome, Option<ReconcileError>), ReconcileError> {
    {
        let kind = KindRef { api_version: "v1".into(), kind: "ConfigMap".into() };
        let key = &request.key;
        let Some(json) = cache::get(&kind, key.namespace.as_deref(), &key.name).map_err(cache_error)? else {
            return Ok((Outcome { actions: vec![], requeue_after_ms: None }, None));
        };
        let object: Value = serde_json::from_str(&json).map_err(|e| permanent(format!("the ConfigMap is not valid JSON: {e}")))?;
        let number = |field: &str| -> Result<Option<u64>, ReconcileError> {
            match object.pointer(&format!("/data/{field}")) {
                None => Ok(None),
                Some(Value::String(s)) => s.parse().map(Some).map_err(|e| permanent(format!("data.{field}: {e}"))),
                Some(other) => Err(permanent(format!("data.{field} must be a string, got {other}"))),
            }
        };
        if let Some(ms) = number("sleepMs")? {
            std::thread::sleep(std::time::Duration::from_millis(ms));
        }
        let pollables: Vec<_> =
            (0..number("pollables")?.unwrap_or(0)).map(|_| wasi::clocks::monotonic_clock::subscribe_duration(1_000_000_000)).collect();
        drop(pollables);
        for i in 0..number("logLines")?.unwrap_or(0) {
            let line = format!("{i:08} {}", "x".repeat(1015));
            wasmloop::controller::log::log(wasmloop::controller::log::Level::Info, &line);
        }
        let requeue_after_ms = number("requeueAfterMs")?;
        let text = match object.pointer("/data/actions") {
            Some(Value::String(s)) => s.as_str(),
            Some(other) => {
                return Err(permanent(format!("data.actions must be a string, got {other}")));
            }
            None => "[]",
        };
        let mut list: Value = serde_json::from_str(text).map_err(|e| permanent(format!("data.actions is not valid JSON: {e}")))?;
        let tokens = Tokens {
            namespace: key.namespace.clone().unwrap_or_default(),
            name: key.name.clone(),
            uid: object.pointer("/metadata/uid").and_then(Value::as_str).unwrap_or_default().to_owned(),
        };
        tokens.substitute(&mut list);
        let Value::Array(elements) = &list else {
            return Err(permanent(format!("data.actions must be a JSON array, got {list}")));
        };
        let actions = elements.iter().enumerate().map(|(i, e)| action(i, e)).collect::<Result<Vec<_>, _>>()?;
        let fail = match object.pointer("/data/fail").and_then(Value::as_str) {
            None => None,
            Some("transient") => Some(ReconcileError::Transient("hostile: failing with actions".into())),
            Some("permanent") => Some(ReconcileError::Permanent("hostile: failing with actions".into())),
            Some(other) => return Err(permanent(format!("data.fail must be transient or permanent, got {other}"))),
        };
        Ok((Outcome { actions, requeue_after_ms }, fail))
    }
}
