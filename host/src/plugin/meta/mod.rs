//! Metadata reads (`cache.get-meta`, `list-meta`, `by-index-meta`): an object's metadata and the
//! plugin's declared fields, handed to the guest as WIT records so it parses no JSON; and their
//! packed form (`list-meta-packed`, `by-index-meta-packed`, contract 0.3.1): the same content in
//! one `wasmloop_model::packed` buffer, built without the records.
//!
//! The host does not parse the object whole either: name, namespace, uid, resourceVersion,
//! generation and labels come from what the cache extracted when it stored the object; one
//! borrowing pass over the JSON text (`scan`) deserializes `metadata`, follows the declared
//! paths and skips everything else. Paths that pass cannot follow (under `metadata`, one extending
//! another) are read from their top-level subtree parsed whole; an object neither can read (an
//! escaped key, a field of an unexpected type) is read the slow way, whole, with the same result.

mod scan;

use std::borrow::Cow;
use std::collections::BTreeMap;

use serde::Deserialize;
use serde_json::value::RawValue;
use serde_json::{Map, Value};
use wasmloop_model::field::{field, top_level};
use wasmloop_model::packed;

use super::bindings::types as wit;
use crate::cache::CachedObject;
use scan::Plan;

/// The metadata of `o` with the values of `paths` (declared fields of its kind).
pub(crate) fn object_meta(o: &CachedObject, paths: &[&str]) -> wit::ObjectMeta {
    let text = o.json().unwrap_or_default();
    Parts::read(o, &text, paths, Plan::new(paths).as_ref())
        .map(Parts::record)
        .unwrap_or_else(|| whole(o, &serde_json::from_str(&text).unwrap_or(Value::Null), paths))
}

/// The packed buffer (`wasmloop_model::packed`) of `objects` with the values of `paths`: the
/// same content as their [`object_meta`] records, without building them.
pub(crate) fn packed_objects(objects: &[&CachedObject], paths: &[&str]) -> Vec<u8> {
    let texts: Vec<Cow<'_, str>> = objects.iter().map(|o| o.json().unwrap_or_default()).collect();
    let plan = Plan::new(paths);
    let read: Vec<Read<'_>> = objects
        .iter()
        .zip(&texts)
        .map(|(o, text)| match Parts::read(o, text, paths, plan.as_ref()) {
            Some(parts) => Read::Parts(parts),
            None => Read::Record(whole(o, &serde_json::from_str(text).unwrap_or(Value::Null), paths)),
        })
        .collect();
    packed::encode(&read.iter().map(Read::view).collect::<Vec<_>>())
}

/// `records` in the one buffer of a packed read (`wasmloop_model::packed`).
pub(crate) fn packed(records: &[wit::ObjectMeta]) -> Vec<u8> {
    packed::encode(&records.iter().map(packed_view).collect::<Vec<_>>())
}

/// One record as the packed format's borrowed view.
fn packed_view(m: &wit::ObjectMeta) -> packed::Meta<'_> {
    packed::Meta {
        namespace: m.namespace.as_deref(),
        name: &m.name,
        uid: &m.uid,
        resource_version: &m.resource_version,
        generation: m.generation,
        creation_timestamp: m.creation_timestamp.as_deref(),
        deletion_timestamp: m.deletion_timestamp.as_deref(),
        labels: m.labels.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect(),
        annotations: m.annotations.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect(),
        owner_references: m
            .owner_references
            .iter()
            .map(|o| packed::OwnerRef {
                api_version: &o.api_version,
                kind: &o.kind,
                name: &o.name,
                uid: &o.uid,
                controller: o.controller,
                block_owner_deletion: o.block_owner_deletion,
            })
            .collect(),
        finalizers: m.finalizers.iter().map(String::as_str).collect(),
        fields: m.fields.iter().map(Option::as_deref).collect(),
    }
}

/// The record holding what `m` holds (the inverse of [`packed_view`]).
fn record_of(m: &packed::Meta<'_>) -> wit::ObjectMeta {
    let pairs = |p: &[(&str, &str)]| p.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned())).collect();
    wit::ObjectMeta {
        namespace: m.namespace.map(str::to_owned),
        name: m.name.to_owned(),
        uid: m.uid.to_owned(),
        resource_version: m.resource_version.to_owned(),
        generation: m.generation,
        creation_timestamp: m.creation_timestamp.map(str::to_owned),
        deletion_timestamp: m.deletion_timestamp.map(str::to_owned),
        labels: pairs(&m.labels),
        annotations: pairs(&m.annotations),
        owner_references: m
            .owner_references
            .iter()
            .map(|r| wit::OwnerReference {
                api_version: r.api_version.to_owned(),
                kind: r.kind.to_owned(),
                name: r.name.to_owned(),
                uid: r.uid.to_owned(),
                controller: r.controller,
                block_owner_deletion: r.block_owner_deletion,
            })
            .collect(),
        finalizers: m.finalizers.iter().map(|f| (*f).to_owned()).collect(),
        fields: m.fields.iter().map(|f| f.map(str::to_owned)).collect(),
    }
}

/// An object read for a packed buffer: borrowed where the borrowing pass can, a record where not.
enum Read<'a> {
    Parts(Parts<'a>),
    Record(wit::ObjectMeta),
}

impl Read<'_> {
    fn view(&self) -> packed::Meta<'_> {
        match self {
            Read::Parts(p) => p.view(),
            Read::Record(r) => packed_view(r),
        }
    }
}

/// The fields of `metadata` the cache does not keep apart, borrowed from the JSON text.
#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct MetaText<'a> {
    #[serde(borrow, default)]
    creation_timestamp: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    deletion_timestamp: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    annotations: Option<BTreeMap<Cow<'a, str>, &'a RawValue>>,
    #[serde(borrow, default)]
    owner_references: Option<Vec<OwnerText<'a>>>,
    #[serde(borrow, default)]
    finalizers: Option<Vec<&'a RawValue>>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct OwnerText<'a> {
    #[serde(borrow, default)]
    api_version: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    kind: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    name: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    uid: Option<Cow<'a, str>>,
    #[serde(default)]
    controller: Option<bool>,
    #[serde(default)]
    block_owner_deletion: Option<bool>,
}

/// A JSON string's text; `None` for any other value (as `Value::as_str`).
fn string(raw: &RawValue) -> Option<String> {
    serde_json::from_str::<Cow<'_, str>>(raw.get()).ok().map(Cow::into_owned)
}

/// The record from one borrowing pass over `text` without a one-pass plan; `None` where that
/// pass cannot read it.
#[cfg(test)]
fn borrowed(o: &CachedObject, text: &str, paths: &[&str]) -> Option<wit::ObjectMeta> {
    Parts::read(o, text, paths, None).map(Parts::record)
}

/// What one borrowing pass over an object's JSON text reads beyond what the cache keeps apart.
struct Parts<'a> {
    o: &'a CachedObject,
    meta: MetaText<'a>,
    /// Annotations with string values.
    annotations: Vec<(Cow<'a, str>, String)>,
    /// Finalizers that are strings.
    finalizers: Vec<String>,
    fields: Vec<Option<String>>,
}

impl<'a> Parts<'a> {
    /// One pass over `text` where `plan` (for `paths`) can follow every path, else one pass
    /// for the top-level values and a parse of each subtree a path starts in.
    fn read(o: &'a CachedObject, text: &'a str, paths: &[&str], plan: Option<&Plan<'_>>) -> Option<Self> {
        let scanned = plan.and_then(|plan| plan.scan::<MetaText<'a>>(text));
        let (mut meta, fields) = match scanned {
            Some((metadata, found)) => (metadata?, found.into_iter().map(|raw| raw.map_or(Some(None), leaf)).collect::<Option<_>>()?),
            None => {
                let top: BTreeMap<&str, &RawValue> = serde_json::from_str(text).ok()?;
                (serde_json::from_str(top.get("metadata")?.get()).ok()?, fields(&top, paths)?)
            }
        };
        let annotations = meta.annotations.take().unwrap_or_default().into_iter().filter_map(|(k, v)| Some((k, string(v)?))).collect();
        let finalizers = meta.finalizers.take().unwrap_or_default().into_iter().filter_map(string).collect();
        Some(Parts { o, meta, annotations, finalizers, fields })
    }

    fn record(self) -> wit::ObjectMeta {
        record_of(&self.view())
    }

    /// What the object's record holds, borrowed (a packed buffer's view of it).
    fn view(&self) -> packed::Meta<'_> {
        fn text<'s>(s: &'s Option<Cow<'_, str>>) -> &'s str {
            s.as_deref().unwrap_or_default()
        }
        packed::Meta {
            namespace: self.o.namespace(),
            name: self.o.name(),
            uid: self.o.uid(),
            resource_version: self.o.resource_version(),
            generation: self.o.generation(),
            creation_timestamp: self.meta.creation_timestamp.as_deref(),
            deletion_timestamp: self.meta.deletion_timestamp.as_deref(),
            labels: self.o.labels().collect(),
            annotations: self.annotations.iter().map(|(k, v)| (k.as_ref(), v.as_str())).collect(),
            owner_references: self
                .meta
                .owner_references
                .iter()
                .flatten()
                .map(|r| packed::OwnerRef {
                    api_version: text(&r.api_version),
                    kind: text(&r.kind),
                    name: text(&r.name),
                    uid: text(&r.uid),
                    controller: r.controller.unwrap_or(false),
                    block_owner_deletion: r.block_owner_deletion.unwrap_or(false),
                })
                .collect(),
            finalizers: self.finalizers.iter().map(String::as_str).collect(),
            fields: self.fields.iter().map(Option::as_deref).collect(),
        }
    }
}

/// The values of `paths` from an object's top-level raw values: each subtree a path starts in
/// parsed whole, then the one path rule; `None` where a subtree does not parse.
fn fields(top: &BTreeMap<&str, &RawValue>, paths: &[&str]) -> Option<Vec<Option<String>>> {
    if paths.is_empty() {
        return Some(Vec::new());
    }
    let mut partial = Map::new();
    for path in paths {
        let first = top_level(path);
        if let (false, Some(raw)) = (partial.contains_key(first), top.get(first)) {
            partial.insert(first.to_owned(), serde_json::from_str(raw.get()).ok()?);
        }
    }
    let partial = Value::Object(partial);
    Some(paths.iter().map(|p| field(&partial, p).map(ToString::to_string)).collect())
}

/// A field's value as `field` gives it (null is absent), written as the whole parse writes it;
/// `None` where it does not parse.
fn leaf(raw: &RawValue) -> Option<Option<String>> {
    let text = raw.get();
    if text.len() >= 2 && text.starts_with('"') && !text.contains('\\') {
        // A string without escapes is written as it is.
        return Some(Some(text.to_owned()));
    }
    let value: Value = serde_json::from_str(text).ok()?;
    Some((!value.is_null()).then(|| value.to_string()))
}

/// The record from the object parsed whole.
fn whole(o: &CachedObject, value: &Value, paths: &[&str]) -> wit::ObjectMeta {
    let meta = &value["metadata"];
    let text = |v: &Value| v.as_str().map(str::to_owned);
    let pairs = |field: &str| -> Vec<(String, String)> {
        meta.get(field)
            .and_then(Value::as_object)
            .map(|m| m.iter().filter_map(|(k, v)| Some((k.clone(), v.as_str()?.to_owned()))).collect())
            .unwrap_or_default()
    };
    let owner_references = meta
        .get("ownerReferences")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .map(|r| {
            let s = |f: &str| r.get(f).and_then(Value::as_str).unwrap_or_default().to_owned();
            let b = |f: &str| r.get(f).and_then(Value::as_bool).unwrap_or(false);
            wit::OwnerReference {
                api_version: s("apiVersion"),
                kind: s("kind"),
                name: s("name"),
                uid: s("uid"),
                controller: b("controller"),
                block_owner_deletion: b("blockOwnerDeletion"),
            }
        })
        .collect();
    wit::ObjectMeta {
        namespace: o.namespace().map(str::to_owned),
        name: o.name().to_owned(),
        uid: o.uid().to_owned(),
        resource_version: o.resource_version().to_owned(),
        generation: o.generation(),
        creation_timestamp: text(&meta["creationTimestamp"]),
        deletion_timestamp: text(&meta["deletionTimestamp"]),
        labels: o.labels().map(|(k, v)| (k.to_owned(), v.to_owned())).collect(),
        annotations: pairs("annotations"),
        owner_references,
        finalizers: meta.get("finalizers").and_then(Value::as_array).map(|f| f.iter().filter_map(text).collect()).unwrap_or_default(),
        fields: paths.iter().map(|p| field(value, p).map(std::string::ToString::to_string)).collect(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn metadata_and_declared_fields_are_read() {
        let pod = json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {
                "name": "web-1", "namespace": "shop", "uid": "u1", "resourceVersion": "7",
                "creationTimestamp": "2026-01-01T00:00:00Z", "deletionTimestamp": "2026-01-02T00:00:00Z",
                "labels": {"app": "web"}, "annotations": {"a.io/x": "1"}, "finalizers": ["f/x"],
                "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "web", "uid": "rs", "controller": true}],
            },
            "spec": {"nodeName": "n1", "containers": [{"image": "nginx"}]},
            "status": {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]},
        });
        let cached = CachedObject::from_value(pod).unwrap();
        let m = object_meta(
            &cached,
            &["status.phase", "spec.containers.0.image", "status.conditions", "spec.missing", "metadata.annotations.a.io/x"],
        );
        assert_eq!(
            (m.name.as_str(), m.namespace.as_deref(), m.uid.as_str(), m.resource_version.as_str()),
            ("web-1", Some("shop"), "u1", "7")
        );
        assert_eq!(m.deletion_timestamp.as_deref(), Some("2026-01-02T00:00:00Z"));
        assert_eq!(m.labels, vec![("app".to_owned(), "web".to_owned())]);
        assert_eq!(m.finalizers, vec!["f/x".to_owned()]);
        assert!(m.owner_references[0].controller && !m.owner_references[0].block_owner_deletion);
        assert_eq!(
            m.fields,
            vec![
                Some("\"Running\"".to_owned()),
                Some("\"nginx\"".to_owned()),
                Some(r#"[{"status":"True","type":"Ready"}]"#.to_owned()),
                None,
                Some("\"1\"".to_owned()),
            ]
        );
    }

    /// The borrowing pass and the whole parse give the same record, and objects the first
    /// cannot read fall back to the second.
    #[test]
    fn the_borrowing_pass_reads_what_the_whole_parse_reads() {
        let objects = [
            json!({"apiVersion": "v1", "kind": "Pod",
                "metadata": {"name": "a", "namespace": "shop", "uid": "u1", "resourceVersion": "3", "generation": 2,
                    "creationTimestamp": "2026-01-01T00:00:00Z",
                    "labels": {"app": "web", "tier": "front"},
                    "annotations": {"a.io/quote\"d": "v\n2", "n": 5, "plain": "x"},
                    "finalizers": ["f/x", 7, "f/y"],
                    "ownerReferences": [
                        {"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "web", "uid": "rs", "controller": true, "blockOwnerDeletion": true},
                        {"apiVersion": "v1", "kind": "ConfigMap", "name": "c", "uid": "cm"}]},
                "spec": {"nodeName": "n1", "containers": [{"image": "nginx"}]},
                "status": {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]}}),
            // A timestamp that is not a string: the borrowing pass refuses, the whole parse reads none.
            json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "b", "uid": "u2", "creationTimestamp": 5}}),
            // Nulls, and no metadata beyond the name.
            json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c", "annotations": null, "finalizers": null}, "data": null}),
            // An escaped key along a path (read the slow way), nulls and scalars along paths.
            json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "d"},
                "spec": {"a\"b": 1, "nodeName": null, "containers": [null, {"image": "x"}]},
                "status": {"phase": "Pending", "conditions": [{"type": "Ready", "status": "False", "reason": "a\u{0}b"}]}}),
        ];
        let paths = [
            "status.phase",
            "status.conditions",
            "status.conditions.0",
            "status.conditions.0.type",
            "status.conditions.x",
            "status.phase.x",
            "spec",
            "spec.containers.0.image",
            "status.conditions",
            "metadata.annotations.plain",
            "labels.app",
            "data",
            "spec.nope",
        ];
        for (i, object) in objects.into_iter().enumerate() {
            let cached = CachedObject::from_value(object.clone()).unwrap();
            assert_eq!(borrowed(&cached, &cached.json().unwrap(), &paths).is_some(), i != 1, "{object}");

            // Paths one pass can follow (the packed reads' usual case) and paths it cannot.
            let simple =
                ["status.phase", "status.conditions", "spec.containers.0.image", "spec.containers.1", "spec.nope", "data", "spec.nodeName"];
            assert_eq!((Plan::new(&paths).is_some(), Plan::new(&simple).is_some()), (false, true));
            for paths in [&paths[..], &simple, &[]] {
                let fast = object_meta(&cached, paths);
                let slow = whole(&cached, &cached.value(), paths);
                assert_eq!(format!("{fast:?}"), format!("{slow:?}"), "{object}");
                // The packed buffer read without records holds the same records.
                assert_eq!(packed_objects(&[&cached], paths), packed(&[slow]), "{object}");
            }
        }
        let refused =
            CachedObject::from_value(json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "b", "creationTimestamp": 5}}))
                .unwrap();
        assert!(borrowed(&refused, &refused.json().unwrap(), &[]).is_none());
        let read =
            CachedObject::from_value(json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "b", "annotations": {"k\"q": "v"}}}))
                .unwrap();
        let meta = borrowed(&read, &read.json().unwrap(), &["metadata.annotations.k\"q"]).expect("escaped keys are read");
        assert_eq!((meta.annotations, meta.fields), (vec![("k\"q".to_owned(), "v".to_owned())], vec![Some("\"v\"".to_owned())]));
    }
}
