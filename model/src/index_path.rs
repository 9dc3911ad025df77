//! Declared index paths, parsed and evaluated the same way by the host's cache and by the SDK's
//! test fake: `labels.<key>` (or `metadata.labels.<key>`) indexes one label; any other dotted
//! path (`spec.nodeName`, `spec.containers.image`, `metadata.annotations.<key>`) indexes the
//! scalar values found there.
//!
//! A segment may carry filters, `[field=value]`, each one kept only where the element (of the
//! list the segment names, or the object itself) has that scalar at `field` (strings as-is,
//! numbers and booleans as their JSON text): the tutorial CronJob's index of Jobs by the name of
//! their controlling CronJob is
//! `metadata.ownerReferences[controller=true][kind=CronJob][apiVersion=batch.tutorial.kubebuilder.io/v1].name`.
//! Values may hold dots and slashes; not `[` or `]`. A filter does not end a path: it keeps
//! objects, and an object is no value to index.

use std::borrow::Cow;
use std::fmt;

use serde_json::Value;

use crate::selector::{KeyError, validate_key};

/// Why a declared index path is refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PathError {
    /// The path is empty.
    #[error("the path is empty")]
    Empty,
    /// The label (or annotation) key it names is not a label key.
    #[error(transparent)]
    Key(#[from] KeyError),
    /// Its dotted part does not parse: what is wrong where.
    #[error("{0}")]
    Segment(String),
}

impl PathError {
    /// A stable name of the kind of error (`empty`, `key`, `segment`), as the conformance corpus
    /// records it.
    pub fn kind(&self) -> &'static str {
        match self {
            PathError::Empty => "empty",
            PathError::Key(_) => "key",
            PathError::Segment(_) => "segment",
        }
    }
}

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
    pub fn parse(path: &str) -> Result<Self, PathError> {
        if let Some(key) = path.strip_prefix("labels.").or(path.strip_prefix("metadata.labels.")) {
            validate_key(key)?;
            return Ok(Self::Label(key.into()));
        }
        if path.is_empty() {
            return Err(PathError::Empty);
        }
        let (fields, map_key) = split_map_key(path);
        if let Some(key) = map_key {
            validate_key(key)?;
        }
        segments(fields)?;
        Ok(Self::Field(path.into()))
    }

    /// Whether the path filters (`[field=value]`): metadata `fields` may not (they read one value).
    pub fn is_filtered(&self) -> bool {
        matches!(self, Self::Field(path) if path.contains('['))
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
/// deduplicated; none for a path that does not parse.
pub fn field_values<'a>(object: &'a Value, path: &str) -> Vec<Cow<'a, str>> {
    let (fields, map_key) = split_map_key(path);
    let Ok(mut segs) = segments(fields) else { return Vec::new() };
    segs.extend(map_key.map(|name| Segment { name, filters: Vec::new() }));
    let mut out = Vec::new();
    collect(object, &segs, &mut out);
    out.sort_unstable();
    out.dedup();
    out
}

/// One segment of a field path: a field name (or list position) and the filters on what it holds.
struct Segment<'p> {
    name: &'p str,
    filters: Vec<(&'p str, &'p str)>,
}

impl Segment<'_> {
    /// Whether `v` passes every filter: an object whose `field` is that scalar.
    fn keeps(&self, v: &Value) -> bool {
        self.filters.iter().all(|(field, want)| match v.get(field) {
            Some(Value::String(s)) => s == want,
            Some(Value::Bool(b)) => *want == if *b { "true" } else { "false" },
            Some(Value::Number(n)) => *want == n.to_string().as_str(),
            _ => false,
        })
    }
}

/// The segments of the dotted part of a field path, `.` inside filters kept in them; the error
/// names what is wrong.
fn segments(fields: &str) -> Result<Vec<Segment<'_>>, PathError> {
    let mut out = Vec::new();
    let mut rest = fields;
    loop {
        let name_end = rest.find(['.', '[']).unwrap_or(rest.len());
        let name = &rest[..name_end];
        if name.is_empty() {
            return Err(PathError::Segment("empty segment (leading, trailing or doubled `.`)".into()));
        }
        if !name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-') {
            return Err(PathError::Segment(format!(
                "segment `{name}` may contain only letters, digits, `_` and `-` (write `spec.containers.0.image`, not `[0]`; \
                 a filter is `[field=value]`)"
            )));
        }
        rest = &rest[name_end..];
        let mut filters = Vec::new();
        while let Some(after) = rest.strip_prefix('[') {
            let close = after.find(']').ok_or_else(|| PathError::Segment(format!("filter `[{after}` of segment `{name}` has no `]`")))?;
            let filter = &after[..close];
            if !filter.is_empty() && filter.bytes().all(|b| b.is_ascii_digit()) {
                return Err(PathError::Segment(format!(
                    "segment `{name}[{filter}]`: write `{name}.{filter}` to pick a list position (a filter is `[field=value]`)"
                )));
            }
            let (field, value) = filter
                .split_once('=')
                .ok_or_else(|| PathError::Segment(format!("filter `[{filter}]` of segment `{name}` is not `[field=value]`")))?;
            if field.is_empty() || !field.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-') {
                return Err(PathError::Segment(format!("filter `[{filter}]` of segment `{name}`: `{field}` is not a field name")));
            }
            if value.is_empty() || value.contains('[') {
                return Err(PathError::Segment(format!("filter `[{filter}]` of segment `{name}`: the value is empty or holds `[`")));
            }
            if name.bytes().all(|b| b.is_ascii_digit()) {
                return Err(PathError::Segment(format!("segment `{name}` picks a list position: it takes no filter")));
            }
            filters.push((field, value));
            rest = &after[close + 1..];
        }
        let last_filtered = rest.is_empty() && !filters.is_empty();
        out.push(Segment { name, filters });
        match rest.strip_prefix('.') {
            Some(next) => rest = next,
            None if last_filtered => {
                return Err(PathError::Segment(format!(
                    "segment `{name}` ends the path with a filter: it keeps objects, which have no value to index \
                     (name the field to index after it: `{name}[…].name`)"
                )));
            }
            None if rest.is_empty() => return Ok(out),
            None => return Err(PathError::Segment(format!("after segment `{name}`: `{rest}` (expected `.` or `[field=value]`)"))),
        }
    }
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

fn collect<'a>(v: &'a Value, segs: &[Segment<'_>], out: &mut Vec<Cow<'a, str>>) {
    match (v, segs.split_first()) {
        (Value::Array(items), Some((seg, rest))) if seg.name.bytes().all(|b| b.is_ascii_digit()) => {
            if let Some(item) = seg.name.parse::<usize>().ok().and_then(|i| items.get(i)) {
                collect(item, rest, out);
            }
        }
        (Value::Array(items), _) => items.iter().for_each(|item| collect(item, segs, out)),
        (Value::Object(map), Some((seg, rest))) => match map.get(seg.name) {
            // Filtered: only the elements (or the object) that pass, then the rest of the path.
            Some(Value::Array(items)) if !seg.filters.is_empty() => {
                items.iter().filter(|i| seg.keeps(i)).for_each(|item| collect(item, rest, out));
            }
            Some(child) if seg.keeps(child) => collect(child, rest, out),
            _ => {}
        },
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
            let got = IndexPath::parse(bad).unwrap_err().to_string();
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

    #[test]
    fn filters_keep_the_elements_whose_field_matches() {
        let job = json!({"metadata": {"ownerReferences": [
            {"apiVersion": "batch.tutorial.kubebuilder.io/v1", "kind": "CronJob", "name": "nightly", "controller": true},
            {"apiVersion": "v1", "kind": "ConfigMap", "name": "settings"},
            {"apiVersion": "other.io/v1", "kind": "CronJob", "name": "impostor", "controller": true},
        ]}, "spec": {"ports": [{"port": 80, "name": "http"}, {"port": 443, "name": "https"}], "mode": {"on": true, "v": "x"}}});
        let values = |p: &str| IndexPath::parse(p).unwrap().values(&job).into_iter().map(Cow::into_owned).collect::<Vec<_>>();
        let owner = "metadata.ownerReferences[controller=true][kind=CronJob][apiVersion=batch.tutorial.kubebuilder.io/v1].name";
        assert_eq!(values(owner), ["nightly"]);
        assert_eq!(values("metadata.ownerReferences[kind=CronJob].name"), ["impostor", "nightly"]);
        assert_eq!(values("metadata.ownerReferences.name"), ["impostor", "nightly", "settings"], "unfiltered: every owner");
        assert_eq!(values("spec.ports[port=443].name"), ["https"], "numbers as their JSON text");
        assert_eq!(values("spec.mode[on=true].v"), ["x"], "an object is kept or not");
        assert!(values("spec.mode[on=false].v").is_empty());
        assert!(values("metadata.ownerReferences[kind=Deployment].name").is_empty());
        assert!(IndexPath::parse(owner).unwrap().is_filtered());
        assert!(!IndexPath::parse("metadata.ownerReferences.name").unwrap().is_filtered());
        assert_eq!(IndexPath::parse(owner).unwrap().to_string(), owner);
    }

    #[test]
    fn malformed_filters_are_refused_naming_what_is_wrong() {
        for (bad, reason) in [
            ("spec.ports[port=443", "has no `]`"),
            ("spec.ports[port]", "is not `[field=value]`"),
            ("spec.ports[=443].name", "is not a field name"),
            ("spec.ports[port=].name", "the value is empty"),
            ("spec.ports[port=4[4]].name", "holds `[`"),
            ("spec.0[port=1].name", "takes no filter"),
            ("spec.ports[port=443]name", "expected `.` or `[field=value]`"),
            ("spec.[port=443]", "empty segment"),
            ("spec.ports[port=443]", "ends the path with a filter"),
        ] {
            let got = IndexPath::parse(bad).unwrap_err().to_string();
            assert!(got.contains(reason), "{bad:?}: {got:?}");
        }
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
        "owners[kind=CronJob]",
        "x[a=b.c/d][e=true]",
        "y[a=",
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
    /// `None` where no object can hold a value there: a filter field that is also the next
    /// segment's name (a filter on the last segment does not parse).
    fn object_at(path: &IndexPath) -> Option<Value> {
        let (fields, key) = match path {
            IndexPath::Label(key) => ("metadata.labels", Some(key.as_str())),
            IndexPath::Field(path) => split_map_key(path),
        };
        let mut segs = segments(fields).expect("a parsed path");
        segs.extend(key.map(|name| Segment { name, filters: Vec::new() }));
        let mut inner = json!("v");
        for (i, seg) in segs.iter().enumerate().rev() {
            if seg.filters.is_empty() {
                inner = json!({ seg.name: inner });
                continue;
            }
            let next = segs.get(i + 1).map(|s| s.name).expect("a filter on the last segment does not parse");
            if seg.filters.iter().any(|(f, _)| *f == next) {
                return None;
            }
            let mut element = inner;
            for (field, value) in &seg.filters {
                element[*field] = json!(value);
            }
            inner = json!({ seg.name: [element] });
        }
        Some(inner)
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
                    prop_assert!(!reason.to_string().is_empty(), "{text:?}: empty reason");
                    return Ok(false);
                }
            };
            prop_assert_eq!(IndexPath::parse(&path.to_string()), Ok(path.clone()), "{:?}", text);
            let values = path.values(&value);
            prop_assert!(values.windows(2).all(|w| w[0] < w[1]), "{text:?}: {values:?} not sorted and distinct");
            let Some(object) = object_at(&path) else { return Ok(true) };
            prop_assert_eq!(path.values(&object), vec![Cow::Borrowed("v")], "{:?} in {}", text, object);
            Ok(true)
        });
    }

    /// The case `fuzz_index_path` found (seed in `proptest-regressions/index_path.txt`): a path
    /// ending in a filter was accepted and could never give a value (the harness's own
    /// `object_at` panicked placing one). It is refused at parse, naming the segment.
    #[test]
    fn fuzz_regression_a_filter_ending_the_path_is_refused() {
        let reason = IndexPath::parse("owners[kind=CronJob]").unwrap_err().to_string();
        assert!(reason.contains("segment `owners` ends the path with a filter"), "{reason}");
        assert!(field_values(&json!({"owners": [{"kind": "CronJob"}]}), "owners[kind=CronJob]").is_empty());
    }
}
