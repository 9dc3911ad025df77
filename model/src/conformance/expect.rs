//! The expected result of a case, by the model's own code (the corpus's ground truth).

use serde_json::{Value, json};

use crate::index_path::IndexPath;
use crate::kind::KindRef;
use crate::mapping::{self, IndexValue, Mapping};
use crate::selector::{Labels, Selector};
use crate::target::{Naming, Target};
use crate::{owner, patch};

/// A string field of an input (absent: empty).
fn text<'a>(input: &'a Value, field: &str) -> &'a str {
    input.get(field).and_then(Value::as_str).unwrap_or_default()
}

/// Labels of a case: a JSON object of strings.
struct LabelMap<'a>(&'a Value);

impl Labels for LabelMap<'_> {
    fn label(&self, key: &str) -> Option<&str> {
        self.0.get(key)?.as_str()
    }
}

/// `{"selector", "labels": [{…}]}` → `{"matches": [bool]}` or `{"error": {"kind", "at"}}`.
pub fn selector(input: &Value) -> Value {
    match Selector::parse(text(input, "selector")) {
        Ok(sel) => {
            let matches: Vec<bool> = input["labels"].as_array().into_iter().flatten().map(|l| sel.matches(&LabelMap(l))).collect();
            json!({"matches": matches})
        }
        Err(e) => json!({"error": {"kind": e.reason.kind(), "at": e.reason.at()}}),
    }
}

/// `{"path", "object"}` → `{"values": [sorted]}` or `{"error": {"kind"}}`.
pub fn index_path(input: &Value) -> Value {
    match IndexPath::parse(text(input, "path")) {
        Ok(path) => json!({"values": path.values(&input["object"])}),
        Err(e) => json!({"error": {"kind": e.kind()}}),
    }
}

/// `{"object", "verb", "namespaced"?}` → `{"target"}` or `{"error": {"kind", "field"}}`.
pub fn target(input: &Value) -> Value {
    let naming = match text(input, "verb") {
        "create" => Naming::NameOrGenerate,
        "apply" => Naming::NameOnly("apply"),
        other => panic!("targets: unknown verb {other:?}"),
    };
    let checked = Target::of_object(&input["object"], naming)
        .and_then(|t| input.get("namespaced").and_then(Value::as_bool).map_or(Ok(()), |n| t.check_scope(n)).map(|()| t));
    match checked {
        Ok(t) => json!({"target": t.to_string()}),
        Err(e) => json!({"error": {"kind": e.kind(), "field": e.field()}}),
    }
}

/// `{"child", "ownerNamespace", "ownerRef"}` → `{"child"}` or `{"error": {"kind"}}`.
pub fn child(input: &Value) -> Value {
    match owner::adopt(input["child"].clone(), input["ownerNamespace"].as_str(), &input["ownerRef"]) {
        Ok(child) => json!({"child": child}),
        Err(e) => json!({"error": {"kind": e.kind()}}),
    }
}

/// `{"before", "patch"}` → `{"after"}` or `{"error": {"kind"}}`.
pub fn merge_patch(input: &Value) -> Value {
    match patch::merge(&input["before"], &input["patch"]) {
        Ok(after) => json!({"after": after}),
        Err(e) => json!({"error": {"kind": e.kind()}}),
    }
}

/// `{"before", "ops"}` → `{"after"}` or `{"error": {"kind", "index"}}`.
pub fn json_patch(input: &Value) -> Value {
    match patch::json(&input["before"], &input["ops"]) {
        Ok(after) => json!({"after": after}),
        Err(e) => json!({"error": {"kind": e.kind(), "index": e.index()}}),
    }
}

/// `{"object", "uid"?, "resourceVersion"?}` → `{"holds"}`.
pub fn preconditions(input: &Value) -> Value {
    json!({"holds": patch::preconditions_hold(input["uid"].as_str(), input["resourceVersion"].as_str(), &input["object"])})
}

/// A mapping as the contract's variant (`{"tag": "label", "val": "app"}`).
pub fn parse_mapping(v: &Value) -> Mapping {
    let val = &v["val"];
    match text(v, "tag") {
        "owner" => Mapping::Owner,
        "label" => Mapping::Label(val.as_str().unwrap_or_default().to_owned()),
        "same-name" => Mapping::SameName,
        "namespace" => Mapping::Namespace,
        "index" => {
            let value = &val["value"];
            let value = match text(value, "tag") {
                "name" => IndexValue::Name,
                "namespaced-name" => IndexValue::NamespacedName,
                "field" => IndexValue::Field(text(value, "val").to_owned()),
                other => panic!("mappings: unknown index value {other:?}"),
            };
            Mapping::Index { index: text(val, "index").to_owned(), value }
        }
        other => panic!("mappings: unknown mapping {other:?}"),
    }
}

/// `{"primary": {"apiVersion", "kind", "namespaced"}, "mapping", "index"?: {"name", "path"},
/// "primaries", "related"}` → `{"keys": [sorted]}`.
pub fn mapping(input: &Value) -> Value {
    let p = &input["primary"];
    let primary = KindRef::new(text(p, "apiVersion"), text(p, "kind"));
    let namespaced = p["namespaced"].as_bool().unwrap_or(true);
    let index = input.get("index");
    let path = index.map(|i| IndexPath::parse(text(i, "path")).expect("the case's index path parses"));
    let values = |name: &str, obj: &Value| -> Vec<String> {
        match (&path, index) {
            (Some(path), Some(i)) if text(i, "name") == name => path.values(obj).into_iter().map(Into::into).collect(),
            _ => Vec::new(),
        }
    };
    let primaries = input["primaries"].as_array().cloned().unwrap_or_default();
    let keys = mapping::keys(&parse_mapping(&input["mapping"]), &primary, namespaced, &input["related"], &primaries, values);
    let mut keys: Vec<String> = keys.iter().map(ToString::to_string).collect();
    keys.sort();
    json!({"keys": keys})
}
