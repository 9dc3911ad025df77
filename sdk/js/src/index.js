// @wasmloop/sdk: write wasmloop reconcile plugins in JavaScript or TypeScript.
//
// The same surface as the Rust SDK (guest-sdk/): kinds, the Metadata builder, Outcome builders
// (create, apply, createOwned, delete, status, event, patch, requeueAfter), owner references and
// deletion checks, transient/permanent errors (carrying actions: withActions), logging, and cache
// reads (get, list, byIndex and their metadata-only forms); contract 0.3's index mappings
// (Metadata.namedBy, Mapping.index) and annotation selectors. Objects are plain JSON objects
// (the Kubernetes wire form).
//
// Nothing here imports the host: `wasmloop-js build` binds the contract's imports (cache, log)
// into the component, and `@wasmloop/sdk/testing` binds a FakeCache in unit tests under Node.

import { host } from "./host.js";
import { adopt, checkTarget } from "./rules.js";

export { time } from "./time.js";

// ---------------------------------------------------------------------------------------------
// Kinds and keys

/** An API type: `{ apiVersion, kind }`. */
export function kind(apiVersion, kind) {
  return Object.freeze({ apiVersion, kind });
}

/** Well-known kinds. */
export const kinds = Object.freeze({
  POD: kind("v1", "Pod"),
  CONFIG_MAP: kind("v1", "ConfigMap"),
  SECRET: kind("v1", "Secret"),
  SERVICE: kind("v1", "Service"),
  NAMESPACE: kind("v1", "Namespace"),
  NODE: kind("v1", "Node"),
  SERVICE_ACCOUNT: kind("v1", "ServiceAccount"),
  REPLICA_SET: kind("apps/v1", "ReplicaSet"),
  DEPLOYMENT: kind("apps/v1", "Deployment"),
  STATEFUL_SET: kind("apps/v1", "StatefulSet"),
  DAEMON_SET: kind("apps/v1", "DaemonSet"),
  JOB: kind("batch/v1", "Job"),
});

/** The key of an object of `kindRef`: namespace `undefined`/`null` for cluster-scoped kinds. */
export function keyOf(kindRef, namespace, name) {
  return { apiVersion: kindRef.apiVersion, kind: kindRef.kind, namespace: namespace ?? undefined, name };
}

/** `v1/Pod/ns/name` or `v1/Namespace/name`. */
export function keyString(key) {
  return [key.apiVersion, key.kind, key.namespace, key.name].filter((p) => p != null && p !== "").join("/");
}

/** Whether two kinds are the same type. */
export function sameKind(a, b) {
  return a.apiVersion === b.apiVersion && a.kind === b.kind;
}

// ---------------------------------------------------------------------------------------------
// Metadata

/** How events on a watched kind map to keys of the reconciled kind. */
export const Mapping = Object.freeze({
  /** The object's controller owner, if of the reconciled kind. */
  owner: Object.freeze({ tag: "owner" }),
  /** The reconciled object named by this label's value, in the object's namespace. */
  label: (label) => Object.freeze({ tag: "label", val: label }),
  /** The reconciled object with the object's name, in its namespace. */
  sameName: Object.freeze({ tag: "same-name" }),
  /** The reconciled object whose name is the object's namespace (Namespace ← ConfigMap). */
  namespace: Object.freeze({ tag: "namespace" }),
  /**
   * Every reconciled object whose index `index` (declared on the reconciled kind) holds `value`
   * of the related object, an `IndexValue` (contract 0.3): "who names me" as one declaration.
   */
  index: (index, value) => Object.freeze({ tag: "index", val: Object.freeze({ index, value }) }),
});

/** Which value of a related object an index mapping (`Mapping.index`) looks up (contract 0.3). */
export const IndexValue = Object.freeze({
  /** Its name; when both kinds are namespaced, only primaries in its namespace match. */
  name: Object.freeze({ tag: "name" }),
  /** `<namespace>/<name>` (`<name>` if cluster-scoped), matched in every namespace. */
  namespacedName: Object.freeze({ tag: "namespaced-name" }),
  /** The values of a dotted field path of it; when both kinds are namespaced, only primaries in its namespace match. */
  field: (path) => Object.freeze({ tag: "field", val: path }),
});

/** A watch: a kind, its mapping and optional label and annotation selectors (`.spec` holds them). */
export class Watch {
  constructor(kindRef, mapping) {
    this.spec = { kind: kindRef, mapping, selector: undefined, annotationSelector: undefined };
  }

  /** Watch (and cache) only objects matching this label selector. */
  selector(selector) {
    this.spec.selector = selector;
    return this;
  }

  /**
   * Cache (and map) only objects whose annotations match this selector, in label-selector
   * syntax (`example.com/managed=true`, `!example.com/skip`; contract 0.3). The host filters
   * objects as they arrive: the API server cannot select annotations.
   */
  annotationSelector(selector) {
    this.spec.annotationSelector = selector;
    return this;
  }
}

/**
 * What a plugin declares at load (`metadata()`), built like the Rust SDK's: `new Metadata(name,
 * version).reconciles(kind).owns(child).index(...)`. `.spec` holds the declaration.
 */
export class Metadata {
  constructor(name, version) {
    this.spec = { name, version, reconciles: undefined, selector: undefined, annotationSelector: undefined, watches: [], indexes: [], fields: [] };
  }

  /** The plugin's name. */
  get name() {
    return this.spec.name;
  }

  /** The plugin's version. */
  get version() {
    return this.spec.version;
  }

  /** The kind whose keys this plugin reconciles. */
  reconciles(kindRef) {
    this.spec.reconciles = kindRef;
    return this;
  }

  /** Only objects of the reconciled kind matching this label selector. */
  selector(selector) {
    this.spec.selector = selector;
    return this;
  }

  /** Only objects of the reconciled kind whose annotations match this selector (label-selector syntax; contract 0.3). */
  annotationSelector(selector) {
    this.spec.annotationSelector = selector;
    return this;
  }

  /**
   * Watch `kindRef`, whose objects the reconciled objects *name* (not own): declare index
   * `index` on the reconciled kind over `path` (where a reconciled object names the related
   * one, e.g. `spec.deploymentName`), and enqueue, for an event on a related object, every
   * reconciled object whose index holds `value` (an `IndexValue`) of it (contract 0.3). Call
   * after `reconciles`.
   */
  namedBy(kindRef, index, path, value) {
    const primary = this.spec.reconciles;
    if (!primary) throw new Error("Metadata.namedBy: call reconciles(kind) first (the index is on the reconciled kind)");
    return this.index(primary, index, path).watches(kindRef, Mapping.index(index, value));
  }

  /** Watch children of `kindRef` through their controller owner reference. */
  owns(kindRef) {
    return this.watch(new Watch(kindRef, Mapping.owner));
  }

  /** Watch `kindRef` with `mapping`. */
  watches(kindRef, mapping) {
    return this.watch(new Watch(kindRef, mapping));
  }

  /** Add a watch (a `Watch`, or `{kind, mapping, selector, annotationSelector}`). */
  watch(watch) {
    const w = watch instanceof Watch ? watch.spec : watch;
    this.spec.watches.push({ kind: w.kind, mapping: w.mapping, selector: w.selector ?? undefined, annotationSelector: w.annotationSelector ?? undefined });
    return this;
  }

  /** Declare index `name` on `kindRef` over `path` (`labels.<key>` or a dotted field path). */
  index(kindRef, name, path) {
    this.spec.indexes.push({ kind: kindRef, name, path });
    return this;
  }

  /**
   * Declare index `name` on `kindRef` over the name of each object's controller owner when it is
   * of kind `owner` (controller-runtime's `.metadata.controller` index): the path
   * `metadata.ownerReferences[controller=true][kind=<Kind>][apiVersion=<apiVersion>].name`.
   */
  controllerIndex(kindRef, name, owner) {
    return this.index(kindRef, name, `metadata.ownerReferences[controller=true][kind=${owner.kind}][apiVersion=${owner.apiVersion}].name`);
  }

  /** Declare a field the metadata reads return for objects of `kindRef`. */
  field(kindRef, path) {
    this.spec.fields.push({ kind: kindRef, path });
    return this;
  }

  /** The declared field paths of `kindRef`, in declaration order. */
  fieldsOf(kindRef) {
    return this.spec.fields.filter((f) => sameKind(f.kind, kindRef)).map((f) => f.path);
  }

  /** Every kind the plugin may read: the reconciled one, the watched and the indexed ones. */
  readableKinds() {
    const s = this.spec;
    const all = [s.reconciles, ...s.watches.map((w) => w.kind), ...s.indexes.map((i) => i.kind)].filter(Boolean);
    return all.filter((k, i) => all.findIndex((o) => sameKind(o, k)) === i);
  }
}

// ---------------------------------------------------------------------------------------------
// Errors

/**
 * A reconcile error: `transient` (retried with backoff) or `permanent` (until something
 * changes). It can carry actions the host executes anyway (`withActions`, contract 0.3).
 */
export class ReconcileError extends Error {
  constructor(kind, message) {
    super(message);
    this.name = "ReconcileError";
    /** `"transient"` or `"permanent"`. */
    this.kind = kind;
    /** The actions to execute anyway (an Outcome), if any. */
    this.actions = undefined;
  }

  get isTransient() {
    return this.kind === "transient";
  }

  /** The same error with `context: ` before its message (and the same actions). */
  context(context) {
    const e = new ReconcileError(this.kind, `${context}: ${this.message}`);
    e.actions = this.actions;
    return e;
  }

  /**
   * This error, with actions for the host to execute anyway (contract 0.3): an Outcome (or a
   * list of its actions) holding Events, status or condition patches saying why. They are
   * checked and admitted like an outcome's; the error still decides the retry (backoff,
   * `lastError`, the error metrics), and the outcome's `requeueAfter` is ignored.
   * `throw transient("quota exceeded").withActions(new Outcome().event(foo, "warning", "QuotaExceeded", "retrying"))`.
   */
  withActions(outcome) {
    if (Array.isArray(outcome)) {
      const o = new Outcome();
      o.actions.push(...outcome);
      outcome = o;
    }
    if (!(outcome instanceof Outcome)) throw new TypeError("withActions takes an Outcome or a list of actions");
    this.actions = outcome;
    return this;
  }
}

/** An error the host retries with exponential backoff. */
export function transient(message) {
  return new ReconcileError("transient", String(message));
}

/** An error the host does not retry until the object (or something mapped to it) changes. */
export function permanent(message) {
  return new ReconcileError("permanent", String(message));
}

/** A failed cache read: `not-granted`, `unknown-index` or `invalid` (a transient ReconcileError). */
export class CacheError extends ReconcileError {
  constructor(tag, message) {
    super("transient", `${tag}: ${message}`);
    this.name = "CacheError";
    this.tag = tag;
    this.detail = message;
  }
}

/** Run `f`; an error it throws gets `context: ` before its message. */
export function withContext(context, f) {
  try {
    return f();
  } catch (e) {
    if (e instanceof ReconcileError) throw e.context(context);
    throw transient(`${context}: ${e?.message ?? e}`);
  }
}

// ---------------------------------------------------------------------------------------------
// Objects

/** `metadata.name`. */
export function name(obj) {
  return obj?.metadata?.name;
}

/** `metadata.namespace`. */
export function namespace(obj) {
  return obj?.metadata?.namespace ?? undefined;
}

/** `metadata.uid`. */
export function uid(obj) {
  return obj?.metadata?.uid;
}

/** A label's value. */
export function label(obj, key) {
  return obj?.metadata?.labels?.[key];
}

/** An annotation's value. */
export function annotation(obj, key) {
  return obj?.metadata?.annotations?.[key];
}

/** Whether deletion of the object has started (`metadata.deletionTimestamp` is set). */
export function isDeleting(obj) {
  return obj?.metadata?.deletionTimestamp != null;
}

/** The controller owner reference (`controller: true`), if any. */
export function controllerOf(obj) {
  return (obj?.metadata?.ownerReferences ?? []).find((r) => r.controller === true);
}

/** The UID in the controller owner reference. */
export function controllerUid(obj) {
  return controllerOf(obj)?.uid;
}

/** Whether `obj` is controlled by the object with `ownerUid`. */
export function isControlledBy(obj, ownerUid) {
  return controllerUid(obj) === ownerUid;
}

/** The owner reference that makes `owner` the controller of its dependents. */
export function controllerRef(owner) {
  const k = objectKey(owner);
  const u = uid(owner);
  if (!u) throw new Error(`owner ${keyString(k)} has no metadata.uid`);
  return { apiVersion: k.apiVersion, kind: k.kind, name: k.name, uid: u, controller: true, blockOwnerDeletion: true };
}

/** Whether `obj` carries `finalizer`. */
export function hasFinalizer(obj, finalizer) {
  return (obj?.metadata?.finalizers ?? []).includes(finalizer);
}

/** The key of an object (`apiVersion`, `kind`, `metadata.namespace`, `metadata.name`); throws if incomplete. */
export function objectKey(obj) {
  const apiVersion = obj?.apiVersion;
  const k = obj?.kind;
  if (!apiVersion) throw new Error("object has no apiVersion");
  if (!k) throw new Error("object has no kind");
  const n = name(obj);
  if (!n) throw new Error(`${k} has no metadata.name`);
  return { apiVersion, kind: k, namespace: namespace(obj) || undefined, name: n };
}

// ---------------------------------------------------------------------------------------------
// Outcome

/** Event types. */
export const EventType = Object.freeze({ normal: "normal", warning: "warning" });

function clone(v) {
  return v === undefined ? undefined : JSON.parse(JSON.stringify(v));
}

/** What a reconcile returns: the actions that move the world to the desired state. */
export class Outcome {
  constructor() {
    /** `{type: "create"|"apply"|"delete"|"status"|"event"|"patch", ...}`, in order. */
    this.actions = [];
    /** Reconcile again after so many milliseconds. */
    this.requeueAfterMs = undefined;
    /** The first problem of a builder given an unusable object (the reconcile's permanent error). */
    this.invalid = undefined;
    /** How many actions at the end stay last (`statusAfterWrites`): builders add theirs before them. */
    this.last = 0;
  }

  /** Add an action before the ones that stay last. */
  _push(action) {
    this.actions.splice(this.actions.length - this.last, 0, action);
    return this;
  }

  _problem(what, e) {
    this.invalid ??= `${what}: ${e?.message ?? e}`;
    return this;
  }

  _with(what, f) {
    try {
      this._push(f());
    } catch (e) {
      this._problem(what, e);
    }
    return this;
  }

  /** Create `obj` (needs apiVersion, kind and metadata.name or metadata.generateName). */
  create(obj) {
    return this._with("create", () => {
      const o = clone(obj);
      checkTarget(o, "create");
      return { type: "create", object: o };
    });
  }

  /** Create `child` controlled by `owner` (controller owner reference, the owner's namespace if it has none). */
  createOwned(owner, child) {
    let ref;
    try {
      ref = controllerRef(owner);
    } catch (e) {
      return this._problem("createOwned", e);
    }
    let c;
    try {
      c = adopt(child ?? {}, namespace(owner) || undefined, ref);
    } catch (e) {
      return this._problem("createOwned", e);
    }
    return this.create(c);
  }

  /** Server-side apply `obj` (needs apiVersion, kind, metadata.name); field manager = the plugin. */
  apply(obj) {
    return this._with("apply", () => {
      const o = clone(obj);
      checkTarget(o, "apply");
      return { type: "apply", object: o };
    });
  }

  /** Delete the object (its key is taken from `obj`; for preconditions, see `patch`'s). */
  delete(obj) {
    return this._with("delete", () => ({ type: "delete", key: objectKey(obj), preconditions: {} }));
  }

  /** Delete the object with this key. */
  deleteKey(key) {
    this._push({ type: "delete", key: { ...key }, preconditions: {} });
    return this;
  }

  /** Merge-patch `.status` of `obj` (fields given are replaced, others kept). */
  status(obj, status) {
    let key;
    try {
      key = objectKey(obj);
    } catch (e) {
      return this._problem("status", e);
    }
    return this.statusKey(key, status);
  }

  /** Merge-patch `.status` of the object with this key. */
  statusKey(key, status) {
    if (status === null || typeof status !== "object" || Array.isArray(status)) {
      return this._problem(`status of ${keyString(key)}`, `expected a JSON object, got ${JSON.stringify(status)}`);
    }
    this._push({ type: "status", key: { ...key }, status: clone(status) });
    return this;
  }

  /**
   * Merge-patch `.status` of `obj` only if every other action of this outcome succeeds: the write
   * stays after all of them, whatever builders come later (several stay last in the order given).
   * The host runs an outcome's actions in order and stops at the first that fails or conflicts,
   * so a status that reports a create is never written when the create failed.
   */
  statusAfterWrites(obj, status) {
    const before = this.actions.length;
    this.status(obj, status);
    if (this.actions.length > before) {
      const [action] = this.actions.splice(this.actions.length - this.last - 1, 1);
      this.actions.push(action);
      this.last += 1;
    }
    return this;
  }

  /** Record an Event about `obj`. */
  event(obj, eventType, reason, message) {
    let key;
    try {
      key = objectKey(obj);
    } catch (e) {
      return this._problem("event", e);
    }
    return this.eventKey(key, eventType, reason, message);
  }

  /** Record an Event about the object with this key. */
  eventKey(key, eventType, reason, message) {
    if (!reason) return this._problem("event", "empty reason");
    this._push({ type: "event", regarding: { ...key }, eventType, reason, message: String(message) });
    return this;
  }

  /**
   * Patch the object `obj` (anyone's): `body` is a JSON merge patch (`patchType: "merge"`, the
   * default) or a list of JSON patch operations (`"json"`); `status: true` patches the status
   * subresource; preconditions default to `obj` being unchanged since it was read (uid and
   * resourceVersion).
   */
  patch(obj, body, { patchType = "merge", status = false, preconditions } = {}) {
    return this._with("patch", () => ({
      type: "patch",
      key: objectKey(obj),
      status,
      patchType,
      body: clone(body),
      preconditions: preconditions ?? { uid: uid(obj) || undefined, resourceVersion: obj?.metadata?.resourceVersion || undefined },
    }));
  }

  /** Add `finalizer` to `obj` unless it has it. */
  addFinalizer(obj, finalizer) {
    if (hasFinalizer(obj, finalizer)) return this;
    const ops = obj?.metadata?.finalizers
      ? [{ op: "add", path: "/metadata/finalizers/-", value: finalizer }]
      : [{ op: "add", path: "/metadata/finalizers", value: [finalizer] }];
    return this.patch(obj, ops, { patchType: "json" });
  }

  /** Remove `finalizer` from `obj` if it has it. */
  removeFinalizer(obj, finalizer) {
    const i = (obj?.metadata?.finalizers ?? []).indexOf(finalizer);
    if (i < 0) return this;
    const path = `/metadata/finalizers/${i}`;
    const ops = [{ op: "test", path, value: finalizer }, { op: "remove", path }];
    return this.patch(obj, ops, { patchType: "json", preconditions: { uid: uid(obj) || undefined } });
  }

  /** Reconcile this key again after `ms` milliseconds. */
  requeueAfter(ms) {
    this.requeueAfterMs = Math.max(0, Math.round(ms));
    return this;
  }

  /** No actions (a requeue alone still counts as empty, as in the Rust SDK). */
  isEmpty() {
    return this.actions.length === 0;
  }

  /** Objects to create. */
  created() {
    return this.actions.filter((a) => a.type === "create").map((a) => a.object);
  }

  /** Objects to server-side apply. */
  applied() {
    return this.actions.filter((a) => a.type === "apply").map((a) => a.object);
  }

  /** Keys to delete. */
  deleted() {
    return this.actions.filter((a) => a.type === "delete").map((a) => a.key);
  }

  /** `[key, status]` pairs of status updates. */
  statusUpdates() {
    return this.actions.filter((a) => a.type === "status").map((a) => [a.key, a.status]);
  }

  /** Events to record. */
  events() {
    return this.actions.filter((a) => a.type === "event");
  }

  /** Patches to send. */
  patches() {
    return this.actions.filter((a) => a.type === "patch");
  }

  /** This outcome, or throw the permanent error of the first invalid action. */
  intoResult() {
    if (this.invalid !== undefined) throw permanent(`invalid action: ${this.invalid}`);
    return this;
  }
}

// ---------------------------------------------------------------------------------------------
// Cache reads

/** The built-in index of every kind: by namespace. */
export const NAMESPACE_INDEX = "namespace";
/** The built-in index of every kind: by controller owner UID. */
export const OWNER_INDEX = "owner";

function call(f) {
  try {
    return f();
  } catch (e) {
    throw toCacheError(e);
  }
}

function toCacheError(e) {
  if (e instanceof ReconcileError) return e;
  // QuickJS throws the WIT error variant itself; jco-style bindings wrap it in `payload`.
  const v = e?.payload ?? e;
  if (v && typeof v === "object" && typeof v.tag === "string") return new CacheError(v.tag, String(v.val ?? ""));
  return transient(`cache read failed: ${e?.message ?? e}`);
}

function none(v) {
  return v ?? undefined;
}

/** A metadata read's answer: `metadata` as on the object, plus the declared `fields`. */
export class Meta {
  constructor(kindRef, m) {
    this.kind = kindRef;
    this.metadata = {
      namespace: none(m.namespace),
      name: m.name,
      uid: m.uid,
      resourceVersion: m.resourceVersion,
      generation: m.generation == null ? undefined : Number(m.generation),
      creationTimestamp: none(m.creationTimestamp),
      deletionTimestamp: none(m.deletionTimestamp),
      labels: Object.fromEntries(m.labels ?? []),
      annotations: Object.fromEntries(m.annotations ?? []),
      ownerReferences: (m.ownerReferences ?? []).map((r) => ({
        apiVersion: r.apiVersion,
        kind: r.kind,
        name: r.name,
        uid: r.uid,
        controller: r.controller,
        blockOwnerDeletion: r.blockOwnerDeletion,
      })),
      finalizers: [...(m.finalizers ?? [])],
    };
    /** Each declared field's JSON text, or undefined where the object lacks it. */
    this.rawFields = (m.fields ?? []).map(none);
  }

  /** Declared field `i` (declaration order among this kind's fields), parsed; undefined if absent. */
  field(i) {
    const raw = this.rawFields[i];
    return raw === undefined ? undefined : JSON.parse(raw);
  }

  /** The object's key. */
  key() {
    return keyOf(this.kind, this.metadata.namespace, this.metadata.name);
  }

  /** A stand-in object (`apiVersion`, `kind`, `metadata`) for the helpers and action builders. */
  object() {
    return { apiVersion: this.kind.apiVersion, kind: this.kind.kind, metadata: this.metadata };
  }
}

function kindArg(k) {
  return { apiVersion: k.apiVersion, kind: k.kind };
}

/** Read-only access to the host's informer cache (reads never reach the API server). */
export const cache = Object.freeze({
  /** The object, or undefined if it is not in the cache. */
  get(kindRef, ns, objName) {
    const json = call(() => host().cache.get(kindArg(kindRef), ns ?? null, objName));
    return json == null ? undefined : JSON.parse(json);
  },
  /** The object with this key, or undefined. */
  getKey(key) {
    return cache.get(key, key.namespace, key.name);
  },
  /** Objects of a kind, optionally in one namespace and matching a label selector. */
  list(kindRef, { namespace: ns, selector } = {}) {
    return call(() => host().cache.list(kindArg(kindRef), ns ?? null, selector ?? null)).map((j) => JSON.parse(j));
  },
  /** Objects whose index `index` has `value` (`namespace`, `owner` or a declared index). */
  byIndex(kindRef, index, value) {
    return call(() => host().cache.byIndex(kindArg(kindRef), index, value)).map((j) => JSON.parse(j));
  },
  /** Objects of `kindRef` controlled by the owner with `ownerUid`. */
  ownedBy(kindRef, ownerUid) {
    return cache.byIndex(kindRef, OWNER_INDEX, ownerUid);
  },
  /** Like `get`, metadata and declared fields only. */
  getMeta(kindRef, ns, objName) {
    const m = call(() => host().cache.getMeta(kindArg(kindRef), ns ?? null, objName));
    return m == null ? undefined : new Meta(kindRef, m);
  },
  /** Like `list`, metadata and declared fields only. */
  listMeta(kindRef, { namespace: ns, selector } = {}) {
    return call(() => host().cache.listMeta(kindArg(kindRef), ns ?? null, selector ?? null)).map((m) => new Meta(kindRef, m));
  },
  /** Like `byIndex`, metadata and declared fields only. */
  byIndexMeta(kindRef, index, value) {
    return call(() => host().cache.byIndexMeta(kindArg(kindRef), index, value)).map((m) => new Meta(kindRef, m));
  },
  /** Like `ownedBy`, metadata and declared fields only. */
  ownedByMeta(kindRef, ownerUid) {
    return cache.byIndexMeta(kindRef, OWNER_INDEX, ownerUid);
  },
});

// ---------------------------------------------------------------------------------------------
// Logging

function logAt(level) {
  return (...parts) => host().log.log(level, parts.map((p) => (typeof p === "string" ? p : JSON.stringify(p))).join(" "));
}

/** Logging into the host's log, tagged with the plugin and the key being reconciled. */
export const log = Object.freeze({
  trace: logAt("trace"),
  debug: logAt("debug"),
  info: logAt("info"),
  warn: logAt("warn"),
  error: logAt("error"),
});

// ---------------------------------------------------------------------------------------------
// Reconcilers

/**
 * A reconciler: `{ metadata(): Metadata, reconcile(request): Outcome }`. Returns it unchanged
 * (it gives TypeScript its type and checks its shape early).
 */
export function defineReconciler(reconciler) {
  if (typeof reconciler?.metadata !== "function" || typeof reconciler?.reconcile !== "function") {
    throw new TypeError("a reconciler has metadata() and reconcile(request)");
  }
  return reconciler;
}

/** A request for `key` (reason `event`), as the host sends one; for tests. */
export function request(key, { reason = "event", attempt, lastError } = {}) {
  return { key: { ...key, namespace: key.namespace ?? undefined }, reason, attempt, lastError };
}
