//! What in a plugin ConfigMap counts for loading it: its data (a change is a new version), its
//! annotations other than the host's (a change retries a refused version), and nothing else —
//! so the host's own status writes load nothing and look nothing up.

use k8s_openapi::api::core::v1::ConfigMap;

use super::source;
use super::status::HOST_ANNOTATIONS;
use crate::cache::Change;

/// Digest of what defines a plugin in the ConfigMap (data + binaryData; not metadata, so the
/// status annotations the host writes do not make a new version).
pub(super) fn payload_digest(cm: &ConfigMap) -> String {
    let data = serde_json::to_vec(&cm.data).unwrap_or_default();
    let binary = serde_json::to_vec(&cm.binary_data).unwrap_or_default();
    source::sha256(&[&data, &binary])
}

/// Digest of the ConfigMap's annotations other than the host's own (so `kubectl annotate` tries
/// a refused plugin again, and the status the host writes does not).
pub(super) fn annotations_digest(cm: &ConfigMap) -> String {
    let mut annotations = cm.metadata.annotations.clone().unwrap_or_default();
    annotations.retain(|k, _| !HOST_ANNOTATIONS.contains(&k.as_str()));
    source::sha256(&[&serde_json::to_vec(&annotations).unwrap_or_default()])
}

/// Whether `change` of a plugin ConfigMap touched nothing but the host's own annotations (and
/// the metadata every write changes): nothing to load again.
pub(super) fn only_host_annotations(change: &Change) -> bool {
    let Change::Updated { old, new } = change else { return false };
    if old.uid() != new.uid() {
        return false;
    }
    match (old.parse::<ConfigMap>(), new.parse::<ConfigMap>()) {
        (Ok(old), Ok(new)) => {
            old.metadata.labels == new.metadata.labels
                && payload_digest(&old) == payload_digest(&new)
                && annotations_digest(&old) == annotations_digest(&new)
        }
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use serde_json::json;

    use super::*;
    use crate::cache::CachedObject;

    fn cm(rv: &str, data: &str, annotations: serde_json::Value) -> Arc<CachedObject> {
        let v = json!({"apiVersion": "v1", "kind": "ConfigMap",
                       "metadata": {"name": "p", "namespace": "ns", "uid": "u", "resourceVersion": rv,
                                    "labels": {"wasmloop.dev/plugin": "true"}, "annotations": annotations},
                       "data": {"plugin.yaml": data}});
        Arc::new(CachedObject::from_value(v).unwrap())
    }

    #[test]
    fn the_hosts_status_write_is_no_change_and_anything_else_is() {
        let old = cm("1", "name: p", json!({}));
        let status = cm("2", "name: p", json!({"wasmloop.dev/state": "Loaded", "wasmloop.dev/last-good": "{}"}));
        assert!(only_host_annotations(&Change::Updated { old: old.clone(), new: status.clone() }));
        let annotated = cm("3", "name: p", json!({"wasmloop.dev/state": "Loaded", "retry": "1"}));
        assert!(!only_host_annotations(&Change::Updated { old: status, new: annotated }), "kubectl annotate retries");
        let edited = cm("4", "name: q", json!({}));
        assert!(!only_host_annotations(&Change::Updated { old: old.clone(), new: edited }));
        assert!(!only_host_annotations(&Change::Added(old)));
    }
}
