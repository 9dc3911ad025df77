//! Applying an outcome: admission first (nothing is sent if one action is refused), then the
//! admitted actions in order within the controller's API and Event budgets, runs of creates and
//! deletes in slow-start batches, noting what the cache must show afterwards (expectations).
//! A failed reconcile's own actions go the same way before its error is settled.

use std::ops::Range;

use tracing::debug;

use super::expectations::{Expected, ExpectedChange};
use super::metrics::ActionResult;
use super::settled::{FailCause, Failed, Handling, Settled};
use super::{Current, HOST_REPORTER, Inner, Outcome, ReconcileError, Retry};
use crate::actions::{Action, Deletion, EventType, Planned};
use crate::admission::{self, AdmittedAction};
use crate::cache::CacheRead;
use crate::executor::{Executed, HostEvent};
use crate::fence::Fence;
use crate::kinds::ObjectKey;
use crate::queue::RateLimiter;

impl Inner {
    /// A failed reconcile: its actions (contract 0.3: Events, status conditions) are admitted and
    /// executed as an outcome's would be, then the error decides the retry. A permanent error
    /// is also reported as a Warning Event.
    pub(super) async fn failed(&self, key: &ObjectKey, current: &Current, error: ReconcileError) -> Settled {
        let mut cause = FailCause::Reconcile(error.cause.clone());
        if !error.actions.is_empty() {
            let outcome = Outcome { actions: error.actions, requeue_after: None };
            if let Err(f) = self.execute(key, current, outcome).await {
                cause = FailCause::WithActions { cause: error.cause, actions: f.cause };
            }
        }
        match error.retry {
            Retry::WhenChanged => {
                self.report(key, "ReconcileFailed", &format!("{}: {cause}", self.name)).await;
                Err(Failed::new(Handling::WhenChanged, cause))
            }
            Retry::Backoff => Err(Failed::new(Handling::Backoff, cause)),
        }
    }

    /// Admit every action first (target, scope, grants, protected objects judged by what each
    /// write produces, owners: nothing is sent if one is refused), then execute them in order.
    pub(super) async fn execute(&self, key: &ObjectKey, current: &Current, outcome: Outcome) -> Settled {
        let ctx = admission::Context {
            grants: &current.grants,
            cache: current.view.as_ref(),
            client: current.executor.dry_run_client(),
            manager: &self.name,
            budget: Some(&self.api),
        };
        let admitted = match self.shared.admission.admit(ctx, outcome.actions).await {
            Ok(admitted) => admitted,
            Err(admission::Error::Refused(refusal)) => {
                self.api.acquire().await;
                self.shared.metrics.action_executed(&self.name, refusal.verb, ActionResult::Refused);
                let cause = FailCause::Refused { plugin: self.name.clone(), refusal };
                self.report(key, "ActionRefused", &cause.to_string()).await;
                return Err(Failed::new(Handling::WhenChanged, cause));
            }
            Err(e @ admission::Error::Unverifiable { .. }) => {
                self.shared.metrics.action_executed(&self.name, e.verb(), ActionResult::Unverifiable);
                return Err(Failed::new(Handling::Backoff, FailCause::Admission(e)));
            }
            Err(e @ admission::Error::Conflict { .. }) => {
                self.shared.metrics.action_executed(&self.name, e.verb(), ActionResult::Conflict);
                return Err(Failed::new(Handling::Again, FailCause::Admission(e)));
            }
        };
        let mut expected = Vec::new();
        let result = self.execute_admitted(key, current, admitted.actions(), &mut expected).await;
        self.expectations.expect(key, expected);
        result.map(|()| outcome.requeue_after)
    }

    /// Send admitted actions in order, noting what the cache must show afterwards. A run of
    /// consecutive creates and deletes (independent objects) goes out in slow-start batches of
    /// doubling size, as KCM's `slowStartBatch`, starting at the size this controller's calls
    /// have proven ([`super::slow_start`]; 1 at first and after any failure): a failing batch
    /// stops the rest.
    async fn execute_admitted(
        &self,
        key: &ObjectKey,
        current: &Current,
        actions: &[AdmittedAction],
        expected: &mut Vec<Expected>,
    ) -> Result<(), Failed> {
        let mut done = 0;
        for run in runs(actions.iter().map(AdmittedAction::planned)) {
            let batched = run.batched;
            let mut batch = if batched { self.slow_start.first_batch() } else { 1 };
            let mut i = run.actions.start;
            while i < run.actions.end {
                let this = &actions[i..run.actions.end.min(i + batch)];
                let results = futures::future::join_all(this.iter().map(|a| self.execute_one(key, current, a))).await;
                let mut first_error = None;
                for result in results {
                    match result {
                        Ok(e) => {
                            done += 1;
                            expected.extend(e);
                        }
                        Err(e) => {
                            first_error.get_or_insert(e);
                        }
                    }
                }
                if let Some(e) = first_error {
                    if batched {
                        self.slow_start.failed();
                    }
                    // Say how far the outcome got: nothing is half-applied silently.
                    return Err(Failed::action(e, done, actions.len()));
                }
                if batched {
                    self.slow_start.succeeded(this.len());
                }
                i += this.len();
                batch *= 2;
            }
        }
        Ok(())
    }

    /// Send one action (within the API and Event budgets); what the cache must then show.
    async fn execute_one(
        &self,
        key: &ObjectKey,
        current: &Current,
        admitted: &AdmittedAction,
    ) -> Result<Option<Expected>, crate::executor::Error> {
        let verb = admitted.verb();
        if matches!(admitted.action(), Action::Event(_)) && !RateLimiter::<()>::when(&self.events, &()).is_zero() {
            // An Event flood is dropped, not queued (Events are best-effort by nature).
            self.shared.metrics.action_executed(&self.name, verb, ActionResult::Dropped);
            return Ok(None);
        }
        self.api.acquire().await;
        match current.executor.execute(&self.name, admitted, self.fence_for(key)).await {
            Ok(done) => {
                self.shared.metrics.action_executed(&self.name, verb, ActionResult::Ok);
                Ok(expectation(current, admitted.planned(), &done))
            }
            Err(e) => {
                let result = if e.is_fenced() {
                    ActionResult::Fenced
                } else if e.is_conflict() {
                    ActionResult::Conflict
                } else {
                    ActionResult::Error
                };
                self.shared.metrics.action_executed(&self.name, verb, result);
                debug!(key = %key, error = %e, "action failed");
                Err(e)
            }
        }
    }

    /// The fence writes for `key` go behind: its shard's, else the host's (leader election).
    fn fence_for(&self, key: &ObjectKey) -> &Fence {
        match &self.ownership {
            Some(o) => o.fence_for(key),
            None => &self.shared.fence,
        }
    }

    /// A Warning Event on the reconciled object from the host itself (best effort), for what
    /// is not retried: `ActionRefused` (admission) and `ReconcileFailed` (permanent errors).
    async fn report(&self, key: &ObjectKey, reason: &str, message: &str) {
        if let Err(e) = self.fence_for(key).check() {
            debug!(key = %key, error = %e, "not reporting the failure: this replica may not write");
            return;
        }
        let verb = wasmloop_model::Verb::Event;
        let event = HostEvent { event_type: EventType::Warning, reason, message };
        match self.executor.record_event(HOST_REPORTER, key, event).await {
            Ok(_) => self.shared.metrics.action_executed(HOST_REPORTER, verb, ActionResult::Ok),
            Err(e) => {
                self.shared.metrics.action_executed(HOST_REPORTER, verb, ActionResult::Error);
                debug!(key = %key, error = %e, "could not record the failure as an Event");
            }
        }
    }
}

/// A stretch of an outcome executed together: a run of creates and deletes (independent
/// objects: batched), or one other action.
#[derive(Debug, PartialEq, Eq)]
struct Run {
    actions: Range<usize>,
    batched: bool,
}

/// The outcome's actions in [`Run`]s, in order.
fn runs<'a>(actions: impl Iterator<Item = &'a Planned>) -> Vec<Run> {
    let mut out: Vec<Run> = Vec::new();
    for (i, a) in actions.enumerate() {
        let batched = a.is_create_or_delete();
        match out.last_mut() {
            Some(last) if batched && last.batched => last.actions.end = i + 1,
            _ => out.push(Run { actions: i..i + 1, batched }),
        }
    }
    out
}

/// `create v1/ConfigMap/team-a/welcome, event v1/Namespace/team-a`, or `no actions`.
pub(super) fn summarize(actions: &[Planned]) -> String {
    if actions.is_empty() {
        return "no actions".into();
    }
    actions.iter().map(|a| format!("{} {}", a.verb(), a.target())).collect::<Vec<_>>().join(", ")
}

/// What the cache must show after `planned` was executed: a created object (if the reconciler
/// caches objects like it: [`super::wiring::Caching`]), or a deleted one gone.
fn expectation(current: &Current, planned: &Planned, done: &Executed) -> Option<Expected> {
    match (planned.action(), done) {
        (Action::Create(_), Executed::Object(created)) => {
            current.caching.key_if_cached(created).or_else(|| planned.target().key().filter(|_| current.caching.caches_body(planned)))
        }
        (Action::Create(_), _) => planned.target().key().filter(|_| current.caching.caches_body(planned)),
        (Action::Delete(Deletion { key, .. }), _) => {
            let cached = current.view.get(&key.kind, key.ns(), &key.name).ok()??;
            return Some(Expected { object: key.clone(), change: ExpectedChange::Deleted { uid: cached.uid().to_owned() } });
        }
        _ => None,
    }
    .map(|object| Expected { object, change: ExpectedChange::Added })
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn planned(action: Action) -> Planned {
        Planned::new(action).unwrap()
    }

    #[test]
    fn creates_and_deletes_run_together_and_the_rest_one_by_one() {
        let pod = |n: &str| json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": n, "namespace": "ns"}});
        let key = |n: &str| crate::kinds::KindRef::new("v1", "Pod").key(Some("ns"), n);
        let actions = [
            planned(Action::Create(pod("a"))),
            planned(Action::delete(key("b"))),
            planned(Action::UpdateStatus { key: key("c"), status: json!({}) }),
            planned(Action::Create(pod("d"))),
            planned(Action::Apply(pod("e"))),
            planned(Action::Apply(pod("f"))),
        ];
        assert_eq!(
            runs(actions.iter()),
            vec![
                Run { actions: 0..2, batched: true },
                Run { actions: 2..3, batched: false },
                Run { actions: 3..4, batched: true },
                Run { actions: 4..5, batched: false },
                Run { actions: 5..6, batched: false },
            ]
        );
        assert!(runs([].iter()).is_empty());
        assert_eq!(summarize(&actions[..2]), "create v1/Pod/ns/a, delete v1/Pod/ns/b");
        assert_eq!(summarize(&[]), "no actions");
    }

    mod with_a_fake_api {
        use std::time::Duration;

        use serde_json::json;

        use super::*;
        use crate::actions::Event;
        use crate::controller::harness::{self, FakeExecute, GRANTS, Scripted, config_map};
        use crate::controller::{ControllerConfig, RateBudget};
        use crate::executor;
        use crate::kinds::KindRef;

        fn cm_key(name: &str) -> ObjectKey {
            KindRef::new("v1", "ConfigMap").key(Some("ns"), name)
        }

        fn nothing() -> std::sync::Arc<Scripted> {
            Scripted::new("test", |_| Ok(harness::outcome(Vec::new(), None)))
        }

        #[tokio::test]
        async fn a_refused_action_sends_nothing_of_its_outcome_and_is_reported() {
            let fake = FakeExecute::succeeding();
            let (inner, current, _) = harness::controller(nothing(), GRANTS, ControllerConfig::default(), fake.clone());
            let secret = json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "s", "namespace": "ns"}});
            let out = harness::outcome(vec![Action::Create(config_map("ns", "a")), Action::Create(secret)], None);
            let failed = inner.execute(&cm_key("a"), &current, out).await.unwrap_err();
            assert_eq!(failed.handling, Handling::WhenChanged, "a refusal waits for a change: {}", failed.cause);
            assert!(fake.sent().is_empty(), "nothing of a refused outcome is sent: {:?}", fake.sent());
            let reports = fake.reports.lock().clone();
            assert!(
                reports.len() == 1 && reports[0].starts_with("ActionRefused: ") && reports[0].contains("v1/Secret/ns/s"),
                "{reports:?}"
            );
        }

        #[tokio::test]
        async fn creates_go_out_in_doubling_batches_and_a_failure_stops_the_rest() {
            let fake = FakeExecute::new(|a| {
                if a.target().name() == Some("c-3") {
                    let status = kube::core::Status::failure("etcd timeout", "InternalError").with_code(500);
                    return Err(executor::Error::Api {
                        verb: a.verb(),
                        object: a.target().to_string(),
                        source: kube::Error::Api(status.boxed()),
                    });
                }
                Ok(Executed::Done)
            });
            let (inner, current, _) = harness::controller(nothing(), GRANTS, ControllerConfig::default(), fake.clone());
            let creates = (0..10).map(|i| Action::Create(config_map("ns", &format!("c-{i}")))).collect();
            let failed = inner.execute(&cm_key("p"), &current, harness::outcome(creates, None)).await.unwrap_err();
            // Batches of 1, 2 and 4: the third holds c-3, and nothing after it goes out.
            let sent = fake.sent();
            assert_eq!(sent.len(), 7, "{sent:?}");
            assert!(sent.iter().all(|s| !s.ends_with("c-7") && !s.ends_with("c-9")), "{sent:?}");
            assert_eq!(failed.handling, Handling::Backoff);
            assert!(failed.cause.to_string().contains("(6 of 10 actions of this outcome were executed)"), "{}", failed.cause);
            // After a failure the next run starts at one again.
            fake.sent.lock().clear();
            let creates = (10..13).map(|i| Action::Create(config_map("ns", &format!("c-{i}")))).collect();
            inner.execute(&cm_key("p"), &current, harness::outcome(creates, None)).await.unwrap();
            assert_eq!(fake.sent().len(), 3);
        }

        #[tokio::test(start_paused = true)]
        async fn events_over_the_budget_are_dropped_and_counted_not_queued() {
            let fake = FakeExecute::succeeding();
            let config = ControllerConfig { events: RateBudget { qps: 1.0, burst: 2 }, ..ControllerConfig::default() };
            let (inner, current, registry) = harness::controller(nothing(), GRANTS, config, fake.clone());
            let event = |i: usize| {
                Action::Event(Event {
                    regarding: cm_key("a"),
                    event_type: EventType::Normal,
                    reason: "Seen".into(),
                    message: format!("{i}"),
                })
            };
            let done =
                inner.execute(&cm_key("a"), &current, harness::outcome((0..5).map(event).collect(), Some(Duration::from_secs(7)))).await;
            assert_eq!(done.unwrap(), Some(Duration::from_secs(7)), "dropped Events do not fail the reconcile");
            assert_eq!(fake.sent().len(), 2, "the burst goes out");
            let metrics = harness::metrics_text(&registry);
            let dropped = metrics.lines().find(|l| l.contains("result=\"dropped\"") && l.contains("verb=\"event\"")).unwrap_or_default();
            assert!(dropped.ends_with(" 3"), "three counted as dropped: {dropped:?}\n{metrics}");
        }

        #[tokio::test]
        async fn a_closed_fence_holds_every_write_back_and_is_retried_with_backoff() {
            let fake = FakeExecute::succeeding();
            let (inner, current, _) = harness::controller(nothing(), GRANTS, ControllerConfig::default(), fake.clone());
            let inner = {
                // The host's fence closes (the Lease was lost): same controller, closed fence.
                let mut shared = inner.shared.clone();
                shared.fence = crate::fence::Fence::closed();
                std::sync::Arc::new(crate::controller::Inner::new("test".into(), ControllerConfig::default(), shared, fake.clone(), None))
            };
            let out = harness::outcome(vec![Action::Create(config_map("ns", "a"))], None);
            let failed = inner.execute(&cm_key("a"), &current, out).await.unwrap_err();
            assert!(fake.sent().is_empty());
            assert_eq!(failed.handling, Handling::Backoff, "{}", failed.cause);
            assert!(fake.reports.lock().is_empty(), "a fenced replica reports nothing either");
        }
    }
}
