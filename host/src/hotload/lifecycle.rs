//! The life cycle of one plugin ConfigMap, as a pure transition function: inputs (what the
//! ConfigMap holds, how an attempt to load it ended, discovery's answers about the kinds of the
//! version that serves, whether a stopped version could start again, the ConfigMap's deletion)
//! change a [`Lifecycle`] and return [`Effect`]s (attempt a load, resume, suspend or remove a
//! controller, report the status). [`drive`] runs the effects through a small [`Effects`] trait
//! and feeds their results back, so the manager is a thin loop and every transition is tested
//! here without an API server or a compiler.
//!
//! The state is the **good** version (the last one that served, with whether it runs now), the
//! **target** (what the ConfigMap holds when that is not the good version: being attempted,
//! waiting, or refused) and, on a host that started after the ConfigMap was last loaded, the
//! **remembered** good content (recorded on the ConfigMap when a version loads).
//!
//! The invariants, checked by the property tests below over random sequences of inputs:
//!
//! 1. Once a version has served, a good version exists until the ConfigMap is deleted or a newer
//!    version served; only a version that served is ever resumed (never a refused or waiting
//!    one).
//! 2. A kind of the good version that is missing from one discovery answer does not stop it: it
//!    is suspended only once the kind has been missing from every answer for
//!    [`GonePolicy::polls`] answers spanning at least [`GonePolicy::window`]. When the kinds are
//!    served again, the good version resumes (and is retried until it does).
//! 3. The [`View`] (what the status annotation says) names a version as serving exactly when
//!    that version's controller runs.
//! 4. A target that fails never stops the good version; if replacing it failed half-way (its
//!    controller could not be restarted), the good version is resumed.
//! 5. A host that starts with a ConfigMap whose content cannot serve serves the remembered good
//!    content, if it still loads.

use std::collections::VecDeque;
use std::future::Future;
use std::time::Duration;

use tokio::time::Instant;

use super::waiting::WaitReason;
use crate::kinds::KindRef;

/// What a plugin ConfigMap holds, as far as loading it goes.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Content {
    /// The version: a digest of its data (manifest, payload reference or inline component) and
    /// of the payload objects that reference resolved to.
    pub version: String,
    /// What else makes a refused attempt worth another try: its annotations other than the
    /// host's own (so `kubectl annotate` retries, and the host's status writes do not).
    pub retry: String,
}

/// How an attempt to load a [`Content`] ended.
#[derive(Clone, Debug, PartialEq)]
pub enum Attempt<V> {
    /// The version serves now (its controller started, or was swapped into the running one).
    Served(V),
    /// It waits for something that can come by itself.
    Waiting(WaitReason),
    /// It was refused; only a change of the ConfigMap (or what it references) tries it again.
    Refused(String),
}

/// Why a good version's controller does not run.
#[derive(Clone, Debug, PartialEq)]
pub enum Stop {
    /// A kind it reads is gone (confirmed: policy 2); it resumes when the kind is back.
    Suspended(WaitReason),
    /// Starting it (again) failed; it is retried with every discovery round.
    Failed(String),
}

/// An input to [`Lifecycle::on`].
#[derive(Clone, Debug)]
pub enum Input<V> {
    /// The ConfigMap as it is now (it, a payload or a claim it waits for changed; or a retry).
    Observed(Content),
    /// The good content recorded on the ConfigMap by an earlier host (this host never served
    /// it): served if what the ConfigMap now holds cannot be.
    Remembered(Content),
    /// An attempt ([`Effect::Attempt`]) ended; `good_running` is whether the good version's
    /// controller still runs afterwards (false if replacing it failed half-way).
    Attempted {
        /// What was attempted.
        content: Content,
        /// How it ended.
        outcome: Attempt<V>,
        /// Whether the good version (if any) still runs.
        good_running: bool,
    },
    /// Discovery answered about the good version's kinds at `now`: the first one not served,
    /// or `None` if all are.
    Discovered {
        /// The first kind not served.
        missing: Option<KindRef>,
        /// When the answer came.
        now: Instant,
    },
    /// A [`Effect::Resume`] ended.
    Resumed(Result<(), Stop>),
    /// The ConfigMap is gone.
    Deleted,
}

/// What [`Lifecycle::on`] asks of the world.
#[derive(Clone, Debug, PartialEq)]
pub enum Effect<V> {
    /// Load this content; its result comes back as [`Input::Attempted`].
    Attempt(Content),
    /// Start the good version's controller again; the result comes back as [`Input::Resumed`].
    Resume(V),
    /// Stop the good version's controller, keeping the version.
    Suspend,
    /// Stop and forget everything (the ConfigMap is gone).
    Remove,
    /// The [`View`] changed: report it (status annotation, Event, metric).
    Report,
}

/// When a kind missing from discovery counts as gone.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct GonePolicy {
    /// Consecutive answers that must all miss it…
    pub polls: u32,
    /// …over at least this long.
    pub window: Duration,
}

impl Default for GonePolicy {
    /// Three answers over at least 20 s (with discovery every 10 s: missing for 20–30 s). An API
    /// server that restarts serves its CRDs again within seconds.
    fn default() -> Self {
        Self { polls: 3, window: Duration::from_secs(20) }
    }
}

/// Where the ConfigMap stands, for the status annotation.
#[derive(Clone, Debug, PartialEq)]
pub enum Standing<'a> {
    /// The good version is what the ConfigMap holds (it may be suspended: see [`View::stopped`]).
    Current,
    /// What the ConfigMap holds is being loaded.
    Loading,
    /// What the ConfigMap holds waits.
    Waiting(&'a WaitReason),
    /// What the ConfigMap holds was refused.
    Refused(&'a str),
    /// Nothing observed yet.
    Unknown,
}

/// What the status says, derived from the state (never stored apart from it).
#[derive(Clone, Debug, PartialEq)]
pub struct View<'a, V> {
    /// The version that serves: its controller runs.
    pub serving: Option<&'a V>,
    /// The good version when it does not run, and why.
    pub stopped: Option<(&'a V, &'a Stop)>,
    /// Where what the ConfigMap holds stands.
    pub standing: Standing<'a>,
}

#[derive(Clone, Debug)]
struct Good<V> {
    version: V,
    content: Content,
    stop: Option<Stop>,
}

#[derive(Clone, Debug)]
enum Phase {
    Loading,
    Waiting(WaitReason),
    Refused(String),
}

#[derive(Clone, Debug)]
struct Target {
    content: Content,
    phase: Phase,
}

#[derive(Clone, Debug)]
struct Absence {
    since: Instant,
    polls: u32,
}

/// The life cycle of one plugin ConfigMap. `V` is a loaded version (an `Arc` of the plugin in
/// the host, a number in tests).
#[derive(Clone, Debug)]
pub struct Lifecycle<V> {
    policy: GonePolicy,
    good: Option<Good<V>>,
    target: Option<Target>,
    remembered: Option<Content>,
    absence: Option<Absence>,
}

impl<V: Clone + PartialEq> Lifecycle<V> {
    /// Nothing observed yet; kinds count as gone by `policy`.
    pub fn new(policy: GonePolicy) -> Self {
        Self { policy, good: None, target: None, remembered: None, absence: None }
    }

    /// The version that serves (its controller runs), if any.
    pub fn serving(&self) -> Option<&V> {
        self.good.as_ref().filter(|g| g.stop.is_none()).map(|g| &g.version)
    }

    /// The good version (the last that served), running or not.
    pub fn good(&self) -> Option<&V> {
        self.good.as_ref().map(|g| &g.version)
    }

    /// The content of the good version.
    pub fn good_content(&self) -> Option<&Content> {
        self.good.as_ref().map(|g| &g.content)
    }

    /// What the status says.
    pub fn view(&self) -> View<'_, V> {
        let standing = match &self.target {
            None if self.good.is_some() => Standing::Current,
            None => Standing::Unknown,
            Some(Target { phase: Phase::Loading, .. }) => Standing::Loading,
            Some(Target { phase: Phase::Waiting(reason), .. }) => Standing::Waiting(reason),
            Some(Target { phase: Phase::Refused(reason), .. }) => Standing::Refused(reason),
        };
        View { serving: self.serving(), stopped: self.good.as_ref().and_then(|g| g.stop.as_ref().map(|s| (&g.version, s))), standing }
    }

    /// Apply `input`; what must happen now, in order.
    pub fn on(&mut self, input: Input<V>) -> Vec<Effect<V>> {
        match input {
            Input::Observed(content) => self.observed(content),
            Input::Remembered(content) => self.remembered(content),
            Input::Attempted { content, outcome, good_running } => self.attempted(content, outcome, good_running),
            Input::Discovered { missing, now } => self.discovered(missing, now),
            Input::Resumed(result) => self.resumed(result),
            Input::Deleted => {
                *self = Self::new(self.policy);
                vec![Effect::Remove]
            }
        }
    }

    fn observed(&mut self, content: Content) -> Vec<Effect<V>> {
        if self.good.as_ref().is_some_and(|g| g.content.version == content.version) {
            // Back to (or still at) the good version: nothing to load.
            let was_elsewhere = self.target.take().is_some();
            if let Some(good) = &mut self.good {
                good.content = content;
            }
            return if was_elsewhere { vec![Effect::Report] } else { vec![] };
        }
        if let Some(Target { content: held, phase: Phase::Refused(_) }) = &self.target
            && *held == content
        {
            // Refused as it is: only a change tries it again.
            return vec![];
        }
        self.target = Some(Target { content: content.clone(), phase: Phase::Loading });
        vec![Effect::Attempt(content)]
    }

    fn remembered(&mut self, content: Content) -> Vec<Effect<V>> {
        if self.good.is_some() || self.target.as_ref().is_some_and(|t| t.content.version == content.version) {
            return vec![];
        }
        self.remembered = Some(content);
        self.fall_back()
    }

    /// With no good version and a target that cannot serve, attempt the remembered content
    /// (unless it is the target itself).
    fn fall_back(&mut self) -> Vec<Effect<V>> {
        let Some(target) = self.target.as_ref().filter(|t| !matches!(t.phase, Phase::Loading)) else { return vec![] };
        match self.remembered.clone() {
            Some(remembered) if self.good.is_none() && remembered.version != target.content.version => vec![Effect::Attempt(remembered)],
            _ => vec![],
        }
    }

    fn attempted(&mut self, content: Content, outcome: Attempt<V>, good_running: bool) -> Vec<Effect<V>> {
        let mut effects = Vec::new();
        if !good_running && let Some(good) = self.good.as_mut().filter(|g| g.stop.is_none()) {
            good.stop = Some(Stop::Failed("replacing it failed half-way".into()));
            effects.push(Effect::Resume(good.version.clone()));
        }
        let is_target = self.target.as_ref().is_some_and(|t| t.content == content);
        let is_remembered = self.remembered.as_ref() == Some(&content);
        match outcome {
            Attempt::Served(version) => {
                // A version serves: it is the good one now (any previous good one was replaced).
                effects.retain(|e| !matches!(e, Effect::Resume(_)));
                self.good = Some(Good { version, content: content.clone(), stop: None });
                self.absence = None;
                self.remembered = None;
                if is_target {
                    self.target = None;
                }
            }
            Attempt::Waiting(reason) if is_target => self.set_phase(Phase::Waiting(reason)),
            Attempt::Refused(reason) if is_target => self.set_phase(Phase::Refused(reason)),
            // The remembered content was refused: it is not tried again (one that waits is tried
            // again with the target).
            Attempt::Refused(_) if is_remembered => self.remembered = None,
            // A stale attempt (the target changed meanwhile: the newer one is attempted next).
            Attempt::Waiting(_) | Attempt::Refused(_) => {}
        }
        effects.push(Effect::Report);
        if is_target {
            effects.extend(self.fall_back());
        }
        effects
    }

    fn set_phase(&mut self, phase: Phase) {
        if let Some(target) = &mut self.target {
            target.phase = phase;
        }
    }

    fn discovered(&mut self, missing: Option<KindRef>, now: Instant) -> Vec<Effect<V>> {
        let Some(good) = &mut self.good else { return vec![] };
        let Some(kind) = missing else {
            self.absence = None;
            return match &good.stop {
                Some(_) => vec![Effect::Resume(good.version.clone())],
                None => vec![],
            };
        };
        if good.stop.is_some() {
            return vec![];
        }
        let absence = self.absence.get_or_insert(Absence { since: now, polls: 0 });
        absence.polls += 1;
        let gone = absence.polls >= self.policy.polls && now.saturating_duration_since(absence.since) >= self.policy.window;
        if !gone {
            return vec![];
        }
        good.stop = Some(Stop::Suspended(WaitReason::KindNotServed { kind, role: "reads" }));
        vec![Effect::Suspend, Effect::Report]
    }

    fn resumed(&mut self, result: Result<(), Stop>) -> Vec<Effect<V>> {
        let Some(good) = &mut self.good else { return vec![] };
        let before = good.stop.clone();
        good.stop = result.err();
        if good.stop.is_none() {
            self.absence = None;
        }
        if before == good.stop { vec![] } else { vec![Effect::Report] }
    }
}

/// What [`drive`] needs of the world: each effect, done.
pub trait Effects<V> {
    /// Load `content`; how it ended, and whether the good version still runs afterwards.
    fn attempt(&self, content: &Content) -> impl Future<Output = (Attempt<V>, bool)> + Send;
    /// Start `version`'s controller again.
    fn resume(&self, version: &V) -> impl Future<Output = Result<(), Stop>> + Send;
    /// Stop the good version's controller, keeping it.
    fn suspend(&self) -> impl Future<Output = ()> + Send;
    /// Stop everything and forget the ConfigMap.
    fn remove(&self) -> impl Future<Output = ()> + Send;
    /// Report `view`.
    fn report(&self, view: View<'_, V>) -> impl Future<Output = ()> + Send;
}

/// Apply `input` to `life` and carry out what follows, feeding each effect's result back in,
/// until nothing is left to do.
pub async fn drive<V: Clone + PartialEq, E: Effects<V>>(life: &mut Lifecycle<V>, input: Input<V>, effects: &E) {
    let mut todo: VecDeque<Effect<V>> = life.on(input).into();
    while let Some(effect) = todo.pop_front() {
        let next = match effect {
            Effect::Attempt(content) => {
                let (outcome, good_running) = effects.attempt(&content).await;
                Some(Input::Attempted { content, outcome, good_running })
            }
            Effect::Resume(version) => Some(Input::Resumed(effects.resume(&version).await)),
            Effect::Suspend => {
                effects.suspend().await;
                None
            }
            Effect::Remove => {
                effects.remove().await;
                None
            }
            Effect::Report => {
                effects.report(life.view()).await;
                None
            }
        };
        if let Some(input) = next {
            todo.extend(life.on(input));
        }
    }
}

#[cfg(test)]
#[path = "lifecycle_tests.rs"]
mod tests;
