//! Recording reconciles: what a call's Store captures ([`Capture`]) and where recordings go
//! ([`Recorder`]).
//!
//! A [`Capture`] rides in the call's [`super::host::HostState`]: every cache read is logged with
//! its answer, and the WASI context gets a wall clock, a monotonic clock and random generators
//! that log what they hand out. It exists only for a call being recorded: a plugin without a
//! recorder pays one `Option` check per read.
//!
//! A [`Recorder`] is a plugin's opt-in policy (which keys, or failures) and its writer: the
//! recordings it wants are handed to a thread of its own through a bounded queue, compressed,
//! written as `<dir>/<plugin>/<time>-<seq>-<key>.json.zst`, and the oldest beyond
//! [`RecordOptions::max_kept`] removed. Writing never blocks or fails a reconcile: a full queue,
//! a recording over the byte cap or a write error is logged and counted ([`RecorderStats`]).

use std::collections::BTreeSet;
use std::convert::Infallible;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use parking_lot::Mutex;
use rand_core::TryRng;
use wasmtime_wasi::clocks::{MonotonicClock, WallClock};
use wasmtime_wasi::{HostMonotonicClock, HostWallClock, WasiCtxBuilder};

use super::recording::{Answer, Call, FORMAT, Read, RecordedOutcome, RecordedRequest, Recording};
use crate::kinds::ObjectKey;

/// Recordings waiting for the writer; past this, new ones are dropped (and counted).
const QUEUE: usize = 16;

/// Why a recorder could not start.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The directory cannot be created.
    #[error("cannot create the recording directory {path}: {source}")]
    Dir {
        /// The directory.
        path: PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// The writer thread does not start.
    #[error("cannot start the recording writer: {0}")]
    Thread(#[source] std::io::Error),
    /// A `--record-key` that is not a key.
    #[error("invalid key to record {key:?}: {why}")]
    Key {
        /// The text given.
        key: String,
        /// Why it is not a key.
        why: String,
    },
}

/// What a call being recorded has seen so far.
#[derive(Debug, Default)]
struct Log {
    reads: Vec<Read>,
    wall: Vec<u64>,
    monotonic: Vec<u64>,
    resolution: Option<(u64, u64)>,
    random: Vec<u8>,
    insecure: Vec<u8>,
    seed: Option<u128>,
    /// Bytes kept (answers and random bytes), against `max`.
    kept: usize,
    max: usize,
    truncated: bool,
}

impl Log {
    /// Whether `bytes` more may be kept; past the cap, nothing more is (and it says so).
    fn keep(&mut self, bytes: usize) -> bool {
        if self.truncated || self.kept.saturating_add(bytes) > self.max {
            self.truncated = true;
            return false;
        }
        self.kept += bytes;
        true
    }
}

/// The inputs of one call being recorded: cache reads, clock readings, random bytes.
#[derive(Clone, Debug)]
pub(crate) struct Capture(Arc<Mutex<Log>>);

impl Capture {
    /// A capture keeping at most about `max_bytes` of answers and random bytes (uncompressed);
    /// what is over is left out and the recording marked truncated.
    pub(crate) fn new(max_bytes: usize) -> Self {
        Self(Arc::new(Mutex::new(Log { max: max_bytes, ..Log::default() })))
    }

    /// Log a cache read and its answer.
    pub(crate) fn read(&self, call: Call, answer: Answer, over_budget: bool) {
        let mut log = self.0.lock();
        if log.keep(answer.size()) {
            log.reads.push(Read { call, answer, over_budget });
        }
    }

    /// Give the WASI context clocks and random generators that log what they hand out.
    pub(crate) fn install(&self, builder: &mut WasiCtxBuilder) {
        let seed = {
            let mut rng = wasmtime_wasi::thread_rng();
            (u128::from(rng.next_u64()) << 64) | u128::from(rng.next_u64())
        };
        let (wall, monotonic) = (WallClock::new(), MonotonicClock::new());
        let resolution = (u64::try_from(wall.resolution().as_nanos()).unwrap_or(u64::MAX), monotonic.resolution());
        {
            let mut log = self.0.lock();
            log.seed = Some(seed);
            log.resolution = Some(resolution);
        }
        builder
            .wall_clock(RecordedWall { inner: wall, log: self.clone(), resolution: resolution.0 })
            .monotonic_clock(RecordedMonotonic { inner: monotonic, log: self.clone(), resolution: resolution.1 })
            .secure_random(RecordedRng { inner: wasmtime_wasi::thread_rng(), log: self.clone(), insecure: false })
            .insecure_random(RecordedRng { inner: wasmtime_wasi::thread_rng(), log: self.clone(), insecure: true })
            .insecure_random_seed(seed);
    }

    /// The recording of the call: its inputs, `request` and `outcome`.
    pub(crate) fn finish(&self, plugin: &PluginInfo<'_>, request: RecordedRequest, outcome: RecordedOutcome) -> Recording {
        let mut log = self.0.lock();
        let log = std::mem::take(&mut *log);
        Recording {
            format: FORMAT,
            plugin: plugin.name.to_owned(),
            version: plugin.version.to_owned(),
            digest: plugin.digest.to_owned(),
            recorded_at_ms: now_ms(),
            request,
            reads: log.reads,
            wall_clock: log.wall,
            monotonic_clock: log.monotonic,
            clock_resolution: log.resolution,
            random: hex::encode(log.random),
            insecure_random: hex::encode(log.insecure),
            insecure_seed: log.seed.map(|s| format!("{s:x}")),
            truncated: log.truncated,
            outcome,
        }
    }
}

/// Who a recording is of.
pub(crate) struct PluginInfo<'a> {
    pub name: &'a str,
    pub version: &'a str,
    pub digest: &'a str,
}

fn now_ms() -> u64 {
    let since = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default();
    u64::try_from(since.as_millis()).unwrap_or(u64::MAX)
}

struct RecordedWall {
    inner: WallClock,
    log: Capture,
    resolution: u64,
}

impl HostWallClock for RecordedWall {
    fn resolution(&self) -> Duration {
        Duration::from_nanos(self.resolution)
    }

    fn now(&self) -> Duration {
        let now = self.inner.now();
        let mut log = self.log.0.lock();
        if log.keep(8) {
            log.wall.push(u64::try_from(now.as_nanos()).unwrap_or(u64::MAX));
        }
        now
    }
}

struct RecordedMonotonic {
    inner: MonotonicClock,
    log: Capture,
    resolution: u64,
}

impl HostMonotonicClock for RecordedMonotonic {
    fn resolution(&self) -> u64 {
        self.resolution
    }

    fn now(&self) -> u64 {
        let now = self.inner.now();
        let mut log = self.log.0.lock();
        if log.keep(8) {
            log.monotonic.push(now);
        }
        now
    }
}

/// A random generator that logs the bytes it hands out, as one stream (a `u32` is 4 bytes,
/// little-endian): replay serves the same stream whichever calls draw it.
struct RecordedRng {
    inner: Box<dyn wasmtime_wasi::Rng + Send>,
    log: Capture,
    insecure: bool,
}

impl RecordedRng {
    fn logged(&self, bytes: &[u8]) {
        let mut log = self.log.0.lock();
        if log.keep(bytes.len()) {
            if self.insecure { log.insecure.extend_from_slice(bytes) } else { log.random.extend_from_slice(bytes) }
        }
    }
}

impl TryRng for RecordedRng {
    type Error = Infallible;

    fn try_next_u32(&mut self) -> Result<u32, Infallible> {
        let v = self.inner.next_u32();
        self.logged(&v.to_le_bytes());
        Ok(v)
    }

    fn try_next_u64(&mut self) -> Result<u64, Infallible> {
        let v = self.inner.next_u64();
        self.logged(&v.to_le_bytes());
        Ok(v)
    }

    fn try_fill_bytes(&mut self, dst: &mut [u8]) -> Result<(), Infallible> {
        self.inner.fill_bytes(dst);
        self.logged(dst);
        Ok(())
    }
}

/// Which reconciles a plugin's [`Recorder`] keeps, and how many.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RecordOptions {
    /// Recordings go to `<dir>/<plugin>/`.
    pub dir: PathBuf,
    /// Keys whose every reconcile is recorded (as [`ObjectKey`] prints them).
    pub keys: BTreeSet<String>,
    /// Record every failing reconcile (whatever its key).
    pub failures: bool,
    /// Recordings kept per plugin; the oldest beyond are removed.
    pub max_kept: usize,
    /// Largest recording written (compressed bytes); a larger one is dropped and counted.
    pub max_bytes: usize,
}

impl RecordOptions {
    /// Default recordings kept per plugin.
    pub const DEFAULT_MAX_KEPT: usize = 100;
    /// Default byte cap of one recording (compressed).
    pub const DEFAULT_MAX_BYTES: usize = 1 << 20;

    /// Options recording `keys` (parsed as keys) and/or failures into `dir`.
    pub fn new(dir: PathBuf, keys: &[String], failures: bool) -> Result<Self, Error> {
        let keys = keys
            .iter()
            .map(|k| k.parse::<ObjectKey>().map(|k| k.to_string()).map_err(|e| Error::Key { key: k.clone(), why: e.to_string() }))
            .collect::<Result<_, _>>()?;
        Ok(Self { dir, keys, failures, max_kept: Self::DEFAULT_MAX_KEPT, max_bytes: Self::DEFAULT_MAX_BYTES })
    }

    /// Whether any reconcile would be recorded.
    pub fn records_anything(&self) -> bool {
        self.failures || !self.keys.is_empty()
    }
}

/// Counts of one recorder's recordings.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RecorderStats {
    /// Recordings written.
    pub written: u64,
    /// Recordings dropped: the queue to the writer was full.
    pub dropped: u64,
    /// Recordings that failed to be written (over the byte cap, an I/O error).
    pub failed: u64,
    /// Old recordings removed to keep at most `max_kept`.
    pub removed: u64,
}

#[derive(Debug, Default)]
struct Counters {
    written: AtomicU64,
    dropped: AtomicU64,
    failed: AtomicU64,
    removed: AtomicU64,
}

/// A plugin's recorder: which reconciles to record, and the thread that writes them.
#[derive(Debug)]
pub struct Recorder {
    options: RecordOptions,
    dir: PathBuf,
    queue: Mutex<Option<std::sync::mpsc::SyncSender<Recording>>>,
    writer: Mutex<Option<std::thread::JoinHandle<()>>>,
    counters: Arc<Counters>,
}

impl Recorder {
    /// A recorder for `plugin`: creates `<dir>/<plugin>/` and starts its writer thread.
    pub fn start(options: RecordOptions, plugin: &str) -> Result<Arc<Self>, Error> {
        let dir = options.dir.join(sanitize(plugin));
        std::fs::create_dir_all(&dir).map_err(|source| Error::Dir { path: dir.clone(), source })?;
        let (tx, rx) = std::sync::mpsc::sync_channel::<Recording>(QUEUE);
        let counters = Arc::new(Counters::default());
        let writer = {
            let (dir, counters, max_kept, max_bytes) = (dir.clone(), counters.clone(), options.max_kept, options.max_bytes);
            std::thread::Builder::new()
                .name(format!("record-{plugin}"))
                .spawn(move || {
                    let mut seq = 0u64;
                    while let Ok(recording) = rx.recv() {
                        seq += 1;
                        write(&dir, seq, &recording, max_bytes, &counters);
                        prune(&dir, max_kept, &counters);
                    }
                })
                .map_err(Error::Thread)?
        };
        Ok(Arc::new(Self { options, dir, queue: Mutex::new(Some(tx)), writer: Mutex::new(Some(writer)), counters }))
    }

    /// The directory this plugin's recordings go to.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The options it records with.
    pub fn options(&self) -> &RecordOptions {
        &self.options
    }

    /// Whether a reconcile of `key` is recorded whatever its result.
    pub fn wants_key(&self, key: &ObjectKey) -> bool {
        !self.options.keys.is_empty() && self.options.keys.contains(&key.to_string())
    }

    /// Whether failing reconciles are recorded.
    pub fn wants_failures(&self) -> bool {
        self.options.failures
    }

    /// The cap on what one call's capture keeps in memory (uncompressed): a recording that
    /// compresses under `max_bytes` from more than 16 times as much is unlikely.
    pub(crate) fn capture_cap(&self) -> usize {
        self.options.max_bytes.saturating_mul(16)
    }

    /// Hand `recording` to the writer; never blocks (a full queue drops it, counted).
    pub(crate) fn submit(&self, recording: Recording) {
        let queue = self.queue.lock();
        let sent = queue.as_ref().is_some_and(|tx| tx.try_send(recording).is_ok());
        if !sent {
            self.counters.dropped.fetch_add(1, Ordering::Relaxed);
            tracing::warn!(target: "wasmloop::record", dir = %self.dir.display(), "a recording was dropped: the writer is behind");
        }
    }

    /// Wait until what was submitted is written (e.g. before reading the directory), and stop
    /// the writer: later recordings are dropped.
    pub fn flush(&self) {
        drop(self.queue.lock().take());
        if let Some(writer) = self.writer.lock().take() {
            let _ = writer.join();
        }
    }

    /// The counts so far.
    pub fn stats(&self) -> RecorderStats {
        let get = |a: &AtomicU64| a.load(Ordering::Relaxed);
        let c = &self.counters;
        RecorderStats { written: get(&c.written), dropped: get(&c.dropped), failed: get(&c.failed), removed: get(&c.removed) }
    }
}

/// A name safe in a file name: `[A-Za-z0-9._-]`, others as `_`.
fn sanitize(s: &str) -> String {
    s.chars().map(|c| if c.is_ascii_alphanumeric() || matches!(c, '.' | '-') { c } else { '_' }).collect()
}

fn write(dir: &Path, seq: u64, recording: &Recording, max_bytes: usize, counters: &Counters) {
    let name = format!("{:013}-{seq:06}-{}.json.zst", recording.recorded_at_ms, sanitize(&recording.request.key));
    let path = dir.join(&name);
    let written = recording.encode(max_bytes).map_err(|e| e.to_string()).and_then(|bytes| {
        let tmp = dir.join(format!(".{name}.tmp"));
        std::fs::write(&tmp, bytes).and_then(|()| std::fs::rename(&tmp, &path)).map_err(|e| {
            let _ = std::fs::remove_file(&tmp);
            e.to_string()
        })
    });
    match written {
        Ok(()) => {
            counters.written.fetch_add(1, Ordering::Relaxed);
            tracing::debug!(target: "wasmloop::record", path = %path.display(), "reconcile recorded");
        }
        Err(error) => {
            counters.failed.fetch_add(1, Ordering::Relaxed);
            tracing::warn!(target: "wasmloop::record", path = %path.display(), %error, "a recording was not written");
        }
    }
}

/// Remove the oldest recordings beyond `max_kept` (names sort by time).
fn prune(dir: &Path, max_kept: usize, counters: &Counters) {
    let Ok(entries) = std::fs::read_dir(dir) else { return };
    let mut names: Vec<PathBuf> = entries
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.file_name().and_then(|n| n.to_str()).is_some_and(|n| n.ends_with(".json.zst") && !n.starts_with('.')))
        .collect();
    if names.len() <= max_kept {
        return;
    }
    names.sort();
    for old in &names[..names.len() - max_kept] {
        if std::fs::remove_file(old).is_ok() {
            counters.removed.fetch_add(1, Ordering::Relaxed);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plugin::recording::{Kind, RecordedOutcome};

    fn info() -> PluginInfo<'static> {
        PluginInfo { name: "p", version: "1", digest: "sha256:00" }
    }

    fn request(key: &str) -> RecordedRequest {
        RecordedRequest { key: key.into(), reason: "event".into(), last_error: None }
    }

    #[test]
    fn a_capture_keeps_reads_and_random_bytes_within_its_cap() {
        let capture = Capture::new(10);
        let call =
            |name: &str| Call::Get { kind: Kind { api_version: "v1".into(), kind: "Pod".into() }, namespace: None, name: name.into() };
        capture.read(call("a"), Answer::Object(Some("123456".into())), false);
        let mut rng = RecordedRng { inner: wasmtime_wasi::thread_rng(), log: capture.clone(), insecure: false };
        let v = rng.try_next_u32().unwrap();
        capture.read(call("b"), Answer::Object(Some("x".into())), false);
        let rec = capture.finish(&info(), request("v1/Pod/a"), RecordedOutcome::default());
        assert_eq!(rec.reads.len(), 1, "the second read is over the cap");
        assert_eq!(rec.random, hex::encode(v.to_le_bytes()));
        assert!(rec.truncated);
    }

    #[test]
    fn the_recorder_writes_keeps_the_newest_and_counts() {
        let dir = tempfile::tempdir().unwrap();
        let mut options = RecordOptions::new(dir.path().to_path_buf(), &["v1/Pod/shop/web".to_string()], false).unwrap();
        options.max_kept = 2;
        let recorder = Recorder::start(options, "my plugin").unwrap();
        assert!(recorder.wants_key(&"v1/Pod/shop/web".parse().unwrap()));
        assert!(!recorder.wants_key(&"v1/Pod/shop/other".parse().unwrap()));
        assert!(!recorder.wants_failures());
        for i in 0..3 {
            let capture = Capture::new(1 << 20);
            let mut rec = capture.finish(&info(), request("v1/Pod/shop/web"), RecordedOutcome::default());
            rec.recorded_at_ms = 1000 + i;
            recorder.submit(rec);
        }
        recorder.flush();
        let stats = recorder.stats();
        assert_eq!((stats.written, stats.removed, stats.failed), (3, 1, 0), "{stats:?}");
        let mut names: Vec<String> =
            std::fs::read_dir(recorder.dir()).unwrap().map(|e| e.unwrap().file_name().into_string().unwrap()).collect();
        names.sort();
        assert_eq!(recorder.dir(), dir.path().join("my_plugin"));
        assert_eq!(names, ["0000000001001-000002-v1_Pod_shop_web.json.zst", "0000000001002-000003-v1_Pod_shop_web.json.zst"]);
        let back = Recording::decode(&std::fs::read(recorder.dir().join(&names[1])).unwrap()).unwrap();
        assert_eq!(back.recorded_at_ms, 1002);
        // After flush the writer is gone: a recording is dropped, not blocked on.
        recorder.submit(capture_of("v1/Pod/shop/web"));
        assert_eq!(recorder.stats().dropped, 1);
    }

    fn capture_of(key: &str) -> Recording {
        Capture::new(1 << 20).finish(&info(), request(key), RecordedOutcome::default())
    }

    #[test]
    fn a_recording_over_the_byte_cap_is_counted_not_written() {
        let dir = tempfile::tempdir().unwrap();
        let mut options = RecordOptions::new(dir.path().to_path_buf(), &[], true).unwrap();
        options.max_bytes = 10;
        let recorder = Recorder::start(options, "p").unwrap();
        recorder.submit(capture_of("v1/Pod/a"));
        recorder.flush();
        assert_eq!(recorder.stats().failed, 1);
        assert_eq!(std::fs::read_dir(recorder.dir()).unwrap().count(), 0);
        assert!(RecordOptions::new(dir.path().to_path_buf(), &["not a key".to_string()], false).is_err());
    }
}
