"""Label selectors, index paths and field paths with the host's rules (wasmloop-model), for the
FakeCache: what the host's cache does with them, in Python."""

from __future__ import annotations

import json
import re
from typing import Any, Callable, Optional

from .rules import Labels, RuleError, parse_selector
from .rules import check_key as _check_key

__all__ = ["Labels", "parse_selector"]


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


def _segments(fields: str) -> list[tuple[str, list[tuple[str, str]]]]:
    """The segments of the dotted part of a field path (``.`` inside filters kept in them):
    ``(name, [(field, value), ...])``; raises naming what is wrong (wasmloop-model's ``segments``)."""
    out: list[tuple[str, list[tuple[str, str]]]] = []
    rest = fields
    while True:
        name = re.match(r"[^.\[]*", rest).group(0)  # type: ignore[union-attr]
        if name == "":
            raise RuleError("segment", "empty segment (leading, trailing or doubled `.`)")
        if not re.fullmatch(r"[A-Za-z0-9_-]+", name):
            raise RuleError("segment", f"segment `{name}` may contain only letters, digits, `_` and `-` (a filter is `[field=value]`)")
        rest = rest[len(name):]
        filters: list[tuple[str, str]] = []
        while rest.startswith("["):
            close = rest.find("]")
            if close < 0:
                raise RuleError("segment", f"filter `{rest}` of segment `{name}` has no `]`")
            flt = rest[1:close]
            if flt.isdigit():
                raise RuleError("segment", f"segment `{name}[{flt}]`: write `{name}.{flt}` to pick a list position (a filter is `[field=value]`)")
            if "=" not in flt:
                raise RuleError("segment", f"filter `[{flt}]` of segment `{name}` is not `[field=value]`")
            field, value = flt.split("=", 1)
            if not re.fullmatch(r"[A-Za-z0-9_-]+", field):
                raise RuleError("segment", f"filter `[{flt}]` of segment `{name}`: `{field}` is not a field name")
            if value == "" or "[" in value:
                raise RuleError("segment", f"filter `[{flt}]` of segment `{name}`: the value is empty or holds `[`")
            if name.isdigit():
                raise RuleError("segment", f"segment `{name}` picks a list position: it takes no filter")
            filters.append((field, value))
            rest = rest[close + 1:]
        out.append((name, filters))
        if rest == "" and filters:
            raise RuleError("segment", f"segment `{name}` ends the path with a filter: it keeps objects, which have no value to index "
                             f"(name the field to index after it: `{name}[…].name`)")
        if rest == "":
            return out
        if not rest.startswith("."):
            raise RuleError("segment", f"after segment `{name}`: `{rest}` (expected `.` or `[field=value]`)")
        rest = rest[1:]


def check_path(path: str) -> None:
    """Check a declared index or field path as the host does at load; raises the reason."""
    label = _label_of(path)
    if label is not None:
        return _check_key(label)
    if path == "":
        raise RuleError("empty", "the path is empty")
    fields, map_key = _split_map_key(path)
    if map_key is not None:
        _check_key(map_key)
    _segments(fields)


def check_field_path(path: str) -> None:
    """Check a declared metadata field's path: an index path without filters (a field reads one value)."""
    check_path(path)
    if "[" in path:
        raise ValueError(f"{json.dumps(path)}: a metadata field reads one value: filters ([field=value]) are for indexes")


def _scalar(v: Any) -> Optional[str]:
    if isinstance(v, str):
        return v
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, (int, float)):
        return json.dumps(v)
    return None


def _keeps(filters: list[tuple[str, str]], v: Any) -> bool:
    return all(isinstance(v, dict) and _scalar(v.get(field)) == want for field, want in filters)


def _collect(v: Any, segs: list[tuple[str, list[tuple[str, str]]]], out: list[str]) -> None:
    if isinstance(v, list):
        if segs and segs[0][0].isdigit():
            i = int(segs[0][0])
            if i < len(v):
                _collect(v[i], segs[1:], out)
        else:
            for item in v:
                _collect(item, segs, out)
        return
    if segs:
        (name, filters), rest = segs[0], segs[1:]
        if not (isinstance(v, dict) and name in v):
            return
        child = v[name]
        if filters and isinstance(child, list):
            for item in child:
                if _keeps(filters, item):
                    _collect(item, rest, out)
        elif _keeps(filters, child):
            _collect(child, rest, out)
        return
    text = _scalar(v)
    if text is not None:
        out.append(text)


def index_values(path: str, obj: dict[str, Any]) -> list[str]:
    """The values index path ``path`` gives for ``obj`` (the host's IndexPath::values), sorted, distinct."""
    label = _label_of(path)
    if label is not None:
        v = ((obj.get("metadata") or {}).get("labels") or {}).get(label)
        return [v] if isinstance(v, str) else []
    fields, map_key = _split_map_key(path)
    try:
        segs = _segments(fields) + ([(map_key, [])] if map_key is not None else [])
    except ValueError:
        return []
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
