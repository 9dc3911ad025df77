//! Plugin metrics: loads by result, what is loaded (`wasmloop_plugin_info`), load time, and the
//! sandbox's per-plugin counters (calls, traps, timeouts, out-of-memory) read at scrape time.

use std::collections::BTreeMap;
use std::sync::Arc;

use parking_lot::Mutex;
use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeLabelSet, EncodeMetric};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

use crate::plugin::WasmPlugin;
use crate::reconciler::Reconciler;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct LoadLabels {
    configmap: String,
    result: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct OriginLabel {
    origin: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct PluginLabel {
    plugin: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct RecordingLabels {
    plugin: String,
    /// `written`, `dropped` (the writer was behind), `failed` (over the byte cap, an I/O error),
    /// `removed` (beyond `--record-max`).
    result: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct InfoLabels {
    configmap: String,
    plugin: String,
    version: String,
    digest: String,
}

/// Plugin metrics, shared by the manager and the `/metrics` collector.
#[derive(Clone)]
pub struct PluginMetrics {
    loads: Family<LoadLabels, Counter>,
    load_seconds: Family<OriginLabel, Histogram>,
    loaded: Arc<Mutex<BTreeMap<String, Arc<WasmPlugin>>>>,
}

impl PluginMetrics {
    /// The plugin metrics, registered in `registry`.
    pub fn new(registry: &mut Registry) -> Self {
        let m = Self {
            loads: Family::default(),
            load_seconds: Family::new_with_constructor(|| Histogram::new(exponential_buckets(0.001, 2.0, 16))),
            loaded: Default::default(),
        };
        let r = registry.sub_registry_with_prefix("wasmloop_plugin");
        r.register("loads", "Plugin loads by ConfigMap and result (loaded, waiting, rejected, removed)", m.loads.clone());
        r.register("load_seconds", "Time from a ConfigMap change to the new version serving, by origin", m.load_seconds.clone());
        registry.register_collector(Box::new(SandboxCollector { loaded: m.loaded.clone() }));
        m
    }

    /// Metrics registered nowhere (tests).
    pub fn unregistered() -> Self {
        Self::new(&mut Registry::default())
    }

    pub(crate) fn load(&self, configmap: &str, result: &str) {
        self.loads.get_or_create(&LoadLabels { configmap: configmap.into(), result: result.into() }).inc();
    }

    pub(crate) fn load_time(&self, cache_hit: bool, seconds: f64) {
        let origin = if cache_hit { "precompiled" } else { "compiled" };
        self.load_seconds.get_or_create(&OriginLabel { origin: origin.into() }).observe(seconds);
    }

    pub(crate) fn set_loaded(&self, configmap: &str, plugin: Option<Arc<WasmPlugin>>) {
        let mut loaded = self.loaded.lock();
        match plugin {
            Some(p) => loaded.insert(configmap.to_string(), p),
            None => loaded.remove(configmap),
        };
    }

    /// Loads of `configmap` that ended with `result`.
    pub fn loads(&self, configmap: &str, result: &str) -> u64 {
        self.loads.get_or_create(&LoadLabels { configmap: configmap.into(), result: result.into() }).get()
    }
}

struct SandboxCollector {
    loaded: Arc<Mutex<BTreeMap<String, Arc<WasmPlugin>>>>,
}

impl std::fmt::Debug for SandboxCollector {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("SandboxCollector")
    }
}

impl Collector for SandboxCollector {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let info = Family::<InfoLabels, Gauge>::default();
        let counters: [(&str, &str, Family<PluginLabel, Counter>); 8] = [
            ("wasmloop_plugin_calls", "Reconcile calls into the plugin", Family::default()),
            ("wasmloop_plugin_ok", "Calls that returned a valid outcome", Family::default()),
            ("wasmloop_plugin_errors", "Calls where the plugin returned an error", Family::default()),
            ("wasmloop_plugin_invalid_outcomes", "Outcomes refused by the host (bad action JSON, too many actions)", Family::default()),
            ("wasmloop_plugin_traps", "Calls that trapped (panic, unreachable, bad memory access)", Family::default()),
            ("wasmloop_plugin_timeouts", "Calls interrupted at their deadline", Family::default()),
            ("wasmloop_plugin_ooms", "Calls that failed at the memory cap", Family::default()),
            ("wasmloop_plugin_output_dropped_bytes", "Guest output dropped over the per-call or per-minute limits", Family::default()),
        ];
        let recordings = Family::<RecordingLabels, Counter>::default();
        for (configmap, p) in self.loaded.lock().iter() {
            let spec = p.spec();
            if let Some(recorder) = p.recorder() {
                let r = recorder.stats();
                for (result, v) in [("written", r.written), ("dropped", r.dropped), ("failed", r.failed), ("removed", r.removed)] {
                    recordings.get_or_create(&RecordingLabels { plugin: spec.name.clone(), result }).inc_by(v);
                }
            }
            info.get_or_create(&InfoLabels {
                configmap: configmap.clone(),
                plugin: spec.name.clone(),
                version: spec.version.clone(),
                digest: p.digest().to_string(),
            })
            .set(1);
            let s = p.stats();
            let label = PluginLabel { plugin: spec.name.clone() };
            let values = [s.calls, s.ok, s.errors, s.invalid_outcomes, s.traps, s.timeouts, s.ooms, s.output_dropped_bytes];
            for (i, v) in values.into_iter().enumerate() {
                counters[i].2.get_or_create(&label).inc_by(v);
            }
        }
        let e = encoder.encode_descriptor("wasmloop_plugin_info", "Loaded plugins (value 1)", None, info.metric_type())?;
        info.encode(e)?;
        for (name, help, family) in &counters {
            let e = encoder.encode_descriptor(name, help, None, family.metric_type())?;
            family.encode(e)?;
        }
        let e = encoder.encode_descriptor(
            "wasmloop_plugin_recordings",
            "Reconcile recordings (--record-dir) by result: written, dropped, failed, removed",
            None,
            recordings.metric_type(),
        )?;
        recordings.encode(e)?;
        Ok(())
    }
}
