// TypeScript declarations of the contract, generated from wit/controller.wit: its records,
// variants and enums as the component's JavaScript sees them (QuickJS bindings: records with
// camelCase fields, variants as `{tag, val}`, enums as strings, options as `T | null`, u64 and
// s64 as numbers), and the `cache`, `log` and `plugin` interfaces' functions. Run
// `wasmloop-js types` after changing the WIT; test/contract.test.js checks the file is current.

const camel = (s) => s.replace(/^%/, "").replace(/-([a-z0-9])/g, (_, c) => c.toUpperCase());
const pascal = (s) => camel(s).replace(/^[a-z]/, (c) => c.toUpperCase());

function tsType(t) {
  t = t.trim();
  let m;
  if ((m = /^option<(.*)>$/.exec(t))) return `${tsType(m[1])} | null`;
  if (t === "list<u8>") return "Uint8Array"; // the component model's bytes, as QuickJS and jco lift them
  if ((m = /^list<(.*)>$/.exec(t))) {
    const inner = tsType(m[1]);
    return /[|&]/.test(inner) ? `Array<${inner}>` : `${inner}[]`;
  }
  if ((m = /^tuple<(.*)>$/.exec(t))) return `[${splitTop(m[1]).map(tsType).join(", ")}]`;
  if ((m = /^result<(.*)>$/.exec(t))) return tsType(splitTop(m[1])[0]);
  switch (t) {
    case "string":
      return "string";
    case "bool":
      return "boolean";
    case "u8":
    case "u16":
    case "u32":
    case "u64":
    case "s8":
    case "s16":
    case "s32":
    case "s64":
    case "f32":
    case "f64":
      return "number";
    default:
      return pascal(t);
  }
}

function splitTop(s) {
  const out = [];
  let depth = 0;
  let cur = "";
  for (const c of s) {
    if (c === "<") depth++;
    if (c === ">") depth--;
    if (c === "," && depth === 0) {
      out.push(cur.trim());
      cur = "";
    } else cur += c;
  }
  if (cur.trim()) out.push(cur.trim());
  return out;
}

function doc(lines, indent) {
  if (!lines.length) return "";
  return `${indent}/** ${lines.join(`\n${indent} * `)} */\n`;
}

/** The declarations for the WIT text `wit`. */
export function witToTypeScript(wit) {
  const version = /^package\s+([^;]+);/m.exec(wit)[1];
  let out = `// Generated from wit/controller.wit (${version}) by \`wasmloop-js types\`: do not edit.\n\n`;
  let pendingDoc = [];
  let iface = null;
  const body = [];
  const lines = wit.split("\n");
  for (let i = 0; i < lines.length; i++) {
    const line = lines[i].trim();
    if (line.startsWith("///")) {
      pendingDoc.push(line.slice(3).trim());
      continue;
    }
    let m;
    if ((m = /^interface\s+([a-z-]+)\s*\{/.exec(line))) {
      iface = m[1];
      pendingDoc = [];
      continue;
    }
    if ((m = /^(record|variant|enum)\s+([a-z0-9-]+)\s*\{\s*(.*?)\s*(\})?$/.exec(line))) {
      const [, what, name, inline, closed] = m;
      const members = [];
      let memberDoc = [];
      const take = (text) => {
        for (const part of text.split(",").map((p) => p.trim()).filter(Boolean)) {
          members.push({ text: part, doc: memberDoc });
          memberDoc = [];
        }
      };
      if (inline) take(inline);
      if (!closed) {
        for (i++; i < lines.length; i++) {
          const l = lines[i].trim();
          if (l === "}") break;
          if (l.startsWith("///")) memberDoc.push(l.slice(3).trim());
          else if (l) {
            // A member may span a comma inside <...>: split at top level.
            for (const part of splitTop(l.replace(/,$/, ""))) {
              members.push({ text: part, doc: memberDoc });
              memberDoc = [];
            }
          }
        }
      }
      out += doc(pendingDoc, "");
      pendingDoc = [];
      if (what === "record") {
        out += `export interface ${pascal(name)} {\n`;
        for (const { text, doc: d } of members) {
          const [field, type] = [text.slice(0, text.indexOf(":")), text.slice(text.indexOf(":") + 1)];
          out += doc(d, "  ") + `  ${camel(field.trim())}: ${tsType(type)};\n`;
        }
        out += "}\n\n";
      } else if (what === "enum") {
        out += `export type ${pascal(name)} = ${members.map(({ text }) => JSON.stringify(text)).join(" | ")};\n\n`;
      } else {
        const cases = members.map(({ text, doc: d }) => {
          const cm = /^([a-z0-9-]+)(?:\((.*)\))?$/.exec(text);
          const dd = d.length ? ` /* ${d.join(" ")} */` : "";
          return cm[2] ? `{ tag: ${JSON.stringify(cm[1])}; val: ${tsType(cm[2])} }${dd}` : `{ tag: ${JSON.stringify(cm[1])} }${dd}`;
        });
        out += `export type ${pascal(name)} =\n  | ${cases.join("\n  | ")};\n\n`;
      }
      continue;
    }
    if ((m = /^(%?[a-z-]+):\s*func\((.*)\)\s*(?:->\s*(.+))?;$/.exec(line)) && iface) {
      const params = splitTop(m[2]).map((p) => {
        const [n, t] = [p.slice(0, p.indexOf(":")), p.slice(p.indexOf(":") + 1)];
        return `${camel(n.trim())}: ${tsType(t)}`;
      });
      const throws = m[3] && /^result</.test(m[3].trim()) ? splitTop(/^result<(.*)>$/.exec(m[3].trim())[1])[1] : undefined;
      const d = [...pendingDoc, ...(throws ? [`@throws ${pascal(throws)}`] : [])];
      body.push({ iface, text: doc(d, "  ") + `  ${camel(m[1])}(${params.join(", ")}): ${m[3] ? tsType(m[3]) : "void"};\n` });
      pendingDoc = [];
      continue;
    }
    if (line === "}" && iface) iface = null;
    if (line && !line.startsWith("use ")) pendingDoc = [];
  }
  for (const name of [...new Set(body.map((b) => b.iface))]) {
    out += `/** The \`${name}\` interface. */\nexport interface ${pascal(name)}Interface {\n${body
      .filter((b) => b.iface === name)
      .map((b) => b.text)
      .join("")}}\n\n`;
  }
  return out;
}
