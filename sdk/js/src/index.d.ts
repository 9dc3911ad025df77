// Types of @wasmloop/sdk for TypeScript plugins (the implementation is index.js).

import type * as contract from "./contract.js";

export type { contract };

/** A Kubernetes object as JSON (the wire form). */
export type KubeObject = {
  apiVersion?: string;
  kind?: string;
  metadata?: {
    name?: string;
    generateName?: string;
    namespace?: string;
    uid?: string;
    resourceVersion?: string;
    generation?: number;
    creationTimestamp?: string;
    deletionTimestamp?: string | null;
    labels?: Record<string, string>;
    annotations?: Record<string, string>;
    ownerReferences?: OwnerReference[];
    finalizers?: string[];
    [k: string]: unknown;
  };
  [k: string]: unknown;
};

/** An owner reference as in `metadata.ownerReferences`. */
export interface OwnerReference {
  apiVersion: string;
  kind: string;
  name: string;
  uid: string;
  controller?: boolean;
  blockOwnerDeletion?: boolean;
}

/** An API type. */
export interface KindRef {
  readonly apiVersion: string;
  readonly kind: string;
}

/** One object's key: namespace undefined for cluster-scoped kinds. */
export interface ObjectKey extends KindRef {
  readonly namespace?: string;
  readonly name: string;
}

export function kind(apiVersion: string, kind: string): KindRef;
export const kinds: {
  readonly POD: KindRef;
  readonly CONFIG_MAP: KindRef;
  readonly SECRET: KindRef;
  readonly SERVICE: KindRef;
  readonly NAMESPACE: KindRef;
  readonly NODE: KindRef;
  readonly SERVICE_ACCOUNT: KindRef;
  readonly REPLICA_SET: KindRef;
  readonly DEPLOYMENT: KindRef;
  readonly STATEFUL_SET: KindRef;
  readonly DAEMON_SET: KindRef;
  readonly JOB: KindRef;
};
export function keyOf(kind: KindRef, namespace: string | null | undefined, name: string): ObjectKey;
export function keyString(key: ObjectKey): string;
export function sameKind(a: KindRef, b: KindRef): boolean;

/** Which value of a related object an index mapping looks up (contract 0.3). */
export type IndexValueValue = { readonly tag: "name" } | { readonly tag: "namespaced-name" } | { readonly tag: "field"; readonly val: string };
export const IndexValue: {
  /** Its name; when both kinds are namespaced, only primaries in its namespace match. */
  readonly name: IndexValueValue;
  /** `<namespace>/<name>` (`<name>` if cluster-scoped), matched in every namespace. */
  readonly namespacedName: IndexValueValue;
  /** The values of a dotted field path of it; when both kinds are namespaced, only primaries in its namespace match. */
  field(path: string): IndexValueValue;
};

export type MappingValue =
  | { readonly tag: "owner" }
  | { readonly tag: "label"; readonly val: string }
  | { readonly tag: "same-name" }
  | { readonly tag: "namespace" }
  | { readonly tag: "index"; readonly val: { readonly index: string; readonly value: IndexValueValue } };
export const Mapping: {
  readonly owner: MappingValue;
  label(label: string): MappingValue;
  readonly sameName: MappingValue;
  readonly namespace: MappingValue;
  /** Every reconciled object whose index `index` (on the reconciled kind) holds `value` of the related object (contract 0.3). */
  index(index: string, value: IndexValueValue): MappingValue;
};

export interface WatchSpec {
  kind: KindRef;
  mapping: MappingValue;
  selector?: string;
  /** Annotation selector (label-selector syntax; contract 0.3). */
  annotationSelector?: string;
}

export class Watch {
  constructor(kind: KindRef, mapping: MappingValue);
  readonly spec: WatchSpec;
  selector(selector: string): this;
  /** Cache (and map) only objects whose annotations match this selector (contract 0.3). */
  annotationSelector(selector: string): this;
}

export interface MetadataSpec {
  name: string;
  version: string;
  reconciles?: KindRef;
  selector?: string;
  annotationSelector?: string;
  watches: WatchSpec[];
  indexes: { kind: KindRef; name: string; path: string }[];
  fields: { kind: KindRef; path: string }[];
}

export class Metadata {
  constructor(name: string, version: string);
  readonly spec: MetadataSpec;
  readonly name: string;
  readonly version: string;
  reconciles(kind: KindRef): this;
  selector(selector: string): this;
  /** Only objects of the reconciled kind whose annotations match this selector (contract 0.3). */
  annotationSelector(selector: string): this;
  /** Watch `kind`, named by the reconciled objects: index `index` on the reconciled kind over `path`, and an index mapping looking up `value` (contract 0.3). */
  namedBy(kind: KindRef, index: string, path: string, value: IndexValueValue): this;
  owns(kind: KindRef): this;
  watches(kind: KindRef, mapping: MappingValue): this;
  watch(watch: Watch | WatchSpec): this;
  /** An index over `path`; segments may filter: `metadata.ownerReferences[kind=CronJob].name`. */
  index(kind: KindRef, name: string, path: string): this;
  /** An index over the name of the controller owner, when it is of kind `owner`. */
  controllerIndex(kind: KindRef, name: string, owner: KindRef): this;
  field(kind: KindRef, path: string): this;
  fieldsOf(kind: KindRef): string[];
  readableKinds(): KindRef[];
}

export class ReconcileError extends Error {
  constructor(kind: "transient" | "permanent", message: string);
  readonly kind: "transient" | "permanent";
  readonly isTransient: boolean;
  /** The actions the host executes anyway (contract 0.3), if any. */
  actions: Outcome | undefined;
  context(context: string): ReconcileError;
  /** This error, with actions for the host to execute anyway (contract 0.3): Events, status or condition patches. */
  withActions(outcome: Outcome | Action[]): this;
}
export class CacheError extends ReconcileError {
  readonly tag: "not-granted" | "unknown-index" | "invalid";
  readonly detail: string;
}
export function transient(message: unknown): ReconcileError;
export function permanent(message: unknown): ReconcileError;
export function withContext<T>(context: string, f: () => T): T;

export function name(obj: KubeObject | undefined): string | undefined;
export function namespace(obj: KubeObject | undefined): string | undefined;
export function uid(obj: KubeObject | undefined): string | undefined;
export function label(obj: KubeObject | undefined, key: string): string | undefined;
export function annotation(obj: KubeObject | undefined, key: string): string | undefined;
export function isDeleting(obj: KubeObject | undefined): boolean;
export function controllerOf(obj: KubeObject | undefined): OwnerReference | undefined;
export function controllerUid(obj: KubeObject | undefined): string | undefined;
export function isControlledBy(obj: KubeObject | undefined, ownerUid: string): boolean;
export function controllerRef(owner: KubeObject): Required<OwnerReference>;
export function hasFinalizer(obj: KubeObject | undefined, finalizer: string): boolean;
export function objectKey(obj: KubeObject): ObjectKey;

export type EventTypeValue = "normal" | "warning";
export const EventType: { readonly normal: "normal"; readonly warning: "warning" };

export interface Preconditions {
  uid?: string;
  resourceVersion?: string;
}

export type Action =
  | { type: "create"; object: KubeObject }
  | { type: "apply"; object: KubeObject }
  | { type: "delete"; key: ObjectKey; preconditions: Preconditions }
  | { type: "status"; key: ObjectKey; status: unknown }
  | { type: "event"; regarding: ObjectKey; eventType: EventTypeValue; reason: string; message: string }
  | { type: "patch"; key: ObjectKey; status: boolean; patchType: "merge" | "json"; body: unknown; preconditions: Preconditions };

export class Outcome {
  constructor();
  readonly actions: Action[];
  requeueAfterMs: number | undefined;
  invalid: string | undefined;
  create(obj: KubeObject): this;
  createOwned(owner: KubeObject, child: KubeObject): this;
  apply(obj: KubeObject): this;
  delete(obj: KubeObject): this;
  deleteKey(key: ObjectKey): this;
  status(obj: KubeObject, status: unknown): this;
  statusKey(key: ObjectKey, status: unknown): this;
  /** `status`, written only if every other action of the outcome succeeds: it stays after all of them. */
  statusAfterWrites(obj: KubeObject, status: unknown): this;
  event(obj: KubeObject, eventType: EventTypeValue, reason: string, message: string): this;
  eventKey(key: ObjectKey, eventType: EventTypeValue, reason: string, message: string): this;
  patch(obj: KubeObject, body: unknown, options?: { patchType?: "merge" | "json"; status?: boolean; preconditions?: Preconditions }): this;
  addFinalizer(obj: KubeObject, finalizer: string): this;
  removeFinalizer(obj: KubeObject, finalizer: string): this;
  requeueAfter(ms: number): this;
  isEmpty(): boolean;
  created(): KubeObject[];
  applied(): KubeObject[];
  deleted(): ObjectKey[];
  statusUpdates(): [ObjectKey, unknown][];
  events(): Extract<Action, { type: "event" }>[];
  patches(): Extract<Action, { type: "patch" }>[];
  intoResult(): this;
}

export const NAMESPACE_INDEX: "namespace";
export const OWNER_INDEX: "owner";

export class Meta {
  readonly kind: KindRef;
  readonly metadata: Required<Pick<NonNullable<KubeObject["metadata"]>, "name" | "uid" | "resourceVersion" | "labels" | "annotations" | "ownerReferences" | "finalizers">> &
    Pick<NonNullable<KubeObject["metadata"]>, "namespace" | "generation" | "creationTimestamp" | "deletionTimestamp">;
  readonly rawFields: (string | undefined)[];
  field<T = unknown>(i: number): T | undefined;
  key(): ObjectKey;
  object(): KubeObject;
}

export interface ListOptions {
  namespace?: string | null;
  selector?: string | null;
}

export const cache: {
  get<T extends KubeObject = KubeObject>(kind: KindRef, namespace: string | null | undefined, name: string): T | undefined;
  getKey<T extends KubeObject = KubeObject>(key: ObjectKey): T | undefined;
  list<T extends KubeObject = KubeObject>(kind: KindRef, options?: ListOptions): T[];
  byIndex<T extends KubeObject = KubeObject>(kind: KindRef, index: string, value: string): T[];
  ownedBy<T extends KubeObject = KubeObject>(kind: KindRef, ownerUid: string): T[];
  getMeta(kind: KindRef, namespace: string | null | undefined, name: string): Meta | undefined;
  listMeta(kind: KindRef, options?: ListOptions): Meta[];
  byIndexMeta(kind: KindRef, index: string, value: string): Meta[];
  ownedByMeta(kind: KindRef, ownerUid: string): Meta[];
};

type LogFn = (...parts: unknown[]) => void;
export const log: { trace: LogFn; debug: LogFn; info: LogFn; warn: LogFn; error: LogFn };

/** A reconcile request. */
export interface Request {
  key: ObjectKey;
  reason: "event" | "resync" | "requeue" | "retry";
  /** With reason `retry`: the attempt (1 = first retry). */
  attempt?: number;
  /** Why the previous reconcile of this key failed, while it keeps failing. */
  lastError?: string;
}

export interface Reconciler {
  metadata(): Metadata;
  reconcile(request: Request): Outcome;
}

export function defineReconciler<R extends Reconciler>(reconciler: R): R;
export function request(key: ObjectKey, options?: { reason?: Request["reason"]; attempt?: number; lastError?: string }): Request;

/**
 * Kubernetes timestamps and the current time (the Rust SDK's `time`): `metav1.Time` (UTC, whole
 * seconds) and `metav1.MicroTime` (six fractional digits), as seconds or microseconds since the
 * epoch. Now is the host's wall clock in the component (recorded and replayed by the host; QuickJS
 * reads it in milliseconds), the bound FakeCache's clock in tests.
 */
export const time: {
  /** Seconds since the epoch of an RFC 3339 timestamp (fraction dropped); undefined if malformed. */
  parse(ts: string): number | undefined;
  /** Microseconds since the epoch of an RFC 3339 timestamp; undefined if malformed. */
  parseMicros(ts: string): number | undefined;
  /** `2026-01-02T03:04:05Z` */
  format(secs: number): string;
  /** `2026-01-02T03:04:05.123456Z` */
  formatMicros(micros: number): string;
  now(): number;
  nowMicros(): number;
  nowRfc3339(): string;
  nowMicrosRfc3339(): string;
};
