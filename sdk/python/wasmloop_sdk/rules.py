"""The host's rules (wasmloop-model), in Python, for the FakeCache and the Outcome builders:
label selectors, what an action targets, a child's owner, merge and JSON patches,
preconditions, event → key mappings. Each is pinned by the conformance corpus
(``model/conformance/*.json``, run by ``tests/test_conformance.py``): a case the host decides one
way and this module another fails there, naming the case. A refusal raises a :class:`RuleError`
whose ``kind`` (and ``at``, ``field`` or ``index``) is the corpus's; the message is for people."""

from __future__ import annotations

import copy
import json
import re
from typing import Any, Callable, Optional


class RuleError(ValueError):
    """A rule broken: ``kind`` is stable (the corpus's), the message says what and where."""

    def __init__(self, kind: str, message: str, **where: Any) -> None:
        super().__init__(message)
        self.kind = kind
        self.where = where


# ---- label selectors (wasmloop_model::selector)

_LABEL_NAME = re.compile(r"[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?")
_PREFIX_PART = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?")
_SPECIAL = "!=(),<>"


def _is_label_name(s: str) -> bool:
    return len(s.encode()) <= 63 and _LABEL_NAME.fullmatch(s) is not None


def check_key(key: str) -> None:
    """Check a label key, ``[prefix/]name``; raises a :class:`RuleError` of kind ``key``."""
    prefix, name = key.split("/", 1) if "/" in key else (None, key)
    if prefix is not None and not (0 < len(prefix.encode()) <= 253 and all(_PREFIX_PART.fullmatch(p) for p in prefix.split("."))):
        raise RuleError("key", f"invalid label key `{key}`: the prefix must be a lowercase DNS subdomain", at=key)
    if not _is_label_name(name):
        raise RuleError("key", f"invalid label key `{key}`: the name must be 1-63 characters [A-Za-z0-9-_.], starting and ending with an alphanumeric", at=key)


def _check_value(key: str, value: str) -> None:
    if value != "" and not _is_label_name(value):
        raise RuleError("value", f"invalid value `{value}` for `{key}`: at most 63 characters [A-Za-z0-9-_.], starting and ending with an alphanumeric", at=value)


def _syntax(message: str) -> RuleError:
    return RuleError("syntax", message, at=None)


def _tokenize(text: str) -> list[tuple[str, str]]:
    out: list[tuple[str, str]] = []
    i = 0
    while i < len(text):
        c = text[i]
        if c.isspace():
            i += 1
        elif c in "(),":
            out.append((c, ""))
            i += 1
        elif c == "=":
            out.append(("=", ""))
            i += 2 if text.startswith("==", i) else 1
        elif c == "!":
            if text.startswith("!=", i):
                out.append(("!=", ""))
                i += 2
            else:
                out.append(("!", ""))
                i += 1
        elif c in "<>":
            raise RuleError("operator", f"operator `{c}` is not supported in label selectors", at=None)
        else:
            j = i
            while j < len(text) and not text[j].isspace() and text[j] not in _SPECIAL:
                j += 1
            out.append(("word", text[i:j]))
            i = j
    return out


def _show(tok: Optional[tuple[str, str]]) -> str:
    if tok is None:
        return "the end"
    return f"`{tok[1]}`" if tok[0] == "word" else f"`{tok[0]}`"


Labels = dict[str, Any]


def parse_selector(text: str) -> Callable[[Labels], bool]:
    """A matcher for a label selector (``a=b``, ``a==b``, ``a!=b``, ``a``, ``!a``, ``a in (x,y)``,
    ``a notin (x,y)``, comma-separated: all must hold), by the host's grammar; raises a
    :class:`RuleError` (kind ``operator``, ``syntax``, ``key`` or ``value``) naming what is wrong."""
    toks = _tokenize(text)
    pos = 0

    def peek() -> Optional[tuple[str, str]]:
        return toks[pos] if pos < len(toks) else None

    def take() -> Optional[tuple[str, str]]:
        nonlocal pos
        t = peek()
        pos += 1
        return t

    def has(labels: Labels, k: str) -> bool:
        # A label is there when it is a string (as the model reads labels).
        return isinstance(labels.get(k), str)

    def key() -> str:
        t = take()
        if t is not None and t[0] == "word":
            check_key(t[1])
            return t[1]
        if t is not None and t[0] == ",":
            raise _syntax("empty requirement (two commas in a row?)")
        raise _syntax(f"expected a label key, found {_show(t)}")

    def value(k: str) -> str:
        nonlocal pos
        t = peek()
        if t is None or t[0] == ",":
            return ""
        if t[0] != "word":
            raise _syntax(f"expected a value for `{k}`, found {_show(t)}")
        pos += 1
        _check_value(k, t[1])
        return t[1]

    def values(k: str) -> set[str]:
        if (take() or ("", ""))[0] != "(":
            raise _syntax(f"expected `(` after `in`/`notin` for `{k}`")
        out: set[str] = set()
        expect_value = True
        while True:
            t = take()
            if t is not None and t[0] == "word" and expect_value:
                _check_value(k, t[1])
                out.add(t[1])
                expect_value = False
            elif t is not None and t[0] == ",":
                if expect_value:
                    raise _syntax(f"empty value in the set for `{k}`")
                expect_value = True
            elif t is not None and t[0] == ")":
                if not out:
                    raise _syntax(f"the set for `{k}` needs at least one value")
                if expect_value:
                    raise _syntax(f"empty value in the set for `{k}`")
                return out
            elif t is None:
                raise _syntax(f"missing `)` after the set for `{k}`")
            else:
                raise _syntax(f"unexpected {_show(t)} in the set for `{k}`")

    def requirement() -> Callable[[Labels], bool]:
        nonlocal pos
        t = peek()
        if t is not None and t[0] == "!":
            pos += 1
            k = key()
            return lambda l: not has(l, k)
        k = key()
        t = peek()
        if t is None or t[0] == ",":
            return lambda l: has(l, k)
        pos += 1
        if t[0] == "=":
            v = value(k)
            return lambda l: has(l, k) and l[k] == v
        if t[0] == "!=":
            v = value(k)
            return lambda l: not has(l, k) or l[k] != v
        if t == ("word", "in"):
            s = values(k)
            return lambda l: has(l, k) and l[k] in s
        if t == ("word", "notin"):
            s = values(k)
            return lambda l: not has(l, k) or l[k] not in s
        raise _syntax(f"after key `{k}` expected `=`, `==`, `!=`, `in`, `notin`, `,` or the end, found {_show(t)}")

    reqs: list[Callable[[Labels], bool]] = []
    if toks:
        while True:
            reqs.append(requirement())
            t = take()
            if t is None:
                break
            if t[0] != ",":
                raise _syntax(f"expected `,` or the end, found {_show(t)}")
            if peek() is None:
                raise _syntax("trailing comma")
    return lambda labels: all(r(labels or {}) for r in reqs)


# ---- names and targets (wasmloop_model::name, wasmloop_model::target)


def _type_of(v: Any) -> str:
    if v is None:
        return "null"
    if isinstance(v, bool):
        return "a boolean"
    if isinstance(v, (int, float)):
        return "a number"
    if isinstance(v, str):
        return "a string"
    return "an array" if isinstance(v, list) else "an object"


def _dns_label(s: str, limit: int) -> bool:
    return 0 < len(s) <= limit and re.fullmatch(r"[a-z0-9-]+", s) is not None and not s.startswith("-") and not s.endswith("-")


def _dns_subdomain(s: str) -> bool:
    return 0 < len(s) <= 253 and all(_dns_label(label, 63) for label in s.split("."))


def _path_segment(s: str, limit: int) -> Optional[str]:
    """Why ``s`` is not a request-path segment of at most ``limit`` bytes (the rule's kind), or None."""
    if s == "":
        return "empty"
    if s in (".", ".."):
        return "dots"
    if "/" in s:
        return "slash"
    if "%" in s:
        return "percent"
    # Rust's char::is_whitespace and is_control.
    if any(c.isspace() or ord(c) < 0x20 or 0x7F <= ord(c) < 0xA0 for c in s):
        return "whitespace"
    if len(s.encode()) > limit:
        return "too_long"
    return None


def _optional_str(v: Any, field: str) -> Optional[str]:
    if v is None:
        return None
    if not isinstance(v, str):
        raise RuleError("not_a_string", f"{field} must be a string", field=field)
    return v or None


def check_target(obj: Any, verb: str, namespaced: Optional[bool] = None) -> dict[str, Optional[str]]:
    """What an action on ``obj`` targets, by the host's rule: ``apiVersion``, ``kind``,
    ``namespace``, ``name`` or ``generateName`` (only for ``verb`` "create"); raises a
    :class:`RuleError` (kind and field as the corpus's ``targets``). With ``namespaced`` (from
    discovery), the scope is checked too."""
    if not isinstance(obj, dict):
        raise RuleError("not_an_object", f"expected a JSON object, got {_type_of(obj)}", field=None)

    def required(v: Any, field: str) -> str:
        s = _optional_str(v, field)
        if s is None:
            raise RuleError("missing", f"the object has no {field}", field=field)
        return s

    api_version = required(obj.get("apiVersion"), "apiVersion")
    kind = required(obj.get("kind"), "kind")
    meta = obj.get("metadata")
    if meta is None:
        raise RuleError("missing", "the object has no metadata.name", field="metadata.name")
    if not isinstance(meta, dict):
        raise RuleError("not_a_string", "metadata (an object) must be a string", field="metadata (an object)")
    namespace = _optional_str(meta.get("namespace"), "metadata.namespace")
    name = _optional_str(meta.get("name"), "metadata.name")
    generate_name = _optional_str(meta.get("generateName"), "metadata.generateName")
    if name is None:
        if generate_name is not None and verb != "create":
            raise RuleError("generate_name_not_allowed", f"metadata.generateName is only allowed on create; {verb} needs metadata.name", field="metadata.generateName")
        if generate_name is None:
            field = "metadata.name (or metadata.generateName)" if verb == "create" else "metadata.name"
            raise RuleError("missing", f"the object has no {field}", field=field)
    group, slash, version = api_version.partition("/")
    if not (_dns_label(api_version, 63) if not slash else _dns_subdomain(group) and _dns_label(version, 63)):
        raise RuleError("api_version", f"invalid apiVersion {json.dumps(api_version)}: expected `version` or `group/version`", field="apiVersion")
    if not (len(kind) <= 63 and re.fullmatch(r"[A-Za-z][A-Za-z0-9]*", kind)):
        raise RuleError("kind", f"invalid kind {json.dumps(kind)}: expected a type name such as `Pod`", field="kind")
    if kind.endswith("List"):
        raise RuleError("list_kind", f"kind {kind} is a list; an action writes exactly one object", field="kind")
    if namespace is not None and not _dns_label(namespace, 63):
        raise RuleError("namespace", f"invalid namespace {json.dumps(namespace)}: expected a DNS label", field="metadata.namespace")
    field, value, limit = ("metadata.name", name, 253) if name is not None else ("metadata.generateName", generate_name or "", 248)
    why = _path_segment(value, limit)
    if why is not None:
        raise RuleError(f"name:{why}", f"invalid {field} {json.dumps(value[:80])}: {why}", field=field)
    shown = f"{api_version}/{kind}"
    if namespaced is False and namespace is not None:
        raise RuleError("namespace_on_cluster_scoped", f"{shown} is cluster-scoped, but the action names namespace {json.dumps(namespace)}", field="metadata.namespace")
    if namespaced is True and namespace is None:
        raise RuleError("no_namespace_on_namespaced", f"{shown} is namespaced, but the action names no namespace", field="metadata.namespace")
    out: dict[str, Optional[str]] = {"apiVersion": api_version, "kind": kind, "namespace": namespace}
    if name is not None:
        out["name"] = name
    else:
        out["generateName"] = generate_name
    return out


# ---- owners (wasmloop_model::owner)


def controller_of(obj: Any) -> Optional[dict[str, Any]]:
    """The owner reference marked ``controller: true`` (the first), if any."""
    refs = ((obj or {}).get("metadata") or {}).get("ownerReferences") if isinstance(obj, dict) else None
    if not isinstance(refs, list):
        return None
    return next((r for r in refs if isinstance(r, dict) and r.get("controller") is True), None)


def adopt(child: Any, owner_namespace: Optional[str], owner_ref: dict[str, Any]) -> dict[str, Any]:
    """A copy of ``child`` in ``owner_namespace`` (when it names none) with ``owner_ref`` as its
    controller; raises a :class:`RuleError`: ``other_namespace`` (owner references do not cross
    namespaces), ``other_controller``, ``shape``. A controller with the same uid is kept."""
    if not isinstance(child, dict):
        raise RuleError("shape", "child is not a JSON object")
    c = copy.deepcopy(child)
    meta = c.setdefault("metadata", {})
    if not isinstance(meta, dict):
        raise RuleError("shape", "child metadata is not a JSON object")
    if owner_namespace is not None:
        ns = meta.get("namespace")
        # A namespace that is not a string is none (and is replaced), as in the model.
        if not isinstance(ns, str):
            meta["namespace"] = owner_namespace
        elif ns != owner_namespace:
            raise RuleError("other_namespace", f"child in namespace {json.dumps(ns)} cannot be owned by an object in {json.dumps(owner_namespace)}")
    refs = meta.setdefault("ownerReferences", [])
    if not isinstance(refs, list):
        raise RuleError("shape", "child ownerReferences is not an array")
    other = controller_of(c)
    if other is not None:
        if other.get("uid") != owner_ref.get("uid"):
            raise RuleError("other_controller", f"child already has a controller: {json.dumps(other)}")
        return c
    refs.append(copy.deepcopy(owner_ref))
    return c


# ---- patches (wasmloop_model::patch)


def merge_into(target: Any, patch: Any) -> Any:
    """``target`` with ``patch`` merged in (RFC 7386), unchecked: an apply's object, a status."""
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    out = dict(target) if isinstance(target, dict) else {}
    for k, v in patch.items():
        if v is None:
            out.pop(k, None)
        else:
            out[k] = merge_into(out.get(k), v)
    return out


def merge_patch(before: Any, patch: Any) -> Any:
    """``before`` with merge patch ``patch`` applied; raises a :class:`RuleError` ``merge_not_an_object``."""
    if not isinstance(patch, dict):
        raise RuleError("merge_not_an_object", f"a merge patch must be a JSON object, got {_type_of(patch)}")
    if "metadata" in patch and not isinstance(patch["metadata"], dict):
        raise RuleError("merge_metadata_not_an_object", f"a merge patch's metadata must be a JSON object, got {_type_of(patch['metadata'])}")
    return merge_into(before, patch)


MAX_PATH_SEGMENTS = 128
"""Most segments a JSON patch path may have."""


def check_json_patch(ops: Any) -> None:
    """Check a JSON patch as the host does before sending it; raises a :class:`RuleError` naming the operation's index."""
    if not isinstance(ops, list):
        raise RuleError("json_not_a_list", f"a JSON patch must be a list of operations, got {_type_of(ops)}", index=None)
    for index, op in enumerate(ops):
        name = op.get("op") if isinstance(op, dict) and isinstance(op.get("op"), str) else ""
        if name not in ("add", "remove", "replace", "test"):
            raise RuleError("op_refused", f"operation {index}: op {json.dumps(name)} is not one of add, remove, replace, test", index=index)
        if not isinstance(op.get("path"), str):
            raise RuleError("path_not_a_string", f"operation {index}: path must be a string", index=index)
        if op["path"].count("/") > MAX_PATH_SEGMENTS:
            raise RuleError("path_too_deep", f"operation {index}: path has more than {MAX_PATH_SEGMENTS} segments", index=index)
        if name != "remove" and "value" not in op:
            raise RuleError("no_value", f"operation {index}: {name} needs a value", index=index)


class _NotThere(Exception):
    pass


def _pointer(path: str) -> list[str]:
    if path == "":
        return []
    if not path.startswith("/"):
        raise _NotThere(path)
    return [s.replace("~1", "/").replace("~0", "~") for s in path[1:].split("/")]


def _list_index(s: str, length: int) -> int:
    if s == "-":
        return length
    if re.fullmatch(r"0|[1-9][0-9]*", s):
        return int(s)
    raise _NotThere(s)


def json_patch(before: Any, ops: Any) -> Any:
    """``before`` with JSON patch ``ops`` applied, all or nothing (RFC 6902); raises a
    :class:`RuleError` naming the operation's index."""
    check_json_patch(ops)
    doc = [copy.deepcopy(before)]

    def step(at: Any, s: str) -> Any:
        if isinstance(at, list):
            i = _list_index(s, len(at))
            if i >= len(at):
                raise _NotThere(s)
            return at[i]
        if isinstance(at, dict) and s in at:
            return at[s]
        raise _NotThere(s)

    def get(segs: list[str]) -> Any:
        at = doc[0]
        for s in segs:
            at = step(at, s)
        return at

    def add(segs: list[str], value: Any) -> None:
        if not segs:
            doc[0] = value
            return
        parent = get(segs[:-1])
        last = segs[-1]
        if isinstance(parent, list):
            i = _list_index(last, len(parent))
            if i > len(parent):
                raise _NotThere(last)
            parent.insert(i, value)
        elif isinstance(parent, dict):
            parent[last] = value
        else:
            raise _NotThere(last)

    def remove(segs: list[str]) -> None:
        if not segs:
            raise _NotThere("")
        parent = get(segs[:-1])
        last = segs[-1]
        if isinstance(parent, list):
            i = _list_index(last, len(parent))
            if i >= len(parent):
                raise _NotThere(last)
            del parent[i]
        elif isinstance(parent, dict) and last in parent:
            del parent[last]
        else:
            raise _NotThere(last)

    for index, op in enumerate(ops):
        try:
            segs = _pointer(op["path"])
            if op["op"] == "add":
                add(segs, copy.deepcopy(op["value"]))
            elif op["op"] == "remove":
                remove(segs)
            elif op["op"] == "replace":
                get(segs)
                remove(segs)
                add(segs, copy.deepcopy(op["value"]))
            elif not _same_json(get(segs), op["value"]):
                raise RuleError("test_failed", f"operation {index}: the test failed (the value differs)", index=index)
        except _NotThere:
            raise RuleError("does_not_apply", f"operation {index}: the path does not apply to the object", index=index) from None
    return doc[0]


def _same_json(a: Any, b: Any) -> bool:
    """JSON equality (``True`` is not ``1``, as in JSON)."""
    if isinstance(a, bool) or isinstance(b, bool):
        return isinstance(a, bool) and isinstance(b, bool) and a == b
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_same_json(a[k], b[k]) for k in a)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(_same_json(x, y) for x, y in zip(a, b))
    if isinstance(a, (int, float)) and isinstance(b, (int, float)):
        return type(a) is type(b) and a == b
    return a == b


def preconditions_hold(uid: Optional[str], resource_version: Optional[str], obj: Any) -> bool:
    """Whether ``obj`` is the one the preconditions name: same uid and resourceVersion, where given and not empty."""
    meta = (obj or {}).get("metadata") or {}
    return all(not want or meta.get(field) == want for want, field in ((uid, "uid"), (resource_version, "resourceVersion")))


# ---- event → key mappings (wasmloop_model::mapping::keys)


def _group(api_version: str) -> str:
    return api_version.split("/", 1)[0] if "/" in api_version else ""


Key = tuple[str, str, Optional[str], str]
"""A key as (apiVersion, kind, namespace, name)."""


def mapped_keys(
    tag: str,
    value: Optional[str],
    primary: tuple[str, str],
    namespaced: bool,
    related: dict[str, Any],
    primaries: list[dict[str, Any]],
    index_values: Callable[[dict[str, Any]], list[str]],
    lookup: Callable[[Optional[str], str, dict[str, Any]], tuple[list[str], bool]],
) -> list[Key]:
    """The keys of the reconciled kind (``primary``, namespaced or not) that an event on
    ``related`` maps to through mapping ``tag`` (with ``value``: the label, or the index's name).
    ``primaries`` are the reconciled objects an index mapping looks among, ``index_values(obj)``
    the index's values for one, ``lookup(ns, name, obj)`` what it looks up. Each key once."""
    meta = related.get("metadata") or {}
    ns = meta.get("namespace") or None
    name = meta.get("name") or ""
    api_version, kind = primary

    def key(n: str) -> Key:
        return (api_version, kind, ns if namespaced else None, n)

    found: list[Key] = []
    if tag == "owner":
        ref = controller_of(related)
        if ref is not None:
            field = lambda f: ref.get(f) if isinstance(ref.get(f), str) else ""  # noqa: E731
            if field("kind") == kind and _group(field("apiVersion")) == _group(api_version) and isinstance(ref.get("name"), str):
                found = [key(ref["name"])]
    elif tag == "label":
        v = (meta.get("labels") or {}).get(value or "")
        if isinstance(v, str) and v:
            found = [key(v)]
    elif tag == "same-name":
        found = [key(name)]
    elif tag == "namespace":
        if ns:
            found = [(api_version, kind, None, ns)]
    elif tag == "index":
        values, same_namespace = lookup(ns, name, related)
        limited = same_namespace and namespaced and ns is not None
        found = [
            (api_version, kind, (p.get("metadata") or {}).get("namespace") or None, (p.get("metadata") or {}).get("name") or "")
            for p in primaries
            if (not limited or ((p.get("metadata") or {}).get("namespace") or None) == ns) and any(v in values for v in index_values(p))
        ]
    else:
        raise ValueError(f"unknown mapping {tag!r}")
    out: list[Key] = []
    for k in found:
        if k not in out:
            out.append(k)
    return out
