"""Rolling /metrics sampler for ``watch --scrape``: scrape every interval in the background and
keep the last ``span_s`` of snapshots, so each diagnosis run reduces what is already in memory
instead of re-scraping the whole ``--last`` range (which would make every run last ``--last``).

Each scrape keeps only the samples some dialect reads (a vLLM /metrics holds ~700 samples, the
dialects read a few dozen): the buffer is ~10x smaller and each run's reduction ~10x faster.

Rounds tick on ``ticker.Ticker``'s grid and are stamped with their nominal tick time, as
``collect`` (``diagnose --scrape``) stamps them. Windows sit on the grid ``watch --prometheus``
uses (multiples of the window since the epoch, whole windows of [latest - span, latest]), so the
two paths put a scrape in the same window.

Until ``span_s`` has been collected a run sees fewer windows (and says ``insufficient_data``
while fewer than ``min_windows`` are complete): the warm-up is reported, not hidden.
"""

from __future__ import annotations

import math
import threading
from collections import deque
from collections.abc import Sequence
from dataclasses import replace
from functools import cache

from skewscope.catalogue import MetricType
from skewscope.clock import SYSTEM_CLOCK, Clock
from skewscope.errors import UsageError
from skewscope.frame import Evidence
from skewscope.settings import DEFAULT_LIMITS, SourceLimits
from skewscope.sources.auth import HttpAuth
from skewscope.sources.collect import RoundScraper, Snapshot
from skewscope.sources.device_exporters import DEVICE_EXPORTERS
from skewscope.sources.devices import DeviceMap
from skewscope.sources.dialects import DIALECTS, ROLES, normalise_name
from skewscope.sources.scrape_evidence import evidence_from_targets, instance_of
from skewscope.sources.ticker import Ticker

STOP_GRACE_S = 1.0  # how long stop() lets a round in flight finish before abandoning it


@cache
def read_names() -> frozenset[str]:
    """Normalised sample names any dialect's or device exporter's alias table can read
    (histograms: all series)."""
    out: set[str] = {
        normalise_name(a.name)
        for exporter in DEVICE_EXPORTERS.values()
        for aliases in exporter.roles.values()
        for a in aliases
    }
    for dialect in DIALECTS.values():
        for role, aliases in dialect.roles.items():
            for alias in aliases:
                hist = ROLES[role].kind is MetricType.HISTOGRAM
                suffixes = ("_bucket", "_sum", "_count") if hist else ("",)
                out.update(normalise_name(alias.name + sfx) for sfx in suffixes)
    return frozenset(out)


def keep_read(snap: Snapshot) -> Snapshot:
    """The snapshot without the samples no dialect reads."""
    if snap.samples is None:
        return snap
    names = read_names()
    return replace(snap, samples=tuple(s for s in snap.samples if normalise_name(s[0]) in names))


class NotReady(Exception):
    """Not enough has been scraped yet for one window: a warm-up state, not a run error."""


class RollingScraper:
    """Background scraper holding (epoch time, snapshot) per URL for the last ``span_s``."""

    def __init__(
        self,
        urls: Sequence[str],
        *,
        span_s: float,
        interval_s: float,
        window_s: float,
        dialect: str | None = None,
        auth: HttpAuth | None = None,
        timeout_s: float | None = None,
        device_map: DeviceMap | None = None,
        limits: SourceLimits = DEFAULT_LIMITS,
        role_label: str = "",
        clock: Clock = SYSTEM_CLOCK,
    ) -> None:
        if not urls:
            raise UsageError("no /metrics URL given")
        if window_s < interval_s:
            raise UsageError(
                f"window {window_s:g}s is shorter than the scrape interval {interval_s:g}s"
            )
        if span_s < window_s:
            raise UsageError(f"--last {span_s:g}s is shorter than one window of {window_s:g}s")
        instances = [instance_of(u) for u in urls]
        if len(set(instances)) != len(instances):
            raise UsageError("two URLs name the same host:port; give each target once")
        self.urls = tuple(urls)
        self.span_s, self.interval_s, self.window_s = span_s, interval_s, window_s
        self.dialect, self.auth, self.timeout_s = dialect, auth, timeout_s
        self.device_map, self.limits, self.role_label = device_map, limits, role_label
        self.clock = clock
        keep = math.ceil(span_s / interval_s) + 2
        self._buf: dict[str, deque[tuple[float, Snapshot]]] = {u: deque(maxlen=keep) for u in urls}
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="skewscope-sampler", daemon=True)
        self.skipped = 0

    def start(self) -> RollingScraper:
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop scraping now: a round in flight is abandoned (its fetches run on daemon
        threads and end by their deadline), so stopping never waits on a slow target."""
        self._stop.set()
        self._thread.join(timeout=STOP_GRACE_S)

    def _loop(self) -> None:
        """Rounds on ``ticker.Ticker``'s grid (as ``collect``), each stamped with its nominal
        tick time; one client and fetch pool for the sampler's life."""
        ticker = Ticker(self.interval_s, self.clock)
        with RoundScraper(
            self.urls,
            interval_s=self.interval_s,
            auth=self.auth,
            timeout_s=self.timeout_s,
            limits=self.limits,
        ) as scraper:
            for t in ticker.ticks(until=self._stop):
                round_ = scraper.round(t)
                with self._lock:
                    for url, snap in zip(self.urls, round_, strict=True):
                        self._buf[url].append((ticker.t0 + t, keep_read(snap)))
                self.skipped = ticker.skipped

    def failing_targets(self, since: float) -> list[str]:
        """Targets none of whose scrapes after ``since`` (epoch s) succeeded, with the error."""
        out = []
        with self._lock:
            for buf in self._buf.values():
                recent = [s for t, s in buf if t > since]
                if recent and all(s.samples is None for s in recent):
                    out.append(recent[-1].error)
        return out

    def evidence(self) -> Evidence:
        """Reduce the buffered scrapes into the whole windows of [latest - span, latest] on the
        epoch grid (as ``prom_matrix.plan_windows``), the latest scrape round being "now"; the
        last scrape at or before the first window's start is its counters' baseline."""
        with self._lock:
            bufs = {u: list(b) for u, b in self._buf.items()}
        latest = max((t for b in bufs.values() for t, _ in b[-1:]), default=None)
        if latest is None:
            raise NotReady("waiting for the first scrape round")
        w = self.window_s
        first = min(t for b in bufs.values() for t, _ in b)
        t0 = math.ceil((latest - self.span_s) / w - 1e-9) * w
        if first > t0 + 1e-6:  # warming up: the grid from the first scrape on
            t0 = math.ceil(first / w - 1e-9) * w
        n_windows = math.floor((latest - t0) / w + 1e-6)
        if n_windows < 1:
            raise NotReady(f"warming up: {latest - first:.0f}s scraped, one window is {w:g}s")
        base = max(t for b in bufs.values() for t, _ in b if t <= t0 + 1e-6)
        snaps = {
            u: [replace(s, t=round(t - t0, 6)) for t, s in b if t >= base - 1e-6]
            for u, b in bufs.items()
        }
        notes = []
        if latest - first < self.span_s - self.interval_s:
            notes.append(
                f"warming up: {latest - first:.0f}s of the {self.span_s:g}s range scraped so far"
            )
        if self.skipped:
            notes.append(f"{self.skipped} scrape rounds were skipped because targets were slow")
        return evidence_from_targets(
            snaps,
            t0=t0,
            window_s=w,
            n_windows=n_windows,
            dialect=self.dialect,
            notes=notes,
            device_map=self.device_map,
            role_label=self.role_label,
        )
