//! A built plugin loaded once and started as one controller per test namespace, from that
//! namespace's manifest, as the hot-loader would: the differential tests run each scenario in a
//! namespace of its own.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, Result};
use kube::Client;
use wasmloop::controller::Controller;
use wasmloop::hotload::PluginManifest;
use wasmloop::plugin::{PluginEngine, WasmPlugin};

use crate::{Host, TestNamespace, plugin_path};

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

/// Run every scenario at once, each in a fresh namespace (`<tag>-<name>-<random>`) with, when
/// `plugins` are given, their controllers for that namespace meanwhile; `play(scenario,
/// namespace)` runs one. The outcomes in the scenarios' order; namespaces are deleted after.
pub async fn run_phase<'a, S, O, Fut>(
    client: &Client,
    tag: &str,
    scenarios: &'a [S],
    name: impl Fn(&S) -> &str,
    plugins: Option<(&Host, &[PluginDriver])>,
    play: impl Fn(&'a S, String) -> Fut,
) -> Vec<Result<O>>
where
    Fut: Future<Output = Result<O>>,
{
    let (name, play) = (&name, &play);
    let runs = scenarios.iter().map(|sc| async move {
        let ns = TestNamespace::create(client, &format!("{tag}-{}", name(sc))).await?;
        let mut controllers = Vec::new();
        for p in plugins.map(|(_, drivers)| drivers).unwrap_or_default() {
            let host = plugins.map(|(h, _)| h).context("plugins without a host")?;
            controllers.push(p.start(host, &ns.name).await?);
        }
        let outcome = play(sc, ns.name.clone()).await;
        for c in controllers {
            c.shutdown(Duration::from_secs(5)).await;
        }
        let outcome = outcome.with_context(|| format!("scenario {} in namespace {}", name(sc), ns.name));
        ns.cleanup().await?;
        outcome
    });
    futures::future::join_all(runs).await
}
