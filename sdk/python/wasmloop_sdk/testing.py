"""Unit-test reconcilers under CPython (pytest): a fake of the host's cache built from objects,
JSON or YAML, no wasm, no cluster.

It answers reads like the host (and like the Rust SDK's ``testing::FakeCache``): only kinds the
metadata declares are readable, watch and reconcile selectors (label and annotation) limit what
is cached, ``by_index`` knows ``namespace``, ``owner`` (the controller owner's UID) and the
declared ``labels.<key>`` / dotted-path indexes, and metadata reads return the declared fields.
:meth:`FakeCache.mapped_keys` maps an event on a related object to the keys the host would queue
(owner, label, same name, namespace and index mappings). :meth:`FakeCache.execute` and
:meth:`FakeCache.converge` play the host's part of carrying out the actions (a failure's too), so
a test can check that a reconciler converges and then writes nothing.

The fake has a clock, which :mod:`wasmloop_sdk.time` reads while the fake is bound: it starts at
the wall-clock time the fake is made and stands still until a test moves it (:meth:`FakeCache.set_time`,
:meth:`FakeCache.advance`) or :meth:`FakeCache.converge` ends on an outcome that asks for a requeue
(the clock moves to it); :meth:`FakeCache.run_until` plays a schedule out to a given time.

YAML fixtures need PyYAML (``pip install wasmloop-sdk[testing]``); objects and JSON need nothing.
"""

from __future__ import annotations

import copy
import dataclasses
import json
import os
import sys
import time as _system
from typing import Any, Callable, Optional, TypeVar, Union

from . import Action, IndexValueValue, KindRef, Metadata, Object, ObjectKey, Outcome, ReconcileError, Reconciler, Request, object_key, permanent
from . import request as make_request
from ._host import HostCacheError, bind_host
from .guest import failure_parts, to_wit_outcome_checked
from .time import format as _format_secs
from .time import parse_micros as _parse_micros
from . import rules
from .paths import check_field_path, check_path, field_value, index_values, matches_annotation_selector, matches_selector, parse_selector

T = TypeVar("T")


def _has_finalizers(obj: Object) -> bool:
    return bool((obj.get("metadata") or {}).get("finalizers"))


def _selection(labels: Optional[str], annotations: Optional[str]) -> Callable[[Object], bool]:
    """What one informer of the host caches: a label selector and an annotation selector, both optional."""
    return lambda o: (labels is None or matches_selector(labels, o)) and (annotations is None or matches_annotation_selector(annotations, o))


def _lookup(value: IndexValueValue, namespace: Optional[str], name: str, obj: Object) -> tuple[list[str], bool]:
    """The values an index mapping looks up for a related object, and whether matches stay in its
    namespace (wasmloop-model's ``IndexValue::lookup``)."""
    if value.tag == "name":
        return [name], True
    if value.tag == "namespaced-name":
        return [f"{namespace}/{name}" if namespace else name], False
    try:
        check_path(value.path or "")
        return index_values(value.path or "", obj), True
    except ValueError:
        return [], True


class _FakeCacheHost:
    def __init__(self, fake: "FakeCache") -> None:
        self.fake = fake

    def get(self, kind: KindRef, namespace: Optional[str], name: str) -> Optional[str]:
        o = self.fake._get(kind, namespace, name)
        return None if o is None else json.dumps(o)

    def list(self, kind: KindRef, namespace: Optional[str], selector: Optional[str]) -> list[str]:
        return [json.dumps(o) for o in self.fake._list(kind, namespace, selector)]

    def by_index(self, kind: KindRef, index: str, value: str) -> list[str]:
        return [json.dumps(o) for o in self.fake._by_index(kind, index, value)]

    def get_meta(self, kind: KindRef, namespace: Optional[str], name: str) -> Optional[dict[str, Any]]:
        o = self.fake._get(kind, namespace, name)
        return None if o is None else self.fake._meta(kind, o)

    def list_meta(self, kind: KindRef, namespace: Optional[str], selector: Optional[str]) -> list[dict[str, Any]]:
        return [self.fake._meta(kind, o) for o in self.fake._list(kind, namespace, selector)]

    def by_index_meta(self, kind: KindRef, index: str, value: str) -> list[dict[str, Any]]:
        return [self.fake._meta(kind, o) for o in self.fake._by_index(kind, index, value)]


class _FakeLog:
    def __init__(self, fake: "FakeCache") -> None:
        self.fake = fake

    def log(self, level: str, message: str) -> None:
        self.fake._logs.append((level, message))
        if os.environ.get("WASMLOOP_TEST_LOG"):
            print(f"[{level}] {message}", file=sys.stderr)


class _FakeClock:
    def __init__(self, fake: "FakeCache") -> None:
        self.fake = fake

    def now_micros(self) -> int:
        return self.fake._clock


class _Host:
    def __init__(self, fake: "FakeCache") -> None:
        self.cache = _FakeCacheHost(fake)
        self.log = _FakeLog(fake)
        self.clock = _FakeClock(fake)


class FakeCache:
    """A fake of the host's cache (and of its action executor) for tests."""

    def __init__(self, metadata_or_reconciler: Union[Metadata, Reconciler]) -> None:
        """A fake granting what the metadata declares (a :class:`Metadata`, or a reconciler whose
        ``metadata()`` is called and which :meth:`reconcile` then uses by default). Raises, as
        the host refuses at load, on bad selectors, index paths and fields."""
        self.reconciler: Optional[Reconciler] = None
        if isinstance(metadata_or_reconciler, Metadata):
            self.metadata = metadata_or_reconciler
        else:
            self.reconciler = metadata_or_reconciler
            self.metadata = metadata_or_reconciler.metadata()
        m = self.metadata
        if m.reconciled is None:
            raise ValueError("FakeCache: the metadata declares no reconciled kind (Metadata.reconciles)")

        def sel(s: Optional[str], what: str) -> None:
            if s is not None:
                try:
                    parse_selector(s)
                except ValueError as e:
                    raise ValueError(f"{what}: invalid selector {json.dumps(s)}: {e}") from None

        sel(m.label_selector, "reconciled kind")
        sel(m.annotation_selector_, "reconciled kind")
        for w in m.watches_:
            sel(w.label_selector, f"watch of {w.kind}")
            sel(w.annotation_selector_, f"watch of {w.kind}")
            # As the host refuses at load: an index mapping names an index of the reconciled kind.
            if w.mapping.tag == "index":
                index, value = w.mapping.value, w.mapping.index_value
                if not any(i.kind == m.reconciled and i.name == index for i in m.indexes):
                    raise ValueError(f"watch of {w.kind}: the index mapping names index {json.dumps(index)}, which is not declared on {m.reconciled}")
                if value is None or value.tag not in ("name", "namespaced-name", "field"):
                    raise ValueError(f"watch of {w.kind}: unknown index value {value!r}")
                if value.tag == "field":
                    try:
                        check_path(value.path or "")
                    except ValueError as e:
                        raise ValueError(f"watch of {w.kind}: the index mapping's field: {e}") from None
        for i in m.indexes:
            try:
                check_path(i.path)
            except ValueError as e:
                raise ValueError(f"index {json.dumps(i.name)} on {i.kind}: invalid path {json.dumps(i.path)}: {e}") from None
        readable = m.readable_kinds()
        for n, f in enumerate(m.fields):
            if f.kind not in readable:
                raise ValueError(f"fields[{n}]: {f.kind} is not a kind the plugin reconciles, watches or indexes")
            check_field_path(f.path)
        self._store: dict[KindRef, dict[tuple[str, str], Object]] = {}
        self._logs: list[tuple[str, str]] = []
        self._events: list[Action] = []
        self._next_uid = 1
        self._clock = _system.time_ns() // 1000
        """Now, in microseconds since the epoch: what :mod:`wasmloop_sdk.time` reads."""
        self._failures: list[Callable[[Action], Optional[str]]] = []
        self._last_errors: dict[ObjectKey, str] = {}
        """Why each key's previous reconcile failed, while it keeps failing (the host's ``last_error``)."""
        self._current: Optional[ObjectKey] = None
        """The key last reconciled, whose ``last_error`` a failing action sets."""

    # ---- failing writes

    def fail_when(self, fails: Callable[[Action], Optional[str]]) -> "FakeCache":
        """Make the actions ``fails`` gives a reason for (``None`` lets one through) fail, as the
        API server refusing them would (a 403, a 422, a quota): :meth:`execute` stops the outcome
        at the first such action (the ones before it are done, the rest are not), and the next
        reconcile of the key carries ``<verb> <object>: <why>`` as ``Request.last_error``, as the
        host's does."""
        self._failures.append(fails)
        return self

    def fail_creates(self, kind: KindRef, why: str) -> "FakeCache":
        """Make every create of a ``kind`` object fail with ``why`` (see :meth:`fail_when`)."""
        return self.fail_when(lambda a: why if a.type == "create" and a.object is not None and object_key(a.object).kind_ref == kind else None)

    def clear_failures(self) -> "FakeCache":
        """Let every write succeed again."""
        self._failures.clear()
        return self

    def last_error(self, key: ObjectKey) -> Optional[str]:
        """Why ``key``'s last reconcile failed (its error, or its first failing action), while it keeps failing."""
        return self._last_errors.get(key)

    # ---- the clock

    def with_time(self, rfc3339: str) -> "FakeCache":
        """Set the clock to ``rfc3339`` and return the fake."""
        return self.set_time(rfc3339)

    def set_time(self, rfc3339: str) -> "FakeCache":
        """Set the clock :mod:`wasmloop_sdk.time` reads (RFC 3339, with or without a fraction)."""
        us = _parse_micros(rfc3339)
        if us is None:
            raise ValueError(f"FakeCache: not an RFC 3339 timestamp: {rfc3339!r}")
        self._clock = us
        return self

    def advance(self, seconds: float) -> "FakeCache":
        """Move the clock forward by ``seconds``."""
        self._clock += round(seconds * 1_000_000)
        return self

    def now_micros(self) -> int:
        """Now on the fake's clock, in microseconds since the epoch."""
        return self._clock

    def now_rfc3339(self) -> str:
        """Now on the fake's clock, as a ``metav1.Time`` (whole seconds)."""
        return _format_secs(self._clock // 1_000_000)

    @classmethod
    def for_reconciler(cls, reconciler: Reconciler) -> "FakeCache":
        """A fake for ``reconciler`` (its metadata; :meth:`reconcile` uses it)."""
        return cls(reconciler)

    # ---- loading objects

    def with_(self, obj: Union[Object, list[Object]]) -> "FakeCache":
        """Add one object (or a list, or a ``kind: List``) and return this fake."""
        self.add(obj)
        return self

    def with_json(self, text: str) -> "FakeCache":
        """Add the objects in a JSON document."""
        return self.with_(json.loads(text))

    def with_yaml(self, text: str) -> "FakeCache":
        """Add the objects in a YAML stream (needs PyYAML)."""
        self.add_yaml(text)
        return self

    def with_dir(self, directory: str) -> "FakeCache":
        """Add the objects in every ``*.yaml``, ``*.yml`` and ``*.json`` file of ``directory`` (name order)."""
        for f in sorted(os.listdir(directory)):
            path = os.path.join(directory, f)
            if f.endswith(".json"):
                with open(path, encoding="utf-8") as fh:
                    self.add(json.load(fh))
            elif f.endswith((".yaml", ".yml")):
                with open(path, encoding="utf-8") as fh:
                    self.add_yaml(fh.read())
        return self

    def add_yaml(self, text: str) -> "FakeCache":
        """Add the objects in a YAML stream (needs PyYAML)."""
        try:
            import yaml  # type: ignore[import-untyped]
        except ImportError as e:  # pragma: no cover - depends on the environment
            raise RuntimeError("FakeCache.with_yaml needs PyYAML: pip install 'wasmloop-sdk[testing]'") from e
        for doc in yaml.safe_load_all(text):
            self.add(doc)
        return self

    def add(self, obj: Union[Object, list[Object], None]) -> "FakeCache":
        """Add (or replace) objects: one, a list, or a ``kind: List``. Objects without a uid get
        one; ``managedFields`` is dropped."""
        if obj is None:
            return self
        if isinstance(obj, list):
            for o in obj:
                self.add(o)
        elif obj.get("kind") == "List" and isinstance(obj.get("items"), list):
            for o in obj["items"]:
                self.add(o)
        else:
            self._insert(copy.deepcopy(obj))
        return self

    def _insert(self, obj: Object) -> None:
        key = object_key(obj)
        meta = obj["metadata"]
        meta.pop("managedFields", None)
        if not meta.get("uid"):
            meta["uid"] = f"fake-uid-{self._next_uid}"
            self._next_uid += 1
        self._store.setdefault(key.kind_ref, {})[(key.namespace or "", key.name)] = obj

    def remove(self, key: ObjectKey) -> Optional[Object]:
        """Remove the object with this key (as if deleted), returning it."""
        return self._store.get(key.kind_ref, {}).pop((key.namespace or "", key.name), None)

    def get(self, key: ObjectKey) -> Optional[Object]:
        """The stored object with this key (ignoring grants and selectors), a copy."""
        o = self._store.get(key.kind_ref, {}).get((key.namespace or "", key.name))
        return None if o is None else copy.deepcopy(o)

    def objects(self, kind: KindRef) -> list[Object]:
        """All stored objects of ``kind``, by namespace and name."""
        m = self._store.get(kind, {})
        return [copy.deepcopy(m[k]) for k in sorted(m)]

    # ---- the host's side of reads

    def _grant(self, kind: KindRef) -> Optional[list[Callable[[Object], bool]]]:
        m = self.metadata
        selectors: list[Callable[[Object], bool]] = []
        unrestricted = declared = False

        def note(labels: Optional[str], annotations: Optional[str]) -> None:
            nonlocal unrestricted, declared
            declared = True
            if labels is None and annotations is None:
                unrestricted = True
            else:
                selectors.append(_selection(labels, annotations))

        if m.reconciled == kind:
            note(m.label_selector, m.annotation_selector_)
        for w in m.watches_:
            if w.kind == kind:
                note(w.label_selector, w.annotation_selector_)
        # As the host: an index on a reconciled or watched kind is built on those informers (their
        # selectors apply); only a kind read for its index alone is cached whole.
        if not declared and any(i.kind == kind for i in m.indexes):
            note(None, None)
        if not declared:
            raise HostCacheError("not-granted", f"{kind} is not declared in the metadata of plugin {json.dumps(m.name)} (reconciles, watches or indexes)")
        return None if unrestricted else selectors

    def _visible(self, kind: KindRef, keep: Callable[[Object], bool] = lambda o: True) -> list[Object]:
        selectors = self._grant(kind)
        return [o for o in self.objects(kind) if (selectors is None or any(s(o) for s in selectors)) and keep(o)]

    def _get(self, kind: KindRef, namespace: Optional[str], name: str) -> Optional[Object]:
        selectors = self._grant(kind)
        o = self.get(kind.key(namespace, name))
        if o is not None and (selectors is None or any(s(o) for s in selectors)):
            return o
        return None

    def _list(self, kind: KindRef, namespace: Optional[str], selector: Optional[str]) -> list[Object]:
        match: Callable[[dict[str, str]], bool] = lambda labels: True
        if selector is not None:
            try:
                match = parse_selector(selector)
            except ValueError as e:
                raise HostCacheError("invalid", f"label selector {json.dumps(selector)}: {e}") from None
        return self._visible(
            kind,
            lambda o: (namespace is None or o["metadata"].get("namespace") == namespace) and match(o["metadata"].get("labels") or {}),
        )

    def _by_index(self, kind: KindRef, index: str, value: str) -> list[Object]:
        self._grant(kind)
        values: Callable[[Object], list[str]]
        if index == "namespace":
            values = lambda o: [o["metadata"]["namespace"]] if o["metadata"].get("namespace") else []
        elif index == "owner":

            def values(o: Object) -> list[str]:
                ref = next((r for r in o["metadata"].get("ownerReferences") or [] if r.get("controller") is True), None)
                return [ref["uid"]] if ref and ref.get("uid") else []

        else:
            decl = next((i for i in self.metadata.indexes if i.kind == kind and i.name == index), None)
            if decl is None:
                raise HostCacheError(
                    "unknown-index", f"no index {json.dumps(index)} on {kind}: declare it with Metadata.index (namespace and owner always exist)"
                )
            values = lambda o: index_values(decl.path, o)
        return self._visible(kind, lambda o: value in values(o))

    def _meta(self, kind: KindRef, o: Object) -> dict[str, Any]:
        m = o["metadata"]
        return {
            "namespace": m.get("namespace"),
            "name": m["name"],
            "uid": m.get("uid", ""),
            "resource_version": m.get("resourceVersion", ""),
            "generation": m.get("generation"),
            "creation_timestamp": m.get("creationTimestamp"),
            "deletion_timestamp": m.get("deletionTimestamp"),
            "labels": list((m.get("labels") or {}).items()),
            "annotations": list((m.get("annotations") or {}).items()),
            "owner_references": [
                {
                    "apiVersion": r.get("apiVersion"),
                    "kind": r.get("kind"),
                    "name": r.get("name"),
                    "uid": r.get("uid"),
                    "controller": r.get("controller") is True,
                    "blockOwnerDeletion": r.get("blockOwnerDeletion") is True,
                }
                for r in m.get("ownerReferences") or []
            ],
            "finalizers": list(m.get("finalizers") or []),
            "fields": [None if (v := field_value(o, p)) is None else json.dumps(v) for p in self.metadata.fields_of(kind)],
        }

    def enter(self, f: Callable[[], T]) -> T:
        """Run ``f`` with this fake answering the SDK's cache reads and logs."""
        previous = bind_host(_Host(self))
        try:
            return f()
        finally:
            bind_host(previous)

    # ---- reconciling

    def reconcile(self, key: ObjectKey, reconciler: Optional[Reconciler] = None) -> Outcome:
        """Reconcile ``key`` (reason ``event``); returns the Outcome or raises the ReconcileError."""
        return self.reconcile_request(make_request(key), reconciler)

    def reconcile_request(self, req: Request, reconciler: Optional[Reconciler] = None) -> Outcome:
        """Reconcile a request."""
        r = reconciler or self.reconciler
        if r is None:
            raise ValueError("FakeCache: no reconciler (build the fake with for_reconciler, or pass one)")
        if req.key.kind_ref != self.metadata.reconciled:
            raise ValueError(f"FakeCache: the host only reconciles keys of the reconciled kind {self.metadata.reconciled}")
        if req.last_error is None and req.key in self._last_errors:
            req = dataclasses.replace(req, last_error=self._last_errors[req.key])
        self._current = req.key

        def run() -> Outcome:
            try:
                out = r.reconcile(req)
            except ReconcileError as e:
                failure_parts(e)  # what the component would send: its actions convert (or are dropped)
                raise
            if not isinstance(out, Outcome):
                raise permanent("reconcile must return an Outcome")
            out.into_result()
            to_wit_outcome_checked(out)  # what the component would send: every action converts
            return out

        try:
            result = self.enter(run)
        except ReconcileError as e:
            self._last_errors[req.key] = e.message
            raise
        self._last_errors.pop(req.key, None)  # cleared now; a failing action of this outcome sets it again
        return result

    def mapped_keys(self, related: ObjectKey) -> list[ObjectKey]:
        """The keys of the reconciled kind the host would queue for an event on ``related`` (the
        key of an object in this fake, of a watched kind), through each of the plugin's watches
        of its kind and their mappings: owner, label, same name, namespace, and index (contract
        0.3), after the watch's label and annotation selectors. Test that a change to an object
        a primary only *names* reaches it: ``assert fake.mapped_keys(deployment) == [foo]``."""
        obj = self.get(related)
        if obj is None:
            return []
        m = self.metadata
        primary = m.reconciled
        assert primary is not None
        stored = self.objects(primary)
        # Whether the primary kind is namespaced: as its stored objects are; unknown (none stored yet): as the related object is.
        namespaced = bool(stored[0]["metadata"].get("namespace")) if stored else related.namespace is not None
        keys: list[ObjectKey] = []
        for w in m.watches_:
            if w.kind != related.kind_ref or not _selection(w.label_selector, w.annotation_selector_)(obj):
                continue
            decl = next((i for i in m.indexes if i.kind == primary and i.name == w.mapping.value), None) if w.mapping.tag == "index" else None
            value = w.mapping.index_value
            found = rules.mapped_keys(
                w.mapping.tag,
                w.mapping.value,
                (primary.api_version, primary.kind),
                namespaced,
                obj,
                stored if w.mapping.tag == "index" else [],
                lambda p: index_values(decl.path, p) if decl is not None else [],
                lambda ns, name, o: _lookup(value, ns, name, o) if value is not None else ([], True),
            )
            for k in (ObjectKey(*f) for f in found):
                if k not in keys:
                    keys.append(k)
        return keys

    def execute(self, outcome: Union[Outcome, ReconcileError]) -> None:
        """Carry out the actions as the host would, against the fake: create adds the object
        unless it exists, apply merges it in (a rough stand-in for server-side apply), delete
        removes it (or marks it deleting while it has finalizers), status merge-patches
        ``.status``, patch applies a merge or JSON patch (nothing if a precondition or ``test``
        fails), events are recorded. Given a :class:`ReconcileError`, executes the actions it
        carries (``with_actions``), as the host does with a failure's: none if they are unusable."""
        actions = failure_parts(outcome)[1] if isinstance(outcome, ReconcileError) else outcome.actions
        for a in actions:
            why = next((w for w in (fails(a) for fails in self._failures) if w is not None), None)
            if why is not None:
                # As the host: nothing more of this outcome is sent, and the key's next request says why.
                if self._current is not None:
                    self._last_errors[self._current] = f"{_describe(a)}: {why}"
                return
            if a.type == "create" and a.object is not None:
                # The host's rule for what an action targets: a create the host would refuse fails here too.
                rules.check_target(a.object, "create")
                obj = copy.deepcopy(a.object)
                if not obj["metadata"].get("name"):
                    obj["metadata"]["name"] = f"{obj['metadata']['generateName']}{self._next_uid:05d}"
                    self._next_uid += 1
                obj["metadata"].setdefault("creationTimestamp", self.now_rfc3339())
                if self.get(object_key(obj)) is None:
                    self._insert(obj)
            elif a.type == "apply" and a.object is not None:
                rules.check_target(a.object, "apply")
                current = self.get(object_key(a.object))
                if current:
                    self._insert(rules.merge_into(current, a.object))
                else:
                    created = copy.deepcopy(a.object)
                    created["metadata"].setdefault("creationTimestamp", self.now_rfc3339())
                    self._insert(created)
            elif a.type == "delete" and a.key is not None:
                obj = self.get(a.key)
                if obj and _has_finalizers(obj):
                    obj["metadata"].setdefault("deletionTimestamp", self.now_rfc3339())
                    self._insert(obj)
                else:
                    self.remove(a.key)
            elif a.type == "status" and a.key is not None:
                obj = self.get(a.key)
                if obj is not None:
                    obj["status"] = rules.merge_into(obj.get("status") or {}, a.status)
                    self._insert(obj)
            elif a.type == "patch" and a.key is not None:
                self._patch(a)
            elif a.type == "event":
                self._events.append(a)

    def _patch(self, p: Action) -> None:
        assert p.key is not None
        current = self.get(p.key)
        if current is None:
            return
        pre = p.preconditions or {}
        if not rules.preconditions_hold(pre.get("uid"), pre.get("resource_version"), current):
            return
        patched = FakeCache.patched(p.patch_type or "merge", current, p.body)
        if patched is None:
            return
        if p.status_subresource:
            current["status"] = patched.get("status")
        else:
            status = current.get("status")
            current = patched
            if status is None:
                current.pop("status", None)
            else:
                current["status"] = status
        version = current["metadata"].get("resourceVersion")
        if isinstance(version, str) and version.isdigit():
            current["metadata"]["resourceVersion"] = str(int(version) + 1)
        if current["metadata"].get("deletionTimestamp") is not None and not _has_finalizers(current):
            self.remove(p.key)
        else:
            self._insert(current)

    @staticmethod
    def patched(patch_type: str, before: Any, body: Any) -> Any:
        """``before`` patched as the host and the API server would (``patch_type`` "json" or
        "merge"): None if a ``test`` fails or a path is not in the object (a conflict: nothing
        happens); raises, as the host refuses the outcome, for a patch it does not take (a merge
        patch that is not an object, JSON-patch ``move`` or ``copy``)."""
        try:
            return rules.json_patch(before, body) if patch_type == "json" else rules.merge_patch(before, body)
        except rules.RuleError as e:
            if e.kind in ("test_failed", "does_not_apply"):
                return None
            raise

    def converge(self, key: ObjectKey, max_rounds: int = 10, reconciler: Optional[Reconciler] = None) -> list[Outcome]:
        """Reconcile ``key`` and execute the outcome until a reconcile returns no actions; returns
        the outcomes that had actions. Raises if the reconciler fails (after executing the actions
        its error carries, as the host does) or has not converged. If the last reconcile asked for
        a requeue, the clock moves to it (when the host would reconcile the key again)."""
        done, requeue_ms = self._settle(key, max_rounds, reconciler)
        if requeue_ms is not None:
            self._clock += requeue_ms * 1000
        return done

    def run_until(self, key: ObjectKey, until: str, max_reconciles: int = 100, reconciler: Optional[Reconciler] = None) -> list[Outcome]:
        """Play the host's loop for ``key`` until the clock reaches ``until`` (RFC 3339):
        converge, move the clock to the requeue the converged reconcile asked for, and again, as
        long as that requeue is not after ``until``; then the clock is set to ``until``. Returns
        every outcome that had actions, in order; raises as :meth:`converge` does, or after
        ``max_reconciles`` reconciles in all."""
        end = _parse_micros(until)
        if end is None:
            raise ValueError(f"FakeCache: not an RFC 3339 timestamp: {until!r}")
        every: list[Outcome] = []
        left = max_reconciles
        while True:
            done, requeue_ms = self._settle(key, left, reconciler)
            left -= len(done) + 1
            every.extend(done)
            nxt = None if requeue_ms is None else self._clock + requeue_ms * 1000
            if nxt is not None and nxt <= end and left > 0:
                self._clock = nxt
            else:
                self._clock = max(end, self._clock)
                return every

    def _settle(self, key: ObjectKey, max_rounds: int, reconciler: Optional[Reconciler]) -> tuple[list[Outcome], Optional[int]]:
        """Reconcile and execute until no actions are left: the outcomes that had actions, and the
        last outcome's requeue (ms)."""
        done: list[Outcome] = []
        for _ in range(max_rounds):
            try:
                out = self.reconcile(key, reconciler)
            except ReconcileError as e:
                self.execute(e)
                raise AssertionError(f"reconcile of {key} failed: {failure_parts(e)[0]}") from e
            if out.is_empty():
                return done, out.requeue_after_ms
            self.execute(out)
            failed = self.last_error(key)
            if failed is not None:
                raise AssertionError(f"an action of the reconcile of {key} failed: {failed} (the host retries it with backoff)")
            done.append(out)
        raise AssertionError(f"{key} did not converge in {max_rounds} reconciles; last outcome: {done[-1] if done else None!r}")

    def logs(self) -> list[tuple[str, str]]:
        """``(level, message)`` logged through the SDK while this fake was bound."""
        return list(self._logs)

    def events(self) -> list[Action]:
        """Events recorded by :meth:`execute`."""
        return list(self._events)


def _describe(a: Action) -> str:
    """An action as the host names it in ``last_error``: ``<verb> <object>`` (a generateName as ``prefix*``)."""
    if a.type in ("create", "apply") and a.object is not None:
        m = a.object.get("metadata") or {}
        name = m.get("name") or f"{m.get('generateName') or ''}*"
        parts = (a.object.get("apiVersion"), a.object.get("kind"), m.get("namespace"), name)
        return f"{a.type} " + "/".join(p for p in parts if p)
    verb = {"status": "update-status", "patch": "update-status" if a.status_subresource else "patch"}.get(a.type, a.type)
    return f"{verb} {a.key}"
