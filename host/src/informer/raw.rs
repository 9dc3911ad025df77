//! [`RawObject`]: an object as the API server sent it, parsed once into the JSON tree the cache
//! is built from.
//!
//! kube's `DynamicObject` parses an object through `#[serde(flatten)]` (every field buffered,
//! then sorted into typed metadata and the rest) and the informer then serialised it back into
//! a tree: at 100 000 Pods, allocation alone was half of a relist's CPU. A `RawObject` is parsed
//! straight into a `serde_json::Value`, managedFields dropped on the way (the cache never keeps
//! them), and only the metadata kube-runtime's watcher and the informer read — name, namespace,
//! resourceVersion — is copied out typed.

use std::borrow::Cow;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::core::{ApiResource, DynamicResourceScope, Resource};
use serde::{Deserialize, Deserializer, Serialize, Serializer};
use serde_json::Value;

/// One object of a list or watch event: its JSON (without managedFields) and the identifying
/// part of its metadata.
#[derive(Clone, Debug)]
pub struct RawObject {
    /// `name`, `namespace` and `resourceVersion` only; every other field stays in `value`.
    pub metadata: ObjectMeta,
    /// The object as sent, without `metadata.managedFields`.
    pub value: Value,
}

impl<'de> Deserialize<'de> for RawObject {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let mut value = Value::deserialize(d)?;
        let meta = value.get_mut("metadata").and_then(Value::as_object_mut);
        let field = |f: &str| meta.as_ref().and_then(|m| m.get(f)).and_then(Value::as_str).map(str::to_owned);
        let metadata = ObjectMeta {
            name: field("name"),
            namespace: field("namespace"),
            resource_version: field("resourceVersion"),
            ..ObjectMeta::default()
        };
        if let Some(meta) = meta {
            meta.remove("managedFields");
        }
        Ok(Self { metadata, value })
    }
}

/// As received (kube needs `Serialize` for the write paths this type is never used on).
impl Serialize for RawObject {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        self.value.serialize(s)
    }
}

/// As `DynamicObject`: the kind comes from the `ApiResource` the `Api` was made with.
impl Resource for RawObject {
    type DynamicType = ApiResource;
    type Scope = DynamicResourceScope;

    fn group(dt: &ApiResource) -> Cow<'_, str> {
        dt.group.as_str().into()
    }

    fn version(dt: &ApiResource) -> Cow<'_, str> {
        dt.version.as_str().into()
    }

    fn kind(dt: &ApiResource) -> Cow<'_, str> {
        dt.kind.as_str().into()
    }

    fn api_version(dt: &ApiResource) -> Cow<'_, str> {
        dt.api_version.as_str().into()
    }

    fn plural(dt: &ApiResource) -> Cow<'_, str> {
        dt.plural.as_str().into()
    }

    fn meta(&self) -> &ObjectMeta {
        &self.metadata
    }

    fn meta_mut(&mut self) -> &mut ObjectMeta {
        &mut self.metadata
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn parses_once_keeps_identity_and_drops_managed_fields() {
        let o: RawObject = serde_json::from_value(json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "web-1", "namespace": "shop", "resourceVersion": "42", "labels": {"app": "web"},
                         "managedFields": [{"manager": "kubectl"}]},
            "spec": {"nodeName": "n1"}
        }))
        .unwrap();
        assert_eq!(o.metadata.name.as_deref(), Some("web-1"));
        assert_eq!(o.metadata.namespace.as_deref(), Some("shop"));
        assert_eq!(o.metadata.resource_version.as_deref(), Some("42"));
        assert_eq!(o.value["metadata"]["labels"]["app"], "web");
        assert_eq!(o.value["spec"]["nodeName"], "n1");
        assert!(o.value["metadata"].get("managedFields").is_none());
        assert_eq!(serde_json::to_value(&o).unwrap(), o.value);
    }

    #[test]
    fn an_object_without_metadata_parses_with_none() {
        let o: RawObject = serde_json::from_value(json!({"kind": "Pod"})).unwrap();
        assert_eq!(o.metadata.name, None);
    }

    #[test]
    fn a_watch_event_carries_a_raw_object() {
        let e: kube::core::WatchEvent<RawObject> =
            serde_json::from_str(r#"{"type":"ADDED","object":{"metadata":{"name":"a","resourceVersion":"7"},"data":{"k":"v"}}}"#).unwrap();
        let kube::core::WatchEvent::Added(o) = e else { panic!("not Added: {e:?}") };
        assert_eq!((o.metadata.name.as_deref(), o.value["data"]["k"].as_str()), (Some("a"), Some("v")));
    }
}
