//! The address space the engine reserves, and the process's address-space limit (`RLIMIT_AS`,
//! `ulimit -v`).
//!
//! The pooling allocator reserves, when the engine is created, one slot for every linear
//! memory, table and fiber stack the pool can hold at once. A reservation is address space, not
//! memory: the slots are `PROT_NONE` until an instance uses them, and what a call touches is
//! given back when it ends; a cgroup memory limit (a container's) never sees it. But
//! `RLIMIT_AS` counts it. With wasmtime's defaults every memory slot is 4 GiB plus a 32 MiB
//! guard, so that compiled plugins need no bounds checks: the default pool (128 instances, 256
//! memories) reserves about 1 TiB.
//!
//! So, under a finite `RLIMIT_AS`, an engine without an explicit [`EngineLimits::memory_reservation`]
//! sizes each memory slot to the largest memory a plugin may have (`max_memory`, with a 64 KiB
//! guard; compiled code then checks bounds), and `wasmloop run` refuses to start when even that
//! pool does not fit, saying what it needs and which flags size it ([`check`]).

use std::fmt;

use super::limits::{ByteSize, EngineLimits};

const KI: u64 = 1 << 10;
const MI: u64 = 1 << 20;
const GI: u64 = 1 << 30;

/// wasmtime's default memory reservation on 64-bit hosts (bounds checks elided).
pub const DEFAULT_RESERVATION: u64 = 4 * GI;
/// wasmtime's default guard after (and before) each memory slot.
pub const DEFAULT_GUARD: u64 = 32 * MI;
/// The guard with an explicit reservation: offsets past it are bounds-checked anyway.
pub const EXPLICIT_GUARD: u64 = 64 * KI;
/// One fiber stack of the pool: wasmtime's `async_stack_size` (2 MiB) and a guard page.
const STACK_SLOT: u64 = 2 * MI + 4 * KI;
/// One table slot of the pool: 20 000 elements (wasmtime's default) of 16 bytes, page-rounded.
const TABLE_SLOT: u64 = (20_000 * 16u64).div_ceil(4 * KI) * 4 * KI;
/// What the rest of the host needs beside the pool: heap, thread stacks and allocator arenas,
/// the binary, compiled plugins (a Python plugin's code is ~33 MiB), the caches. Sized with room
/// to spare: the host alone (no plugin) maps ~1.2 GiB, most of it glibc's per-thread malloc
/// arenas (64 MiB each), reserved but never touched.
pub const HEADROOM: u64 = 2 * GI;

/// The address-space limit of this process (`RLIMIT_AS`, soft), `None` when unlimited.
pub fn limit() -> Option<u64> {
    rustix::process::getrlimit(rustix::process::Resource::As).current
}

/// `limits` as an engine in a process limited to `limit` bytes of address space builds them:
/// under a limit, memory slots as large as `max_memory` rather than wasmtime's 4 GiB (unless
/// [`EngineLimits::memory_reservation`] says otherwise).
pub fn fit(mut limits: EngineLimits, limit: Option<u64>) -> EngineLimits {
    if limit.is_some() && limits.memory_reservation.is_none() {
        limits.memory_reservation = Some(limits.max_memory);
    }
    limits
}

/// What the pool of `limits` reserves, part by part.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Reservation {
    /// Linear memory slots.
    pub memories: u64,
    /// Bytes per memory slot, guard included.
    pub memory_slot: u64,
    /// Bytes of all table slots.
    pub tables: u64,
    /// Bytes of all fiber stacks.
    pub stacks: u64,
}

impl Reservation {
    /// The reservation of an engine built from `limits`.
    pub fn of(limits: &EngineLimits) -> Self {
        let (reservation, guard) = match limits.memory_reservation {
            Some(r) => (r.bytes(), EXPLICIT_GUARD),
            None => (DEFAULT_RESERVATION, DEFAULT_GUARD),
        };
        Self {
            memories: u64::from(limits.memories),
            memory_slot: reservation.max(limits.max_memory.bytes()) + guard,
            tables: u64::from(limits.tables) * TABLE_SLOT,
            stacks: u64::from(limits.instances) * STACK_SLOT,
        }
    }

    /// All of it, the guard before the first memory slot included.
    pub fn total(&self) -> u64 {
        let guard = self.memory_slot.min(DEFAULT_GUARD);
        self.memories.saturating_mul(self.memory_slot).saturating_add(guard).saturating_add(self.tables).saturating_add(self.stacks)
    }
}

impl fmt::Display for Reservation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} ({} memory slots of {} each, {} of tables, {} of fiber stacks)",
            human(self.total()),
            self.memories,
            human(self.memory_slot),
            human(self.tables),
            human(self.stacks)
        )
    }
}

/// `n` bytes in the largest binary unit that keeps a digit before the point.
pub fn human(n: u64) -> String {
    let (value, unit) = match n {
        _ if n >= GI => (n as f64 / GI as f64, "GiB"),
        _ if n >= MI => (n as f64 / MI as f64, "MiB"),
        _ => (n as f64 / KI as f64, "KiB"),
    };
    format!("{value:.1} {unit}")
}

/// The host's pool does not fit the address-space limit.
#[derive(Debug, thiserror::Error)]
#[error(
    "the plugin instance pool reserves {reservation} of address space, and the host needs about {headroom} more, \
     but RLIMIT_AS (ulimit -v) is {limit_h}. A reservation is not memory (slots are committed only while a plugin uses \
     them; the container's memory limit bounds what is used), so the simplest fix is no RLIMIT_AS. Or size the pool \
     to fit: --instance-pool (reconciles in flight at once, {instances} now; two memory slots each) and \
     --plugin-memory-max (the largest limits.memory a plugin may have, {max_memory} now; the size of a slot){suggestion}",
    limit_h = human(*.limit),
    headroom = human(HEADROOM)
)]
pub struct DoesNotFit {
    /// What the pool reserves.
    pub reservation: Reservation,
    /// The limit.
    pub limit: u64,
    /// The pool's instances.
    pub instances: u32,
    /// The pool's largest memory.
    pub max_memory: ByteSize,
    /// A pool that would fit, as flags (empty if none does).
    pub suggestion: String,
}

/// Whether an engine of `limits` (as [`fit`] makes them) fits a process limited to `limit`,
/// with [`HEADROOM`] for the rest of the host. The error says what would fit.
pub fn check(limits: &EngineLimits, limit: Option<u64>) -> Result<(), DoesNotFit> {
    let Some(limit) = limit else { return Ok(()) };
    let reservation = Reservation::of(limits);
    if reservation.total().saturating_add(HEADROOM) <= limit {
        return Ok(());
    }
    Err(DoesNotFit { reservation, limit, instances: limits.instances, max_memory: limits.max_memory, suggestion: suggest(limits, limit) })
}

/// The largest instance pool that fits `limit` with `limits.max_memory` (or, if none of at least
/// 8 instances does, with 64Mi memories), as flags.
fn suggest(limits: &EngineLimits, limit: u64) -> String {
    let fits = |instances: u32, max_memory: ByteSize| {
        let l = EngineLimits { max_memory, memory_reservation: Some(max_memory), ..scaled(limits, instances) };
        Reservation::of(&l).total().saturating_add(HEADROOM) <= limit
    };
    for max_memory in [limits.max_memory, ByteSize::mib(256), ByteSize::mib(64)] {
        if max_memory > limits.max_memory {
            continue;
        }
        if let Some(n) = (8..=limits.instances).rev().step_by(8).find(|&n| fits(n, max_memory)) {
            return format!("; e.g. --instance-pool {n} --plugin-memory-max {max_memory} fits");
        }
    }
    String::new()
}

/// `limits` with a pool of `instances` component instances and the rest in proportion: two
/// memories and eight tables and core instances each (the defaults' ratios).
pub fn scaled(limits: &EngineLimits, instances: u32) -> EngineLimits {
    let core_instances = instances.saturating_mul(8).max(limits.max_core_instances_per_component);
    EngineLimits { instances, memories: instances.saturating_mul(2), tables: instances.saturating_mul(8), core_instances, ..limits.clone() }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_default_pool_reserves_about_a_terabyte_and_a_fitted_one_its_memories() {
        let default = EngineLimits::default();
        let r = Reservation::of(&default);
        assert_eq!((r.memories, r.memory_slot), (256, 4 * GI + 32 * MI));
        assert!(r.total() > 1000 * GI, "{r}");
        assert_eq!(fit(default.clone(), None), default, "no limit: wasmtime's defaults");
        let fitted = fit(default.clone(), Some(8 * GI));
        assert_eq!(fitted.memory_reservation, Some(default.max_memory));
        assert_eq!(Reservation::of(&fitted).memory_slot, GI + 64 * KI);
        // An explicit reservation is kept.
        let explicit = EngineLimits { memory_reservation: Some(ByteSize::mib(512)), ..default.clone() };
        assert_eq!(fit(explicit.clone(), Some(GI)), explicit);
    }

    #[test]
    fn a_pool_that_does_not_fit_says_what_it_needs_and_what_would_fit() {
        let fitted = fit(EngineLimits::default(), Some(16 * GI));
        let err = check(&fitted, Some(16 * GI)).unwrap_err().to_string();
        for needle in
            ["reserves 256.", "256 memory slots of 1.0 GiB", "RLIMIT_AS (ulimit -v) is 16.0 GiB", "--instance-pool", "--plugin-memory-max"]
        {
            assert!(err.contains(needle), "{needle:?} not in {err}");
        }
        assert!(err.contains("e.g. --instance-pool 24 --plugin-memory-max 256Mi fits"), "{err}");
        let suggested = fit(EngineLimits { max_memory: ByteSize::mib(256), ..scaled(&EngineLimits::default(), 24) }, Some(16 * GI));
        assert!(check(&suggested, Some(16 * GI)).is_ok());
        assert!(check(&EngineLimits::default(), None).is_ok(), "no limit, nothing to fit");
        let hopeless = check(&fitted, Some(GI)).unwrap_err();
        assert_eq!(hopeless.suggestion, "");
    }

    /// The address space this process has mapped (`VmSize`), in bytes.
    fn mapped() -> u64 {
        let status = std::fs::read_to_string("/proc/self/status").unwrap();
        let line = status.lines().find(|l| l.starts_with("VmSize:")).unwrap();
        line.split_whitespace().nth(1).unwrap().parse::<u64>().unwrap() * KI
    }

    #[test]
    fn the_estimate_is_what_an_engine_maps() {
        // Other tests map and unmap meanwhile: compare against reservations of GiBs, within 5%.
        let pools = [
            fit(EngineLimits { max_memory: ByteSize::mib(256), ..scaled(&EngineLimits::default(), 8) }, Some(GI)),
            EngineLimits::offline(ByteSize::mib(64), 64),
            EngineLimits::default(),
        ];
        for limits in pools {
            let estimate = Reservation::of(&limits).total();
            let before = mapped();
            let engine = super::super::PluginEngine::with_limits(limits.clone()).unwrap();
            let grown = mapped().saturating_sub(before);
            drop(engine);
            let ratio = grown as f64 / estimate as f64;
            assert!((0.95..=1.05).contains(&ratio), "{limits:?}: mapped {} for an estimate of {}", human(grown), human(estimate));
        }
    }
}
