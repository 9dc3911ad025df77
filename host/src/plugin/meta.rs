//! Metadata reads (`cache.get-meta`, `list-meta`, `by-index-meta`): an object's metadata and the
//! plugin's declared fields, handed to the guest as WIT records so it parses no JSON.

use serde_json::Value;
use wasmloop_model::field::field;

use super::bindings::types as wit;
use crate::cache::CachedObject;

/// The metadata of `o` with the values of `paths` (declared fields of its kind).
pub(crate) fn object_meta(o: &CachedObject, paths: &[&str]) -> wit::ObjectMeta {
    let value: Value = o.value();
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
        fields: paths.iter().map(|p| field(&value, p).map(std::string::ToString::to_string)).collect(),
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
}
