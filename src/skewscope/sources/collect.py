"""Collection for ``--scrape``: fetch every target each interval, bounded and interruptible.

Each fetch is one ``fetch.bounded_get`` (total deadline, size limit); the body goes through the
strict exposition reader. Ctrl-C ends the collection early and returns what was gathered (the
caller diagnoses it with a note). Progress goes to stderr (``skewscope.progress``): a bar on a
terminal, otherwise one plain line every ``SourceLimits.progress_every_s``.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field

import httpx

from skewscope.clock import SYSTEM_CLOCK, Clock
from skewscope.errors import SourceError
from skewscope.progress import Progress
from skewscope.settings import DEFAULT_LIMITS, SourceLimits
from skewscope.sources.auth import HttpAuth, has_scheme
from skewscope.sources.daemon_pool import DaemonPool
from skewscope.sources.exposition import Sample, parse_exposition
from skewscope.sources.fetch import bounded_get, make_client
from skewscope.sources.ticker import Ticker

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
    answered: bool = False  # the target sent a response (any status): it is there

    @property
    def reached(self) -> bool:
        return self.answered or self.samples is not None


@dataclass
class Collected:
    """What a collection gathered: per-URL snapshots (complete rounds only) and how it ended."""

    t0: float  # epoch seconds of the first round
    snaps: dict[str, list[Snapshot]]
    skipped: int = 0  # rounds skipped because targets answered slowly
    interrupted_at: float | None = None  # seconds after t0 at which Ctrl-C stopped it
    rounds: int = field(default=0)
    reached: bool = False  # some target has answered (any status) in some round


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
        return Snapshot(t, None, f"/metrics target answered HTTP {got.status}", answered=True)
    parsed = parse_exposition(got.text())
    return Snapshot(t, parsed.samples, "", parsed.malformed, parsed.example, answered=True)


MAX_PARALLEL = 32  # fetches of one round in flight at once


class RoundScraper:
    """One HTTP client and one pool of fetch threads for a loop's rounds (``collect``, the
    rolling sampler). The pool's daemon threads let a process that stops (SIGTERM, Ctrl-C)
    abandon a round in flight instead of waiting out its deadline."""

    def __init__(
        self,
        urls: Sequence[str],
        *,
        interval_s: float,
        auth: HttpAuth | None = None,
        timeout_s: float | None = None,
        limits: SourceLimits = DEFAULT_LIMITS,
    ) -> None:
        self.urls = tuple(urls)
        self.deadline_s = timeout_s if timeout_s is not None else max(0.5, min(interval_s, 10.0))
        self.max_bytes = limits.max_scrape_bytes
        self._client = make_client(auth.without_ambient() if auth else None, self.deadline_s)
        self._pool = DaemonPool(min(MAX_PARALLEL, len(self.urls)), name="skewscope-scrape")

    def round(self, t: float) -> list[Snapshot]:
        """One scrape of every target in parallel, stamped ``t``: a whole round, or none."""
        futures = [
            self._pool.submit(
                fetch_snapshot,
                self._client,
                url,
                t,
                deadline_s=self.deadline_s,
                max_bytes=self.max_bytes,
            )
            for url in self.urls
        ]
        return [f.result() for f in futures]

    def close(self) -> None:
        self._pool.shutdown(wait=False)  # fetches abandoned by a stop end by their deadline
        self._client.close()

    def __enter__(self) -> RoundScraper:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def collect(
    urls: Sequence[str],
    *,
    duration_s: float,
    interval_s: float,
    auth: HttpAuth | None = None,
    timeout_s: float | None = None,
    progress: bool = True,
    limits: SourceLimits = DEFAULT_LIMITS,
    give_up_rounds: int | None = None,
    clock: Clock = SYSTEM_CLOCK,
) -> Collected:
    """Scrape all targets every ``interval_s`` for ``duration_s``, on ``ticker.Ticker``'s grid.

    Snapshot times are the nominal tick times, as offsets from ``Collected.t0``; a tick that
    could not start within half an interval of its time (a slow target held the previous one)
    is skipped rather than mis-stamped. Ctrl-C stops the loop: the complete rounds so far are
    returned with ``interrupted_at`` set. An ambient token is never sent (``auth`` module doc).
    When no target has answered in the first ``give_up_rounds`` rounds (every connection
    refused or timed out), a SourceError ends it then, not after ``duration_s``.
    """
    n_ticks = math.floor(duration_s / interval_s + 1e-9)
    ticker = Ticker(interval_s, clock)
    out = Collected(t0=ticker.t0, snaps={u: [] for u in urls})
    bar = Progress(
        f"scraping {len(urls)} target(s)",
        duration_s,
        "s",
        every_s=limits.progress_every_s,
        enabled=progress,
    )
    ok = failed = 0
    scraper = RoundScraper(
        urls, interval_s=interval_s, auth=auth, timeout_s=timeout_s, limits=limits
    )
    try:
        for t in ticker.ticks(n_ticks + 1):
            round_ = scraper.round(t)
            for url, snap in zip(urls, round_, strict=True):
                out.snaps[url].append(snap)
            out.rounds += 1
            bad = sum(s.samples is None for s in round_)
            ok, failed = ok + len(round_) - bad, failed + bad
            if give_up_rounds is not None:
                _give_up_unanswered(out, round_, give_up_rounds, ticker.elapsed())
            bar.update(ticker.elapsed(), f"{ok} scrapes ok, {failed} failed")
    except KeyboardInterrupt:
        out.interrupted_at = ticker.elapsed()
    finally:
        out.skipped = ticker.skipped
        bar.close()
        scraper.close()
    return out


def _give_up_unanswered(
    got: Collected, last: list[Snapshot], rounds: int, elapsed_s: float
) -> None:
    """SourceError when the first ``rounds`` rounds reached no target at all: nothing is
    listening (a wrong port, a stopped fleet), and waiting out --duration would not change it."""
    got.reached = got.reached or any(s.reached for s in last)
    if got.reached or got.rounds < rounds:
        return
    n = len(last)
    raise SourceError(
        f"no /metrics target answered in {got.rounds} scrape rounds ({elapsed_s:.1f}s); "
        "giving up instead of waiting out the duration "
        f"({'the target' if n == 1 else f'all {n} targets'}: {last[0].error})"
    )
