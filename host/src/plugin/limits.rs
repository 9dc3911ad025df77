//! Every limit of the plugin runtime in one place.
//!
//! - [`Limits`]: per plugin, from its manifest (`limits:` in `plugin.yaml`): memory, time and
//!   output budgets of one reconcile.
//! - [`EngineLimits`]: process-wide, sizing the pooling allocator all plugins share.
//! - [`LoadLimits`]: per host, what one plugin may be at load: its component's size and the time
//!   compiling it may take.
//!
//! The defaults admit what the JavaScript and Python toolchains produce (a componentize-py
//! component is ~18 MB, ~30 core instances, ~26 s to compile on two busy cores; StarlingMonkey's
//! ~12 MB and ~34 s); `wasmloop run`, `inspect`, `reconcile` and `dev` take the same flags
//! (`--max-component-size`, `--max-core-instances-per-component`, `--compile-budget`) over them.
//!
//! Memory sizes are written like Kubernetes quantities (`"64Mi"`, `"1Gi"`, `"512Ki"`, `"100M"`)
//! or as a plain number of bytes; durations like Go (`"1s"`, `"500ms"`).

use std::fmt;
use std::time::Duration;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

const KI: u64 = 1 << 10;
const MI: u64 = 1 << 20;
const GI: u64 = 1 << 30;
/// A Wasm page.
pub const WASM_PAGE: u64 = 64 * KI;

/// Limits that do not fit.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Error {
    /// A size that does not parse.
    #[error("invalid memory size {input:?}: {reason} (write e.g. \"64Mi\", \"1Gi\" or a number of bytes)")]
    InvalidSize {
        /// The text given.
        input: String,
        /// What is wrong with it.
        reason: &'static str,
    },
    /// A plugin's memory limit above the engine's per-plugin maximum.
    #[error("limits.memory {memory} is larger than the host's per-plugin maximum {max} (engine maxMemory)")]
    MemoryAboveEngineMax {
        /// The plugin's limit.
        memory: ByteSize,
        /// The engine's maximum.
        max: ByteSize,
    },
    /// A plugin's memory limit below one page.
    #[error("limits.memory {0} is below one Wasm page (64Ki)")]
    MemoryTooSmall(ByteSize),
    /// A zero timeout.
    #[error("limits.timeout must be positive")]
    ZeroTimeout,
    /// Engine limits that do not fit together.
    #[error("engine limits: {0}")]
    Engine(String),
    /// A maximum component size above the hard cap.
    #[error("max component size {size} is above the host's hard cap of {cap} (what a payload may decompress to)")]
    ComponentSizeAboveCap {
        /// The maximum asked for.
        size: ByteSize,
        /// The hard cap.
        cap: ByteSize,
    },
    /// A zero compile budget.
    #[error("the compile budget must be positive")]
    ZeroCompileBudget,
    /// A component larger than the maximum component size.
    #[error(
        "the component is {size} bytes, over the host's {limit} limit for one plugin (raise it with \
         --max-component-size / WASMLOOP_MAX_COMPONENT_SIZE)"
    )]
    ComponentTooLarge {
        /// The component's size in bytes.
        size: u64,
        /// The maximum component size.
        limit: ByteSize,
    },
    /// Compiling took longer than the compile budget.
    #[error(
        "compiling and validating took {took}, longer than the {budget} budget; refused (raise it with \
         --compile-budget / WASMLOOP_COMPILE_BUDGET)"
    )]
    CompileOverBudget {
        /// How long it took.
        took: String,
        /// The budget.
        budget: String,
    },
}

/// A result whose error is a limit that does not fit.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// A number of bytes that reads and writes as a quantity (`"64Mi"`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct ByteSize(pub u64);

impl ByteSize {
    /// `n` KiB (1024 bytes).
    pub const fn kib(n: u64) -> Self {
        Self(n * KI)
    }

    /// `n` MiB (1024 KiB).
    pub const fn mib(n: u64) -> Self {
        Self(n * MI)
    }

    /// The number of bytes.
    pub const fn bytes(self) -> u64 {
        self.0
    }

    /// As a `usize` (saturating on 32-bit hosts).
    pub fn as_usize(self) -> usize {
        usize::try_from(self.0).unwrap_or(usize::MAX)
    }

    /// Parse `"64Mi"`, `"1Gi"`, `"512Ki"`, `"100M"`, `"1k"` or `"1048576"`.
    pub fn parse(input: &str) -> Result<Self> {
        let invalid = |reason| Error::InvalidSize { input: input.to_owned(), reason };
        let text = input.trim();
        let digits = text.find(|c: char| !c.is_ascii_digit()).unwrap_or(text.len());
        let (number, unit) = text.split_at(digits);
        if number.is_empty() {
            return Err(invalid("missing number"));
        }
        let n: u64 = number.parse().map_err(|_| invalid("number too large"))?;
        let scale = match unit.trim() {
            "" => 1,
            "Ki" => KI,
            "Mi" => MI,
            "Gi" => GI,
            "k" | "K" => 1_000,
            "M" => 1_000_000,
            "G" => 1_000_000_000,
            _ => return Err(invalid("unknown unit (use Ki, Mi, Gi, k, M or G)")),
        };
        n.checked_mul(scale).map(ByteSize).ok_or_else(|| invalid("number too large"))
    }
}

impl fmt::Display for ByteSize {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let b = self.0;
        match b {
            0 => write!(f, "0"),
            _ if b.is_multiple_of(GI) => write!(f, "{}Gi", b / GI),
            _ if b.is_multiple_of(MI) => write!(f, "{}Mi", b / MI),
            _ if b.is_multiple_of(KI) => write!(f, "{}Ki", b / KI),
            _ => write!(f, "{b}"),
        }
    }
}

impl Serialize for ByteSize {
    fn serialize<S: Serializer>(&self, s: S) -> std::result::Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for ByteSize {
    fn deserialize<D: Deserializer<'de>>(d: D) -> std::result::Result<Self, D::Error> {
        #[derive(Deserialize)]
        #[serde(untagged)]
        enum Raw {
            Bytes(u64),
            Text(String),
        }
        match Raw::deserialize(d)? {
            Raw::Bytes(n) => Ok(ByteSize(n)),
            Raw::Text(t) => ByteSize::parse(&t).map_err(serde::de::Error::custom),
        }
    }
}

/// What one plugin may use per reconcile.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default, deny_unknown_fields)]
pub struct Limits {
    /// Linear memory cap of one instance (default 64Mi). Growing past it fails in the guest.
    pub memory: ByteSize,
    /// Wall-clock budget of one call, enforced by epoch interruption (default 1s).
    #[serde(with = "crate::duration::serde")]
    pub timeout: Duration,
    /// stdout + stderr kept per call and forwarded to the log; the rest is dropped (default 16Ki).
    pub output: ByteSize,
    /// Output one plugin may send to the log per minute, all calls together (default 1Mi).
    pub output_per_minute: ByteSize,
    /// Cache data (object JSON) one call may read, all reads together; past it reads fail and
    /// so does the reconcile (default: 4 × `memory`).
    pub reads_per_call: Option<ByteSize>,
    /// Most actions one reconcile may return (default 1000).
    pub max_actions: u32,
    /// Table elements per instance (default 20000).
    pub table_elements: u32,
}

impl Default for Limits {
    fn default() -> Self {
        Self {
            memory: ByteSize::mib(64),
            timeout: Duration::from_secs(1),
            output: ByteSize(16 * KI),
            output_per_minute: ByteSize(KI * KI),
            reads_per_call: None,
            max_actions: 1000,
            table_elements: 20_000,
        }
    }
}

impl Limits {
    /// The per-call read budget: `reads_per_call`, else 4 × `memory`.
    pub fn read_budget(&self) -> ByteSize {
        self.reads_per_call.unwrap_or(ByteSize(self.memory.0.saturating_mul(4)))
    }

    /// Check these limits against what the engine can host.
    pub fn validate(&self, engine: &EngineLimits) -> Result<()> {
        if self.memory.0 < WASM_PAGE {
            return Err(Error::MemoryTooSmall(self.memory));
        }
        if self.memory > engine.max_memory {
            return Err(Error::MemoryAboveEngineMax { memory: self.memory, max: engine.max_memory });
        }
        if self.timeout.is_zero() {
            return Err(Error::ZeroTimeout);
        }
        Ok(())
    }

    /// Epoch ticks to allow for the timeout: rounded up, plus one because the current tick may be
    /// almost over when the call starts.
    pub fn deadline_ticks(&self, tick: Duration) -> u64 {
        let tick = tick.as_nanos().max(1);
        u64::try_from(self.timeout.as_nanos().div_ceil(tick)).unwrap_or(u64::MAX).saturating_add(1)
    }
}

impl fmt::Display for Limits {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "memory {}, timeout {}, output {}, max {} actions",
            self.memory,
            crate::duration::format(self.timeout),
            self.output,
            self.max_actions
        )
    }
}

/// Process-wide sizing of the pooling allocator shared by all plugins, and the epoch tick.
///
/// Every live Store (one per reconcile in flight, plus one briefly at load) takes one component
/// instance slot; a Rust `wasm32-wasip2` component needs a handful of core instances and tables
/// and one memory. Slots are reserved as virtual memory up front and committed on use, so large
/// pools cost address space, not RAM.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default, deny_unknown_fields)]
pub struct EngineLimits {
    /// Component instances alive at once (= reconciles in flight across all plugins).
    pub instances: u32,
    /// Core instances per pool (several per component).
    pub core_instances: u32,
    /// Linear memories per pool.
    pub memories: u32,
    /// Tables per pool.
    pub tables: u32,
    /// Largest linear memory any plugin may be granted (upper bound for `Limits::memory`).
    pub max_memory: ByteSize,
    /// Core instances one component may have (default
    /// [`DEFAULT_MAX_CORE_INSTANCES_PER_COMPONENT`]; a component with more is refused at load).
    pub max_core_instances_per_component: u32,
    /// Memory kept resident per linear memory (and table) slot between calls, reset in place
    /// instead of being given back to the kernel: no page faults on the next call, more RSS
    /// (at most this much per slot ever used). Default: 1Mi with [`Self::pagemap_scan`] (only
    /// the pages a call wrote are reset); 512Ki otherwise (the first `keepResident` bytes, or
    /// the whole memory if it is smaller, are restored in place on every call, the rest given
    /// back with `madvise`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub keep_resident: Option<ByteSize>,
    /// Reset memory slots with Linux's `PAGEMAP_SCAN` ioctl (kernel 6.7+; ignored where it is
    /// missing): a trivial reconcile costs ~13 µs instead of ~28 µs. **Off by default**: in
    /// wasmtime 48 the scan skips written pages that are not present at that instant (swapped
    /// out, or in the middle of a page migration), so such a page would keep the previous
    /// call's contents for the next instance of the same plugin (bytecodealliance/wasmtime#14357).
    /// Turn it on only on nodes without swap, accepting that rare race with migration.
    pub pagemap_scan: bool,
    /// Epoch tick: the granularity of timeouts.
    #[serde(with = "crate::duration::serde")]
    pub epoch_tick: Duration,
    /// Guest call stack size.
    pub max_wasm_stack: ByteSize,
    /// Address space reserved per linear memory slot (slots are at least `max_memory`). `None`:
    /// wasmtime's 4 GiB and a 32 MiB guard, which spare compiled plugins their bounds checks,
    /// unless the process has an address-space limit (`RLIMIT_AS`): then `max_memory` (see
    /// [`super::address_space`]). A reservation below 4 GiB makes compiled code check bounds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub memory_reservation: Option<ByteSize>,
}

impl Default for EngineLimits {
    fn default() -> Self {
        Self {
            instances: 128,
            core_instances: 1024,
            memories: 256,
            tables: 1024,
            max_memory: ByteSize::mib(1024),
            max_core_instances_per_component: DEFAULT_MAX_CORE_INSTANCES_PER_COMPONENT,
            keep_resident: None,
            pagemap_scan: false,
            epoch_tick: Duration::from_millis(10),
            max_wasm_stack: ByteSize(KI * 512),
            memory_reservation: None,
        }
    }
}

/// [`EngineLimits::keep_resident`] with [`EngineLimits::pagemap_scan`]: a trivial reconcile
/// writes a few dozen pages (stack, data, heap), so their reset is a copy of those alone.
pub const KEEP_RESIDENT_PAGEMAP: ByteSize = ByteSize::mib(1);
/// [`EngineLimits::keep_resident`] without `PAGEMAP_SCAN`: restored in full on every call (a
/// `memset`, and a copy of the module's initial data). Plugins built with a 128 KiB stack (this
/// workspace's `.cargo/config.toml`, and `wasmloop new`'s) keep their stack, static data and a
/// 100-Pod replicaset reconcile's heap within it: no page faults on the next call (13 → 0 per
/// 10-Pod call, 73 → 0 per 100-Pod call, measured with getrusage). With Rust's default 1 MiB
/// stack the window only covers the unused bottom of the stack, and each call pays the copy
/// for nothing (within the noise of a trivial call here).
pub const KEEP_RESIDENT_PLAIN: ByteSize = ByteSize::kib(512);

impl EngineLimits {
    /// The bytes to keep resident per slot: [`Self::keep_resident`] or the default for whether
    /// slots are reset with `PAGEMAP_SCAN`.
    pub fn keep_resident_for(&self, pagemap_scan: bool) -> ByteSize {
        self.keep_resident.unwrap_or(if pagemap_scan { KEEP_RESIDENT_PAGEMAP } else { KEEP_RESIDENT_PLAIN })
    }

    /// A pool for a command that runs one call at a time (`inspect`, `reconcile`, `replay`,
    /// `pack`): 4 instances (2 of them for loading), room for two components' core instances and
    /// tables at once, 16 memories, each as large as `max_memory` (the plugin's own
    /// `limits.memory`), so it fits a modest `RLIMIT_AS`.
    pub fn offline(max_memory: ByteSize, max_core_instances_per_component: u32) -> Self {
        let per_two_components = max_core_instances_per_component.saturating_mul(2);
        Self {
            instances: 4,
            core_instances: per_two_components,
            memories: 16,
            tables: per_two_components,
            max_memory,
            max_core_instances_per_component,
            ..Self::default()
        }
    }

    /// Check that the engine limits are positive and fit together.
    pub fn validate(&self) -> Result<()> {
        let fail = |m: &str| Err(Error::Engine(m.to_owned()));
        if self.instances == 0 || self.core_instances == 0 || self.memories == 0 || self.tables == 0 {
            return fail("instances, coreInstances, memories and tables must be positive");
        }
        if self.max_core_instances_per_component == 0 || self.max_core_instances_per_component > self.core_instances {
            return fail("maxCoreInstancesPerComponent must be positive and at most coreInstances");
        }
        if self.max_memory.0 < WASM_PAGE {
            return fail("maxMemory must be at least 64Ki");
        }
        if self.epoch_tick.is_zero() {
            return fail("epochTick must be positive");
        }
        if self.max_wasm_stack.0 < 64 * KI {
            return fail("maxWasmStack must be at least 64Ki");
        }
        if self.memory_reservation.is_some_and(|r| r.0 < WASM_PAGE) {
            return fail("memoryReservation must be at least 64Ki");
        }
        Ok(())
    }
}

/// Core instances one component may have by default. A Rust plugin has a handful, a
/// componentize-py one ~30 (38 with `--stub-wasi`), QuickJS and StarlingMonkey ones fewer.
pub const DEFAULT_MAX_CORE_INSTANCES_PER_COMPONENT: u32 = 64;
/// Largest component (decompressed) the host loads by default: a componentize-py component is
/// ~18 MB, a StarlingMonkey one ~12 MB.
pub const DEFAULT_MAX_COMPONENT_SIZE: ByteSize = ByteSize::mib(32);
/// The most [`LoadLimits::max_component_size`] may be raised to: what a payload may decompress
/// to at all (a compression bomb is cut off here, whatever the flags say).
pub const MAX_COMPONENT_SIZE_CAP: ByteSize = ByteSize::mib(64);
/// How long compiling and validating one plugin may take by default: a componentize-py
/// component takes ~26 s, a StarlingMonkey one ~34 s on two busy cores (a precompiled-cache hit
/// takes milliseconds).
pub const DEFAULT_COMPILE_BUDGET: Duration = Duration::from_secs(120);

/// What the host accepts of one plugin at load, beyond the engine's sizing: set per host process
/// (the same flags on `wasmloop run`, `inspect`, `reconcile` and `dev`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LoadLimits {
    /// Largest component (decompressed) one plugin may be.
    pub max_component_size: ByteSize,
    /// How long compiling (or deserialising) and validating one plugin may take.
    pub compile_budget: Duration,
}

impl Default for LoadLimits {
    fn default() -> Self {
        Self { max_component_size: DEFAULT_MAX_COMPONENT_SIZE, compile_budget: DEFAULT_COMPILE_BUDGET }
    }
}

impl LoadLimits {
    /// Check the limits themselves: the size within [`MAX_COMPONENT_SIZE_CAP`], a positive budget.
    pub fn validate(&self) -> Result<()> {
        if self.max_component_size > MAX_COMPONENT_SIZE_CAP {
            return Err(Error::ComponentSizeAboveCap { size: self.max_component_size, cap: MAX_COMPONENT_SIZE_CAP });
        }
        if self.compile_budget.is_zero() {
            return Err(Error::ZeroCompileBudget);
        }
        Ok(())
    }

    /// Refuse a component of `size` bytes over [`Self::max_component_size`].
    pub fn check_size(&self, size: usize) -> Result<()> {
        let size = size as u64;
        if size > self.max_component_size.bytes() {
            return Err(Error::ComponentTooLarge { size, limit: self.max_component_size });
        }
        Ok(())
    }

    /// Refuse a load that took `took`, over [`Self::compile_budget`] (for the offline commands,
    /// which compile on the calling thread; the host abandons the compile at the budget).
    pub fn check_compile_time(&self, took: Duration) -> Result<()> {
        if took > self.compile_budget {
            return Err(Error::CompileOverBudget {
                took: crate::duration::format(Duration::from_millis(u64::try_from(took.as_millis()).unwrap_or(u64::MAX))),
                budget: crate::duration::format(self.compile_budget),
            });
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn load_limits_admit_the_js_and_python_toolchains() {
        let l = LoadLimits::default();
        assert!(l.validate().is_ok());
        // componentize-py 0.25.1: 18.4 MB; componentize-js 0.23 (StarlingMonkey): 12.2 MB.
        assert!(l.check_size(18_400_000).is_ok() && l.check_size(12_200_000).is_ok());
        // Their compile times on two busy cores: 26 s and 34 s.
        assert!(l.check_compile_time(Duration::from_secs(34)).is_ok());
        // componentize-py --stub-wasi: 38 core instances.
        assert!(EngineLimits::default().max_core_instances_per_component >= 38);
        let err = l.check_size(40 << 20).unwrap_err().to_string();
        assert!(err.contains("41943040 bytes, over the host's 32Mi limit") && err.contains("--max-component-size"), "{err}");
        let err = l.check_compile_time(Duration::from_millis(121_500) + Duration::from_nanos(7)).unwrap_err().to_string();
        assert!(err.contains("took 121500ms"), "whole milliseconds: {err}");
        assert!(err.contains("longer than the 2m budget") || err.contains("longer than the 120s budget"), "{err}");
        assert!(err.contains("--compile-budget"), "{err}");
        let big = LoadLimits { max_component_size: ByteSize::mib(65), ..LoadLimits::default() };
        assert!(matches!(big.validate(), Err(Error::ComponentSizeAboveCap { .. })));
        assert!(LoadLimits { compile_budget: Duration::ZERO, ..LoadLimits::default() }.validate().is_err());
        let e = EngineLimits { max_core_instances_per_component: 0, ..EngineLimits::default() };
        assert!(e.validate().is_err());
        let e = EngineLimits { max_core_instances_per_component: 2048, ..EngineLimits::default() };
        assert!(e.validate().is_err(), "more per component than the pool holds");
    }

    #[test]
    fn parses_sizes() {
        assert_eq!(ByteSize::parse("64Mi").unwrap(), ByteSize(64 << 20));
        assert_eq!(ByteSize::parse("1Gi").unwrap(), ByteSize(1 << 30));
        assert_eq!(ByteSize::parse("512Ki").unwrap(), ByteSize(512 << 10));
        assert_eq!(ByteSize::parse("100M").unwrap(), ByteSize(100_000_000));
        assert_eq!(ByteSize::parse(" 4096 ").unwrap(), ByteSize(4096));
        for bad in ["", "Mi", "64Mb", "-1Mi", "1.5Gi", "99999999999999999999Gi", "64 Mi x"] {
            assert!(ByteSize::parse(bad).is_err(), "{bad:?} should be rejected");
        }
        assert_eq!(ByteSize(64 << 20).to_string(), "64Mi");
        assert_eq!(ByteSize(1 << 30).to_string(), "1Gi");
        assert_eq!(ByteSize(1000).to_string(), "1000");
    }

    #[test]
    fn limits_from_yaml_with_defaults() {
        let l: Limits = serde_saphyr::from_str("memory: 128Mi\ntimeout: 500ms\n").unwrap();
        assert_eq!(l.memory, ByteSize::mib(128));
        assert_eq!(l.timeout, Duration::from_millis(500));
        assert_eq!(l.max_actions, Limits::default().max_actions);
        let l: Limits = serde_saphyr::from_str("memory: 1048576\nmaxActions: 5\n").unwrap();
        assert_eq!(l.memory, ByteSize(1 << 20));
        assert_eq!(l.timeout, Duration::from_secs(1));
        assert_eq!(l.max_actions, 5);
        let l: Limits = serde_json::from_str("{}").unwrap();
        assert_eq!(l, Limits::default());
        assert!(serde_saphyr::from_str::<Limits>("memry: 1Mi\n").is_err(), "unknown keys are refused");
        let err = serde_saphyr::from_str::<Limits>("timeout: 1x\n").unwrap_err().to_string();
        assert!(err.contains("invalid duration"), "{err}");
        let err = serde_saphyr::from_str::<Limits>("memory: 64MB\n").unwrap_err().to_string();
        assert!(err.contains("invalid memory size"), "{err}");
    }

    #[test]
    fn serialises_as_quantities() {
        let json = serde_json::to_value(Limits::default()).unwrap();
        assert_eq!(json["memory"], "64Mi");
        assert_eq!(json["timeout"], "1s");
        let back: Limits = serde_json::from_value(json).unwrap();
        assert_eq!(back, Limits::default());
    }

    #[test]
    fn validates_against_the_engine() {
        let engine = EngineLimits::default();
        assert!(Limits::default().validate(&engine).is_ok());
        let big = Limits { memory: ByteSize::mib(4096), ..Limits::default() };
        let err = big.validate(&engine).unwrap_err().to_string();
        assert!(err.contains("4Gi is larger than the host's per-plugin maximum 1Gi"), "{err}");
        assert!(Limits { memory: ByteSize(1000), ..Limits::default() }.validate(&engine).is_err());
        assert!(Limits { timeout: Duration::ZERO, ..Limits::default() }.validate(&engine).is_err());
        assert!(engine.validate().is_ok());
        assert!(EngineLimits { instances: 0, ..engine.clone() }.validate().is_err());
        let e: EngineLimits = serde_saphyr::from_str("instances: 16\nepochTick: 5ms\n").unwrap();
        assert_eq!((e.instances, e.epoch_tick), (16, Duration::from_millis(5)));
        assert_eq!((e.keep_resident_for(true), e.keep_resident_for(false)), (ByteSize::mib(1), ByteSize::kib(512)));
        assert!(!e.pagemap_scan, "PAGEMAP_SCAN resets are opt-in");
        let e: EngineLimits = serde_saphyr::from_str("keepResident: 256Ki\npagemapScan: true\n").unwrap();
        assert!(e.pagemap_scan);
        assert_eq!((e.keep_resident_for(true), e.keep_resident_for(false)), (ByteSize::kib(256), ByteSize::kib(256)));
    }

    #[test]
    fn deadline_rounds_up_plus_one_tick() {
        let tick = Duration::from_millis(10);
        let l = |ms| Limits { timeout: Duration::from_millis(ms), ..Limits::default() };
        assert_eq!(l(1000).deadline_ticks(tick), 101);
        assert_eq!(l(5).deadline_ticks(tick), 2);
        assert_eq!(l(15).deadline_ticks(tick), 3);
    }
}
