// A small YAML reader for test fixtures (Kubernetes manifests): `---`-separated documents, block
// mappings and sequences, flow `{...}` and `[...]`, plain, single- and double-quoted scalars,
// literal `|` and folded `>` block scalars, comments. Anchors, tags and multi-line plain scalars
// are not supported (they throw). Used by FakeCache only; never part of a component.

function scalar(text) {
  const t = text.trim();
  if (t === "" || t === "~" || t === "null" || t === "Null" || t === "NULL") return null;
  if (t === "true" || t === "True" || t === "TRUE") return true;
  if (t === "false" || t === "False" || t === "FALSE") return false;
  if (/^[-+]?[0-9]+$/.test(t)) return Number(t);
  if (/^[-+]?([0-9]+\.[0-9]*|\.[0-9]+)([eE][-+]?[0-9]+)?$/.test(t)) return Number(t);
  if (t.startsWith('"')) return JSON.parse(t);
  if (t.startsWith("'")) return t.slice(1, -1).replaceAll("''", "'");
  if (/^[&*!]/.test(t)) throw new Error(`YAML: anchors, aliases and tags are not supported: ${t}`);
  return t;
}

/** Strip a trailing comment (outside quotes). */
function stripComment(line) {
  let q = null;
  for (let i = 0; i < line.length; i++) {
    const c = line[i];
    if (q) {
      if (c === q && !(q === '"' && line[i - 1] === "\\")) q = null;
    } else if (c === '"' || c === "'") {
      if (i === 0 || /[\s:[{,]/.test(line[i - 1])) q = c;
    } else if (c === "#" && (i === 0 || /\s/.test(line[i - 1]))) return line.slice(0, i).trimEnd();
  }
  return line.trimEnd();
}

/** Parse a flow value (`{...}`, `[...]` or a scalar) starting at `s[i]`; returns [value, next index]. */
function flow(s, i = 0) {
  const ws = () => {
    while (i < s.length && /\s/.test(s[i])) i++;
  };
  const token = (stops) => {
    ws();
    if (s[i] === '"' || s[i] === "'") {
      const q = s[i];
      let j = i + 1;
      while (j < s.length && !(s[j] === q && (q === "'" ? s[j + 1] !== "'" : s[j - 1] !== "\\"))) j += q === "'" && s[j] === "'" ? 2 : 1;
      const text = s.slice(i, j + 1);
      i = j + 1;
      return scalar(text);
    }
    let j = i;
    while (j < s.length && !stops.includes(s[j]) && !(s[j] === ":" && /[\s,}\]]/.test(s[j + 1] ?? " "))) j++;
    const text = s.slice(i, j);
    i = j;
    return scalar(text);
  };
  const value = (stops) => {
    ws();
    if (s[i] === "{") {
      i++;
      const obj = {};
      for (;;) {
        ws();
        if (s[i] === "}") {
          i++;
          return obj;
        }
        const k = token(",}");
        ws();
        let v = null;
        if (s[i] === ":") {
          i++;
          v = value(",}");
        }
        obj[String(k)] = v;
        ws();
        if (s[i] === ",") i++;
        else if (s[i] !== "}") throw new Error(`YAML: expected , or } in ${s}`);
      }
    }
    if (s[i] === "[") {
      i++;
      const arr = [];
      for (;;) {
        ws();
        if (s[i] === "]") {
          i++;
          return arr;
        }
        arr.push(value(",]"));
        ws();
        if (s[i] === ",") i++;
        else if (s[i] !== "]") throw new Error(`YAML: expected , or ] in ${s}`);
      }
    }
    return token(stops);
  };
  const v = value("");
  return [v, i];
}

function inline(text) {
  const t = text.trim();
  if (t.startsWith("{") || t.startsWith("[")) {
    const [v, end] = flow(t);
    if (t.slice(end).trim() !== "") throw new Error(`YAML: trailing text after ${t}`);
    return v;
  }
  return scalar(t);
}

/** `key: rest` split at the first `: ` (or trailing `:`) outside quotes; undefined if not a key. */
function splitKey(text) {
  let q = null;
  for (let i = 0; i < text.length; i++) {
    const c = text[i];
    if (q) {
      if (c === q) q = null;
    } else if ((c === '"' || c === "'") && i === 0) q = c;
    else if (c === "{" || c === "[") return undefined;
    else if (c === ":" && (i + 1 === text.length || text[i + 1] === " ")) {
      return [String(scalar(text.slice(0, i))), text.slice(i + 1).trim()];
    }
  }
  return undefined;
}

function parseDoc(lines) {
  let pos = 0;
  const indentOf = (l) => l.length - l.trimStart().length;

  function blockScalar(header, parentIndent) {
    const folded = header.startsWith(">");
    const keep = header.includes("+");
    const strip = header.includes("-");
    const out = [];
    let indent;
    while (pos < lines.length) {
      const raw = lines[pos].raw;
      if (raw.trim() === "") {
        out.push("");
        pos++;
        continue;
      }
      const ind = indentOf(raw);
      if (ind <= parentIndent) break;
      indent ??= ind;
      out.push(raw.slice(indent));
      pos++;
    }
    while (!keep && out.length && out[out.length - 1] === "") out.pop();
    let text = folded ? out.join("\n").replace(/([^\n])\n(?=[^\n])/g, "$1 ") : out.join("\n");
    if (!strip) text += "\n";
    return text;
  }

  function node(indent) {
    if (pos >= lines.length) return null;
    const { text, indent: ind } = lines[pos];
    if (ind < indent) return null;
    if (text.startsWith("- ") || text === "-") return seq(ind);
    if (splitKey(text)) return map(ind);
    pos++;
    return inline(text);
  }

  function value(rest, ownIndent) {
    if (rest === "") {
      if (pos < lines.length && (lines[pos].indent > ownIndent || (lines[pos].indent === ownIndent && lines[pos].text.startsWith("-")))) {
        return node(lines[pos].indent);
      }
      return null;
    }
    if (rest.startsWith("|") || rest.startsWith(">")) return blockScalar(rest, ownIndent);
    return inline(rest);
  }

  function map(indent) {
    const obj = {};
    while (pos < lines.length && lines[pos].indent === indent && !lines[pos].text.startsWith("- ") && lines[pos].text !== "-") {
      const kv = splitKey(lines[pos].text);
      if (!kv) throw new Error(`YAML: expected key: value, got ${lines[pos].text}`);
      pos++;
      obj[kv[0]] = value(kv[1], indent);
    }
    return obj;
  }

  function seq(indent) {
    const arr = [];
    while (pos < lines.length && lines[pos].indent === indent && (lines[pos].text.startsWith("- ") || lines[pos].text === "-")) {
      const rest = lines[pos].text === "-" ? "" : lines[pos].text.slice(2).trim();
      const itemIndent = indent + 2;
      if (rest === "") {
        pos++;
        arr.push(value("", indent));
      } else if (splitKey(rest) && !rest.startsWith("{")) {
        // A mapping that starts on the dash line: continue it at the item's indent.
        lines[pos] = { text: rest, indent: indent + (lines[pos].text.length - lines[pos].text.slice(1).trimStart().length), raw: lines[pos].raw };
        arr.push(map(lines[pos].indent));
      } else {
        pos++;
        arr.push(rest.startsWith("|") || rest.startsWith(">") ? blockScalar(rest, indent) : inline(rest));
      }
      void itemIndent;
    }
    return arr;
  }

  const v = node(0);
  if (pos < lines.length) throw new Error(`YAML: unexpected line: ${lines[pos].raw}`);
  return v;
}

/** Parse a YAML stream into its documents (empty documents are left out). */
export function parseYamlStream(text) {
  const docs = [];
  let cur = [];
  for (const raw of text.replaceAll("\r\n", "\n").split("\n")) {
    if (/^---(\s|$)/.test(raw) || /^\.\.\.\s*$/.test(raw)) {
      docs.push(cur);
      cur = [];
      const rest = raw.slice(3).trim();
      if (rest) cur.push(rest);
      continue;
    }
    cur.push(raw);
  }
  docs.push(cur);
  return docs
    .map((doc) => {
      const lines = doc.map((raw) => ({ raw, text: stripComment(raw).trim(), indent: raw.length - raw.trimStart().length })).filter((l) => l.text !== "");
      // Keep raw blank lines out, except inside block scalars, which read `raw` themselves.
      return lines.length ? parseDoc(lines) : null;
    })
    .filter((d) => d !== null);
}
