//! What a write will produce: the [`Effect`] the protection rules and the owner check judge.
//!
//! A patch or partial apply is not the object it produces, so for the objects where a rule
//! reads more than the write's own body — RBAC bindings and roles, whose subjects, rules and
//! labels decide who holds what — the result is computed:
//!
//! | write | before | after | sent with |
//! |---|---|---|---|
//! | create | — | the body (the object as stored: RBAC has no defaulting a rule reads) | — |
//! | JSON / merge patch | the cached object (the host's RBAC informers) | the patch applied to it here | its resourceVersion |
//! | server-side apply | the cached object, if any | first what the body sets, then the API server's dry run (`dryRun=All`, as the plugin) | the dry run's resourceVersion |
//! | delete | the cached object | — | its resourceVersion |
//!
//! so nothing can change between the check and the write: a changed object makes the write a
//! conflict, and the key is reconciled again. An RBAC object the cache does not hold, or a dry
//! run that fails, is not guessed at: the action is not sent ([`Error::Unverifiable`]).
//!
//! For every other object the rules read only what a write sets ([`After::Written`]: a body, a
//! merge patch as is, a JSON patch's added values at their paths — JSON patches have no `copy`
//! or `move`, so nothing else can appear), which is enough: a label or owner reference in the
//! result either was already there or comes from those values, and the objects whose other
//! fields decide containment (pod specs, tokens, Leases, plugin code) live in the host's
//! namespaces, where plugins write nothing at all.

use kube::api::{Api, DynamicObject, PatchParams};
use serde_json::{Value, json};
use wasmloop_model::Target;
use wasmloop_model::patch::PatchError;

use super::Context;
use super::rbac::{self, Stores};
use crate::actions::{Action, Deletion, Patch, PatchDoc, PatchType, Planned, Preconditions};
use crate::kinds::ResolvedKind;

/// A write whose result cannot be computed, or that does not apply.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct Invalid(pub String);

/// Why the effect of a write is not known.
#[derive(Debug)]
pub(super) enum Error {
    /// The write cannot succeed as given (a patch that does not apply): refused.
    Invalid(Invalid),
    /// The state needed to compute it is not available now: not sent, retried.
    Unverifiable(String),
    /// The plugin's precondition is older than the object the result is computed on.
    Conflict(String),
}

/// What the write must carry so that it produces exactly what was checked.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub enum Guard {
    /// Nothing (the rules did not depend on the object's current state).
    #[default]
    None,
    /// The resourceVersion the result was computed on, sent as a precondition.
    ResourceVersion(String),
}

/// What the rules see of the object after the write.
#[derive(Clone, Debug, PartialEq)]
pub enum After {
    /// The object is gone (delete).
    Gone,
    /// The whole object as it will be.
    Result(Value),
    /// Only what the write sets, placed as in the object (see the module docs).
    Written(Value),
}

impl After {
    /// The value the rules read, if there is one.
    pub fn value(&self) -> Option<&Value> {
        match self {
            After::Gone => None,
            After::Result(v) | After::Written(v) => Some(v),
        }
    }
}

/// What a write does to its object.
#[derive(Clone, Debug)]
pub struct Effect {
    /// The object before the write, where the rules needed it.
    pub before: Option<Value>,
    /// The object (or what is written of it) after.
    pub after: After,
    /// What the write must carry.
    pub guard: Guard,
}

/// Compute the effect of `action` on `target`; `stores` are the
/// RBAC informers' (`None` offline: RBAC writes are then judged by what they set).
pub(super) fn effect(stores: Option<&Stores>, planned: &Planned) -> Result<Effect, Error> {
    let (action, target) = (planned.action(), planned.target());
    let Some(stores) = stores.filter(|_| rbac::is_rbac(target)) else {
        return Ok(Effect { before: None, after: written(action), guard: Guard::None });
    };
    let before = stores.get(target);
    let cached = |before: Option<Value>| {
        before.ok_or_else(|| Error::Unverifiable(format!("{target} is not in the host's RBAC cache (not seen yet, or gone)")))
    };
    match action {
        // The body is the object as stored (RBAC has no defaulting a rule reads).
        Action::Create(object) => Ok(Effect { before, after: After::Result(object.clone()), guard: Guard::None }),
        Action::Delete(Deletion { preconditions, .. }) => {
            let before = cached(before)?;
            let guard = guard_of(&before, preconditions)?;
            Ok(Effect { before: Some(before), after: After::Gone, guard })
        }
        Action::Patch(Patch { status: false, preconditions, .. }) => {
            let before = cached(before)?;
            let guard = guard_of(&before, preconditions)?;
            let doc = planned.patch().expect("a planned patch has its document");
            let after =
                patched(&before, doc).map_err(|e| Error::Invalid(Invalid(format!("the patch does not apply to the object: {e}"))))?;
            Ok(Effect { before: Some(before), after: After::Result(after), guard })
        }
        // What the body sets first (refused without a round trip if that breaks a rule); the
        // merged result comes from the dry run ([`dry_run`]) once it passed.
        Action::Apply(object) => Ok(Effect { before, after: After::Written(object.clone()), guard: Guard::None }),
        // Status writes and Events change no field an RBAC rule reads (and RBAC objects have no
        // status subresource: the server refuses them).
        Action::Patch(Patch { status: true, .. }) | Action::UpdateStatus { .. } | Action::Event(_) => {
            Ok(Effect { before, after: written(action), guard: Guard::None })
        }
    }
}

/// What a write sets, placed as in the object.
pub fn written(action: &Action) -> After {
    match action {
        Action::Create(object) | Action::Apply(object) => After::Written(object.clone()),
        Action::Patch(Patch { patch_type: PatchType::Merge, body, .. }) => After::Written(body.clone()),
        Action::Patch(Patch { patch_type: PatchType::Json, body, .. }) => After::Written(json_patch_written(body)),
        Action::UpdateStatus { status, .. } => After::Written(json!({ "status": status })),
        Action::Delete(_) => After::Gone,
        Action::Event(_) => After::Written(Value::Null),
    }
}

/// The guard of a write to `before`: its resourceVersion. A precondition of the plugin's that
/// names another version (or uid) is a stale view: a conflict.
fn guard_of(before: &Value, pre: &Preconditions) -> Result<Guard, Error> {
    let field = |p: &str| before.pointer(p).and_then(Value::as_str).unwrap_or_default();
    let (rv, uid) = (field("/metadata/resourceVersion"), field("/metadata/uid"));
    if let Some(want) = pre.resource_version.as_deref().filter(|want| *want != rv) {
        return Err(Error::Conflict(format!("the plugin expects resourceVersion {want}, the object is at {rv}")));
    }
    if let Some(want) = pre.uid.as_deref().filter(|want| *want != uid) {
        return Err(Error::Conflict(format!("the plugin expects uid {want}, the object has {uid}")));
    }
    Ok(if rv.is_empty() { Guard::None } else { Guard::ResourceVersion(rv.to_owned()) })
}

/// `patch` applied to `before` as the API server applies it (RFC 7386 or RFC 6902), by the one
/// rule every SDK's fake follows too ([`wasmloop_model::patch`]).
pub fn patched(before: &Value, patch: PatchDoc<'_>) -> Result<Value, PatchError> {
    match patch {
        PatchDoc::Merge(patch) => {
            let mut after = before.clone();
            wasmloop_model::patch::merge_into(&mut after, patch);
            Ok(after)
        }
        PatchDoc::Json(ops) => wasmloop_model::patch::apply_ops(before, ops),
    }
}

/// Whether `effect` of `action` is only what the body sets and needs the API server's merge
/// ([`dry_run`]) before the write can be judged: server-side applies of RBAC objects, online.
pub(super) fn needs_dry_run(stores: Option<&Stores>, action: &Action, target: &Target) -> bool {
    stores.is_some() && matches!(action, Action::Apply(_)) && rbac::is_rbac(target)
}

/// The effect of a server-side apply as the API server would merge it (a dry run, as the
/// plugin, within its budget), sent later with the resulting resourceVersion.
pub(super) async fn dry_run(
    ctx: Context<'_>,
    action: &Action,
    target: &Target,
    kind: Option<&ResolvedKind>,
    before: Option<Value>,
) -> Result<Effect, Error> {
    let Action::Apply(object) = action else { return Err(Error::Unverifiable(format!("{target}: only applies are dry-run"))) };
    let (Some(client), Some(kind)) = (ctx.client, kind) else {
        return Err(Error::Unverifiable(format!("{target}: no client to dry-run the apply with")));
    };
    let after = dry_run_apply(client, ctx, kind, target, object).await?;
    let rv = after.pointer("/metadata/resourceVersion").and_then(Value::as_str).filter(|rv| !rv.is_empty());
    let guard = rv.map_or(Guard::None, |rv| Guard::ResourceVersion(rv.to_owned()));
    Ok(Effect { before, after: After::Result(after), guard })
}

async fn dry_run_apply(
    client: &kube::Client,
    ctx: Context<'_>,
    kind: &ResolvedKind,
    target: &Target,
    object: &Value,
) -> Result<Value, Error> {
    let api: Api<DynamicObject> = match &target.namespace {
        Some(ns) => Api::namespaced_with(client.clone(), ns, &kind.resource),
        None => Api::all_with(client.clone(), &kind.resource),
    };
    let name = target.name().ok_or_else(|| Error::Invalid(Invalid("apply needs metadata.name".into())))?;
    let mut params = PatchParams::apply(ctx.manager).force();
    params.dry_run = true;
    if let Some(budget) = ctx.budget {
        budget.acquire().await;
    }
    match api.patch(name, &params, &kube::api::Patch::Apply(object)).await {
        Ok(result) => Ok(serde_json::to_value(result).unwrap_or(Value::Null)),
        Err(kube::Error::Api(s)) if matches!(s.code, 400 | 422) => {
            Err(Error::Invalid(Invalid(format!("the API server refuses the apply (dry run): {} ({} {})", s.message, s.code, s.reason))))
        }
        Err(e) => Err(Error::Unverifiable(format!("dry run of the apply failed: {e}"))),
    }
}

/// The values a JSON patch adds or replaces, placed at their paths (arrays for index segments).
pub fn json_patch_written(ops: &Value) -> Value {
    let mut out = Value::Object(Default::default());
    for op in ops.as_array().into_iter().flatten() {
        let kind = op.get("op").and_then(Value::as_str);
        let (Some("add" | "replace"), Some(path), Some(value)) = (kind, op.get("path").and_then(Value::as_str), op.get("value")) else {
            continue;
        };
        let segments: Vec<String> = path.split('/').skip(1).map(|s| s.replace("~1", "/").replace("~0", "~")).collect();
        let mut placed = value.clone();
        for (i, seg) in segments.iter().enumerate().rev() {
            // An index (or `-`) in a list: the value is one element of it.
            let is_index = i > 0 && (seg == "-" || seg.parse::<usize>().is_ok());
            placed = if is_index { Value::Array(vec![placed]) } else { json!({ seg.clone(): placed }) };
        }
        merge_into(&mut out, placed);
    }
    out
}

fn merge_into(into: &mut Value, from: Value) {
    match (into, from) {
        (Value::Object(a), Value::Object(b)) => {
            for (k, v) in b {
                match a.get_mut(&k) {
                    Some(existing) => merge_into(existing, v),
                    None => {
                        a.insert(k, v);
                    }
                }
            }
        }
        (Value::Array(a), Value::Array(b)) => a.extend(b),
        (slot, v) => *slot = v,
    }
}

#[cfg(test)]
mod conformance;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn json_patches_show_what_they_write() {
        let ops = json!([
            {"op": "test", "path": "/metadata/uid", "value": "u"},
            {"op": "add", "path": "/metadata/ownerReferences/-", "value": {"kind": "ReplicaSet"}},
            {"op": "replace", "path": "/metadata/labels/a~1b", "value": "x"},
            {"op": "add", "path": "/spec/template/spec", "value": {"serviceAccountName": "s"}},
            {"op": "remove", "path": "/metadata/finalizers/0"},
        ]);
        assert_eq!(
            json_patch_written(&ops),
            json!({
                "metadata": {"ownerReferences": [{"kind": "ReplicaSet"}], "labels": {"a/b": "x"}},
                "spec": {"template": {"spec": {"serviceAccountName": "s"}}},
            })
        );
    }

    #[test]
    fn patches_apply_to_the_object_as_the_server_would() {
        let before = json!({"metadata": {"name": "b", "resourceVersion": "7"},
                            "subjects": [{"kind": "ServiceAccount", "name": "wasmloop", "namespace": "team-b"}]});
        let json_patch = json!([{"op": "replace", "path": "/subjects/0/namespace", "value": "wasmloop"}]);
        let ops = |v: &Value| serde_json::from_value::<json_patch::Patch>(v.clone()).unwrap();
        let after = patched(&before, PatchDoc::Json(&ops(&json_patch))).unwrap();
        assert_eq!(after["subjects"][0]["namespace"], "wasmloop");
        let merge = json!({"subjects": [{"kind": "Group", "name": "system:authenticated"}], "metadata": {"labels": {"a": "b"}}});
        let after = patched(&before, PatchDoc::Merge(&merge)).unwrap();
        assert_eq!(after["subjects"], json!([{"kind": "Group", "name": "system:authenticated"}]), "merge patches replace lists");
        assert_eq!(after["metadata"]["name"], "b");
        let failing = json!([{"op": "test", "path": "/metadata/name", "value": "other"}]);
        assert_eq!(patched(&before, PatchDoc::Json(&ops(&failing))).unwrap_err(), PatchError::TestFailed { index: 0 });
    }

    #[test]
    fn a_precondition_older_than_the_cache_is_a_conflict() {
        let before = json!({"metadata": {"resourceVersion": "7", "uid": "u1"}});
        assert_eq!(guard_of(&before, &Preconditions::default()).unwrap(), Guard::ResourceVersion("7".into()));
        let same = Preconditions { uid: Some("u1".into()), resource_version: Some("7".into()) };
        assert_eq!(guard_of(&before, &same).unwrap(), Guard::ResourceVersion("7".into()));
        let stale = Preconditions { resource_version: Some("6".into()), ..Default::default() };
        assert!(matches!(guard_of(&before, &stale), Err(Error::Conflict(m)) if m.contains("expects resourceVersion 6")));
        let other = Preconditions { uid: Some("u0".into()), ..Default::default() };
        assert!(matches!(guard_of(&before, &other), Err(Error::Conflict(_))));
    }
}
