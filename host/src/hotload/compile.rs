//! [`Compiler`]: a plugin component compiled (or taken from the precompiled cache, or reused from
//! the version already loaded) and validated into a [`WasmPlugin`], in a bounded pool and within
//! a time budget, on the guest threads (compiling a hostile component must not delay the host).

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::Semaphore;

use super::manifest::PluginManifest;
use crate::plugin::{Compiled, PluginEngine, PrecompiledCache, RecordOptions, Recorder, WasmPlugin};

/// Why a version could not be compiled and validated.
#[derive(Debug, thiserror::Error)]
pub enum CompileError {
    /// The component does not compile, or does not validate under its manifest.
    #[error(transparent)]
    Load(#[from] crate::plugin::Error),
    /// The host is shutting down.
    #[error("loading was cancelled: the host is shutting down")]
    Cancelled,
    /// Compiling or validating panicked (a bug of the host or of wasmtime, never of the plugin).
    #[error("loading panicked: {0}")]
    Panicked(String),
    /// It took longer than the compile budget.
    #[error(
        "compiling and validating took longer than the {} budget; refused (raise it with --compile-budget / WASMLOOP_COMPILE_BUDGET)",
        crate::duration::format(*.0)
    )]
    OverBudget(Duration),
}

/// Where a loaded version came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LoadOrigin {
    /// Compiled from the wasm bytes.
    Compiled,
    /// Deserialised from the precompiled cache (no compile).
    Precompiled,
    /// The component already loaded with the same digest, reused (referenced payloads: a
    /// manifest-only change; no payload read, decompress, compile or deserialise).
    Reused,
    /// The ConfigMap went back to the version already serving (nothing to load).
    Unchanged,
    /// The version that served before was started again (its kinds are served again, or
    /// replacing it failed half-way): nothing compiled.
    Resumed,
}

impl LoadOrigin {
    /// How, for a person, and the status reason.
    pub fn describe(self) -> (&'static str, &'static str) {
        match self {
            LoadOrigin::Compiled => ("compiled", "Compiled"),
            LoadOrigin::Precompiled => ("from the precompiled cache", "Precompiled"),
            LoadOrigin::Reused => ("reusing the loaded component (same digest)", "Reused"),
            LoadOrigin::Unchanged => ("already serving", "Unchanged"),
            LoadOrigin::Resumed => ("started again (the version that served before)", "Resumed"),
        }
    }
}

/// The component to load: bytes to compile (or find in the precompiled cache), or one loaded already.
pub(super) enum Input {
    /// The component's bytes.
    Wasm(Vec<u8>),
    /// A component loaded already (same digest).
    Reuse(Compiled),
}

/// The compile pool.
pub(super) struct Compiler {
    engine: PluginEngine,
    precompiled: Option<PrecompiledCache>,
    /// Compiles running at once.
    permits: Arc<Semaphore>,
    budget: Duration,
    record: Option<RecordOptions>,
}

impl Compiler {
    /// At most `workers` compiles at once, each within `budget`; loaded plugins record what
    /// `record` chooses.
    pub(super) fn new(
        engine: PluginEngine,
        precompiled: Option<PrecompiledCache>,
        workers: usize,
        budget: Duration,
        record: Option<RecordOptions>,
    ) -> Self {
        Self { engine, precompiled, permits: Arc::new(Semaphore::new(workers.max(1))), budget, record }
    }

    /// Compile (or take from the precompiled cache) and validate `input` under `manifest`'s
    /// limits and grants. Artifacts are cached only once the plugin validated.
    pub(super) async fn compile(&self, input: Input, manifest: &PluginManifest) -> Result<(Arc<WasmPlugin>, LoadOrigin), CompileError> {
        let permit = self.permits.clone().acquire_owned().await.map_err(|_| CompileError::Cancelled)?;
        let (engine, precompiled) = (self.engine.clone(), self.precompiled.clone());
        let (limits, grants, component) = (manifest.limits.clone(), manifest.grants.clone(), manifest.component.clone());
        let record = self.record.clone();
        // A compile cannot be interrupted: past the budget it is abandoned, and its thread keeps
        // the pool permit until it ends, so abandoned compiles stay bounded too.
        let work = crate::plugin::guest_threads::run(move || {
            let _permit = permit;
            let wasm = match input {
                Input::Wasm(wasm) => wasm,
                Input::Reuse(compiled) => {
                    let plugin = WasmPlugin::from_compiled_as(&engine, compiled, limits, grants, component.as_deref())?;
                    return Ok::<_, crate::plugin::Error>((Arc::new(recording(plugin, record)), LoadOrigin::Reused));
                }
            };
            let cached = precompiled.as_ref().and_then(|c| c.cached(&engine, &wasm).ok().flatten());
            let cache_hit = cached.is_some();
            let compiled = match cached {
                Some(compiled) => compiled,
                None => engine.compile_timed(&wasm)?,
            };
            let plugin = WasmPlugin::from_compiled_as(&engine, compiled, limits, grants, component.as_deref())?;
            if let (Some(cache), false) = (&precompiled, cache_hit) {
                cache.store(&engine, &wasm, plugin.component());
            }
            Ok::<_, crate::plugin::Error>((
                Arc::new(recording(plugin, record)),
                if cache_hit { LoadOrigin::Precompiled } else { LoadOrigin::Compiled },
            ))
        });
        match tokio::time::timeout(self.budget, work).await {
            Ok(Ok(loaded)) => Ok(loaded?),
            Ok(Err(e)) if e.is_cancelled() => Err(CompileError::Cancelled),
            Ok(Err(e)) => Err(CompileError::Panicked(e.to_string())),
            Err(_) => Err(CompileError::OverBudget(self.budget)),
        }
    }
}

/// `plugin`, recording what `options` choose (a recorder that cannot start is logged: the
/// plugin runs without one; recording never stops a plugin from loading).
fn recording(plugin: WasmPlugin, options: Option<RecordOptions>) -> WasmPlugin {
    let Some(options) = options.filter(RecordOptions::records_anything) else { return plugin };
    match Recorder::start(options, plugin.name()) {
        Ok(recorder) => {
            tracing::info!(target: "wasmloop::record", plugin = plugin.name(), dir = %recorder.dir().display(), "recording reconciles");
            plugin.with_recorder(recorder)
        }
        Err(error) => {
            tracing::warn!(target: "wasmloop::record", plugin = plugin.name(), %error, "not recording: the recorder did not start");
            plugin
        }
    }
}
