// Label selectors, index paths and field paths, with the host's rules (wasmloop-model), for the
// FakeCache: what the host's cache does with them, in JavaScript.

import { RuleError, checkKey, parseSelector } from "./rules.js";

export { parseSelector };

/** Whether `obj`'s labels match the selector text. */
export function matchesSelector(text, obj) {
  return parseSelector(text)(obj?.metadata?.labels ?? {});
}

/** Whether `obj`'s annotations match the (annotation) selector text, in label-selector syntax. */
export function matchesAnnotationSelector(text, obj) {
  return parseSelector(text)(obj?.metadata?.annotations ?? {});
}

function splitMapKey(path) {
  for (const map of ["metadata.annotations", "metadata.labels"]) {
    if (path.startsWith(map + ".")) return [map, path.slice(map.length + 1)];
  }
  return [path, undefined];
}

/**
 * The segments of the dotted part of a field path (`.` inside filters kept in them): `{name,
 * filters: [[field, value], ...]}`; throws naming what is wrong (wasmloop-model's `segments`).
 */
function segments(fields) {
  const out = [];
  let rest = fields;
  for (;;) {
    const name = /^[^.[]*/.exec(rest)[0];
    if (name === "") throw new RuleError("segment", "empty segment (leading, trailing or doubled `.`)");
    if (!/^[A-Za-z0-9_-]+$/.test(name)) throw new RuleError("segment", `segment \`${name}\` may contain only letters, digits, \`_\` and \`-\` (a filter is \`[field=value]\`)`);
    rest = rest.slice(name.length);
    const filters = [];
    while (rest.startsWith("[")) {
      const close = rest.indexOf("]");
      if (close < 0) throw new RuleError("segment", `filter \`${rest}\` of segment \`${name}\` has no \`]\``);
      const filter = rest.slice(1, close);
      if (/^[0-9]+$/.test(filter)) throw new RuleError("segment", `segment \`${name}[${filter}]\`: write \`${name}.${filter}\` to pick a list position (a filter is \`[field=value]\`)`);
      const eq = filter.indexOf("=");
      if (eq < 0) throw new RuleError("segment", `filter \`[${filter}]\` of segment \`${name}\` is not \`[field=value]\``);
      const [field, value] = [filter.slice(0, eq), filter.slice(eq + 1)];
      if (!/^[A-Za-z0-9_-]+$/.test(field)) throw new RuleError("segment", `filter \`[${filter}]\` of segment \`${name}\`: \`${field}\` is not a field name`);
      if (value === "" || value.includes("[")) throw new RuleError("segment", `filter \`[${filter}]\` of segment \`${name}\`: the value is empty or holds \`[\``);
      if (/^[0-9]+$/.test(name)) throw new RuleError("segment", `segment \`${name}\` picks a list position: it takes no filter`);
      filters.push([field, value]);
      rest = rest.slice(close + 1);
    }
    out.push({ name, filters });
    if (rest === "" && filters.length > 0) throw new RuleError("segment", `segment \`${name}\` ends the path with a filter: it keeps objects, which have no value to index (name the field to index after it: \`${name}[…].name\`)`);
    if (rest === "") return out;
    if (!rest.startsWith(".")) throw new RuleError("segment", `after segment \`${name}\`: \`${rest}\` (expected \`.\` or \`[field=value]\`)`);
    rest = rest.slice(1);
  }
}

/** Check a declared index or field path as the host does at load; throws the reason. */
export function checkPath(path) {
  const label = path.startsWith("labels.") ? path.slice(7) : path.startsWith("metadata.labels.") ? path.slice(16) : undefined;
  if (label !== undefined) return checkKey(label);
  if (path === "") throw new RuleError("empty", "the path is empty");
  const [fields, mapKey] = splitMapKey(path);
  if (mapKey !== undefined) checkKey(mapKey);
  segments(fields);
}

/** Check a declared metadata field's path: an index path without filters (a field reads one value). */
export function checkFieldPath(path) {
  checkPath(path);
  if (path.includes("[")) throw new Error(`${JSON.stringify(path)}: a metadata field reads one value: filters ([field=value]) are for indexes`);
}

/** Whether `v` passes every filter of `seg`: an object whose field is that scalar (numbers and booleans as JSON text). */
function keeps(seg, v) {
  return seg.filters.every(([field, want]) => {
    const got = v && typeof v === "object" && !Array.isArray(v) ? v[field] : undefined;
    if (typeof got === "string") return got === want;
    if (typeof got === "number" || typeof got === "boolean") return JSON.stringify(got) === want;
    return false;
  });
}

function collect(v, segs, out) {
  if (Array.isArray(v)) {
    if (segs.length > 0 && /^[0-9]+$/.test(segs[0].name)) {
      const item = v[Number(segs[0].name)];
      if (item !== undefined) collect(item, segs.slice(1), out);
    } else v.forEach((item) => collect(item, segs, out));
    return;
  }
  if (segs.length > 0) {
    const [seg, rest] = [segs[0], segs.slice(1)];
    if (!(v && typeof v === "object" && seg.name in v)) return;
    const child = v[seg.name];
    if (seg.filters.length > 0 && Array.isArray(child)) child.filter((i) => keeps(seg, i)).forEach((item) => collect(item, rest, out));
    else if (keeps(seg, child)) collect(child, rest, out);
    return;
  }
  if (typeof v === "string") out.push(v);
  else if (typeof v === "number" || typeof v === "boolean") out.push(JSON.stringify(v));
}

/** The values index path `path` gives for `obj` (the host's IndexPath::values), sorted, distinct. */
export function indexValues(path, obj) {
  const label = path.startsWith("labels.") ? path.slice(7) : path.startsWith("metadata.labels.") ? path.slice(16) : undefined;
  if (label !== undefined) {
    const v = obj?.metadata?.labels?.[label];
    return typeof v === "string" ? [v] : [];
  }
  const [fields, mapKey] = splitMapKey(path);
  let segs;
  try {
    segs = [...segments(fields), ...(mapKey === undefined ? [] : [{ name: mapKey, filters: [] }])];
  } catch {
    return [];
  }
  const out = [];
  collect(obj, segs, out);
  return [...new Set(out)].sort();
}

/** The value at field path `path` (the host's `field`), undefined where missing or null. */
export function fieldValue(obj, path) {
  for (const [prefix, map] of [["metadata.labels.", "labels"], ["labels.", "labels"], ["metadata.annotations.", "annotations"]]) {
    if (path.startsWith(prefix)) return obj?.metadata?.[map]?.[path.slice(prefix.length)] ?? undefined;
  }
  let at = obj;
  for (const seg of path.split(".")) {
    if (Array.isArray(at)) at = /^[0-9]+$/.test(seg) ? at[Number(seg)] : undefined;
    else at = at && typeof at === "object" ? at[seg] : undefined;
    if (at === undefined) return undefined;
  }
  return at === null ? undefined : at;
}
