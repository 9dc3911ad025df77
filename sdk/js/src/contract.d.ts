// Generated from wit/controller.wit (wasmloop:controller@0.3.1) by `wasmloop-js types`: do not edit.

/** An API type, e.g. `{api-version: "apps/v1", kind: "ReplicaSet"}` or `{api-version: "v1", kind: "Pod"}`. */
export interface KindRef {
  apiVersion: string;
  kind: string;
}

/** One object: its type, namespace (none for cluster-scoped kinds) and name. */
export interface ObjectKey {
  apiVersion: string;
  kind: string;
  namespace: string | null;
  name: string;
}

/** Why a key was queued. Several causes folded into one reconcile report the first one. */
export type Reason =
  | { tag: "event" } /* An add, update or delete of the object or of an object that maps to it. */
  | { tag: "resync" } /* The periodic resync replayed the cache. */
  | { tag: "requeue" } /* The previous reconcile asked for `requeue-after`. */
  | { tag: "retry"; val: number } /* The previous reconcile failed; this is attempt number N (1 = first retry). */;

export interface Request {
  key: ObjectKey;
  reason: Reason;
  /** Why the previous reconcile of this key failed (an action the API server refused, the
   * plugin's own error), while it keeps failing; none once one succeeds. A controller
   * reports it in its status (as a ReplicaSet's `ReplicaFailure` condition). */
  lastError: string | null;
}

export interface StatusUpdate {
  key: ObjectKey;
  /** JSON merge patch (RFC 7386) of `.status`, sent to the `/status` subresource: fields given
   * are set, fields given as null are removed, others are kept. */
  status: string;
}

export type EventType = "normal" | "warning";

export interface Event {
  /** The object the event is about. */
  regarding: ObjectKey;
  eventType: EventType;
  /** CamelCase machine-readable reason, e.g. `ScaledUp`. */
  reason: string;
  message: string;
}

/** Conditions the API server checks before a patch or delete (a mismatch is a conflict:
 * nothing is written and the host reconciles the key again once its cache has caught up). */
export interface Preconditions {
  /** The object must still be this one (not deleted and re-created under its name). */
  uid: string | null;
  /** The object must be unchanged since the plugin read it (optimistic concurrency). */
  resourceVersion: string | null;
}

export type PatchType = "merge" | "json";

export interface Patch {
  key: ObjectKey;
  /** Patch the `status` subresource instead of the object. */
  status: boolean;
  patchType: PatchType;
  /** The patch document (JSON). */
  body: string;
  preconditions: Preconditions;
}

export interface Deletion {
  key: ObjectKey;
  preconditions: Preconditions;
}

/** What the host should do. Every action is idempotent on the host side:
 * create of an existing object and delete of a missing one count as done.
 * Creates and deletes are expected: the key is not reconciled again until the cache shows
 * them (or 5 minutes pass), so a reconcile never sees its own writes missing. */
export type Action =
  | { tag: "create"; val: string } /* Create the object (JSON). Owner references are the plugin's to set (the SDK does). */
  | { tag: "apply"; val: string } /* Server-side apply of the object (JSON), field manager = the plugin name. */
  | { tag: "delete"; val: Deletion } /* Delete the object (background propagation). */
  | { tag: "update-status"; val: StatusUpdate } /* Merge-patch `.status` of an object (see `status-update`). */
  | { tag: "event"; val: Event } /* Record a Kubernetes Event. */
  | { tag: "patch"; val: Patch } /* Patch an object, or its status, that anyone owns (adopt, release, finalizers). */;

export interface Outcome {
  actions: Action[];
  /** Reconcile this key again after so many milliseconds. */
  requeueAfterMs: number | null;
}

export type ReconcileError =
  | { tag: "transient"; val: string } /* Retry with exponential backoff. */
  | { tag: "permanent"; val: string } /* Do not retry until the object (or something mapped to it) changes. */;

/** A failed reconcile (0.3): the error, which drives the retry (backoff, `last-error`, the
 * error metrics), and actions the host executes anyway — a Warning Event, a status
 * condition saying why — checked and admitted exactly as an outcome's. A refused or failed
 * action is reported with the error; it does not change how the key is retried. */
export interface Failure {
  error: ReconcileError;
  actions: Action[];
}

/** Which value of a related object is looked up in an index of the primary kind (0.3). */
export type IndexValue =
  | { tag: "name" } /* Its name. When both kinds are namespaced, only primaries in its namespace match. */
  | { tag: "namespaced-name" } /* `<namespace>/<name>` (`<name>` if it is cluster-scoped), matched in every namespace: for primaries that name objects in other namespaces. */
  | { tag: "field"; val: string } /* The values of a dotted field path (as `index.path`) of the object, each looked up. When both kinds are namespaced, only primaries in its namespace match. */;

/** Enqueue the primaries found through an index (0.3): "who names me" as one declaration. */
export interface IndexMapping {
  /** An index of the primary kind, declared in `plugin-metadata.indexes`. */
  index: string;
  /** What of the related object is looked up in it. */
  value: IndexValue;
}

/** How events on a secondary kind turn into keys of the primary kind. */
export type Mapping =
  | { tag: "owner" } /* Enqueue the object's controller owner (ownerReferences with controller=true) if it is of the primary kind. */
  | { tag: "label"; val: string } /* Enqueue the primary object named by this label's value, in the object's namespace (or cluster-scoped when the primary kind is). */
  | { tag: "same-name" } /* Enqueue the primary object with the same name as this object, in the object's namespace. */
  | { tag: "namespace" } /* Enqueue the primary object whose name is the object's namespace (e.g. Namespace ← ConfigMap). */
  | { tag: "index"; val: IndexMapping } /* Enqueue every primary object whose index holds the object's value (0.3), e.g. the Foos whose `spec.deploymentName` (an index `deployment` on Foo) is this Deployment's name: `index({index: "deployment", value: name})`. */;

export interface Watch {
  kind: KindRef;
  mapping: Mapping;
  /** Optional label selector (`app=web,tier!=db`) limiting which objects are watched and cached. */
  selector: string | null;
  /** Optional selector in the same syntax matched against annotations (0.3): objects that
   * do not match are neither cached nor mapped (the host filters them as they arrive). */
  annotationSelector: string | null;
}

/** An index the plugin reads through `cache.by-index`. */
export interface Index {
  kind: KindRef;
  /** The name used in `by-index` calls. */
  name: string;
  /** `labels.<key>` (the label's value) or a dotted field path such as `spec.nodeName`. */
  path: string;
}

/** A field the plugin reads through `cache.*-meta` calls without parsing whole objects. */
export interface Field {
  kind: KindRef;
  /** A dotted path as in `index.path`, e.g. `status.phase` or `spec.nodeName`. */
  path: string;
}

export interface PluginMetadata {
  name: string;
  version: string;
  /** The kind whose keys this plugin reconciles. */
  reconciles: KindRef;
  /** Label selector for the reconciled kind, if only some objects matter. */
  selector: string | null;
  /** Annotation selector for the reconciled kind (0.3), as `watch.annotation-selector`. */
  annotationSelector: string | null;
  /** Kinds whose events map to primary keys (children via `owner`, others via other mappings). */
  watches: Watch[];
  /** Extra indexes the plugin needs. `namespace` and `owner` exist on every kind. */
  indexes: Index[];
  /** Fields the `*-meta` reads return (in `object-meta.fields`) for objects of their kind. */
  fields: Field[];
}

export interface OwnerReference {
  apiVersion: string;
  kind: string;
  name: string;
  uid: string;
  controller: boolean;
  blockOwnerDeletion: boolean;
}

/** An object's metadata, read without copying or parsing its JSON. */
export interface ObjectMeta {
  namespace: string | null;
  name: string;
  uid: string;
  resourceVersion: string;
  generation: number | null;
  /** RFC 3339 timestamps as the API server writes them. */
  creationTimestamp: string | null;
  deletionTimestamp: string | null;
  labels: [string, string][];
  annotations: [string, string][];
  ownerReferences: OwnerReference[];
  finalizers: string[];
  /** The declared fields of this kind (`plugin-metadata.fields`), in declaration order:
   * each one's JSON value, or none where the object lacks it. */
  fields: Array<string | null>;
}

export type CacheError =
  | { tag: "not-granted"; val: string } /* The plugin did not declare (or was not granted) read access to this kind. */
  | { tag: "unknown-index"; val: string } /* No index of that name on that kind. */
  | { tag: "invalid"; val: string } /* A malformed argument, e.g. a bad label selector. */;

export type Level = "trace" | "debug" | "info" | "warn" | "error";

/** The `cache` interface. */
export interface CacheInterface {
  /** The object's JSON, or none if it is not in the cache.
   * @throws CacheError */
  get(kind: KindRef, namespace: string | null, name: string): string | null;
  /** Objects of a kind, optionally in one namespace and matching a label selector (`app=web,tier in (a,b)`).
   * @throws CacheError */
  list(kind: KindRef, namespace: string | null, selector: string | null): string[];
  /** Objects whose index `index` has the value `value` (e.g. index `owner`, value = an owner UID).
   * @throws CacheError */
  byIndex(kind: KindRef, index: string, value: string): string[];
  /** Like `get`, `list` and `by-index`, returning metadata (and declared fields) only.
   * @throws CacheError */
  getMeta(kind: KindRef, namespace: string | null, name: string): ObjectMeta | null;
  /** @throws CacheError */
  listMeta(kind: KindRef, namespace: string | null, selector: string | null): ObjectMeta[];
  /** @throws CacheError */
  byIndexMeta(kind: KindRef, index: string, value: string): ObjectMeta[];
  /** Like `list-meta` and `by-index-meta` (0.3.1), the records packed into one buffer: one copy into
   * the plugin instead of one per string, read in place without parsing. The layout is
   * `wasmloop_model::packed` (format byte 1): the SDK's `meta::list_packed` reads it.
   * @throws CacheError */
  listMetaPacked(kind: KindRef, namespace: string | null, selector: string | null): Uint8Array;
  /** @throws CacheError */
  byIndexMetaPacked(kind: KindRef, index: string, value: string): Uint8Array;
}

/** The `log` interface. */
export interface LogInterface {
  log(level: Level, message: string): void;
}

/** The `plugin` interface. */
export interface PluginInterface {
  /** Static description; called once at load. */
  metadata(): PluginMetadata;
  /** Reconcile one key: read the cache, return the actions that move the world to the desired state.
   * @throws Failure */
  reconcile(request: Request): Outcome;
}

