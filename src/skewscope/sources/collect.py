"""Collection for ``--scrape``: fetch every target each interval, bounded and interruptible.

Each fetch is one ``fetch.bounded_get`` (total deadline, size limit); the body goes through the
strict exposition reader. Ctrl-C ends the collection early and returns what was gathered (the
caller diagnoses it with a note). Progress goes to stderr: a bar on a terminal, otherwise one
plain line every ``SourceLimits.progress_every_s``.
"""

from __future__ import annotations

import math
import sys
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Protocol, TextIO

import httpx

from skewscope.errors import SourceError
from skewscope.settings import DEFAULT_LIMITS, SourceLimits
from skewscope.sources.auth import HttpAuth, has_scheme
from skewscope.sources.exposition import Sample, parse_exposition
from skewscope.sources.fetch import bounded_get, make_client

ACCEPT = "text/plain; version=0.0.4"  # plain text: keeps colons in names (client_python #1177)


@dataclass(frozen=True)
class Snapshot:
    """One scrape of one target: ``samples`` is None when the scrape failed.

    ``t`` is seconds since the first scrape (an offset, not epoch time: window arithmetic on
    1.8e9-sized floats would misplace boundary samples by float rounding). ``malformed`` counts
    exposition lines dropped from this scrape, ``example`` shows the first of them.
    """

    t: float
    samples: tuple[Sample, ...] | None
    error: str = ""
    malformed: int = 0
    example: str = ""


@dataclass
class Collected:
    """What a collection gathered: per-URL snapshots (complete rounds only) and how it ended."""

    t0: float  # epoch seconds of the first round
    snaps: dict[str, list[Snapshot]]
    skipped: int = 0  # rounds skipped because targets answered slowly
    interrupted_at: float | None = None  # seconds after t0 at which Ctrl-C stopped it
    rounds: int = field(default=0)


def fetch_snapshot(
    client: httpx.Client, url: str, t: float, *, deadline_s: float, max_bytes: int
) -> Snapshot:
    """One scrape; every failure becomes a Snapshot with an error, never an exception.

    A URL without a scheme is fetched over http (``load_scrape`` says so in a note).
    """
    try:
        got = bounded_get(
            client,
            url if has_scheme(url) else "http://" + url,
            what="/metrics target",
            shown_url=url,
            deadline_s=deadline_s,
            max_bytes=max_bytes,
            headers={"Accept": ACCEPT},
        )
    except SourceError as exc:
        return Snapshot(t, None, str(exc))
    if got.status != 200:
        return Snapshot(t, None, f"/metrics target answered HTTP {got.status}")
    parsed = parse_exposition(got.text())
    return Snapshot(t, parsed.samples, "", parsed.malformed, parsed.example)


class Progress(Protocol):
    def advance(self, ok: int, failed: int) -> None: ...
    def stop(self) -> None: ...


class _Silent:
    def advance(self, ok: int, failed: int) -> None:
        pass

    def stop(self) -> None:
        pass


class _Bar:
    """A transient rich progress bar (terminals only)."""

    def __init__(self, total: int) -> None:
        from rich.console import Console
        from rich.progress import Progress as RichProgress

        self._bar = RichProgress(console=Console(stderr=True), transient=True)
        self._task = self._bar.add_task("scraping", total=total)
        self._bar.start()

    def advance(self, ok: int, failed: int) -> None:
        self._bar.advance(self._task)

    def stop(self) -> None:
        self._bar.stop()


class ProgressLines:
    """Without a terminal: one plain line every ``every_s`` (logs show life, not a spinner)."""

    def __init__(self, n_targets: int, duration_s: float, every_s: float, out: TextIO) -> None:
        self._n, self._duration, self._every, self._out = n_targets, duration_s, every_s, out
        self._start = self._last = time.monotonic()
        self._ok = self._failed = 0

    def advance(self, ok: int, failed: int) -> None:
        self._ok += ok
        self._failed += failed
        now = time.monotonic()
        if now - self._last >= self._every:
            self._last = now
            print(
                f"skewscope: scraping {self._n} target(s): {now - self._start:.0f}s of "
                f"{self._duration:g}s, {self._ok} scrapes ok, {self._failed} failed",
                file=self._out,
                flush=True,
            )

    def stop(self) -> None:
        pass


def make_progress(enabled: bool, n_targets: int, n_rounds: int, duration_s: float,
                  every_s: float) -> Progress:
    if not enabled:
        return _Silent()
    if sys.stderr.isatty():
        return _Bar(n_rounds)
    return ProgressLines(n_targets, duration_s, every_s, sys.stderr)


def collect(
    urls: Sequence[str],
    *,
    duration_s: float,
    interval_s: float,
    auth: HttpAuth | None = None,
    timeout_s: float | None = None,
    progress: bool = True,
    limits: SourceLimits = DEFAULT_LIMITS,
) -> Collected:
    """Scrape all targets every ``interval_s`` for ``duration_s``.

    Snapshot times are the nominal tick times, as offsets from ``Collected.t0``; a tick that
    could not start within half an interval of its time (a slow target held the previous one)
    is skipped rather than mis-stamped. Ctrl-C stops the loop: the complete rounds so far are
    returned with ``interrupted_at`` set. An ambient token is never sent (``auth`` module doc).
    """
    n_ticks = math.floor(duration_s / interval_s + 1e-9)
    deadline_s = timeout_s if timeout_s is not None else max(0.5, min(interval_s, 10.0))
    max_bytes = limits.max_scrape_bytes
    out = Collected(t0=time.time(), snaps={u: [] for u in urls})
    bar = make_progress(progress, len(urls), n_ticks + 1, duration_s, limits.progress_every_s)
    m0 = time.monotonic()
    client = make_client(auth.without_ambient() if auth else None, deadline_s)
    pool = ThreadPoolExecutor(max_workers=min(32, len(urls)))
    try:
        for k in range(n_ticks + 1):
            due = m0 + k * interval_s
            lag = time.monotonic() - due
            if lag < 0:
                time.sleep(-lag)
            elif k > 0 and lag > interval_s / 2:
                out.skipped += 1
                bar.advance(0, 0)
                continue
            futures = [
                pool.submit(fetch_snapshot, client, url, k * interval_s,
                            deadline_s=deadline_s, max_bytes=max_bytes)
                for url in urls
            ]
            round_ = [f.result() for f in futures]  # a whole round, or none of it
            for url, snap in zip(urls, round_, strict=True):
                out.snaps[url].append(snap)
            out.rounds += 1
            failed = sum(s.samples is None for s in round_)
            bar.advance(len(round_) - failed, failed)
    except KeyboardInterrupt:
        out.interrupted_at = time.monotonic() - m0
    finally:
        bar.stop()
        pool.shutdown(wait=True, cancel_futures=True)  # in-flight fetches end by their deadline
        client.close()
    return out
