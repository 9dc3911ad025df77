//! The tutorial's controller test (`cronjob_controller_test.go`: conditions initialized, no Job
//! before its time, an owned active Job in `status.active`, history pruned) and the schedule
//! logic, on the FakeCache and its clock: what the tutorial does with its `Clock` interface and
//! envtest, in milliseconds.

use std::time::Duration;

use serde_json::{Value, json};
use wasmloop_sdk::testing::FakeCache;
use wasmloop_sdk::{ObjectKey, Outcome, conditions, kinds, object, time};

use super::*;

/// The tutorial's test CronJob (`1 * * * *`), created at 10:00:30.
fn cron(extra: Value) -> Value {
    let mut cron = json!({
        "apiVersion": "batch.tutorial.kubebuilder.io/v1",
        "kind": "CronJob",
        "metadata": {"name": "test-cronjob", "namespace": "test-cronjob", "uid": "cron-1",
                     "creationTimestamp": "2026-03-01T10:00:30Z"},
        "spec": {
            "schedule": "1 * * * *",
            "jobTemplate": {"spec": {"template": {"spec": {
                "containers": [{"name": "test-container", "image": "test-image"}],
                "restartPolicy": "OnFailure"}}}},
        },
    });
    json_patch_merge(&mut cron["spec"], &extra);
    cron
}

fn json_patch_merge(target: &mut Value, patch: &Value) {
    if let (Some(t), Some(p)) = (target.as_object_mut(), patch.as_object()) {
        for (k, v) in p {
            t.insert(k.clone(), v.clone());
        }
    }
}

fn fake(spec: Value) -> FakeCache {
    FakeCache::for_reconciler::<CronJobs>().with_time("2026-03-01T10:00:30Z").with(cron(spec))
}

fn key() -> ObjectKey {
    CRON_JOB.key(Some("test-cronjob"), "test-cronjob")
}

fn status(fake: &FakeCache) -> Value {
    fake.get(&key()).unwrap()["status"].clone()
}

fn condition(fake: &FakeCache, type_: &str) -> Option<(String, String)> {
    let conds = conditions::read(&status(fake)).unwrap();
    conditions::find(&conds, type_).map(|c| (c.status.as_str().to_owned(), c.reason.clone()))
}

/// A Job controlled by the CronJob (as the tutorial's test makes them), `state` None (active),
/// `Complete` or `Failed`, started at `start`.
fn job(name: &str, state: Option<&str>, start: &str) -> Value {
    let mut job = json!({
        "apiVersion": "batch/v1", "kind": "Job",
        "metadata": {"name": name, "namespace": "test-cronjob", "uid": format!("{name}-uid"),
                     "ownerReferences": [{"apiVersion": "batch.tutorial.kubebuilder.io/v1", "kind": "CronJob",
                                          "name": "test-cronjob", "uid": "cron-1", "controller": true}]},
        "status": {"startTime": start, "active": 2},
    });
    if let Some(state) = state {
        job["status"] = json!({"startTime": start, "conditions": [{"type": state, "status": "True"}]});
    }
    job
}

fn jobs(fake: &FakeCache) -> Vec<String> {
    fake.objects(&kinds::JOB).iter().filter_map(|j| object::name(j).map(str::to_owned)).collect()
}

fn unix(ts: &str) -> i64 {
    time::parse(ts).unwrap()
}

#[test]
fn conditions_are_initialized_and_no_job_runs_before_its_time() {
    let fake = fake(json!({}));
    let done = fake.converge::<CronJobs>(&key(), 3).unwrap();
    assert_eq!(done.len(), 1, "one status write");
    assert_eq!(condition(&fake, "Available"), Some(("True".into(), "AllJobsCompleted".into())));
    assert_eq!(condition(&fake, "Progressing"), Some(("False".into(), "NoJobsActive".into())));
    assert!(status(&fake).get("active").is_none());
    assert!(jobs(&fake).is_empty(), "created at 10:00:30, the first run is 10:01");
    assert_eq!(fake.now_rfc3339(), "2026-03-01T10:01:00Z", "requeued for the next run");
}

#[test]
fn an_active_job_it_controls_is_in_status_active() {
    let fake = fake(json!({}));
    fake.add(job("test-job", None, "2026-03-01T10:00:00Z"));
    // A Job of another CronJob of the same name in another namespace, and one it does not control.
    let mut other = job("elsewhere", None, "2026-03-01T10:00:00Z");
    other["metadata"]["namespace"] = json!("other");
    fake.add(other);
    let mut not_controlled = job("not-controlled", None, "2026-03-01T10:00:00Z");
    not_controlled["metadata"]["ownerReferences"][0]["controller"] = json!(false);
    fake.add(not_controlled);
    // Controlled by something else of the same name: the index is over CronJob owners only.
    let mut other_kind = job("other-kind", None, "2026-03-01T10:00:00Z");
    other_kind["metadata"]["ownerReferences"][0]["kind"] = json!("Deployment");
    other_kind["metadata"]["ownerReferences"][0]["apiVersion"] = json!("apps/v1");
    fake.add(other_kind);
    fake.converge::<CronJobs>(&key(), 3).unwrap();
    let active = status(&fake)["active"].clone();
    assert_eq!(active.as_array().map(Vec::len), Some(1), "{active}");
    assert_eq!(active[0]["name"], "test-job");
    assert_eq!(condition(&fake, "Available"), Some(("True".into(), "JobsActive".into())));
}

#[test]
fn history_limits_prune_the_oldest_finished_jobs() {
    let fake = fake(json!({"failedJobsHistoryLimit": 1, "successfulJobsHistoryLimit": 1}));
    fake.add(job("test-failed-job-old", Some("Failed"), "2026-03-01T09:59:30Z"));
    fake.add(job("test-failed-job-new", Some("Failed"), "2026-03-01T10:00:31Z"));
    fake.add(job("test-successful-job-old", Some("Complete"), "2026-03-01T09:59:30Z"));
    fake.add(job("test-successful-job-new", Some("Complete"), "2026-03-01T10:00:31Z"));
    fake.converge::<CronJobs>(&key(), 3).unwrap();
    assert_eq!(jobs(&fake), ["test-failed-job-new", "test-successful-job-new"]);
    assert_eq!(condition(&fake, "Degraded"), Some(("True".into(), "JobsFailed".into())));
}

#[test]
fn schedules_fire_on_time_on_the_fake_clock() {
    let fake = fake(json!({}));
    let done = fake.run_until::<CronJobs>(&key(), "2026-03-01T13:30:00Z", 50).unwrap();
    let created: Vec<&Value> = done.iter().flat_map(Outcome::created).collect();
    let names: Vec<&str> = created.iter().filter_map(|j| object::name(j)).collect();
    let expected: Vec<String> =
        ["10:01", "11:01", "12:01", "13:01"].iter().map(|t| format!("test-cronjob-{}", unix(&format!("2026-03-01T{t}:00Z")))).collect();
    assert_eq!(names, expected);
    assert_eq!(created[0]["metadata"]["annotations"][SCHEDULED_AT], "2026-03-01T10:01:00Z");
    assert_eq!(object::controller_uid(created[0]), Some("cron-1"));
    assert_eq!(created[0]["spec"]["template"]["spec"]["containers"][0]["image"], "test-image");
    assert_eq!(status(&fake)["lastScheduleTime"], "2026-03-01T13:01:00Z");
    assert_eq!(fake.now_rfc3339(), "2026-03-01T13:30:00Z");
}

#[test]
fn forbid_skips_a_run_while_one_is_active_and_replace_replaces_it() {
    let forbid = fake(json!({"concurrencyPolicy": "Forbid"}));
    forbid.add(job("running", None, "2026-03-01T10:00:00Z"));
    forbid.set_time("2026-03-01T10:01:05Z");
    forbid.converge::<CronJobs>(&key(), 3).unwrap();
    assert_eq!(jobs(&forbid), ["running"]);

    let replace = fake(json!({"concurrencyPolicy": "Replace"}));
    replace.add(job("running", None, "2026-03-01T10:00:00Z"));
    replace.set_time("2026-03-01T10:01:05Z");
    let out = replace.reconcile::<CronJobs>(&key()).unwrap();
    let deleted: Vec<&str> = out.deleted().map(|k| k.name.as_str()).collect();
    assert_eq!(deleted, ["running"]);
    assert_eq!(out.deletions().next().unwrap().preconditions.uid.as_deref(), Some("running-uid"));
    replace.execute(&out);
    assert_eq!(jobs(&replace), [format!("test-cronjob-{}", unix("2026-03-01T10:01:00Z"))]);
}

#[test]
fn a_suspended_cronjob_runs_nothing() {
    let fake = fake(json!({"suspend": true}));
    fake.run_until::<CronJobs>(&key(), "2026-03-01T12:00:00Z", 20).unwrap();
    assert!(jobs(&fake).is_empty());
    assert_eq!(condition(&fake, "Available"), Some(("False".into(), "Suspended".into())));
}

#[test]
fn a_run_missed_past_its_starting_deadline_is_skipped() {
    let fake = fake(json!({"startingDeadlineSeconds": 30}));
    fake.set_time("2026-03-01T10:01:45Z"); // 45 s after the 10:01 run
    fake.converge::<CronJobs>(&key(), 3).unwrap();
    assert!(jobs(&fake).is_empty());
    // The deadline moves the earliest time considered past the missed run: nothing is due.
    assert_eq!(condition(&fake, "Available"), Some(("True".into(), "AllJobsCompleted".into())));
    // Within the deadline, it runs.
    fake.set_time("2026-03-01T11:01:20Z");
    fake.converge::<CronJobs>(&key(), 3).unwrap();
    assert_eq!(jobs(&fake), [format!("test-cronjob-{}", unix("2026-03-01T11:01:00Z"))]);
}

#[test]
fn an_invalid_schedule_is_reported_and_not_retried() {
    let fake = fake(json!({"schedule": "every now and then"}));
    let out = fake.reconcile::<CronJobs>(&key()).unwrap();
    assert_eq!(out.requeue_after, None);
    fake.execute(&out);
    assert_eq!(condition(&fake, "Degraded"), Some(("True".into(), "InvalidSchedule".into())));
    assert!(fake.reconcile::<CronJobs>(&key()).unwrap().is_empty(), "reported once");
}

#[test]
fn too_many_missed_runs_are_an_error_without_a_deadline() {
    let fake = fake(json!({"schedule": "* * * * *"}));
    fake.set_time("2026-03-01T13:00:00Z"); // 179 missed runs
    fake.converge::<CronJobs>(&key(), 3).unwrap();
    assert!(jobs(&fake).is_empty());
    let conds = conditions::read(&status(&fake)).unwrap();
    assert!(conditions::find(&conds, "Degraded").unwrap().message.contains("Too many missed start times"));
}

#[test]
fn a_failed_create_is_never_reported_as_created_and_the_next_reconcile_says_why() {
    let fake = fake(json!({}));
    fake.converge::<CronJobs>(&key(), 3).unwrap(); // initialized; the clock at 10:01
    fake.fail_creates(
        &kinds::JOB,
        "Job.batch \"test-cronjob-1772359260\" is invalid: spec.template.spec.containers[0].name: Invalid value",
    );
    assert!(fake.converge::<CronJobs>(&key(), 3).is_err());
    let st = status(&fake);
    assert!(st.get("lastScheduleTime").is_none(), "no run reported: {st}");
    assert_ne!(condition(&fake, "Progressing").map(|c| c.1), Some("JobCreated".into()));
    // The retry reports the failure first (a status before the create).
    let out = fake.reconcile::<CronJobs>(&key()).unwrap();
    fake.execute(&out);
    assert_eq!(condition(&fake, "Degraded"), Some(("True".into(), "JobCreationFailed".into())));
    assert!(jobs(&fake).is_empty());
    // Fixed: the Job is created, the run reported, Degraded gone once nothing fails.
    fake.clear_failures();
    fake.converge::<CronJobs>(&key(), 4).unwrap();
    assert_eq!(jobs(&fake).len(), 1);
    assert_eq!(status(&fake)["lastScheduleTime"], "2026-03-01T10:01:00Z");
    assert_eq!(condition(&fake, "Degraded"), None);
}

#[test]
fn requeues_are_exact_to_the_microsecond() {
    let fake = fake(json!({}));
    fake.set_time("2026-03-01T10:00:59.999750Z");
    let out = fake.reconcile::<CronJobs>(&key()).unwrap();
    assert_eq!(out.requeue_after, Some(Duration::from_micros(250)));
}
