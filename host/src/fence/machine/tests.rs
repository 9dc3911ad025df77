//! The fence's rules, checked on tokio's paused clock through the [`FenceKeeper`] and the
//! [`Fence`] writers check: every interleaving of a renewal's send, a freeze, its answer and the
//! deadline passing (exhaustively), and random sequences of those with losses, fresh renewals,
//! API-server restarts and another replica taking the Lease (proptest). A busy writer tries to
//! write at every instant the process runs. After every step:
//! - **no write after the deadline**: every write sent at `t` came before the earliest instant
//!   another replica could take the Lease (the last renewal the API server accepted, at its send
//!   time at the earliest, plus the others' wait on a clock running 20 % fast), and never while
//!   another replica held it;
//! - **safe**: the fence is open at `now` only if a renewal sent after the last barrier (a
//!   deadline that passed, a conflict, a loss) succeeded and `now < its send time + validity`;
//! - **live**: whenever such a renewal exists, the fence is open (it is not merely always shut).

use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use proptest::prelude::*;
use tokio::time::Instant;

use super::*;
use crate::fence::{Fence, FenceKeeper, FenceMetrics, KeeperConfig};

/// Lease duration 4 s, margin 1 s.
const VALIDITY: Duration = Duration::from_secs(3);

/// How long another replica waits after it observed a renewal before it takes the Lease: the
/// lease duration (4 s) on a clock running 20 % fast (the documented bound is < 25 % for 4 s / 2 s).
const OTHERS_WAIT: Duration = Duration::from_millis(3200);

fn lease() -> Lease {
    Lease {
        metadata: kube::api::ObjectMeta { uid: Some("u".into()), ..Default::default() },
        spec: Some(LeaseSpec { holder_identity: Some("me".into()), lease_transitions: Some(1), ..Default::default() }),
    }
}

/// One step of the world.
#[derive(Clone, Copy, Debug)]
enum Step {
    /// A renewal goes out now.
    Send,
    /// The `pick`-th renewal in flight (modulo their number) is answered now.
    Answer { pick: usize, answer: Answer },
    /// The process runs for this long: the clock moves in 100 ms steps, the keeper ticked at each.
    Run(Duration),
    /// The process is stopped this long: the clock jumps, nothing runs.
    Freeze(Duration),
    /// The Lease is observed held by another replica (or deleted).
    Lose,
    /// The API server restarts: every renewal in flight fails; those whose bit is set in
    /// `applied` had been written before it went down (their answers were lost).
    ApiServerRestart { applied: u32 },
    /// Another replica takes the Lease now, if it may: no renewal of ours was accepted within
    /// [`OTHERS_WAIT`]. Renewals of ours in flight or sent while it holds the Lease conflict.
    Takeover,
    /// The other replica releases the Lease (and stops writing); a take sent after may succeed.
    Release,
}

/// The keeper and fence under test, and the truth the properties are judged by.
struct World {
    keeper: Arc<FenceKeeper>,
    fence: Fence,
    in_flight: Vec<Renewal>,
    /// Send times of the renewals answered `Renewed`.
    succeeded: Vec<Instant>,
    /// Renewals sent at or before this open nothing: the latest deadline that passed, conflict
    /// or loss.
    barrier: Option<Instant>,
    /// The API server's side: the latest send time of a renewal of ours it accepted (the
    /// earliest instant it could have been accepted, and seen by the others).
    accepted: Option<Instant>,
    /// Another replica holds the Lease since this instant.
    other_since: Option<Instant>,
    /// When another replica held the Lease: `[from, to)`.
    other_held: Vec<(Instant, Instant)>,
    /// Renewals that cannot succeed: another replica held the Lease after they were sent.
    doomed: Vec<Renewal>,
    /// Writes the busy writer sent: when, and the earliest takeover at that moment.
    writes: Vec<(Instant, Option<Instant>)>,
    log: Vec<String>,
}

impl World {
    fn new() -> Self {
        let fence = Fence::closed();
        let config = KeeperConfig { validity: VALIDITY, metrics: FenceMetrics::default(), reads: None };
        let keeper = FenceKeeper::new(fence.clone(), "wasmloop-shard-podset", &config);
        Self {
            keeper,
            fence,
            in_flight: Vec::new(),
            succeeded: Vec::new(),
            barrier: None,
            accepted: None,
            other_since: None,
            other_held: Vec::new(),
            doomed: Vec::new(),
            writes: Vec::new(),
            log: Vec::new(),
        }
    }

    /// The busy writer: a write goes out now if the fence lets it.
    fn write(&mut self) {
        if self.fence.check().is_ok() {
            self.writes.push((Instant::now(), self.accepted.map(|a| a + OTHERS_WAIT)));
        }
    }

    fn raise(&mut self, to: Instant) {
        self.barrier = Some(self.barrier.map_or(to, |b| b.max(to)));
    }

    /// Time moves by `by`: a deadline it passes is a barrier.
    async fn advance(&mut self, by: Duration) {
        let to = Instant::now() + by;
        if let Some(until) = self.fence.window().and_then(|w| w.until).filter(|u| *u <= to) {
            self.raise(until);
        }
        tokio::time::advance(by).await;
    }

    async fn apply(&mut self, step: Step) {
        self.log.push(format!("{step:?}"));
        match step {
            Step::Send => {
                let renewal = self.keeper.sent();
                if self.other_since.is_some() {
                    self.doomed.push(renewal);
                }
                self.in_flight.push(renewal);
            }
            Step::Answer { pick, answer } => {
                if self.in_flight.is_empty() {
                    return;
                }
                let renewal = self.in_flight.remove(pick % self.in_flight.len());
                let answer = match answer {
                    Answer::Renewed if self.doomed.contains(&renewal) => Answer::Conflict,
                    Answer::Renewed => {
                        self.accepted = self.accepted.max(Some(renewal.sent()));
                        Answer::Renewed
                    }
                    other => other,
                };
                match answer {
                    Answer::Renewed => {
                        self.keeper.renewed(renewal, &lease());
                        self.succeeded.push(renewal.sent());
                    }
                    Answer::Conflict => {
                        self.keeper.conflicted(renewal);
                        self.raise(Instant::now());
                    }
                    Answer::Failed => _ = self.keeper.failed(renewal),
                }
            }
            Step::Run(d) => {
                let step = Duration::from_millis(100);
                let mut left = d;
                self.write();
                while !left.is_zero() {
                    let by = left.min(step);
                    self.advance(by).await;
                    self.write();
                    self.keeper.tick();
                    self.write();
                    left -= by;
                }
            }
            // Nothing runs while frozen; the writer goes first when the process resumes, before
            // the keeper hears of anything.
            Step::Freeze(d) => {
                self.advance(d).await;
                self.write();
            }
            Step::Lose => {
                self.keeper.lost();
                self.raise(Instant::now());
            }
            Step::ApiServerRestart { applied } => {
                for (i, renewal) in std::mem::take(&mut self.in_flight).into_iter().enumerate() {
                    if applied & (1 << (i % 32)) != 0 && !self.doomed.contains(&renewal) {
                        self.accepted = self.accepted.max(Some(renewal.sent()));
                    }
                    self.keeper.failed(renewal);
                }
            }
            Step::Takeover => {
                let now = Instant::now();
                if self.other_since.is_none() && self.accepted.is_none_or(|a| now >= a + OTHERS_WAIT) {
                    self.other_since = Some(now);
                    self.doomed.extend(self.in_flight.iter().copied());
                }
            }
            Step::Release => {
                if let Some(from) = self.other_since.take() {
                    self.other_held.push((from, Instant::now()));
                    // A take of ours must read the released Lease first: only renewals sent
                    // from now on can succeed.
                    self.accepted = None;
                }
            }
        }
    }

    /// The properties, at `now`.
    fn check(&self) -> Result<(), TestCaseError> {
        let now = Instant::now();
        for &(at, takeover) in &self.writes {
            prop_assert!(
                takeover.is_some_and(|t| at < t),
                "a write {:?} ago, after the earliest takeover {:?} ago; steps {:?}",
                now - at,
                takeover.map(|t| now.saturating_duration_since(t)),
                self.log
            );
            let held = self.other_held.iter().copied().chain(self.other_since.map(|from| (from, now + Duration::from_nanos(1))));
            for (from, to) in held {
                prop_assert!(
                    !(from <= at && at < to),
                    "a write {:?} ago while another replica held the Lease; steps {:?}",
                    now - at,
                    self.log
                );
            }
        }
        let fresh = |sent: &&Instant| self.barrier.is_none_or(|b| **sent > b) && now < **sent + VALIDITY;
        let justified = self.succeeded.iter().find(fresh);
        let open = self.fence.check().is_ok();
        prop_assert!(
            !open || justified.is_some(),
            "open with no fresh successful renewal behind it: barrier {:?} ago, successes sent {:?} ago; steps {:?}",
            self.barrier.map(|b| now - b),
            self.succeeded.iter().map(|s| now - *s).collect::<Vec<_>>(),
            self.log
        );
        prop_assert!(
            open || justified.is_none(),
            "closed although a renewal sent {:?} ago after the last barrier succeeded; steps {:?}",
            justified.map(|s| now - *s),
            self.log
        );
        // The keeper's own view agrees with what writers see.
        prop_assert_eq!(self.keeper.is_open(), open);
        Ok(())
    }
}

fn paused_runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread().enable_time().start_paused(true).build().expect("a runtime")
}

/// Run `steps` in a fresh world, checking the properties after each.
fn run(steps: &[Step]) -> Result<(), TestCaseError> {
    paused_runtime().block_on(async {
        let mut world = World::new();
        for step in steps {
            world.apply(*step).await;
            world.check()?;
        }
        Ok(())
    })
}

/// Every order of: the answer to a renewal sent before a freeze (each kind of answer), the
/// freeze (twice the lease), the deadline passing while running, and a fresh renewal sent and
/// answered — the fence open from an earlier renewal at the start.
#[test]
fn every_interleaving_of_send_freeze_answer_and_expiry() {
    let start = [Step::Send, Step::Answer { pick: 0, answer: Answer::Renewed }, Step::Run(Duration::from_millis(500)), Step::Send];
    let mut orders = 0;
    for first in [Answer::Renewed, Answer::Conflict, Answer::Failed] {
        // Labels: 0 answer to the pre-freeze renewal, 1 freeze, 2 run past the deadline,
        // 3 fresh send, 4 its answer (after 3).
        for order in permutations(5).into_iter().filter(|o| pos(o, 3) < pos(o, 4)) {
            let mut steps = start.to_vec();
            let mut fresh_sent = false;
            // In flight when the fresh renewal is answered: it alone, or after the older one.
            let fresh = usize::from(pos(&order, 4) < pos(&order, 0));
            for label in order {
                steps.push(match label {
                    // The pre-freeze renewal is the oldest one in flight.
                    0 => Step::Answer { pick: 0, answer: first },
                    1 => Step::Freeze(Duration::from_secs(8)),
                    2 => Step::Run(Duration::from_secs(4)),
                    3 => {
                        fresh_sent = true;
                        Step::Send
                    }
                    _ => Step::Answer { pick: fresh, answer: Answer::Renewed },
                });
            }
            assert!(fresh_sent);
            if let Err(e) = run(&steps) {
                panic!("{e}");
            }
            orders += 1;
        }
    }
    assert_eq!(orders, 3 * 60);
}

/// The scenario, spelled out: the answer to a renewal sent just before a freeze of twice
/// the lease is read after it, and opens nothing; a renewal sent after the freeze does.
#[tokio::test(start_paused = true)]
async fn an_answer_read_after_a_freeze_does_not_reopen_the_fence() {
    let mut w = World::new();
    w.apply(Step::Send).await;
    w.apply(Step::Answer { pick: 0, answer: Answer::Renewed }).await;
    assert!(w.fence.check().is_ok());
    w.apply(Step::Run(Duration::from_secs(2))).await;
    w.apply(Step::Send).await; // a renewal on the wire ...
    w.apply(Step::Freeze(Duration::from_secs(8))).await; // ... when the process stops
    assert!(w.fence.check().is_err(), "a frozen replica wakes up fenced");
    let changes = w.keeper.renewed(w.in_flight.remove(0), &lease());
    assert!(matches!(changes[..], [Change::Closed(Closed::Expired { .. }), Change::Stale { .. }]), "{changes:?}");
    assert!(w.fence.check().is_err(), "the buffered answer reopened the fence");
    // Even if the freeze was shorter than the renewal's own window: after the deadline passed,
    // only a renewal sent after it counts.
    let mut w = World::new();
    w.apply(Step::Send).await;
    w.apply(Step::Answer { pick: 0, answer: Answer::Renewed }).await;
    w.apply(Step::Run(Duration::from_millis(2900))).await;
    w.apply(Step::Send).await;
    w.apply(Step::Freeze(Duration::from_millis(200))).await; // past the first deadline (3 s)
    let changes = w.keeper.renewed(w.in_flight.remove(0), &lease());
    assert!(matches!(changes[..], [Change::Closed(Closed::Expired { .. }), Change::Stale { .. }]), "{changes:?}");
    assert!(w.fence.check().is_err());
    w.apply(Step::Send).await;
    let changes = w.keeper.renewed(w.in_flight.remove(0), &lease());
    assert!(matches!(changes[..], [Change::Opened { .. }]), "{changes:?}");
    assert_eq!(w.fence.window().and_then(|w| w.until), Some(Instant::now() + VALIDITY), "counted from the send");
}

/// A renewal answered slowly (no pause) keeps the window it bought from its send time only.
#[tokio::test(start_paused = true)]
async fn the_deadline_counts_from_the_send_not_the_answer() {
    let w = World::new();
    let renewal = w.keeper.sent();
    tokio::time::advance(Duration::from_millis(2500)).await;
    w.keeper.renewed(renewal, &lease());
    assert!(w.fence.check().is_ok());
    tokio::time::advance(Duration::from_millis(499)).await;
    assert!(w.fence.check().is_ok());
    tokio::time::advance(Duration::from_millis(1)).await;
    assert!(w.fence.check().is_err(), "open past send + validity");
    // An answer that arrives after its own window is over opens nothing at all.
    let w = World::new();
    let late = w.keeper.sent();
    tokio::time::advance(VALIDITY).await;
    assert!(w.keeper.renewed(late, &lease()).is_empty());
    assert!(w.fence.check().is_err());
}

fn step() -> impl Strategy<Value = Step> {
    let answer = prop_oneof![4 => Just(Answer::Renewed), 1 => Just(Answer::Conflict), 1 => Just(Answer::Failed)];
    prop_oneof![
        4 => Just(Step::Send),
        4 => (any::<usize>(), answer).prop_map(|(pick, answer)| Step::Answer { pick, answer }),
        4 => (0u64..2_500).prop_map(|ms| Step::Run(Duration::from_millis(ms))),
        2 => (0u64..10_000).prop_map(|ms| Step::Freeze(Duration::from_millis(ms))),
        1 => Just(Step::Lose),
        1 => any::<u32>().prop_map(|applied| Step::ApiServerRestart { applied }),
        2 => Just(Step::Takeover),
        1 => Just(Step::Release),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

    /// Random sequences of sends, answers (in any order, of any kind), running (writing all the
    /// while), freezes, losses, API-server restarts and takeovers by another replica keep every
    /// property at every step.
    #[test]
    fn the_fence_opens_exactly_on_fresh_evidence(steps in prop::collection::vec(step(), 1..40)) {
        run(&steps)?;
    }
}

/// Every permutation of `0..n`.
fn permutations(n: usize) -> Vec<Vec<usize>> {
    if n == 0 {
        return vec![vec![]];
    }
    let mut out = Vec::new();
    for rest in permutations(n - 1) {
        for i in 0..=rest.len() {
            let mut p = rest.clone();
            p.insert(i, n - 1);
            out.push(p);
        }
    }
    out
}

fn pos(order: &[usize], label: usize) -> usize {
    order.iter().position(|l| *l == label).expect("a label of the order")
}
