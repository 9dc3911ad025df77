"""wasmloop_sdk: write wasmloop reconcile plugins in Python.

The same surface as the Rust SDK (``guest-sdk/``): kinds, the :class:`Metadata` builder,
:class:`Outcome` builders (create, apply, create_owned, delete, status, event, patch,
requeue_after), owner references and deletion checks, transient/permanent errors (carrying
actions: ``with_actions``), logging, and cache reads (get, list, by_index and their metadata-only
forms); contract 0.3's index mappings (``Metadata.named_by``, ``Mapping.index``) and annotation
selectors. Objects are plain ``dict``s (the Kubernetes wire form, parsed JSON).

Nothing here imports the host: ``python -m wasmloop_sdk.build`` binds the contract's imports
into the component, and :mod:`wasmloop_sdk.testing` binds a FakeCache in unit tests.
"""

from __future__ import annotations

import copy
import json
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Literal, Optional, Protocol, TypeVar, Union

from . import rules
from ._host import HostCacheError, host

__all__ = [
    "KindRef", "ObjectKey", "kinds", "Mapping", "MappingValue", "IndexValue", "IndexValueValue", "Watch", "Metadata",
    "ReconcileError", "CacheError",
    "transient", "permanent", "with_context", "name", "namespace", "uid", "label", "annotation", "is_deleting",
    "controller_of", "controller_uid", "is_controlled_by", "controller_ref", "has_finalizer", "object_key",
    "EventType", "Action", "Outcome", "NAMESPACE_INDEX", "OWNER_INDEX", "Meta", "cache", "log", "Request",
    "Reconciler", "request", "time",
]

JSON = Any
"""A parsed JSON value."""
Object = dict[str, Any]
"""A Kubernetes object as JSON (the wire form)."""

# ---------------------------------------------------------------------------------------------
# Kinds and keys


@dataclass(frozen=True)
class KindRef:
    """An API type, e.g. ``KindRef("apps/v1", "ReplicaSet")``."""

    api_version: str
    kind: str

    def key(self, namespace: Optional[str], name: str) -> "ObjectKey":
        """The key of an object of this kind (namespace ``None`` for cluster-scoped kinds)."""
        return ObjectKey(self.api_version, self.kind, namespace or None, name)

    def __str__(self) -> str:
        return f"{self.api_version}/{self.kind}"


@dataclass(frozen=True)
class ObjectKey:
    """One object: its type, namespace (``None`` for cluster-scoped kinds) and name."""

    api_version: str
    kind: str
    namespace: Optional[str]
    name: str

    @property
    def kind_ref(self) -> KindRef:
        return KindRef(self.api_version, self.kind)

    def __str__(self) -> str:
        return "/".join(p for p in (self.api_version, self.kind, self.namespace, self.name) if p)


class kinds:
    """Well-known kinds."""

    POD = KindRef("v1", "Pod")
    CONFIG_MAP = KindRef("v1", "ConfigMap")
    SECRET = KindRef("v1", "Secret")
    SERVICE = KindRef("v1", "Service")
    NAMESPACE = KindRef("v1", "Namespace")
    NODE = KindRef("v1", "Node")
    SERVICE_ACCOUNT = KindRef("v1", "ServiceAccount")
    REPLICA_SET = KindRef("apps/v1", "ReplicaSet")
    DEPLOYMENT = KindRef("apps/v1", "Deployment")
    STATEFUL_SET = KindRef("apps/v1", "StatefulSet")
    DAEMON_SET = KindRef("apps/v1", "DaemonSet")
    JOB = KindRef("batch/v1", "Job")


# ---------------------------------------------------------------------------------------------
# Metadata


@dataclass(frozen=True)
class IndexValueValue:
    """Which value of a related object an index mapping looks up (see :class:`IndexValue`)."""

    tag: Literal["name", "namespaced-name", "field"]
    path: Optional[str] = None
    """With ``field``: the dotted field path."""


class IndexValue:
    """What an index mapping (:meth:`Mapping.index`, contract 0.3) looks up of a related object:
    ``IndexValue.NAME``, ``IndexValue.NAMESPACED_NAME``, ``IndexValue.field("spec.x")``."""

    NAME = IndexValueValue("name")
    """Its name; when both kinds are namespaced, only primaries in its namespace match."""
    NAMESPACED_NAME = IndexValueValue("namespaced-name")
    """``<namespace>/<name>`` (``<name>`` if cluster-scoped), matched in every namespace."""

    @staticmethod
    def field(path: str) -> IndexValueValue:
        """The values of a dotted field path of it; when both kinds are namespaced, only
        primaries in its namespace match."""
        return IndexValueValue("field", path)


@dataclass(frozen=True)
class MappingValue:
    """How events on a watched kind map to keys of the reconciled kind (see :class:`Mapping`)."""

    tag: Literal["owner", "label", "same-name", "namespace", "index"]
    value: Optional[str] = None
    """With ``label``: the label; with ``index``: the index's name."""
    index_value: Optional[IndexValueValue] = None
    """With ``index``: what of the related object is looked up."""


class Mapping:
    """The mappings: ``Mapping.OWNER``, ``Mapping.label("app")``, ``Mapping.SAME_NAME``,
    ``Mapping.NAMESPACE``, ``Mapping.index("deployment", IndexValue.NAME)``."""

    OWNER = MappingValue("owner")
    """The object's controller owner, if of the reconciled kind."""
    SAME_NAME = MappingValue("same-name")
    """The reconciled object with the object's name, in its namespace."""
    NAMESPACE = MappingValue("namespace")
    """The reconciled object whose name is the object's namespace (Namespace ← ConfigMap)."""

    @staticmethod
    def label(label: str) -> MappingValue:
        """The reconciled object named by this label's value, in the object's namespace."""
        return MappingValue("label", label)

    @staticmethod
    def index(index: str, value: IndexValueValue) -> MappingValue:
        """Every reconciled object whose index ``index`` (declared on the reconciled kind) holds
        ``value`` of the related object (contract 0.3): "who names me" as one declaration."""
        return MappingValue("index", index, value)


@dataclass
class Watch:
    """A watched kind, its mapping and optional label and annotation selectors."""

    kind: KindRef
    mapping: MappingValue
    label_selector: Optional[str] = None
    annotation_selector_: Optional[str] = None

    def selector(self, selector: str) -> "Watch":
        """Watch (and cache) only objects matching this label selector."""
        self.label_selector = selector
        return self

    def annotation_selector(self, selector: str) -> "Watch":
        """Cache (and map) only objects whose annotations match this selector, in label-selector
        syntax (``example.com/managed=true``, ``!example.com/skip``; contract 0.3). The host
        filters objects as they arrive: the API server cannot select annotations."""
        self.annotation_selector_ = selector
        return self


@dataclass(frozen=True)
class Index:
    kind: KindRef
    name: str
    path: str


@dataclass(frozen=True)
class Field:
    kind: KindRef
    path: str


@dataclass
class Metadata:
    """What a plugin declares at load, built like the Rust SDK's:
    ``Metadata("name", "0.1.0").reconciles(kinds.NAMESPACE).owns(kinds.CONFIG_MAP)``."""

    name: str
    version: str
    reconciled: Optional[KindRef] = None
    label_selector: Optional[str] = None
    annotation_selector_: Optional[str] = None
    watches_: list[Watch] = field(default_factory=list)
    indexes: list[Index] = field(default_factory=list)
    fields: list[Field] = field(default_factory=list)

    def reconciles(self, kind: KindRef) -> "Metadata":
        """The kind whose keys this plugin reconciles."""
        self.reconciled = kind
        return self

    def selector(self, selector: str) -> "Metadata":
        """Only objects of the reconciled kind matching this label selector."""
        self.label_selector = selector
        return self

    def annotation_selector(self, selector: str) -> "Metadata":
        """Only objects of the reconciled kind whose annotations match this selector
        (label-selector syntax; contract 0.3)."""
        self.annotation_selector_ = selector
        return self

    def named_by(self, kind: KindRef, index: str, path: str, value: IndexValueValue) -> "Metadata":
        """Watch ``kind``, whose objects the reconciled objects *name* (not own): declare index
        ``index`` on the reconciled kind over ``path`` (where a reconciled object names the related
        one, e.g. ``spec.deploymentName``), and enqueue, for an event on a related object, every
        reconciled object whose index holds ``value`` of it (contract 0.3). Call after
        :meth:`reconciles`."""
        if self.reconciled is None:
            raise ValueError("Metadata.named_by: call reconciles(kind) first (the index is on the reconciled kind)")
        return self.index(self.reconciled, index, path).watches(kind, Mapping.index(index, value))

    def owns(self, kind: KindRef) -> "Metadata":
        """Watch children of ``kind`` through their controller owner reference."""
        return self.watch(Watch(kind, Mapping.OWNER))

    def watches(self, kind: KindRef, mapping: MappingValue) -> "Metadata":
        """Watch ``kind`` with ``mapping``."""
        return self.watch(Watch(kind, mapping))

    def watch(self, watch: Watch) -> "Metadata":
        """Add a watch."""
        self.watches_.append(watch)
        return self

    def index(self, kind: KindRef, name: str, path: str) -> "Metadata":
        """Declare index ``name`` on ``kind`` over ``path`` (``labels.<key>`` or a dotted field path,
        whose segments may filter: ``metadata.ownerReferences[kind=CronJob].name``)."""
        self.indexes.append(Index(kind, name, path))
        return self

    def controller_index(self, kind: KindRef, name: str, owner: KindRef) -> "Metadata":
        """Declare index ``name`` on ``kind`` over the name of each object's controller owner when it
        is of kind ``owner`` (controller-runtime's ``.metadata.controller`` index): the path
        ``metadata.ownerReferences[controller=true][kind=<Kind>][apiVersion=<apiVersion>].name``."""
        path = f"metadata.ownerReferences[controller=true][kind={owner.kind}][apiVersion={owner.api_version}].name"
        return self.index(kind, name, path)

    def field(self, kind: KindRef, path: str) -> "Metadata":
        """Declare a field the metadata reads return for objects of ``kind``."""
        self.fields.append(Field(kind, path))
        return self

    def fields_of(self, kind: KindRef) -> list[str]:
        """The declared field paths of ``kind``, in declaration order."""
        return [f.path for f in self.fields if f.kind == kind]

    def readable_kinds(self) -> list[KindRef]:
        """Every kind the plugin may read: the reconciled one, the watched and the indexed ones."""
        out: list[KindRef] = []
        for k in [self.reconciled, *(w.kind for w in self.watches_), *(i.kind for i in self.indexes)]:
            if k is not None and k not in out:
                out.append(k)
        return out


# ---------------------------------------------------------------------------------------------
# Errors


class ReconcileError(Exception):
    """A reconcile error: ``transient`` (retried with backoff) or ``permanent`` (until something
    changes). It can carry actions the host executes anyway (:meth:`with_actions`, contract 0.3)."""

    def __init__(self, kind: Literal["transient", "permanent"], message: str) -> None:
        super().__init__(message)
        self.kind = kind
        self.message = message
        self.actions: Optional["Outcome"] = None
        """The actions to execute anyway, if any."""

    @property
    def is_transient(self) -> bool:
        return self.kind == "transient"

    def context(self, context: str) -> "ReconcileError":
        """The same error with ``context: `` before its message (and the same actions)."""
        e = ReconcileError(self.kind, f"{context}: {self.message}")
        e.actions = self.actions
        return e

    def with_actions(self, outcome: "Union[Outcome, list[Action]]") -> "ReconcileError":
        """This error, with actions for the host to execute anyway (contract 0.3): an
        :class:`Outcome` (or a list of its actions) holding Events, status or condition patches
        saying why. They are checked and admitted like an outcome's; the error still decides the
        retry (backoff, ``last_error``, the error metrics), and the outcome's requeue is ignored:
        ``raise transient("quota exceeded").with_actions(Outcome().event(foo, EventType.WARNING, "QuotaExceeded", "retrying"))``."""
        if isinstance(outcome, list):
            o = Outcome()
            o.actions.extend(outcome)
            outcome = o
        if not isinstance(outcome, Outcome):
            raise TypeError("with_actions takes an Outcome or a list of actions")
        self.actions = outcome
        return self

    def __str__(self) -> str:
        return f"{self.kind}: {self.message}"


class CacheError(ReconcileError):
    """A failed cache read: ``not-granted``, ``unknown-index`` or ``invalid`` (transient)."""

    def __init__(self, tag: str, detail: str) -> None:
        super().__init__("transient", f"{tag}: {detail}")
        self.tag = tag
        self.detail = detail


def transient(message: object) -> ReconcileError:
    """An error the host retries with exponential backoff."""
    return ReconcileError("transient", str(message))


def permanent(message: object) -> ReconcileError:
    """An error the host does not retry until the object (or something mapped to it) changes."""
    return ReconcileError("permanent", str(message))


T = TypeVar("T")


def with_context(context: str, f: Callable[[], T]) -> T:
    """Run ``f``; an error it raises gets ``context: `` before its message."""
    try:
        return f()
    except ReconcileError as e:
        raise e.context(context) from e
    except Exception as e:  # noqa: BLE001 - any failure becomes the reconcile's transient error
        raise transient(f"{context}: {e}") from e


# ---------------------------------------------------------------------------------------------
# Objects


def _meta(obj: Optional[Object]) -> dict[str, Any]:
    m = (obj or {}).get("metadata")
    return m if isinstance(m, dict) else {}


def name(obj: Optional[Object]) -> Optional[str]:
    """``metadata.name``."""
    return _meta(obj).get("name")


def namespace(obj: Optional[Object]) -> Optional[str]:
    """``metadata.namespace``."""
    return _meta(obj).get("namespace") or None


def uid(obj: Optional[Object]) -> Optional[str]:
    """``metadata.uid``."""
    return _meta(obj).get("uid") or None


def label(obj: Optional[Object], key: str) -> Optional[str]:
    """A label's value."""
    return (_meta(obj).get("labels") or {}).get(key)


def annotation(obj: Optional[Object], key: str) -> Optional[str]:
    """An annotation's value."""
    return (_meta(obj).get("annotations") or {}).get(key)


def is_deleting(obj: Optional[Object]) -> bool:
    """Whether deletion of the object has started (``metadata.deletionTimestamp`` is set)."""
    return _meta(obj).get("deletionTimestamp") is not None


def controller_of(obj: Optional[Object]) -> Optional[dict[str, Any]]:
    """The controller owner reference (``controller: true``), if any."""
    return next((r for r in _meta(obj).get("ownerReferences") or [] if r.get("controller") is True), None)


def controller_uid(obj: Optional[Object]) -> Optional[str]:
    """The UID in the controller owner reference."""
    ref = controller_of(obj)
    return ref.get("uid") if ref else None


def is_controlled_by(obj: Optional[Object], owner_uid: str) -> bool:
    """Whether ``obj`` is controlled by the object with ``owner_uid``."""
    return controller_uid(obj) == owner_uid


def object_key(obj: Object) -> ObjectKey:
    """The key of an object (``apiVersion``, ``kind``, ``metadata.namespace``, ``metadata.name``)."""
    api_version, k = obj.get("apiVersion"), obj.get("kind")
    if not api_version:
        raise ValueError("object has no apiVersion")
    if not k:
        raise ValueError("object has no kind")
    n = name(obj)
    if not n:
        raise ValueError(f"{k} has no metadata.name")
    return ObjectKey(api_version, k, namespace(obj), n)


def controller_ref(owner: Object) -> dict[str, Any]:
    """The owner reference that makes ``owner`` the controller of its dependents."""
    k = object_key(owner)
    u = uid(owner)
    if not u:
        raise ValueError(f"owner {k} has no metadata.uid")
    return {"apiVersion": k.api_version, "kind": k.kind, "name": k.name, "uid": u, "controller": True, "blockOwnerDeletion": True}


def has_finalizer(obj: Optional[Object], finalizer: str) -> bool:
    """Whether ``obj`` carries ``finalizer``."""
    return finalizer in (_meta(obj).get("finalizers") or [])


# ---------------------------------------------------------------------------------------------
# Outcome


class EventType:
    """Event types."""

    NORMAL = "normal"
    WARNING = "warning"


@dataclass
class Action:
    """One action: ``type`` is ``create``, ``apply``, ``delete``, ``status``, ``event`` or ``patch``."""

    type: Literal["create", "apply", "delete", "status", "event", "patch"]
    object: Optional[Object] = None
    key: Optional[ObjectKey] = None
    status: Any = None
    event_type: Optional[str] = None
    reason: Optional[str] = None
    message: Optional[str] = None
    patch_type: Literal["merge", "json"] = "merge"
    body: Any = None
    status_subresource: bool = False
    preconditions: dict[str, Optional[str]] = field(default_factory=dict)

    @property
    def regarding(self) -> Optional[ObjectKey]:
        """The object an event is about."""
        return self.key


class Outcome:
    """What a reconcile returns: the actions that move the world to the desired state."""

    def __init__(self) -> None:
        self.actions: list[Action] = []
        self.requeue_after_ms: Optional[int] = None
        self.invalid: Optional[str] = None
        self.last = 0
        """How many actions at the end stay last (:meth:`status_after_writes`)."""

    def _push(self, action: Action) -> "Outcome":
        """Add an action before the ones that stay last."""
        self.actions.insert(len(self.actions) - self.last, action)
        return self

    def _problem(self, what: str, e: object) -> "Outcome":
        if self.invalid is None:
            self.invalid = f"{what}: {e}"
        return self

    def _with(self, what: str, make: Callable[[], Action]) -> "Outcome":
        try:
            self._push(make())
        except (ValueError, TypeError) as e:
            self._problem(what, e)
        return self

    def create(self, obj: Object) -> "Outcome":
        """Create ``obj`` (needs apiVersion, kind and metadata.name or metadata.generateName)."""

        def make() -> Action:
            o = copy.deepcopy(obj)
            rules.check_target(o, "create")
            return Action("create", object=o)

        return self._with("create", make)

    def create_owned(self, owner: Object, child: Object) -> "Outcome":
        """Create ``child`` controlled by ``owner`` (controller owner reference; the owner's namespace if it has none)."""
        try:
            ref = controller_ref(owner)
        except ValueError as e:
            return self._problem("create_owned", e)
        try:
            c = rules.adopt(child if child is not None else {}, namespace(owner) or None, ref)
        except rules.RuleError as e:
            return self._problem("create_owned", e)
        return self.create(c)

    def apply(self, obj: Object) -> "Outcome":
        """Server-side apply ``obj`` (needs apiVersion, kind, metadata.name); field manager = the plugin."""

        def make() -> Action:
            rules.check_target(obj, "apply")
            return Action("apply", object=copy.deepcopy(obj))

        return self._with("apply", make)

    def delete(self, obj: Object) -> "Outcome":
        """Delete the object (its key taken from ``obj``)."""
        return self._with("delete", lambda: Action("delete", key=object_key(obj)))

    def delete_key(self, key: ObjectKey) -> "Outcome":
        """Delete the object with this key."""
        self._push(Action("delete", key=key))
        return self

    def status(self, obj: Object, status: dict[str, Any]) -> "Outcome":
        """Merge-patch ``.status`` of ``obj`` (fields given are replaced, others kept)."""
        try:
            key = object_key(obj)
        except ValueError as e:
            return self._problem("status", e)
        return self.status_key(key, status)

    def status_key(self, key: ObjectKey, status: dict[str, Any]) -> "Outcome":
        """Merge-patch ``.status`` of the object with this key."""
        if not isinstance(status, dict):
            return self._problem(f"status of {key}", f"expected a JSON object, got {json.dumps(status)}")
        self._push(Action("status", key=key, status=copy.deepcopy(status)))
        return self

    def status_after_writes(self, obj: Object, status: dict[str, Any]) -> "Outcome":
        """Merge-patch ``.status`` of ``obj`` only if every other action of this outcome succeeds:
        the write stays after all of them, whatever builders come later (several stay last in
        the order given). The host runs an outcome's actions in order and stops at the first
        that fails or conflicts, so a status that reports a create is never written when the
        create failed."""
        before = len(self.actions)
        self.status(obj, status)
        if len(self.actions) > before:
            self.actions.append(self.actions.pop(len(self.actions) - self.last - 1))
            self.last += 1
        return self

    def event(self, obj: Object, event_type: str, reason: str, message: str) -> "Outcome":
        """Record an Event about ``obj``."""
        try:
            key = object_key(obj)
        except ValueError as e:
            return self._problem("event", e)
        return self.event_key(key, event_type, reason, message)

    def event_key(self, key: ObjectKey, event_type: str, reason: str, message: str) -> "Outcome":
        """Record an Event about the object with this key."""
        if not reason:
            return self._problem("event", "empty reason")
        self._push(Action("event", key=key, event_type=event_type, reason=reason, message=str(message)))
        return self

    def patch(
        self,
        obj: Object,
        body: Any,
        patch_type: Literal["merge", "json"] = "merge",
        status: bool = False,
        preconditions: Optional[dict[str, Optional[str]]] = None,
    ) -> "Outcome":
        """Patch ``obj`` (anyone's): a JSON merge patch, or a list of JSON patch operations with
        ``patch_type="json"``; ``status=True`` patches the status subresource; preconditions
        default to ``obj`` being unchanged since it was read (uid and resourceVersion)."""

        def make() -> Action:
            pre = preconditions if preconditions is not None else {"uid": uid(obj), "resource_version": _meta(obj).get("resourceVersion")}
            return Action("patch", key=object_key(obj), body=copy.deepcopy(body), patch_type=patch_type, status_subresource=status, preconditions=pre)

        return self._with("patch", make)

    def add_finalizer(self, obj: Object, finalizer: str) -> "Outcome":
        """Add ``finalizer`` to ``obj`` unless it has it."""
        if has_finalizer(obj, finalizer):
            return self
        if _meta(obj).get("finalizers"):
            ops = [{"op": "add", "path": "/metadata/finalizers/-", "value": finalizer}]
        else:
            ops = [{"op": "add", "path": "/metadata/finalizers", "value": [finalizer]}]
        return self.patch(obj, ops, patch_type="json")

    def remove_finalizer(self, obj: Object, finalizer: str) -> "Outcome":
        """Remove ``finalizer`` from ``obj`` if it has it."""
        finalizers = _meta(obj).get("finalizers") or []
        if finalizer not in finalizers:
            return self
        path = f"/metadata/finalizers/{finalizers.index(finalizer)}"
        ops = [{"op": "test", "path": path, "value": finalizer}, {"op": "remove", "path": path}]
        return self.patch(obj, ops, patch_type="json", preconditions={"uid": uid(obj)})

    def requeue_after(self, seconds: float) -> "Outcome":
        """Reconcile this key again after ``seconds``."""
        self.requeue_after_ms = max(0, round(seconds * 1000))
        return self

    def is_empty(self) -> bool:
        """No actions (a requeue alone still counts as empty, as in the Rust SDK)."""
        return not self.actions

    def created(self) -> list[Object]:
        return [a.object for a in self.actions if a.type == "create" and a.object is not None]

    def applied(self) -> list[Object]:
        return [a.object for a in self.actions if a.type == "apply" and a.object is not None]

    def deleted(self) -> list[ObjectKey]:
        return [a.key for a in self.actions if a.type == "delete" and a.key is not None]

    def status_updates(self) -> list[tuple[ObjectKey, Any]]:
        return [(a.key, a.status) for a in self.actions if a.type == "status" and a.key is not None]

    def events(self) -> list[Action]:
        return [a for a in self.actions if a.type == "event"]

    def patches(self) -> list[Action]:
        return [a for a in self.actions if a.type == "patch"]

    def into_result(self) -> "Outcome":
        """This outcome, or raise the permanent error of the first invalid action."""
        if self.invalid is not None:
            raise permanent(f"invalid action: {self.invalid}")
        return self

    def __repr__(self) -> str:
        return f"Outcome(actions={self.actions!r}, requeue_after_ms={self.requeue_after_ms!r})"


# ---------------------------------------------------------------------------------------------
# Cache reads

NAMESPACE_INDEX = "namespace"
"""The built-in index of every kind: by namespace."""
OWNER_INDEX = "owner"
"""The built-in index of every kind: by controller owner UID."""


def _call(f: Callable[[], T]) -> T:
    try:
        return f()
    except HostCacheError as e:
        raise CacheError(e.tag, e.message) from None


class Meta:
    """A metadata read's answer: ``metadata`` as on the object, plus the declared ``fields``."""

    def __init__(self, kind: KindRef, raw: dict[str, Any]) -> None:
        self.kind = kind
        self.metadata: dict[str, Any] = {
            "namespace": raw.get("namespace"),
            "name": raw["name"],
            "uid": raw["uid"],
            "resourceVersion": raw["resource_version"],
            "generation": raw.get("generation"),
            "creationTimestamp": raw.get("creation_timestamp"),
            "deletionTimestamp": raw.get("deletion_timestamp"),
            "labels": dict(raw.get("labels") or []),
            "annotations": dict(raw.get("annotations") or []),
            "ownerReferences": list(raw.get("owner_references") or []),
            "finalizers": list(raw.get("finalizers") or []),
        }
        self.raw_fields: list[Optional[str]] = list(raw.get("fields") or [])

    def field(self, i: int) -> Any:
        """Declared field ``i`` (declaration order among this kind's fields), parsed; ``None`` if absent."""
        raw = self.raw_fields[i] if i < len(self.raw_fields) else None
        return None if raw is None else json.loads(raw)

    def key(self) -> ObjectKey:
        return self.kind.key(self.metadata["namespace"], self.metadata["name"])

    def object(self) -> Object:
        """A stand-in object (``apiVersion``, ``kind``, ``metadata``) for the helpers and builders."""
        return {"apiVersion": self.kind.api_version, "kind": self.kind.kind, "metadata": self.metadata}


class cache:
    """Read-only access to the host's informer cache (reads never reach the API server)."""

    @staticmethod
    def get(kind: KindRef, namespace: Optional[str], name: str) -> Optional[Object]:
        """The object, or ``None`` if it is not in the cache."""
        raw = _call(lambda: host().cache.get(kind, namespace, name))
        return None if raw is None else json.loads(raw)

    @staticmethod
    def get_key(key: ObjectKey) -> Optional[Object]:
        """The object with this key, or ``None``."""
        return cache.get(key.kind_ref, key.namespace, key.name)

    @staticmethod
    def list(kind: KindRef, namespace: Optional[str] = None, selector: Optional[str] = None) -> list[Object]:
        """Objects of a kind, optionally in one namespace and matching a label selector."""
        return [json.loads(j) for j in _call(lambda: host().cache.list(kind, namespace, selector))]

    @staticmethod
    def by_index(kind: KindRef, index: str, value: str) -> list[Object]:
        """Objects whose index ``index`` has ``value`` (``namespace``, ``owner`` or a declared index)."""
        return [json.loads(j) for j in _call(lambda: host().cache.by_index(kind, index, value))]

    @staticmethod
    def owned_by(kind: KindRef, owner_uid: str) -> list[Object]:
        """Objects of ``kind`` controlled by the owner with ``owner_uid``."""
        return cache.by_index(kind, OWNER_INDEX, owner_uid)

    @staticmethod
    def get_meta(kind: KindRef, namespace: Optional[str], name: str) -> Optional[Meta]:
        """Like :meth:`get`, metadata and declared fields only."""
        raw = _call(lambda: host().cache.get_meta(kind, namespace, name))
        return None if raw is None else Meta(kind, raw)

    @staticmethod
    def list_meta(kind: KindRef, namespace: Optional[str] = None, selector: Optional[str] = None) -> list[Meta]:
        """Like :meth:`list`, metadata and declared fields only."""
        return [Meta(kind, m) for m in _call(lambda: host().cache.list_meta(kind, namespace, selector))]

    @staticmethod
    def by_index_meta(kind: KindRef, index: str, value: str) -> list[Meta]:
        """Like :meth:`by_index`, metadata and declared fields only."""
        return [Meta(kind, m) for m in _call(lambda: host().cache.by_index_meta(kind, index, value))]

    @staticmethod
    def owned_by_meta(kind: KindRef, owner_uid: str) -> list[Meta]:
        """Like :meth:`owned_by`, metadata and declared fields only."""
        return cache.by_index_meta(kind, OWNER_INDEX, owner_uid)


# ---------------------------------------------------------------------------------------------
# Logging


class log:
    """Logging into the host's log, tagged with the plugin and the key being reconciled."""

    @staticmethod
    def _at(level: str, parts: Iterable[object]) -> None:
        host().log.log(level, " ".join(p if isinstance(p, str) else json.dumps(p) for p in parts))

    @staticmethod
    def trace(*parts: object) -> None:
        log._at("trace", parts)

    @staticmethod
    def debug(*parts: object) -> None:
        log._at("debug", parts)

    @staticmethod
    def info(*parts: object) -> None:
        log._at("info", parts)

    @staticmethod
    def warn(*parts: object) -> None:
        log._at("warn", parts)

    @staticmethod
    def error(*parts: object) -> None:
        log._at("error", parts)


# ---------------------------------------------------------------------------------------------
# Reconcilers


@dataclass(frozen=True)
class Request:
    """A reconcile request."""

    key: ObjectKey
    reason: Literal["event", "resync", "requeue", "retry"] = "event"
    attempt: Optional[int] = None
    """With reason ``retry``: the attempt (1 = first retry)."""
    last_error: Optional[str] = None
    """Why the previous reconcile of this key failed, while it keeps failing."""


class Reconciler(Protocol):
    """A reconciler: ``metadata()`` and ``reconcile(request)``."""

    def metadata(self) -> Metadata: ...

    def reconcile(self, request: Request) -> Outcome: ...


def request(key: ObjectKey, reason: Literal["event", "resync", "requeue", "retry"] = "event", attempt: Optional[int] = None,
            last_error: Optional[str] = None) -> Request:
    """A request for ``key``, as the host sends one; for tests."""
    return Request(key, reason, attempt, last_error)


# Kubernetes timestamps and the host's clock (``wasmloop_sdk.time``).
from . import time  # noqa: E402
