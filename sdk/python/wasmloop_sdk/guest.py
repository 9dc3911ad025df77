"""The component side: turns a reconciler into the contract's ``plugin`` export.

The entry ``python -m wasmloop_sdk.build`` generates imports componentize-py's bindings of
``wit/controller.wit`` (``wit_world``) and calls :func:`export_plugin` with them; nothing here
imports the bindings itself, so the SDK also runs under plain CPython (tests). FakeCache uses
:func:`to_wit_outcome_checked`, so unit tests check that every action converts.
"""

from __future__ import annotations

import json
from types import ModuleType
from typing import Any, Optional

from . import Action, KindRef, Metadata, MappingValue, ObjectKey, Outcome, ReconcileError, Reconciler, Request
from ._host import HostCacheError, bind_host

_REASONS = {"Reason_Event": "event", "Reason_Resync": "resync", "Reason_Requeue": "requeue", "Reason_Retry": "retry"}


def to_wit_outcome_checked(outcome: Outcome) -> list[dict[str, Any]]:
    """The actions as the component sends them, at the SDK's level (objects and patches as JSON
    text); raises if one does not convert."""
    return _actions_checked(outcome.actions)


def failure_parts(e: BaseException) -> tuple[ReconcileError, list[Action]]:
    """What a raised exception becomes (the contract's ``failure``): the error, and the actions
    to execute anyway (a :class:`ReconcileError`'s ``with_actions``). Unusable actions (a builder
    refused an object, or one does not convert) are not sent, and the message says so."""
    if not isinstance(e, ReconcileError):
        return ReconcileError("transient", f"uncaught exception: {type(e).__name__}: {e}"), []
    outcome = e.actions
    if outcome is None:
        return e, []
    if outcome.invalid is not None:
        return e.context(f"its actions were not sent (invalid action: {outcome.invalid})"), []
    try:
        _actions_checked(outcome.actions)
    except (TypeError, ValueError) as bad:
        return e.context(f"its actions were not sent ({bad})"), []
    return e, list(outcome.actions)


def _actions_checked(actions: list[Action]) -> list[dict[str, Any]]:
    out = []
    for a in actions:
        d: dict[str, Any] = {"type": a.type}
        if a.object is not None:
            d["object"] = json.dumps(a.object)
        if a.type == "status":
            d["status"] = json.dumps(a.status)
        if a.type == "patch":
            d["body"] = json.dumps(a.body)
        out.append(d)
    return out


class WitBindings:
    """componentize-py's generated modules of the contract: ``types``, ``cache``, ``log`` and the ``Err`` class."""

    def __init__(self, types: ModuleType, cache: ModuleType, log: ModuleType, err: type) -> None:
        self.types, self.cache, self.log, self.err = types, cache, log, err


class _WitCache:
    """The contract's ``cache`` import as the SDK's host interface."""

    def __init__(self, b: WitBindings) -> None:
        self.b = b
        c = b.cache
        self._errors = {c.CacheError_NotGranted: "not-granted", c.CacheError_UnknownIndex: "unknown-index", c.CacheError_Invalid: "invalid"}

    def _kind(self, k: KindRef) -> Any:
        return self.b.types.KindRef(api_version=k.api_version, kind=k.kind)

    def _call(self, f: Any, *args: Any) -> Any:
        try:
            return f(*args)
        except self.b.err as e:
            v = e.value
            raise HostCacheError(self._errors.get(type(v), "invalid"), str(getattr(v, "value", v))) from None

    @staticmethod
    def _meta(m: Any) -> dict[str, Any]:
        return {
            "namespace": m.namespace,
            "name": m.name,
            "uid": m.uid,
            "resource_version": m.resource_version,
            "generation": m.generation,
            "creation_timestamp": m.creation_timestamp,
            "deletion_timestamp": m.deletion_timestamp,
            "labels": list(m.labels),
            "annotations": list(m.annotations),
            "owner_references": [
                {"apiVersion": r.api_version, "kind": r.kind, "name": r.name, "uid": r.uid, "controller": r.controller, "blockOwnerDeletion": r.block_owner_deletion}
                for r in m.owner_references
            ],
            "finalizers": list(m.finalizers),
            "fields": list(m.fields),
        }

    def get(self, kind: KindRef, namespace: Optional[str], name: str) -> Optional[str]:
        return self._call(self.b.cache.get, self._kind(kind), namespace, name)

    def list(self, kind: KindRef, namespace: Optional[str], selector: Optional[str]) -> list[str]:
        return self._call(self.b.cache.list, self._kind(kind), namespace, selector)

    def by_index(self, kind: KindRef, index: str, value: str) -> list[str]:
        return self._call(self.b.cache.by_index, self._kind(kind), index, value)

    def get_meta(self, kind: KindRef, namespace: Optional[str], name: str) -> Optional[dict[str, Any]]:
        m = self._call(self.b.cache.get_meta, self._kind(kind), namespace, name)
        return None if m is None else self._meta(m)

    def list_meta(self, kind: KindRef, namespace: Optional[str], selector: Optional[str]) -> list[dict[str, Any]]:
        return [self._meta(m) for m in self._call(self.b.cache.list_meta, self._kind(kind), namespace, selector)]

    def by_index_meta(self, kind: KindRef, index: str, value: str) -> list[dict[str, Any]]:
        return [self._meta(m) for m in self._call(self.b.cache.by_index_meta, self._kind(kind), index, value)]


class _WitLog:
    def __init__(self, b: WitBindings) -> None:
        self.b = b

    def log(self, level: str, message: str) -> None:
        self.b.log.log(getattr(self.b.log.Level, level.upper()), message)


class _WitHost:
    def __init__(self, b: WitBindings) -> None:
        self.cache = _WitCache(b)
        self.log = _WitLog(b)


class _Plugin:
    """The ``plugin`` export: converts between the bindings' types and the SDK's."""

    def __init__(self, reconciler: Reconciler, b: WitBindings) -> None:
        self.reconciler, self.b = reconciler, b

    def _kind(self, k: KindRef) -> Any:
        return self.b.types.KindRef(api_version=k.api_version, kind=k.kind)

    def _key(self, k: ObjectKey) -> Any:
        return self.b.types.ObjectKey(api_version=k.api_version, kind=k.kind, namespace=k.namespace, name=k.name)

    def _mapping(self, m: MappingValue) -> Any:
        t = self.b.types
        if m.tag == "owner":
            return t.Mapping_Owner()
        if m.tag == "label":
            return t.Mapping_Label(m.value)
        if m.tag == "same-name":
            return t.Mapping_SameName()
        if m.tag == "index":
            v = m.index_value
            assert v is not None and m.value is not None
            if v.tag == "name":
                value = t.IndexValue_Name()
            elif v.tag == "namespaced-name":
                value = t.IndexValue_NamespacedName()
            else:
                value = t.IndexValue_Field(v.path or "")
            return t.Mapping_Index(t.IndexMapping(index=m.value, value=value))
        return t.Mapping_Namespace()

    def metadata(self) -> Any:
        m: Metadata = self.reconciler.metadata()
        if m.reconciled is None:
            raise ValueError(f"plugin {m.name}: metadata() must say which kind it reconciles (Metadata.reconciles)")
        t = self.b.types
        return t.PluginMetadata(
            name=m.name,
            version=m.version,
            reconciles=self._kind(m.reconciled),
            selector=m.label_selector,
            annotation_selector=m.annotation_selector_,
            watches=[
                t.Watch(kind=self._kind(w.kind), mapping=self._mapping(w.mapping), selector=w.label_selector, annotation_selector=w.annotation_selector_)
                for w in m.watches_
            ],
            indexes=[t.Index(kind=self._kind(i.kind), name=i.name, path=i.path) for i in m.indexes],
            fields=[t.Field(kind=self._kind(f.kind), path=f.path) for f in m.fields],
        )

    def _preconditions(self, p: dict[str, Optional[str]]) -> Any:
        return self.b.types.Preconditions(uid=p.get("uid"), resource_version=p.get("resource_version"))

    def _action(self, a: Action) -> Any:
        t = self.b.types
        assert a.key is not None or a.object is not None
        if a.type == "create":
            return t.Action_Create(json.dumps(a.object))
        if a.type == "apply":
            return t.Action_Apply(json.dumps(a.object))
        assert a.key is not None
        if a.type == "delete":
            return t.Action_Delete(t.Deletion(key=self._key(a.key), preconditions=self._preconditions(a.preconditions)))
        if a.type == "status":
            return t.Action_UpdateStatus(t.StatusUpdate(key=self._key(a.key), status=json.dumps(a.status)))
        if a.type == "event":
            event_type = t.EventType.WARNING if a.event_type == "warning" else t.EventType.NORMAL
            return t.Action_Event(t.Event(regarding=self._key(a.key), event_type=event_type, reason=a.reason or "", message=a.message or ""))
        patch_type = t.PatchType.JSON if a.patch_type == "json" else t.PatchType.MERGE
        return t.Action_Patch(
            t.Patch(key=self._key(a.key), status=a.status_subresource, patch_type=patch_type, body=json.dumps(a.body), preconditions=self._preconditions(a.preconditions))
        )

    def _request(self, r: Any) -> Request:
        k = r.key
        reason = _REASONS.get(type(r.reason).__name__, "event")
        attempt = int(r.reason.value) if reason == "retry" else None
        return Request(ObjectKey(k.api_version, k.kind, k.namespace, k.name), reason, attempt, r.last_error)  # type: ignore[arg-type]

    def reconcile(self, request: Any) -> Any:
        t = self.b.types
        try:
            out = self.reconciler.reconcile(self._request(request))
            if not isinstance(out, Outcome):
                raise ReconcileError("permanent", "reconcile must return an Outcome")
            out.into_result()
            return t.Outcome(actions=[self._action(a) for a in out.actions], requeue_after_ms=out.requeue_after_ms)
        except Exception as e:  # noqa: BLE001 - any failure is the reconcile's error (uncaught ones transient)
            failed, actions = failure_parts(e)
        error = t.ReconcileError_Transient(failed.message) if failed.is_transient else t.ReconcileError_Permanent(failed.message)
        raise self.b.err(t.Failure(error=error, actions=[self._action(a) for a in actions]))


def export_plugin(reconciler: Reconciler, bindings: WitBindings) -> _Plugin:
    """The contract's ``plugin`` export for ``reconciler``, with the contract's imports bound."""
    bind_host(_WitHost(bindings))
    return _Plugin(reconciler, bindings)
