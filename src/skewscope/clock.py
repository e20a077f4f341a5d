"""One clock for everything that reads time (issue 24): the wall clock, a monotonic clock and a
sleep that a stop event can cut short. The system clock is the default; tests and step modes
pass a ``ManualClock`` and move time themselves, so no test waits on the machine's speed."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Protocol


class Clock(Protocol):
    """What a component needs to read and wait on time."""

    def time(self) -> float:
        """Epoch seconds (what windows and reports are stamped with)."""
        ...

    def monotonic(self) -> float:
        """Seconds for durations and deadlines; never jumps back."""
        ...

    def sleep(self, seconds: float, until: threading.Event | None = None) -> bool:
        """Wait ``seconds`` (or until ``until`` is set); True when ``until`` is set."""
        ...


class SystemClock:
    """The machine's clocks; ``sleep`` waits on the event, so a stop is seen at once."""

    def time(self) -> float:
        return time.time()

    def monotonic(self) -> float:
        return time.monotonic()

    def sleep(self, seconds: float, until: threading.Event | None = None) -> bool:
        if until is None:
            time.sleep(max(0.0, seconds))
            return False
        return until.wait(max(0.0, seconds))


SYSTEM_CLOCK = SystemClock()
_CURRENT: ContextVar[Clock] = ContextVar("skewscope_clock", default=SYSTEM_CLOCK)


def current() -> Clock:
    """The clock of the command being run (``cli.main(argv, clock=...)``); the CLI reads it and
    passes it on, so ``--last`` and watch's cadence run on a test's ``ManualClock``."""
    return _CURRENT.get()


@contextmanager
def using(clock: Clock) -> Iterator[Clock]:
    """Run the block with ``clock`` as :func:`current`."""
    token = _CURRENT.set(clock)
    try:
        yield clock
    finally:
        _CURRENT.reset(token)


class ManualClock:
    """A clock that moves only when told (``set``, ``advance``, or a ``sleep``, which returns at
    once with time moved on): a loop driven by it runs at explicit instants, without races."""

    def __init__(self, now: float) -> None:
        self._now = float(now)
        self._mono = 0.0
        self._lock = threading.Lock()

    def time(self) -> float:
        with self._lock:
            return self._now

    def monotonic(self) -> float:
        with self._lock:
            return self._mono

    def set(self, now: float) -> None:
        """Jump to ``now`` (monotonic time moves by the same amount, never back)."""
        with self._lock:
            self._mono += max(0.0, now - self._now)
            self._now = float(now)

    def advance(self, seconds: float) -> None:
        with self._lock:
            self._now += max(0.0, seconds)
            self._mono += max(0.0, seconds)

    def sleep(self, seconds: float, until: threading.Event | None = None) -> bool:
        self.advance(seconds)
        return until is not None and until.is_set()
