"""Progress of long work on stderr, the one implementation every command uses (a scrape, a
simulation, a live replay): a transient rich bar on a terminal; otherwise (logs, CI, a pipe) one
plain line every ``SourceLimits.progress_every_s``, so a log shows life without the
carriage-return noise of a bar.

Neutral ground (import-linter): the sources and the command line both use it.
"""

from __future__ import annotations

import sys
import time
from types import TracebackType
from typing import Any, TextIO

from skewscope.errors import one_line
from skewscope.settings import DEFAULT_LIMITS


class Progress:
    """``update(done, detail)`` with ``done`` in ``[0, total]`` of ``unit``; ``close()`` when
    finished (or use it as a context manager). ``enabled=False`` prints nothing."""

    def __init__(
        self,
        what: str,
        total: float,
        unit: str,
        *,
        every_s: float | None = None,
        out: TextIO | None = None,
        tty: bool | None = None,
        enabled: bool = True,
    ) -> None:
        # ``what`` can quote a scenario name from a user's file: one bounded, escaped line
        self.what, self.total, self.unit = one_line(what, 120), total, unit
        self.every_s = DEFAULT_LIMITS.progress_every_s if every_s is None else every_s
        self.out = out or sys.stderr
        self.enabled = enabled
        self._last = time.monotonic()
        self._bar: Any = None
        if enabled and (self.out.isatty() if tty is None else tty):
            from rich.console import Console
            from rich.markup import escape
            from rich.progress import Progress as RichProgress

            self._escape = escape
            self._bar = RichProgress(console=Console(file=self.out), transient=True)
            self._task = self._bar.add_task(escape(self.what), total=total)
            self._bar.start()

    def update(self, done: float, detail: str = "") -> None:
        """``done`` of the total so far; ``detail`` (e.g. "28 scrapes ok, 1 failed") follows."""
        if not self.enabled:
            return
        if self._bar is not None:
            shown = f"{self.what}: {one_line(detail, 80)}" if detail else self.what
            self._bar.update(self._task, completed=done, description=self._escape(shown))
            return
        now = time.monotonic()
        if now - self._last >= self.every_s:
            self._last = now
            print(self.line(done, detail), file=self.out, flush=True)

    def line(self, done: float, detail: str = "") -> str:
        """The plain line: ``skewscope: WHAT: DONE of TOTAL UNIT[, DETAIL]`` (whole numbers
        from a total of 10 up, one decimal below)."""
        digits = 0 if self.total >= 10 else 1
        text = f"skewscope: {self.what}: {done:,.{digits}f} of {self.total:,.{digits}f} {self.unit}"
        return f"{text}, {one_line(detail, 80)}" if detail else text

    def close(self) -> None:
        if self._bar is not None:
            self._bar.stop()
            self._bar = None

    def __enter__(self) -> Progress:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()
