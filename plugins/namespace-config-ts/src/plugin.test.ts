// The Rust plugin's tests (plugins/namespace-config/src/tests.rs), on the SDK's FakeCache.
import assert from "node:assert/strict";
import { test } from "node:test";

import { Mapping, keyOf, kinds, type KubeObject, type ObjectKey } from "@wasmloop/sdk";
import { FakeCache } from "@wasmloop/sdk/testing";

import plugin, { CONFIG_MAP_NAME, PROFILE_INDEX, PROFILE_LABEL, REFRESH_MS } from "./plugin.js";

const CLUSTER = `
apiVersion: v1
kind: Namespace
metadata: {name: team-a, labels: {wasmloop.dev/config: gold}}
---
apiVersion: v1
kind: Namespace
metadata: {name: team-b, labels: {wasmloop.dev/config: gold}}
---
apiVersion: v1
kind: Namespace
metadata: {name: team-c, labels: {wasmloop.dev/config: silver}}
---
apiVersion: v1
kind: Namespace
metadata: {name: team-d, labels: {wasmloop.dev/config: gold}}
status: {phase: Terminating}
---
apiVersion: v1
kind: Namespace
metadata: {name: plain}
`;

const ns = (name: string): ObjectKey => keyOf(kinds.NAMESPACE, null, name);
const cmKey = (namespace: string): ObjectKey => keyOf(kinds.CONFIG_MAP, namespace, CONFIG_MAP_NAME);
const fake = () => FakeCache.forReconciler(plugin).withYaml(CLUSTER);

function setProfile(f: FakeCache, name: string, profile: string | undefined) {
  const n = f.get(ns(name)) as KubeObject;
  n.metadata!.labels = profile === undefined ? {} : { [PROFILE_LABEL]: profile };
  f.add(n);
}

test("metadata declares the ConfigMap watch and the label index", () => {
  const m = plugin.metadata().spec;
  assert.deepEqual(m.reconciles, kinds.NAMESPACE);
  assert.deepEqual(m.watches[0].kind, kinds.CONFIG_MAP);
  assert.deepEqual(m.watches[0].mapping, Mapping.namespace);
  assert.equal(m.watches[0].selector, "app.kubernetes.io/managed-by=wasmloop");
  assert.equal(m.indexes[0].name, PROFILE_INDEX);
  assert.equal(m.indexes[0].path, "labels.wasmloop.dev/config");
});

test("applies the ConfigMap with the profile and its size", () => {
  const out = fake().reconcile(ns("team-a"));
  assert.deepEqual(out.applied(), [
    {
      apiVersion: "v1",
      kind: "ConfigMap",
      metadata: { name: "wasmloop-config", namespace: "team-a", labels: { "app.kubernetes.io/managed-by": "wasmloop", "wasmloop.dev/config": "gold" } },
      // team-a and team-b; team-d is terminating.
      data: { profile: "gold", "managed-by": "wasmloop", "profile-namespaces": "2" },
    },
  ]);
  const ev = out.events()[0];
  assert.deepEqual([ev.regarding, ev.eventType, ev.reason], [keyOf(kinds.NAMESPACE, undefined, "team-a"), "normal", "ConfigApplied"]);
  assert.equal(ev.message, 'applied profile "gold" to ConfigMap wasmloop-config (2 namespaces use it)');
  assert.equal(out.requeueAfterMs, REFRESH_MS);
});

test("converged namespaces write nothing", () => {
  const f = fake();
  assert.equal(f.converge(ns("team-c"), 3).length, 1);
  assert.equal((f.get(cmKey("team-c")) as { data: Record<string, string> }).data["profile-namespaces"], "1");
  assert.ok(f.reconcile(ns("team-c")).isEmpty());
  // Labels added to the ConfigMap by someone else do not count as drift.
  const cm = f.get(cmKey("team-c")) as KubeObject;
  cm.metadata!.labels!.extra = "x";
  f.add(cm);
  assert.ok(f.reconcile(ns("team-c")).isEmpty());
});

test("profile size changes update data without an event", () => {
  const f = fake();
  f.converge(ns("team-c"), 3);
  setProfile(f, "plain", "silver");
  const out = f.reconcile(ns("team-c"));
  assert.equal(out.actions.length, 1);
  assert.equal((out.applied()[0] as { data: Record<string, string> }).data["profile-namespaces"], "2");
});

test("a profile change reapplies with an event", () => {
  const f = fake();
  f.converge(ns("team-a"), 3);
  setProfile(f, "team-a", "silver");
  const out = f.reconcile(ns("team-a"));
  const applied = out.applied()[0] as { data: Record<string, string>; metadata: { labels: Record<string, string> } };
  assert.equal(applied.data.profile, "silver");
  assert.equal(applied.metadata.labels[PROFILE_LABEL], "silver");
  assert.equal(out.events()[0].reason, "ConfigApplied");
});

test("edited or deleted ConfigMaps are restored; unlabelled Namespaces lose theirs", () => {
  const f = fake();
  f.converge(ns("team-b"), 3);
  const cm = f.get(cmKey("team-b")) as { data: Record<string, string> };
  cm.data.profile = "hacked";
  f.add(cm as KubeObject);
  assert.equal((f.reconcile(ns("team-b")).applied()[0] as { data: Record<string, string> }).data.profile, "gold");
  f.remove(cmKey("team-b"));
  assert.equal(f.reconcile(ns("team-b")).applied().length, 1);
  f.converge(ns("team-b"), 3);
  setProfile(f, "team-b", undefined);
  const out = f.reconcile(ns("team-b"));
  assert.deepEqual(out.deleted(), [cmKey("team-b")]);
  assert.equal(out.events()[0].reason, "ConfigRemoved");
  assert.equal(out.requeueAfterMs, undefined);
  f.execute(out);
  assert.equal(f.get(cmKey("team-b")), undefined);
  assert.ok(f.reconcile(ns("team-b")).isEmpty());
});

test("missing and terminating Namespaces: nothing to do", () => {
  const f = fake();
  assert.ok(f.reconcile(ns("gone")).isEmpty());
  assert.equal(f.reconcile(ns("gone")).requeueAfterMs, undefined);
  assert.ok(f.reconcile(ns("team-d")).isEmpty());
});

test("an empty profile counts as no label", () => {
  const f = fake();
  f.converge(ns("team-a"), 3);
  setProfile(f, "team-a", "");
  assert.equal(f.reconcile(ns("team-a")).deleted().length, 1);
});

test("ConfigMaps it does not manage are left alone", () => {
  // Not labelled managed-by=wasmloop: outside the watch selector, so not in the cache.
  const f = fake().with({ apiVersion: "v1", kind: "ConfigMap", metadata: { name: CONFIG_MAP_NAME, namespace: "plain" }, data: { mine: "yes" } });
  assert.ok(f.reconcile(ns("plain")).isEmpty());
  // Nor does an event on it reconcile anything; one on ours reconciles its Namespace.
  assert.deepEqual(f.mappedKeys(cmKey("plain")), []);
  f.converge(ns("team-a"), 3);
  assert.deepEqual(f.mappedKeys(cmKey("team-a")), [ns("team-a")]);
});

test("apply is used, not create", () => {
  assert.ok(fake().reconcile(ns("team-a")).actions.every((a) => a.type !== "create"));
});
