//! What an index is keyed by: [`IndexSpec`], and the values it gives an object.

use std::borrow::Cow;
use std::fmt;

use serde_json::Value;

use wasmloop_model::index_path::{IndexPath, field_values};

use super::selector::label_pair;
use super::{CachedObject, Error, Result};

/// The built-in index by namespace (every store has it).
pub const NAMESPACE_INDEX: &str = "namespace";
/// The built-in index by the UID of the controller owner (every store has it).
pub const OWNER_INDEX: &str = "owner";
/// The built-in index by label, valued `key=value` (every store has it): what makes a
/// selector read touch the objects carrying one of its labels instead of every object in the
/// namespace. No declared index path contains `=`, so the name cannot collide.
pub const LABEL_PAIRS_INDEX: &str = "label=value";

/// How an index computes an object's values. An object with no value is not in the index;
/// one with several values is found under each.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum IndexSpec {
    /// `metadata.namespace` (cluster-scoped objects are not indexed).
    Namespace,
    /// The UID of the owner reference with `controller: true`.
    ControllerOwner,
    /// The value of one label; declared as `labels.<key>`.
    Label(String),
    /// Every label as `key=value` (the built-in [`LABEL_PAIRS_INDEX`]).
    LabelPairs,
    /// A dotted JSON path such as `spec.nodeName`. Strings are indexed as-is, numbers and
    /// booleans as their JSON text; an array gives one value per element (arrays on the way
    /// fan out too: `spec.containers.image`; a numeric segment picks one element). Objects, null
    /// and missing fields give no value. After `metadata.labels.` or `metadata.annotations.`
    /// the rest of the path is one key, dots and all (`metadata.annotations.example.com/x`).
    Field(String),
}

impl IndexSpec {
    /// Parse a declared index path: `labels.<key>` (or `metadata.labels.<key>`) for a label,
    /// any other dotted path for a field ([`IndexPath`], the rules shared with the SDK).
    pub fn parse(path: &str) -> Result<Self> {
        match IndexPath::parse(path) {
            Ok(IndexPath::Label(key)) => Ok(Self::Label(key)),
            Ok(IndexPath::Field(path)) => Ok(Self::Field(path)),
            Err(reason) => Err(Error::InvalidIndexPath { path: path.into(), reason }),
        }
    }

    /// True if computing values needs the object's full JSON, not only its cached metadata.
    pub(super) fn reads_json(&self) -> bool {
        matches!(self, Self::Field(_))
    }

    /// The object's values for this index, sorted and deduplicated. `value` is the object's
    /// JSON (only read by [`Field`](Self::Field)).
    pub(super) fn values<'a>(&self, obj: &'a CachedObject, value: &'a Value) -> Vec<Cow<'a, str>> {
        let mut out = Vec::new();
        match self {
            Self::Namespace => out.extend(obj.namespace().map(Cow::Borrowed)),
            Self::ControllerOwner => {
                out.extend(obj.controller_owner().map(|o| o.uid).filter(|u| !u.is_empty()).map(Cow::Borrowed));
            }
            Self::Label(key) => out.extend(obj.label(key).map(Cow::Borrowed)),
            Self::LabelPairs => out.extend(obj.labels().map(|(k, v)| Cow::Owned(label_pair(k, v)))),
            Self::Field(path) => out = field_values(value, path),
        }
        out
    }
}

/// The declared path: `labels.<key>` for labels, the path itself for fields.
impl fmt::Display for IndexSpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Namespace => f.write_str("metadata.namespace"),
            Self::ControllerOwner => f.write_str("controller owner uid"),
            Self::Label(key) => write!(f, "labels.{key}"),
            Self::LabelPairs => f.write_str("labels (key=value)"),
            Self::Field(path) => f.write_str(path),
        }
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn values(spec: &IndexSpec, v: Value) -> Vec<String> {
        let obj = CachedObject::from_value(v.clone()).unwrap();
        spec.values(&obj, &v).into_iter().map(Cow::into_owned).collect()
    }

    #[test]
    fn parses_declared_paths() {
        assert_eq!(IndexSpec::parse("labels.app").unwrap(), IndexSpec::Label("app".into()));
        assert_eq!(IndexSpec::parse("metadata.labels.app.kubernetes.io/name").unwrap(), IndexSpec::Label("app.kubernetes.io/name".into()));
        assert_eq!(IndexSpec::parse("spec.nodeName").unwrap(), IndexSpec::Field("spec.nodeName".into()));
        assert_eq!(
            IndexSpec::parse("metadata.annotations.example.com/team").unwrap(),
            IndexSpec::Field("metadata.annotations.example.com/team".into())
        );
        assert_eq!(IndexSpec::parse("labels.app").unwrap().to_string(), "labels.app");
        for (bad, reason) in [
            ("", "empty"),
            ("spec..nodeName", "empty segment"),
            (".spec", "empty segment"),
            ("spec.", "empty segment"),
            ("labels.", "invalid label key"),
            ("labels.a b", "invalid label key"),
            ("spec.containers[0].image", "segment `containers[0]`"),
            ("metadata.annotations.", "invalid label key"),
        ] {
            match IndexSpec::parse(bad) {
                Err(Error::InvalidIndexPath { path, reason: r }) => {
                    assert_eq!(path, bad);
                    assert!(r.contains(reason), "{bad:?}: {r:?}");
                }
                other => panic!("{bad:?} parsed: {other:?}"),
            }
        }
    }

    #[test]
    fn field_values_cover_scalars_arrays_and_missing() {
        let v = json!({
            "metadata": {"name": "p", "annotations": {"example.com/team": "blue"}},
            "spec": {
                "nodeName": "n1", "replicas": 3, "paused": false, "nothing": null,
                "tags": ["b", "a", "b", 7],
                "containers": [{"image": "nginx"}, {"image": "envoy"}, {"image": "nginx"}],
            }
        });
        let field = |p: &str| values(&IndexSpec::parse(p).unwrap(), v.clone());
        assert_eq!(field("spec.nodeName"), ["n1"]);
        assert_eq!(field("spec.replicas"), ["3"]);
        assert_eq!(field("spec.paused"), ["false"]);
        assert_eq!(field("spec.tags"), ["7", "a", "b"]);
        assert_eq!(field("spec.containers.image"), ["envoy", "nginx"]);
        assert_eq!(field("spec.containers.1.image"), ["envoy"]);
        assert_eq!(field("spec.containers.9.image"), Vec::<String>::new());
        assert_eq!(field("metadata.annotations.example.com/team"), ["blue"]);
        for missing in ["spec.missing", "spec.nothing", "spec", "spec.nodeName.deeper"] {
            assert!(field(missing).is_empty(), "{missing}");
        }
    }

    #[test]
    fn builtin_and_label_values() {
        let v = json!({"metadata": {
            "name": "p", "namespace": "ns", "labels": {"app": "web"},
            "ownerReferences": [
                {"apiVersion": "v1", "kind": "A", "name": "a", "uid": "not-controller"},
                {"apiVersion": "v1", "kind": "B", "name": "b", "uid": "ctl", "controller": true}
            ]
        }});
        assert_eq!(values(&IndexSpec::Namespace, v.clone()), ["ns"]);
        assert_eq!(values(&IndexSpec::ControllerOwner, v.clone()), ["ctl"]);
        assert_eq!(values(&IndexSpec::Label("app".into()), v.clone()), ["web"]);
        assert!(values(&IndexSpec::Label("tier".into()), v).is_empty());
        let cluster = json!({"metadata": {"name": "n"}});
        assert!(values(&IndexSpec::Namespace, cluster.clone()).is_empty());
        assert!(values(&IndexSpec::ControllerOwner, cluster).is_empty());
    }
}
