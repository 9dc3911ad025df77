//! Declared index paths, parsed and evaluated the same way by the host's cache and by the SDK's
//! test fake: `labels.<key>` (or `metadata.labels.<key>`) indexes one label; any other dotted
//! path (`spec.nodeName`, `spec.containers.image`, `metadata.annotations.<key>`) indexes the
//! scalar values found there.

use std::borrow::Cow;
use std::fmt;

use serde_json::Value;

use crate::selector::validate_key;

/// A parsed index path.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum IndexPath {
    /// The value of one label.
    Label(String),
    /// A dotted JSON path. Strings are indexed as-is, numbers and booleans as their JSON text;
    /// an array gives one value per element (arrays on the way fan out too:
    /// `spec.containers.image`; a numeric segment picks one element). Objects, null and missing
    /// fields give no value. After `metadata.labels.` or `metadata.annotations.` the rest of
    /// the path is one key, dots and all (`metadata.annotations.example.com/x`).
    Field(String),
}

impl IndexPath {
    /// Parse a declared path; the error is the reason it is refused.
    pub fn parse(path: &str) -> Result<Self, String> {
        if let Some(key) = path.strip_prefix("labels.").or(path.strip_prefix("metadata.labels.")) {
            validate_key(key)?;
            return Ok(Self::Label(key.into()));
        }
        if path.is_empty() {
            return Err("the path is empty".into());
        }
        let (fields, map_key) = split_map_key(path);
        if let Some(key) = map_key {
            validate_key(key)?;
        }
        for seg in fields.split('.') {
            if seg.is_empty() {
                return Err("empty segment (leading, trailing or doubled `.`)".into());
            }
            if !seg.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-') {
                return Err(format!(
                    "segment `{seg}` may contain only letters, digits, `_` and `-` \
                     (write `spec.containers.0.image`, not `[0]`)"
                ));
            }
        }
        Ok(Self::Field(path.into()))
    }

    /// The object's values for this path (the object as JSON), sorted and deduplicated.
    pub fn values<'a>(&self, object: &'a Value) -> Vec<Cow<'a, str>> {
        match self {
            Self::Label(key) => object
                .get("metadata")
                .and_then(|m| m.get("labels"))
                .and_then(|l| l.get(key.as_str()))
                .and_then(Value::as_str)
                .map(Cow::Borrowed)
                .into_iter()
                .collect(),
            Self::Field(path) => field_values(object, path),
        }
    }
}

/// The declared form: `labels.<key>` for labels, the path itself for fields.
impl fmt::Display for IndexPath {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Label(key) => write!(f, "labels.{key}"),
            Self::Field(path) => f.write_str(path),
        }
    }
}

/// The values of field path `path` (see [`IndexPath::Field`]) in `object`, sorted and
/// deduplicated.
pub fn field_values<'a>(object: &'a Value, path: &str) -> Vec<Cow<'a, str>> {
    let (fields, map_key) = split_map_key(path);
    let segs: Vec<&str> = fields.split('.').chain(map_key).collect();
    let mut out = Vec::new();
    collect(object, &segs, &mut out);
    out.sort_unstable();
    out.dedup();
    out
}

/// Split `metadata.annotations.<key>` / `metadata.labels.<key>` into the dotted part and the key.
fn split_map_key(path: &str) -> (&str, Option<&str>) {
    for map in ["metadata.annotations", "metadata.labels"] {
        if let Some(key) = path.strip_prefix(map).and_then(|rest| rest.strip_prefix('.')) {
            return (map, Some(key));
        }
    }
    (path, None)
}

fn collect<'a>(v: &'a Value, segs: &[&str], out: &mut Vec<Cow<'a, str>>) {
    match (v, segs.split_first()) {
        (Value::Array(items), Some((seg, rest))) if seg.bytes().all(|b| b.is_ascii_digit()) => {
            if let Some(item) = seg.parse::<usize>().ok().and_then(|i| items.get(i)) {
                collect(item, rest, out);
            }
        }
        (Value::Array(items), _) => items.iter().for_each(|item| collect(item, segs, out)),
        (Value::Object(map), Some((seg, rest))) => {
            if let Some(child) = map.get(*seg) {
                collect(child, rest, out);
            }
        }
        (Value::String(s), None) => out.push(Cow::Borrowed(s)),
        (Value::Number(n), None) => out.push(Cow::Owned(n.to_string())),
        (Value::Bool(b), None) => out.push(Cow::Owned(b.to_string())),
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn parses_labels_and_fields_and_names_what_is_wrong() {
        assert_eq!(IndexPath::parse("labels.app"), Ok(IndexPath::Label("app".into())));
        assert_eq!(IndexPath::parse("metadata.labels.app.kubernetes.io/name"), Ok(IndexPath::Label("app.kubernetes.io/name".into())));
        assert_eq!(IndexPath::parse("spec.nodeName"), Ok(IndexPath::Field("spec.nodeName".into())));
        assert_eq!(IndexPath::parse("metadata.annotations.example.com/x").unwrap().to_string(), "metadata.annotations.example.com/x");
        assert_eq!(IndexPath::parse("labels.app").unwrap().to_string(), "labels.app");
        for (bad, reason) in [
            ("", "empty"),
            ("spec..x", "empty segment"),
            (".spec", "empty segment"),
            ("spec.", "empty segment"),
            ("labels.", "invalid label key"),
            ("labels.a b", "invalid label key"),
            ("metadata.annotations.", "invalid label key"),
            ("spec.containers[0].image", "segment `containers[0]`"),
        ] {
            let got = IndexPath::parse(bad).unwrap_err();
            assert!(got.contains(reason), "{bad:?}: {got:?}");
        }
    }

    #[test]
    fn values_cover_labels_scalars_arrays_and_missing() {
        let v = json!({
            "metadata": {"name": "p", "labels": {"app": "web"}, "annotations": {"example.com/team": "blue"}},
            "spec": {"nodeName": "n1", "replicas": 3, "paused": false, "nothing": null, "tags": ["b", "a", "b", 7],
                     "containers": [{"image": "nginx"}, {"image": "envoy"}, {"image": "nginx"}]}
        });
        let values = |p: &str| IndexPath::parse(p).unwrap().values(&v).into_iter().map(Cow::into_owned).collect::<Vec<_>>();
        assert_eq!(values("labels.app"), ["web"]);
        assert!(values("labels.tier").is_empty());
        assert_eq!(values("spec.nodeName"), ["n1"]);
        assert_eq!(values("spec.replicas"), ["3"]);
        assert_eq!(values("spec.paused"), ["false"]);
        assert_eq!(values("spec.tags"), ["7", "a", "b"]);
        assert_eq!(values("spec.containers.image"), ["envoy", "nginx"]);
        assert_eq!(values("spec.containers.1.image"), ["envoy"]);
        assert_eq!(values("metadata.annotations.example.com/team"), ["blue"]);
        assert!(values("spec.nothing").is_empty());
        assert!(values("spec.missing.deeper").is_empty());
        assert!(values("spec").is_empty(), "objects give no value");
    }

    /// Pieces index paths are made of, valid and not.
    const SEGMENTS: &[&str] = &[
        "labels",
        "metadata",
        "annotations",
        "spec",
        "status",
        "containers",
        "image",
        "0",
        "12",
        "a-b",
        "x_y",
        "app",
        "example.com/team",
        "app.kubernetes.io/name",
        "",
        "[0]",
        " ",
        "é",
        "a b",
    ];

    /// A path of [`SEGMENTS`] joined by dots, or any text.
    fn path_text() -> impl proptest::strategy::Strategy<Value = String> {
        use proptest::prelude::*;
        prop_oneof![
            1 => any::<String>(),
            4 => prop::collection::vec(prop::sample::select(SEGMENTS), 1..6).prop_map(|s| s.join(".")),
        ]
    }

    /// The object that holds `"v"` where `path` points: nested objects along the dotted part,
    /// the label or annotation key as one key.
    fn object_at(path: &IndexPath) -> Value {
        let (fields, key) = match path {
            IndexPath::Label(key) => ("metadata.labels", Some(key.as_str())),
            IndexPath::Field(path) => split_map_key(path),
        };
        let segs: Vec<&str> = fields.split('.').chain(key).collect();
        segs.iter().rev().fold(json!("v"), |inner, seg| json!({ *seg: inner }))
    }

    /// `IndexPath::parse` on any text: never panics, a refusal has a reason. A path that parses
    /// prints (`Display`) as a path that parses to the same one, evaluates on any JSON value
    /// without panicking to sorted, distinct values, and finds a value placed where it points.
    #[test]
    fn fuzz_index_path() {
        use proptest::prelude::*;
        crate::fuzz::run(file!(), "index-path", (path_text(), crate::fuzz::json_value()), |(text, value)| {
            let path = match IndexPath::parse(&text) {
                Ok(path) => path,
                Err(reason) => {
                    prop_assert!(!reason.is_empty(), "{text:?}: empty reason");
                    return Ok(false);
                }
            };
            prop_assert_eq!(IndexPath::parse(&path.to_string()), Ok(path.clone()), "{:?}", text);
            let values = path.values(&value);
            prop_assert!(values.windows(2).all(|w| w[0] < w[1]), "{text:?}: {values:?} not sorted and distinct");
            let object = object_at(&path);
            prop_assert_eq!(path.values(&object), vec![Cow::Borrowed("v")], "{:?} in {}", text, object);
            Ok(true)
        });
    }
}
