//! Metadata reads (`cache.get-meta`, `list-meta`, `by-index-meta`): an object's metadata and the
//! plugin's declared fields, handed to the guest as WIT records so it parses no JSON.
//!
//! The host does not parse the object whole either: name, namespace, uid, resourceVersion,
//! generation and labels come from what the cache extracted when it stored the object; one
//! borrowing pass over the JSON text skips every top-level value but `metadata` and the subtrees
//! the declared fields are in. An object that pass cannot read (an escaped key, a field of an
//! unexpected type) is read the slow way, whole, with the same result.

use std::borrow::Cow;
use std::collections::BTreeMap;

use serde::Deserialize;
use serde_json::value::RawValue;
use serde_json::{Map, Value};
use wasmloop_model::field::{field, top_level};

use super::bindings::types as wit;
use crate::cache::CachedObject;

/// The metadata of `o` with the values of `paths` (declared fields of its kind).
pub(crate) fn object_meta(o: &CachedObject, paths: &[&str]) -> wit::ObjectMeta {
    let text = o.json().unwrap_or_default();
    borrowed(o, &text, paths).unwrap_or_else(|| whole(o, &serde_json::from_str(&text).unwrap_or(Value::Null), paths))
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

/// The record from one borrowing pass over `text`; `None` where that pass cannot read it.
fn borrowed(o: &CachedObject, text: &str, paths: &[&str]) -> Option<wit::ObjectMeta> {
    let top: BTreeMap<&str, &RawValue> = serde_json::from_str(text).ok()?;
    let meta: MetaText<'_> = serde_json::from_str(top.get("metadata")?.get()).ok()?;
    let owned = |s: &Option<Cow<'_, str>>| s.as_deref().unwrap_or_default().to_owned();
    let fields = if paths.is_empty() {
        Vec::new()
    } else {
        // Only the top-level subtrees the paths start in, parsed; then the one path rule.
        let mut partial = Map::new();
        for path in paths {
            let first = top_level(path);
            if let (false, Some(raw)) = (partial.contains_key(first), top.get(first)) {
                partial.insert(first.to_owned(), serde_json::from_str(raw.get()).ok()?);
            }
        }
        let partial = Value::Object(partial);
        paths.iter().map(|p| field(&partial, p).map(ToString::to_string)).collect()
    };
    Some(wit::ObjectMeta {
        namespace: o.namespace().map(str::to_owned),
        name: o.name().to_owned(),
        uid: o.uid().to_owned(),
        resource_version: o.resource_version().to_owned(),
        generation: o.generation(),
        creation_timestamp: meta.creation_timestamp.map(Cow::into_owned),
        deletion_timestamp: meta.deletion_timestamp.map(Cow::into_owned),
        labels: o.labels().map(|(k, v)| (k.to_owned(), v.to_owned())).collect(),
        annotations: meta.annotations.unwrap_or_default().into_iter().filter_map(|(k, v)| Some((k.into_owned(), string(v)?))).collect(),
        owner_references: meta
            .owner_references
            .unwrap_or_default()
            .iter()
            .map(|r| wit::OwnerReference {
                api_version: owned(&r.api_version),
                kind: owned(&r.kind),
                name: owned(&r.name),
                uid: owned(&r.uid),
                controller: r.controller.unwrap_or(false),
                block_owner_deletion: r.block_owner_deletion.unwrap_or(false),
            })
            .collect(),
        finalizers: meta.finalizers.unwrap_or_default().into_iter().filter_map(string).collect(),
        fields,
    })
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
        ];
        let paths = [
            "status.phase",
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
            for paths in [&paths[..], &[]] {
                let fast = object_meta(&cached, paths);
                let slow = whole(&cached, &cached.value(), paths);
                assert_eq!(format!("{fast:?}"), format!("{slow:?}"), "{object}");
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
