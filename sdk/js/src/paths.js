// Label selectors, index paths and field paths, with the host's rules (wasmloop-model), for the
// FakeCache: what the host's cache does with them, in JavaScript.

const KEY = /^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*\/)?[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$/;

function checkKey(key) {
  if (!key || key.length > 317 || !KEY.test(key)) throw new Error(`invalid label key ${JSON.stringify(key)}`);
}

/** Split a selector on commas outside parentheses. */
function terms(text) {
  const out = [];
  let depth = 0;
  let cur = "";
  for (const ch of text) {
    if (ch === "(") depth++;
    if (ch === ")") depth--;
    if (ch === "," && depth === 0) {
      out.push(cur);
      cur = "";
    } else cur += ch;
  }
  out.push(cur);
  return out.map((t) => t.trim());
}

/**
 * Parse a label selector (`a=b`, `a==b`, `a!=b`, `a`, `!a`, `a in (x,y)`, `a notin (x,y)`,
 * comma-separated, all must hold) into a matcher `(labels) => boolean`; throws naming what is wrong.
 */
export function parseSelector(text) {
  if (text.trim() === "") return () => true;
  const reqs = terms(text).map((t) => {
    if (t === "") throw new Error("empty requirement");
    let m;
    if ((m = /^!\s*(\S+)$/.exec(t))) {
      checkKey(m[1]);
      return (l) => !(m[1] in l);
    }
    if ((m = /^(\S+?)\s+(in|notin)\s+\((.*)\)$/.exec(t))) {
      checkKey(m[1]);
      const values = m[3].split(",").map((v) => v.trim());
      const k = m[1];
      return m[2] === "in" ? (l) => k in l && values.includes(l[k]) : (l) => !(k in l) || !values.includes(l[k]);
    }
    if ((m = /^([^=!\s]+)\s*(==|=|!=)\s*(\S*)$/.exec(t))) {
      checkKey(m[1]);
      const [k, op, v] = [m[1], m[2], m[3]];
      return op === "!=" ? (l) => l[k] !== v : (l) => l[k] === v;
    }
    if (/^\S+$/.test(t)) {
      checkKey(t);
      return (l) => t in l;
    }
    throw new Error(`cannot parse ${JSON.stringify(t)}`);
  });
  return (labels) => reqs.every((r) => r(labels ?? {}));
}

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

/** Check a declared index or field path as the host does at load; throws the reason. */
export function checkPath(path) {
  const label = path.startsWith("labels.") ? path.slice(7) : path.startsWith("metadata.labels.") ? path.slice(16) : undefined;
  if (label !== undefined) return checkKey(label);
  if (path === "") throw new Error("the path is empty");
  const [fields, mapKey] = splitMapKey(path);
  if (mapKey !== undefined) checkKey(mapKey);
  for (const seg of fields.split(".")) {
    if (seg === "") throw new Error("empty segment");
    if (!/^[A-Za-z0-9_-]+$/.test(seg)) throw new Error(`segment \`${seg}\` is not a field name`);
  }
}

function collect(v, segs, out) {
  if (Array.isArray(v)) {
    if (segs.length > 0 && /^[0-9]+$/.test(segs[0])) {
      const item = v[Number(segs[0])];
      if (item !== undefined) collect(item, segs.slice(1), out);
    } else v.forEach((item) => collect(item, segs, out));
    return;
  }
  if (segs.length > 0) {
    if (v && typeof v === "object" && segs[0] in v) collect(v[segs[0]], segs.slice(1), out);
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
  const segs = [...fields.split("."), ...(mapKey === undefined ? [] : [mapKey])];
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
