"""Label selectors, index paths and field paths with the host's rules (wasmloop-model), for the
FakeCache: what the host's cache does with them, in Python."""

from __future__ import annotations

import json
import re
from typing import Any, Callable, Optional

_KEY = re.compile(r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$")

Labels = dict[str, str]


def _check_key(key: str) -> None:
    if not key or len(key) > 317 or not _KEY.match(key):
        raise ValueError(f"invalid label key {json.dumps(key)}")


def _terms(text: str) -> list[str]:
    out, depth, cur = [], 0, ""
    for ch in text:
        depth += ch == "("
        depth -= ch == ")"
        if ch == "," and depth == 0:
            out.append(cur)
            cur = ""
        else:
            cur += ch
    out.append(cur)
    return [t.strip() for t in out]


def parse_selector(text: str) -> Callable[[Labels], bool]:
    """A matcher for a label selector (``a=b``, ``a==b``, ``a!=b``, ``a``, ``!a``, ``a in (x,y)``,
    ``a notin (x,y)``, comma-separated: all must hold); raises ``ValueError`` naming what is wrong."""
    if text.strip() == "":
        return lambda labels: True
    reqs: list[Callable[[Labels], bool]] = []
    for t in _terms(text):
        if t == "":
            raise ValueError("empty requirement")
        if m := re.fullmatch(r"!\s*(\S+)", t):
            k = m[1]
            _check_key(k)
            reqs.append(lambda l, k=k: k not in l)
        elif m := re.fullmatch(r"(\S+?)\s+(in|notin)\s+\((.*)\)", t):
            k, op, values = m[1], m[2], [v.strip() for v in m[3].split(",")]
            _check_key(k)
            if op == "in":
                reqs.append(lambda l, k=k, vs=values: k in l and l[k] in vs)
            else:
                reqs.append(lambda l, k=k, vs=values: k not in l or l[k] not in vs)
        elif m := re.fullmatch(r"([^=!\s]+)\s*(==|=|!=)\s*(\S*)", t):
            k, op, v = m[1], m[2], m[3]
            _check_key(k)
            if op == "!=":
                reqs.append(lambda l, k=k, v=v: l.get(k) != v)
            else:
                reqs.append(lambda l, k=k, v=v: l.get(k) == v)
        elif re.fullmatch(r"\S+", t):
            _check_key(t)
            reqs.append(lambda l, k=t: k in l)
        else:
            raise ValueError(f"cannot parse {json.dumps(t)}")
    return lambda labels: all(r(labels or {}) for r in reqs)


def matches_selector(text: str, obj: dict[str, Any]) -> bool:
    """Whether ``obj``'s labels match the selector text."""
    return parse_selector(text)((obj.get("metadata") or {}).get("labels") or {})


def matches_annotation_selector(text: str, obj: dict[str, Any]) -> bool:
    """Whether ``obj``'s annotations match the (annotation) selector text, in label-selector syntax."""
    return parse_selector(text)((obj.get("metadata") or {}).get("annotations") or {})


def _split_map_key(path: str) -> tuple[str, Optional[str]]:
    for m in ("metadata.annotations", "metadata.labels"):
        if path.startswith(m + "."):
            return m, path[len(m) + 1 :]
    return path, None


def _label_of(path: str) -> Optional[str]:
    for prefix in ("labels.", "metadata.labels."):
        if path.startswith(prefix):
            return path[len(prefix) :]
    return None


def check_path(path: str) -> None:
    """Check a declared index or field path as the host does at load; raises the reason."""
    label = _label_of(path)
    if label is not None:
        return _check_key(label)
    if path == "":
        raise ValueError("the path is empty")
    fields, map_key = _split_map_key(path)
    if map_key is not None:
        _check_key(map_key)
    for seg in fields.split("."):
        if seg == "":
            raise ValueError("empty segment")
        if not re.fullmatch(r"[A-Za-z0-9_-]+", seg):
            raise ValueError(f"segment `{seg}` is not a field name")


def _collect(v: Any, segs: list[str], out: list[str]) -> None:
    if isinstance(v, list):
        if segs and segs[0].isdigit():
            i = int(segs[0])
            if i < len(v):
                _collect(v[i], segs[1:], out)
        else:
            for item in v:
                _collect(item, segs, out)
        return
    if segs:
        if isinstance(v, dict) and segs[0] in v:
            _collect(v[segs[0]], segs[1:], out)
        return
    if isinstance(v, str):
        out.append(v)
    elif isinstance(v, bool):
        out.append("true" if v else "false")
    elif isinstance(v, (int, float)):
        out.append(json.dumps(v))


def index_values(path: str, obj: dict[str, Any]) -> list[str]:
    """The values index path ``path`` gives for ``obj`` (the host's IndexPath::values), sorted, distinct."""
    label = _label_of(path)
    if label is not None:
        v = ((obj.get("metadata") or {}).get("labels") or {}).get(label)
        return [v] if isinstance(v, str) else []
    fields, map_key = _split_map_key(path)
    segs = fields.split(".") + ([map_key] if map_key is not None else [])
    out: list[str] = []
    _collect(obj, segs, out)
    return sorted(set(out))


def field_value(obj: dict[str, Any], path: str) -> Any:
    """The value at field path ``path`` (the host's ``field``); ``None`` where missing or null."""
    for prefix, m in (("metadata.labels.", "labels"), ("labels.", "labels"), ("metadata.annotations.", "annotations")):
        if path.startswith(prefix):
            return ((obj.get("metadata") or {}).get(m) or {}).get(path[len(prefix) :])
    at: Any = obj
    for seg in path.split("."):
        if isinstance(at, list):
            at = at[int(seg)] if seg.isdigit() and int(seg) < len(at) else None
        elif isinstance(at, dict):
            at = at.get(seg)
        else:
            at = None
        if at is None:
            return None
    return at
