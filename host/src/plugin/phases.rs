//! Where the fixed cost of one reconcile goes ([`CallPhases`]): instants taken along the real
//! call path ([`Marks`]), for `wasmloop-bench call-cost` and the polyglot benchmark. Taking them
//! costs a few clock reads per call; nothing else reads them.

use std::time::{Duration, Instant};

/// The phases of one reconcile, measured on the real call path.
#[derive(Clone, Copy, Debug, Default)]
pub struct CallPhases {
    /// Taking an instance slot.
    pub slot: Duration,
    /// `HostState::new`: WASI context, resource table, output streams, limiter.
    pub state: Duration,
    /// `Store::new` with its limiter and epoch deadline.
    pub store: Duration,
    /// Key and request conversion.
    pub request: Duration,
    /// Into and out of the deadline wrapper (timeout + `block_on`), without the guest work.
    pub wrapper: Duration,
    /// `instantiate_async` from the `InstancePre`.
    pub instantiate: Duration,
    /// The exported call: lowering, guest code, host imports, lifting.
    pub call: Duration,
    /// Dropping the Store (instance slot back to the pool: memory reset).
    pub drop: Duration,
    /// Flushing output, telling how the call ended and turning it into an `Outcome`.
    pub outcome: Duration,
    /// From the call's start to its result.
    pub total: Duration,
}

/// Instants along one call, in the order the call passes them.
#[derive(Clone, Copy, Debug)]
pub(super) struct Marks {
    pub(super) start: Instant,
    pub(super) slot: Instant,
    pub(super) state: Instant,
    pub(super) store: Instant,
    pub(super) request: Instant,
    /// Inside the deadline wrapper, before instantiating.
    pub(super) entered: Instant,
    pub(super) instantiated: Instant,
    /// Inside the deadline wrapper, the guest call returned.
    pub(super) returned: Instant,
    /// Out of the deadline wrapper.
    pub(super) left: Instant,
    /// Result classified, before the Store is dropped.
    pub(super) judged: Instant,
    pub(super) dropped: Instant,
    pub(super) end: Instant,
}

impl Marks {
    /// Every mark at `now`; the call moves them forward as it goes.
    pub(super) fn at(now: Instant) -> Self {
        Marks {
            start: now,
            slot: now,
            state: now,
            store: now,
            request: now,
            entered: now,
            instantiated: now,
            returned: now,
            left: now,
            judged: now,
            dropped: now,
            end: now,
        }
    }

    /// The durations between the marks. Marks a call did not reach (it timed out, or failed to
    /// instantiate) count as zero-length phases.
    pub(super) fn phases(&self) -> CallPhases {
        let between = |a: Instant, b: Instant| b.saturating_duration_since(a);
        CallPhases {
            slot: between(self.start, self.slot),
            state: between(self.slot, self.state),
            store: between(self.state, self.store),
            request: between(self.store, self.request),
            wrapper: between(self.request, self.entered) + between(self.returned, self.left),
            instantiate: between(self.entered, self.instantiated),
            call: between(self.instantiated, self.returned),
            drop: between(self.judged, self.dropped),
            outcome: between(self.left, self.judged) + between(self.dropped, self.end),
            total: between(self.start, self.end),
        }
    }
}

/// The deadline wrapper alone around a future that is immediately ready (for measurements).
#[doc(hidden)]
pub fn profile_wrapper(timeout: Duration) -> Duration {
    let t0 = Instant::now();
    let _ = super::instance::within_deadline(timeout, async { std::hint::black_box(1) });
    t0.elapsed()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn phases_add_up_to_the_total_and_unreached_marks_are_empty() {
        let t = Instant::now();
        let ms = |n| t + Duration::from_millis(n);
        let marks = Marks {
            start: t,
            slot: ms(1),
            state: ms(3),
            store: ms(6),
            request: ms(10),
            entered: ms(15),
            instantiated: ms(21),
            returned: ms(28),
            left: ms(36),
            judged: ms(45),
            dropped: ms(55),
            end: ms(66),
        };
        let p = marks.phases();
        let sum = p.slot + p.state + p.store + p.request + p.wrapper + p.instantiate + p.call + p.drop + p.outcome;
        assert_eq!(sum, p.total);
        assert_eq!((p.instantiate, p.call, p.wrapper), (Duration::from_millis(6), Duration::from_millis(7), Duration::from_millis(13)));
        // A call that timed out never instantiated: its marks stay at the start.
        let mut timed_out = Marks::at(t);
        timed_out.left = ms(1000);
        timed_out.end = ms(1001);
        let p = timed_out.phases();
        assert_eq!((p.instantiate, p.call), (Duration::ZERO, Duration::ZERO));
        assert_eq!(p.total, Duration::from_millis(1001));
    }
}
