//! A plugin ConfigMap's state as the host reported it in its annotations, read back: what
//! `wasmloop status` shows, and what every replica exports as `wasmloop_plugin_state` from its
//! cache of the plugin ConfigMaps (so "Rejected for 15 minutes" can be alerted on from any
//! replica's metrics, whichever replica wrote the status).
//!
//! Read tolerantly: the status JSON (`wasmloop.dev/status`, written by `hotload`) gains fields
//! over time, so unknown fields are ignored and missing ones are empty; a status that is not
//! JSON at all falls back to the plain `wasmloop.dev/state` and `wasmloop.dev/digest`; a
//! ConfigMap the host has not reported on yet is `Unknown` ([`State::name`]).

use std::collections::BTreeMap;
use std::sync::Arc;

use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeLabelSet, EncodeMetric};
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use serde::Deserialize;

use crate::cache::IndexedStore;
use crate::hotload::source::PLUGIN_LABEL;
use crate::hotload::{PluginStatus, State};
use crate::informer::{Informer, InformerKey, InformerRegistry};

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct StateLabels {
    namespace: String,
    configmap: String,
    state: String,
    reason: String,
}

/// `wasmloop_plugin_state{namespace, configmap, state, reason}` = 1 for every plugin ConfigMap in
/// `store` (the host's informer of plugin ConfigMaps), read at scrape time.
pub struct StateCollector {
    store: Arc<IndexedStore>,
    /// The informer filling `store`, kept running while the collector is registered.
    _informer: Option<Arc<Informer>>,
}

impl StateCollector {
    /// A collector over the plugin ConfigMaps in `store`.
    pub fn new(store: Arc<IndexedStore>) -> Self {
        Self { store, _informer: None }
    }

    /// A collector over the plugin ConfigMaps of `namespace` (`None`: all namespaces), from the
    /// informer `registry` already runs for the plugin manager (started if it does not).
    pub async fn watch(registry: &InformerRegistry, namespace: Option<String>) -> crate::informer::Result<Self> {
        let kind = crate::kinds::KindRef::new("v1", "ConfigMap");
        let key = InformerKey::new(kind.clone(), namespace, Some(&format!("{PLUGIN_LABEL}=true")))
            .map_err(|source| crate::informer::Error::Selector { kind, source })?;
        let informer = registry.acquire(key).await?;
        Ok(Self { store: informer.store().clone(), _informer: Some(informer) })
    }
}

impl std::fmt::Debug for StateCollector {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("StateCollector")
    }
}

/// Only what the collector needs of a ConfigMap.
#[derive(Deserialize)]
struct Annotated {
    #[serde(default)]
    metadata: AnnotatedMeta,
}

#[derive(Default, Deserialize)]
struct AnnotatedMeta {
    #[serde(default)]
    annotations: BTreeMap<String, String>,
}

impl Collector for StateCollector {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let family = Family::<StateLabels, Gauge>::default();
        for object in self.store.snapshot() {
            let annotations = object.parse::<Annotated>().map(|a| a.metadata.annotations).unwrap_or_default();
            let status = PluginStatus::from_annotations(&annotations);
            let labels = StateLabels {
                namespace: object.namespace().unwrap_or_default().to_string(),
                configmap: object.name().to_string(),
                state: State::name(status.state).to_string(),
                reason: status.reason,
            };
            family.get_or_create(&labels).set(1);
        }
        let e = encoder.encode_descriptor(
            "wasmloop_plugin_state",
            "Plugin ConfigMaps by the state and reason their status annotations report (value 1; Unknown: not reported yet)",
            None,
            family.metric_type(),
        )?;
        family.encode(e)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::hotload::source::STATUS_ANNOTATION;
    use crate::hotload::{DIGEST_ANNOTATION, STATE_ANNOTATION};

    fn annotations(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
    }

    #[test]
    fn the_status_json_is_read_tolerantly() {
        let json = r#"{"state":"Waiting","reason":"PayloadMissing","message":"m","digest":"sha256:bb","serving":"p 1.0.0",
                       "servingDigest":"sha256:aa","waitingFor":"p-wasm-1","someFieldAddedLater":{"x":[1]}}"#;
        let s = PluginStatus::from_annotations(&annotations(&[(STATUS_ANNOTATION, json)]));
        assert_eq!((s.state, s.reason.as_str()), (Some(State::Waiting), "PayloadMissing"));
        assert_eq!((s.serving_digest(), s.pending_digest()), (Some("sha256:aa"), Some("sha256:bb")));
        let loaded = PluginStatus::from_annotations(&annotations(&[(STATUS_ANNOTATION, r#"{"state":"Loaded","digest":"sha256:cc"}"#)]));
        assert_eq!((loaded.serving_digest(), loaded.pending_digest()), (Some("sha256:cc"), None));
        // Not JSON: the plain annotations.
        let plain = PluginStatus::from_annotations(&annotations(&[
            (STATUS_ANNOTATION, "{not json"),
            (STATE_ANNOTATION, "Rejected"),
            (DIGEST_ANNOTATION, "sha256:dd"),
        ]));
        assert_eq!((plain.state, plain.digest.as_deref()), (Some(State::Rejected), Some("sha256:dd")));
        assert_eq!(State::name(PluginStatus::from_annotations(&BTreeMap::new()).state), "Unknown");
        // A state this host does not know reads as none, and the rest of the status still reads.
        let future = PluginStatus::from_annotations(&annotations(&[(STATUS_ANNOTATION, r#"{"state":"Paused","reason":"Admin"}"#)]));
        assert_eq!((future.state, future.reason.as_str()), (None, "Admin"));
    }

    #[test]
    fn the_collector_exports_one_series_per_configmap() {
        let store = Arc::new(IndexedStore::new(crate::kinds::KindRef::new("v1", "ConfigMap")));
        let cm = |name: &str, status: Option<&str>| {
            let mut v = serde_json::json!({"apiVersion": "v1", "kind": "ConfigMap",
                "metadata": {"name": name, "namespace": "wasmloop", "uid": name, "resourceVersion": "1"}});
            if let Some(s) = status {
                v["metadata"]["annotations"] = serde_json::json!({STATUS_ANNOTATION: s});
            }
            v
        };
        store.apply(cm("podset", Some(r#"{"state":"Rejected","reason":"Refused"}"#))).unwrap();
        store.apply(cm("fresh", None)).unwrap();
        let mut registry = prometheus_client::registry::Registry::default();
        registry.register_collector(Box::new(StateCollector::new(store)));
        let mut text = String::new();
        prometheus_client::encoding::text::encode(&mut text, &registry).unwrap();
        assert!(
            text.contains(r#"wasmloop_plugin_state{namespace="wasmloop",configmap="podset",state="Rejected",reason="Refused"} 1"#),
            "{text}"
        );
        assert!(text.contains(r#"wasmloop_plugin_state{namespace="wasmloop",configmap="fresh",state="Unknown",reason=""} 1"#), "{text}");
    }
}
