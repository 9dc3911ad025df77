//! Replaying a [`Recording`]: the call's inputs served from it ([`Serve`]), what the replay
//! could not serve ([`ReplayReport`]), and how its outcome differs from the recorded one
//! ([`OutcomeDiff`]).
//!
//! Cache reads are looked up by their call and arguments ([`Call`]); the same read made several
//! times gets the recorded answers in order, then the last one again. A read the recording does
//! not have answers `cache-error.invalid("not recorded: ...")` and is reported.
//!
//! Clocks and random values are served in the order they were drawn. Past the end of what was
//! recorded the replay stays deterministic, and reports it: the wall clock and the monotonic
//! clock go on from their last recorded value (else 2000-01-01T00:00:00Z, and 0) by 1 ms per
//! reading; random bytes come from SplitMix64 seeded with [`FALLBACK_SEED`]; the insecure seed,
//! if none was recorded, is 0.

use std::collections::{BTreeMap, VecDeque};
use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use parking_lot::Mutex;
use rand_core::TryRng;
use serde::Serialize;
use serde_json::Value;
use wasmtime_wasi::{HostMonotonicClock, HostWallClock, WasiCtxBuilder};

use super::recording::{Answer, Call, RecordedOutcome, Recording};

/// The SplitMix64 seed of random bytes drawn past the recorded ones ("WASMLOOP").
pub const FALLBACK_SEED: u64 = 0x5741_534d_4c4f_4f50;

/// The wall clock past the recorded readings, when none was recorded: 2000-01-01T00:00:00Z.
const FALLBACK_WALL_NANOS: u64 = 946_684_800 * 1_000_000_000;

/// The step of a clock past its recorded readings.
const FALLBACK_STEP_NANOS: u64 = 1_000_000;

/// What a replay served from outside the recording.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ReplayReport {
    /// Cache reads the recording does not have (answered with a cache error), in order.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub not_recorded: Vec<String>,
    /// Wall clock readings past the recorded ones.
    #[serde(skip_serializing_if = "is_zero")]
    pub wall_clock_fallbacks: u64,
    /// Monotonic clock readings past the recorded ones.
    #[serde(skip_serializing_if = "is_zero")]
    pub monotonic_clock_fallbacks: u64,
    /// Random bytes drawn past the recorded ones (`wasi:random/random` and `insecure`).
    #[serde(skip_serializing_if = "is_zero")]
    pub random_fallback_bytes: u64,
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

impl ReplayReport {
    /// Whether everything the plugin asked for came from the recording.
    pub fn complete(&self) -> bool {
        *self == Self::default()
    }
}

#[derive(Debug)]
struct State {
    /// Recorded answers not served yet, per call.
    reads: BTreeMap<Call, VecDeque<(Answer, bool)>>,
    /// The last answer served per call, served again once its recorded ones are used up.
    last: BTreeMap<Call, (Answer, bool)>,
    wall: VecDeque<u64>,
    wall_last: u64,
    monotonic: VecDeque<u64>,
    monotonic_last: u64,
    random: VecDeque<u8>,
    insecure: VecDeque<u8>,
    fallback: SplitMix64,
    report: ReplayReport,
}

/// A recording's inputs, served to one replayed call.
#[derive(Clone, Debug)]
pub(crate) struct Serve {
    state: Arc<Mutex<State>>,
    resolution: (u64, u64),
    seed: u128,
}

impl Serve {
    /// Serve `recording`'s inputs. Random streams that are not valid hex count as not recorded.
    pub(crate) fn new(recording: &Recording) -> Self {
        let mut reads: BTreeMap<Call, VecDeque<(Answer, bool)>> = BTreeMap::new();
        for read in &recording.reads {
            reads.entry(read.call.clone()).or_default().push_back((read.answer.clone(), read.over_budget));
        }
        let bytes = |h: &str| hex::decode(h).unwrap_or_default().into_iter().collect();
        let state = State {
            reads,
            last: BTreeMap::new(),
            wall: recording.wall_clock.iter().copied().collect(),
            wall_last: FALLBACK_WALL_NANOS,
            monotonic: recording.monotonic_clock.iter().copied().collect(),
            monotonic_last: 0,
            random: bytes(&recording.random),
            insecure: bytes(&recording.insecure_random),
            fallback: SplitMix64(FALLBACK_SEED),
            report: ReplayReport::default(),
        };
        Self {
            state: Arc::new(Mutex::new(state)),
            resolution: recording.clock_resolution.unwrap_or((1, 1)),
            seed: recording.insecure_seed.as_deref().and_then(|s| u128::from_str_radix(s, 16).ok()).unwrap_or(0),
        }
    }

    /// The recorded answer to `call` (and whether it went over the read budget), or `None`
    /// (reported) if the recording does not have it.
    pub(crate) fn read(&self, call: &Call) -> Option<(Answer, bool)> {
        let mut st = self.state.lock();
        let next = st.reads.get_mut(call).and_then(VecDeque::pop_front);
        match next {
            Some(answer) => {
                st.last.insert(call.clone(), answer.clone());
                Some(answer)
            }
            None => {
                let again = st.last.get(call).cloned();
                if again.is_none() {
                    st.report.not_recorded.push(call.to_string());
                }
                again
            }
        }
    }

    /// Give the WASI context the recorded clocks and random values.
    pub(crate) fn install(&self, builder: &mut WasiCtxBuilder) {
        builder
            .wall_clock(ServedWall(self.clone()))
            .monotonic_clock(ServedMonotonic(self.clone()))
            .secure_random(ServedRng { serve: self.clone(), insecure: false })
            .insecure_random(ServedRng { serve: self.clone(), insecure: true })
            .insecure_random_seed(self.seed);
    }

    /// What was served from outside the recording.
    pub(crate) fn report(&self) -> ReplayReport {
        self.state.lock().report.clone()
    }

    fn take(&self, insecure: bool, dst: &mut [u8]) {
        let mut st = self.state.lock();
        let st = &mut *st;
        let stream = if insecure { &mut st.insecure } else { &mut st.random };
        let mut fallback = 0u64;
        for b in dst.iter_mut() {
            *b = match stream.pop_front() {
                Some(b) => b,
                None => {
                    fallback += 1;
                    st.fallback.next_byte()
                }
            };
        }
        st.report.random_fallback_bytes += fallback;
    }
}

struct ServedWall(Serve);

impl HostWallClock for ServedWall {
    fn resolution(&self) -> Duration {
        Duration::from_nanos(self.0.resolution.0)
    }

    fn now(&self) -> Duration {
        let mut st = self.0.state.lock();
        let nanos = match st.wall.pop_front() {
            Some(n) => n,
            None => {
                st.report.wall_clock_fallbacks += 1;
                st.wall_last.saturating_add(FALLBACK_STEP_NANOS)
            }
        };
        st.wall_last = nanos;
        Duration::from_nanos(nanos)
    }
}

struct ServedMonotonic(Serve);

impl HostMonotonicClock for ServedMonotonic {
    fn resolution(&self) -> u64 {
        self.0.resolution.1
    }

    fn now(&self) -> u64 {
        let mut st = self.0.state.lock();
        let nanos = match st.monotonic.pop_front() {
            Some(n) => n,
            None => {
                st.report.monotonic_clock_fallbacks += 1;
                st.monotonic_last.saturating_add(FALLBACK_STEP_NANOS)
            }
        };
        st.monotonic_last = nanos;
        nanos
    }
}

struct ServedRng {
    serve: Serve,
    insecure: bool,
}

impl TryRng for ServedRng {
    type Error = Infallible;

    fn try_next_u32(&mut self) -> Result<u32, Infallible> {
        let mut b = [0; 4];
        self.serve.take(self.insecure, &mut b);
        Ok(u32::from_le_bytes(b))
    }

    fn try_next_u64(&mut self) -> Result<u64, Infallible> {
        let mut b = [0; 8];
        self.serve.take(self.insecure, &mut b);
        Ok(u64::from_le_bytes(b))
    }

    fn try_fill_bytes(&mut self, dst: &mut [u8]) -> Result<(), Infallible> {
        self.serve.take(self.insecure, dst);
        Ok(())
    }
}

/// SplitMix64, byte by byte: the deterministic random bytes past the recorded ones.
#[derive(Debug)]
struct SplitMix64(u64);

impl SplitMix64 {
    fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    fn next_byte(&mut self) -> u8 {
        (self.next_u64() & 0xff) as u8
    }
}

/// An action both outcomes have on the same target, in two versions.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Changed {
    /// As recorded.
    pub recorded: Value,
    /// As replayed.
    pub replayed: Value,
}

/// How a replayed outcome differs from the recorded one. Actions equal in both are matched
/// first (whatever their position); of the rest, those on the same target with the same verb
/// are `changed`, the others `added` (only replayed) or `removed` (only recorded).
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct OutcomeDiff {
    /// Actions on the same target with the same verb, different.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub changed: Vec<Changed>,
    /// Actions only the replay returned.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub added: Vec<Value>,
    /// Actions only the recording has.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub removed: Vec<Value>,
    /// The same actions, in another order.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub reordered: bool,
    /// The requeue differs: (recorded, replayed), in milliseconds.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub requeue_after_ms: Option<(Option<u64>, Option<u64>)>,
    /// The error differs: (recorded, replayed).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<(Option<String>, Option<String>)>,
}

impl OutcomeDiff {
    /// How `replayed` differs from `recorded`.
    pub fn between(recorded: &RecordedOutcome, replayed: &RecordedOutcome) -> Self {
        let mut left: Vec<Option<&Value>> = recorded.actions.iter().map(Some).collect();
        let mut right: Vec<&Value> = Vec::new();
        for action in &replayed.actions {
            match left.iter_mut().find(|l| **l == Some(action)) {
                Some(slot) => *slot = None,
                None => right.push(action),
            }
        }
        let mut diff = Self::default();
        let mut removed: Vec<&Value> = left.into_iter().flatten().collect();
        for action in right {
            match removed.iter().position(|r| identity(r) == identity(action) && identity(action).is_some()) {
                Some(i) => diff.changed.push(Changed { recorded: removed.remove(i).clone(), replayed: action.clone() }),
                None => diff.added.push(action.clone()),
            }
        }
        diff.removed = removed.into_iter().cloned().collect();
        diff.reordered =
            diff.changed.is_empty() && diff.added.is_empty() && diff.removed.is_empty() && recorded.actions != replayed.actions;
        if recorded.requeue_after_ms != replayed.requeue_after_ms {
            diff.requeue_after_ms = Some((recorded.requeue_after_ms, replayed.requeue_after_ms));
        }
        let error = |o: &RecordedOutcome| o.error.as_ref().map(|e| e.message.clone());
        if recorded.error != replayed.error {
            diff.error = Some((error(recorded), error(replayed)));
        }
        diff
    }

    /// Whether the outcomes are the same.
    pub fn is_same(&self) -> bool {
        *self == Self::default()
    }
}

/// An action's verb and target, as far as its JSON shows them (`create Pod shop/web-`): the
/// same for two versions of "the same" action.
fn identity(action: &Value) -> Option<String> {
    let verb = action.get("action")?.as_str()?;
    let text = |v: &Value, p: &str| v.pointer(p).and_then(Value::as_str).unwrap_or_default().to_string();
    let target = if let Some(object) = action.get("object") {
        let name = object.pointer("/metadata/name").or_else(|| object.pointer("/metadata/generateName"));
        let name = name.and_then(Value::as_str).unwrap_or_default();
        format!("{}/{} {}/{name}", text(object, "/apiVersion"), text(object, "/kind"), text(object, "/metadata/namespace"))
    } else {
        let key = action.get("key").or_else(|| action.get("regarding"))?;
        match key {
            Value::String(s) => s.clone(),
            other => other.to_string(),
        }
    };
    Some(format!("{verb} {target}"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plugin::recording::tests::sample;
    use crate::plugin::recording::{Kind, RecordedError};
    use serde_json::json;

    #[test]
    fn reads_are_looked_up_by_call_and_arguments() {
        let rec = sample();
        let serve = Serve::new(&rec);
        // Out of order, and by its arguments.
        let list = rec.reads[1].call.clone();
        assert_eq!(serve.read(&list).map(|a| a.0), Some(rec.reads[1].answer.clone()));
        let get = rec.reads[0].call.clone();
        assert_eq!(serve.read(&get).map(|a| a.0), Some(rec.reads[0].answer.clone()));
        // Read again: the last recorded answer again, not reported.
        assert_eq!(serve.read(&get).map(|a| a.0), Some(rec.reads[0].answer.clone()));
        // Another name: not recorded, reported.
        let Call::Get { kind, namespace, .. } = get else { unreachable!() };
        let other = Call::Get { kind: kind.clone(), namespace, name: "other".into() };
        assert_eq!(serve.read(&other), None);
        let error = Call::ByIndex { kind: Kind { api_version: "v1".into(), kind: "Pod".into() }, index: "nope".into(), value: "x".into() };
        assert!(matches!(serve.read(&error), Some((Answer::Error(_), false))));
        let report = serve.report();
        assert_eq!(report.not_recorded, [r#"get(apps/v1/ReplicaSet, "shop", "other")"#]);
        assert!(!report.complete());
    }

    #[test]
    fn clocks_and_random_come_from_the_recording_then_a_stated_fallback() {
        let rec = sample();
        let serve = Serve::new(&rec);
        let wall = ServedWall(serve.clone());
        assert_eq!(wall.now(), Duration::from_nanos(1_700_000_000_123_456_789));
        assert_eq!(wall.now(), Duration::from_nanos(1_700_000_000_124_456_789), "then 1 ms per reading");
        assert_eq!(wall.resolution(), Duration::from_nanos(1000));
        let mono = ServedMonotonic(serve.clone());
        assert_eq!((mono.now(), mono.now(), mono.now()), (5, 9, 9 + FALLBACK_STEP_NANOS));
        let mut rng = ServedRng { serve: serve.clone(), insecure: false };
        let mut b = [0u8; 5];
        rng.try_fill_bytes(&mut b).unwrap();
        assert_eq!(&b[..3], &[0x00, 0xff, 0x10]);
        let mut expected = SplitMix64(FALLBACK_SEED);
        assert_eq!(&b[3..], &[expected.next_byte(), expected.next_byte()]);
        let report = serve.report();
        assert_eq!((report.wall_clock_fallbacks, report.monotonic_clock_fallbacks, report.random_fallback_bytes), (1, 1, 2));
        // Two replays draw the same values.
        let again = Serve::new(&rec);
        let mut rng2 = ServedRng { serve: again, insecure: false };
        let mut b2 = [0u8; 5];
        rng2.try_fill_bytes(&mut b2).unwrap();
        assert_eq!(b, b2);
    }

    fn outcome(actions: Vec<Value>) -> RecordedOutcome {
        RecordedOutcome { actions, requeue_after_ms: None, error: None }
    }

    #[test]
    fn outcomes_are_compared_action_by_action() {
        let pod = |name: &str, image: &str| json!({"action": "create", "object": {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": "shop"}, "spec": {"image": image}}});
        let status = |n: u32| json!({"action": "updateStatus", "key": "apps/v1/ReplicaSet/shop/web", "status": {"replicas": n}});
        let recorded = outcome(vec![pod("a", "v1"), pod("b", "v1"), status(2)]);
        assert!(OutcomeDiff::between(&recorded, &recorded).is_same());
        let reordered = outcome(vec![status(2), pod("b", "v1"), pod("a", "v1")]);
        let diff = OutcomeDiff::between(&recorded, &reordered);
        assert!(diff.reordered && !diff.is_same());
        let replayed = outcome(vec![pod("a", "v2"), status(3), pod("c", "v1")]);
        let diff = OutcomeDiff::between(&recorded, &replayed);
        let changed = |recorded, replayed| Changed { recorded, replayed };
        assert_eq!(diff.changed, [changed(pod("a", "v1"), pod("a", "v2")), changed(status(2), status(3))]);
        assert_eq!(diff.added, [pod("c", "v1")]);
        assert_eq!(diff.removed, [pod("b", "v1")]);
        let failed = RecordedOutcome {
            error: Some(RecordedError { message: "boom".into(), transient: true }),
            requeue_after_ms: Some(5),
            ..recorded.clone()
        };
        let diff = OutcomeDiff::between(&recorded, &failed);
        assert_eq!(diff.error, Some((None, Some("boom".into()))));
        assert_eq!(diff.requeue_after_ms, Some((None, Some(5))));
    }
}
