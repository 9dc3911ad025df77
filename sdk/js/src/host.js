// The host the SDK talks to: the contract's `cache` and `log` imports inside a component (bound
// by the entry `wasmloop-js build` generates), or a FakeCache in unit tests. Each is an object
// shaped like the WIT interface: `cache.get(kind, namespace|null, name) -> string|null`, ...,
// `log.log(level, message)`; a failed read throws the `cache-error` variant `{tag, val}`.

let bound;

/** The bound host; throws outside a component or a FakeCache. */
export function host() {
  if (!bound) {
    throw new Error("@wasmloop/sdk: no host bound: run inside a wasmloop component, or in a test through FakeCache.reconcile/enter");
  }
  return bound;
}

/** The bound host, or undefined (no error): for what has a fallback, such as the clock. */
export function boundHost() {
  return bound;
}

/** Bind `next` (`{cache, log}`, and in tests `clock: {nowMicros()}`) and return what was bound before. */
export function bindHost(next) {
  const previous = bound;
  bound = next;
  return previous;
}
