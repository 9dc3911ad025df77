//! `namespace-config`: for every Namespace labelled `wasmloop.dev/config=<profile>`, keeps a
//! ConfigMap `wasmloop-config` in it (server-side applied), and deletes that ConfigMap when the
//! label goes away.
//!
//! The ConfigMap's data holds the profile, `managed-by: wasmloop` and `profile-namespaces`, the
//! number of Namespaces using the same profile, read through the declared label index
//! `config-profile` on Namespaces. A Namespace event reconciles only that Namespace, so the
//! other members' counts catch up on their next requeue (every [`REFRESH`]) or resync.
//!
//! It watches ConfigMaps labelled `app.kubernetes.io/managed-by=wasmloop` with the `namespace`
//! mapping: an edit or deletion of the ConfigMap reconciles its Namespace, which puts it back.
//! This plugin shows the SDK without the `k8s` feature: everything is `serde_json::Value`.

use std::time::Duration;

use serde_json::{Value, json};
use wasmloop_sdk::{Error, EventType, Mapping, Metadata, Outcome, Reconciler, Request, ResultExt, Watch, cache, kinds, object};

/// The Namespace label naming the profile.
pub const PROFILE_LABEL: &str = "wasmloop.dev/config";
/// The declared index over [`PROFILE_LABEL`] on Namespaces.
pub const PROFILE_INDEX: &str = "config-profile";
/// The ConfigMap kept in each labelled Namespace.
pub const CONFIG_MAP_NAME: &str = "wasmloop-config";
/// The label marking ConfigMaps this plugin manages (and the only ones it watches).
pub const MANAGED_BY_LABEL: &str = "app.kubernetes.io/managed-by";
pub const MANAGED_BY: &str = "wasmloop";
/// How often a labelled Namespace is reconciled to refresh `profile-namespaces`.
pub const REFRESH: Duration = Duration::from_secs(300);

/// The reconciler.
pub struct NamespaceConfig;

impl Reconciler for NamespaceConfig {
    fn metadata() -> Metadata {
        Metadata::new("namespace-config", env!("CARGO_PKG_VERSION"))
            .reconciles(kinds::NAMESPACE)
            .watch(Watch::new(kinds::CONFIG_MAP, Mapping::Namespace).selector(format!("{MANAGED_BY_LABEL}={MANAGED_BY}")))
            .index(kinds::NAMESPACE, PROFILE_INDEX, format!("labels.{PROFILE_LABEL}"))
    }

    fn reconcile(req: Request) -> Result<Outcome, Error> {
        let name = req.key.name.as_str();
        // Gone or terminating: the Namespace's deletion removes the ConfigMap.
        let Some(ns) = cache::get_key::<Value>(&req.key).context("reading the Namespace")? else {
            return Ok(Outcome::new());
        };
        if is_terminating(&ns) {
            return Ok(Outcome::new());
        }
        let current: Option<Value> = cache::get(&kinds::CONFIG_MAP, Some(name), CONFIG_MAP_NAME).context("reading the ConfigMap")?;

        let Some(profile) = object::label(&ns, PROFILE_LABEL).filter(|p| !p.is_empty()) else {
            // Unlabelled (or labelled with an empty profile): our ConfigMap must go. Only ConfigMaps
            // carrying our managed-by label are cached, so this never deletes someone else's.
            return Ok(match current {
                Some(cm) => Outcome::new().delete(&cm).event(
                    &ns,
                    EventType::Normal,
                    "ConfigRemoved",
                    format!("label {PROFILE_LABEL} removed: deleted ConfigMap {CONFIG_MAP_NAME}"),
                ),
                None => Outcome::new(),
            });
        };

        let members: Vec<Value> = cache::by_index(&kinds::NAMESPACE, PROFILE_INDEX, profile).context("listing the profile's Namespaces")?;
        let count = members.iter().filter(|n| !is_terminating(n)).count();
        let desired = desired_config_map(name, profile, count);

        let mut out = Outcome::new();
        if current.as_ref().is_none_or(|cm| !is_up_to_date(cm, &desired)) {
            out = out.apply(&desired);
            let previous = current.as_ref().and_then(|cm| cm.pointer("/data/profile")).and_then(Value::as_str);
            if previous != Some(profile) {
                out = out.event(
                    &ns,
                    EventType::Normal,
                    "ConfigApplied",
                    format!("applied profile {profile:?} to ConfigMap {CONFIG_MAP_NAME} ({count} namespaces use it)"),
                );
            }
        }
        Ok(out.requeue_after(REFRESH))
    }
}

wasmloop_sdk::export_reconciler!(NamespaceConfig);

fn is_terminating(ns: &Value) -> bool {
    object::is_deleting(ns) || ns.pointer("/status/phase").and_then(Value::as_str) == Some("Terminating")
}

/// The ConfigMap as this plugin wants it (the whole of its intent, for server-side apply).
pub fn desired_config_map(namespace: &str, profile: &str, profile_namespaces: usize) -> Value {
    json!({
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {
            "name": CONFIG_MAP_NAME,
            "namespace": namespace,
            "labels": {MANAGED_BY_LABEL: MANAGED_BY, PROFILE_LABEL: profile},
        },
        "data": {
            "profile": profile,
            "managed-by": MANAGED_BY,
            "profile-namespaces": profile_namespaces.to_string(),
        },
    })
}

/// Whether `current` already has the desired data and labels (extra labels are someone else's).
fn is_up_to_date(current: &Value, desired: &Value) -> bool {
    let labels_ok = desired["metadata"]["labels"]
        .as_object()
        .is_some_and(|want| want.iter().all(|(k, v)| current.pointer("/metadata/labels").and_then(|l| l.get(k)) == Some(v)));
    labels_ok && current.get("data") == desired.get("data")
}

#[cfg(test)]
mod tests;
