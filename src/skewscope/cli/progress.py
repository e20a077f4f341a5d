"""Progress of long CLI work on stderr: a transient bar on a terminal; otherwise (logs, CI, a
pipe) one plain line every ``SourceLimits.progress_every_s``, so a log shows life without the
carriage-return noise of a bar."""

from __future__ import annotations

import sys
import time
from typing import TextIO


class Ticker:
    """``update(done)`` with ``done`` in ``[0, total]`` of ``unit``; ``close()`` when finished."""

    def __init__(self, what: str, total: float, unit: str, *, every_s: float | None = None,
                 out: TextIO | None = None, tty: bool | None = None) -> None:
        from skewscope.errors import one_line
        from skewscope.settings import DEFAULT_LIMITS

        # ``what`` can quote a scenario name from a user's file: one bounded, escaped line
        self.what, self.total, self.unit = one_line(what, 120), total, unit
        self.every_s = DEFAULT_LIMITS.progress_every_s if every_s is None else every_s
        self.out = out or sys.stderr
        self._last = time.monotonic()
        self._bar = None
        if self.out.isatty() if tty is None else tty:
            from rich.console import Console
            from rich.markup import escape
            from rich.progress import Progress

            self._bar = Progress(console=Console(file=self.out), transient=True)
            self._task = self._bar.add_task(escape(self.what), total=total)
            self._bar.start()

    def update(self, done: float) -> None:
        if self._bar is not None:
            self._bar.update(self._task, completed=done)
            return
        now = time.monotonic()
        if now - self._last >= self.every_s:
            self._last = now
            print(f"skewscope: {self.what}: {done:,.0f} of {self.total:,.0f} {self.unit}",
                  file=self.out, flush=True)

    def close(self) -> None:
        if self._bar is not None:
            self._bar.stop()
            self._bar = None
