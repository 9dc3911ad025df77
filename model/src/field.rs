//! Field paths: the dotted paths (`status.phase`, `spec.containers.0.image`,
//! `metadata.labels.app.kubernetes.io/name`) a plugin declares for metadata reads, resolved the
//! same way by the host and by the SDK's test fake.

use serde_json::Value;

/// The value at `path` in `object`: `metadata.labels.<key>` / `labels.<key>` and
/// `metadata.annotations.<key>` take the rest of the path as one key (keys contain dots); a
/// numeric segment indexes a list. Null counts as absent.
pub fn field<'a>(object: &'a Value, path: &str) -> Option<&'a Value> {
    for (prefix, map) in [("metadata.labels.", "labels"), ("labels.", "labels"), ("metadata.annotations.", "annotations")] {
        if let Some(key) = path.strip_prefix(prefix) {
            return object.get("metadata")?.get(map)?.get(key).filter(|v| !v.is_null());
        }
    }
    let mut at = object;
    for segment in path.split('.') {
        at = match at {
            Value::Array(items) => items.get(segment.parse::<usize>().ok()?)?,
            other => other.get(segment)?,
        };
    }
    (!at.is_null()).then_some(at)
}

/// The top-level field of an object that [`field`] reads `path` under (`labels.<key>` is in
/// `metadata`): a reader may parse that subtree alone.
pub fn top_level(path: &str) -> &str {
    if path.starts_with("labels.") { "metadata" } else { path.split('.').next().unwrap_or(path) }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_path_is_read_under_its_top_level_field() {
        let pod = json!({"metadata": {"labels": {"app": "web"}, "annotations": {"a.io/x": "1"}}, "spec": {"nodeName": "n1"}});
        for path in ["spec.nodeName", "labels.app", "metadata.labels.app", "metadata.annotations.a.io/x", "status"] {
            let top = top_level(path);
            let only: Value = json!({top: pod.get(top).cloned().unwrap_or(Value::Null)});
            assert_eq!(field(&only, path), field(&pod, path), "{path} under {top}");
        }
        assert_eq!((top_level("labels.app"), top_level("spec.containers.0.image"), top_level("data")), ("metadata", "spec", "data"));
    }

    #[test]
    fn paths_reach_fields_list_elements_and_dotted_keys() {
        let pod = json!({
            "metadata": {"labels": {"app.kubernetes.io/name": "web"}, "annotations": {"a.io/x": "1"}},
            "spec": {"nodeName": "n1", "containers": [{"image": "nginx"}], "gone": null},
        });
        assert_eq!(field(&pod, "spec.nodeName"), Some(&json!("n1")));
        assert_eq!(field(&pod, "spec.containers.0.image"), Some(&json!("nginx")));
        assert_eq!(field(&pod, "spec.containers.1.image"), None);
        assert_eq!(field(&pod, "spec.containers.x"), None);
        assert_eq!(field(&pod, "metadata.labels.app.kubernetes.io/name"), Some(&json!("web")));
        assert_eq!(field(&pod, "labels.app.kubernetes.io/name"), Some(&json!("web")));
        assert_eq!(field(&pod, "metadata.annotations.a.io/x"), Some(&json!("1")));
        assert_eq!(field(&pod, "spec.gone"), None);
        assert_eq!(field(&pod, "spec"), pod.get("spec"));
    }
}
