"""Kubernetes timestamps and the current time, as the Rust SDK's ``time`` module: RFC 3339 as the
API server writes it (``metav1.Time``: UTC, whole seconds, ``Z``) and with microseconds
(``metav1.MicroTime``: ``2026-01-02T03:04:05.123456Z``), as seconds or microseconds since the Unix
epoch.

The current time is the host's: inside the component, the WASI wall clock behind Python's
``time`` (nanoseconds), which the host records with a reconcile and ``wasmloop replay`` serves
back; in a test, the bound FakeCache's settable clock.
"""

from __future__ import annotations

import calendar
import re
import time as _system
from typing import Optional

from ._host import bound_host

__all__ = ["parse", "parse_micros", "format", "format_micros", "now", "now_micros", "now_rfc3339", "now_micros_rfc3339"]

_MICROS = 1_000_000
_RFC3339 = re.compile(r"^(\d{4})-(\d{2})-(\d{2})[Tt](\d{2}):(\d{2}):(\d{2})(?:\.(\d+))?([Zz]|[+-]\d{2}:\d{2})$")


def parse_micros(ts: str) -> Optional[int]:
    """Microseconds since the epoch of an RFC 3339 timestamp (the fraction kept to the
    microsecond); ``None`` if it is malformed."""
    m = _RFC3339.match(ts) if isinstance(ts, str) else None
    if m is None:
        return None
    y, mo, d, h, mi, s = (int(g) for g in m.groups()[:6])
    if not 1 <= mo <= 12 or not 1 <= d <= calendar.monthrange(y, mo)[1] or h > 23 or mi > 59 or s > 60:
        return None
    zone = m.group(8)
    offset = 0
    if zone not in ("Z", "z"):
        oh, om = int(zone[1:3]), int(zone[4:6])
        if oh > 23 or om > 59:
            return None
        offset = (-1 if zone[0] == "-" else 1) * (oh * 3600 + om * 60)
    micros = int((m.group(7) or "").ljust(6, "0")[:6])
    secs = calendar.timegm((y, mo, d, h, mi, 0, 0, 0, 0)) + s - offset
    return secs * _MICROS + micros


def parse(ts: str) -> Optional[int]:
    """Seconds since the epoch of an RFC 3339 timestamp (the fraction dropped); ``None`` if it is
    malformed."""
    us = parse_micros(ts)
    return None if us is None else us // _MICROS


def format(secs: int) -> str:  # noqa: A001 - the Rust and JavaScript SDKs' name
    """A ``metav1.Time``: UTC, whole seconds, ``Z``."""
    return _system.strftime("%Y-%m-%dT%H:%M:%SZ", _system.gmtime(secs))


def format_micros(micros: int) -> str:
    """A ``metav1.MicroTime``: UTC, six fractional digits, ``Z``."""
    secs, frac = divmod(micros, _MICROS)
    return f"{format(secs)[:-1]}.{frac:06d}Z"


def now_micros() -> int:
    """Now, in microseconds since the epoch: the FakeCache's clock in tests, else the wall clock."""
    host = bound_host()
    clock = getattr(host, "clock", None) if host is not None else None
    return clock.now_micros() if clock is not None else _system.time_ns() // 1000


def now() -> int:
    """Now, in seconds since the epoch."""
    return now_micros() // _MICROS


def now_rfc3339() -> str:
    """Now as a ``metav1.Time``."""
    return format(now())


def now_micros_rfc3339() -> str:
    """Now as a ``metav1.MicroTime``."""
    return format_micros(now_micros())
