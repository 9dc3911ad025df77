// Kubernetes timestamps and the current time, as the Rust SDK's `time` module: RFC 3339 as the
// API server writes it (`metav1.Time`: UTC, whole seconds, `Z`) and with microseconds
// (`metav1.MicroTime`: `2026-01-02T03:04:05.123456Z`), as seconds or microseconds since the
// Unix epoch.
//
// The current time is the host's: inside the component, the WASI wall clock behind `Date.now()`
// (milliseconds in QuickJS), which the host records with a reconcile and `wasmloop replay`
// serves back; in a test, the bound FakeCache's settable clock.

import { boundHost } from "./host.js";

const MICROS = 1_000_000;
const RFC3339 = /^(\d{4})-(\d{2})-(\d{2})[Tt](\d{2}):(\d{2}):(\d{2})(?:\.(\d+))?([Zz]|[+-]\d{2}:\d{2})$/;

function pad(n, width) {
  return String(n).padStart(width, "0");
}

function daysInMonth(y, m) {
  return new Date(Date.UTC(y, m, 0)).getUTCDate();
}

/** Microseconds since the epoch of an RFC 3339 timestamp (fraction kept to the microsecond), or undefined if malformed. */
export function parseMicros(ts) {
  const m = typeof ts === "string" ? RFC3339.exec(ts) : null;
  if (!m) return undefined;
  const [y, mo, d, h, mi, s] = m.slice(1, 7).map(Number);
  if (mo < 1 || mo > 12 || d < 1 || d > daysInMonth(y, mo) || h > 23 || mi > 59 || s > 60) return undefined;
  let offset = 0;
  if (m[8] !== "Z" && m[8] !== "z") {
    const [oh, om] = [Number(m[8].slice(1, 3)), Number(m[8].slice(4, 6))];
    if (oh > 23 || om > 59) return undefined;
    offset = (m[8][0] === "-" ? -1 : 1) * (oh * 3600 + om * 60);
  }
  const micros = Number((m[7] ?? "").padEnd(6, "0").slice(0, 6));
  const secs = Date.UTC(y, mo - 1, d, h, mi, 0) / 1000 + s - offset;
  return secs * MICROS + micros;
}

/** Seconds since the epoch of an RFC 3339 timestamp (fraction dropped), or undefined if malformed. */
export function parse(ts) {
  const us = parseMicros(ts);
  return us === undefined ? undefined : Math.floor(us / MICROS);
}

/** A `metav1.Time`: UTC, whole seconds, `Z`. */
export function format(secs) {
  const d = new Date(secs * 1000);
  return `${pad(d.getUTCFullYear(), 4)}-${pad(d.getUTCMonth() + 1, 2)}-${pad(d.getUTCDate(), 2)}T${pad(d.getUTCHours(), 2)}:${pad(d.getUTCMinutes(), 2)}:${pad(d.getUTCSeconds(), 2)}Z`;
}

/** A `metav1.MicroTime`: UTC, six fractional digits, `Z`. */
export function formatMicros(micros) {
  const secs = Math.floor(micros / MICROS);
  return `${format(secs).slice(0, -1)}.${pad(micros - secs * MICROS, 6)}Z`;
}

/** Now, in microseconds since the epoch: the FakeCache's clock in tests, else the wall clock. */
export function nowMicros() {
  const clock = boundHost()?.clock;
  return clock ? clock.nowMicros() : Date.now() * 1000;
}

/** Now, in seconds since the epoch. */
export function now() {
  return Math.floor(nowMicros() / MICROS);
}

/** Now as a `metav1.Time`. */
export function nowRfc3339() {
  return format(now());
}

/** Now as a `metav1.MicroTime`. */
export function nowMicrosRfc3339() {
  return formatMicros(nowMicros());
}

/** The time functions as one namespace: `time.now()`, `time.parse(ts)`, ... */
export const time = Object.freeze({ parse, parseMicros, format, formatMicros, now, nowMicros, nowRfc3339, nowMicrosRfc3339 });
