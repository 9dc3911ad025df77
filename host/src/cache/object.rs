//! [`CachedObject`]: one object as the cache keeps it.
//!
//! Memory matters (a cluster has tens of thousands of Pods), so an object is its compact JSON
//! text (compressed with its kind's dictionary once the kind has one: [`Body`]) plus the few
//! metadata fields the cache needs without parsing, packed tightly: the key `namespace/name` is
//! one shared `Arc<str>` (the store's maps reuse it), and every other metadata string (uid,
//! resourceVersion, labels, owner references) lives in one `Box<str>` that the fields point
//! into with [`Span`]s. No parsed `serde_json::Value` is kept.

use std::borrow::Cow;
use std::fmt;
use std::sync::Arc;

use serde::de::DeserializeOwned;
use serde_json::Value;

use super::body::{Body, Dictionary};
use super::{Error, Result};

/// An owner reference of a cached object, borrowed from it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct OwnerRef<'a> {
    /// The owner's `apiVersion`.
    pub api_version: &'a str,
    /// The owner's kind.
    pub kind: &'a str,
    /// The owner's name (in the object's namespace, or cluster-scoped).
    pub name: &'a str,
    /// The owner's uid.
    pub uid: &'a str,
    /// `controller: true`: this owner manages the object.
    pub controller: bool,
}

impl OwnerRef<'_> {
    /// The owner's kind as a [`KindRef`](crate::kinds::KindRef).
    pub fn kind_ref(&self) -> crate::kinds::KindRef {
        crate::kinds::KindRef::new(self.api_version, self.kind)
    }
}

/// A byte range in [`CachedObject::text`]. `u32`s keep it at 8 bytes.
#[derive(Clone, Copy, Debug, Default)]
struct Span {
    start: u32,
    len: u32,
}

/// An owner reference as stored: spans for api_version, kind, name, uid.
#[derive(Clone, Copy, Debug)]
struct OwnerSpans {
    fields: [Span; 4],
    controller: bool,
}

/// One cached object: JSON without `metadata.managedFields`, plus parsed metadata.
pub struct CachedObject {
    /// Compact JSON, returned to readers as it was received (decompressed if packed).
    json: Body,
    /// `namespace/name`, or `name` when cluster-scoped (client-go's key format).
    key: Arc<str>,
    /// Where the name starts in `key` (0 when cluster-scoped).
    name_start: u32,
    /// The strings the spans below point into.
    text: Box<str>,
    uid: Span,
    resource_version: Span,
    /// Sorted by key.
    labels: Box<[(Span, Span)]>,
    owners: Box<[OwnerSpans]>,
    generation: Option<i64>,
    deleting: bool,
}

impl CachedObject {
    /// Cache `value` (any kind's JSON): strips `metadata.managedFields` and keeps compact JSON.
    pub fn from_value(mut value: Value) -> Result<Self> {
        Self::from_value_mut(&mut value, None)
    }

    /// Like [`from_value`](Self::from_value), compressing the JSON with `dict` if given, and
    /// leaving the (stripped) value to the caller, which still needs it for field indexes.
    pub(super) fn from_value_mut(value: &mut Value, dict: Option<&Arc<Dictionary>>) -> Result<Self> {
        if let Some(meta) = value.get_mut("metadata").and_then(Value::as_object_mut) {
            meta.remove("managedFields");
        }
        let (namespace, name) = key_parts(value)?;
        let key: Arc<str> = match namespace {
            Some(ns) => format!("{ns}/{name}").into(),
            None => name.into(),
        };
        let name_start = namespace.map_or(0, |ns| ns.len() + 1);
        let meta = &value["metadata"];

        let mut text = String::new();
        let mut push = |s: &str| -> Result<Span> {
            let span = Span { start: to_u32(text.len())?, len: to_u32(s.len())? };
            text.push_str(s);
            Ok(span)
        };
        let uid = push(str_field(meta, "uid"))?;
        let resource_version = push(str_field(meta, "resourceVersion"))?;
        let mut labels = Vec::new();
        if let Some(map) = meta.get("labels").and_then(Value::as_object) {
            for (k, v) in map {
                // Label values are strings; anything else is not a label a selector can match.
                if let Some(v) = v.as_str() {
                    labels.push((k.as_str(), v));
                }
            }
        }
        labels.sort_unstable();
        let labels = labels.into_iter().map(|(k, v)| Ok((push(k)?, push(v)?))).collect::<Result<Box<[_]>>>()?;
        let mut owners = Vec::new();
        for owner in meta.get("ownerReferences").and_then(Value::as_array).into_iter().flatten() {
            let field = |f| str_field(owner, f);
            owners.push(OwnerSpans {
                fields: [push(field("apiVersion"))?, push(field("kind"))?, push(field("name"))?, push(field("uid"))?],
                controller: owner.get("controller").and_then(Value::as_bool) == Some(true),
            });
        }
        let json = serde_json::to_string(&*value).map_err(|e| Error::InvalidObject(format!("{key}: cannot serialise: {e}")))?;
        Ok(Self {
            json: Body::new(json, dict),
            name_start: to_u32(name_start)?,
            key,
            text: text.into_boxed_str(),
            uid,
            resource_version,
            labels,
            owners: owners.into_boxed_slice(),
            generation: meta.get("generation").and_then(Value::as_i64),
            deleting: !meta.get("deletionTimestamp").unwrap_or(&Value::Null).is_null(),
        })
    }

    /// The object's JSON (compact, without `metadata.managedFields`): borrowed, or decompressed
    /// when the kind's dictionary packed it. Only a corrupted frame makes this an error.
    pub fn json(&self) -> Result<Cow<'_, str>> {
        self.json.text(&self.key)
    }

    /// Length of [`json`](Self::json) in bytes, without decompressing it.
    pub fn json_len(&self) -> usize {
        self.json.len()
    }

    /// True if the JSON is kept compressed with the kind's dictionary.
    pub fn is_packed(&self) -> bool {
        self.json.is_packed()
    }

    /// Heap bytes the JSON takes in the cache (the compressed frame when packed).
    pub fn stored_json_bytes(&self) -> usize {
        self.json.stored_bytes()
    }

    /// The object's JSON parsed again (`Value::Null` if it somehow does not parse).
    pub fn value(&self) -> Value {
        self.json().ok().and_then(|j| serde_json::from_str(&j).ok()).unwrap_or(Value::Null)
    }

    /// The same object with its JSON compressed with `dict`; None if it already is packed or
    /// compressing saves nothing.
    pub(super) fn packed(&self, dict: &Arc<Dictionary>) -> Option<Self> {
        let Body::Plain(text) = &self.json else { return None };
        Some(Self {
            json: Body::pack(text, dict)?,
            key: self.key.clone(),
            name_start: self.name_start,
            text: self.text.clone(),
            uid: self.uid,
            resource_version: self.resource_version,
            labels: self.labels.clone(),
            owners: self.owners.clone(),
            generation: self.generation,
            deleting: self.deleting,
        })
    }

    /// The object deserialised into `T`.
    pub fn parse<T: DeserializeOwned>(&self) -> Result<T> {
        serde_json::from_str(&self.json()?).map_err(|e| {
            let ty = std::any::type_name::<T>();
            Error::InvalidObject(format!("{}: does not decode as {ty}: {e}", self.key))
        })
    }

    /// `namespace/name`, or `name` for cluster-scoped objects (client-go's key format).
    pub fn key(&self) -> &str {
        &self.key
    }

    /// The key as the shared string the store indexes by.
    pub(crate) fn key_arc(&self) -> &Arc<str> {
        &self.key
    }

    /// `metadata.namespace`; None for cluster-scoped objects.
    pub fn namespace(&self) -> Option<&str> {
        let start = self.name_start as usize;
        (start > 0).then(|| self.key.get(..start - 1).unwrap_or_default())
    }

    /// `metadata.name`.
    pub fn name(&self) -> &str {
        self.key.get(self.name_start as usize..).unwrap_or_default()
    }

    /// `metadata.uid` (empty if the object has none, e.g. one made up for a test).
    pub fn uid(&self) -> &str {
        self.span(self.uid)
    }

    /// `metadata.resourceVersion` (empty if the object has none).
    pub fn resource_version(&self) -> &str {
        self.span(self.resource_version)
    }

    /// `metadata.generation`, if the object has one.
    pub fn generation(&self) -> Option<i64> {
        self.generation
    }

    /// True when `metadata.deletionTimestamp` is set: the object is being deleted.
    pub fn is_deleting(&self) -> bool {
        self.deleting
    }

    /// The value of label `key`.
    pub fn label(&self, key: &str) -> Option<&str> {
        let i = self.labels.binary_search_by(|(k, _)| self.span(*k).cmp(key)).ok()?;
        self.labels.get(i).map(|(_, v)| self.span(*v))
    }

    /// All labels, sorted by key.
    pub fn labels(&self) -> impl Iterator<Item = (&str, &str)> {
        self.labels.iter().map(|(k, v)| (self.span(*k), self.span(*v)))
    }

    /// All owner references, in the object's order.
    pub fn owners(&self) -> impl Iterator<Item = OwnerRef<'_>> {
        self.owners.iter().map(|o| {
            let [api_version, kind, name, uid] = o.fields.map(|s| self.span(s));
            OwnerRef { api_version, kind, name, uid, controller: o.controller }
        })
    }

    /// The owner reference with `controller: true`, if any.
    pub fn controller_owner(&self) -> Option<OwnerRef<'_>> {
        self.owners().find(|o| o.controller)
    }

    /// UIDs of all owners.
    #[cfg(test)]
    fn owner_uids(&self) -> impl Iterator<Item = &str> {
        self.owners().map(|o| o.uid)
    }

    /// Heap bytes this object owns, without allocator overhead (for tests' orientation).
    #[cfg(test)]
    pub(super) fn approx_heap_bytes(&self) -> usize {
        use std::mem::size_of;
        size_of::<Self>()
            + self.json.stored_bytes()
            + self.key.len()
            + 2 * size_of::<usize>()
            + self.text.len()
            + self.labels.len() * size_of::<(Span, Span)>()
            + self.owners.len() * size_of::<OwnerSpans>()
    }

    fn span(&self, s: Span) -> &str {
        let start = s.start as usize;
        self.text.get(start..start + s.len as usize).unwrap_or_default()
    }
}

impl fmt::Debug for CachedObject {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CachedObject").field("key", &self.key()).field("resource_version", &self.resource_version()).finish_non_exhaustive()
    }
}

/// `(namespace, name)` of an object's JSON; an empty namespace counts as none.
pub(super) fn key_parts(value: &Value) -> Result<(Option<&str>, &str)> {
    let Some(meta) = value.as_object().and_then(|o| o.get("metadata")) else {
        return Err(Error::InvalidObject(match value.is_object() {
            true => "metadata is missing".into(),
            false => "not a JSON object".into(),
        }));
    };
    let name = match meta.get("name") {
        Some(Value::String(n)) if !n.is_empty() => n.as_str(),
        Some(Value::String(_)) => {
            return Err(Error::InvalidObject("metadata.name is empty".into()));
        }
        Some(_) => return Err(Error::InvalidObject("metadata.name is not a string".into())),
        None => return Err(Error::InvalidObject("metadata.name is missing".into())),
    };
    let namespace = meta.get("namespace").and_then(Value::as_str).filter(|ns| !ns.is_empty());
    Ok((namespace, name))
}

/// A string field of a JSON object, or "" if absent or not a string.
pub(super) fn str_field<'a>(v: &'a Value, field: &str) -> &'a str {
    v.get(field).and_then(Value::as_str).unwrap_or_default()
}

fn to_u32(n: usize) -> Result<u32> {
    u32::try_from(n).map_err(|_| Error::InvalidObject("metadata too large (over 4 GiB)".into()))
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn pod() -> Value {
        json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {
                "name": "web-1", "namespace": "prod", "uid": "u-1", "resourceVersion": "42",
                "generation": 3,
                "labels": {"tier": "front", "app": "web"},
                "managedFields": [{"manager": "kubectl", "operation": "Apply"}],
                "ownerReferences": [
                    {"apiVersion": "v1", "kind": "Thing", "name": "t", "uid": "u-t"},
                    {"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "web", "uid": "u-rs",
                     "controller": true}
                ]
            },
            "spec": {"nodeName": "n1"}
        })
    }

    #[test]
    fn strips_managed_fields_and_keeps_the_rest_of_the_json() {
        let obj = CachedObject::from_value(pod()).unwrap();
        let json = obj.json().unwrap();
        assert!(!json.contains("managedFields"));
        assert!(!json.contains("kubectl"));
        assert!(!json.contains('\n'), "compact JSON");
        assert_eq!(obj.json_len(), json.len());
        let mut expected = pod();
        expected["metadata"].as_object_mut().unwrap().remove("managedFields");
        assert_eq!(obj.value(), expected);
        #[derive(serde::Deserialize)]
        struct Spec {
            #[serde(rename = "nodeName")]
            node_name: String,
        }
        #[derive(serde::Deserialize)]
        struct P {
            spec: Spec,
        }
        assert_eq!(obj.parse::<P>().unwrap().spec.node_name, "n1");
        let err = obj.parse::<Vec<u8>>().unwrap_err();
        assert!(matches!(&err, Error::InvalidObject(m) if m.contains("prod/web-1")), "{err}");
    }

    #[test]
    fn parses_metadata() {
        let obj = CachedObject::from_value(pod()).unwrap();
        assert_eq!(obj.key(), "prod/web-1");
        assert_eq!(obj.namespace(), Some("prod"));
        assert_eq!(obj.name(), "web-1");
        assert_eq!(obj.uid(), "u-1");
        assert_eq!(obj.resource_version(), "42");
        assert_eq!(obj.generation(), Some(3));
        assert!(!obj.is_deleting());
        assert_eq!(obj.label("app"), Some("web"));
        assert_eq!(obj.label("tier"), Some("front"));
        assert_eq!(obj.label("missing"), None);
        assert_eq!(obj.labels().collect::<Vec<_>>(), [("app", "web"), ("tier", "front")]);
        let ctl = obj.controller_owner().unwrap();
        assert_eq!((ctl.api_version, ctl.kind, ctl.name, ctl.uid), ("apps/v1", "ReplicaSet", "web", "u-rs"));
        assert_eq!(ctl.kind_ref(), crate::kinds::KindRef::new("apps/v1", "ReplicaSet"));
        assert_eq!(obj.owner_uids().collect::<Vec<_>>(), ["u-t", "u-rs"]);
    }

    #[test]
    fn cluster_scoped_and_minimal_objects() {
        let v = json!({"metadata": {"name": "team-a", "namespace": "",
                                    "deletionTimestamp": "2024-01-01T00:00:00Z"}});
        let obj = CachedObject::from_value(v).unwrap();
        assert_eq!(obj.key(), "team-a");
        assert_eq!(obj.namespace(), None);
        assert_eq!(obj.name(), "team-a");
        assert_eq!((obj.uid(), obj.resource_version(), obj.generation()), ("", "", None));
        assert!(obj.is_deleting());
        assert!(obj.controller_owner().is_none());
        assert_eq!(obj.labels().count(), 0);
    }

    #[test]
    fn rejects_objects_without_a_name() {
        let cases = [
            (json!({"metadata": {"namespace": "a"}}), "metadata.name is missing"),
            (json!({"metadata": {"name": ""}}), "metadata.name is empty"),
            (json!({"metadata": {"name": 3}}), "metadata.name is not a string"),
            (json!({"spec": {}}), "metadata is missing"),
            (json!([1]), "not a JSON object"),
        ];
        for (v, msg) in cases {
            assert_eq!(CachedObject::from_value(v).unwrap_err(), Error::InvalidObject(msg.into()));
        }
    }
}
