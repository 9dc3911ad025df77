//! CustomResourceDefinitions on older API servers: why one is refused, and the same CRD in a form
//! they accept.
//!
//! The local control plane (`scripts/control-plane.sh`, `wasmloop dev --local`) is kube-apiserver
//! v1.20.2 built with a current Go. Built so, it reads an empty string that a CRD schema
//! validates as `null` (kubernetes/kubernetes#99804, fixed in v1.20.5 and v1.21): it refuses a
//! CRD whose schema has `default: ""` (which current controller-gen writes for every field
//! Kubernetes' own types mark `+default=""`, so any CRD embedding a Pod template has dozens), and
//! a custom resource with an empty-string field. Without those defaults, the keys of
//! `x-kubernetes-list-type: map` lists that had only them must be `required` (a rule of every
//! version).
//!
//! [`adapt_for_old_servers`] removes the empty-string defaults and makes such keys required: a
//! schema that accepts the same objects, except list-map entries without their key (which the
//! defaults filled in). [`explain_refusal`] turns the API server's refusal into what happened
//! and the fix. A current API server takes the CRD unchanged.

use serde_json::Value;

/// Why a CRD was refused and what to do, if the refusal is one of the known old-server ones.
/// `message` is the API server's message (a 422's, with its causes); `server` its version
/// (`v1.20.2`), if known.
pub fn explain_refusal(message: &str, server: Option<&str>) -> Option<String> {
    let empty_default = message.contains(".default: Invalid value: \"null\"") && message.contains("must be of type string");
    let list_map_key = message.contains("x-kubernetes-list-map-keys, so it must have a default or be a required property");
    if !empty_default && !list_map_key {
        return None;
    }
    let server = server.map_or_else(|| "this API server".to_owned(), |v| format!("this API server ({v})"));
    let why = if empty_default {
        format!(
            "{server} reads an empty string in a CRD schema as null (kubernetes/kubernetes#99804: \
             kube-apiserver before v1.20.5 built with Go 1.16 or later, as the local control plane \
             v1.20.2 is), so it refuses `default: \"\"`, which current controller-gen writes for every \
             field Kubernetes' types mark `+default=\"\"` (a CRD that embeds a Pod template has dozens). \
             Custom resources with an empty-string field are refused the same way there: leave such \
             fields out."
        )
    } else {
        format!(
            "{server} says every key of an `x-kubernetes-list-type: map` list must have a default \
             or be required; once the empty-string defaults are gone, some keys have neither."
        )
    };
    Some(format!(
        "{why}\nFix: `wasmloop dev --local --crd <file>` applies it adapted (the empty-string defaults \
         removed, list-map keys left without a default made required: `wasmloop::crds::adapt_for_old_servers`); \
         or run against Kubernetes v1.21 or later (KUBECONFIG of such a cluster, without --local), \
         which takes the CRD as it is."
    ))
}

/// What [`adapt_for_old_servers`] changed, where (a JSON pointer into the CRD).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Change {
    /// A `default: ""` removed.
    EmptyDefaultRemoved(String),
    /// A list-map key made required (it had only the empty default), in the items schema at.
    KeyMadeRequired {
        /// The items schema.
        at: String,
        /// The key.
        key: String,
    },
}

/// The CRD without empty-string defaults, with the list-map keys that had only those made
/// required; and what changed. Any JSON is taken: a CRD has its schemas under
/// `spec.versions[].schema.openAPIV3Schema`, and nothing else in one has a `default: ""`.
pub fn adapt_for_old_servers(crd: &Value) -> (Value, Vec<Change>) {
    let mut out = crd.clone();
    let mut changes = Vec::new();
    adapt(&mut out, &mut String::new(), &mut changes);
    (out, changes)
}

fn adapt(v: &mut Value, at: &mut String, changes: &mut Vec<Change>) {
    match v {
        Value::Object(map) => {
            if map.get("default").is_some_and(|d| d.as_str() == Some("")) {
                map.remove("default");
                changes.push(Change::EmptyDefaultRemoved(format!("{at}/default")));
            }
            let len = at.len();
            for (k, child) in map.iter_mut() {
                at.push('/');
                at.push_str(&k.replace('~', "~0").replace('/', "~1"));
                adapt(child, at, changes);
                at.truncate(len);
            }
            // After the children: the keys' defaults are gone by now.
            let keys: Vec<String> = map
                .get("x-kubernetes-list-map-keys")
                .and_then(Value::as_array)
                .map(|k| k.iter().filter_map(Value::as_str).map(str::to_owned).collect())
                .unwrap_or_default();
            if let Some(items) = map.get_mut("items").and_then(Value::as_object_mut) {
                for key in keys {
                    let defaulted = items.get("properties").and_then(|p| p.get(&key)).is_some_and(|p| p.get("default").is_some());
                    let required =
                        items.get("required").and_then(Value::as_array).is_some_and(|r| r.iter().any(|x| x.as_str() == Some(&key)));
                    if defaulted || required {
                        continue;
                    }
                    let list = items.entry("required").or_insert_with(|| Value::Array(Vec::new()));
                    if let Some(list) = list.as_array_mut() {
                        list.push(Value::String(key.clone()));
                        changes.push(Change::KeyMadeRequired { at: format!("{at}/items"), key });
                    }
                }
            }
        }
        Value::Array(items) => {
            let len = at.len();
            for (i, child) in items.iter_mut().enumerate() {
                at.push_str(&format!("/{i}"));
                adapt(child, at, changes);
                at.truncate(len);
            }
        }
        _ => {}
    }
}

/// One line saying what [`adapt_for_old_servers`] changed.
pub fn summary(changes: &[Change]) -> String {
    let removed = changes.iter().filter(|c| matches!(c, Change::EmptyDefaultRemoved(_))).count();
    let keys: Vec<String> = changes
        .iter()
        .filter_map(|c| match c {
            Change::KeyMadeRequired { at, key } => Some(format!("{at}/{key}")),
            Change::EmptyDefaultRemoved(_) => None,
        })
        .collect();
    if keys.is_empty() {
        format!("{removed} empty-string defaults removed")
    } else {
        format!("{removed} empty-string defaults removed; list-map keys made required: {}", keys.join(", "))
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn crd() -> Value {
        json!({"spec": {"versions": [{"schema": {"openAPIV3Schema": {"properties": {"spec": {"properties": {
            "concurrencyPolicy": {"type": "string", "default": "Allow"},
            "imagePullSecrets": {"type": "array", "x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["name"],
                "items": {"type": "object", "properties": {"name": {"type": "string", "default": ""}}}},
            "ports": {"type": "array", "x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["containerPort", "protocol"],
                "items": {"type": "object", "required": ["containerPort"], "properties": {
                    "containerPort": {"type": "integer"}, "protocol": {"type": "string", "default": "TCP"}}}},
            "secretRef": {"properties": {"name": {"type": "string", "default": ""}, "optional": {"type": "boolean", "default": false}}},
        }}}}}}]}})
    }

    #[test]
    fn empty_defaults_go_and_keys_left_without_one_become_required() {
        let (adapted, changes) = adapt_for_old_servers(&crd());
        let spec = &adapted["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"];
        assert_eq!(spec["secretRef"]["properties"]["name"], json!({"type": "string"}));
        assert_eq!(spec["secretRef"]["properties"]["optional"]["default"], false, "other defaults stay");
        assert_eq!(spec["concurrencyPolicy"]["default"], "Allow");
        assert_eq!(spec["imagePullSecrets"]["items"]["required"], json!(["name"]));
        assert_eq!(spec["ports"]["items"]["required"], json!(["containerPort"]), "a defaulted key stays optional");
        assert_eq!(changes.len(), 3);
        assert!(
            summary(&changes).starts_with("2 empty-string defaults removed; list-map keys made required: /spec/"),
            "{}",
            summary(&changes)
        );
        assert_eq!(adapt_for_old_servers(&adapted).1, [], "adapting twice changes nothing");
    }

    #[test]
    fn the_old_servers_refusals_are_explained_and_others_are_not() {
        let refusal = r#"CustomResourceDefinition.apiextensions.k8s.io "cronjobs.batch.tutorial.kubebuilder.io" is invalid: spec.validation.openAPIV3Schema.properties[spec].properties[name].default: Invalid value: "null": in body must be of type string: "null""#;
        let why = explain_refusal(refusal, Some("v1.20.2")).expect("explained");
        assert!(why.contains("this API server (v1.20.2) reads an empty string") && why.contains("kubernetes/kubernetes#99804"), "{why}");
        assert!(why.contains("wasmloop dev --local --crd"), "{why}");
        let keys = "... .default: Required value: this property is in x-kubernetes-list-map-keys, so it must have a default or be a required property";
        assert!(explain_refusal(keys, None).unwrap().contains("must have a default"));
        assert_eq!(explain_refusal("spec.names.plural: Invalid value: \"Foo\"", Some("v1.20.2")), None);
    }
}
