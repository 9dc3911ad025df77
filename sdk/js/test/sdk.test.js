import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { test } from "node:test";

import { IndexValue, Mapping, Metadata, Outcome, ReconcileError, Watch, cache, controllerRef, defineReconciler, hasFinalizer, isDeleting, keyOf, kind, kinds, log, objectKey, permanent, request, transient, withContext } from "@wasmloop/sdk";
import { exportPlugin, fromWitRequest, toWitError, toWitFailure, toWitMetadata, toWitOutcome } from "@wasmloop/sdk/guest";
import { FakeCache } from "@wasmloop/sdk/testing";

import { PROVIDED, componentImports } from "../tools/imports.js";
import { witToTypeScript } from "../tools/wit-types.js";

const ns = (name, labels = {}, extra = {}) => ({ apiVersion: "v1", kind: "Namespace", metadata: { name, labels, ...extra } });

const CLUSTER = `
apiVersion: v1
kind: Namespace
metadata: {name: team-a, uid: ns-a, labels: {tier: gold}}
---
apiVersion: v1
kind: Pod
metadata:
  name: p1
  namespace: team-a
  labels: {app: web}
  ownerReferences:
  - {apiVersion: apps/v1, kind: ReplicaSet, name: rs, uid: rs-1, controller: true}
spec:
  nodeName: n1
  containers:
  - name: c
    image: nginx
status: {phase: Running}
---
apiVersion: v1
kind: Pod
metadata: {name: p2, namespace: team-a, labels: {app: db}}
spec: {nodeName: n2, containers: [{name: c, image: "postgres:16"}]}
---
# a comment
apiVersion: v1
kind: Secret
metadata: {name: s, namespace: team-a}
`;

const pods = defineReconciler({
  metadata: () =>
    new Metadata("pods", "0.1.0")
      .reconciles(kinds.NAMESPACE)
      .watches(kinds.POD, Mapping.namespace)
      .index(kinds.POD, "node", "spec.nodeName")
      .index(kinds.POD, "image", "spec.containers.image")
      .field(kinds.POD, "status.phase"),
  reconcile(req) {
    const pods = cache.byIndex(kinds.POD, "namespace", req.key.name);
    log.info(`${pods.length} pods`);
    return new Outcome().statusKey(req.key, { pods: pods.length });
  },
});

test("reads are limited to declared kinds, selectors and indexes, like the host", () => {
  const fake = FakeCache.forReconciler(pods).withYaml(CLUSTER);
  fake.enter(() => {
    assert.equal(cache.get(kinds.NAMESPACE, null, "team-a").metadata.uid, "ns-a");
    assert.equal(cache.get(kinds.NAMESPACE, null, "nope"), undefined);
    assert.deepEqual(cache.list(kinds.POD, { namespace: "team-a" }).map((p) => p.metadata.name), ["p1", "p2"]);
    assert.deepEqual(cache.list(kinds.POD, { selector: "app in (web,api)" }).map((p) => p.metadata.name), ["p1"]);
    assert.deepEqual(cache.list(kinds.POD, { selector: "app!=web" }).map((p) => p.metadata.name), ["p2"]);
    assert.deepEqual(cache.byIndex(kinds.POD, "owner", "rs-1").map((p) => p.metadata.name), ["p1"]);
    assert.deepEqual(cache.ownedBy(kinds.POD, "rs-1").map((p) => p.metadata.name), ["p1"]);
    assert.deepEqual(cache.byIndex(kinds.POD, "node", "n2").map((p) => p.metadata.name), ["p2"]);
    assert.deepEqual(cache.byIndex(kinds.POD, "image", "nginx").map((p) => p.metadata.name), ["p1"]);
    const e = assert.throws(() => cache.get(kinds.SECRET, "team-a", "s"), (e) => e instanceof ReconcileError && e.tag === "not-granted");
    void e;
    assert.throws(() => cache.byIndex(kinds.POD, "nope", "x"), (e) => e.tag === "unknown-index" && /declare it with Metadata.index/.test(e.message));
    assert.throws(() => cache.list(kinds.POD, { selector: "a in (" }), (e) => e.tag === "invalid");
    const metas = cache.listMeta(kinds.POD, { namespace: "team-a" });
    assert.equal(metas[0].field(0), "Running");
    assert.equal(metas[1].field(0), undefined);
    assert.deepEqual(metas[0].metadata.labels, { app: "web" });
    assert.equal(metas[0].metadata.ownerReferences[0].controller, true);
    assert.deepEqual(metas[0].key(), keyOf(kinds.POD, "team-a", "p1"));
    assert.equal(cache.getMeta(kinds.NAMESPACE, null, "team-a").metadata.uid, "ns-a");
    assert.deepEqual(cache.ownedByMeta(kinds.POD, "rs-1").map((m) => m.metadata.name), ["p1"]);
  });
  const out = fake.reconcile(keyOf(kinds.NAMESPACE, null, "team-a"));
  assert.deepEqual(out.statusUpdates(), [[{ apiVersion: "v1", kind: "Namespace", namespace: undefined, name: "team-a" }, { pods: 2 }]]);
  assert.deepEqual(fake.logs(), [["info", "2 pods"]]);
});

test("watch selectors limit what is cached", () => {
  const meta = new Metadata("sel", "0").reconciles(kinds.NAMESPACE).watch({ kind: kinds.POD, mapping: Mapping.namespace, selector: "app=web" });
  const fake = new FakeCache(meta).withYaml(CLUSTER);
  fake.enter(() => assert.deepEqual(cache.list(kinds.POD).map((p) => p.metadata.name), ["p1"]));
  assert.throws(() => new FakeCache(new Metadata("x", "0").reconciles(kinds.NAMESPACE).index(kinds.POD, "bad", "spec..x")), /invalid path/);
  assert.throws(() => new FakeCache(new Metadata("x", "0").reconciles(kinds.NAMESPACE).field(kinds.POD, "spec")), /not a kind the plugin/);
});

test("outcome builders check their objects; the first problem is the permanent error", () => {
  const owner = { apiVersion: "apps/v1", kind: "ReplicaSet", metadata: { name: "rs", namespace: "shop", uid: "u1" } };
  const out = new Outcome()
    .createOwned(owner, { apiVersion: "v1", kind: "Pod", metadata: { generateName: "rs-" } })
    .apply({ apiVersion: "v1", kind: "ConfigMap", metadata: { name: "c", namespace: "shop" } })
    .delete({ apiVersion: "v1", kind: "Pod", metadata: { name: "old", namespace: "shop", uid: "u2" } })
    .status(owner, { replicas: 1 })
    .event(owner, "normal", "Scaled", "up")
    .patch(owner, { metadata: { labels: { a: "b" } } })
    .requeueAfter(1500);
  assert.equal(out.actions.length, 6);
  const pod = out.created()[0];
  assert.equal(pod.metadata.namespace, "shop");
  assert.deepEqual(pod.metadata.ownerReferences, [controllerRef(owner)]);
  assert.deepEqual(out.deleted(), [{ apiVersion: "v1", kind: "Pod", namespace: "shop", name: "old" }]);
  assert.equal(out.patches()[0].preconditions.uid, "u1");
  assert.equal(out.intoResult(), out);
  const wit = toWitOutcome(out);
  assert.equal(wit.requeueAfterMs, 1500);
  assert.deepEqual(wit.actions.map((a) => a.tag), ["create", "apply", "delete", "update-status", "event", "patch"]);
  assert.equal(typeof wit.actions[0].val, "string");
  assert.deepEqual(wit.actions[2].val, { key: { apiVersion: "v1", kind: "Pod", namespace: "shop", name: "old" }, preconditions: { uid: null, resourceVersion: null } });
  assert.throws(() => new Outcome().statusKey(out.deleted()[0], "nope").intoResult(), /expected a JSON object/);
  assert.throws(() => new Outcome().event(owner, "normal", "", "m").intoResult(), /empty reason/);
  const bad = new Outcome().apply({ kind: "ConfigMap", metadata: { name: "x" } }).create({ apiVersion: "v1", kind: "Pod", metadata: {} });
  assert.throws(() => bad.intoResult(), (e) => e.kind === "permanent" && e.message === "invalid action: apply: the object has no apiVersion");
  assert.throws(() => new Outcome().createOwned({ apiVersion: "v1", kind: "X", metadata: { name: "o" } }, {}).intoResult(), /has no metadata.uid/);
  assert.ok(new Outcome().requeueAfter(5).isEmpty(), "a requeue alone changes nothing");
});

test("finalizers and deletion checks", () => {
  const obj = { apiVersion: "v1", kind: "ConfigMap", metadata: { name: "c", namespace: "n", uid: "u", finalizers: ["a/b"], deletionTimestamp: "2024-01-01T00:00:00Z" } };
  assert.ok(isDeleting(obj) && hasFinalizer(obj, "a/b") && !hasFinalizer(obj, "x"));
  assert.equal(new Outcome().addFinalizer(obj, "a/b").actions.length, 0);
  const rm = new Outcome().removeFinalizer(obj, "a/b").patches()[0];
  assert.deepEqual(rm.body, [{ op: "test", path: "/metadata/finalizers/0", value: "a/b" }, { op: "remove", path: "/metadata/finalizers/0" }]);
  const fake = new FakeCache(new Metadata("f", "0").reconciles(kinds.CONFIG_MAP)).with(obj);
  fake.execute(new Outcome().removeFinalizer(obj, "a/b"));
  assert.equal(fake.get(objectKey(obj)), undefined, "the last finalizer removed ends the deletion");
});

test("errors: transient, permanent, context, and what the component returns", () => {
  assert.deepEqual(toWitError(transient("later")), { tag: "transient", val: "later" });
  assert.deepEqual(toWitError(permanent("never")), { tag: "permanent", val: "never" });
  assert.deepEqual(toWitError(new TypeError("x is undefined")), { tag: "transient", val: "uncaught exception: TypeError: x is undefined" });
  assert.throws(() => withContext("reading", () => { throw permanent("gone"); }), (e) => e.kind === "permanent" && e.message === "reading: gone");
});

test("the component export converts requests, metadata, outcomes and errors", () => {
  const fake = FakeCache.forReconciler(pods).withYaml(CLUSTER);
  const plugin = exportPlugin(pods, { bindings: fake.host() });
  const m = plugin.metadata();
  assert.deepEqual(m.reconciles, { apiVersion: "v1", kind: "Namespace" });
  assert.deepEqual(m.watches[0], { kind: { apiVersion: "v1", kind: "Pod" }, mapping: { tag: "namespace" }, selector: null, annotationSelector: null });
  assert.equal(m.selector, null);
  assert.equal(m.annotationSelector, null);
  const out = plugin.reconcile({ key: { apiVersion: "v1", kind: "Namespace", namespace: null, name: "team-a" }, reason: { tag: "event" }, lastError: null });
  assert.equal(out.actions[0].val.status, '{"pods":2}');
  assert.equal(out.requeueAfterMs, null);
  const failing = defineReconciler({ metadata: pods.metadata, reconcile: () => { throw permanent("no"); } });
  assert.throws(
    () => exportPlugin(failing, { bindings: fake.host() }).reconcile({ key: { apiVersion: "v1", kind: "Namespace", namespace: null, name: "x" }, reason: { tag: "event" }, lastError: null }),
    (e) => e.error.tag === "permanent" && e.error.val === "no" && e.actions.length === 0,
  );
  assert.deepEqual(fromWitRequest({ key: { apiVersion: "v1", kind: "Namespace", namespace: null, name: "x" }, reason: { tag: "retry", val: 3 }, lastError: "boom" }), {
    key: { apiVersion: "v1", kind: "Namespace", namespace: undefined, name: "x" }, reason: "retry", attempt: 3, lastError: "boom",
  });
  assert.throws(() => toWitMetadata(new Metadata("x", "0")), /which kind it reconciles/);
  assert.deepEqual(request(keyOf(kinds.NAMESPACE, null, "a")).reason, "event");
});

test("execute and converge play the host's part", () => {
  const cfg = defineReconciler({
    metadata: () => new Metadata("cfg", "0").reconciles(kinds.NAMESPACE).watches(kinds.CONFIG_MAP, Mapping.namespace),
    reconcile(req) {
      const cm = cache.get(kinds.CONFIG_MAP, req.key.name, "c");
      const want = { apiVersion: "v1", kind: "ConfigMap", metadata: { name: "c", namespace: req.key.name }, data: { a: "1" } };
      return cm?.data?.a === "1" ? new Outcome().requeueAfter(1000) : new Outcome().apply(want);
    },
  });
  const fake = FakeCache.forReconciler(cfg).with(ns("team-a"));
  const rounds = fake.converge(keyOf(kinds.NAMESPACE, null, "team-a"));
  assert.equal(rounds.length, 1);
  assert.equal(fake.get(keyOf(kinds.CONFIG_MAP, "team-a", "c")).data.a, "1");
  assert.ok(fake.get(keyOf(kinds.CONFIG_MAP, "team-a", "c")).metadata.uid.startsWith("fake-uid-"));
  fake.execute(new Outcome().eventKey(keyOf(kinds.NAMESPACE, null, "team-a"), "warning", "R", "m"));
  assert.deepEqual(fake.events().map((e) => e.reason), ["R"]);
  const never = defineReconciler({ metadata: cfg.metadata, reconcile: (req) => new Outcome().statusKey(req.key, { n: Math.random() }) });
  assert.throws(() => new FakeCache(never).with(ns("x")).converge(keyOf(kinds.NAMESPACE, null, "x"), 3), /did not converge in 3/);
});

test("the YAML reader reads Kubernetes fixtures", () => {
  const fake = new FakeCache(new Metadata("y", "0").reconciles(kinds.POD)).withYaml(CLUSTER);
  const p = fake.get(keyOf(kinds.POD, "team-a", "p1"));
  assert.deepEqual(p.spec.containers, [{ name: "c", image: "nginx" }]);
  assert.equal(fake.get(keyOf(kinds.POD, "team-a", "p2")).spec.containers[0].image, "postgres:16");
  const docs = new FakeCache(new Metadata("y", "0").reconciles(kinds.CONFIG_MAP)).withYaml("kind: ConfigMap\napiVersion: v1\nmetadata:\n  name: m\n  namespace: n\ndata:\n  script: |\n    line one\n    line two\n  n: '1'\n  q: \"a: b\"\n");
  assert.deepEqual(docs.get(keyOf(kinds.CONFIG_MAP, "n", "m")).data, { script: "line one\nline two\n", n: "1", q: "a: b" });
});

test("the contract types are generated from the current WIT, and the SDK's WIT is the repository's", () => {
  const wit = readFileSync(new URL("../wit/controller.wit", import.meta.url), "utf8");
  assert.equal(readFileSync(new URL("../../../wit/controller.wit", import.meta.url), "utf8"), wit, "sdk/js/wit/controller.wit is a copy of wit/controller.wit");
  assert.equal(readFileSync(new URL("../src/contract.d.ts", import.meta.url), "utf8"), witToTypeScript(wit), "run `npm run types`");
});

test("the build's list of provided imports is the host's", () => {
  const rust = readFileSync(new URL("../../../host/src/plugin/imports.rs", import.meta.url), "utf8");
  const block = /pub const PROVIDED: &\[&str\] = &\[([\s\S]*?)\];/.exec(rust)[1];
  assert.deepEqual([...block.matchAll(/"([^"]+)"/g)].map((m) => m[1]), PROVIDED);
  assert.throws(() => componentImports(new Uint8Array([0, 0x61, 0x73, 0x6d, 1, 0, 0, 0])), /core module/);
});

// ---- contract 0.3: index mappings, annotation selectors, failures carrying actions

const FOO = kind("example.com/v1", "Foo");

const namer = defineReconciler({
  metadata: () =>
    new Metadata("namer", "0")
      .reconciles(FOO)
      .namedBy(kinds.DEPLOYMENT, "deployment", "spec.deploymentName", IndexValue.name)
      .namedBy(kinds.CONFIG_MAP, "source", "spec.source", IndexValue.namespacedName)
      .namedBy(kinds.SERVICE, "services", "spec.services", IndexValue.field("metadata.labels.app"))
      .watch(new Watch(kinds.SECRET, Mapping.sameName).annotationSelector("example.com/managed=true")),
  reconcile(req) {
    const foo = cache.getKey(req.key);
    if (!foo) throw permanent("gone");
    if (foo.metadata.labels?.broken) {
      throw transient("broken on purpose").withActions(new Outcome().event(foo, "warning", "Broken", "cannot work with this").status(foo, { ok: false }));
    }
    return new Outcome();
  },
});

const NAMER_FIXTURE = `
apiVersion: example.com/v1
kind: Foo
metadata: {name: f1, namespace: a, uid: f1}
spec: {deploymentName: web, source: shared/cfg, services: [front]}
---
apiVersion: example.com/v1
kind: Foo
metadata: {name: f2, namespace: b, uid: f2}
spec: {deploymentName: web, source: shared/cfg, services: [front, back]}
---
apiVersion: apps/v1
kind: Deployment
metadata: {name: web, namespace: a}
---
apiVersion: v1
kind: ConfigMap
metadata: {name: cfg, namespace: shared}
---
apiVersion: v1
kind: Service
metadata: {name: s, namespace: b, labels: {app: back}}
---
apiVersion: v1
kind: Secret
metadata: {name: f1, namespace: a, annotations: {example.com/managed: "true"}}
---
apiVersion: v1
kind: Secret
metadata: {name: f2, namespace: b}
`;

test("0.3 metadata: namedBy declares the index and the index mapping, selectors on annotations", () => {
  const m = toWitMetadata(namer.metadata());
  assert.deepEqual(m.indexes[0], { kind: { apiVersion: "example.com/v1", kind: "Foo" }, name: "deployment", path: "spec.deploymentName" });
  assert.deepEqual(m.watches[0], { kind: { apiVersion: "apps/v1", kind: "Deployment" }, mapping: { tag: "index", val: { index: "deployment", value: { tag: "name" } } }, selector: null, annotationSelector: null });
  assert.deepEqual(m.watches[1].mapping, { tag: "index", val: { index: "source", value: { tag: "namespaced-name" } } });
  assert.deepEqual(m.watches[2].mapping, { tag: "index", val: { index: "services", value: { tag: "field", val: "metadata.labels.app" } } });
  assert.equal(m.watches[3].annotationSelector, "example.com/managed=true");
  const own = toWitMetadata(new Metadata("x", "0").reconciles(FOO).annotationSelector("!example.com/skip").watches(kinds.POD, Mapping.index("pods", IndexValue.name)).index(FOO, "pods", "spec.pod"));
  assert.equal(own.annotationSelector, "!example.com/skip");
  assert.deepEqual(own.watches[0].mapping, { tag: "index", val: { index: "pods", value: { tag: "name" } } });
  assert.throws(() => new Metadata("x", "0").namedBy(kinds.POD, "i", "spec.x", IndexValue.name), /call reconciles/);
  assert.throws(() => new FakeCache(new Metadata("x", "0").reconciles(FOO).watches(kinds.DEPLOYMENT, Mapping.index("nope", IndexValue.name))), /names index "nope", which is not declared on example.com\/v1\/Foo/);
  assert.throws(() => new FakeCache(new Metadata("x", "0").reconciles(FOO).namedBy(kinds.POD, "i", "spec.x", IndexValue.field("spec..x"))), /the index mapping's field/);
  assert.throws(() => new FakeCache(new Metadata("x", "0").reconciles(FOO).annotationSelector("a in (")), /invalid selector/);
});

test("0.3 index mappings reach the primaries that name an object, as the host maps them", () => {
  const fake = FakeCache.forReconciler(namer).withYaml(NAMER_FIXTURE);
  // By name: only the Foo in the Deployment's namespace.
  assert.deepEqual(fake.mappedKeys(keyOf(kinds.DEPLOYMENT, "a", "web")), [keyOf(FOO, "a", "f1")]);
  // By namespace/name: Foos anywhere that name the ConfigMap.
  assert.deepEqual(fake.mappedKeys(keyOf(kinds.CONFIG_MAP, "shared", "cfg")), [keyOf(FOO, "a", "f1"), keyOf(FOO, "b", "f2")]);
  // By a field of the related object, in its namespace.
  assert.deepEqual(fake.mappedKeys(keyOf(kinds.SERVICE, "b", "s")), [keyOf(FOO, "b", "f2")]);
  // An object no primary names maps to nothing; an unannotated Secret is not even cached.
  fake.addYaml("apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: db, namespace: a}");
  assert.deepEqual(fake.mappedKeys(keyOf(kinds.DEPLOYMENT, "a", "db")), []);
  assert.deepEqual(fake.mappedKeys(keyOf(kinds.SECRET, "a", "f1")), [keyOf(FOO, "a", "f1")]);
  assert.deepEqual(fake.mappedKeys(keyOf(kinds.SECRET, "b", "f2")), []);
  assert.deepEqual(fake.mappedKeys(keyOf(kinds.SECRET, "b", "missing")), []);
  fake.enter(() => assert.deepEqual(cache.list(kinds.SECRET).map((s) => s.metadata.name), ["f1"], "the annotation selector limits what is cached"));
  // The other mappings, as the host's.
  const other = new FakeCache(
    new Metadata("o", "0").reconciles(kinds.REPLICA_SET).owns(kinds.POD).watches(kinds.CONFIG_MAP, Mapping.label("app")).watches(kinds.SECRET, Mapping.sameName),
  ).withYaml(CLUSTER + "\n---\napiVersion: v1\nkind: ConfigMap\nmetadata: {name: c, namespace: team-a, labels: {app: web}}\n");
  assert.deepEqual(other.mappedKeys(keyOf(kinds.POD, "team-a", "p1")), [keyOf(kinds.REPLICA_SET, "team-a", "rs")]);
  assert.deepEqual(other.mappedKeys(keyOf(kinds.POD, "team-a", "p2")), []);
  assert.deepEqual(other.mappedKeys(keyOf(kinds.CONFIG_MAP, "team-a", "c")), [keyOf(kinds.REPLICA_SET, "team-a", "web")]);
  assert.deepEqual(other.mappedKeys(keyOf(kinds.SECRET, "team-a", "s")), [keyOf(kinds.REPLICA_SET, "team-a", "s")]);
  assert.deepEqual(FakeCache.forReconciler(pods).withYaml(CLUSTER).mappedKeys(keyOf(kinds.POD, "team-a", "p2")), [keyOf(kinds.NAMESPACE, null, "team-a")]);
});

test("0.3 annotation selectors on the reconciled kind limit what is cached", () => {
  const fake = new FakeCache(new Metadata("a", "0").reconciles(kinds.CONFIG_MAP).annotationSelector("example.com/managed=true")).with([
    { apiVersion: "v1", kind: "ConfigMap", metadata: { name: "yes", namespace: "n", annotations: { "example.com/managed": "true" } } },
    { apiVersion: "v1", kind: "ConfigMap", metadata: { name: "no", namespace: "n" } },
  ]);
  fake.enter(() => {
    assert.deepEqual(cache.list(kinds.CONFIG_MAP).map((c) => c.metadata.name), ["yes"]);
    assert.equal(cache.get(kinds.CONFIG_MAP, "n", "no"), undefined);
  });
  // An index on the reconciled kind is built on its informer, as the host does: the selector still applies.
  const indexed = new FakeCache(
    new Metadata("a", "0").reconciles(kinds.CONFIG_MAP).annotationSelector("example.com/managed=true").index(kinds.CONFIG_MAP, "by-app", "labels.app"),
  ).with([
    { apiVersion: "v1", kind: "ConfigMap", metadata: { name: "yes", namespace: "n", labels: { app: "x" }, annotations: { "example.com/managed": "true" } } },
    { apiVersion: "v1", kind: "ConfigMap", metadata: { name: "no", namespace: "n", labels: { app: "x" } } },
  ]);
  indexed.enter(() => {
    assert.deepEqual(cache.list(kinds.CONFIG_MAP).map((c) => c.metadata.name), ["yes"]);
    assert.deepEqual(cache.byIndex(kinds.CONFIG_MAP, "by-app", "x").map((c) => c.metadata.name), ["yes"]);
  });
});

test("0.3 a failure carries its actions: the component sends them, execute and converge carry them out", () => {
  const e = transient("quota exceeded").withActions(new Outcome().eventKey(keyOf(FOO, "a", "f1"), "warning", "QuotaExceeded", "retrying").requeueAfter(5));
  assert.equal(e.actions.actions.length, 1);
  assert.equal(e.context("reconciling").actions, e.actions, "context keeps the actions");
  const wit = toWitFailure(e);
  assert.deepEqual(wit.error, { tag: "transient", val: "quota exceeded" });
  assert.deepEqual(wit.actions.map((a) => a.tag), ["event"]);
  assert.deepEqual(toWitFailure(permanent("bad spec")), { error: { tag: "permanent", val: "bad spec" }, actions: [] });
  assert.deepEqual(toWitFailure(new Error("x")).error.tag, "transient");
  // A list of actions works too; unusable ones are not sent, and the message says so.
  assert.equal(toWitFailure(transient("t").withActions(new Outcome().statusKey(keyOf(FOO, "a", "f1"), { a: 1 }).actions)).actions[0].tag, "update-status");
  const bad = toWitFailure(transient("t").withActions(new Outcome().apply({ kind: "X", metadata: { name: "x" } })));
  assert.deepEqual(bad, { error: { tag: "transient", val: "its actions were not sent (invalid action: apply: the object has no apiVersion): t" }, actions: [] });

  const fake = FakeCache.forReconciler(namer).withYaml(NAMER_FIXTURE);
  const broken = fake.get(keyOf(FOO, "a", "f1"));
  broken.metadata.labels = { broken: "yes" };
  fake.add(broken);
  const err = assert.throws(() => fake.reconcile(keyOf(FOO, "a", "f1")), (e) => e instanceof ReconcileError && e.isTransient && e.actions.actions.length === 2);
  void err;
  assert.throws(() => fake.converge(keyOf(FOO, "a", "f1"), 3), /reconcile of example.com\/v1\/Foo\/a\/f1 failed: transient: broken on purpose/);
  assert.deepEqual(fake.events().map((e) => e.reason), ["Broken"]);
  assert.deepEqual(fake.get(keyOf(FOO, "a", "f1")).status, { ok: false });
  // The component export throws the failure with its actions.
  const plugin = exportPlugin(namer, { bindings: fake.host() });
  plugin.metadata();
  assert.throws(
    () => plugin.reconcile({ key: { apiVersion: "example.com/v1", kind: "Foo", namespace: "a", name: "f1" }, reason: { tag: "event" }, lastError: null }),
    (f) => f.error.tag === "transient" && f.actions.map((a) => a.tag).join() === "event,update-status",
  );
  // execute takes the error itself.
  fake.execute(transient("again").withActions(new Outcome().eventKey(keyOf(FOO, "a", "f1"), "warning", "Again", "m")));
  assert.deepEqual(fake.events().map((e) => e.reason), ["Broken", "Again"]);
});
