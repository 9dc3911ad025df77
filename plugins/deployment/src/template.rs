//! `EqualIgnoreHash`: whether two pod templates are the same but for the `pod-template-hash`
//! label, with `apiequality.Semantic.DeepEqual`'s rules over the templates' Go types
//! ([`crate::hash`]'s schema): an absent, `null` or empty list or map equals another (Go's nil
//! and empty); a pointer to an empty struct (`{}`) does not equal an absent one; quantities are
//! compared by value (`1000m` = `1`), times by instant.
//!
//! Fields the v1.20 types do not have (a newer API server's) are compared as JSON, with the
//! same rule for empty values: KCM v1.20 would not see them at all, but a template change there
//! must still roll out.

use serde_json::{Map, Value};

use crate::hash::schema::{POD_TEMPLATE_SPEC, TYPES};
use crate::hash::spew::{Field, Kind, Special};
use crate::hash::{POD_TEMPLATE_HASH, quantity};

/// Whether templates `a` and `b` are equal once their `pod-template-hash` labels are dropped.
pub fn equal_ignore_hash(a: &Value, b: &Value) -> bool {
    equal(POD_TEMPLATE_SPEC, Some(&without_hash(a)), Some(&without_hash(b)))
}

/// `template` without the `pod-template-hash` label.
pub fn without_hash(template: &Value) -> Value {
    let mut t = template.clone();
    if let Some(labels) = t.pointer_mut("/metadata/labels").and_then(Value::as_object_mut) {
        labels.remove(POD_TEMPLATE_HASH);
    }
    t
}

fn present(v: Option<&Value>) -> Option<&Value> {
    v.filter(|v| !v.is_null())
}

/// A list or map that Go would hold as nil or empty.
fn is_empty(v: Option<&Value>) -> bool {
    match present(v) {
        None => true,
        Some(Value::Array(a)) => a.is_empty(),
        Some(Value::Object(m)) => m.is_empty(),
        Some(_) => false,
    }
}

fn equal(ty: u16, a: Option<&Value>, b: Option<&Value>) -> bool {
    let t = &TYPES[usize::from(ty)];
    match &t.kind {
        Kind::Ptr(target) => match (present(a), present(b)) {
            (None, None) => true,
            (Some(a), Some(b)) => equal(*target, Some(a), Some(b)),
            _ => false,
        },
        Kind::Named(under) => equal(*under, a, b),
        Kind::Bool => present(a).and_then(Value::as_bool).unwrap_or(false) == present(b).and_then(Value::as_bool).unwrap_or(false),
        Kind::Int | Kind::Uint => number(a) == number(b),
        Kind::Str => present(a).and_then(Value::as_str).unwrap_or("") == present(b).and_then(Value::as_str).unwrap_or(""),
        Kind::Slice(elem) => match (present(a).and_then(Value::as_array), present(b).and_then(Value::as_array)) {
            _ if is_empty(a) && is_empty(b) => true,
            (Some(x), Some(y)) => x.len() == y.len() && x.iter().zip(y).all(|(x, y)| equal(*elem, Some(x), Some(y))),
            _ => json_equal(a, b),
        },
        Kind::Map(_, val) => match (present(a).and_then(Value::as_object), present(b).and_then(Value::as_object)) {
            _ if is_empty(a) && is_empty(b) => true,
            (Some(x), Some(y)) => x.len() == y.len() && x.iter().all(|(k, v)| y.get(k).is_some_and(|w| equal(*val, Some(v), Some(w)))),
            _ => json_equal(a, b),
        },
        Kind::Struct(fields) => structs_equal(fields, present(a).and_then(Value::as_object), present(b).and_then(Value::as_object)),
        Kind::Special(Special::Quantity(_)) => quantities_equal(present(a), present(b)),
        Kind::Special(Special::IntOrString(_)) => present(a) == present(b),
        Kind::Special(Special::MetaTime(_)) => {
            fn instant(v: Option<&Value>) -> Option<Result<i64, &str>> {
                present(v).and_then(Value::as_str).map(|s| wasmloop_sdk::time::parse(s).ok_or(s))
            }
            instant(a) == instant(b)
        }
        Kind::Special(Special::GoTime | Special::InfDec) => true,
    }
}

fn number(v: Option<&Value>) -> Option<String> {
    match present(v) {
        None => None,
        Some(Value::Number(n)) if n.as_i64() == Some(0) || n.as_u64() == Some(0) => None,
        Some(other) => Some(other.to_string()),
    }
}

/// Structs field by field (inline fields from the same object), then the JSON fields the
/// struct does not know.
fn structs_equal(fields: &[Field], a: Option<&Map<String, Value>>, b: Option<&Map<String, Value>>) -> bool {
    let empty = Map::new();
    let (a, b) = (a.unwrap_or(&empty), b.unwrap_or(&empty));
    let mut known: Vec<&str> = Vec::new();
    if !known_fields_equal(fields, a, b, &mut known) {
        return false;
    }
    let unknown = |m: &Map<String, Value>| m.keys().filter(|k| !known.contains(&k.as_str())).cloned().collect::<Vec<_>>();
    let mut keys = unknown(a);
    keys.extend(unknown(b));
    keys.iter().all(|k| json_equal(a.get(k), b.get(k)))
}

fn known_fields_equal<'f>(fields: &'f [Field], a: &Map<String, Value>, b: &Map<String, Value>, known: &mut Vec<&'f str>) -> bool {
    fields.iter().all(|f| match f.json {
        Some("") => match &TYPES[usize::from(f.ty)].kind {
            Kind::Struct(inner) => known_fields_equal(inner, a, b, known),
            _ => true,
        },
        Some(name) => {
            known.push(name);
            equal(f.ty, a.get(name), b.get(name))
        }
        None => true,
    })
}

/// JSON equality where null and empty lists and maps are absent.
fn json_equal(a: Option<&Value>, b: Option<&Value>) -> bool {
    fn normalized(v: Option<&Value>) -> Option<Value> {
        match present(v)? {
            Value::Array(items) if items.is_empty() => None,
            Value::Array(items) => Some(Value::Array(items.iter().map(|i| normalized(Some(i)).unwrap_or(Value::Null)).collect())),
            Value::Object(m) if m.is_empty() => None,
            Value::Object(m) => {
                let m: Map<String, Value> = m.iter().filter_map(|(k, v)| normalized(Some(v)).map(|v| (k.clone(), v))).collect();
                (!m.is_empty()).then_some(Value::Object(m))
            }
            other => Some(other.clone()),
        }
    }
    normalized(a) == normalized(b)
}

/// `Quantity.Cmp(other) == 0`.
fn quantities_equal(a: Option<&Value>, b: Option<&Value>) -> bool {
    let text = |v: Option<&Value>| match v {
        None => Some("0".to_owned()),
        Some(Value::String(s)) => Some(s.clone()),
        Some(Value::Number(n)) => Some(n.to_string()),
        Some(_) => None,
    };
    match (text(a), text(b)) {
        (Some(x), Some(y)) if x == y => true,
        (Some(x), Some(y)) => match (quantity::exact_value(&x), quantity::exact_value(&y)) {
            (Some(x), Some(y)) => x == y,
            _ => false,
        },
        _ => a == b,
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn template() -> Value {
        json!({
            "metadata": {"labels": {"app": "web"}, "creationTimestamp": null},
            "spec": {
                "containers": [{"name": "c", "image": "nginx:1", "resources": {"requests": {"cpu": "1", "memory": "1Gi"}},
                                "ports": [{"containerPort": 80, "protocol": "TCP"}],
                                "readinessProbe": {"httpGet": {"port": 80, "path": "/"}}}],
                "restartPolicy": "Always",
                "securityContext": {},
            }
        })
    }

    #[test]
    fn the_hash_label_empties_and_quantity_spellings_do_not_count() {
        let mut hashed = template();
        hashed["metadata"]["labels"][POD_TEMPLATE_HASH] = json!("5d4f8c7b9");
        hashed["spec"]["volumes"] = json!([]);
        hashed["metadata"]["annotations"] = json!({});
        hashed["spec"]["containers"][0]["resources"]["requests"]["cpu"] = json!("1000m");
        hashed["spec"]["containers"][0]["env"] = Value::Null;
        assert!(equal_ignore_hash(&template(), &hashed));
    }

    #[test]
    fn any_real_difference_counts() {
        let changes: [(&str, Value); 8] = [
            ("/spec/containers/0/name", json!("d")),
            ("/spec/containers/0/image", json!("nginx:2")),
            ("/spec/containers/0/resources/requests/cpu", json!("2")),
            ("/spec/containers/0/readinessProbe/httpGet/port", json!("http")),
            ("/metadata/labels/app", json!("api")),
            ("/spec/containers/0/ports/0/containerPort", json!(0)),
            ("/spec/restartPolicy", json!("Never")),
            ("/spec/securityContext", Value::Null),
        ];
        for (path, value) in changes {
            let mut changed = template();
            *changed.pointer_mut(path).unwrap_or_else(|| panic!("{path}")) = value;
            assert!(!equal_ignore_hash(&template(), &changed), "{path}");
        }
    }

    #[test]
    fn fields_unknown_to_v1_20_still_count() {
        let mut newer = template();
        newer["spec"]["os"] = json!({"name": "linux"});
        assert!(!equal_ignore_hash(&template(), &newer));
        newer["spec"]["os"] = json!({});
        assert!(equal_ignore_hash(&template(), &newer), "an empty unknown field is absent");
    }
}
