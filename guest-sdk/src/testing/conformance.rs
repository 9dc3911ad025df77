//! The Rust fake against the conformance corpus (`model/conformance/`): every case run through
//! the code paths the fake uses ([`FakeCache::execute`], [`FakeCache::mapped_keys`], the SDK's
//! owned children), each failure naming its case.

use std::panic::{AssertUnwindSafe, catch_unwind};

use serde_json::{Value, json};
use wasmloop_model::conformance::expect::parse_mapping;
use wasmloop_model::conformance::{self, Case};
use wasmloop_model::selector::Labels;

use super::*;
use crate::invalid::InvalidObject;
use crate::patch::{PatchType, Preconditions};
use crate::types::{Index, Watch};

struct LabelMap<'a>(&'a Value);

impl Labels for LabelMap<'_> {
    fn label(&self, key: &str) -> Option<&str> {
        self.0.get(key)?.as_str()
    }
}

#[test]
fn selectors() {
    conformance::check("selectors", |case| match selector::parse(case.input["selector"].as_str().unwrap_or_default()) {
        Ok(sel) => {
            json!({"matches": case.input["labels"].as_array().into_iter().flatten().map(|l| sel.matches(&LabelMap(l))).collect::<Vec<_>>()})
        }
        Err(reason) => json!({"error": {"kind": reason.kind(), "at": reason.at()}}),
    });
}

#[test]
fn index_paths() {
    conformance::check("index_paths", |case| {
        let path = case.input["path"].as_str().unwrap_or_default();
        match check_index_path(path) {
            Ok(()) => json!({"values": index_values("conformance", Some(path), &case.input["object"])}),
            Err(e) => json!({"error": {"kind": e.kind()}}),
        }
    });
}

/// Whether the fake carries out a case's create or apply (it panics on one the host refuses).
fn executed(case: &Case) -> bool {
    let obj = case.input["object"].clone();
    let action = if case.input["verb"] == "create" { Action::Create(obj) } else { Action::Apply(obj) };
    let fake = FakeCache::new(Metadata::new("conformance", "0").reconciles(KindRef::new("v1", "ConfigMap")));
    let mut outcome = Outcome::new();
    outcome.push(action);
    catch_unwind(AssertUnwindSafe(|| fake.execute(&outcome))).is_ok()
}

#[test]
fn targets() {
    conformance::check("targets", |case| {
        let naming = if case.input["verb"] == "create" { Naming::NameOrGenerate } else { Naming::NameOnly("apply") };
        // What the fake decides (refused or carried out) must be what its rule says, and the rule
        // the corpus's (scope is the host's, from discovery: the fake has no discovery).
        let ruled = Target::of_object(&case.input["object"], naming);
        let executed = executed(case);
        assert_eq!(ruled.is_ok(), executed, "targets/{}: the fake's execute disagrees with its rule", case.name);
        let scoped = ruled.and_then(|t| case.input["namespaced"].as_bool().map_or(Ok(()), |n| t.check_scope(n)).map(|()| t));
        match scoped {
            Ok(t) => json!({"target": t.to_string()}),
            Err(e) => json!({"error": {"kind": e.kind(), "field": e.field()}}),
        }
    });
}

#[test]
fn children() {
    conformance::check("children", |case| {
        let input = &case.input;
        match crate::outcome::set_owner(input["child"].clone(), input["ownerNamespace"].as_str(), input["ownerRef"].clone()) {
            Ok(child) => json!({"child": child}),
            Err(e) => {
                let kind = match e {
                    InvalidObject::OtherNamespace { .. } => "other_namespace",
                    InvalidObject::OtherController(_) => "other_controller",
                    InvalidObject::NotAnObject(_) | InvalidObject::OwnerReferencesNotAList => "shape",
                    other => panic!("children/{}: set_owner refused for another reason: {other}", case.name),
                };
                json!({"error": {"kind": kind}})
            }
        }
    });
}

fn patch_result(patch_type: PatchType, before: &Value, body: &Value) -> Value {
    match patched(patch_type, before, body) {
        Ok(after) => json!({"after": after}),
        Err(e) if patch_type == PatchType::Merge => json!({"error": {"kind": e.kind()}}),
        Err(e) => json!({"error": {"kind": e.kind(), "index": e.index()}}),
    }
}

#[test]
fn merge_patches() {
    conformance::check("merge_patches", |case| patch_result(PatchType::Merge, &case.input["before"], &case.input["patch"]));
}

#[test]
fn json_patches() {
    conformance::check("json_patches", |case| patch_result(PatchType::Json, &case.input["before"], &case.input["ops"]));
}

#[test]
fn preconditions() {
    conformance::check("preconditions", |case| {
        let field = |f: &str| case.input[f].as_str().map(str::to_owned);
        let pre = Preconditions { uid: field("uid"), resource_version: field("resourceVersion") };
        json!({"holds": preconditions_hold(&pre, &case.input["object"])})
    });
}

#[test]
fn mappings() {
    conformance::check("mappings", |case| {
        let input = &case.input;
        let text = |v: &Value, f: &str| v[f].as_str().unwrap_or_default().to_owned();
        let primary = KindRef::new(text(&input["primary"], "apiVersion"), text(&input["primary"], "kind"));
        let related = &input["related"];
        let related_kind = KindRef::new(text(related, "apiVersion"), text(related, "kind"));
        let mut metadata = Metadata::new("conformance", "0").reconciles(primary.clone());
        metadata.watches.push(Watch::new(related_kind, parse_mapping(&input["mapping"])));
        if let Some(index) = input.get("index") {
            metadata.indexes.push(Index { kind: primary, name: text(index, "name"), path: text(index, "path") });
        }
        let fake = input["primaries"].as_array().into_iter().flatten().fold(FakeCache::new(metadata), FakeCache::with).with(related);
        let key = object::key(related).expect("the related object has a key");
        let mut keys: Vec<String> = fake.mapped_keys(&key).iter().map(ToString::to_string).collect();
        keys.sort();
        json!({"keys": keys})
    });
}
