//! Counters of one plugin's calls ([`PluginStats`]), for metrics and `wasmloop status`.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use super::fault::GuestFault;

/// Counters of one plugin's calls, for metrics. `traps`, `timeouts` and `ooms` are disjoint.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PluginStats {
    /// Reconciles started.
    pub calls: u64,
    /// Reconciles that returned a valid outcome.
    pub ok: u64,
    /// Reconciles where the plugin returned its own `reconcile-error`.
    pub errors: u64,
    /// Outcomes refused by the host (invalid action JSON, too many actions, ...).
    pub invalid_outcomes: u64,
    /// Traps other than timeouts and out-of-memory (panics, `unreachable`, bad memory access).
    pub traps: u64,
    /// Calls interrupted at their deadline.
    pub timeouts: u64,
    /// Calls that failed after a refused memory growth.
    pub ooms: u64,
    /// Failures to get an instance at all (e.g. the instance pool is exhausted).
    pub instantiation_failures: u64,
    /// Panics of the host side of a call, caught and turned into errors (a bug or misuse).
    pub host_panics: u64,
    /// Wall time spent in reconciles (instantiation included).
    pub busy: Duration,
    /// Guest output dropped over the per-call or per-minute limits.
    pub output_dropped_bytes: u64,
    /// The most linear memory any call has grown to (bytes), since this version loaded.
    pub memory_peak_bytes: u64,
}

/// The live counters behind [`PluginStats`], bumped by concurrent calls.
#[derive(Default)]
pub(super) struct Counters {
    pub(super) calls: AtomicU64,
    pub(super) ok: AtomicU64,
    pub(super) errors: AtomicU64,
    pub(super) invalid_outcomes: AtomicU64,
    traps: AtomicU64,
    timeouts: AtomicU64,
    ooms: AtomicU64,
    instantiation_failures: AtomicU64,
    pub(super) host_panics: AtomicU64,
    busy_nanos: AtomicU64,
    memory_peak: AtomicU64,
}

/// Add one to `counter`.
pub(super) fn bump(counter: &AtomicU64) {
    counter.fetch_add(1, Ordering::Relaxed);
}

impl Counters {
    /// Count `fault`, in instantiation (`instantiating`) or in the call itself.
    pub(super) fn fault(&self, fault: &GuestFault, instantiating: bool) {
        match fault {
            GuestFault::Timeout(_) => bump(&self.timeouts),
            GuestFault::OutOfMemory { .. } => bump(&self.ooms),
            GuestFault::Trap { .. } => bump(&self.traps),
            GuestFault::Host(_) if instantiating => bump(&self.instantiation_failures),
            GuestFault::Host(_) => bump(&self.traps),
        }
    }

    /// Add `busy` to the time spent in calls.
    pub(super) fn busy(&self, busy: Duration) {
        self.busy_nanos.fetch_add(u64::try_from(busy.as_nanos()).unwrap_or(u64::MAX), Ordering::Relaxed);
    }

    /// A call's Store grew its linear memory to `bytes`.
    pub(super) fn memory_reached(&self, bytes: usize) {
        self.memory_peak.fetch_max(bytes as u64, Ordering::Relaxed);
    }

    /// A snapshot, with the output the plugin's rate dropped.
    pub(super) fn snapshot(&self, output_dropped_bytes: u64) -> PluginStats {
        let get = |a: &AtomicU64| a.load(Ordering::Relaxed);
        PluginStats {
            calls: get(&self.calls),
            ok: get(&self.ok),
            errors: get(&self.errors),
            invalid_outcomes: get(&self.invalid_outcomes),
            traps: get(&self.traps),
            timeouts: get(&self.timeouts),
            ooms: get(&self.ooms),
            instantiation_failures: get(&self.instantiation_failures),
            host_panics: get(&self.host_panics),
            busy: Duration::from_nanos(get(&self.busy_nanos)),
            output_dropped_bytes,
            memory_peak_bytes: get(&self.memory_peak),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn faults_are_counted_in_disjoint_classes() {
        let c = Counters::default();
        c.fault(&GuestFault::Timeout(Duration::from_secs(1)), false);
        c.fault(&GuestFault::OutOfMemory { limit: 1, requested: None, detail: String::new() }, false);
        c.fault(&GuestFault::Trap { detail: String::new(), stderr: String::new() }, false);
        c.fault(&GuestFault::Host("pool".into()), true);
        c.fault(&GuestFault::Host("link".into()), false);
        c.memory_reached(10);
        c.memory_reached(4);
        let s = c.snapshot(7);
        assert_eq!((s.timeouts, s.ooms, s.traps, s.instantiation_failures), (1, 1, 2, 1));
        assert_eq!((s.memory_peak_bytes, s.output_dropped_bytes), (10, 7));
    }
}
