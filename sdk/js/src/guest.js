// The component side: turns a reconciler into the contract's `plugin` export. The entry that
// `wasmloop-js build` generates imports the contract's `cache` and `log`, binds them, and exports
// `plugin = exportPlugin(reconciler, options)`. Also used by FakeCache, so unit tests run the same
// conversions as the component.

import { bindHost } from "./host.js";
import { Metadata, Outcome, ReconcileError, sameKind } from "./index.js";

const REASONS = new Set(["event", "resync", "requeue", "retry"]);

function opt(v) {
  return v === undefined || v === null ? null : v;
}

function kindRef(k) {
  return { apiVersion: k.apiVersion, kind: k.kind };
}

function key(k) {
  return { apiVersion: k.apiVersion, kind: k.kind, namespace: opt(k.namespace), name: k.name };
}

function preconditions(p = {}) {
  return { uid: opt(p.uid), resourceVersion: opt(p.resourceVersion) };
}

function mapping(m) {
  switch (m.tag) {
    case "label":
      return { tag: "label", val: m.val };
    case "index": {
      const v = m.val.value;
      const value = v.tag === "field" ? { tag: "field", val: v.val } : { tag: v.tag };
      return { tag: "index", val: { index: m.val.index, value } };
    }
    default:
      return { tag: m.tag };
  }
}

/** The contract's `plugin-metadata` record of a `Metadata`. */
export function toWitMetadata(metadata) {
  const m = metadata instanceof Metadata ? metadata.spec : metadata;
  if (!m?.reconciles) throw new Error(`plugin ${m?.name}: metadata() must say which kind it reconciles (Metadata.reconciles)`);
  return {
    name: m.name,
    version: m.version,
    reconciles: kindRef(m.reconciles),
    selector: opt(m.selector),
    annotationSelector: opt(m.annotationSelector),
    watches: m.watches.map((w) => ({ kind: kindRef(w.kind), mapping: mapping(w.mapping), selector: opt(w.selector), annotationSelector: opt(w.annotationSelector) })),
    indexes: m.indexes.map((i) => ({ kind: kindRef(i.kind), name: i.name, path: i.path })),
    fields: m.fields.map((f) => ({ kind: kindRef(f.kind), path: f.path })),
  };
}

/** The SDK's request of the contract's `request` record. */
export function fromWitRequest(r) {
  const reason = typeof r.reason === "string" ? r.reason : r.reason.tag;
  if (!REASONS.has(reason)) throw new Error(`unknown reason ${reason}`);
  return {
    key: { apiVersion: r.key.apiVersion, kind: r.key.kind, namespace: r.key.namespace ?? undefined, name: r.key.name },
    reason,
    attempt: reason === "retry" ? Number(r.reason.val) : undefined,
    lastError: r.lastError ?? undefined,
  };
}

/** One SDK action as the contract's `action` variant (objects and patches as JSON text). */
export function toWitAction(a) {
  switch (a.type) {
    case "create":
      return { tag: "create", val: JSON.stringify(a.object) };
    case "apply":
      return { tag: "apply", val: JSON.stringify(a.object) };
    case "delete":
      return { tag: "delete", val: { key: key(a.key), preconditions: preconditions(a.preconditions) } };
    case "status":
      return { tag: "update-status", val: { key: key(a.key), status: JSON.stringify(a.status ?? {}) } };
    case "event":
      return { tag: "event", val: { regarding: key(a.regarding), eventType: a.eventType, reason: a.reason, message: a.message } };
    case "patch":
      return {
        tag: "patch",
        val: { key: key(a.key), status: !!a.status, patchType: a.patchType, body: JSON.stringify(a.body), preconditions: preconditions(a.preconditions) },
      };
    default:
      throw new Error(`unknown action type ${a.type}`);
  }
}

/** The contract's `outcome` record of an `Outcome` (`u64` converts requeue-after for engines that want BigInt). */
export function toWitOutcome(outcome, u64 = (n) => n) {
  const o = outcome instanceof Outcome ? outcome.intoResult() : outcome;
  if (!(o instanceof Outcome)) throw new Error("reconcile must return an Outcome");
  return { actions: o.actions.map(toWitAction), requeueAfterMs: o.requeueAfterMs === undefined ? null : u64(o.requeueAfterMs) };
}

/** What a thrown value becomes: the contract's `reconcile-error` variant. */
export function toWitError(e) {
  if (e instanceof ReconcileError) return { tag: e.kind, val: e.message };
  const message = e instanceof Error ? `${e.name}: ${e.message}` : String(e);
  return { tag: "transient", val: `uncaught exception: ${message}` };
}

/**
 * What a thrown value becomes: the contract's `failure` record, the error and the actions to
 * execute anyway (a ReconcileError's `withActions`). Unusable actions (a builder refused an
 * object) are not sent, and the message says so.
 */
export function toWitFailure(e) {
  const outcome = e instanceof ReconcileError ? e.actions : undefined;
  if (outcome === undefined) return { error: toWitError(e), actions: [] };
  if (outcome.invalid !== undefined) {
    return { error: toWitError(e.context(`its actions were not sent (invalid action: ${outcome.invalid})`)), actions: [] };
  }
  try {
    return { error: toWitError(e), actions: outcome.actions.map(toWitAction) };
  } catch (bad) {
    return { error: toWitError(e.context(`its actions were not sent (${bad?.message ?? bad})`)), actions: [] };
  }
}

/**
 * The contract's `plugin` export for `reconciler`. `options.bindings` is the host (`{cache, log}`)
 * to bind; `options.u64` converts numbers for engines whose u64 is a BigInt; `options.fail`
 * throws a `failure` the way the engine expects.
 */
export function exportPlugin(reconciler, { bindings, u64 = (n) => n, fail = (err) => { throw err; } } = {}) {
  if (bindings) bindHost(bindings);
  let declared;
  return {
    metadata() {
      declared = toWitMetadata(reconciler.metadata());
      return declared;
    },
    reconcile(witRequest) {
      let result;
      try {
        const req = fromWitRequest(witRequest);
        if (declared && !sameKind(req.key, declared.reconciles)) throw new Error("a key of another kind");
        result = toWitOutcome(reconciler.reconcile(req), u64);
      } catch (e) {
        return fail(toWitFailure(e));
      }
      return result;
    },
  };
}
