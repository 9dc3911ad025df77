"""The SDK on a FakeCache: reads like the host's, outcome builders, errors, execute/converge, and
the build's view of what the host provides."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from wasmloop_sdk import (
    CacheError, EventType, IndexValue, KindRef, Mapping, Metadata, Outcome, ReconcileError, Watch, cache, controller_ref,
    has_finalizer, is_deleting, kinds, log, object_key, permanent, request, transient, with_context,
)
from wasmloop_sdk.guest import failure_parts
from wasmloop_sdk.build import PROVIDED, component_imports
from wasmloop_sdk.testing import FakeCache

ROOT = Path(__file__).resolve().parents[3]

CLUSTER = """
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
  containers: [{name: c, image: nginx}]
status: {phase: Running}
---
apiVersion: v1
kind: Pod
metadata: {name: p2, namespace: team-a, labels: {app: db}}
spec: {nodeName: n2, containers: [{name: c, image: "postgres:16"}]}
---
apiVersion: v1
kind: Secret
metadata: {name: s, namespace: team-a}
"""


class Pods:
    def metadata(self) -> Metadata:
        return (
            Metadata("pods", "0.1.0")
            .reconciles(kinds.NAMESPACE)
            .watches(kinds.POD, Mapping.NAMESPACE)
            .index(kinds.POD, "node", "spec.nodeName")
            .index(kinds.POD, "image", "spec.containers.image")
            .field(kinds.POD, "status.phase")
        )

    def reconcile(self, req):  # type: ignore[no-untyped-def]
        pods = cache.by_index(kinds.POD, "namespace", req.key.name)
        log.info(f"{len(pods)} pods")
        return Outcome().status_key(req.key, {"pods": len(pods)})


def names(objs: list[dict]) -> list[str]:  # type: ignore[type-arg]
    return [o["metadata"]["name"] for o in objs]


def test_reads_are_limited_to_declared_kinds_selectors_and_indexes() -> None:
    fake = FakeCache.for_reconciler(Pods()).with_yaml(CLUSTER)

    def reads() -> None:
        assert cache.get(kinds.NAMESPACE, None, "team-a")["metadata"]["uid"] == "ns-a"  # type: ignore[index]
        assert cache.get(kinds.NAMESPACE, None, "nope") is None
        assert names(cache.list(kinds.POD, namespace="team-a")) == ["p1", "p2"]
        assert names(cache.list(kinds.POD, selector="app in (web,api)")) == ["p1"]
        assert names(cache.list(kinds.POD, selector="app!=web")) == ["p2"]
        assert names(cache.owned_by(kinds.POD, "rs-1")) == ["p1"]
        assert names(cache.by_index(kinds.POD, "node", "n2")) == ["p2"]
        assert names(cache.by_index(kinds.POD, "image", "nginx")) == ["p1"]
        with pytest.raises(CacheError) as e:
            cache.get(kinds.SECRET, "team-a", "s")
        assert e.value.tag == "not-granted" and e.value.is_transient
        with pytest.raises(CacheError, match="declare it with Metadata.index"):
            cache.by_index(kinds.POD, "nope", "x")
        with pytest.raises(CacheError) as e:
            cache.list(kinds.POD, selector="a in (")
        assert e.value.tag == "invalid"
        metas = cache.list_meta(kinds.POD, namespace="team-a")
        assert metas[0].field(0) == "Running" and metas[1].field(0) is None
        assert metas[0].metadata["labels"] == {"app": "web"}
        assert metas[0].metadata["ownerReferences"][0]["controller"] is True
        assert metas[0].key() == kinds.POD.key("team-a", "p1")
        assert cache.get_meta(kinds.NAMESPACE, None, "team-a").metadata["uid"] == "ns-a"  # type: ignore[union-attr]
        assert [m.metadata["name"] for m in cache.owned_by_meta(kinds.POD, "rs-1")] == ["p1"]

    fake.enter(reads)
    out = fake.reconcile(kinds.NAMESPACE.key(None, "team-a"))
    assert out.status_updates() == [(kinds.NAMESPACE.key(None, "team-a"), {"pods": 2})]
    assert fake.logs() == [("info", "2 pods")]


def test_watch_selectors_limit_what_is_cached() -> None:
    meta = Metadata("sel", "0").reconciles(kinds.NAMESPACE).watch(Watch(kinds.POD, Mapping.NAMESPACE).selector("app=web"))
    fake = FakeCache(meta).with_yaml(CLUSTER)
    assert fake.enter(lambda: names(cache.list(kinds.POD))) == ["p1"]
    with pytest.raises(ValueError, match="invalid path"):
        FakeCache(Metadata("x", "0").reconciles(kinds.NAMESPACE).index(kinds.POD, "bad", "spec..x"))
    with pytest.raises(ValueError, match="not a kind the plugin"):
        FakeCache(Metadata("x", "0").reconciles(kinds.NAMESPACE).field(kinds.POD, "spec"))


def test_outcome_builders_check_their_objects() -> None:
    owner = {"apiVersion": "apps/v1", "kind": "ReplicaSet", "metadata": {"name": "rs", "namespace": "shop", "uid": "u1"}}
    out = (
        Outcome()
        .create_owned(owner, {"apiVersion": "v1", "kind": "Pod", "metadata": {"generateName": "rs-"}})
        .apply({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c", "namespace": "shop"}})
        .delete({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "old", "namespace": "shop", "uid": "u2"}})
        .status(owner, {"replicas": 1})
        .event(owner, "normal", "Scaled", "up")
        .patch(owner, {"metadata": {"labels": {"a": "b"}}})
        .requeue_after(1.5)
    )
    assert len(out.actions) == 6 and out.requeue_after_ms == 1500
    pod = out.created()[0]
    assert pod["metadata"]["namespace"] == "shop"
    assert pod["metadata"]["ownerReferences"] == [controller_ref(owner)]
    assert out.deleted() == [kinds.POD.key("shop", "old")]
    assert out.patches()[0].preconditions["uid"] == "u1"
    assert out.into_result() is out
    bad = Outcome().apply({"kind": "ConfigMap", "metadata": {"name": "x"}}).create({"apiVersion": "v1", "kind": "Pod", "metadata": {}})
    with pytest.raises(ReconcileError, match="invalid action: apply: the object has no apiVersion") as e:
        bad.into_result()
    assert e.value.kind == "permanent"
    with pytest.raises(ReconcileError, match="has no metadata.uid"):
        Outcome().create_owned({"apiVersion": "v1", "kind": "X", "metadata": {"name": "o"}}, {}).into_result()
    with pytest.raises(ReconcileError, match="expected a JSON object"):
        Outcome().status_key(kinds.POD.key("a", "b"), "nope").into_result()  # type: ignore[arg-type]
    with pytest.raises(ReconcileError, match="empty reason"):
        Outcome().event(owner, "normal", "", "m").into_result()
    assert Outcome().requeue_after(5).is_empty(), "a requeue alone changes nothing"


def test_finalizers_and_deletion_checks() -> None:
    obj = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c", "namespace": "n", "uid": "u", "finalizers": ["a/b"], "deletionTimestamp": "2024-01-01T00:00:00Z"}}
    assert is_deleting(obj) and has_finalizer(obj, "a/b") and not has_finalizer(obj, "x")
    assert not Outcome().add_finalizer(obj, "a/b").actions
    rm = Outcome().remove_finalizer(obj, "a/b").patches()[0]
    assert rm.body == [{"op": "test", "path": "/metadata/finalizers/0", "value": "a/b"}, {"op": "remove", "path": "/metadata/finalizers/0"}]
    fake = FakeCache(Metadata("f", "0").reconciles(kinds.CONFIG_MAP)).with_(obj)
    fake.execute(Outcome().remove_finalizer(obj, "a/b"))
    assert fake.get(object_key(obj)) is None, "the last finalizer removed ends the deletion"


def test_errors_and_context() -> None:
    assert transient("later").is_transient and not permanent("never").is_transient

    def fail() -> None:
        raise permanent("gone")

    with pytest.raises(ReconcileError, match="reading: gone") as e:
        with_context("reading", fail)
    assert e.value.kind == "permanent"
    with pytest.raises(ReconcileError, match="reading: boom"):
        with_context("reading", lambda: 1 / 0 if False else (_ for _ in ()).throw(RuntimeError("boom")))
    assert request(kinds.NAMESPACE.key(None, "a")).reason == "event"


def test_execute_and_converge_play_the_hosts_part() -> None:
    class Cfg:
        def metadata(self) -> Metadata:
            return Metadata("cfg", "0").reconciles(kinds.NAMESPACE).watches(kinds.CONFIG_MAP, Mapping.NAMESPACE)

        def reconcile(self, req):  # type: ignore[no-untyped-def]
            cm = cache.get(kinds.CONFIG_MAP, req.key.name, "c")
            want = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c", "namespace": req.key.name}, "data": {"a": "1"}}
            return Outcome().requeue_after(1) if cm and cm.get("data", {}).get("a") == "1" else Outcome().apply(want)

    fake = FakeCache.for_reconciler(Cfg()).with_({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "team-a"}})
    assert len(fake.converge(kinds.NAMESPACE.key(None, "team-a"))) == 1
    cm = fake.get(kinds.CONFIG_MAP.key("team-a", "c"))
    assert cm is not None and cm["data"]["a"] == "1" and cm["metadata"]["uid"].startswith("fake-uid-")
    fake.execute(Outcome().event_key(kinds.NAMESPACE.key(None, "team-a"), "warning", "R", "m"))
    assert [e.reason for e in fake.events()] == ["R"]

    class Never(Cfg):
        n = 0

        def reconcile(self, req):  # type: ignore[no-untyped-def]
            Never.n += 1
            return Outcome().status_key(req.key, {"n": Never.n})

    with pytest.raises(AssertionError, match="did not converge in 3"):
        FakeCache(Never()).with_({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "x"}}).converge(kinds.NAMESPACE.key(None, "x"), 3)


# ---- contract 0.3: index mappings, annotation selectors, failures carrying actions

FOO = KindRef("example.com/v1", "Foo")


class Namer:
    def metadata(self) -> Metadata:
        return (
            Metadata("namer", "0")
            .reconciles(FOO)
            .annotation_selector("!example.com/skip")
            .named_by(kinds.DEPLOYMENT, "deployment", "spec.deploymentName", IndexValue.NAME)
            .named_by(kinds.CONFIG_MAP, "source", "spec.source", IndexValue.NAMESPACED_NAME)
            .named_by(kinds.SERVICE, "services", "spec.services", IndexValue.field("metadata.labels.app"))
            .watch(Watch(kinds.SECRET, Mapping.SAME_NAME).annotation_selector("example.com/managed=true"))
        )

    def reconcile(self, req):  # type: ignore[no-untyped-def]
        foo = cache.get_key(req.key)
        if foo is None:
            raise permanent("gone")
        if (foo["metadata"].get("labels") or {}).get("broken"):
            say = Outcome().event(foo, EventType.WARNING, "Broken", "cannot work with this").status(foo, {"ok": False})
            raise transient("broken on purpose").with_actions(say)
        return Outcome()


NAMER_FIXTURE = """
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
apiVersion: example.com/v1
kind: Foo
metadata: {name: f3, namespace: a, uid: f3, annotations: {example.com/skip: "yes"}}
spec: {deploymentName: web}
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
"""


def test_named_by_declares_the_index_and_the_index_mapping() -> None:
    m = Namer().metadata()
    assert [(i.kind, i.name, i.path) for i in m.indexes][0] == (FOO, "deployment", "spec.deploymentName")
    assert m.watches_[0].mapping == Mapping.index("deployment", IndexValue.NAME)
    assert m.watches_[2].mapping.index_value == IndexValue.field("metadata.labels.app")
    with pytest.raises(ValueError, match="call reconciles"):
        Metadata("x", "0").named_by(kinds.POD, "i", "spec.x", IndexValue.NAME)
    with pytest.raises(ValueError, match='names index "nope", which is not declared on example.com/v1/Foo'):
        FakeCache(Metadata("x", "0").reconciles(FOO).watches(kinds.DEPLOYMENT, Mapping.index("nope", IndexValue.NAME)))
    with pytest.raises(ValueError, match="the index mapping's field"):
        FakeCache(Metadata("x", "0").reconciles(FOO).named_by(kinds.POD, "i", "spec.x", IndexValue.field("spec..x")))
    with pytest.raises(ValueError, match="invalid selector"):
        FakeCache(Metadata("x", "0").reconciles(FOO).annotation_selector("a in ("))


def test_index_mappings_reach_the_primaries_that_name_an_object_as_the_host_maps_them() -> None:
    fake = FakeCache.for_reconciler(Namer()).with_yaml(NAMER_FIXTURE)
    # By name: only the Foos in the Deployment's namespace.
    assert fake.mapped_keys(kinds.DEPLOYMENT.key("a", "web")) == [FOO.key("a", "f1"), FOO.key("a", "f3")]
    # By namespace/name: Foos anywhere that name the ConfigMap.
    assert fake.mapped_keys(kinds.CONFIG_MAP.key("shared", "cfg")) == [FOO.key("a", "f1"), FOO.key("b", "f2")]
    # By a field of the related object, in its namespace.
    assert fake.mapped_keys(kinds.SERVICE.key("b", "s")) == [FOO.key("b", "f2")]
    # An object no primary names maps to nothing; an unannotated Secret is not even cached.
    fake.add_yaml("apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: db, namespace: a}")
    assert fake.mapped_keys(kinds.DEPLOYMENT.key("a", "db")) == []
    assert fake.mapped_keys(kinds.SECRET.key("a", "f1")) == [FOO.key("a", "f1")]
    assert fake.mapped_keys(kinds.SECRET.key("b", "f2")) == []
    assert fake.mapped_keys(kinds.SECRET.key("b", "missing")) == []

    assert fake.enter(lambda: names(cache.list(kinds.SECRET))) == ["f1"], "the annotation selector limits what is cached"
    # The other mappings, as the host's.
    other = FakeCache(
        Metadata("o", "0").reconciles(kinds.REPLICA_SET).owns(kinds.POD).watches(kinds.CONFIG_MAP, Mapping.label("app")).watches(kinds.SECRET, Mapping.SAME_NAME)
    ).with_yaml(CLUSTER + "\n---\napiVersion: v1\nkind: ConfigMap\nmetadata: {name: c, namespace: team-a, labels: {app: web}}\n")
    assert other.mapped_keys(kinds.POD.key("team-a", "p1")) == [kinds.REPLICA_SET.key("team-a", "rs")]
    assert other.mapped_keys(kinds.POD.key("team-a", "p2")) == []
    assert other.mapped_keys(kinds.CONFIG_MAP.key("team-a", "c")) == [kinds.REPLICA_SET.key("team-a", "web")]
    assert other.mapped_keys(kinds.SECRET.key("team-a", "s")) == [kinds.REPLICA_SET.key("team-a", "s")]
    assert FakeCache.for_reconciler(Pods()).with_yaml(CLUSTER).mapped_keys(kinds.POD.key("team-a", "p2")) == [kinds.NAMESPACE.key(None, "team-a")]


def test_annotation_selectors_on_the_reconciled_kind_limit_what_is_cached() -> None:
    fake = FakeCache(Metadata("a", "0").reconciles(kinds.CONFIG_MAP).annotation_selector("example.com/managed=true")).with_(
        [
            {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "yes", "namespace": "n", "annotations": {"example.com/managed": "true"}}},
            {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "no", "namespace": "n"}},
        ]
    )
    assert fake.enter(lambda: names(cache.list(kinds.CONFIG_MAP))) == ["yes"]
    assert fake.enter(lambda: cache.get(kinds.CONFIG_MAP, "n", "no")) is None
    # An index on the reconciled kind is built on its informer, as the host does: the selector still applies.
    meta = Metadata("a", "0").reconciles(kinds.CONFIG_MAP).annotation_selector("example.com/managed=true").index(kinds.CONFIG_MAP, "by-app", "labels.app")
    indexed = FakeCache(meta).with_(
        [
            {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "yes", "namespace": "n", "labels": {"app": "x"}, "annotations": {"example.com/managed": "true"}}},
            {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "no", "namespace": "n", "labels": {"app": "x"}}},
        ]
    )
    assert indexed.enter(lambda: names(cache.list(kinds.CONFIG_MAP))) == ["yes"]
    assert indexed.enter(lambda: names(cache.by_index(kinds.CONFIG_MAP, "by-app", "x"))) == ["yes"]


def test_a_failure_carries_its_actions_and_execute_and_converge_carry_them_out() -> None:
    key = FOO.key("a", "f1")
    e = transient("quota exceeded").with_actions(Outcome().event_key(key, EventType.WARNING, "QuotaExceeded", "retrying").requeue_after(5))
    assert e.actions is not None and len(e.actions.actions) == 1
    assert e.context("reconciling").actions is e.actions, "context keeps the actions"
    error, actions = failure_parts(e)
    assert error is e and [a.type for a in actions] == ["event"]
    assert failure_parts(permanent("bad spec"))[1] == []
    assert failure_parts(ValueError("x"))[0].message == "uncaught exception: ValueError: x"
    # A list of actions works too; unusable ones are not sent, and the message says so.
    assert [a.type for a in failure_parts(transient("t").with_actions(Outcome().status_key(key, {"a": 1}).actions))[1]] == ["status"]
    error, actions = failure_parts(transient("t").with_actions(Outcome().apply({"kind": "X", "metadata": {"name": "x"}})))
    assert (error.message, actions) == ("its actions were not sent (invalid action: apply: the object has no apiVersion): t", [])

    fake = FakeCache.for_reconciler(Namer()).with_yaml(NAMER_FIXTURE)
    broken = fake.get(key)
    assert broken is not None
    broken["metadata"]["labels"] = {"broken": "yes"}
    fake.add(broken)
    with pytest.raises(ReconcileError, match="broken on purpose") as raised:
        fake.reconcile(key)
    assert raised.value.is_transient and raised.value.actions is not None and len(raised.value.actions.actions) == 2
    with pytest.raises(AssertionError, match="reconcile of example.com/v1/Foo/a/f1 failed: transient: broken on purpose"):
        fake.converge(key, 3)
    assert [ev.reason for ev in fake.events()] == ["Broken"]
    assert (fake.get(key) or {}).get("status") == {"ok": False}
    fake.execute(transient("again").with_actions(Outcome().event_key(key, EventType.WARNING, "Again", "m")))
    assert [ev.reason for ev in fake.events()] == ["Broken", "Again"]


def test_the_sdks_wit_is_the_repositorys() -> None:
    assert (ROOT / "sdk/python/wasmloop_sdk/wit/controller.wit").read_text() == (ROOT / "wit/controller.wit").read_text()


def test_the_builds_list_of_provided_imports_is_the_hosts() -> None:
    rust = (ROOT / "host/src/plugin/imports.rs").read_text()
    block = re.search(r"pub const PROVIDED: &\[&str\] = &\[([\s\S]*?)\];", rust)
    assert block is not None
    assert re.findall(r'"([^"]+)"', block[1]) == PROVIDED
    with pytest.raises(ValueError, match="core module"):
        component_imports(b"\0asm\x01\0\0\0")


def test_generated_bindings_convert_both_ways(tmp_path: Path) -> None:
    """With componentize-py's real bindings of the WIT (generated here), the export converts
    metadata, requests, outcomes and errors."""
    import shutil
    import subprocess
    import sys

    tool = shutil.which("componentize-py") or str(Path(sys.executable).parent / "componentize-py")
    if not Path(tool).exists():
        pytest.skip("componentize-py is not installed")
    subprocess.run([tool, "-d", str(ROOT / "wit/controller.wit"), "-w", "controller", "bindings", str(tmp_path)], check=True, capture_output=True)
    sys.path.insert(0, str(tmp_path))
    try:
        from componentize_py_types import Err  # type: ignore[import-not-found]
        from wit_world.imports import cache as wcache, log as wlog, types  # type: ignore[import-not-found]

        from wasmloop_sdk.guest import WitBindings, export_plugin

        fake = FakeCache.for_reconciler(Pods()).with_yaml(CLUSTER)
        # The bindings' import functions are stubs: serve them from the fake.
        fake_host = fake.enter(lambda: __import__("wasmloop_sdk._host", fromlist=["host"]).host())
        wcache.by_index = lambda k, i, v: fake_host.cache.by_index(kinds.POD if k.kind == "Pod" else kinds.NAMESPACE, i, v)
        logged: list[tuple[object, str]] = []
        wlog.log = lambda level, message: logged.append((level, message))
        plugin = export_plugin(Pods(), WitBindings(types, wcache, wlog, Err))
        m = plugin.metadata()
        assert m.reconciles == types.KindRef(api_version="v1", kind="Namespace")
        assert m.watches[0].mapping == types.Mapping_Namespace() and m.watches[0].selector is None
        assert m.watches[0].annotation_selector is None and m.annotation_selector is None
        req = types.Request(key=types.ObjectKey(api_version="v1", kind="Namespace", namespace=None, name="team-a"), reason=types.Reason_Event(), last_error=None)
        out = plugin.reconcile(req)
        assert isinstance(out.actions[0], types.Action_UpdateStatus)
        assert json.loads(out.actions[0].value.status) == {"pods": 2}
        assert out.requeue_after_ms is None
        assert logged == [(wlog.Level.INFO, "2 pods")]

        class Failing(Pods):
            def reconcile(self, req):  # type: ignore[no-untyped-def]
                raise permanent("no")

        with pytest.raises(Err) as e:
            export_plugin(Failing(), WitBindings(types, wcache, wlog, Err)).reconcile(req)
        assert e.value.value == types.Failure(error=types.ReconcileError_Permanent("no"), actions=[])

        # Contract 0.3: a failure carries its actions; index mappings and annotation selectors.
        class Carrying(Pods):
            def reconcile(self, req):  # type: ignore[no-untyped-def]
                raise transient("later").with_actions(Outcome().event_key(req.key, EventType.WARNING, "Later", "waiting"))

        with pytest.raises(Err) as e:
            export_plugin(Carrying(), WitBindings(types, wcache, wlog, Err)).reconcile(req)
        failure = e.value.value
        assert failure.error == types.ReconcileError_Transient("later")
        assert [type(a) for a in failure.actions] == [types.Action_Event] and failure.actions[0].value.reason == "Later"
        m = export_plugin(Namer(), WitBindings(types, wcache, wlog, Err)).metadata()
        assert m.annotation_selector == "!example.com/skip"
        assert m.watches[0].mapping == types.Mapping_Index(types.IndexMapping(index="deployment", value=types.IndexValue_Name()))
        assert m.watches[1].mapping == types.Mapping_Index(types.IndexMapping(index="source", value=types.IndexValue_NamespacedName()))
        assert m.watches[2].mapping == types.Mapping_Index(types.IndexMapping(index="services", value=types.IndexValue_Field("metadata.labels.app")))
        assert m.watches[3].annotation_selector == "example.com/managed=true" and m.watches[3].mapping == types.Mapping_SameName()
        assert m.indexes[0] == types.Index(kind=types.KindRef(api_version="example.com/v1", kind="Foo"), name="deployment", path="spec.deploymentName")
    finally:
        sys.path.remove(str(tmp_path))
