//! A built plugin loaded once and started as one controller per test namespace, from that
//! namespace's manifest, as the hot-loader would: the differential tests run each scenario in a
//! namespace of its own.

use std::sync::Arc;

use anyhow::Result;
use wasmloop::controller::Controller;
use wasmloop::hotload::PluginManifest;
use wasmloop::plugin::{PluginEngine, WasmPlugin};

use crate::{Host, plugin_path};

/// A plugin's manifest for one namespace.
pub type ManifestFor = fn(namespace: &str) -> String;

/// A loaded plugin and how to write its manifest.
pub struct PluginDriver {
    /// The plugin's name (its component under `$WASMLOOP_PLUGIN_DIR`).
    pub name: &'static str,
    /// The loaded component.
    pub wasm: Arc<WasmPlugin>,
    manifest: ManifestFor,
}

impl PluginDriver {
    /// Load plugin `name` with the limits and grants of its manifest.
    pub async fn load(name: &'static str, manifest: ManifestFor) -> Result<Self> {
        let m = PluginManifest::parse(&manifest("default"), name)?;
        let bytes = std::fs::read(plugin_path(name)?)?;
        let (limits, grants) = (m.limits.clone(), m.grants.clone());
        let wasm = tokio::task::spawn_blocking(move || -> Result<WasmPlugin> {
            let engine = PluginEngine::new()?;
            Ok(WasmPlugin::load(&engine, &bytes, limits, grants)?)
        })
        .await??;
        Ok(Self { name, wasm: Arc::new(wasm), manifest })
    }

    /// Its controller for namespace `ns`, with `host`'s informers and executor.
    pub async fn start(&self, host: &Host, ns: &str) -> Result<Controller> {
        let m = PluginManifest::parse(&(self.manifest)(ns), self.name)?;
        Ok(Controller::start(self.wasm.clone(), m.controller.clone(), self.wasm.grants().clone(), host.shared(), host.executor.clone())
            .await?)
    }
}
