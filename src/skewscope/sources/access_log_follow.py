"""Follow gateway access logs for ``watch``: each run reads only what was appended since the last
(like ``tail -F``: a rotated or truncated file is read again from its start) and keeps the
requests of the last span, then tallies them the way ``diagnose --access-log`` does.

A live log is written while it is read, so it is more forgiving than a file given to
``diagnose``: only complete lines are read (a half-written last line waits for the next run),
and a bad or untimed line is skipped and counted in the report's notes (the first bad one named
by ``path:line``) instead of stopping every later run.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import BinaryIO

from skewscope.errors import InputError
from skewscope.frame import GatewayEvidence
from skewscope.settings import DEFAULT_LIMITS
from skewscope.sources.access_log import (
    LineReader,
    Logged,
    first_key_name,
    tally,
    too_long_note,
)

READ_BYTES = 8 << 20  # one read of a followed file: bounds memory on a large first read
# A log larger than this is not parsed from its start on the first read: the first line logged
# within the span (less SEARCH_MARGIN_S) is found by bisection on the lines' times. Envoy logs a
# request's start time when it ends, so lines are out of order by up to a request's duration:
# the margin covers requests of up to 10 minutes.
SEARCH_ABOVE_BYTES = 16 << 20
SEARCH_SLACK_BYTES = 64 << 10  # bisection stops within this of the first line to read
SEARCH_MARGIN_S = 600.0


@dataclass
class _Followed:
    """Where reading of one file stands."""

    path: str
    reader: LineReader
    inode: int | None = None
    offset: int = 0
    line_no: int = 0
    partial: bytes = b""
    skipped_bytes: int = 0  # of the first read: the lines logged before the span, not parsed

    def restart(self, inode: int) -> None:
        self.reader, self.inode = LineReader(self.path, max_line=self.reader.max_line), inode
        self.offset, self.line_no, self.partial, self.skipped_bytes = 0, 0, b"", 0


def _line_time(fh: BinaryIO, pos: int, path: str) -> tuple[int, float | None]:
    """The start of the first whole line at or after ``pos`` and its logged time (None when it
    has none, or is cut short by the end of the file)."""
    fh.seek(pos)
    if pos > 0:
        fh.readline()  # the rest of the line ``pos`` falls in
    start = fh.tell()
    line = fh.readline(DEFAULT_LIMITS.max_log_line_bytes + 1)
    if not line.endswith(b"\n"):
        return start, None
    try:
        got = LineReader(path).read(line.decode("utf-8", errors="replace"))
    except ValueError:
        return start, None
    return start, got.t_s if got is not None else None


@dataclass
class AccessLogFollower:
    """The requests of the last ``keep_s`` seconds (by their logged time) of ``paths``."""

    paths: Sequence[str]
    keep_s: float
    clock: Callable[[], float] = time.time
    max_line: int = DEFAULT_LIMITS.max_log_line_bytes  # longer lines are skipped and counted
    files: list[_Followed] = field(init=False)
    kept: list[Logged] = field(init=False, default_factory=list)
    skipped: int = field(init=False, default=0)  # bad lines, since the start
    untimed: int = field(init=False, default=0)  # lines without a readable time
    first_bad: str = field(init=False, default="")
    missing: dict[str, str] = field(init=False, default_factory=dict)  # path -> why, this run

    def __post_init__(self) -> None:
        self.files = [_Followed(p, LineReader(p, max_line=self.max_line)) for p in self.paths]

    def check(self) -> None:
        """One clean InputError when a log cannot be opened at the start (a typo in the path);
        later, a file gone for a while (rotation) is only noted."""
        for f in self.files:
            try:
                with open(f.path, "rb"):
                    pass
            except OSError as e:
                raise InputError(f"{f.path}: cannot read the access log ({e.strerror})") from None

    def poll(self) -> None:
        """Read every file's complete new lines into ``kept``; drop requests older than
        ``keep_s`` before the clock."""
        self.missing = {}
        for f in self.files:
            self._read(f)
        horizon = self.clock() - self.keep_s
        self.kept = [r for r in self.kept if r.t_s is not None and r.t_s >= horizon]

    def _read(self, f: _Followed) -> None:
        try:
            st = os.stat(f.path)
            if st.st_ino != f.inode or st.st_size < f.offset:
                f.restart(st.st_ino)  # first read, rotated, or truncated: from the start
            with open(f.path, "rb") as fh:
                if f.offset == 0 and st.st_size > SEARCH_ABOVE_BYTES:
                    self._skip_old(fh, f, st.st_size)
                fh.seek(f.offset)
                while chunk := fh.read(READ_BYTES):
                    f.offset += len(chunk)
                    *lines, f.partial = (f.partial + chunk).split(b"\n")
                    if len(f.partial) > f.reader.max_line:  # a line without end: held no
                        f.partial = f.partial[: f.reader.max_line + 1]  # longer than skipped
                    self._take(f, lines)
        except OSError as e:
            self.missing[f.path] = e.strerror or "unreadable"

    def _skip_old(self, fh: BinaryIO, f: _Followed, size: int) -> None:
        """Start a large file's first read at a line logged shortly before the span, not at
        its start (a multi-GB log would take minutes to parse); the skipped lines are counted
        so later lines keep their numbers."""
        horizon = self.clock() - self.keep_s - SEARCH_MARGIN_S
        lo, hi = 0, size  # lines starting before lo were logged before the horizon
        while hi - lo > SEARCH_SLACK_BYTES:
            mid = (lo + hi) // 2
            start, t_s = _line_time(fh, mid, f.path)
            if t_s is None:
                break  # a line without a readable time: read from lo, as far as known
            if t_s < horizon:
                lo = start
            else:
                hi = mid
        fh.seek(0)
        left = lo
        while left > 0 and (chunk := fh.read(min(READ_BYTES, left))):
            f.line_no += chunk.count(b"\n")
            left -= len(chunk)
        f.offset = f.skipped_bytes = lo

    def _take(self, f: _Followed, lines: list[bytes]) -> None:
        for raw in lines:
            f.line_no += 1
            text = raw.decode("utf-8", errors="replace")
            try:
                got = f.reader.read(text)
            except ValueError as e:
                self.skipped += 1
                self.first_bad = self.first_bad or f"{f.path}:{f.line_no}: {e}"
                continue
            if got is None:
                continue
            if got.t_s is None:
                self.untimed += 1  # a rolling window cannot place it
                continue
            self.kept.append(got)

    def notes(self) -> list[str]:
        out = [
            f"access log {p}: unreadable this run ({why}); its earlier lines kept"
            for p, why in self.missing.items()
        ]
        if self.skipped:
            out.append(
                f"{self.skipped} unreadable access-log line(s) skipped since the start "
                f"(first: {self.first_bad})"
            )
        if self.untimed:
            out.append(
                f"{self.untimed} access-log line(s) without a readable time skipped "
                "since the start (a rolling window needs each request's time)"
            )
        return out + too_long_note(f.reader for f in self.files)

    def evidence(self, windows: tuple[float, float, int] | None) -> GatewayEvidence | None:
        """The gateway's view over the engines' ``windows`` (new lines read first); None when
        no kept request reached an upstream there (the gateway idle or its log not yet
        written), so a quiet gateway never fails the engines' diagnosis."""
        self.poll()
        try:
            return tally(
                self.kept,
                windows,
                key_name=lambda: first_key_name(f.reader for f in self.files),
                shown=", ".join(self.paths),
                notes=self.notes(),
            )
        except InputError:
            return None
