//! The process-wide wasmtime engine all plugins share, and the precompiled-component cache.
//!
//! [`PluginEngine`] is created once: component model, pooling allocator with copy-on-write
//! memory images (instantiation is a few µs), epoch interruption driven by a background ticker
//! thread (stopped when the last clone is dropped), and one [`Linker`] with WASI p2 and the
//! `cache` + `log` imports. [`PrecompiledCache`] keeps compiled components on disk, keyed by the
//! plugin's sha256 and the engine's compatibility hash, so a restart deserialises in
//! milliseconds instead of compiling for seconds.
//!
//! Compiling is CPU-bound and takes up to seconds: [`PluginEngine::compile`] and
//! [`PrecompiledCache::load_or_compile`] are synchronous, call them from a blocking thread
//! (`tokio::task::spawn_blocking`), never on the async runtime.

use std::fmt;
use std::hash::{Hash, Hasher};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::mpsc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use sha2::{Digest, Sha256};
use wasmtime::component::{Component, HasSelf, Linker};
use wasmtime::{Config, Enabled, Engine, InstanceAllocationStrategy, OptLevel, PoolingAllocationConfig};

use super::bindings::{Controller, v0_1, v0_2};
use super::function_cache::FunctionCache;
use super::host::HostState;
use super::limits::{self, EngineLimits};

/// Errors creating the engine or compiling a plugin.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The engine's limits do not fit together.
    #[error(transparent)]
    Limits(#[from] limits::Error),
    /// wasmtime refused the engine configuration.
    #[error("cannot create the wasmtime engine: {0}")]
    Engine(String),
    /// The thread that ticks epochs (for timeouts) did not start.
    #[error("cannot start the epoch ticker thread: {0}")]
    Ticker(#[source] std::io::Error),
    /// The bytes are not WebAssembly at all.
    #[error("not a WebAssembly binary ({0} bytes, no \\0asm header)")]
    NotWasm(usize),
    /// A core module where a component was expected.
    #[error(
        "this is a core WebAssembly module, not a component: build the plugin with \
         `--target wasm32-wasip2` (or wrap it with `wasm-tools component new`)"
    )]
    CoreModule,
    /// A WebAssembly binary of an unknown version or layer.
    #[error("unsupported WebAssembly binary version/layer {0:#010x}: expected a component")]
    UnknownLayer(u32),
    /// The component does not validate or compile.
    #[error("the component does not compile: {0:#}")]
    Compile(wasmtime::Error),
    /// The component needs more core instances than the pooling allocator gives one.
    #[error(
        "the component does not fit the host's instance pool: {0:#} (raise it with --max-core-instances-per-component / \
         WASMLOOP_MAX_CORE_INSTANCES_PER_COMPONENT)"
    )]
    TooManyCoreInstances(wasmtime::Error),
    /// The precompiled cache directory cannot be created or used.
    #[error("precompiled cache {dir}: {source}")]
    CacheDir {
        /// The cache directory.
        dir: PathBuf,
        /// The I/O error.
        source: std::io::Error,
    },
}

/// A result whose error is the engine's.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// The shared engine + linker. Cheap to clone.
#[derive(Clone)]
pub struct PluginEngine {
    inner: Arc<Inner>,
}

struct Inner {
    engine: Engine,
    linker: Linker<HostState>,
    limits: EngineLimits,
    /// Instance slots for reconciles: all but [`LOAD_SLOTS`], handed out first come, first
    /// served, so loading a plugin (`metadata()`) always finds an instance.
    reconcile_slots: Arc<tokio::sync::Semaphore>,
    /// Compiled functions kept between compiles, when the engine was made with them.
    functions: Option<Arc<FunctionCache>>,
    _ticker: Ticker,
}

/// Instance slots kept for loading plugins.
pub const LOAD_SLOTS: u32 = 2;

impl fmt::Debug for PluginEngine {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PluginEngine").field("limits", &self.inner.limits).finish_non_exhaustive()
    }
}

impl PluginEngine {
    /// An engine with default [`EngineLimits`].
    pub fn new() -> Result<Self> {
        Self::with_limits(EngineLimits::default())
    }

    /// An engine sized by `limits`.
    pub fn with_limits(limits: EngineLimits) -> Result<Self> {
        Self::build(limits, None)
    }

    /// An engine sized by `limits` that compiles only the functions `functions` does not hold
    /// yet (and adds those): for a process that compiles version after version of the same
    /// plugin (`wasmloop dev`). The code is the same as without it.
    pub fn with_function_cache(limits: EngineLimits, functions: Arc<FunctionCache>) -> Result<Self> {
        Self::build(limits, Some(functions))
    }

    fn build(limits: EngineLimits, functions: Option<Arc<FunctionCache>>) -> Result<Self> {
        let limits = super::address_space::fit(limits, super::address_space::limit());
        limits.validate()?;
        let mut config = config(&limits);
        if let Some(functions) = &functions {
            config.enable_incremental_compilation(functions.clone()).map_err(|e| Error::Engine(format!("{e:#}")))?;
        }
        let engine = Engine::new(&config).map_err(|e| Error::Engine(format!("{e:#}")))?;
        let mut linker = Linker::new(&engine);
        wasmtime_wasi::p2::add_to_linker_async(&mut linker).map_err(|e| Error::Engine(format!("WASI: {e:#}")))?;
        Controller::add_to_linker::<HostState, HasSelf<HostState>>(&mut linker, |s| s)
            .map_err(|e| Error::Engine(format!("wasmloop imports: {e:#}")))?;
        // Contract 0.2 and 0.1 plugins import the same interfaces under their own versions.
        v0_2::Controller::add_to_linker::<HostState, HasSelf<HostState>>(&mut linker, |s| s)
            .map_err(|e| Error::Engine(format!("wasmloop 0.2 imports: {e:#}")))?;
        v0_1::Controller::add_to_linker::<HostState, HasSelf<HostState>>(&mut linker, |s| s)
            .map_err(|e| Error::Engine(format!("wasmloop 0.1 imports: {e:#}")))?;
        let ticker = Ticker::start(engine.clone(), limits.epoch_tick)?;
        let slots = limits.instances.saturating_sub(LOAD_SLOTS).max(1) as usize;
        let reconcile_slots = Arc::new(tokio::sync::Semaphore::new(slots));
        Ok(Self { inner: Arc::new(Inner { engine, linker, limits, reconcile_slots, functions, _ticker: ticker }) })
    }

    /// The compiled functions kept between compiles, if this engine keeps them.
    pub fn function_cache(&self) -> Option<&FunctionCache> {
        self.inner.functions.as_deref()
    }

    /// The wasmtime engine.
    pub fn engine(&self) -> &Engine {
        &self.inner.engine
    }

    pub(crate) fn linker(&self) -> &Linker<HostState> {
        &self.inner.linker
    }

    /// The limits the engine was made with.
    pub fn limits(&self) -> &EngineLimits {
        &self.inner.limits
    }

    /// Whether memory slots are reset with `PAGEMAP_SCAN`: asked for
    /// ([`EngineLimits::pagemap_scan`]) and available on this kernel.
    pub fn resets_with_pagemap(&self) -> bool {
        resets_with_pagemap(&self.inner.limits)
    }

    /// The slots reconciles take an instance from (see [`LOAD_SLOTS`]).
    pub(crate) fn reconcile_slots(&self) -> &Arc<tokio::sync::Semaphore> {
        &self.inner.reconcile_slots
    }

    /// The epoch tick (granularity of timeouts).
    pub fn epoch_tick(&self) -> Duration {
        self.inner.limits.epoch_tick
    }

    /// Compile a component. **Blocking** (up to seconds): call it from `spawn_blocking`.
    pub fn compile(&self, bytes: &[u8]) -> Result<Component> {
        check_header(bytes)?;
        Component::from_binary(&self.inner.engine, bytes).map_err(|e| {
            // wasmtime's words for a component over `max_core_instances_per_component`.
            if format!("{e:#}").contains("core module instances, which exceeds the configured maximum") {
                Error::TooManyCoreInstances(e)
            } else {
                Error::Compile(e)
            }
        })
    }

    /// Hex of a sha256 over the engine's compatibility hash (wasmtime version, target, config).
    fn compatibility_key(&self) -> String {
        let mut h = Sha256Hasher(Sha256::new());
        self.inner.engine.precompile_compatibility_hash().hash(&mut h);
        hex::encode(h.0.finalize())
    }
}

/// Whether slots are reset with `PAGEMAP_SCAN`: asked for and available on this kernel.
fn resets_with_pagemap(limits: &EngineLimits) -> bool {
    limits.pagemap_scan && PoolingAllocationConfig::is_pagemap_scan_available()
}

fn config(limits: &EngineLimits) -> Config {
    // Every reconcile gets a fresh instance; its slot's memory is reset when it is dropped: by
    // default the first `keep_resident` bytes in place, the rest with `madvise` (the next call
    // then takes page faults on what it touches there: plugins with a small stack keep what a
    // call touches below `keep_resident`, see `KEEP_RESIDENT_PLAIN`). With `pagemap_scan`
    // (opt-in, see `EngineLimits::pagemap_scan` for why) only the pages the call wrote are
    // reset, in place: no `madvise`, no page faults next time.
    let pagemap = resets_with_pagemap(limits);
    let keep_resident = limits.keep_resident_for(pagemap).as_usize();
    let mut pool = PoolingAllocationConfig::default();
    pool.total_component_instances(limits.instances)
        .total_core_instances(limits.core_instances)
        .total_memories(limits.memories)
        .total_tables(limits.tables)
        .max_memory_size(limits.max_memory.as_usize())
        .max_core_instances_per_component(limits.max_core_instances_per_component)
        // One fiber stack per live instance (wasmtime's default is 1000: 2 GiB of address space).
        .total_stacks(limits.instances)
        .linear_memory_keep_resident(keep_resident)
        .table_keep_resident(keep_resident)
        .pagemap_scan(if pagemap { Enabled::Yes } else { Enabled::No });
    let mut cfg = Config::new();
    cfg.wasm_component_model(true)
        .epoch_interruption(true)
        .cranelift_opt_level(OptLevel::Speed)
        .parallel_compilation(true)
        .memory_init_cow(true)
        .max_wasm_stack(limits.max_wasm_stack.as_usize())
        .allocation_strategy(InstanceAllocationStrategy::Pooling(pool));
    if let Some(reservation) = limits.memory_reservation {
        cfg.memory_reservation(reservation.bytes()).memory_guard_size(super::address_space::EXPLICIT_GUARD);
    }
    cfg
}

/// Classify the first bytes: a component, a core module, or not Wasm at all.
pub(crate) fn check_header(bytes: &[u8]) -> Result<()> {
    if bytes.len() < 8 || &bytes[..4] != b"\0asm" {
        return Err(Error::NotWasm(bytes.len()));
    }
    let version = u32::from_le_bytes([bytes[4], bytes[5], bytes[6], bytes[7]]);
    match (version & 0xffff, version >> 16) {
        (1, 0) => Err(Error::CoreModule),
        (_, 1) => Ok(()),
        _ => Err(Error::UnknownLayer(version)),
    }
}

/// Increments the engine's epoch every tick until dropped.
struct Ticker {
    stop: Option<mpsc::Sender<()>>,
    thread: Option<JoinHandle<()>>,
}

impl Ticker {
    fn start(engine: Engine, tick: Duration) -> Result<Self> {
        let (stop, stopped) = mpsc::channel::<()>();
        let thread = std::thread::Builder::new()
            .name("wasm-epoch".into())
            .spawn(move || {
                while let Err(mpsc::RecvTimeoutError::Timeout) = stopped.recv_timeout(tick) {
                    engine.increment_epoch();
                }
            })
            .map_err(Error::Ticker)?;
        Ok(Self { stop: Some(stop), thread: Some(thread) })
    }
}

impl Drop for Ticker {
    fn drop(&mut self) {
        drop(self.stop.take());
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// A `Hasher` feeding sha256, for a stable key from `precompile_compatibility_hash`.
struct Sha256Hasher(Sha256);

impl Hasher for Sha256Hasher {
    fn finish(&self) -> u64 {
        let d = self.0.clone().finalize();
        u64::from_le_bytes([d[0], d[1], d[2], d[3], d[4], d[5], d[6], d[7]])
    }

    fn write(&mut self, bytes: &[u8]) {
        self.0.update(bytes);
    }
}

/// `sha256:<hex>` of `bytes`, as plugin digests are written everywhere.
pub fn digest(bytes: &[u8]) -> String {
    format!("sha256:{}", hex::encode(Sha256::digest(bytes)))
}

/// A compiled component and where it came from.
#[derive(Clone)]
pub struct Compiled {
    /// The component, ready to instantiate.
    pub component: Component,
    /// `sha256:<hex>` of the plugin bytes.
    pub digest: String,
    /// Size of the plugin bytes.
    pub size: usize,
    /// Compiled now, or read from the precompiled cache.
    pub origin: Origin,
    /// Time to compile, or to read and deserialise the cached artifact.
    pub elapsed: Duration,
}

impl fmt::Debug for Compiled {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Compiled")
            .field("digest", &self.digest)
            .field("size", &self.size)
            .field("origin", &self.origin)
            .field("elapsed", &self.elapsed)
            .finish()
    }
}

/// Where a [`Compiled`] came from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Origin {
    /// Compiled now (no cache, a miss, or a bad cache entry, whose problem is kept).
    Compiled {
        /// Why the cache did not serve it, if it had a bad entry.
        cache_problem: Option<String>,
    },
    /// Deserialised from the precompiled cache.
    CacheHit,
}

impl PluginEngine {
    /// Compile `bytes` without a cache. **Blocking.**
    pub fn compile_timed(&self, bytes: &[u8]) -> Result<Compiled> {
        let started = Instant::now();
        let component = self.compile(bytes)?;
        Ok(Compiled {
            component,
            digest: digest(bytes),
            size: bytes.len(),
            origin: Origin::Compiled { cache_problem: None },
            elapsed: started.elapsed(),
        })
    }
}

/// A directory of precompiled components: `<sha256 of plugin>-<engine key>.cwasm`, the artifact
/// itself, and beside it `<...>.cwasm.sha256`, the 32 bytes of its sha256.
///
/// Each file is written to a temp file and renamed into place, so a reader sees whole files. An
/// entry is checked against its checksum, then **mapped** from the file (not copied): its code
/// stays file-backed, so a loaded plugin holds in RAM only the pages it touches (a componentize-py
/// plugin's artifact is ~33 MiB; a copy of it per plugin would cost that much each), and memory
/// images can be mapped from it too. A missing, truncated, corrupt or incompatible entry (or one
/// of the older single-file format, whose checksum file is missing) is recompiled and rewritten,
/// never trusted. The directory must be private to the host: the artifacts are native code, and
/// an entry must not change between its check and its mapping (only this host writes there, each
/// file by rename).
#[derive(Clone, Debug)]
pub struct PrecompiledCache {
    dir: PathBuf,
    /// Total size of the artifacts kept; the least recently used go first past it.
    capacity: u64,
}

/// Default size cap of the precompiled cache directory.
pub const DEFAULT_PRECOMPILED_CAPACITY: u64 = 512 << 20;

const CHECKSUM: usize = 32;

impl PrecompiledCache {
    /// Use (and create) `dir`.
    pub fn new(dir: impl Into<PathBuf>) -> Result<Self> {
        Self::with_capacity(dir, DEFAULT_PRECOMPILED_CAPACITY)
    }

    /// Use (and create) `dir`, keeping at most `capacity` bytes of artifacts.
    pub fn with_capacity(dir: impl Into<PathBuf>, capacity: u64) -> Result<Self> {
        let dir = dir.into();
        std::fs::create_dir_all(&dir).map_err(|source| Error::CacheDir { dir: dir.clone(), source })?;
        Ok(Self { dir, capacity })
    }

    /// The directory holding the cached artifacts.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The file an artifact of `bytes` for `engine` lives in.
    pub fn path_for(&self, engine: &PluginEngine, bytes: &[u8]) -> PathBuf {
        let plugin = hex::encode(Sha256::digest(bytes));
        let key = engine.compatibility_key();
        self.dir.join(format!("{plugin}-{}.cwasm", &key[..16]))
    }

    /// The cached component of `bytes`, or compile it and store it. **Blocking.**
    /// Failing to write the cache is logged, not an error. (The plugin manager instead stores
    /// an artifact only after the plugin validated: [`Self::cached`], then [`Self::store`].)
    pub fn load_or_compile(&self, engine: &PluginEngine, bytes: &[u8]) -> Result<Compiled> {
        check_header(bytes)?;
        let cache_problem = match self.cached(engine, bytes) {
            Ok(Some(compiled)) => return Ok(compiled),
            Ok(None) => None,
            Err(problem) => Some(problem.to_string()),
        };
        let mut compiled = engine.compile_timed(bytes)?;
        compiled.origin = Origin::Compiled { cache_problem };
        self.store(engine, bytes, &compiled.component);
        Ok(compiled)
    }

    /// The cached component of `bytes`: `Ok(None)` when there is none, `Err(problem)` when
    /// the artifact is unusable (corrupt, from another engine; also logged). **Blocking.**
    pub fn cached(&self, engine: &PluginEngine, bytes: &[u8]) -> Result<Option<Compiled>, Unusable> {
        let path = self.path_for(engine, bytes);
        let started = Instant::now();
        match self.read(engine, &path) {
            Ok(Some(component)) => {
                // Recently used: eviction goes by modification time.
                let _ = std::fs::File::options().append(true).open(&path).and_then(|f| f.set_modified(std::time::SystemTime::now()));
                Ok(Some(Compiled {
                    component,
                    digest: digest(bytes),
                    size: bytes.len(),
                    origin: Origin::CacheHit,
                    elapsed: started.elapsed(),
                }))
            }
            Ok(None) => Ok(None),
            Err(problem) => {
                tracing::warn!(path = %path.display(), %problem, "precompiled artifact unusable; recompiling");
                Err(problem)
            }
        }
    }

    /// Keep the compiled `component` of `bytes`, then evict the least recently used artifacts
    /// past the capacity. **Blocking.** Failures are logged, not errors.
    pub fn store(&self, engine: &PluginEngine, bytes: &[u8], component: &Component) {
        let path = self.path_for(engine, bytes);
        if let Err(e) = self.write(component, &path) {
            tracing::warn!(path = %path.display(), error = %e, "cannot store precompiled artifact");
        }
        self.evict(&path);
    }

    /// Remove the oldest artifacts until the directory fits the capacity (never `keep`).
    fn evict(&self, keep: &Path) {
        let Ok(entries) = std::fs::read_dir(&self.dir) else { return };
        let mut files: Vec<(std::time::SystemTime, u64, PathBuf)> = entries
            .filter_map(std::result::Result::ok)
            .filter(|e| e.path().extension().is_some_and(|x| x == "cwasm"))
            .filter_map(|e| {
                let meta = e.metadata().ok()?;
                Some((meta.modified().ok()?, meta.len(), e.path()))
            })
            .collect();
        let mut total: u64 = files.iter().map(|f| f.1).sum();
        files.sort();
        for (_, len, path) in files {
            if total <= self.capacity {
                break;
            }
            if path != keep && std::fs::remove_file(&path).is_ok() {
                let _ = std::fs::remove_file(checksum_path(&path));
                tracing::info!(path = %path.display(), "precompiled cache over its capacity: evicted");
                total -= len;
            }
        }
    }

    /// Ok(None) when absent; Err(problem) when present but unusable.
    fn read(&self, engine: &PluginEngine, path: &Path) -> Result<Option<Component>, Unusable> {
        let mut file = match std::fs::File::open(path) {
            Ok(f) => f,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(Unusable::Read(e)),
        };
        let sum = match std::fs::read(checksum_path(path)) {
            Ok(sum) if sum.len() == CHECKSUM => sum,
            Ok(sum) => return Err(Unusable::ChecksumSize(sum.len())),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Err(Unusable::NoChecksum),
            Err(e) => return Err(Unusable::ReadChecksum(e)),
        };
        let mut hasher = Sha256::new();
        let len = std::io::copy(&mut file, &mut hasher).map_err(Unusable::Read)?;
        if len == 0 {
            return Err(Unusable::Empty);
        }
        if hasher.finalize().as_slice() != sum.as_slice() {
            return Err(Unusable::Mismatch);
        }
        // SAFETY: the artifact was produced by `Component::serialize` of this host (the
        // directory is host-private, its files written whole by rename) and its checksum
        // matches what was written; wasmtime additionally checks that it was compiled by a
        // compatible engine and refuses if not. The file is mapped, not copied: it must not
        // change while mapped, which holds as this host only ever replaces it by rename.
        #[allow(unsafe_code, reason = "mapping a checked artifact of this host: see SAFETY above")]
        let component = unsafe { Component::deserialize_file(engine.engine(), path) };
        component.map(Some).map_err(Unusable::Incompatible)
    }

    fn write(&self, component: &Component, path: &Path) -> std::io::Result<()> {
        let artifact = component.serialize().map_err(|e| std::io::Error::other(format!("{e:#}")))?;
        let put = |target: &Path, bytes: &[u8]| {
            let mut tmp = tempfile_in(&self.dir)?;
            let result = (|| {
                tmp.1.write_all(bytes)?;
                tmp.1.sync_all()?;
                std::fs::rename(&tmp.0, target)
            })();
            if result.is_err() {
                let _ = std::fs::remove_file(&tmp.0);
            }
            result
        };
        // The artifact first: a reader between the two renames sees a checksum that does not
        // match and recompiles; it never maps an artifact that did not pass its checksum.
        put(path, &artifact)?;
        put(&checksum_path(path), &Sha256::digest(&artifact))
    }
}

/// The checksum file of the artifact at `path`: `<path>.sha256`.
pub fn checksum_path(path: &Path) -> PathBuf {
    let mut p = path.as_os_str().to_owned();
    p.push(".sha256");
    PathBuf::from(p)
}

/// A new uniquely named file in `dir` (no extra dependency for a temp file).
fn tempfile_in(dir: &Path) -> std::io::Result<(PathBuf, std::fs::File)> {
    use std::sync::atomic::{AtomicU64, Ordering};
    static SEQ: AtomicU64 = AtomicU64::new(0);
    loop {
        let n = SEQ.fetch_add(1, Ordering::Relaxed);
        let path = dir.join(format!(".tmp-{}-{n}", std::process::id()));
        match std::fs::OpenOptions::new().write(true).create_new(true).open(&path) {
            Ok(f) => return Ok((path, f)),
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => continue,
            Err(e) => return Err(e),
        }
    }
}

/// Why a precompiled artifact cannot be used (it is then compiled again).
#[derive(Debug, thiserror::Error)]
pub enum Unusable {
    /// The artifact could not be read.
    #[error("read: {0}")]
    Read(std::io::Error),
    /// Its checksum file has the wrong size.
    #[error("checksum file of {0} bytes, not {CHECKSUM}")]
    ChecksumSize(usize),
    /// It has no checksum file.
    #[error("no checksum file (an older format?)")]
    NoChecksum,
    /// Its checksum file could not be read.
    #[error("read checksum: {0}")]
    ReadChecksum(std::io::Error),
    /// It is empty.
    #[error("empty artifact")]
    Empty,
    /// It does not match its checksum.
    #[error("checksum mismatch (corrupt file)")]
    Mismatch,
    /// wasmtime refuses it (another engine's, or invalid).
    #[error("incompatible or invalid artifact: {0:#}")]
    Incompatible(wasmtime::Error),
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn headers_are_classified() {
        assert!(matches!(check_header(b"hello world"), Err(Error::NotWasm(11))));
        assert!(matches!(check_header(b"\0asm\x01\0\0\0"), Err(Error::CoreModule)));
        assert!(check_header(b"\0asm\x0d\0\x01\0").is_ok());
        assert!(matches!(check_header(b"\0asm\x0d\0\x02\0"), Err(Error::UnknownLayer(_))));
        let msg = Error::CoreModule.to_string();
        assert!(msg.contains("core WebAssembly module, not a component"), "{msg}");
    }

    #[test]
    fn engine_starts_and_stops_its_ticker() {
        let engine = PluginEngine::with_limits(EngineLimits { instances: 4, ..EngineLimits::default() }).unwrap();
        assert_eq!(engine.compatibility_key(), engine.compatibility_key());
        assert_eq!(engine.compatibility_key().len(), 64);
        let clone = engine.clone();
        drop(engine);
        std::thread::sleep(Duration::from_millis(30));
        let started = Instant::now();
        drop(clone); // the last clone stops and joins the ticker thread
        assert!(started.elapsed() < Duration::from_millis(500), "ticker stopped promptly");
    }

    #[test]
    fn pagemap_resets_are_opt_in_and_need_the_kernel() {
        let small = EngineLimits { instances: 4, ..EngineLimits::default() };
        assert!(!PluginEngine::with_limits(small.clone()).unwrap().resets_with_pagemap(), "off by default");
        let asked = PluginEngine::with_limits(EngineLimits { pagemap_scan: true, ..small }).unwrap();
        assert_eq!(asked.resets_with_pagemap(), PoolingAllocationConfig::is_pagemap_scan_available());
    }

    #[test]
    fn the_precompiled_cache_maps_checked_artifacts_and_recompiles_bad_ones() {
        let engine = PluginEngine::with_limits(EngineLimits { instances: 4, ..EngineLimits::default() }).unwrap();
        let dir = std::env::temp_dir().join(format!("wasmloop-precompiled-unit-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let cache = PrecompiledCache::new(&dir).unwrap();
        // The smallest component: header only.
        let bytes = b"\0asm\x0d\0\x01\0";
        assert_eq!(cache.load_or_compile(&engine, bytes).unwrap().origin, Origin::Compiled { cache_problem: None });
        let path = cache.path_for(&engine, bytes);
        assert_eq!(std::fs::read(checksum_path(&path)).unwrap().len(), CHECKSUM, "the checksum beside the artifact");
        assert_eq!(cache.load_or_compile(&engine, bytes).unwrap().origin, Origin::CacheHit);
        fn problem(p: &str) -> impl Fn(&Origin) -> bool + '_ {
            move |o| matches!(o, Origin::Compiled { cache_problem: Some(x) } if x.contains(p))
        }
        // A changed byte, a missing checksum (the older format), a short checksum file.
        let mut data = std::fs::read(&path).unwrap();
        let mid = data.len() / 2;
        data[mid] ^= 0xff;
        std::fs::write(&path, &data).unwrap();
        let o = cache.load_or_compile(&engine, bytes).unwrap().origin;
        assert!(problem("checksum mismatch")(&o), "{o:?}");
        assert_eq!(cache.load_or_compile(&engine, bytes).unwrap().origin, Origin::CacheHit, "rewritten");
        std::fs::remove_file(checksum_path(&path)).unwrap();
        let o = cache.load_or_compile(&engine, bytes).unwrap().origin;
        assert!(problem("no checksum file")(&o), "{o:?}");
        std::fs::write(checksum_path(&path), b"short").unwrap();
        let o = cache.load_or_compile(&engine, bytes).unwrap().origin;
        assert!(problem("checksum file of 5 bytes")(&o), "{o:?}");
        assert_eq!(cache.load_or_compile(&engine, bytes).unwrap().origin, Origin::CacheHit);
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn core_modules_are_refused_before_compiling() {
        let engine = PluginEngine::with_limits(EngineLimits { instances: 4, ..EngineLimits::default() }).unwrap();
        // The smallest core module: header only.
        let err = engine.compile(b"\0asm\x01\0\0\0").unwrap_err();
        assert!(matches!(err, Error::CoreModule), "{err}");
        let err = engine.compile(b"\0asm\x0d\0\x01\0garbage").unwrap_err();
        assert!(matches!(err, Error::Compile(_)), "{err}");
    }
}
