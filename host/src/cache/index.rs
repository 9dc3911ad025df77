//! What an index is keyed by: [`IndexSpec`], and the values it gives an object; [`Index`]:
//! one index of a store, its entries and what they cost.

use std::borrow::Cow;
use std::collections::{BTreeSet, HashMap};
use std::fmt;
use std::sync::Arc;

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
            Err(reason) => Err(Error::InvalidIndexPath { path: path.into(), reason: reason.to_string() }),
        }
    }

    /// The name a store knows this index by when controllers share it
    /// ([`IndexedStore::acquire_index`](super::IndexedStore::acquire_index)): derived from the
    /// definition, so equal definitions share one index whatever each plugin calls it, and
    /// different ones never collide. No declared name reaches a shared store, and no built-in
    /// name has a `:`.
    pub fn shared_name(&self) -> String {
        match self {
            Self::Label(key) => format!("label:{key}"),
            Self::Field(path) => format!("field:{path}"),
            Self::Namespace => NAMESPACE_INDEX.into(),
            Self::ControllerOwner => OWNER_INDEX.into(),
            Self::LabelPairs => LABEL_PAIRS_INDEX.into(),
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

/// One index's values as the store keeps them per object (`Arc<str>`s shared with the index).
pub(super) type Values = Box<[Arc<str>]>;

/// Estimated heap bytes of one distinct value of an index, its own bytes aside: its map slot
/// (`Arc<str>` + `BTreeSet`, 40 bytes, ~64 at the map's load between 7/16 and 7/8), the `Arc`'s
/// header (16) and the set's first B-tree leaf (192 bytes, room for 11 keys).
const BYTES_PER_VALUE: usize = 64 + 16 + 192;
/// Estimated heap bytes of one (value, object) entry: a key in a B-tree leaf (16 bytes, leaves
/// about two thirds full).
const BYTES_PER_ENTRY: usize = 24;
/// What a field index adds: per entry the value's pointer in the object's remembered values, per
/// object indexed the slot of those values.
const FIELD_BYTES_PER_ENTRY: usize = 16;
const FIELD_BYTES_PER_OBJECT: usize = 16;

/// One index of a store: its name, its definition, value → keys of the objects that have it,
/// who uses it, and counts that give its memory at any time without walking it.
pub(super) struct Index {
    pub(super) name: Box<str>,
    pub(super) spec: IndexSpec,
    /// Value → keys of the objects that have it. Sets are removed when they empty.
    pub(super) map: HashMap<Arc<str>, BTreeSet<Arc<str>>>,
    /// Controllers holding it ([`IndexedStore::acquire_index`](super::IndexedStore::acquire_index));
    /// `None`: kept for the store's life (built-in, or added by name).
    pub(super) users: Option<usize>,
    /// (value, key) pairs held.
    entries: usize,
    /// Objects with at least one value.
    objects: usize,
    /// Bytes of the distinct values.
    value_bytes: usize,
}

impl Index {
    /// An empty index.
    pub(super) fn new(name: &str, spec: IndexSpec, users: Option<usize>) -> Self {
        Self { name: name.into(), spec, map: HashMap::new(), users, entries: 0, objects: 0, value_bytes: 0 }
    }

    /// `values` as `Arc<str>`s, reusing the ones already in the index.
    pub(super) fn intern<'v>(&self, values: impl Iterator<Item = &'v str>) -> Values {
        values
            .map(|v| match self.map.get_key_value(v) {
                Some((existing, _)) => existing.clone(),
                None => Arc::from(v),
            })
            .collect()
    }

    pub(super) fn add(&mut self, key: &Arc<str>, values: &[Arc<str>]) {
        self.objects += usize::from(!values.is_empty());
        for v in values {
            let keys = self.map.entry(v.clone()).or_insert_with(|| {
                self.value_bytes += v.len();
                BTreeSet::new()
            });
            if keys.insert(key.clone()) {
                self.entries += 1;
            }
        }
    }

    /// Point the entries for `values` at `key` (an equal string in a new allocation), so the
    /// replaced object's key can be freed.
    pub(super) fn rekey(&mut self, key: &Arc<str>, values: &[Arc<str>]) {
        for v in values {
            if let Some(keys) = self.map.get_mut(v) {
                keys.replace(key.clone());
            }
        }
    }

    pub(super) fn remove(&mut self, key: &str, values: &[impl std::ops::Deref<Target = str>]) {
        self.objects = self.objects.saturating_sub(usize::from(!values.is_empty()));
        for v in values {
            if let Some(keys) = self.map.get_mut(&**v) {
                if keys.remove(key) {
                    self.entries = self.entries.saturating_sub(1);
                }
                if keys.is_empty() {
                    self.map.remove(&**v);
                    self.value_bytes = self.value_bytes.saturating_sub(v.len());
                }
            }
        }
    }

    /// Estimated heap bytes of its entries (what the allocator is asked for; its own overhead
    /// aside): O(1), from counts kept as entries come and go. `wasmloop-bench index-memory`
    /// measures it against the heap: within 10% for one distinct value per object, a few values
    /// shared by many, and hundreds of values per object.
    pub(super) fn approx_bytes(&self) -> usize {
        let fields = if self.spec.reads_json() { self.entries * FIELD_BYTES_PER_ENTRY + self.objects * FIELD_BYTES_PER_OBJECT } else { 0 };
        self.map.len() * BYTES_PER_VALUE + self.value_bytes + self.entries * BYTES_PER_ENTRY + fields
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

    /// The cache's index paths against the conformance corpus (`model/conformance/index_paths.json`):
    /// parsed as a plugin's declared index, evaluated on the cached object.
    #[test]
    fn conformance_index_paths() {
        wasmloop_model::conformance::check("index_paths", |case| match IndexSpec::parse(case.input["path"].as_str().unwrap_or_default()) {
            Ok(spec) => json!({"values": values(&spec, case.input["object"].clone())}),
            // The cache keeps the model's reason as text: its kind, read back.
            Err(Error::InvalidIndexPath { reason, .. }) => {
                let kind = match reason.as_str() {
                    "the path is empty" => "empty",
                    r if r.starts_with("invalid label key") => "key",
                    _ => "segment",
                };
                json!({"error": {"kind": kind}})
            }
            Err(other) => json!({"error": {"kind": other.to_string()}}),
        });
    }
}
