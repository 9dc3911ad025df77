// The JavaScript fake against the conformance corpus (model/conformance/*.json, computed by
// wasmloop-model and run by the host and the Rust fake too): every case through the paths the
// FakeCache and the Outcome builders use, each disagreement named.

import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { test } from "node:test";

import { Metadata, Outcome, Watch, keyString, objectKey } from "@wasmloop/sdk";
import { FakeCache } from "@wasmloop/sdk/testing";

import { checkPath, indexValues, parseSelector } from "../src/paths.js";
import { adopt, checkTarget, jsonPatch, mergePatch, preconditionsHold } from "../src/rules.js";

const corpus = new URL("../../../model/conformance/", import.meta.url);

/** Run every case of `family` through `run`; fail listing each case whose result differs. */
function check(family, run) {
  const { cases } = JSON.parse(readFileSync(new URL(`${family}.json`, corpus), "utf8"));
  assert.ok(cases.length > 0, `${family}: no cases`);
  const failures = [];
  for (const c of cases) {
    let got;
    try {
      got = run(c.input);
    } catch (e) {
      got = { thrown: String(e?.stack ?? e) };
    }
    try {
      assert.deepStrictEqual(got, c.expect);
    } catch {
      failures.push(`  ${family}/${c.name}: expected ${JSON.stringify(c.expect)}, got ${JSON.stringify(got)}`);
    }
  }
  assert.equal(failures.length, 0, `${failures.length} of ${cases.length} conformance cases disagree with model/conformance/${family}.json:\n${failures.join("\n")}`);
}

/** A RuleError as the corpus records it: its kind and the named parts of where. */
function ruleError(e, ...where) {
  if (typeof e?.kind !== "string") throw e;
  return { error: Object.fromEntries([["kind", e.kind], ...where.map((w) => [w, e[w] ?? null])]) };
}

test("conformance: label selectors", () => {
  check("selectors", ({ selector, labels }) => {
    let matches;
    try {
      matches = parseSelector(selector);
    } catch (e) {
      return ruleError(e, "at");
    }
    return { matches: labels.map((l) => matches(l)) };
  });
});

test("conformance: index paths", () => {
  check("index_paths", ({ path, object }) => {
    try {
      checkPath(path);
    } catch (e) {
      return ruleError(e);
    }
    return { values: indexValues(path, object) };
  });
});

const keyText = (k) => `${k.apiVersion}/${k.kind}/${k.namespace ? `${k.namespace}/` : ""}${k.name ?? `${k.generateName}*`}`;

test("conformance: action targets (the Outcome builders and the fake's execute)", () => {
  check("targets", ({ object, verb, namespaced }) => {
    // The builders refuse what the rule refuses (the reconcile's permanent error) ...
    const built = verb === "create" ? new Outcome().create(object) : new Outcome().apply(object);
    let ruled;
    try {
      ruled = checkTarget(object, verb);
    } catch (e) {
      assert.ok(built.invalid !== undefined, `the ${verb} builder took what the rule refuses: ${e.message}`);
      return ruleError(e, "field");
    }
    assert.equal(built.invalid, undefined, `the ${verb} builder refused what the rule takes`);
    // ... and the fake carries out what it takes.
    new FakeCache(new Metadata("conformance", "0").reconciles({ apiVersion: "v1", kind: "ConfigMap" })).execute(built);
    try {
      return { target: keyText(checkTarget(object, verb, namespaced)) };
    } catch (e) {
      return ruleError(e, "field");
    }
  });
});

test("conformance: a child given its owner (createOwned)", () => {
  check("children", ({ child, ownerNamespace, ownerRef }) => {
    // The builder, given the owner the reference is of: refuses what the rule refuses, and
    // creates the child the rule makes (when that child is a valid create).
    const owner = { apiVersion: ownerRef.apiVersion, kind: ownerRef.kind, metadata: { name: ownerRef.name, uid: ownerRef.uid, namespace: ownerNamespace ?? undefined } };
    const built = new Outcome().createOwned(owner, child);
    let adopted;
    try {
      adopted = adopt(child, ownerNamespace ?? undefined, ownerRef);
    } catch (e) {
      assert.ok(built.invalid !== undefined, `createOwned took what the rule refuses: ${e.message}`);
      return ruleError(e);
    }
    let valid = true;
    try {
      checkTarget(adopted, "create");
    } catch {
      valid = false;
    }
    if (valid) assert.deepStrictEqual(built.actions[0]?.object, adopted, "createOwned made another child");
    else assert.ok(built.invalid !== undefined, "createOwned created an invalid child");
    return { child: adopted };
  });
});

/**
 * A patch of `before` by the rule, checked against what the fake does with it: the patched
 * object, nothing (a conflict: a failed test, a path not in the object), or a refusal (throws).
 */
function patched(type, before, body) {
  const fake = () => FakeCache.patched(type, before, body);
  let after;
  try {
    after = type === "json" ? jsonPatch(before, body) : mergePatch(before, body);
  } catch (e) {
    if (["test_failed", "does_not_apply"].includes(e.kind)) assert.equal(fake(), undefined, "the fake applied a patch that does not apply");
    else assert.throws(fake, (thrown) => thrown.kind === e.kind, "the fake took a patch the host refuses");
    return type === "json" ? ruleError(e, "index") : ruleError(e);
  }
  assert.deepStrictEqual(fake(), after, "the fake patched otherwise");
  return { after };
}

test("conformance: merge patches", () => {
  check("merge_patches", ({ before, patch }) => patched("merge", before, patch));
});

test("conformance: JSON patches (move and copy refused)", () => {
  check("json_patches", ({ before, ops }) => patched("json", before, ops));
});

test("conformance: preconditions", () => {
  check("preconditions", ({ object, uid, resourceVersion }) => ({ holds: preconditionsHold({ uid, resourceVersion }, object) }));
});

test("conformance: event -> key mappings (mappedKeys)", () => {
  check("mappings", ({ primary, mapping, index, primaries, related }) => {
    const primaryKind = { apiVersion: primary.apiVersion, kind: primary.kind };
    const relatedKind = { apiVersion: related.apiVersion, kind: related.kind };
    const metadata = new Metadata("conformance", "0").reconciles(primaryKind).watch(new Watch(relatedKind, mapping));
    if (index) metadata.index(primaryKind, index.name, index.path);
    const fake = new FakeCache(metadata);
    for (const p of primaries) fake.add(p);
    fake.add(related);
    return { keys: fake.mappedKeys(objectKey(related)).map(keyString).sort() };
  });
});
