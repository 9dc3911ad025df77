"""The host the SDK talks to: the contract's ``cache`` and ``log`` imports inside a component
(bound by the entry ``python -m wasmloop_sdk.build`` generates), or a FakeCache in unit tests.

A host is an object with ``cache`` and ``log`` attributes shaped like the WIT interfaces at the
SDK's level: ``cache.get(kind, namespace, name) -> str | None``, ``list``, ``by_index``,
``get_meta``, ``list_meta``, ``by_index_meta`` (metadata as :class:`RawMeta` dicts), and
``log.log(level: str, message: str)``. A failed read raises :class:`HostCacheError`.
"""

from __future__ import annotations

from typing import Any, Optional, Protocol


class HostCacheError(Exception):
    """A cache read the host refused: ``tag`` is ``not-granted``, ``unknown-index`` or ``invalid``."""

    def __init__(self, tag: str, message: str) -> None:
        super().__init__(f"{tag}: {message}")
        self.tag = tag
        self.message = message


class CacheHost(Protocol):
    def get(self, kind: tuple[str, str], namespace: Optional[str], name: str) -> Optional[str]: ...
    def list(self, kind: tuple[str, str], namespace: Optional[str], selector: Optional[str]) -> list[str]: ...
    def by_index(self, kind: tuple[str, str], index: str, value: str) -> list[str]: ...
    def get_meta(self, kind: tuple[str, str], namespace: Optional[str], name: str) -> Optional[dict[str, Any]]: ...
    def list_meta(self, kind: tuple[str, str], namespace: Optional[str], selector: Optional[str]) -> list[dict[str, Any]]: ...
    def by_index_meta(self, kind: tuple[str, str], index: str, value: str) -> list[dict[str, Any]]: ...


class LogHost(Protocol):
    def log(self, level: str, message: str) -> None: ...


class Host(Protocol):
    cache: CacheHost
    log: LogHost


_bound: Optional[Host] = None


def host() -> Host:
    """The bound host; raises outside a component or a FakeCache."""
    if _bound is None:
        raise RuntimeError(
            "wasmloop_sdk: no host bound: run inside a wasmloop component, or in a test through FakeCache.reconcile/enter"
        )
    return _bound


def bound_host() -> Optional[Host]:
    """The bound host, or ``None`` (no error): for what has a fallback, such as the clock."""
    return _bound


def bind_host(new: Optional[Host]) -> Optional[Host]:
    """Bind ``new`` and return what was bound before."""
    global _bound
    previous = _bound
    _bound = new
    return previous
