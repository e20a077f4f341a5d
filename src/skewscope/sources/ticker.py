"""The one fixed-grid ticker of the scrape loops (issue 24): ``collect`` (``diagnose --scrape``)
and the rolling sampler (``watch --scrape``) tick the same way and stamp a round with its
nominal tick time, so the two put the same scrapes in the same windows.

Rounds are due at ``t0 + k * interval``. A round that outlasts its slot makes the next ticks
late: a tick that cannot start within half an interval of its time is skipped (counted in
``skipped``) rather than stamped with a time it was not scraped at. Time is read through a
``Clock``: a test's ``ManualClock`` moves it at each wait, so no tick is ever late there.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator

from skewscope.clock import SYSTEM_CLOCK, Clock


class Ticker:
    """Ticks every ``interval_s`` from the moment it is made (``t0``, epoch seconds)."""

    def __init__(self, interval_s: float, clock: Clock = SYSTEM_CLOCK) -> None:
        self.interval_s = interval_s
        self.clock = clock
        self.t0 = clock.time()
        self._m0 = clock.monotonic()  # the grid runs on the monotonic clock: no jumps
        self.skipped = 0

    def elapsed(self) -> float:
        """Seconds since ``t0``."""
        return self.clock.monotonic() - self._m0

    def ticks(
        self, count: int | None = None, until: threading.Event | None = None
    ) -> Iterator[float]:
        """The nominal offset from ``t0`` (``k * interval``) of each tick that is on time, for
        ``k`` in ``0 .. count - 1`` (forever when None), each yielded once it is due; ends when
        ``until`` is set (a wait is cut short)."""
        k = 0
        while count is None or k < count:
            if until is not None and until.is_set():
                return
            due = self._m0 + k * self.interval_s
            lag = self.clock.monotonic() - due
            if lag < 0 and self.clock.sleep(-lag, until):
                return
            if k > 0 and lag > self.interval_s / 2:
                self.skipped += 1
            else:
                yield k * self.interval_s
            k += 1
