// Unit-test reconcilers under Node (`node --test`): a fake of the host's cache built from
// objects, JSON or YAML, no wasm, no cluster. It answers reads like the host (and like the Rust
// SDK's `testing::FakeCache`): only kinds the metadata declares are readable, watch and
// reconcile selectors (label and annotation) limit what is cached, `byIndex` knows `namespace`,
// `owner` (the controller owner's UID) and the declared `labels.<key>` / dotted-path indexes,
// and metadata reads return the declared fields. `mappedKeys` maps an event on a related object
// to the keys the host would queue (owner, label, same name, namespace and index mappings).
// `execute` and `converge` play the host's part of carrying out the actions (a failure's too),
// so a test can check that a reconciler converges and then writes nothing.
//
// The fake has a clock, which the SDK's `time` reads while the fake is bound: it starts at the
// wall-clock time the fake is made and stands still until a test moves it (`setTime`, `advance`)
// or `converge` ends on an outcome that asks for a requeue (the clock moves to it); `runUntil`
// plays a schedule out to a given time.

import { readdirSync, readFileSync } from "node:fs";
import { join } from "node:path";

import { toWitFailure, toWitOutcome } from "./guest.js";
import { bindHost } from "./host.js";
import { Metadata, Outcome, ReconcileError, keyString, objectKey, permanent, request as makeRequest, sameKind } from "./index.js";
import { checkFieldPath, checkPath, fieldValue, indexValues, matchesAnnotationSelector, matchesSelector, parseSelector } from "./paths.js";
import { checkTarget, jsonPatch, mappedKeys, mergeInto, mergePatch, preconditionsHold } from "./rules.js";
import { format as formatSecs, parseMicros } from "./time.js";
import { parseYamlStream } from "./yaml.js";

const kindId = (k) => `${k.apiVersion}/${k.kind}`;
const nsId = (ns) => ns ?? "";

function clone(v) {
  return JSON.parse(JSON.stringify(v));
}

function hasFinalizers(obj) {
  return (obj?.metadata?.finalizers ?? []).length > 0;
}

/** What one informer of the host caches: a label selector and an annotation selector, both optional. */
function selection(labels, annotations) {
  return (obj) => (labels == null || matchesSelector(labels, obj)) && (annotations == null || matchesAnnotationSelector(annotations, obj));
}

/** The values an index mapping looks up for a related object, and whether matches stay in its namespace (wasmloop-model's `IndexValue::lookup`). */
function lookup(value, ns, name, obj) {
  switch (value.tag) {
    case "name":
      return [[name], true];
    case "namespaced-name":
      return [[ns ? `${ns}/${name}` : name], false];
    case "field": {
      let values = [];
      try {
        checkPath(value.val);
        values = indexValues(value.val, obj);
      } catch {
        values = [];
      }
      return [values, true];
    }
    default:
      throw new Error(`unknown index value ${JSON.stringify(value)}`);
  }
}

/** A fake of the host's cache (and of its action executor) for tests under Node. */
export class FakeCache {
  /**
   * A fake granting what `metadata` declares (a `Metadata`, or a reconciler, whose `metadata()`
   * is called and which `reconcile` then uses by default). Throws, as the host refuses at load,
   * on bad selectors, index paths and fields.
   */
  constructor(metadataOrReconciler) {
    if (typeof metadataOrReconciler?.metadata === "function") {
      this.reconciler = metadataOrReconciler;
      this.metadata = metadataOrReconciler.metadata();
    } else this.metadata = metadataOrReconciler;
    if (!(this.metadata instanceof Metadata)) throw new TypeError("FakeCache: give it a Metadata or a reconciler");
    const m = this.metadata.spec;
    if (!m.reconciles) throw new Error("FakeCache: the metadata declares no reconciled kind (Metadata.reconciles)");
    const sel = (s, what) => {
      if (s == null) return;
      try {
        parseSelector(s);
      } catch (e) {
        throw new Error(`${what}: invalid selector ${JSON.stringify(s)}: ${e.message}`);
      }
    };
    sel(m.selector, "reconciled kind");
    sel(m.annotationSelector, "reconciled kind");
    for (const w of m.watches) {
      sel(w.selector, `watch of ${kindId(w.kind)}`);
      sel(w.annotationSelector, `watch of ${kindId(w.kind)}`);
      // As the host refuses at load: an index mapping names an index of the reconciled kind.
      if (w.mapping?.tag === "index") {
        const { index, value } = w.mapping.val;
        if (!m.indexes.some((i) => sameKind(i.kind, m.reconciles) && i.name === index)) {
          throw new Error(`watch of ${kindId(w.kind)}: the index mapping names index ${JSON.stringify(index)}, which is not declared on ${kindId(m.reconciles)}`);
        }
        if (!["name", "namespaced-name", "field"].includes(value?.tag)) throw new Error(`watch of ${kindId(w.kind)}: unknown index value ${JSON.stringify(value)}`);
        if (value.tag === "field") {
          try {
            checkPath(value.val);
          } catch (e) {
            throw new Error(`watch of ${kindId(w.kind)}: the index mapping's field: ${e.message}`);
          }
        }
      }
    }
    for (const i of m.indexes) {
      try {
        checkPath(i.path);
      } catch (e) {
        throw new Error(`index ${JSON.stringify(i.name)} on ${kindId(i.kind)}: invalid path ${JSON.stringify(i.path)}: ${e.message}`);
      }
    }
    const readable = this.metadata.readableKinds();
    m.fields.forEach((f, i) => {
      if (!readable.some((k) => sameKind(k, f.kind))) throw new Error(`fields[${i}]: ${kindId(f.kind)} is not a kind the plugin reconciles, watches or indexes`);
      checkFieldPath(f.path);
    });
    /** kind id → Map("ns\0name" → object) */
    this.store = new Map();
    this._logs = [];
    this._events = [];
    this.nextUid = 1;
    /** Now, in microseconds since the epoch: what the SDK's `time` reads. */
    this._clock = Date.now() * 1000;
    /** Functions (action → why, or undefined) that make writes fail (`failWhen`). */
    this._failures = [];
    /** keyString → why the key's previous reconcile failed, while it keeps failing (the host's `lastError`). */
    this._lastErrors = new Map();
    /** The key last reconciled, whose `lastError` a failing action sets. */
    this._current = undefined;
  }

  // ---- failing writes

  /**
   * Make the actions `fails` says why about (a string; undefined to let it through) fail, as the
   * API server refusing them would (a 403, a 422, a quota): `execute` stops the outcome at the
   * first such action (the ones before it are done, the rest are not), and the next reconcile of
   * the key carries `<verb> <object>: <why>` as `request.lastError`, as the host's does.
   */
  failWhen(fails) {
    this._failures.push(fails);
    return this;
  }

  /** Make every create of a `kindRef` object fail with `why` (see `failWhen`). */
  failCreates(kindRef, why) {
    return this.failWhen((a) => (a.type === "create" && sameKind(a.object, kindRef) ? why : undefined));
  }

  /** Let every write succeed again. */
  clearFailures() {
    this._failures = [];
    return this;
  }

  /** Why `key`'s last reconcile failed (its error, or its first failing action), while it keeps failing. */
  lastError(key) {
    return this._lastErrors.get(keyString(key));
  }

  // ---- the clock

  /** Set the clock to `rfc3339` and return this. */
  withTime(rfc3339) {
    this.setTime(rfc3339);
    return this;
  }

  /** Set the clock to `rfc3339` (a timestamp as the API server writes them, with or without a fraction). */
  setTime(rfc3339) {
    const us = parseMicros(rfc3339);
    if (us === undefined) throw new Error(`FakeCache: not an RFC 3339 timestamp: ${JSON.stringify(rfc3339)}`);
    this._clock = us;
    return this;
  }

  /** Move the clock forward by `ms` milliseconds. */
  advance(ms) {
    this._clock += Math.round(ms * 1000);
    return this;
  }

  /** Now on the fake's clock, in microseconds since the epoch. */
  nowMicros() {
    return this._clock;
  }

  /** Now on the fake's clock, as a `metav1.Time` (whole seconds). */
  nowRfc3339() {
    return formatSecs(Math.floor(this._clock / 1_000_000));
  }

  /** A fake for `reconciler` (its metadata; `reconcile` uses it). */
  static forReconciler(reconciler) {
    return new FakeCache(reconciler);
  }

  // ---- loading objects

  /** Add one object (or an array, or a `kind: List`) and return this. */
  with(obj) {
    this.add(obj);
    return this;
  }

  /** Add the objects in a JSON document and return this. */
  withJson(text) {
    return this.with(JSON.parse(text));
  }

  /** Add the objects in a YAML stream and return this. */
  withYaml(text) {
    this.addYaml(text);
    return this;
  }

  /** Add the objects in every `*.yaml`, `*.yml` and `*.json` file of `dir` (name order, not recursive). */
  withDir(dir) {
    for (const f of readdirSync(dir).sort()) {
      const text = () => readFileSync(join(dir, f), "utf8");
      if (f.endsWith(".json")) this.add(JSON.parse(text()));
      else if (f.endsWith(".yaml") || f.endsWith(".yml")) this.addYaml(text());
    }
    return this;
  }

  /** Add the objects in a YAML stream. */
  addYaml(text) {
    for (const doc of parseYamlStream(text)) this.add(doc);
    return this;
  }

  /** Add (or replace) objects: one, an array, or a `kind: List`. Objects without a uid get one; managedFields is dropped. */
  add(obj) {
    if (obj == null) return this;
    if (Array.isArray(obj)) obj.forEach((o) => this.add(o));
    else if (obj.kind === "List" && Array.isArray(obj.items)) obj.items.forEach((o) => this.add(o));
    else this._insert(clone(obj));
    return this;
  }

  _insert(obj) {
    const key = objectKey(obj);
    delete obj.metadata.managedFields;
    if (!obj.metadata.uid) obj.metadata.uid = `fake-uid-${this.nextUid++}`;
    const id = kindId(key);
    if (!this.store.has(id)) this.store.set(id, new Map());
    this.store.get(id).set(`${nsId(key.namespace)}\0${key.name}`, obj);
  }

  /** Remove the object with this key (as if deleted), returning it. */
  remove(key) {
    const m = this.store.get(kindId(key));
    const id = `${nsId(key.namespace)}\0${key.name}`;
    const obj = m?.get(id);
    m?.delete(id);
    return obj === undefined ? undefined : clone(obj);
  }

  /** The stored object with this key (ignoring grants and selectors), a copy. */
  get(key) {
    const obj = this.store.get(kindId(key))?.get(`${nsId(key.namespace)}\0${key.name}`);
    return obj === undefined ? undefined : clone(obj);
  }

  /** All stored objects of `kindRef`, by namespace and name. */
  objects(kindRef) {
    const m = this.store.get(kindId(kindRef));
    if (!m) return [];
    return [...m.entries()].sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0)).map(([, o]) => clone(o));
  }

  // ---- the host's side of reads

  /** Whether `kindRef` is readable, and the selectors limiting what is cached (null: everything). */
  _grant(kindRef) {
    const m = this.metadata.spec;
    const selectors = [];
    let unrestricted = false;
    let declared = false;
    const note = (labels, annotations) => {
      declared = true;
      if (labels == null && annotations == null) unrestricted = true;
      else selectors.push(selection(labels, annotations));
    };
    if (m.reconciles && sameKind(m.reconciles, kindRef)) note(m.selector, m.annotationSelector);
    for (const w of m.watches.filter((w) => sameKind(w.kind, kindRef))) note(w.selector, w.annotationSelector);
    // As the host: an index on a reconciled or watched kind is built on those informers (their
    // selectors apply); only a kind read for its index alone is cached whole.
    if (!declared && m.indexes.some((i) => sameKind(i.kind, kindRef))) note(null, null);
    if (!declared) {
      throw { tag: "not-granted", val: `${kindId(kindRef)} is not declared in the metadata of plugin ${JSON.stringify(m.name)} (reconciles, watches or indexes)` };
    }
    return unrestricted ? null : selectors;
  }

  _visible(kindRef, filter = () => true) {
    const selectors = this._grant(kindRef);
    return this.objects(kindRef).filter((o) => (selectors === null || selectors.some((s) => s(o))) && filter(o));
  }

  _get(kindRef, ns, name) {
    const selectors = this._grant(kindRef);
    const o = this.get({ ...kindRef, namespace: ns ?? undefined, name });
    return o && (selectors === null || selectors.some((s) => s(o))) ? o : undefined;
  }

  _list(kindRef, ns, selector) {
    let match = () => true;
    if (selector != null) {
      try {
        match = parseSelector(selector);
      } catch (e) {
        throw { tag: "invalid", val: `label selector ${JSON.stringify(selector)}: ${e.message}` };
      }
    }
    return this._visible(kindRef, (o) => (ns == null || (o.metadata.namespace ?? null) === ns) && match(o.metadata.labels ?? {}));
  }

  _byIndex(kindRef, index, value) {
    this._grant(kindRef);
    let values;
    if (index === "namespace") values = (o) => (o.metadata.namespace ? [o.metadata.namespace] : []);
    else if (index === "owner") {
      values = (o) => {
        const c = (o.metadata.ownerReferences ?? []).find((r) => r.controller === true);
        return c?.uid ? [c.uid] : [];
      };
    } else {
      const decl = this.metadata.spec.indexes.find((i) => sameKind(i.kind, kindRef) && i.name === index);
      if (!decl) throw { tag: "unknown-index", val: `no index ${JSON.stringify(index)} on ${kindId(kindRef)}: declare it with Metadata.index (namespace and owner always exist)` };
      values = (o) => indexValues(decl.path, o);
    }
    return this._visible(kindRef, (o) => values(o).includes(value));
  }

  _meta(kindRef, o) {
    const m = o.metadata;
    return {
      namespace: m.namespace ?? null,
      name: m.name,
      uid: m.uid ?? "",
      resourceVersion: m.resourceVersion ?? "",
      generation: m.generation ?? null,
      creationTimestamp: m.creationTimestamp ?? null,
      deletionTimestamp: m.deletionTimestamp ?? null,
      labels: Object.entries(m.labels ?? {}),
      annotations: Object.entries(m.annotations ?? {}),
      ownerReferences: (m.ownerReferences ?? []).map((r) => ({
        apiVersion: r.apiVersion,
        kind: r.kind,
        name: r.name,
        uid: r.uid,
        controller: r.controller === true,
        blockOwnerDeletion: r.blockOwnerDeletion === true,
      })),
      finalizers: m.finalizers ?? [],
      fields: this.metadata.fieldsOf(kindRef).map((p) => {
        const v = fieldValue(o, p);
        return v === undefined ? null : JSON.stringify(v);
      }),
    };
  }

  /** The host as the SDK sees it: the contract's `cache` and `log`, served by this fake. */
  host() {
    const json = (o) => JSON.stringify(o);
    return {
      cache: {
        get: (k, ns, n) => {
          const o = this._get(k, ns, n);
          return o === undefined ? null : json(o);
        },
        list: (k, ns, s) => this._list(k, ns, s).map(json),
        byIndex: (k, i, v) => this._byIndex(k, i, v).map(json),
        getMeta: (k, ns, n) => {
          const o = this._get(k, ns, n);
          return o === undefined ? null : this._meta(k, o);
        },
        listMeta: (k, ns, s) => this._list(k, ns, s).map((o) => this._meta(k, o)),
        byIndexMeta: (k, i, v) => this._byIndex(k, i, v).map((o) => this._meta(k, o)),
      },
      clock: { nowMicros: () => this._clock },
      log: {
        log: (level, message) => {
          this._logs.push([level, message]);
          if (process.env.WASMLOOP_TEST_LOG) console.error(`[${level}] ${message}`);
        },
      },
    };
  }

  /** Run `f` with this fake answering the SDK's cache reads and logs. */
  enter(f) {
    const previous = bindHost(this.host());
    try {
      return f();
    } finally {
      bindHost(previous);
    }
  }

  // ---- reconciling

  /** Reconcile `key` (reason `event`); returns the Outcome or throws the ReconcileError. */
  reconcile(key, reconciler = this.reconciler) {
    return this.reconcileRequest(makeRequest(key), reconciler);
  }

  /** Reconcile a request (see `request()` in the SDK). */
  reconcileRequest(req, reconciler = this.reconciler) {
    if (!reconciler) throw new Error("FakeCache: no reconciler (build the fake with forReconciler, or pass one)");
    const reconciled = this.metadata.spec.reconciles;
    if (!sameKind(req.key, reconciled)) throw new Error(`FakeCache: the host only reconciles keys of the reconciled kind ${kindId(reconciled)}`);
    const id = keyString(req.key);
    if (req.lastError === undefined) req = { ...req, lastError: this._lastErrors.get(id) };
    this._current = id;
    let result;
    try {
      result = this.enter(() => {
        let out;
        try {
          out = reconciler.reconcile(req);
        } catch (e) {
          if (e instanceof ReconcileError) toWitFailure(e); // what the component would send: its actions convert (or are dropped)
          throw e;
        }
        if (!(out instanceof Outcome)) throw permanent("reconcile must return an Outcome");
        out.intoResult();
        toWitOutcome(out); // what the component would send: every action converts
        return out;
      });
    } catch (e) {
      if (e instanceof ReconcileError) this._lastErrors.set(id, e.message);
      throw e;
    }
    this._lastErrors.delete(id); // cleared now; a failing action of this outcome sets it again
    return result;
  }

  /**
   * The keys of the reconciled kind the host would queue for an event on `related` (the key of
   * an object in this fake, of a watched kind), through each of the plugin's watches of its kind
   * and their mappings: owner, label, same name, namespace, and index (contract 0.3), after the
   * watch's label and annotation selectors. Test that a change to an object a primary only
   * *names* reaches it: `assert.deepEqual(fake.mappedKeys(deploymentKey), [fooKey])`.
   */
  mappedKeys(related) {
    const obj = this.get(related);
    if (obj === undefined) return [];
    const m = this.metadata.spec;
    const primary = m.reconciles;
    const stored = this.objects(primary);
    // Whether the primary kind is namespaced: as its stored objects are; unknown (none stored yet): as the related object is.
    const namespaced = stored.length > 0 ? stored[0].metadata.namespace != null && stored[0].metadata.namespace !== "" : related.namespace != null;
    const keys = [];
    for (const w of m.watches.filter((w) => sameKind(w.kind, related))) {
      if (!selection(w.selector, w.annotationSelector)(obj)) continue;
      const path = (index) => m.indexes.find((i) => sameKind(i.kind, primary) && i.name === index)?.path;
      const values = (index, p) => (path(index) === undefined ? [] : indexValues(path(index), p));
      const found = mappedKeys(w.mapping, primary, namespaced, obj, w.mapping.tag === "index" ? stored : [], values, lookup);
      for (const k of found) if (!keys.some((o) => keyString(o) === keyString(k))) keys.push(k);
    }
    return keys;
  }

  /**
   * Carry out the actions as the host would, against the fake: create adds the object unless it
   * exists, apply merges it in (a rough stand-in for server-side apply), delete removes it (or
   * marks it deleting while it has finalizers), status merge-patches `.status`, patch applies
   * a merge or JSON patch (nothing if a precondition or `test` fails), events are recorded.
   * Given a ReconcileError, executes the actions it carries (`withActions`), as the host does
   * with a failure's: none if they are unusable.
   */
  execute(outcome) {
    if (outcome instanceof ReconcileError) {
      const actions = outcome.actions;
      if (actions === undefined || actions.invalid !== undefined) return;
      outcome = actions;
    }
    for (const a of outcome.actions) {
      const why = this._failures.map((fails) => fails(a)).find((w) => w !== undefined);
      if (why !== undefined) {
        // As the host: nothing more of this outcome is sent, and the key's next request says why.
        if (this._current !== undefined) this._lastErrors.set(this._current, `${describe(a)}: ${why}`);
        return;
      }
      switch (a.type) {
        case "create": {
          // The host's rule for what an action targets: a create the host would refuse fails here too.
          checkTarget(a.object, "create");
          const obj = clone(a.object);
          if (!obj.metadata.name) obj.metadata.name = `${obj.metadata.generateName}${String(this.nextUid++).padStart(5, "0")}`;
          obj.metadata.creationTimestamp ??= this.nowRfc3339();
          if (this.get(objectKey(obj)) === undefined) this._insert(obj);
          break;
        }
        case "apply": {
          checkTarget(a.object, "apply");
          const key = objectKey(a.object);
          const current = this.get(key);
          const created = () => {
            const obj = clone(a.object);
            obj.metadata.creationTimestamp ??= this.nowRfc3339();
            return obj;
          };
          this._insert(current ? mergeInto(current, a.object) : created());
          break;
        }
        case "delete": {
          const obj = this.get(a.key);
          if (obj && hasFinalizers(obj)) {
            obj.metadata.deletionTimestamp ??= this.nowRfc3339();
            this._insert(obj);
          } else this.remove(a.key);
          break;
        }
        case "status": {
          const obj = this.get(a.key);
          if (obj) {
            obj.status = mergeInto(obj.status ?? {}, a.status);
            this._insert(obj);
          }
          break;
        }
        case "patch":
          this._patch(a);
          break;
        case "event":
          this._events.push({ regarding: a.regarding, eventType: a.eventType, reason: a.reason, message: a.message });
          break;
        default:
          throw new Error(`FakeCache: unknown action ${a.type}`);
      }
    }
  }

  _patch(p) {
    let current = this.get(p.key);
    if (!current) return;
    if (!preconditionsHold(p.preconditions, current)) return;
    const patched = FakeCache.patched(p.patchType, current, p.body);
    if (patched === undefined) return;
    if (p.status) current.status = patched.status;
    else {
      const status = current.status;
      current = patched;
      if (status === undefined) delete current.status;
      else current.status = status;
    }
    const rv = Number(current.metadata.resourceVersion);
    if (current.metadata.resourceVersion !== undefined && Number.isInteger(rv)) current.metadata.resourceVersion = String(rv + 1);
    if (current.metadata.deletionTimestamp != null && !hasFinalizers(current)) this.remove(p.key);
    else this._insert(current);
  }

  /**
   * `before` patched as the host and the API server would (`patchType` "json" or "merge"):
   * undefined if a `test` fails or a path is not in the object (a conflict: nothing happens);
   * throws, as the host refuses the outcome, for a patch it does not take (a merge patch that is
   * not an object, JSON-patch `move` or `copy`).
   */
  static patched(patchType, before, body) {
    try {
      return patchType === "json" ? jsonPatch(before, body) : mergePatch(before, body);
    } catch (e) {
      if (e.kind === "test_failed" || e.kind === "does_not_apply") return undefined;
      throw e;
    }
  }

  /**
   * Reconcile `key` and execute the outcome until a reconcile returns no actions; returns the
   * outcomes that had actions. Throws if the reconciler fails (after executing the actions its
   * error carries, as the host does) or has not converged after `maxRounds` reconciles. If the
   * last reconcile asked for a requeue, the clock moves to it (when the host would reconcile the
   * key again).
   */
  converge(key, maxRounds = 10, reconciler = this.reconciler) {
    const [done, requeueMs] = this._settle(key, maxRounds, reconciler);
    if (requeueMs !== undefined) this.advance(requeueMs);
    return done;
  }

  /**
   * Play the host's loop for `key` until the clock reaches `until` (RFC 3339): converge, move the
   * clock to the requeue the converged reconcile asked for, and again, as long as that requeue is
   * not after `until`; then the clock is set to `until`. Returns every outcome that had actions,
   * in order; throws as `converge` does, or after `maxReconciles` reconciles in all.
   */
  runUntil(key, until, maxReconciles = 100, reconciler = this.reconciler) {
    const end = parseMicros(until);
    if (end === undefined) throw new Error(`FakeCache: not an RFC 3339 timestamp: ${JSON.stringify(until)}`);
    const all = [];
    let left = maxReconciles;
    for (;;) {
      const [done, requeueMs] = this._settle(key, left, reconciler);
      left -= done.length + 1;
      all.push(...done);
      const next = requeueMs === undefined ? undefined : this._clock + requeueMs * 1000;
      if (next !== undefined && next <= end && left > 0) this._clock = next;
      else {
        this._clock = Math.max(end, this._clock);
        return all;
      }
    }
  }

  /** Reconcile and execute until no actions are left: `[outcomes that had actions, the last outcome's requeue (ms)]`. */
  _settle(key, maxRounds, reconciler) {
    const done = [];
    for (let i = 0; i < maxRounds; i++) {
      let out;
      try {
        out = this.reconcile(key, reconciler);
      } catch (e) {
        if (e instanceof ReconcileError) {
          this.execute(e);
          const error = toWitFailure(e).error;
          throw new Error(`reconcile of ${keyString(key)} failed: ${error.tag}: ${error.val}`);
        }
        throw e;
      }
      if (out.actions.length === 0) return [done, out.requeueAfterMs];
      this.execute(out);
      const failed = this.lastError(key);
      if (failed !== undefined) throw new Error(`an action of the reconcile of ${keyString(key)} failed: ${failed} (the host retries it with backoff)`);
      done.push(out);
    }
    throw new Error(`${keyString(key)} did not converge in ${maxRounds} reconciles; last outcome: ${JSON.stringify(done[done.length - 1]?.actions)}`);
  }

  /** `[level, message]` logged through the SDK while this fake was bound. */
  logs() {
    return this._logs.map((l) => [...l]);
  }

  /** Events recorded by `execute`. */
  events() {
    return this._events.map(clone);
  }
}

/** An action as the host names it in `lastError`: `<verb> <object>` (a generateName as `prefix*`). */
function describe(a) {
  const target = (obj) => {
    const m = obj?.metadata ?? {};
    return keyString({ apiVersion: obj?.apiVersion, kind: obj?.kind, namespace: m.namespace, name: m.name || `${m.generateName ?? ""}*` });
  };
  switch (a.type) {
    case "create":
    case "apply":
      return `${a.type} ${target(a.object)}`;
    case "delete":
      return `delete ${keyString(a.key)}`;
    case "status":
      return `update-status ${keyString(a.key)}`;
    case "patch":
      return `${a.status ? "update-status" : "patch"} ${keyString(a.key)}`;
    case "event":
      return `event ${keyString(a.regarding)}`;
    default:
      return a.type;
  }
}
