//! Memory per plugin, for `/metrics`: `wasmloop_plugin_memory_limit_bytes{plugin}` (its
//! `limits.memory`, what one instance may grow to) and `wasmloop_plugin_memory_peak_bytes{plugin}`
//! (the most linear memory any of its calls has reached since the version loaded), read at
//! scrape time from the plugins the host runs ([`LoadedPlugins`], kept current by its owner).

use std::sync::Arc;

use parking_lot::Mutex;
use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeLabelSet, EncodeMetric};
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;

use super::WasmPlugin;

/// The plugins loaded now, shared with the collector. Cheap to clone.
#[derive(Clone, Default)]
pub struct LoadedPlugins(Arc<Mutex<Vec<Arc<WasmPlugin>>>>);

impl LoadedPlugins {
    /// Replace the set.
    pub fn set(&self, plugins: Vec<Arc<WasmPlugin>>) {
        *self.0.lock() = plugins;
    }

    /// The collector over this set.
    pub fn collector(&self) -> MemoryCollector {
        MemoryCollector { plugins: self.clone() }
    }
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct PluginLabel {
    plugin: String,
}

/// The memory gauges of [`LoadedPlugins`].
pub struct MemoryCollector {
    plugins: LoadedPlugins,
}

impl std::fmt::Debug for MemoryCollector {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("MemoryCollector")
    }
}

impl Collector for MemoryCollector {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let limit = Family::<PluginLabel, Gauge>::default();
        let peak = Family::<PluginLabel, Gauge>::default();
        for p in self.plugins.0.lock().iter() {
            let label = PluginLabel { plugin: p.name().to_string() };
            limit.get_or_create(&label).set(i64::try_from(p.limits().memory.bytes()).unwrap_or(i64::MAX));
            peak.get_or_create(&label).set(i64::try_from(p.stats().memory_peak_bytes).unwrap_or(i64::MAX));
        }
        for (name, help, family) in [
            ("wasmloop_plugin_memory_limit_bytes", "Linear memory one instance of the plugin may grow to (limits.memory)", &limit),
            ("wasmloop_plugin_memory_peak_bytes", "The most linear memory any call of the plugin has reached since it loaded", &peak),
        ] {
            let e = encoder.encode_descriptor(name, help, None, family.metric_type())?;
            family.encode(e)?;
        }
        Ok(())
    }
}
