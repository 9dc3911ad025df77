// The host's rules (wasmloop-model), in JavaScript, for the FakeCache and the Outcome builders:
// label selectors, what an action targets, a child's owner, merge and JSON patches,
// preconditions, event → key mappings. Each is pinned by the conformance corpus
// (model/conformance/*.json, run by test/conformance.test.js): a case the host decides one way
// and this file another fails there, naming the case. A refusal throws a RuleError whose `kind`
// (and `at`, `field` or `index`) is the corpus's, the message is for people.

/** A rule broken: `kind` is stable (the corpus's), the message says what and where. */
export class RuleError extends Error {
  constructor(kind, message, where = {}) {
    super(message);
    this.name = "RuleError";
    this.kind = kind;
    Object.assign(this, where);
  }
}

// ---- label selectors (wasmloop_model::selector)

const LABEL_NAME = /^[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$/;
const PREFIX_PART = /^[a-z0-9]([-a-z0-9]*[a-z0-9])?$/;

const isLabelName = (s) => s.length <= 63 && LABEL_NAME.test(s);

/** Check a label key, `[prefix/]name`; throws a RuleError of kind `key`. */
export function checkKey(key) {
  const slash = key.indexOf("/");
  const [prefix, name] = slash < 0 ? [undefined, key] : [key.slice(0, slash), key.slice(slash + 1)];
  if (prefix !== undefined && !(prefix.length > 0 && prefix.length <= 253 && prefix.split(".").every((p) => PREFIX_PART.test(p)))) {
    throw new RuleError("key", `invalid label key \`${key}\`: the prefix must be a lowercase DNS subdomain`, { at: key });
  }
  if (!isLabelName(name)) {
    throw new RuleError("key", `invalid label key \`${key}\`: the name must be 1-63 characters [A-Za-z0-9-_.], starting and ending with an alphanumeric`, { at: key });
  }
}

function checkValue(key, value) {
  if (value !== "" && !isLabelName(value)) {
    throw new RuleError("value", `invalid value \`${value}\` for \`${key}\`: at most 63 characters [A-Za-z0-9-_.], starting and ending with an alphanumeric`, { at: value });
  }
}

const syntax = (message) => new RuleError("syntax", message, { at: null });

function tokenize(text) {
  const out = [];
  let i = 0;
  while (i < text.length) {
    const c = text[i];
    if (/\s/.test(c)) i += 1;
    else if ("(),".includes(c)) out.push({ t: c }), (i += 1);
    else if (c === "=") out.push({ t: "=" }), (i += text.startsWith("==", i) ? 2 : 1);
    else if (c === "!") text.startsWith("!=", i) ? (out.push({ t: "!=" }), (i += 2)) : (out.push({ t: "!" }), (i += 1));
    else if (c === "<" || c === ">") throw new RuleError("operator", `operator \`${c}\` is not supported in label selectors`, { at: null });
    else {
      let j = i;
      while (j < text.length && !/\s/.test(text[j]) && !"!=(),<>".includes(text[j])) j += 1;
      out.push({ t: "word", w: text.slice(i, j) });
      i = j;
    }
  }
  return out;
}

const show = (tok) => (tok === undefined ? "the end" : tok.t === "word" ? `\`${tok.w}\`` : `\`${tok.t}\``);

/**
 * Parse a label selector (`a=b`, `a==b`, `a!=b`, `a`, `!a`, `a in (x,y)`, `a notin (x,y)`,
 * comma-separated, all must hold) into a matcher `(labels) => boolean`, by the host's grammar;
 * throws a RuleError (kind `operator`, `syntax`, `key` or `value`) naming what is wrong.
 */
export function parseSelector(text) {
  const toks = tokenize(text);
  let pos = 0;
  const peek = () => toks[pos];
  const next = () => toks[pos++];
  const key = () => {
    const t = next();
    if (t?.t === "word") return checkKey(t.w), t.w;
    if (t?.t === ",") throw syntax("empty requirement (two commas in a row?)");
    throw syntax(`expected a label key, found ${show(t)}`);
  };
  const value = (k) => {
    const t = peek();
    if (t === undefined || t.t === ",") return "";
    if (t.t !== "word") throw syntax(`expected a value for \`${k}\`, found ${show(t)}`);
    pos += 1;
    checkValue(k, t.w);
    return t.w;
  };
  const set = (k) => {
    if (next()?.t !== "(") throw syntax(`expected \`(\` after \`in\`/\`notin\` for \`${k}\``);
    const values = new Set();
    let expectValue = true;
    for (;;) {
      const t = next();
      if (t?.t === "word" && expectValue) checkValue(k, t.w), values.add(t.w), (expectValue = false);
      else if (t?.t === ",") {
        if (expectValue) throw syntax(`empty value in the set for \`${k}\``);
        expectValue = true;
      } else if (t?.t === ")") {
        if (values.size === 0) throw syntax(`the set for \`${k}\` needs at least one value`);
        if (expectValue) throw syntax(`empty value in the set for \`${k}\``);
        return values;
      } else if (t === undefined) throw syntax(`missing \`)\` after the set for \`${k}\``);
      else throw syntax(`unexpected ${show(t)} in the set for \`${k}\``);
    }
  };
  // A label is there when it is a string (as the model reads labels).
  const has = (l, k) => Object.hasOwn(l, k) && typeof l[k] === "string";
  const requirement = () => {
    if (peek()?.t === "!") {
      pos += 1;
      const k = key();
      return (l) => !has(l, k);
    }
    const k = key();
    const t = peek();
    if (t === undefined || t.t === ",") return (l) => has(l, k);
    pos += 1;
    if (t.t === "=") {
      const v = value(k);
      return (l) => has(l, k) && l[k] === v;
    }
    if (t.t === "!=") {
      const v = value(k);
      return (l) => !has(l, k) || l[k] !== v;
    }
    if (t.t === "word" && t.w === "in") {
      const s = set(k);
      return (l) => has(l, k) && s.has(l[k]);
    }
    if (t.t === "word" && t.w === "notin") {
      const s = set(k);
      return (l) => !has(l, k) || !s.has(l[k]);
    }
    throw syntax(`after key \`${k}\` expected \`=\`, \`==\`, \`!=\`, \`in\`, \`notin\`, \`,\` or the end, found ${show(t)}`);
  };
  const reqs = [];
  if (toks.length > 0) {
    for (;;) {
      reqs.push(requirement());
      const t = next();
      if (t === undefined) break;
      if (t.t !== ",") throw syntax(`expected \`,\` or the end, found ${show(t)}`);
      if (peek() === undefined) throw syntax("trailing comma");
    }
  }
  return (labels) => reqs.every((r) => r(labels ?? {}));
}

// ---- names and targets (wasmloop_model::name, wasmloop_model::target)

const typeOf = (v) => (v === null ? "null" : Array.isArray(v) ? "an array" : typeof v === "object" ? "an object" : `a ${typeof v}`);

function dnsLabel(s, max) {
  return s.length > 0 && s.length <= max && /^[a-z0-9-]+$/.test(s) && !s.startsWith("-") && !s.endsWith("-");
}

function dnsSubdomain(s) {
  return s.length > 0 && s.length <= 253 && s.split(".").every((l) => dnsLabel(l, 63));
}

/** The bytes of `s` in UTF-8 (the model counts bytes). */
function utf8Length(s) {
  let n = 0;
  for (const ch of s) {
    const c = ch.codePointAt(0);
    n += c < 0x80 ? 1 : c < 0x800 ? 2 : c < 0x10000 ? 3 : 4;
  }
  return n;
}

/** Why `s` is not a request-path segment of at most `max` characters (the rule's kind), or undefined. */
function pathSegment(s, max) {
  if (s === "") return "empty";
  if (s === "." || s === "..") return "dots";
  if (s.includes("/")) return "slash";
  if (s.includes("%")) return "percent";
  // Rust's char::is_whitespace and is_control.
  if (/[\s\p{Cc}]/u.test(s)) return "whitespace";
  if (utf8Length(s) > max) return "too_long";
  return undefined;
}

/** A string field; absent, null and "" are undefined; another type throws. */
function optionalStr(v, field) {
  if (v === undefined || v === null) return undefined;
  if (typeof v !== "string") throw new RuleError("not_a_string", `${field} must be a string`, { field });
  return v === "" ? undefined : v;
}

/**
 * What an action on object `obj` targets, by the host's rule: `{apiVersion, kind, namespace,
 * name}` or `{…, generateName}` (only for `verb` "create"); throws a RuleError (kind and field
 * as the corpus's `targets`). With `namespaced` (from discovery), the scope is checked too.
 */
export function checkTarget(obj, verb, namespaced) {
  if (obj === null || typeof obj !== "object" || Array.isArray(obj)) throw new RuleError("not_an_object", `expected a JSON object, got ${typeOf(obj)}`, { field: null });
  const required = (v, field) => {
    const s = optionalStr(v, field);
    if (s === undefined) throw new RuleError("missing", `the object has no ${field}`, { field });
    return s;
  };
  const apiVersion = required(obj.apiVersion, "apiVersion");
  const kind = required(obj.kind, "kind");
  const meta = obj.metadata;
  if (meta === undefined || meta === null) throw new RuleError("missing", "the object has no metadata.name", { field: "metadata.name" });
  if (typeof meta !== "object" || Array.isArray(meta)) throw new RuleError("not_a_string", "metadata (an object) must be a string", { field: "metadata (an object)" });
  const namespace = optionalStr(meta.namespace, "metadata.namespace");
  const name = optionalStr(meta.name, "metadata.name");
  const generateName = optionalStr(meta.generateName, "metadata.generateName");
  if (name === undefined) {
    if (generateName !== undefined && verb !== "create") {
      throw new RuleError("generate_name_not_allowed", `metadata.generateName is only allowed on create; ${verb} needs metadata.name`, { field: "metadata.generateName" });
    }
    if (generateName === undefined) {
      const field = verb === "create" ? "metadata.name (or metadata.generateName)" : "metadata.name";
      throw new RuleError("missing", `the object has no ${field}`, { field });
    }
  }
  const slash = apiVersion.indexOf("/");
  const versionOk = slash < 0 ? dnsLabel(apiVersion, 63) : dnsSubdomain(apiVersion.slice(0, slash)) && dnsLabel(apiVersion.slice(slash + 1), 63);
  if (!versionOk) throw new RuleError("api_version", `invalid apiVersion ${JSON.stringify(apiVersion)}: expected \`version\` or \`group/version\``, { field: "apiVersion" });
  if (!(kind.length <= 63 && /^[A-Za-z][A-Za-z0-9]*$/.test(kind))) throw new RuleError("kind", `invalid kind ${JSON.stringify(kind)}: expected a type name such as \`Pod\``, { field: "kind" });
  if (kind.endsWith("List")) throw new RuleError("list_kind", `kind ${kind} is a list; an action writes exactly one object`, { field: "kind" });
  if (namespace !== undefined && !dnsLabel(namespace, 63)) throw new RuleError("namespace", `invalid namespace ${JSON.stringify(namespace)}: expected a DNS label`, { field: "metadata.namespace" });
  const [field, value, max] = name !== undefined ? ["metadata.name", name, 253] : ["metadata.generateName", generateName, 248];
  const why = pathSegment(value, max);
  if (why !== undefined) throw new RuleError(`name:${why}`, `invalid ${field} ${JSON.stringify(value.slice(0, 80))}: ${why}`, { field });
  const shown = `${apiVersion}/${kind}`;
  if (namespaced === false && namespace !== undefined) {
    throw new RuleError("namespace_on_cluster_scoped", `${shown} is cluster-scoped, but the action names namespace ${JSON.stringify(namespace)}`, { field: "metadata.namespace" });
  }
  if (namespaced === true && namespace === undefined) throw new RuleError("no_namespace_on_namespaced", `${shown} is namespaced, but the action names no namespace`, { field: "metadata.namespace" });
  return name !== undefined ? { apiVersion, kind, namespace, name } : { apiVersion, kind, namespace, generateName };
}

// ---- owners (wasmloop_model::owner)

const isObject = (v) => v !== null && typeof v === "object" && !Array.isArray(v);
const clone = (v) => (v === undefined ? undefined : JSON.parse(JSON.stringify(v)));

/** The owner reference marked `controller: true` (the first), if any. */
export function controllerOf(obj) {
  const refs = obj?.metadata?.ownerReferences;
  return Array.isArray(refs) ? refs.find((r) => r?.controller === true) : undefined;
}

/**
 * A copy of `child` in `ownerNamespace` (when it names none) with `ownerRef` as its controller;
 * throws a RuleError: `other_namespace` (owner references do not cross namespaces),
 * `other_controller`, `shape`. A controller with the same uid is kept as it is.
 */
export function adopt(child, ownerNamespace, ownerRef) {
  if (!isObject(child)) throw new RuleError("shape", "child is not a JSON object");
  const c = clone(child);
  c.metadata ??= {};
  if (!isObject(c.metadata)) throw new RuleError("shape", "child metadata is not a JSON object");
  if (ownerNamespace != null) {
    const ns = c.metadata.namespace;
    // A namespace that is not a string is none (and is replaced), as in the model.
    if (typeof ns !== "string") c.metadata.namespace = ownerNamespace;
    else if (ns !== ownerNamespace) {
      throw new RuleError("other_namespace", `child in namespace ${JSON.stringify(ns)} cannot be owned by an object in ${JSON.stringify(ownerNamespace)}`);
    }
  }
  c.metadata.ownerReferences ??= [];
  if (!Array.isArray(c.metadata.ownerReferences)) throw new RuleError("shape", "child ownerReferences is not an array");
  const other = controllerOf(c);
  if (other !== undefined) {
    if (JSON.stringify(other.uid) !== JSON.stringify(ownerRef?.uid)) throw new RuleError("other_controller", `child already has a controller: ${JSON.stringify(other)}`);
    return c;
  }
  c.metadata.ownerReferences.push(clone(ownerRef));
  return c;
}

// ---- patches (wasmloop_model::patch)

/** Merge `patch` into a copy of `target` (RFC 7386), unchecked: an apply's object, a status. */
export function mergeInto(target, patch) {
  if (!isObject(patch)) return clone(patch);
  const out = isObject(target) ? { ...target } : {};
  for (const [k, v] of Object.entries(patch)) {
    if (v === null) delete out[k];
    else out[k] = mergeInto(out[k], v);
  }
  return out;
}

/** `before` with merge patch `patch` applied; throws a RuleError `merge_not_an_object`. */
export function mergePatch(before, patch) {
  if (!isObject(patch)) throw new RuleError("merge_not_an_object", `a merge patch must be a JSON object, got ${typeOf(patch)}`);
  if (Object.hasOwn(patch, "metadata") && !isObject(patch.metadata)) {
    throw new RuleError("merge_metadata_not_an_object", `a merge patch's metadata must be a JSON object, got ${typeOf(patch.metadata)}`);
  }
  return mergeInto(before, patch);
}

/** Most segments a JSON patch path may have. */
export const MAX_PATH_SEGMENTS = 128;

/** Check a JSON patch as the host does before sending it; throws a RuleError naming the operation's index. */
export function checkJsonPatch(ops) {
  if (!Array.isArray(ops)) throw new RuleError("json_not_a_list", `a JSON patch must be a list of operations, got ${typeOf(ops)}`, { index: null });
  ops.forEach((op, index) => {
    const name = typeof op?.op === "string" ? op.op : "";
    if (!["add", "remove", "replace", "test"].includes(name)) throw new RuleError("op_refused", `operation ${index}: op ${JSON.stringify(name)} is not one of add, remove, replace, test`, { index });
    if (typeof op.path !== "string") throw new RuleError("path_not_a_string", `operation ${index}: path must be a string`, { index });
    if (op.path.split("/").length - 1 > MAX_PATH_SEGMENTS) throw new RuleError("path_too_deep", `operation ${index}: path has more than ${MAX_PATH_SEGMENTS} segments`, { index });
    if (name !== "remove" && !Object.hasOwn(op, "value")) throw new RuleError("no_value", `operation ${index}: ${name} needs a value`, { index });
  });
}

function pointer(path) {
  if (path === "") return [];
  if (!path.startsWith("/")) throw new Error("not a pointer");
  return path
    .slice(1)
    .split("/")
    .map((s) => s.replaceAll("~1", "/").replaceAll("~0", "~"));
}

const listIndex = (s, len) => (/^(0|[1-9][0-9]*)$/.test(s) ? Number(s) : s === "-" ? len : NaN);

/** `before` with JSON patch `ops` applied, all or nothing (RFC 6902); throws a RuleError naming the operation's index. */
export function jsonPatch(before, ops) {
  checkJsonPatch(ops);
  let out = clone(before);
  const parentOf = (segs) => {
    let at = out;
    for (const s of segs.slice(0, -1)) {
      at = Array.isArray(at) ? at[listIndex(s, Infinity)] : isObject(at) && Object.hasOwn(at, s) ? at[s] : undefined;
      if (at === undefined || at === null || typeof at !== "object") throw new Error("path");
    }
    return [at, segs[segs.length - 1]];
  };
  const get = (segs) => {
    let at = out;
    for (const s of segs) {
      at = Array.isArray(at) ? at[listIndex(s, Infinity)] : isObject(at) && Object.hasOwn(at, s) ? at[s] : undefined;
      if (at === undefined) throw new Error("path");
    }
    return at;
  };
  const add = (segs, value) => {
    if (segs.length === 0) return void (out = value);
    const [parent, last] = parentOf(segs);
    if (Array.isArray(parent)) {
      const i = listIndex(last, parent.length);
      if (!(i >= 0 && i <= parent.length)) throw new Error("index");
      parent.splice(i, 0, value);
    } else parent[last] = value;
  };
  const remove = (segs) => {
    if (segs.length === 0) throw new Error("root");
    const [parent, last] = parentOf(segs);
    if (Array.isArray(parent)) {
      const i = listIndex(last, Infinity);
      if (!(i >= 0 && i < parent.length)) throw new Error("index");
      parent.splice(i, 1);
    } else {
      if (!Object.hasOwn(parent, last)) throw new Error("missing");
      delete parent[last];
    }
  };
  ops.forEach((op, index) => {
    try {
      const segs = pointer(op.path);
      if (op.op === "add") add(segs, clone(op.value));
      else if (op.op === "remove") remove(segs);
      else if (op.op === "replace") get(segs), remove(segs), add(segs, clone(op.value));
      else if (JSON.stringify(canonical(get(segs))) !== JSON.stringify(canonical(op.value))) throw new RuleError("test_failed", `operation ${index}: the test failed (the value differs)`, { index });
    } catch (e) {
      if (e instanceof RuleError) throw e;
      throw new RuleError("does_not_apply", `operation ${index}: the path does not apply to the object`, { index });
    }
  });
  return out;
}

/** `v` with object keys sorted, so equal JSON values print equal. */
function canonical(v) {
  if (Array.isArray(v)) return v.map(canonical);
  if (isObject(v)) return Object.fromEntries(Object.keys(v).sort().map((k) => [k, canonical(v[k])]));
  return v;
}

/** Whether `obj` is the one the preconditions name: same uid and resourceVersion, where given and not empty. */
export function preconditionsHold(pre, obj) {
  const holds = (want, field) => want == null || want === "" || obj?.metadata?.[field] === want;
  return holds(pre?.uid, "uid") && holds(pre?.resourceVersion, "resourceVersion");
}

// ---- event → key mappings (wasmloop_model::mapping::keys)

const group = (apiVersion) => (apiVersion.includes("/") ? apiVersion.slice(0, apiVersion.indexOf("/")) : "");

/**
 * The keys of the reconciled kind (`primary`, `namespaced` or not) that an event on `related`
 * maps to through `mapping` (`{tag, val}` as the contract has it). `primaries` are the reconciled
 * objects an index mapping looks among, `indexValues(index, obj)` an index's values for one,
 * `lookup(value, ns, name, obj)` what an index mapping looks up. Each key once, in order found.
 */
export function mappedKeys(mapping, primary, namespaced, related, primaries, indexValues, lookup) {
  const ns = related?.metadata?.namespace || undefined;
  const name = related?.metadata?.name ?? "";
  const key = (n) => ({ apiVersion: primary.apiVersion, kind: primary.kind, namespace: namespaced ? ns : undefined, name: n });
  let found = [];
  switch (mapping.tag) {
    case "owner": {
      const ref = controllerOf(related);
      const field = (f) => (typeof ref?.[f] === "string" ? ref[f] : "");
      if (ref && field("kind") === primary.kind && group(field("apiVersion")) === group(primary.apiVersion) && typeof ref.name === "string") found = [key(ref.name)];
      break;
    }
    case "label": {
      const v = related?.metadata?.labels?.[mapping.val];
      if (typeof v === "string" && v !== "") found = [key(v)];
      break;
    }
    case "same-name":
      found = [key(name)];
      break;
    case "namespace":
      if (ns) found = [{ apiVersion: primary.apiVersion, kind: primary.kind, namespace: undefined, name: ns }];
      break;
    case "index": {
      const { index, value } = mapping.val;
      const [values, sameNamespace] = lookup(value, ns, name, related);
      const limited = sameNamespace && namespaced && ns !== undefined;
      found = primaries
        .filter((p) => !limited || (p.metadata?.namespace || undefined) === ns)
        .filter((p) => indexValues(index, p).some((v) => values.includes(v)))
        .map((p) => ({ apiVersion: primary.apiVersion, kind: primary.kind, namespace: p.metadata?.namespace || undefined, name: p.metadata?.name ?? "" }));
      break;
    }
    default:
      throw new Error(`unknown mapping ${JSON.stringify(mapping)}`);
  }
  const out = [];
  const id = (k) => `${k.apiVersion}/${k.kind}/${k.namespace ?? ""}/${k.name}`;
  for (const k of found) if (!out.some((o) => id(o) === id(k))) out.push(k);
  return out;
}
