//! The host against the conformance corpus (`model/conformance/`): targets, patches and
//! preconditions through the paths an action takes into the host ([`Planned::new`], admission's
//! [`patched`] and [`guard_of`]), each failure naming its case.

use serde_json::{Value, json};
use wasmloop_model::conformance;

use super::{guard_of, patched};
use crate::actions::{Action, Patch, PatchType, PlanError, Planned, Preconditions};
use crate::kinds::KindRef;

/// The corpus's kind of a plan refusal of a patch (the model's kinds: the host refuses by the
/// model's rule).
fn refusal_kind(e: &PlanError) -> Value {
    use wasmloop_model::patch::PatchError;
    match e {
        PlanError::Patch(p @ (PatchError::MergeNotAnObject(_) | PatchError::MergeMetadataNotAnObject(_))) => json!({"kind": p.kind()}),
        PlanError::Patch(p) => json!({"kind": p.kind(), "index": p.index()}),
        other => json!({"kind": format!("unexpected: {other}")}),
    }
}

/// A patch of a ConfigMap `before` as the host takes it: planned (refused or not), then applied
/// as admission computes its effect.
fn host_patch(patch_type: PatchType, before: &Value, body: &Value) -> Value {
    let key = KindRef::new("v1", "ConfigMap").key(Some("a"), "c");
    let action = Action::Patch(Patch { key, status: false, patch_type, body: body.clone(), preconditions: Preconditions::default() });
    let planned = match Planned::new(action) {
        Ok(planned) => planned,
        Err(e) => return json!({"error": refusal_kind(&e)}),
    };
    match patched(before, planned.patch().expect("a planned patch has its document")) {
        Ok(after) => json!({"after": after}),
        Err(e) if patch_type == PatchType::Merge => json!({"error": {"kind": e.kind()}}),
        Err(e) => json!({"error": {"kind": e.kind(), "index": e.index()}}),
    }
}

#[test]
fn merge_patches() {
    conformance::check("merge_patches", |case| host_patch(PatchType::Merge, &case.input["before"], &case.input["patch"]));
}

#[test]
fn json_patches() {
    conformance::check("json_patches", |case| host_patch(PatchType::Json, &case.input["before"], &case.input["ops"]));
}

#[test]
fn targets() {
    conformance::check("targets", |case| {
        let object = case.input["object"].clone();
        let action = if case.input["verb"] == "create" { Action::Create(object) } else { Action::Apply(object) };
        let planned = Planned::new(action).and_then(|p| {
            // Admission checks the scope against discovery; here the case says what discovery would.
            match case.input["namespaced"].as_bool() {
                Some(namespaced) => p.target().check_scope(namespaced).map(|()| p).map_err(PlanError::Target),
                None => Ok(p),
            }
        });
        match planned {
            Ok(p) => json!({"target": p.target().to_string()}),
            Err(PlanError::Target(e)) => json!({"error": {"kind": e.kind(), "field": e.field()}}),
            Err(other) => json!({"error": {"kind": format!("unexpected: {other}")}}),
        }
    });
}

#[test]
fn preconditions() {
    conformance::check("preconditions", |case| {
        // As the host converts a plugin's preconditions (`plugin::convert`): empty is none.
        let field = |f: &str| case.input[f].as_str().filter(|s| !s.is_empty()).map(str::to_owned);
        let pre = Preconditions { uid: field("uid"), resource_version: field("resourceVersion") };
        json!({"holds": guard_of(&case.input["object"], &pre).is_ok()})
    });
}
