"""Time in the SDK and its fake: timestamps (metav1.Time and MicroTime) and schedule logic on the
FakeCache's clock, as the Rust and JavaScript SDKs' tests do it."""

from __future__ import annotations

from wasmloop_sdk import KindRef, Metadata, Outcome, Request, cache, kinds, time
from wasmloop_sdk.testing import FakeCache


def test_timestamps_in_seconds_and_microseconds() -> None:
    t = time.parse("2026-12-01T00:28:39Z")
    assert t == 1_796_084_919
    assert time.format(t + 60) == "2026-12-01T00:29:39Z"
    assert time.parse("2026-12-01T01:28:39.5+01:00") == t
    assert time.parse_micros("2026-12-01T00:28:39.123456789Z") == 1_796_084_919_123_456
    assert time.parse_micros("2026-11-30T19:58:39.000001-04:30") == 1_796_084_919_000_001
    assert time.format_micros(1_796_084_919_000_001) == "2026-12-01T00:28:39.000001Z"
    assert time.format_micros(-1) == "1969-12-31T23:59:59.999999Z"
    for us in (0, 1, 999_999, 1_796_084_919_123_456):
        assert time.parse_micros(time.format_micros(us)) == us
    for bad in ("garbage", "2026-02-29T00:00:00Z", "2026-12-01T00:28:39", "2026-12-01T00:28:39.Z", "2026-12-01T24:00:00Z"):
        assert time.parse_micros(bad) is None, bad
    assert time.now() > 1_704_067_200, "outside a fake: the wall clock"


class Hourly:
    """On every hour: a ConfigMap ``tick-<unix time>``, then a requeue at the next hour."""

    def metadata(self) -> Metadata:
        return Metadata("hourly", "0").reconciles(kinds.NAMESPACE).owns(kinds.CONFIG_MAP)

    def reconcile(self, req: Request) -> Outcome:
        ns = cache.get_key(req.key)
        if ns is None:
            return Outcome()
        now = time.now()
        hour = now - now % 3600
        nxt = hour + 3600 - now
        name = f"tick-{hour}"
        if cache.get(kinds.CONFIG_MAP, req.key.name, name) is not None:
            return Outcome().requeue_after(nxt)
        cm = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name, "namespace": req.key.name},
              "data": {"at": time.now_micros_rfc3339()}}
        return Outcome().create_owned(ns, cm).requeue_after(nxt)


KEY = kinds.NAMESPACE.key(None, "ns")


def fake() -> FakeCache:
    return (FakeCache.for_reconciler(Hourly()).with_time("2026-03-01T10:59:30.25Z")
            .with_({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "ns", "uid": "ns-1"}}))


def tick(ts: str) -> str:
    return f"tick-{time.parse(ts)}"


def test_the_clock_is_the_fakes_and_converge_moves_it_to_the_requeue() -> None:
    f = fake()
    [out] = f.converge(KEY, 3)
    cm = out.created()[0]
    assert cm["metadata"]["name"] == tick("2026-03-01T10:00:00Z")
    assert cm["data"]["at"] == "2026-03-01T10:59:30.250000Z", "sub-second time from the fake's clock"
    stored = f.get(kinds.CONFIG_MAP.key("ns", cm["metadata"]["name"]))
    assert stored is not None and stored["metadata"]["creationTimestamp"] == "2026-03-01T10:59:30Z"
    assert f.now_micros() == time.parse_micros("2026-03-01T11:00:00.25Z")
    assert len(f.converge(KEY, 3)) == 1, "11:00 fires"
    f.advance(600)
    assert f.now_rfc3339() == "2026-03-01T12:10:00Z"


def test_run_until_plays_a_schedule_out_and_stops_at_the_deadline() -> None:
    f = fake()
    done = f.run_until(KEY, "2026-03-01T13:30:00Z", 50)
    assert [c["metadata"]["name"] for o in done for c in o.created()] == [
        tick(t) for t in ("2026-03-01T10:00:00Z", "2026-03-01T11:00:00Z", "2026-03-01T12:00:00Z", "2026-03-01T13:00:00Z")
    ]
    assert f.now_rfc3339() == "2026-03-01T13:30:00Z"
    assert f.run_until(KEY, "2026-03-01T13:50:00Z", 5) == [], "nothing due before 14:00"


def test_status_after_writes_stays_after_every_other_action_in_the_order_given() -> None:
    cron = {"apiVersion": "example.com/v1", "kind": "CronJob", "metadata": {"name": "c", "namespace": "ns", "uid": "c-1"}}
    out = (Outcome()
           .status_after_writes(cron, {"step": 1})
           .create_owned(cron, {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "c-1"}})
           .status_after_writes(cron, {"step": 2})
           .delete({"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "old", "namespace": "ns"}})
           .event(cron, "Normal", "Seen", "x"))
    assert [f"status {a.status['step']}" if a.type == "status" else a.type for a in out.actions] == [
        "create", "delete", "event", "status 1", "status 2"]


def test_an_index_over_the_controller_owner_of_one_kind() -> None:
    import pytest

    cron = KindRef("batch.tutorial.kubebuilder.io/v1", "CronJob")
    m = Metadata("cron", "0").reconciles(cron).owns(kinds.JOB).controller_index(kinds.JOB, "cron", cron)

    def job(name: str, kind: str, api: str, controller: bool) -> dict:
        return {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": name, "namespace": "ns", "ownerReferences": [
            {"apiVersion": api, "kind": kind, "name": "nightly", "uid": "u", "controller": controller}]}}

    f = (FakeCache(m).with_(job("mine", "CronJob", "batch.tutorial.kubebuilder.io/v1", True))
         .with_(job("other-group", "CronJob", "batch/v1", True))
         .with_(job("not-controller", "CronJob", "batch.tutorial.kubebuilder.io/v1", False))
         .with_(job("other-kind", "Deployment", "apps/v1", True)))
    assert [j["metadata"]["name"] for j in f.enter(lambda: cache.by_index(kinds.JOB, "cron", "nightly"))] == ["mine"]
    with pytest.raises(ValueError, match="has no `]`"):
        FakeCache(Metadata("x", "0").reconciles(kinds.POD).index(kinds.POD, "p", "spec.ports[port=443"))
    with pytest.raises(ValueError, match="ends the path with a filter"):
        FakeCache(Metadata("x", "0").reconciles(kinds.POD).index(kinds.POD, "p", "spec.ports[port=443]"))
    with pytest.raises(ValueError, match="are for indexes"):
        FakeCache(Metadata("x", "0").reconciles(kinds.POD).field(kinds.POD, "spec.containers[name=a].image"))


class Runner:
    """A run reported only once its create succeeded; a failure reported from the next request."""

    KIND = KindRef("example.com/v1", "Runner")

    def metadata(self) -> Metadata:
        return Metadata("runner", "0").reconciles(self.KIND).owns(kinds.CONFIG_MAP)

    def reconcile(self, req: Request) -> Outcome:
        obj = cache.get_key(req.key)
        if obj is None or cache.get(kinds.CONFIG_MAP, "ns", "run-1") is not None:
            return Outcome()
        out = Outcome()
        if req.last_error and (obj.get("status") or {}).get("failed") != req.last_error:
            out.status(obj, {"failed": req.last_error})
        cm = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "run-1", "namespace": "ns"}}
        return out.create_owned(obj, cm).status_after_writes(obj, {"created": "run-1"})


def test_a_failing_create_stops_the_outcome_its_status_after_writes_is_not_written_the_next_request_says_why() -> None:
    import pytest

    key = Runner.KIND.key("ns", "r")
    run = kinds.CONFIG_MAP.key("ns", "run-1")
    f = (FakeCache.for_reconciler(Runner())
         .with_({"apiVersion": "example.com/v1", "kind": "Runner", "metadata": {"name": "r", "namespace": "ns", "uid": "r-1"}})
         .fail_creates(kinds.CONFIG_MAP, "exceeded quota"))
    why = "create v1/ConfigMap/ns/run-1: exceeded quota"
    with pytest.raises(AssertionError, match=f"failed: {why}"):
        f.converge(key, 3)
    assert f.last_error(key) == why
    assert f.get(key).get("status") is None, "nothing reported"
    assert f.get(run) is None
    # The retry reports the failure (a status before the create), the create fails again.
    f.execute(f.reconcile(key))
    assert f.get(key)["status"] == {"failed": why}
    f.clear_failures()
    f.converge(key, 3)
    assert f.get(key)["status"] == {"failed": why, "created": "run-1"}
    assert f.get(run) is not None
    assert f.last_error(key) is None
