//! The fence's state machine: from this replica's own renewals of a Lease, until when it may
//! write. Pure: every input carries the monotonic instant it happened at; no clock, no I/O.
//!
//! The rules (a lease holder's safe window, as client-go's leader elector reasons about it):
//! - **Only a renewal's success opens the fence**, and only until `sent + validity`, where `sent`
//!   is when that renewal was *sent* (read from the clock before the request left): the API server
//!   accepted it at or after `sent`, so every other replica saw it at or after `sent` and waits a
//!   whole lease duration from then before taking the Lease. When its answer arrives does not
//!   matter: an answer read late (the process was frozen while it sat in a socket buffer) is
//!   old evidence and opens nothing past `sent + validity`.
//! - **After a gap, only a fresh renewal reopens it.** When an input arrives after the deadline
//!   of an open fence (the monotonic clock jumped past it: the process was stopped, its VM
//!   frozen, its cgroup throttled, or its renewals kept failing), the fence closes, and only a
//!   renewal *sent* after that deadline can open it again. (A renewal sent after the
//!   deadline was sent by a running process, so after any gap that spanned the deadline.)
//! - **A conflict or a lost Lease closes it**, and no renewal sent before (or at) that moment reopens it.
//! - Watching the Lease never opens the fence; observations can only close it ([`Machine::lose`]).

use std::collections::BTreeMap;
use std::time::Duration;

use tokio::time::Instant;

/// A renewal (or take) of the Lease that this replica sent: which one, and when.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Renewal {
    id: u64,
    sent: Instant,
}

impl Renewal {
    /// When it was sent (the monotonic clock read before the request left).
    pub fn sent(&self) -> Instant {
        self.sent
    }
}

/// What the API server answered to a renewal.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Answer {
    /// Written: this replica holds the Lease, renewed at (or after) the renewal's send time.
    Renewed,
    /// 409: someone else wrote the Lease since this replica read it.
    Conflict,
    /// No answer, or an error that says nothing about who holds the Lease (timeout, 5xx).
    Failed,
}

/// Why the fence closed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Closed {
    /// The deadline passed without a renewal extending it; noticed `late` after the deadline.
    Expired {
        /// How long after the deadline this was noticed (a gap in the process's progress, when
        /// large).
        late: Duration,
    },
    /// A renewal was answered 409 Conflict.
    Conflict,
    /// The Lease is not this replica's (another holder observed, deleted, released, left).
    Lost,
}

impl Closed {
    /// A short name for logs and metric labels.
    pub fn as_str(&self) -> &'static str {
        match self {
            Closed::Expired { .. } => "expired",
            Closed::Conflict => "conflict",
            Closed::Lost => "lost",
        }
    }
}

/// A change the input made, for logs and metrics.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Change {
    /// The fence was closed and is now open until `until`.
    Opened {
        /// The new deadline.
        until: Instant,
    },
    /// The fence was open and is now closed.
    Closed(Closed),
    /// A renewal succeeded but was sent before the fence last closed (or before a gap): it
    /// opens nothing; a fresh renewal must succeed first.
    Stale {
        /// When the refused renewal was sent.
        sent: Instant,
    },
}

/// The fence's state for one Lease.
#[derive(Clone, Debug)]
pub struct Machine {
    /// How long a renewal is good for, from its send time (lease duration − a margin).
    validity: Duration,
    /// Open until this instant; `None`: closed.
    until: Option<Instant>,
    /// Renewals sent at or before this instant open nothing (the last gap, conflict or loss).
    barrier: Option<Instant>,
    /// Renewals sent and not answered yet, by id.
    in_flight: BTreeMap<u64, Instant>,
    next_id: u64,
}

impl Machine {
    /// A closed fence whose renewals are good for `validity` from when they are sent.
    pub fn new(validity: Duration) -> Self {
        Self { validity, until: None, barrier: None, in_flight: BTreeMap::new(), next_id: 0 }
    }

    /// How long a renewal is good for, from its send time.
    pub fn validity(&self) -> Duration {
        self.validity
    }

    /// Until when writes may go out (`None`: closed). Compare with the clock at each write.
    pub fn open_until(&self) -> Option<Instant> {
        self.until
    }

    /// Whether a write may go out at `now`.
    pub fn is_open(&self, now: Instant) -> bool {
        self.until.is_some_and(|until| now < until)
    }

    /// Renewals sent at or before this instant open nothing.
    pub fn barrier(&self) -> Option<Instant> {
        self.barrier
    }

    /// A renewal is being sent at `now`: remember it, to judge its answer.
    pub fn send(&mut self, now: Instant) -> (Renewal, Vec<Change>) {
        let changes = self.tick(now);
        let renewal = Renewal { id: self.next_id, sent: now };
        self.next_id += 1;
        self.in_flight.insert(renewal.id, renewal.sent);
        (renewal, changes)
    }

    /// `renewal` was answered with `answer` at `now`.
    pub fn answer(&mut self, renewal: Renewal, answer: Answer, now: Instant) -> Vec<Change> {
        let mut changes = self.tick(now);
        // Only renewals this machine sent, each answered once.
        if self.in_flight.remove(&renewal.id) != Some(renewal.sent) {
            return changes;
        }
        match answer {
            Answer::Failed => {}
            Answer::Conflict => self.close(Closed::Conflict, now, &mut changes),
            Answer::Renewed if self.barrier.is_some_and(|b| renewal.sent <= b) => changes.push(Change::Stale { sent: renewal.sent }),
            Answer::Renewed => {
                let until = renewal.sent + self.validity;
                if until <= now {
                    return changes; // good evidence, but for a window already over
                }
                match self.until {
                    Some(current) => self.until = Some(current.max(until)),
                    None => {
                        self.until = Some(until);
                        changes.push(Change::Opened { until });
                    }
                }
            }
        }
        changes
    }

    /// The Lease is not this replica's (observed held by another, deleted, released): closed,
    /// and no renewal sent before `now` reopens it.
    pub fn lose(&mut self, now: Instant) -> Vec<Change> {
        let mut changes = self.tick(now);
        self.close(Closed::Lost, now, &mut changes);
        changes
    }

    /// Time passed: an open fence whose deadline is behind `now` closes, and its deadline
    /// becomes the barrier (only renewals sent after it reopen the fence).
    pub fn tick(&mut self, now: Instant) -> Vec<Change> {
        let Some(until) = self.until.filter(|until| now >= *until) else { return Vec::new() };
        self.until = None;
        self.raise_barrier(until);
        vec![Change::Closed(Closed::Expired { late: now - until })]
    }

    fn close(&mut self, why: Closed, now: Instant, changes: &mut Vec<Change>) {
        self.raise_barrier(now);
        if self.until.take().is_some() {
            changes.push(Change::Closed(why));
        }
    }

    fn raise_barrier(&mut self, to: Instant) {
        self.barrier = Some(self.barrier.map_or(to, |b| b.max(to)));
    }
}

#[cfg(test)]
mod tests;
