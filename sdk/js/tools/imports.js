// What a component imports, read from its binary (the outer component's import sections), and
// whether the wasmloop host provides it. The build refuses a component with an import the host
// would refuse, naming it, before anyone packs it. (The host's list: host/src/plugin/imports.rs.)

/** Interfaces (`package/interface`, any version) the host provides. */
export const PROVIDED = [
  "wasi:cli/environment",
  "wasi:cli/exit",
  "wasi:cli/stdin",
  "wasi:cli/stdout",
  "wasi:cli/stderr",
  "wasi:cli/terminal-input",
  "wasi:cli/terminal-output",
  "wasi:cli/terminal-stdin",
  "wasi:cli/terminal-stdout",
  "wasi:cli/terminal-stderr",
  "wasi:clocks/monotonic-clock",
  "wasi:clocks/wall-clock",
  "wasi:filesystem/types",
  "wasi:filesystem/preopens",
  "wasi:io/error",
  "wasi:io/poll",
  "wasi:io/streams",
  "wasi:random/random",
  "wasi:random/insecure",
  "wasi:random/insecure-seed",
  "wasi:sockets/network",
  "wasi:sockets/instance-network",
  "wasi:sockets/tcp",
  "wasi:sockets/tcp-create-socket",
  "wasi:sockets/udp",
  "wasi:sockets/udp-create-socket",
  "wasi:sockets/ip-name-lookup",
  "wasmloop:controller/types",
  "wasmloop:controller/cache",
  "wasmloop:controller/log",
];

function leb(bytes, pos) {
  let result = 0;
  let shift = 0;
  for (;;) {
    const b = bytes[pos++];
    if (b === undefined) throw new Error("truncated LEB128");
    result += (b & 0x7f) * 2 ** shift;
    shift += 7;
    if ((b & 0x80) === 0) return [result, pos];
  }
}

/** The names the outer component imports, in order. */
export function componentImports(bytes) {
  if (bytes[0] !== 0 || bytes[1] !== 0x61 || bytes[2] !== 0x73 || bytes[3] !== 0x6d) throw new Error("not a WebAssembly binary");
  if (bytes[6] !== 1 || bytes[7] !== 0) throw new Error("a core module, not a component");
  const names = [];
  let pos = 8;
  while (pos < bytes.length) {
    const id = bytes[pos++];
    let size;
    [size, pos] = leb(bytes, pos);
    const end = pos + size;
    if (id === 10) {
      let p = pos;
      let count;
      [count, p] = leb(bytes, p);
      for (let i = 0; i < count; i++) {
        const form = bytes[p++];
        if (form !== 0x00 && form !== 0x01) throw new Error(`unknown import name form ${form}`);
        let len;
        [len, p] = leb(bytes, p);
        names.push(new TextDecoder().decode(bytes.subarray(p, p + len)));
        p += len;
        if (form === 0x01) {
          // A version suffix: a string.
          [len, p] = leb(bytes, p);
          p += len;
        }
        const tag = bytes[p++];
        if (tag === 0x00) [, p] = leb(bytes, p + 1);
        else if (tag === 0x01 || tag === 0x04 || tag === 0x05) [, p] = leb(bytes, p);
        else if (tag === 0x02) [, p] = leb(bytes, p + 1);
        else if (tag === 0x03) {
          const bound = bytes[p++];
          if (bound === 0x00) [, p] = leb(bytes, p);
        } else throw new Error(`unknown extern descriptor ${tag}`);
      }
    }
    pos = end;
  }
  return names;
}

/** Whether the host provides the interface `name` (any version). */
export function isProvided(name) {
  return PROVIDED.includes(name.split("@")[0]);
}

/** The imports of `bytes` the host does not provide. */
export function unprovided(bytes) {
  return componentImports(bytes).filter((n) => !isProvided(n));
}
