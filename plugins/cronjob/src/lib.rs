//! `cronjob`: the Kubebuilder book's CronJob tutorial (`batch.tutorial.kubebuilder.io/v1`,
//! `internal/controller/cronjob_controller.go`) as a wasmloop plugin, step for step: a CronJob
//! runs its `jobTemplate` as Jobs on its `schedule`, keeps `status.active` and
//! `status.lastScheduleTime`, prunes finished Jobs past its history limits, honours `suspend`,
//! `startingDeadlineSeconds` and `concurrencyPolicy` (Allow, Forbid, Replace), and reports
//! conditions (Available, Progressing, Degraded). Its CRD is the tutorial's, as controller-gen
//! writes it (`config/crd.yaml`).
//!
//! Where the port differs from the Go, and why:
//! - One reconcile returns one outcome, so the Go's several status updates are one status write,
//!   made only when the status changes; the condition that reports a new Job ("JobCreated") and
//!   its `lastScheduleTime` go in a status written after the create (`status_after_writes`): a
//!   create the API server refuses is never reported, and the next reconcile (which is told why
//!   in `last_error`) reports `Degraded` / `JobCreationFailed` before it tries again.
//! - History is pruned in reconciles that create nothing (the next one, as the new Job's event
//!   comes back), so a failing delete never holds back a scheduled run.
//! - `Degraded` is removed once nothing is failing (the Go leaves it set for ever).
//! - The Jobs are found through the index `owner-cronjob`: the name of a Job's controller owner
//!   when that owner is a CronJob of this group and version, the tutorial's `.metadata.controller`
//!   index, declared with `Metadata::controller_index` (a filtered index path:
//!   `metadata.ownerReferences[controller=true][kind=CronJob][apiVersion=…].name`).
//! - The clock is the host's (`wasmloop_sdk::time`): in tests, the FakeCache's settable clock, as
//!   the tutorial's `Clock` interface.

mod schedule;

use std::time::Duration;

use serde_json::{Map, Value, json};
use wasmloop_sdk::conditions::{self, Condition};
use wasmloop_sdk::{Deletion, Error, KindRef, Metadata, Outcome, Reconciler, Request, ResultExt, cache, kinds, object, time};

pub use schedule::Schedule;

/// The reconciled kind.
pub const CRON_JOB: KindRef = KindRef::from_static("batch.tutorial.kubebuilder.io/v1", "CronJob");
/// The annotation a Job carries with the time it was scheduled for (RFC 3339).
pub const SCHEDULED_AT: &str = "batch.tutorial.kubebuilder.io/scheduled-at";
/// The index of Jobs by the name of their controlling CronJob (the tutorial's `jobOwnerKey`).
pub const OWNER_INDEX: &str = "owner-cronjob";
/// More missed runs than this without a `startingDeadlineSeconds` is an error, as in the Go.
const TOO_MANY_MISSED: usize = 100;

pub struct CronJobs;

impl Reconciler for CronJobs {
    fn metadata() -> Metadata {
        Metadata::new("cronjob", env!("CARGO_PKG_VERSION")).reconciles(CRON_JOB).owns(kinds::JOB).controller_index(
            kinds::JOB,
            OWNER_INDEX,
            &CRON_JOB,
        )
    }

    fn reconcile(req: Request) -> Result<Outcome, Error> {
        // 1: Load the CronJob by name.
        let Some(cron) = cache::get_key::<Value>(&req.key).context("reading the CronJob")? else {
            return Ok(Outcome::new()); // deleted: its Jobs go with it (garbage collection)
        };
        if object::is_deleting(&cron) {
            return Ok(Outcome::new());
        }
        let spec = &cron["spec"];
        let now_us = time::now_micros();
        let now = now_us.div_euclid(1_000_000);

        // 2: List the child Jobs and work out the status from them (never from the old status).
        let jobs = Jobs::of(&cron)?;
        let mut status = Observed::new(&cron, &jobs);
        status.job_conditions(&jobs, spec["suspend"] == true);
        if let Some(failed) = &req.last_error {
            let reason = if failed.starts_with("create batch/v1/Job/") { "JobCreationFailed" } else { "ReconciliationError" };
            status.degraded(reason, failed);
        }

        // 5: The next scheduled run, and the latest one missed.
        let runs = match Runs::compute(&cron, now) {
            Ok(runs) => runs,
            Err(why) => {
                status.degraded("InvalidSchedule", &format!("Failed to parse schedule: {why}"));
                return Ok(status.write(Outcome::new()));
            }
        };
        let requeue = Duration::from_micros(u64::try_from(runs.next * 1_000_000 - now_us).unwrap_or(0));

        // 4: Suspended, nothing due, or too late: write what was observed, prune, wait.
        let due = runs.missed.filter(|_| spec["suspend"] != true);
        let Some(missed) = due else {
            return Ok(prune(status.write(Outcome::new()), spec, &jobs).requeue_after(requeue));
        };
        if let Some(deadline) = spec["startingDeadlineSeconds"].as_i64()
            && missed + deadline < now
        {
            let message = format!("Missed starting deadline for run at {}", time::format(missed));
            status.degraded("MissedSchedule", &message);
            return Ok(prune(status.write(Outcome::new()), spec, &jobs).requeue_after(requeue));
        }

        // 6: Run a new Job, unless the concurrency policy says otherwise.
        let policy = spec["concurrencyPolicy"].as_str().unwrap_or("Allow");
        if policy == "Forbid" && !jobs.active.is_empty() {
            wasmloop_sdk::debug!("concurrency policy blocks concurrent runs, skipping ({} active)", jobs.active.len());
            return Ok(prune(status.write(Outcome::new()), spec, &jobs).requeue_after(requeue));
        }
        let mut out = status.write(Outcome::new()); // a failure to report goes before the retry
        if policy == "Replace" {
            for job in &jobs.active {
                out = out.deletion(Deletion::new(object::key(job).map_err(Error::permanent)?).if_uid(object::uid(job).unwrap_or_default()));
            }
        }
        let job = job_for(&cron, missed)?;
        let name = object::name(&job).unwrap_or_default().to_owned();
        // What reports the run is written only if the create (and the deletes before it) succeed.
        let created = Condition::new("Progressing", true, "JobCreated", format!("Created job {name}"));
        let (mut reported, _) = status.conditions();
        conditions::set(&mut reported, created);
        let mut report = conditions::status_patch(&reported);
        report["lastScheduleTime"] = time::format(missed).into();
        Ok(out.create_owned(&cron, job).status_after_writes(&cron, report).requeue_after(requeue))
    }
}

wasmloop_sdk::export_reconciler!(CronJobs);

/// A CronJob's Jobs, by state, and the latest time one was scheduled for.
struct Jobs {
    active: Vec<Value>,
    successful: Vec<Value>,
    failed: Vec<Value>,
    most_recent: Option<i64>,
}

impl Jobs {
    fn of(cron: &Value) -> Result<Self, Error> {
        let name = object::name(cron).unwrap_or_default();
        let ns = object::namespace(cron);
        let children: Vec<Value> = cache::by_index(&kinds::JOB, OWNER_INDEX, name).context("listing the CronJob's Jobs")?;
        let mut jobs = Jobs { active: Vec::new(), successful: Vec::new(), failed: Vec::new(), most_recent: None };
        // The index holds only Jobs a CronJob of this group controls; the name is per namespace.
        for job in children.into_iter().filter(|j| object::namespace(j) == ns) {
            let scheduled = job.pointer(&format!("/metadata/annotations/{}", SCHEDULED_AT.replace('/', "~1")));
            match scheduled.and_then(Value::as_str).map(|t| (t, time::parse(t))) {
                Some((_, Some(t))) => jobs.most_recent = jobs.most_recent.max(Some(t)),
                Some((t, None)) => {
                    wasmloop_sdk::warn!("unable to parse schedule time {t:?} of Job {}", object::name(&job).unwrap_or_default());
                }
                None => {}
            }
            match finished(&job) {
                None => jobs.active.push(job),
                Some("Failed") => jobs.failed.push(job),
                Some(_) => jobs.successful.push(job),
            }
        }
        Ok(jobs)
    }
}

/// `Complete` or `Failed` if the Job has that condition `True` (it is finished).
fn finished(job: &Value) -> Option<&'static str> {
    let conditions = job.pointer("/status/conditions").and_then(Value::as_array)?;
    conditions.iter().find_map(|c| match (c["type"].as_str(), c["status"].as_str()) {
        (Some("Complete"), Some("True")) => Some("Complete"),
        (Some("Failed"), Some("True")) => Some("Failed"),
        _ => None,
    })
}

/// The status the Jobs say, and whether it differs from the CronJob's.
struct Observed<'a> {
    cron: &'a Value,
    active: Value,
    last_schedule_time: Value,
    /// The conditions as they are, then as set (all but Degraded).
    conditions: Vec<Condition>,
    /// Degraded, if something is failing (the last one said wins); removed otherwise.
    degraded: Option<Condition>,
    changed: bool,
}

impl<'a> Observed<'a> {
    fn new(cron: &'a Value, jobs: &Jobs) -> Self {
        let active: Vec<Value> = jobs
            .active
            .iter()
            .map(|j| {
                let field = |f: &str| j.pointer(&format!("/metadata/{f}")).cloned().unwrap_or(Value::Null);
                json!({"apiVersion": "batch/v1", "kind": "Job", "name": field("name"), "namespace": field("namespace"),
                       "uid": field("uid"), "resourceVersion": field("resourceVersion")})
            })
            .collect();
        // `active` has minItems 1 in the CRD: none is written as its absence.
        let active = if active.is_empty() { Value::Null } else { Value::Array(active) };
        let last_schedule_time = jobs.most_recent.map_or(Value::Null, |t| time::format(t).into());
        let current = &cron["status"];
        let changed = current.get("active").unwrap_or(&Value::Null) != &active
            || current.get("lastScheduleTime").unwrap_or(&Value::Null) != &last_schedule_time;
        let conditions = conditions::read(current).unwrap_or_default();
        Observed { cron, active, last_schedule_time, conditions, degraded: None, changed }
    }

    fn condition(&mut self, c: Condition) {
        self.changed |= conditions::set(&mut self.conditions, c);
    }

    /// Degraded is True, for this reason.
    fn degraded(&mut self, reason: &str, message: &str) {
        self.degraded = Some(Condition::new("Degraded", true, reason, message));
    }

    /// The conditions to write (Degraded set, or removed if nothing is failing), and whether
    /// the status differs from the CronJob's.
    fn conditions(&self) -> (Vec<Condition>, bool) {
        let mut conds = self.conditions.clone();
        let changed = match &self.degraded {
            Some(d) => conditions::set(&mut conds, d.clone()),
            None => conditions::remove(&mut conds, "Degraded"),
        };
        (conds, self.changed || changed)
    }

    /// The conditions the tutorial sets from the Jobs' states.
    fn job_conditions(&mut self, jobs: &Jobs, suspended: bool) {
        let (failed, active) = (jobs.failed.len(), jobs.active.len());
        if suspended {
            self.condition(Condition::new("Available", false, "Suspended", "CronJob is suspended"));
        } else if failed > 0 {
            let message = format!("{failed} job(s) have failed");
            self.degraded("JobsFailed", &message);
            self.condition(Condition::new("Available", false, "JobsFailed", message));
        } else if active > 0 {
            self.condition(Condition::new("Progressing", true, "JobsActive", format!("{active} job(s) are currently active")));
            self.condition(Condition::new("Available", true, "JobsActive", format!("CronJob is progressing with {active} active job(s)")));
        } else {
            self.condition(Condition::new("Available", true, "AllJobsCompleted", "All jobs have completed successfully"));
            self.condition(Condition::new("Progressing", false, "NoJobsActive", "No jobs are currently active"));
        }
    }

    /// `out` with the status write, if anything changed.
    fn write(&self, out: Outcome) -> Outcome {
        let (conds, changed) = self.conditions();
        if !changed {
            return out;
        }
        let mut patch = conditions::status_patch(&conds);
        patch["active"] = self.active.clone();
        patch["lastScheduleTime"] = self.last_schedule_time.clone();
        out.status(self.cron, patch)
    }
}

/// 3: Delete the oldest finished Jobs past the history limits (by `status.startTime`).
fn prune(mut out: Outcome, spec: &Value, jobs: &Jobs) -> Outcome {
    for (limit, finished) in [("failedJobsHistoryLimit", &jobs.failed), ("successfulJobsHistoryLimit", &jobs.successful)] {
        let Some(limit) = spec[limit].as_u64() else { continue };
        let mut oldest_first: Vec<&Value> = finished.iter().collect();
        // A Job without a start time sorts first, as in the Go.
        oldest_first.sort_by_key(|j| j.pointer("/status/startTime").and_then(Value::as_str).and_then(time::parse));
        let excess = oldest_first.len().saturating_sub(usize::try_from(limit).unwrap_or(usize::MAX));
        for job in &oldest_first[..excess] {
            out = out.delete(job);
        }
    }
    out
}

/// When the CronJob runs next, and the latest run it missed (if any is due).
struct Runs {
    missed: Option<i64>,
    next: i64,
}

impl Runs {
    /// The tutorial's `getNextSchedule`: runs after the last one (or the CronJob's creation), no
    /// earlier than the starting deadline allows.
    fn compute(cron: &Value, now: i64) -> Result<Self, String> {
        let text = cron["spec"]["schedule"].as_str().unwrap_or_default();
        let schedule = Schedule::parse(text).map_err(|e| format!("unparseable schedule {text:?}: {e}"))?;
        let after = |t: i64| schedule.next_after(t).ok_or_else(|| format!("schedule {text:?} has no run after {}", time::format(t)));
        let created = cron.pointer("/metadata/creationTimestamp").and_then(Value::as_str).and_then(time::parse);
        let last = cron.pointer("/status/lastScheduleTime").and_then(Value::as_str).and_then(time::parse);
        let mut earliest = last.or(created).unwrap_or(now);
        if let Some(deadline) = cron["spec"]["startingDeadlineSeconds"].as_i64() {
            earliest = earliest.max(now - deadline);
        }
        let next = after(now)?;
        if earliest > now {
            return Ok(Runs { missed: None, next });
        }
        let (mut missed, mut starts, mut t) = (None, 0, after(earliest)?);
        while t <= now {
            missed = Some(t);
            starts += 1;
            if starts > TOO_MANY_MISSED {
                return Err(
                    "Too many missed start times (> 100). Set or decrease .spec.startingDeadlineSeconds or check clock skew.".into()
                );
            }
            t = after(t)?;
        }
        Ok(Runs { missed, next })
    }
}

/// The Job for the run scheduled at `at`: the template's spec, labels and annotations, the
/// scheduled time, named `<cronjob>-<unix time>` (so a run is created once), controlled by it.
fn job_for(cron: &Value, at: i64) -> Result<Value, Error> {
    let template = &cron["spec"]["jobTemplate"];
    let mut annotations = template.pointer("/metadata/annotations").and_then(Value::as_object).cloned().unwrap_or_default();
    annotations.insert(SCHEDULED_AT.into(), time::format(at).into());
    let labels = template.pointer("/metadata/labels").and_then(Value::as_object).cloned().unwrap_or_else(Map::new);
    let name = format!("{}-{at}", object::name(cron).unwrap_or_default());
    let spec = template.get("spec").cloned().ok_or_else(|| Error::permanent("spec.jobTemplate.spec is missing"))?;
    Ok(json!({
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": name, "namespace": object::namespace(cron), "labels": labels, "annotations": annotations},
        "spec": spec,
    }))
}

#[cfg(test)]
mod tests;
