// Types of @wasmloop/sdk/testing.

import type { Action, KindRef, KubeObject, Metadata, ObjectKey, Outcome, ReconcileError, Reconciler, Request } from "./index.js";

export class FakeCache {
  constructor(metadataOrReconciler: Metadata | Reconciler);
  static forReconciler(reconciler: Reconciler): FakeCache;
  /** `before` patched as the host would ("json" or "merge"); undefined on a conflict; throws for a patch the host refuses. */
  static patched(patchType: "json" | "merge", before: unknown, body: unknown): unknown;
  readonly metadata: Metadata;
  with(obj: KubeObject | KubeObject[]): this;
  withJson(text: string): this;
  withYaml(text: string): this;
  withDir(dir: string): this;
  add(obj: KubeObject | KubeObject[]): this;
  addYaml(text: string): this;
  remove(key: ObjectKey): KubeObject | undefined;
  get(key: ObjectKey): KubeObject | undefined;
  objects(kind: KindRef): KubeObject[];
  enter<T>(f: () => T): T;
  reconcile(key: ObjectKey, reconciler?: Reconciler): Outcome;
  reconcileRequest(request: Request, reconciler?: Reconciler): Outcome;
  /** Carry out an outcome's actions, or those a failure carries (contract 0.3). */
  execute(outcome: Outcome | ReconcileError): void;
  /** The keys of the reconciled kind the host would queue for an event on `related` (contract 0.3: index mappings too). */
  mappedKeys(related: ObjectKey): ObjectKey[];
  /** Converge; if the last reconcile asked for a requeue, the clock moves to it. */
  converge(key: ObjectKey, maxRounds?: number, reconciler?: Reconciler): Outcome[];
  /** Play the host's loop (converge, move the clock to the requeue) until the clock reaches `until` (RFC 3339). */
  runUntil(key: ObjectKey, until: string, maxReconciles?: number, reconciler?: Reconciler): Outcome[];
  /** Set the clock the SDK's `time` reads (RFC 3339, with or without a fraction). */
  withTime(rfc3339: string): this;
  setTime(rfc3339: string): this;
  /** Move the clock forward by `ms` milliseconds. */
  advance(ms: number): this;
  nowMicros(): number;
  nowRfc3339(): string;
  /** Make the actions `fails` gives a reason for fail as the API server would: `execute` stops there, the key's next request carries `lastError`. */
  failWhen(fails: (action: Action) => string | undefined): this;
  /** Make every create of a `kind` object fail with `why`. */
  failCreates(kind: KindRef, why: string): this;
  /** Let every write succeed again. */
  clearFailures(): this;
  /** Why `key`'s last reconcile failed (its error, or its first failing action), while it keeps failing. */
  lastError(key: ObjectKey): string | undefined;
  logs(): [string, string][];
  events(): Omit<Extract<Action, { type: "event" }>, "type">[];
}
