//! Unit tests of the life cycle's transitions, and property tests of its invariants over random
//! sequences of ConfigMap versions, deletions, discovery answers and host restarts.

use std::sync::Mutex;

use proptest::prelude::*;

use super::*;

/// A content by number; version `i` is content `i`'s.
fn content(i: u32) -> Content {
    Content { version: format!("c{i}"), retry: String::new() }
}

fn kind() -> KindRef {
    KindRef::new("wasmloop.dev/v1alpha1", "PodSet")
}

fn refused(life: &Lifecycle<u32>) -> bool {
    matches!(life.view().standing, Standing::Refused(_))
}

/// A version `version` of content `i` served.
fn served(life: &mut Lifecycle<u32>, i: u32) {
    assert_eq!(life.on(Input::Observed(content(i))), vec![Effect::Attempt(content(i))]);
    let effects = life.on(Input::Attempted { content: content(i), outcome: Attempt::Served(i), good_running: true });
    assert_eq!(effects, vec![Effect::Report]);
    assert_eq!(life.serving(), Some(&i));
}

fn at(start: Instant, secs: u64) -> Instant {
    start + Duration::from_secs(secs)
}

#[test]
fn a_refused_version_leaves_the_good_one_serving_and_is_tried_again_only_when_it_changes() {
    let mut life = Lifecycle::new(GonePolicy::default());
    served(&mut life, 2);
    assert_eq!(life.on(Input::Observed(content(3))), vec![Effect::Attempt(content(3))]);
    assert_eq!(life.view().standing, Standing::Loading);
    assert_eq!(life.view().serving, Some(&2), "the good version serves while the new one loads");
    let effects = life.on(Input::Attempted { content: content(3), outcome: Attempt::Refused("corrupt".into()), good_running: true });
    assert_eq!(effects, vec![Effect::Report]);
    assert_eq!(life.view(), View { serving: Some(&2), stopped: None, standing: Standing::Refused("corrupt") });
    assert!(life.on(Input::Observed(content(3))).is_empty(), "the same content is not tried again");
    let annotated = Content { retry: "annotated".into(), ..content(3) };
    assert_eq!(life.on(Input::Observed(annotated.clone())), vec![Effect::Attempt(annotated)], "an annotation change retries");
    // Back to the serving content: reported as current, nothing loaded.
    assert_eq!(life.on(Input::Observed(content(2))), vec![Effect::Report]);
    assert_eq!(life.view().standing, Standing::Current);
}

#[test]
fn one_missing_discovery_answer_stops_nothing_and_a_resumed_plugin_resumes_the_last_good_version() {
    // The scenario of issue #54: v2 serving, v3 refused, the API server restarts.
    let start = Instant::now();
    let mut life = Lifecycle::new(GonePolicy::default());
    served(&mut life, 2);
    life.on(Input::Observed(content(3)));
    life.on(Input::Attempted { content: content(3), outcome: Attempt::Refused("corrupt".into()), good_running: true });
    // Right after the restart, one answer without the CRD's kind: nothing happens.
    assert!(life.on(Input::Discovered { missing: Some(kind()), now: start }).is_empty());
    assert!(life.on(Input::Discovered { missing: None, now: at(start, 1) }).is_empty(), "back a second later");
    assert_eq!(life.serving(), Some(&2));
    // Missing in three answers but within 20 s: still nothing.
    for s in [10, 12, 14] {
        assert!(life.on(Input::Discovered { missing: Some(kind()), now: at(start, s) }).is_empty());
    }
    // Missing for 20 s (and three answers): suspended, not forgotten; the status says so.
    assert_eq!(life.on(Input::Discovered { missing: Some(kind()), now: at(start, 30) }), vec![Effect::Suspend, Effect::Report]);
    let view = life.view();
    assert_eq!(view.serving, None, "nothing is said to serve while nothing runs");
    assert!(matches!(view.stopped, Some((2, Stop::Suspended(WaitReason::KindNotServed { .. })))), "{view:?}");
    assert_eq!(view.standing, Standing::Refused("corrupt"));
    // The kind is back: the good version resumes, not the refused one.
    assert_eq!(life.on(Input::Discovered { missing: None, now: at(start, 40) }), vec![Effect::Resume(2)]);
    assert_eq!(life.on(Input::Resumed(Ok(()))), vec![Effect::Report]);
    assert_eq!(life.view(), View { serving: Some(&2), stopped: None, standing: Standing::Refused("corrupt") });
}

#[test]
fn a_resume_that_fails_is_retried_with_the_next_answer() {
    let start = Instant::now();
    let mut life = Lifecycle::new(GonePolicy { polls: 1, window: Duration::ZERO });
    served(&mut life, 1);
    life.on(Input::Discovered { missing: Some(kind()), now: start });
    assert_eq!(life.on(Input::Discovered { missing: None, now: start }), vec![Effect::Resume(1)]);
    assert_eq!(life.on(Input::Resumed(Err(Stop::Failed("informer did not sync".into())))), vec![Effect::Report]);
    assert_eq!(life.view().stopped, Some((&1, &Stop::Failed("informer did not sync".into()))));
    assert_eq!(life.on(Input::Discovered { missing: None, now: start }), vec![Effect::Resume(1)]);
}

#[test]
fn a_replacement_that_failed_half_way_resumes_the_good_version() {
    let mut life = Lifecycle::new(GonePolicy::default());
    served(&mut life, 1);
    life.on(Input::Observed(content(2)));
    let effects =
        life.on(Input::Attempted { content: content(2), outcome: Attempt::Refused("informer failed".into()), good_running: false });
    assert_eq!(effects, vec![Effect::Resume(1), Effect::Report]);
    assert_eq!(life.serving(), None);
    life.on(Input::Resumed(Ok(())));
    assert_eq!(life.serving(), Some(&1));
}

#[test]
fn a_new_host_serves_the_remembered_version_when_the_configmap_cannot() {
    let mut life = Lifecycle::new(GonePolicy::default());
    assert!(life.on(Input::Remembered(content(2))).is_empty(), "nothing failed yet");
    assert_eq!(life.on(Input::Observed(content(3))), vec![Effect::Attempt(content(3))]);
    let effects = life.on(Input::Attempted { content: content(3), outcome: Attempt::Refused("corrupt".into()), good_running: true });
    assert_eq!(effects, vec![Effect::Report, Effect::Attempt(content(2))]);
    life.on(Input::Attempted { content: content(2), outcome: Attempt::Served(2), good_running: true });
    assert_eq!(life.view(), View { serving: Some(&2), stopped: None, standing: Standing::Refused("corrupt") });
    // A remembered content that is refused too is not tried again.
    let mut life = Lifecycle::new(GonePolicy::default());
    life.on(Input::Observed(content(3)));
    life.on(Input::Remembered(content(2)));
    let effects = life.on(Input::Attempted { content: content(3), outcome: Attempt::Refused("corrupt".into()), good_running: true });
    assert_eq!(effects, vec![Effect::Report, Effect::Attempt(content(2))]);
    life.on(Input::Attempted { content: content(2), outcome: Attempt::Refused("payload gone".into()), good_running: true });
    let annotated = Content { retry: "x".into(), ..content(3) };
    life.on(Input::Observed(annotated.clone()));
    let effects = life.on(Input::Attempted { content: annotated, outcome: Attempt::Refused("corrupt".into()), good_running: true });
    assert_eq!(effects, vec![Effect::Report]);
    assert!(refused(&life) && life.serving().is_none());
}

#[test]
fn a_remembered_content_that_is_the_target_is_not_attempted_twice() {
    let mut life: Lifecycle<u32> = Lifecycle::new(GonePolicy::default());
    life.on(Input::Remembered(content(2)));
    life.on(Input::Observed(content(2)));
    let waits = Attempt::Waiting(WaitReason::NameTaken { name: "p".into(), holder: "q".into() });
    assert_eq!(life.on(Input::Attempted { content: content(2), outcome: waits, good_running: true }), vec![Effect::Report]);
}

#[test]
fn deletion_removes_everything() {
    let mut life = Lifecycle::new(GonePolicy::default());
    served(&mut life, 1);
    assert_eq!(life.on(Input::Deleted), vec![Effect::Remove]);
    assert_eq!(life.view(), View { serving: None, stopped: None, standing: Standing::Unknown });
}

// ---------------------------------------------------------------------------------------------
// Property tests: a model world the effects act on.
// ---------------------------------------------------------------------------------------------

/// What loading content `i` does in the model world.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Behaviour {
    /// Loads (when its kind is served).
    Good,
    /// Waits (a payload missing).
    Waits,
    /// Refused.
    Refused,
    /// Refused after the good version's controller was stopped and could not be restarted.
    BreaksTheOld,
}

fn behaviour(i: u32) -> Behaviour {
    match i % 5 {
        0 | 1 => Behaviour::Good,
        2 => Behaviour::Waits,
        3 => Behaviour::Refused,
        _ => Behaviour::BreaksTheOld,
    }
}

#[derive(Debug, Default)]
struct World {
    /// Whether the API server serves the kind.
    served: bool,
    /// The version whose controller runs.
    running: Option<u32>,
    /// Discovery answers that missed the kind in a row, and when the first of them came.
    misses: u32,
    first_miss: Option<Instant>,
    /// Set by an effect that broke an invariant.
    violation: Option<String>,
}

struct Model(Mutex<World>);

impl Model {
    fn with<T>(&self, f: impl FnOnce(&mut World) -> T) -> T {
        f(&mut self.0.lock().unwrap())
    }
}

impl Effects<u32> for Model {
    async fn attempt(&self, content: &Content) -> (Attempt<u32>, bool) {
        let i: u32 = content.version[1..].parse().unwrap();
        self.with(|w| match behaviour(i) {
            Behaviour::Good if !w.served => (Attempt::Waiting(WaitReason::KindNotServed { kind: kind(), role: "reconciles" }), true),
            Behaviour::Good => {
                w.running = Some(i);
                (Attempt::Served(i), true)
            }
            Behaviour::Waits => (Attempt::Waiting(WaitReason::NameTaken { name: "p".into(), holder: "x".into() }), true),
            Behaviour::Refused => (Attempt::Refused("bad".into()), true),
            Behaviour::BreaksTheOld => {
                let had = w.running.take().is_some();
                (Attempt::Refused("restart failed".into()), !had)
            }
        })
    }

    async fn resume(&self, version: &u32) -> Result<(), Stop> {
        self.with(|w| {
            if behaviour(*version) != Behaviour::Good {
                w.violation = Some(format!("resumed version {version}, which never served"));
            }
            if w.served {
                w.running = Some(*version);
                Ok(())
            } else {
                Err(Stop::Suspended(WaitReason::KindNotServed { kind: kind(), role: "reads" }))
            }
        })
    }

    async fn suspend(&self) {
        let policy = GonePolicy::default();
        self.with(|w| {
            let span = w.first_miss.map(|f| Instant::now().saturating_duration_since(f)).unwrap_or_default();
            if w.misses < policy.polls || span < policy.window {
                w.violation = Some(format!("suspended after {} missing answers over {span:?}", w.misses));
            }
            w.running = None;
        });
    }

    async fn remove(&self) {
        self.with(|w| w.running = None);
    }

    async fn report(&self, view: View<'_, u32>) {
        self.with(|w| {
            if view.serving != w.running.as_ref() {
                w.violation = Some(format!("the status says {:?} serves while {:?} runs", view.serving, w.running));
            }
        });
    }
}

#[derive(Clone, Debug)]
enum Step {
    /// The ConfigMap now holds content `i` (or holds it still: a retry).
    Observe(u32),
    Delete,
    /// The kind stops or starts being served.
    Served(bool),
    /// Time passes, then discovery is asked (as the manager does every 10 s).
    Poll(u64),
    /// The host restarts: nothing runs; the new host sees the ConfigMap and what it recorded.
    Restart,
}

fn step() -> impl Strategy<Value = Step> {
    prop_oneof![
        3 => (0u32..8).prop_map(Step::Observe),
        1 => Just(Step::Delete),
        2 => any::<bool>().prop_map(Step::Served),
        4 => (1u64..15).prop_map(Step::Poll),
        1 => Just(Step::Restart),
    ]
}

/// Run `steps` against the model; the first broken invariant, if any.
fn run(steps: &[Step]) -> Result<(), TestCaseError> {
    let rt = tokio::runtime::Builder::new_current_thread().enable_time().start_paused(true).build().unwrap();
    rt.block_on(async {
        let model = Model(Mutex::new(World { served: true, ..World::default() }));
        let mut life: Lifecycle<u32> = Lifecycle::new(GonePolicy::default());
        // What the ConfigMap holds (None: deleted), and the good content the host recorded on it.
        let mut holds: Option<u32> = None;
        let mut recorded: Option<Content> = None;
        for (n, step) in steps.iter().enumerate() {
            let good_before = life.good().copied();
            match step {
                Step::Observe(i) => {
                    holds = Some(*i);
                    drive(&mut life, Input::Observed(content(*i)), &model).await;
                }
                Step::Delete => {
                    holds = None;
                    recorded = None;
                    drive(&mut life, Input::Deleted, &model).await;
                }
                Step::Served(served) => model.with(|w| w.served = *served),
                Step::Poll(secs) => {
                    tokio::time::advance(Duration::from_secs(*secs)).await;
                    let now = Instant::now();
                    let missing = model.with(|w| {
                        if w.served {
                            w.misses = 0;
                            w.first_miss = None;
                            None
                        } else {
                            w.misses += 1;
                            w.first_miss.get_or_insert(now);
                            Some(kind())
                        }
                    });
                    if life.good().is_some() {
                        drive(&mut life, Input::Discovered { missing, now }, &model).await;
                    }
                    // Waiting contents are retried by the manager's backoff.
                    if let Some(i) = holds {
                        drive(&mut life, Input::Observed(content(i)), &model).await;
                    }
                }
                Step::Restart => {
                    model.with(|w| w.running = None);
                    life = Lifecycle::new(GonePolicy::default());
                    if let Some(r) = recorded.clone() {
                        drive(&mut life, Input::Remembered(r), &model).await;
                    }
                    if let Some(i) = holds {
                        drive(&mut life, Input::Observed(content(i)), &model).await;
                    }
                }
            }
            if let Some(v) = model.with(|w| w.violation.take()) {
                return Err(TestCaseError::fail(format!("step {n} ({step:?}): {v}")));
            }
            // 3: the machine says a version serves exactly when its controller runs.
            let running = model.with(|w| w.running);
            if life.serving().copied() != running {
                return Err(TestCaseError::fail(format!("step {n} ({step:?}): serving {:?} but running {running:?}", life.serving())));
            }
            // 1: a good version is kept until deleted or replaced by a version that served.
            if let (Some(before), Step::Observe(_) | Step::Served(_) | Step::Poll(_)) = (good_before, step) {
                match life.good() {
                    None => return Err(TestCaseError::fail(format!("step {n} ({step:?}): good version {before} forgotten"))),
                    Some(now) if *now != before && behaviour(*now) != Behaviour::Good => {
                        return Err(TestCaseError::fail(format!("step {n} ({step:?}): good version {now} never served")));
                    }
                    Some(_) => {}
                }
            }
            // 4: a replacement that failed half-way is followed by a resume at once (the model's
            // resumes fail only for a kind not served, as suspensions).
            if let Some((v, Stop::Failed(why))) = life.view().stopped {
                return Err(TestCaseError::fail(format!("step {n} ({step:?}): good version {v} left stopped: {why}")));
            }
            // 2 and liveness: while the kind is served, a good version runs after any poll.
            let served = model.with(|w| w.served);
            if served && matches!(step, Step::Poll(_)) && life.good().is_some() && life.serving().is_none() {
                return Err(TestCaseError::fail(format!("step {n} ({step:?}): the kind is served but the good version does not run")));
            }
            // 5: a restarted host serves the recorded good version when the ConfigMap cannot.
            if let (Step::Restart, Some(r), true, Some(i)) = (step, &recorded, served, holds)
                && life.serving().is_none()
            {
                return Err(TestCaseError::fail(format!(
                    "step {n}: restarted holding content {i} with {r:?} recorded, but nothing serves"
                )));
            }
            if life.serving().is_some() {
                recorded = life.good_content().cloned();
            }
        }
        Ok(())
    })
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 4000, ..ProptestConfig::default() })]

    #[test]
    fn the_invariants_hold_over_random_sequences(steps in proptest::collection::vec(step(), 1..60)) {
        run(&steps)?;
    }
}

#[test]
fn the_model_catches_a_machine_that_suspends_on_one_answer() {
    // The checks can fail: a policy of one answer suspends at once, which the model reports.
    let steps = [Step::Observe(0), Step::Served(false), Step::Poll(1)];
    let rt = tokio::runtime::Builder::new_current_thread().enable_time().start_paused(true).build().unwrap();
    let err = rt.block_on(async {
        let model = Model(Mutex::new(World { served: true, ..World::default() }));
        let mut life: Lifecycle<u32> = Lifecycle::new(GonePolicy { polls: 1, window: Duration::ZERO });
        drive(&mut life, Input::Observed(content(0)), &model).await;
        model.with(|w| {
            w.served = false;
            w.misses = 1;
            w.first_miss = Some(Instant::now());
        });
        drive(&mut life, Input::Discovered { missing: Some(kind()), now: Instant::now() }, &model).await;
        model.with(|w| w.violation.take())
    });
    assert!(err.is_some_and(|e| e.contains("suspended after 1 missing answers")), "{steps:?}");
    assert!(run(&steps).is_ok());
}
