#!/usr/bin/env python3
"""Generate src/hash/schema.rs: the Go type tree of `k8s.io/api/core/v1.PodTemplateSpec` as
kube-controller-manager v1.20.2 was compiled with it, for the pod-template-hash (see
src/hash/mod.rs: KCM hashes the `go-spew` printing of that Go value, which prints every field
of every struct, set or not, with its Go type).

    tools/gen-spew-schema.py KUBERNETES_SOURCE_ROOT > src/hash/schema.rs

KUBERNETES_SOURCE_ROOT is a checkout of kubernetes at v1.20.2 (scripts/control-plane.sh builds
from Debian's `kubernetes_1.20.5+really1.20.2` source, which is that tag). Only the struct
layouts are read: field names, Go types and JSON names, in declaration order.
"""

import re
import sys
from pathlib import Path

ROOT = Path(sys.argv[1]) if len(sys.argv) > 1 else None
if ROOT is None or not ROOT.is_dir():
    sys.exit(__doc__)

STAGING = ROOT / "staging/src/k8s.io"
# package alias used in the sources -> (files, package name as reflect prints it)
PACKAGES = {
    "corev1": ([STAGING / "api/core/v1/types.go"], "v1"),
    "metav1": ([STAGING / "apimachinery/pkg/apis/meta/v1/types.go", STAGING / "apimachinery/pkg/apis/meta/v1/time.go"], "v1"),
    "resource": ([STAGING / "apimachinery/pkg/api/resource/quantity.go", STAGING / "apimachinery/pkg/api/resource/amount.go"], "resource"),
    "intstr": ([STAGING / "apimachinery/pkg/util/intstr/intstr.go"], "intstr"),
    "types": ([STAGING / "apimachinery/pkg/types/uid.go"], "types"),
}
# import alias -> package key, per package
IMPORTS = {
    "corev1": {"metav1": "metav1", "resource": "resource", "intstr": "intstr", "types": "types"},
    "metav1": {"types": "types"},
    "resource": {},
    "intstr": {},
    "types": {},
}
BASIC = {"bool", "string", "int", "int8", "int16", "int32", "int64", "uint", "uint8", "uint16", "uint32", "uint64", "byte"}
# Types outside the parsed packages, as reflect prints them and how they print.
OPAQUE = {"time.Time": "Time", "inf.Dec": "InfDec"}


def strip_comments(src: str) -> str:
    """Go source without comments (block comments first, then line comments outside tags)."""
    src = re.sub(r"/\*.*?\*/", "", src, flags=re.S)
    out = []
    for line in src.splitlines():
        in_tag, cut = False, len(line)
        for i, c in enumerate(line):
            if c == "`":
                in_tag = not in_tag
            elif not in_tag and line.startswith("//", i):
                cut = i
                break
        out.append(line[:cut])
    return "\n".join(out)


def parse_package(key):
    files, _ = PACKAGES[key]
    decls = {}
    for f in files:
        lines = strip_comments(f.read_text()).splitlines()
        i = 0
        while i < len(lines):
            line = lines[i]
            m = re.match(r"^type (\w+) struct \{\s*$", line)
            if m:
                name, fields = m.group(1), []
                i += 1
                while not re.match(r"^\}", lines[i]):
                    raw = lines[i]
                    tag = re.search(r"`([^`]*)`", raw)
                    code_no_tag = re.sub(r"`[^`]*`", "", raw).strip()
                    if code_no_tag:
                        parts = code_no_tag.split()
                        if len(parts) == 1:
                            fname, ftype, embedded = parts[0].lstrip("*").split(".")[-1], parts[0], True
                        elif len(parts) == 2:
                            fname, ftype, embedded = parts[0], parts[1], False
                        else:
                            sys.exit(f"{f}: {name}: cannot read field line: {raw!r}")
                        if "," in fname:
                            sys.exit(f"{f}: {name}: several names on one line: {raw!r}")
                        json = None
                        if tag:
                            jm = re.search(r'json:"([^"]*)"', tag.group(1))
                            if jm:
                                json = jm.group(1).split(",")[0]
                                inline = ",inline" in jm.group(1)
                                if inline:
                                    json = ""
                        fields.append((fname, ftype, json, embedded))
                    i += 1
                decls[name] = ("struct", fields)
            else:
                m = re.match(r"^type (\w+) (\S.*?)\s*$", line)
                if m and not m.group(2).startswith(("struct", "interface", "func", "=")):
                    decls[m.group(1)] = ("alias", m.group(2))
            i += 1
    return decls


DECLS = {k: parse_package(k) for k in PACKAGES}

types = []  # (go type string, kind, payload)
index = {}


def resolve(pkg, expr):
    """The (package, name) or composite of a Go type expression in package `pkg`."""
    return expr


def type_id(pkg, expr):
    expr = expr.strip()
    if expr.startswith("*"):
        inner = type_id(pkg, expr[1:])
        return intern("*" + types[inner][0], "Ptr", inner)
    if expr.startswith("[]"):
        inner = type_id(pkg, expr[2:])
        return intern("[]" + types[inner][0], "Slice", inner)
    m = re.match(r"^map\[([^\]]+)\](.+)$", expr)
    if m:
        k, v = type_id(pkg, m.group(1)), type_id(pkg, m.group(2))
        return intern(f"map[{types[k][0]}]{types[v][0]}", "Map", (k, v))
    if expr in BASIC:
        basic = "uint8" if expr == "byte" else expr
        return intern(basic, basic, None)
    if "." in expr:
        alias, name = expr.split(".", 1)
        qualified = f"{alias}.{name}"
        if qualified in OPAQUE:
            return intern(qualified, OPAQUE[qualified], None)
        target = IMPORTS[pkg].get(alias)
        if target is None:
            sys.exit(f"unknown package {alias} in {pkg} ({expr})")
        return named(target, name)
    return named(pkg, expr)


def named(pkg, name):
    printed = f"{PACKAGES[pkg][1]}.{name}"
    key = (pkg, name)
    if key in index:
        return index[key]
    decl = DECLS[pkg].get(name)
    if decl is None:
        sys.exit(f"type {pkg}.{name} not found")
    tid = len(types)
    types.append(None)
    index[key] = tid
    if decl[0] == "struct":
        fields = []
        for fname, ftype, json, embedded in decl[1]:
            fields.append((fname, type_id(pkg, ftype), json, embedded))
        special = {("resource", "Quantity"): "Quantity", ("intstr", "IntOrString"): "IntOrString", ("metav1", "Time"): "MetaTime"}.get(key)
        types[tid] = (printed, "Struct", (fields, special))
    else:
        under = type_id(pkg, decl[1])
        types[tid] = (printed, "Named", under)
    return tid


def intern(printed, kind, payload):
    key = ("composite", printed)
    if key in index:
        return index[key]
    tid = len(types)
    types.append((printed, kind, payload))
    index[key] = tid
    return tid


root = named("corev1", "PodTemplateSpec")

KINDS = {"bool": "Bool", "string": "Str", "uint8": "Uint", "uint16": "Uint", "uint32": "Uint", "uint64": "Uint", "uint": "Uint",
         "int": "Int", "int8": "Int", "int16": "Int", "int32": "Int", "int64": "Int"}

out = []
out.append("// @generated by plugins/deployment/tools/gen-spew-schema.py from kubernetes v1.20.2: do not edit.")
out.append("//! The Go type tree of `k8s.io/api/core/v1.PodTemplateSpec` in kubernetes v1.20.2, as")
out.append("//! `go-spew` walks it: every struct's fields in declaration order with their Go types (as")
out.append("//! `reflect.Type.String()` prints them) and JSON names.")
out.append("")
out.append("use super::spew::{Field, Kind, Special, Type};")
out.append("")
out.append(f"/// `v1.PodTemplateSpec`.")
out.append(f"pub const POD_TEMPLATE_SPEC: u16 = {root};")
out.append("")
out.append(f"/// Every type reachable from [`POD_TEMPLATE_SPEC`], by id.")
out.append(f"pub static TYPES: [Type; {len(types)}] = [")
for tid, (printed, kind, payload) in enumerate(types):
    if kind in KINDS:
        k = f"Kind::{KINDS[kind]}"
    elif kind in ("Ptr", "Slice"):
        k = f"Kind::{kind}({payload})"
    elif kind == "Map":
        k = f"Kind::Map({payload[0]}, {payload[1]})"
    elif kind == "Named":
        k = f"Kind::Named({payload})"
    elif kind == "Time":
        k = "Kind::Special(Special::GoTime)"
    elif kind == "InfDec":
        k = "Kind::Special(Special::InfDec)"
    elif kind == "Struct":
        fields, special = payload
        fs = ", ".join(
            f'Field {{ go: "{f}", json: {("None" if j is None else chr(34) + j + chr(34)).join(["Some(", ")"]) if j is not None else "None"}, ty: {t} }}'
            for f, t, j, e in fields
        )
        k = f"Kind::Struct(&[{fs}])"
        if special:
            k = f"Kind::Special(Special::{special}(&[{fs}]))"
    else:
        sys.exit(f"unexpected kind {kind}")
    out.append(f'    Type {{ name: "{printed}", kind: {k} }}, // {tid}')
out.append("];")
print("\n".join(out))
