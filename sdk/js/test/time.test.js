// Time in the SDK and its fake: timestamps (metav1.Time and MicroTime) and schedule logic on the
// FakeCache's clock, as the Rust SDK's testing tests do it.
import assert from "node:assert/strict";
import { test } from "node:test";

import { Metadata, Outcome, cache, defineReconciler, keyOf, kind, kinds, time } from "@wasmloop/sdk";
import { FakeCache } from "@wasmloop/sdk/testing";

test("timestamps: seconds and microseconds, read with offsets, written in UTC", () => {
  const t = time.parse("2026-12-01T00:28:39Z");
  assert.equal(t, 1_796_084_919);
  assert.equal(time.format(t + 60), "2026-12-01T00:29:39Z");
  assert.equal(time.parse("2026-12-01T01:28:39.5+01:00"), t);
  assert.equal(time.parseMicros("2026-12-01T00:28:39.123456789Z"), 1_796_084_919_123_456);
  assert.equal(time.parseMicros("2026-11-30T19:58:39.000001-04:30"), 1_796_084_919_000_001);
  assert.equal(time.formatMicros(1_796_084_919_000_001), "2026-12-01T00:28:39.000001Z");
  assert.equal(time.formatMicros(-1), "1969-12-31T23:59:59.999999Z");
  for (const us of [0, 1, 999_999, 1_796_084_919_123_456]) assert.equal(time.parseMicros(time.formatMicros(us)), us);
  for (const bad of ["garbage", "2026-02-29T00:00:00Z", "2026-12-01T00:28:39", "2026-12-01T00:28:39.Z", "2026-12-01T24:00:00Z"]) {
    assert.equal(time.parseMicros(bad), undefined, bad);
  }
  assert.ok(time.now() > 1_704_067_200, "outside a fake: the wall clock");
});

// On every hour: a ConfigMap `tick-<unix time>`, then a requeue at the next hour.
const hourly = defineReconciler({
  metadata: () => new Metadata("hourly", "0").reconciles(kinds.NAMESPACE).owns(kinds.CONFIG_MAP),
  reconcile(req) {
    const ns = cache.getKey(req.key);
    if (!ns) return new Outcome();
    const now = time.now();
    const hour = now - (now % 3600);
    const next = (hour + 3600 - now) * 1000;
    const name = `tick-${hour}`;
    if (cache.get(kinds.CONFIG_MAP, req.key.name, name)) return new Outcome().requeueAfter(next);
    const cm = { apiVersion: "v1", kind: "ConfigMap", metadata: { name, namespace: req.key.name }, data: { at: time.nowMicrosRfc3339() } };
    return new Outcome().createOwned(ns, cm).requeueAfter(next);
  },
});

const fake = () =>
  FakeCache.forReconciler(hourly)
    .withTime("2026-03-01T10:59:30.25Z")
    .with({ apiVersion: "v1", kind: "Namespace", metadata: { name: "ns", uid: "ns-1" } });
const key = keyOf(kinds.NAMESPACE, null, "ns");
const tick = (ts) => `tick-${time.parse(ts)}`;

test("the clock is the fake's, and converge moves it to the requeue", () => {
  const f = fake();
  const [out] = f.converge(key, 3);
  const cm = out.created()[0];
  assert.equal(cm.metadata.name, tick("2026-03-01T10:00:00Z"));
  assert.equal(cm.data.at, "2026-03-01T10:59:30.250000Z", "sub-second time from the fake's clock");
  assert.equal(f.get(keyOf(kinds.CONFIG_MAP, "ns", cm.metadata.name)).metadata.creationTimestamp, "2026-03-01T10:59:30Z");
  assert.equal(f.nowMicros(), time.parseMicros("2026-03-01T11:00:00.25Z"));
  assert.equal(f.converge(key, 3).length, 1, "11:00 fires");
  f.advance(10 * 60_000);
  assert.equal(f.nowRfc3339(), "2026-03-01T12:10:00Z");
});

test("runUntil plays a schedule out and stops at the deadline", () => {
  const f = fake();
  const done = f.runUntil(key, "2026-03-01T13:30:00Z", 50);
  assert.deepEqual(
    done.flatMap((o) => o.created()).map((c) => c.metadata.name),
    ["2026-03-01T10:00:00Z", "2026-03-01T11:00:00Z", "2026-03-01T12:00:00Z", "2026-03-01T13:00:00Z"].map(tick),
  );
  assert.equal(f.nowRfc3339(), "2026-03-01T13:30:00Z");
  assert.deepEqual(f.runUntil(key, "2026-03-01T13:50:00Z", 5), [], "nothing due before 14:00");
});

test("statusAfterWrites stays after every other action, in the order given", () => {
  const cron = { apiVersion: "example.com/v1", kind: "CronJob", metadata: { name: "c", namespace: "ns", uid: "c-1" } };
  const out = new Outcome()
    .statusAfterWrites(cron, { step: 1 })
    .createOwned(cron, { apiVersion: "batch/v1", kind: "Job", metadata: { name: "c-1" } })
    .statusAfterWrites(cron, { step: 2 })
    .delete({ apiVersion: "batch/v1", kind: "Job", metadata: { name: "old", namespace: "ns" } })
    .event(cron, "normal", "Seen", "x");
  assert.deepEqual(
    out.actions.map((a) => (a.type === "status" ? `status ${a.status.step}` : a.type)),
    ["create", "delete", "event", "status 1", "status 2"],
  );
});

test("an index over the controller owner of one kind (a filtered index path)", () => {
  const CRON = kind("batch.tutorial.kubebuilder.io/v1", "CronJob");
  const m = new Metadata("cron", "0").reconciles(CRON).owns(kinds.JOB).controllerIndex(kinds.JOB, "cron", CRON);
  const owner = (k, api, controller) => [{ apiVersion: api, kind: k, name: "nightly", uid: "u", controller }];
  const job = (name, ownerReferences) => ({ apiVersion: "batch/v1", kind: "Job", metadata: { name, namespace: "ns", ownerReferences } });
  const f = new FakeCache(m)
    .with(job("mine", owner("CronJob", "batch.tutorial.kubebuilder.io/v1", true)))
    .with(job("other-group", owner("CronJob", "batch/v1", true)))
    .with(job("not-controller", owner("CronJob", "batch.tutorial.kubebuilder.io/v1", false)))
    .with(job("other-kind", owner("Deployment", "apps/v1", true)));
  assert.deepEqual(
    f.enter(() => cache.byIndex(kinds.JOB, "cron", "nightly")).map((j) => j.metadata.name),
    ["mine"],
  );
  assert.throws(() => new FakeCache(new Metadata("x", "0").reconciles(kinds.POD).index(kinds.POD, "p", "spec.ports[port=443")), /has no `\]`/);
  assert.throws(() => new FakeCache(new Metadata("x", "0").reconciles(kinds.POD).index(kinds.POD, "p", "spec.ports[port=443]")), /ends the path with a filter/);
  assert.throws(() => new FakeCache(new Metadata("x", "0").reconciles(kinds.POD).field(kinds.POD, "spec.containers[name=a].image")), /filters \(\[field=value\]\) are for indexes/);
});

// A run reported only once its create succeeded; a failure reported from the next request.
const RUNNER = kind("example.com/v1", "Runner");
const runner = defineReconciler({
  metadata: () => new Metadata("runner", "0").reconciles(RUNNER).owns(kinds.CONFIG_MAP),
  reconcile(req) {
    const obj = cache.getKey(req.key);
    if (!obj || cache.get(kinds.CONFIG_MAP, "ns", "run-1")) return new Outcome();
    const out = new Outcome();
    if (req.lastError && obj.status?.failed !== req.lastError) out.status(obj, { failed: req.lastError });
    const cm = { apiVersion: "v1", kind: "ConfigMap", metadata: { name: "run-1", namespace: "ns" } };
    return out.createOwned(obj, cm).statusAfterWrites(obj, { created: "run-1" });
  },
});

test("a failing create stops the outcome: its statusAfterWrites is not written, the next request says why", () => {
  const runnerKey = keyOf(RUNNER, "ns", "r");
  const f = FakeCache.forReconciler(runner)
    .with({ apiVersion: "example.com/v1", kind: "Runner", metadata: { name: "r", namespace: "ns", uid: "r-1" } })
    .failCreates(kinds.CONFIG_MAP, "exceeded quota");
  const why = "create v1/ConfigMap/ns/run-1: exceeded quota";
  assert.throws(() => f.converge(runnerKey, 3), (e) => e.message.includes(`failed: ${why}`));
  assert.equal(f.lastError(runnerKey), why);
  assert.equal(f.get(runnerKey).status, undefined, "nothing reported");
  assert.equal(f.get(keyOf(kinds.CONFIG_MAP, "ns", "run-1")), undefined);
  // The retry reports the failure (a status before the create), the create fails again.
  f.execute(f.reconcile(runnerKey));
  assert.deepEqual(f.get(runnerKey).status, { failed: why });
  f.clearFailures();
  f.converge(runnerKey, 3);
  assert.deepEqual(f.get(runnerKey).status, { failed: why, created: "run-1" });
  assert.ok(f.get(keyOf(kinds.CONFIG_MAP, "ns", "run-1")));
  assert.equal(f.lastError(runnerKey), undefined);
});
