"""namespace-config, in Python: for every Namespace labelled ``wasmloop.dev/config=<profile>``,
keeps a ConfigMap ``wasmloop-config`` in it (server-side applied), and deletes that ConfigMap
when the label goes away. A port of plugins/namespace-config (Rust): same metadata, same actions
on the same objects (tests/tests/polyglot.rs checks it).

The ConfigMap's data holds the profile, ``managed-by: wasmloop`` and ``profile-namespaces``, the
number of Namespaces using the same profile, read through the declared label index
``config-profile``. It watches ConfigMaps labelled ``app.kubernetes.io/managed-by=wasmloop`` with
the ``namespace`` mapping: an edit or deletion of the ConfigMap reconciles its Namespace.
"""

from __future__ import annotations

import json
from typing import Any, Optional

from wasmloop_sdk import EventType, Mapping, Metadata, Object, Outcome, Request, Watch, cache, is_deleting, kinds, label, with_context

PROFILE_LABEL = "wasmloop.dev/config"
"""The Namespace label naming the profile."""
PROFILE_INDEX = "config-profile"
"""The declared index over PROFILE_LABEL on Namespaces."""
CONFIG_MAP_NAME = "wasmloop-config"
"""The ConfigMap kept in each labelled Namespace."""
MANAGED_BY_LABEL = "app.kubernetes.io/managed-by"
"""The label marking ConfigMaps this plugin manages (and the only ones it watches)."""
MANAGED_BY = "wasmloop"
REFRESH_SECONDS = 300
"""How often a labelled Namespace is reconciled to refresh ``profile-namespaces``."""


def _is_terminating(ns: Object) -> bool:
    return is_deleting(ns) or (ns.get("status") or {}).get("phase") == "Terminating"


def desired_config_map(namespace: str, profile: str, profile_namespaces: int) -> Object:
    """The ConfigMap as this plugin wants it (the whole of its intent, for server-side apply)."""
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {
            "name": CONFIG_MAP_NAME,
            "namespace": namespace,
            "labels": {MANAGED_BY_LABEL: MANAGED_BY, PROFILE_LABEL: profile},
        },
        "data": {"profile": profile, "managed-by": MANAGED_BY, "profile-namespaces": str(profile_namespaces)},
    }


def _is_up_to_date(current: Object, desired: Object) -> bool:
    """Whether ``current`` already has the desired data and labels (extra labels are someone else's)."""
    labels: dict[str, Any] = (current.get("metadata") or {}).get("labels") or {}
    labels_ok = all(labels.get(k) == v for k, v in desired["metadata"]["labels"].items())
    return labels_ok and current.get("data") == desired.get("data")


class NamespaceConfig:
    """The reconciler."""

    def metadata(self) -> Metadata:
        return (
            Metadata("namespace-config", "0.1.0")
            .reconciles(kinds.NAMESPACE)
            .watch(Watch(kinds.CONFIG_MAP, Mapping.NAMESPACE).selector(f"{MANAGED_BY_LABEL}={MANAGED_BY}"))
            .index(kinds.NAMESPACE, PROFILE_INDEX, f"labels.{PROFILE_LABEL}")
        )

    def reconcile(self, req: Request) -> Outcome:
        name = req.key.name
        # Gone or terminating: the Namespace's deletion removes the ConfigMap.
        ns = with_context("reading the Namespace", lambda: cache.get_key(req.key))
        if ns is None or _is_terminating(ns):
            return Outcome()
        current: Optional[Object] = with_context("reading the ConfigMap", lambda: cache.get(kinds.CONFIG_MAP, name, CONFIG_MAP_NAME))

        profile = label(ns, PROFILE_LABEL)
        if not profile:
            # Unlabelled (or an empty profile): our ConfigMap must go. Only ConfigMaps carrying our
            # managed-by label are cached, so this never deletes someone else's.
            if current is None:
                return Outcome()
            return (
                Outcome()
                .delete(current)
                .event(ns, EventType.NORMAL, "ConfigRemoved", f"label {PROFILE_LABEL} removed: deleted ConfigMap {CONFIG_MAP_NAME}")
            )

        members = with_context("listing the profile's Namespaces", lambda: cache.by_index(kinds.NAMESPACE, PROFILE_INDEX, profile))
        count = sum(1 for n in members if not _is_terminating(n))
        desired = desired_config_map(name, profile, count)

        out = Outcome()
        if current is None or not _is_up_to_date(current, desired):
            out.apply(desired)
            previous = ((current or {}).get("data") or {}).get("profile")
            if previous != profile:
                out.event(
                    ns,
                    EventType.NORMAL,
                    "ConfigApplied",
                    f"applied profile {json.dumps(profile)} to ConfigMap {CONFIG_MAP_NAME} ({count} namespaces use it)",
                )
        return out.requeue_after(REFRESH_SECONDS)


reconciler = NamespaceConfig()
