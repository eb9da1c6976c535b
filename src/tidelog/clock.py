"""The two clocks of a node, read only at the edges (the server, the tools; never the core,
which is handed the time).

- `monotonic_ms()` never jumps: timeouts, read leases, the ticker. It is what the core's
  `now_ms` means.
- `wall_ms()` is the time of day: record, segment and commit timestamps, retention by age.
- `wait_until` polls a condition against the monotonic clock (the tools' waits for the
  processes they start).
"""

from __future__ import annotations

import time
from collections.abc import Callable


def monotonic_ms() -> int:
    """Milliseconds of a clock that never goes back (its zero means nothing)."""
    return int(time.monotonic() * 1000)


def wall_ms() -> int:
    """Milliseconds since the Unix epoch."""
    return int(time.time() * 1000)


def wait_until(condition: Callable[[], bool], *, timeout_s: float, interval_s: float) -> bool:
    """Poll `condition` every `interval_s` until it holds or `timeout_s` passes; whether it
    held."""
    deadline = time.monotonic() + timeout_s
    while True:
        if condition():
            return True
        if time.monotonic() >= deadline:
            return False
        time.sleep(interval_s)
