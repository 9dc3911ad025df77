"""The Python fake against the conformance corpus (``model/conformance/*.json``, computed by
wasmloop-model and run by the host, the Rust and the JavaScript fakes too): every case through the
paths the FakeCache and the Outcome builders use, each disagreement named."""

from __future__ import annotations

import json
import pathlib
from typing import Any, Callable

import pytest

from wasmloop_sdk import IndexValueValue, KindRef, Metadata, MappingValue, Outcome, Watch, object_key, rules
from wasmloop_sdk.paths import check_path, index_values, parse_selector
from wasmloop_sdk.testing import FakeCache

CORPUS = pathlib.Path(__file__).resolve().parents[3] / "model" / "conformance"


def check(family: str, run: Callable[[dict[str, Any]], Any]) -> None:
    """Run every case of ``family`` through ``run``; fail listing each case whose result differs."""
    cases = json.loads((CORPUS / f"{family}.json").read_text())["cases"]
    assert cases, f"{family}: no cases"
    failures = []
    for case in cases:
        try:
            got = run(case["input"])
        except Exception as e:  # noqa: BLE001 - a runner's own failure is a disagreement too
            got = {"raised": repr(e)}
        if got != case["expect"]:
            failures.append(f"  {family}/{case['name']}: expected {json.dumps(case['expect'])}, got {json.dumps(got)}")
    assert not failures, f"{len(failures)} of {len(cases)} conformance cases disagree with model/conformance/{family}.json:\n" + "\n".join(failures)


def rule_error(e: rules.RuleError, *where: str) -> dict[str, Any]:
    """A RuleError as the corpus records it: its kind and the named parts of where."""
    return {"error": {"kind": e.kind, **{w: e.where.get(w) for w in where}}}


def test_selectors() -> None:
    def run(i: dict[str, Any]) -> Any:
        try:
            matches = parse_selector(i["selector"])
        except rules.RuleError as e:
            return rule_error(e, "at")
        return {"matches": [matches(labels) for labels in i["labels"]]}

    check("selectors", run)


def test_index_paths() -> None:
    def run(i: dict[str, Any]) -> Any:
        try:
            check_path(i["path"])
        except rules.RuleError as e:
            return rule_error(e)
        return {"values": index_values(i["path"], i["object"])}

    check("index_paths", run)


def key_text(t: dict[str, Any]) -> str:
    name = t["name"] if "name" in t else f"{t['generateName']}*"
    return "/".join(p for p in (t["apiVersion"], t["kind"], t["namespace"], name) if p)


def test_targets() -> None:
    def run(i: dict[str, Any]) -> Any:
        obj, verb = i["object"], i["verb"]
        # The builders refuse what the rule refuses (the reconcile's permanent error) ...
        built = Outcome().create(obj) if verb == "create" else Outcome().apply(obj)
        try:
            rules.check_target(obj, verb)
        except rules.RuleError as e:
            assert built.invalid is not None, f"the {verb} builder took what the rule refuses: {e}"
            return rule_error(e, "field")
        assert built.invalid is None, f"the {verb} builder refused what the rule takes: {built.invalid}"
        # ... and the fake carries out what it takes.
        FakeCache(Metadata("conformance", "0").reconciles(KindRef("v1", "ConfigMap"))).execute(built)
        try:
            return {"target": key_text(rules.check_target(obj, verb, i.get("namespaced")))}
        except rules.RuleError as e:
            return rule_error(e, "field")

    check("targets", run)


def test_children() -> None:
    def run(i: dict[str, Any]) -> Any:
        # The builder, given the owner the reference is of: refuses what the rule refuses, and
        # creates the child the rule makes (when that child is a valid create).
        ref = i["ownerRef"]
        owner = {"apiVersion": ref["apiVersion"], "kind": ref["kind"], "metadata": {"name": ref["name"], "uid": ref["uid"], "namespace": i["ownerNamespace"]}}
        built = Outcome().create_owned(owner, i["child"])
        try:
            adopted = rules.adopt(i["child"], i["ownerNamespace"], ref)
        except rules.RuleError as e:
            assert built.invalid is not None, f"create_owned took what the rule refuses: {e}"
            return rule_error(e)
        try:
            rules.check_target(adopted, "create")
        except rules.RuleError:
            assert built.invalid is not None, "create_owned created an invalid child"
        else:
            assert built.actions and built.actions[0].object == adopted, "create_owned made another child"
        return {"child": adopted}

    check("children", run)


def patched(patch_type: str, before: Any, body: Any) -> Any:
    """A patch of ``before`` by the rule, checked against what the fake does with it."""
    fake = lambda: FakeCache.patched(patch_type, before, body)  # noqa: E731
    try:
        after = rules.json_patch(before, body) if patch_type == "json" else rules.merge_patch(before, body)
    except rules.RuleError as e:
        if e.kind in ("test_failed", "does_not_apply"):
            assert fake() is None, "the fake applied a patch that does not apply"
        else:
            with pytest.raises(rules.RuleError):
                fake()
        return rule_error(e, "index") if patch_type == "json" else rule_error(e)
    assert fake() == after, "the fake patched otherwise"
    return {"after": after}


def test_merge_patches() -> None:
    check("merge_patches", lambda i: patched("merge", i["before"], i["patch"]))


def test_json_patches() -> None:
    check("json_patches", lambda i: patched("json", i["before"], i["ops"]))


def test_preconditions() -> None:
    check("preconditions", lambda i: {"holds": rules.preconditions_hold(i.get("uid"), i.get("resourceVersion"), i["object"])})


def mapping_of(m: dict[str, Any]) -> MappingValue:
    if m["tag"] == "index":
        value = m["val"]["value"]
        return MappingValue("index", m["val"]["index"], IndexValueValue(value["tag"], value.get("val")))
    return MappingValue(m["tag"], m.get("val"))


def test_mappings() -> None:
    def run(i: dict[str, Any]) -> Any:
        primary = KindRef(i["primary"]["apiVersion"], i["primary"]["kind"])
        related = i["related"]
        metadata = Metadata("conformance", "0").reconciles(primary).watch(Watch(KindRef(related["apiVersion"], related["kind"]), mapping_of(i["mapping"])))
        if "index" in i:
            metadata.index(primary, i["index"]["name"], i["index"]["path"])
        fake = FakeCache(metadata)
        for p in i["primaries"]:
            fake.add(p)
        fake.add(related)
        return {"keys": sorted(str(k) for k in fake.mapped_keys(object_key(related)))}

    check("mappings", run)
