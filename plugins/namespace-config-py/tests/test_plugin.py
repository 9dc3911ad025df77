"""The Rust plugin's tests (plugins/namespace-config/src/tests.rs), on the SDK's FakeCache."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "src"))

from plugin import CONFIG_MAP_NAME, PROFILE_INDEX, PROFILE_LABEL, REFRESH_SECONDS, reconciler  # noqa: E402
from wasmloop_sdk import Mapping, ObjectKey, kinds  # noqa: E402
from wasmloop_sdk.testing import FakeCache  # noqa: E402

CLUSTER = """
apiVersion: v1
kind: Namespace
metadata: {name: team-a, labels: {wasmloop.dev/config: gold}}
---
apiVersion: v1
kind: Namespace
metadata: {name: team-b, labels: {wasmloop.dev/config: gold}}
---
apiVersion: v1
kind: Namespace
metadata: {name: team-c, labels: {wasmloop.dev/config: silver}}
---
apiVersion: v1
kind: Namespace
metadata: {name: team-d, labels: {wasmloop.dev/config: gold}}
status: {phase: Terminating}
---
apiVersion: v1
kind: Namespace
metadata: {name: plain}
"""


def ns(name: str) -> ObjectKey:
    return kinds.NAMESPACE.key(None, name)


def cm_key(namespace: str) -> ObjectKey:
    return kinds.CONFIG_MAP.key(namespace, CONFIG_MAP_NAME)


@pytest.fixture
def fake() -> FakeCache:
    return FakeCache.for_reconciler(reconciler).with_yaml(CLUSTER)


def set_profile(f: FakeCache, name: str, profile: str | None) -> None:
    n = f.get(ns(name))
    assert n is not None
    n["metadata"]["labels"] = {} if profile is None else {PROFILE_LABEL: profile}
    f.add(n)


def test_metadata_declares_the_configmap_watch_and_label_index() -> None:
    m = reconciler.metadata()
    assert m.reconciled == kinds.NAMESPACE
    assert m.watches_[0].kind == kinds.CONFIG_MAP
    assert m.watches_[0].mapping == Mapping.NAMESPACE
    assert m.watches_[0].label_selector == "app.kubernetes.io/managed-by=wasmloop"
    assert m.indexes[0].name == PROFILE_INDEX
    assert m.indexes[0].path == "labels.wasmloop.dev/config"


def test_applies_the_config_map_with_the_profile_and_its_size(fake: FakeCache) -> None:
    out = fake.reconcile(ns("team-a"))
    assert out.applied() == [
        {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {
                "name": "wasmloop-config",
                "namespace": "team-a",
                "labels": {"app.kubernetes.io/managed-by": "wasmloop", "wasmloop.dev/config": "gold"},
            },
            # team-a and team-b; team-d is terminating.
            "data": {"profile": "gold", "managed-by": "wasmloop", "profile-namespaces": "2"},
        }
    ]
    ev = out.events()[0]
    assert (ev.regarding, ev.event_type, ev.reason) == (ns("team-a"), "normal", "ConfigApplied")
    assert ev.message == 'applied profile "gold" to ConfigMap wasmloop-config (2 namespaces use it)'
    assert out.requeue_after_ms == REFRESH_SECONDS * 1000


def test_converged_namespaces_write_nothing(fake: FakeCache) -> None:
    assert len(fake.converge(ns("team-c"), 3)) == 1
    assert fake.get(cm_key("team-c"))["data"]["profile-namespaces"] == "1"  # type: ignore[index]
    assert fake.reconcile(ns("team-c")).is_empty()
    # Labels added to the ConfigMap by someone else do not count as drift.
    cm = fake.get(cm_key("team-c"))
    assert cm is not None
    cm["metadata"]["labels"]["extra"] = "x"
    fake.add(cm)
    assert fake.reconcile(ns("team-c")).is_empty()


def test_profile_size_changes_update_data_without_an_event(fake: FakeCache) -> None:
    fake.converge(ns("team-c"), 3)
    set_profile(fake, "plain", "silver")
    out = fake.reconcile(ns("team-c"))
    assert len(out.actions) == 1
    assert out.applied()[0]["data"]["profile-namespaces"] == "2"


def test_a_profile_change_reapplies_with_an_event(fake: FakeCache) -> None:
    fake.converge(ns("team-a"), 3)
    set_profile(fake, "team-a", "silver")
    out = fake.reconcile(ns("team-a"))
    assert out.applied()[0]["data"]["profile"] == "silver"
    assert out.applied()[0]["metadata"]["labels"][PROFILE_LABEL] == "silver"
    assert out.events()[0].reason == "ConfigApplied"


def test_edited_or_deleted_config_maps_are_restored(fake: FakeCache) -> None:
    fake.converge(ns("team-b"), 3)
    cm = fake.get(cm_key("team-b"))
    assert cm is not None
    cm["data"]["profile"] = "hacked"
    fake.add(cm)
    assert fake.reconcile(ns("team-b")).applied()[0]["data"]["profile"] == "gold"
    fake.remove(cm_key("team-b"))
    assert len(fake.reconcile(ns("team-b")).applied()) == 1


def test_removing_the_label_deletes_the_config_map(fake: FakeCache) -> None:
    fake.converge(ns("team-a"), 3)
    set_profile(fake, "team-a", None)
    out = fake.reconcile(ns("team-a"))
    assert out.deleted() == [cm_key("team-a")]
    assert out.events()[0].reason == "ConfigRemoved"
    assert out.requeue_after_ms is None
    fake.execute(out)
    assert fake.get(cm_key("team-a")) is None
    assert fake.reconcile(ns("team-a")).is_empty()


def test_an_empty_profile_counts_as_no_label(fake: FakeCache) -> None:
    fake.converge(ns("team-a"), 3)
    set_profile(fake, "team-a", "")
    assert len(fake.reconcile(ns("team-a")).deleted()) == 1


def test_config_maps_it_does_not_manage_are_left_alone(fake: FakeCache) -> None:
    # Not labelled managed-by=wasmloop: outside the watch selector, so not in the cache.
    fake.add({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": CONFIG_MAP_NAME, "namespace": "plain"}, "data": {"mine": "yes"}})
    assert fake.reconcile(ns("plain")).is_empty()
    # Nor does an event on it reconcile anything; one on ours reconciles its Namespace.
    assert fake.mapped_keys(cm_key("plain")) == []
    fake.converge(ns("team-a"), 3)
    assert fake.mapped_keys(cm_key("team-a")) == [ns("team-a")]


def test_gone_and_terminating_namespaces_need_nothing(fake: FakeCache) -> None:
    assert fake.reconcile(ns("nope")).is_empty()
    out = fake.reconcile(ns("team-d"))
    assert out.is_empty()
    assert out.requeue_after_ms is None


def test_apply_is_used_not_create(fake: FakeCache) -> None:
    assert all(a.type != "create" for a in fake.reconcile(ns("team-a")).actions)
