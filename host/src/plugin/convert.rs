//! Conversions between the contract's WIT types (0.2, [`super::bindings`]) and the host's own:
//! requests out, metadata and outcomes in, each checked and every refusal naming what was wrong.

use std::time::Duration;

use serde_json::Value;
use wasmloop_model::{Naming, Target, json_type};

use super::bindings::types as wit;
use super::limits::Limits;
use crate::actions::{Action, EventType, PatchType, Preconditions};
use crate::cache::IndexSpec;
use crate::controller::{FieldDecl, IndexDecl, Mapping, Outcome, Reason, ReconcilerSpec, Request, WatchSpec};
use crate::kinds::{KindRef, ObjectKey};

pub(crate) fn to_wit_key(k: &ObjectKey) -> wit::ObjectKey {
    wit::ObjectKey {
        api_version: k.kind.api_version.clone(),
        kind: k.kind.kind.clone(),
        namespace: k.namespace.clone(),
        name: k.name.clone(),
    }
}

pub(crate) fn to_wit_request(r: &Request) -> wit::Request {
    wit::Request {
        key: to_wit_key(&r.key),
        last_error: r.last_error.clone(),
        reason: match r.reason {
            Reason::Event => wit::Reason::Event,
            Reason::Resync => wit::Reason::Resync,
            Reason::Requeue => wit::Reason::Requeue,
            Reason::Retry(n) => wit::Reason::Retry(n),
        },
    }
}

fn from_wit_kind(k: wit::KindRef) -> KindRef {
    KindRef::new(k.api_version, k.kind)
}

fn checked_kind(k: wit::KindRef, what: &str) -> Result<KindRef, String> {
    let kind = from_wit_kind(k);
    if kind.kind.is_empty() || kind.group_version().is_err() {
        return Err(format!("{what}: invalid kind {:?} / {:?}", kind.api_version, kind.kind));
    }
    Ok(kind)
}

/// Most fields a plugin may declare for metadata reads (each is extracted per object read).
pub(crate) const MAX_FIELDS: usize = 64;

/// Convert and validate `metadata()`'s answer.
pub(crate) fn spec_from_metadata(m: wit::PluginMetadata) -> Result<ReconcilerSpec, String> {
    let name = m.name.trim().to_owned();
    let name_ok = !name.is_empty()
        && name.len() <= 63
        && name.chars().all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
        && !name.starts_with('-')
        && !name.ends_with('-');
    if !name_ok {
        return Err(format!("name {:?} must be a DNS label (lowercase letters, digits, '-', at most 63)", m.name));
    }
    if let Err(e) = semver::Version::parse(&m.version) {
        let shown: String = m.version.chars().take(64).collect();
        return Err(format!("version {shown:?} is not a semantic version (e.g. 1.2.3): {e}"));
    }
    let reconciles = checked_kind(m.reconciles, "reconciles")?;
    let watches = m
        .watches
        .into_iter()
        .enumerate()
        .map(|(i, w)| {
            Ok(WatchSpec {
                kind: checked_kind(w.kind, &format!("watches[{i}]"))?,
                mapping: match w.mapping {
                    wit::Mapping::Owner => Mapping::Owner,
                    wit::Mapping::Label(l) => Mapping::Label(l),
                    wit::Mapping::SameName => Mapping::SameName,
                    wit::Mapping::Namespace => Mapping::Namespace,
                },
                selector: w.selector,
            })
        })
        .collect::<Result<Vec<_>, String>>()?;
    let indexes = m
        .indexes
        .into_iter()
        .enumerate()
        .map(|(i, x)| {
            if x.name.is_empty() || x.path.is_empty() {
                return Err(format!("indexes[{i}]: name and path are required"));
            }
            Ok(IndexDecl { kind: checked_kind(x.kind, &format!("indexes[{i}]"))?, name: x.name, path: x.path })
        })
        .collect::<Result<Vec<_>, String>>()?;
    let mut spec = ReconcilerSpec { name, version: m.version, reconciles, selector: m.selector, watches, indexes, fields: vec![] };
    if m.fields.len() > MAX_FIELDS {
        return Err(format!("{} fields declared, more than {MAX_FIELDS}", m.fields.len()));
    }
    let readable = spec.kinds();
    for (i, f) in m.fields.into_iter().enumerate() {
        let kind = checked_kind(f.kind, &format!("fields[{i}]"))?;
        if !readable.contains(&kind) {
            return Err(format!("fields[{i}]: {kind} is not a kind the plugin reconciles, watches or indexes"));
        }
        IndexSpec::parse(&f.path).map_err(|e| format!("fields[{i}]: {e}"))?;
        spec.fields.push(FieldDecl { kind, path: f.path });
    }
    Ok(spec)
}

/// Parse an object action's JSON and check its target with the one rule
/// ([`wasmloop_model::Target`]): apiVersion, kind, metadata.name (or generateName for create).
fn object_json(i: usize, verb: &'static str, json: &str) -> Result<Value, String> {
    let value: Value =
        serde_json::from_str(json).map_err(|e| format!("action {i} ({verb}): invalid JSON: {e}"))?;
    let naming = if verb == "create" { Naming::NameOrGenerate } else { Naming::NameOnly(verb) };
    Target::of_object(&value, naming).map_err(|e| format!("action {i} ({verb}): {e}"))?;
    Ok(value)
}

fn checked_key(i: usize, verb: &str, k: wit::ObjectKey) -> Result<ObjectKey, String> {
    Target::of_key(&k.api_version, &k.kind, k.namespace.as_deref(), &k.name).map_err(|e| format!("action {i} ({verb}): {e}"))?;
    Ok(ObjectKey::new(KindRef::new(k.api_version, k.kind), k.namespace.filter(|n| !n.is_empty()), k.name))
}

/// Convert the guest's outcome, naming the first bad action.
pub(crate) fn to_outcome(o: wit::Outcome, limits: &Limits) -> Result<Outcome, String> {
    if o.actions.len() > limits.max_actions as usize {
        return Err(format!("{} actions, more than limits.maxActions {}", o.actions.len(), limits.max_actions));
    }
    let mut actions = Vec::with_capacity(o.actions.len());
    for (i, a) in o.actions.into_iter().enumerate() {
        actions.push(match a {
            wit::Action::Create(json) => Action::Create { object: object_json(i, "create", &json)? },
            wit::Action::Apply(json) => Action::Apply { object: object_json(i, "apply", &json)? },
            wit::Action::Delete(d) => {
                Action::Delete { key: checked_key(i, "delete", d.key)?, preconditions: preconditions(d.preconditions) }
            }
            wit::Action::Patch(p) => patch(i, p)?,
            wit::Action::UpdateStatus(u) => {
                let key = checked_key(i, "update-status", u.key)?;
                let status: Value = serde_json::from_str(&u.status)
                    .map_err(|e| format!("action {i} (update-status): invalid status JSON: {e}"))?;
                if !status.is_object() {
                    return Err(format!("action {i} (update-status): status must be a JSON object, got {}", json_type(&status)));
                }
                Action::UpdateStatus { key, status }
            }
            wit::Action::Event(e) => {
                if e.reason.is_empty() {
                    return Err(format!("action {i} (event): reason is required"));
                }
                Action::Event {
                    regarding: checked_key(i, "event", e.regarding)?,
                    event_type: match e.event_type {
                        wit::EventType::Normal => EventType::Normal,
                        wit::EventType::Warning => EventType::Warning,
                    },
                    reason: e.reason,
                    message: e.message,
                }
            }
        });
    }
    Ok(Outcome { actions, requeue_after: o.requeue_after_ms.map(Duration::from_millis) })
}


fn preconditions(p: wit::Preconditions) -> Preconditions {
    Preconditions { uid: p.uid.filter(|s| !s.is_empty()), resource_version: p.resource_version.filter(|s| !s.is_empty()) }
}

/// A patch action: its document must be an object (merge) or a list of `add`, `remove`,
/// `replace` and `test` operations (JSON patch; `move` and `copy` would write values admission
/// cannot see).
fn patch(i: usize, p: wit::Patch) -> Result<Action, String> {
    let verb = if p.status { "update-status" } else { "patch" };
    let key = checked_key(i, verb, p.key)?;
    let body: Value = serde_json::from_str(&p.body).map_err(|e| format!("action {i} ({verb}): invalid patch JSON: {e}"))?;
    let patch_type = match p.patch_type {
        wit::PatchType::Merge => {
            if !body.is_object() {
                return Err(format!("action {i} ({verb}): a merge patch must be a JSON object, got {}", json_type(&body)));
            }
            PatchType::Merge
        }
        wit::PatchType::Json => {
            let ops = body.as_array().ok_or_else(|| format!("action {i} ({verb}): a JSON patch must be a list, got {}", json_type(&body)))?;
            for (j, op) in ops.iter().enumerate() {
                let name = op.get("op").and_then(Value::as_str).unwrap_or_default();
                if !matches!(name, "add" | "remove" | "replace" | "test") {
                    return Err(format!("action {i} ({verb}): operation {j}: op {name:?} is not one of add, remove, replace, test"));
                }
                if !op.get("path").is_some_and(Value::is_string) {
                    return Err(format!("action {i} ({verb}): operation {j}: path must be a string"));
                }
                if name != "remove" && op.get("value").is_none() {
                    return Err(format!("action {i} ({verb}): operation {j}: {name} needs a value"));
                }
            }
            PatchType::Json
        }
    };
    Ok(Action::Patch { key, status: p.status, patch_type, body, preconditions: preconditions(p.preconditions) })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn key(name: &str) -> wit::ObjectKey {
        wit::ObjectKey { api_version: "v1".into(), kind: "Pod".into(), namespace: Some("ns".into()), name: name.into() }
    }

    fn delete(key: wit::ObjectKey) -> wit::Action {
        wit::Action::Delete(wit::Deletion { key, preconditions: wit::Preconditions { uid: None, resource_version: None } })
    }

    #[test]
    fn outcomes_convert_and_bad_actions_are_named() {
        let limits = Limits::default();
        let good = wit::Outcome {
            actions: vec![
                wit::Action::Create(json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"generateName": "p-"}}).to_string()),
                delete(key("a")),
                wit::Action::UpdateStatus(wit::StatusUpdate { key: key("b"), status: r#"{"ready":1}"#.into() }),
                wit::Action::Event(wit::Event {
                    regarding: key("c"),
                    event_type: wit::EventType::Warning,
                    reason: "Boom".into(),
                    message: "m".into(),
                }),
            ],
            requeue_after_ms: Some(1500),
        };
        let o = to_outcome(good, &limits).unwrap();
        assert_eq!(o.actions.len(), 4);
        assert_eq!(o.requeue_after, Some(Duration::from_millis(1500)));
        assert!(matches!(&o.actions[3], Action::Event { event_type: EventType::Warning, .. }));

        let bad = |a: wit::Action| to_outcome(wit::Outcome { actions: vec![a], requeue_after_ms: None }, &limits).unwrap_err();
        let err = bad(wit::Action::Create("{not json".into()));
        assert!(err.starts_with("action 0 (create): invalid JSON: key must be a string"), "{err}");
        let err = bad(wit::Action::Apply(r#"{"apiVersion":"v1","kind":"Pod","metadata":{}}"#.into()));
        assert_eq!(err, "action 0 (apply): the object has no metadata.name");
        let err = bad(wit::Action::Create("[1]".into()));
        assert_eq!(err, "action 0 (create): expected a JSON object, got an array");
        let err = bad(wit::Action::Create(r#"{"metadata":{"name":"x"}}"#.into()));
        assert_eq!(err, "action 0 (create): the object has no apiVersion");
        let err = bad(wit::Action::UpdateStatus(wit::StatusUpdate { key: key("b"), status: "3".into() }));
        assert!(err.contains("status must be a JSON object, got a number"), "{err}");
        let err = bad(delete(key("")));
        assert_eq!(err, "action 0 (delete): the object has no name");
        let err = bad(delete(wit::ObjectKey { name: "p/status".into(), ..key("a") }));
        assert!(err.contains("subresources are not action targets"), "{err}");

        let many = wit::Outcome { actions: vec![delete(key("a")); 3], requeue_after_ms: None };
        let err = to_outcome(many, &Limits { max_actions: 2, ..Limits::default() }).unwrap_err();
        assert_eq!(err, "3 actions, more than limits.maxActions 2");
    }

    #[test]
    fn metadata_is_validated() {
        let kind = |a: &str, k: &str| wit::KindRef { api_version: a.into(), kind: k.into() };
        let meta = |name: &str, reconciles: wit::KindRef| wit::PluginMetadata {
            name: name.into(),
            version: "1.0.0".into(),
            reconciles,
            selector: None,
            watches: vec![wit::Watch { kind: kind("v1", "Pod"), mapping: wit::Mapping::Owner, selector: None }],
            indexes: vec![],
            fields: vec![],
        };
        let spec = spec_from_metadata(meta("podset", kind("wasmloop.dev/v1alpha1", "PodSet"))).unwrap();
        assert_eq!(spec.reconciles, KindRef::new("wasmloop.dev/v1alpha1", "PodSet"));
        assert_eq!(spec.watches[0].mapping, Mapping::Owner);
        let err = spec_from_metadata(meta("Pod Set", kind("v1", "Pod"))).unwrap_err();
        assert!(err.contains("must be a DNS label"), "{err}");
        let mut bad_version = meta("podset", kind("v1", "Pod"));
        bad_version.version = "1.0\"} evil=\"1".into();
        let err = spec_from_metadata(bad_version).unwrap_err();
        assert!(err.contains("is not a semantic version"), "{err}");
        let err = spec_from_metadata(meta("x", kind("a/b/c", "Pod"))).unwrap_err();
        assert!(err.starts_with("reconciles: invalid kind"), "{err}");
        let mut many = meta("podset", kind("v1", "Pod"));
        many.fields = vec![wit::Field { kind: kind("v1", "Pod"), path: "status.phase".into() }; MAX_FIELDS + 1];
        assert_eq!(spec_from_metadata(many).unwrap_err(), "65 fields declared, more than 64");
        let mut unread = meta("podset", kind("v1", "Pod"));
        unread.fields = vec![wit::Field { kind: kind("v1", "Secret"), path: "data".into() }];
        assert!(spec_from_metadata(unread).unwrap_err().contains("not a kind the plugin reconciles"));
    }

    #[test]
    fn patches_are_checked() {
        let limits = Limits::default();
        let patch = |patch_type, body: &str| {
            wit::Action::Patch(wit::Patch {
                key: key("p"),
                status: false,
                patch_type,
                body: body.into(),
                preconditions: wit::Preconditions { uid: Some("u".into()), resource_version: None },
            })
        };
        let one = |a| to_outcome(wit::Outcome { actions: vec![a], requeue_after_ms: None }, &limits);
        let ok = one(patch(wit::PatchType::Json, r#"[{"op":"remove","path":"/metadata/ownerReferences/0"}]"#)).unwrap();
        assert!(matches!(&ok.actions[0], Action::Patch { preconditions, .. } if preconditions.uid.as_deref() == Some("u")));
        assert_eq!(ok.actions[0].verb(), "patch");
        let err = one(patch(wit::PatchType::Json, r#"[{"op":"copy","from":"/a","path":"/b"}]"#)).unwrap_err();
        assert!(err.contains("operation 0: op \"copy\" is not one of add, remove, replace, test"), "{err}");
        let err = one(patch(wit::PatchType::Merge, "[]")).unwrap_err();
        assert!(err.contains("a merge patch must be a JSON object, got an array"), "{err}");
        let err = one(patch(wit::PatchType::Json, r#"[{"op":"add","path":"/a"}]"#)).unwrap_err();
        assert!(err.contains("add needs a value"), "{err}");
    }
}
