"""Sample /metrics endpoints directly (no Prometheus needed) -> Evidence.

``load_scrape`` checks the request (targets, duration, interval, window), collects every target
each ``interval_s`` (``collect``), turns an interruption or slow rounds into notes and hands the
whole windows to ``scrape_evidence``, which reduces them with the same signal specs the PromQL
path uses (``scrape_series`` per signal, ``scrape_windows`` per series: counters over resets,
gauges, histogram quantiles). A trailing partial window is dropped.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from urllib.parse import urlsplit

from skewscope.clock import SYSTEM_CLOCK, Clock
from skewscope.errors import SourceError, UsageError
from skewscope.frame import WINDOWS, Evidence, WindowPolicy
from skewscope.settings import DEFAULT_LIMITS, SourceLimits
from skewscope.sources.auth import HttpAuth, normalise_url
from skewscope.sources.collect import Snapshot, collect
from skewscope.sources.devices import DeviceMap
from skewscope.sources.exposition import parse_exposition
from skewscope.sources.scrape_evidence import (
    evidence_from_snapshots,
    evidence_from_targets,
    instance_of,
)
from skewscope.sources.scrape_windows import window_index

__all__ = [
    "Snapshot",
    "collect",
    "evidence_from_snapshots",
    "evidence_from_targets",
    "instance_of",
    "load_scrape",
    "parse_exposition",
]


def load_scrape(
    urls: Sequence[str],
    *,
    duration_s: float,
    interval_s: float,
    dialect: str | None = None,
    progress: bool = True,
    window_s: float | None = None,
    auth: HttpAuth | None = None,
    timeout_s: float | None = None,
    limits: SourceLimits = DEFAULT_LIMITS,
    device_map: DeviceMap | None = None,
    windows: WindowPolicy = WINDOWS,
    role_label: str = "",
    clock: Clock = SYSTEM_CLOCK,
) -> Evidence:
    """Scrape ``urls`` for ``duration_s`` and reduce to per-window, per-unit Evidence.

    One target down gives a note and a partial result; all down raises SourceError. Ctrl-C
    stops the collection: the whole windows gathered so far are diagnosed, with a note. An
    ambient token (``auth.token_ambient``) is never sent to /metrics targets. ``clock`` times
    the rounds (a test's ManualClock runs them back to back).
    """
    run = scrape_targets(
        urls,
        duration_s=duration_s,
        interval_s=interval_s,
        progress=progress,
        window_s=window_s,
        auth=auth,
        timeout_s=timeout_s,
        limits=limits,
        windows=windows,
        clock=clock,
    )
    return evidence_from_targets(
        run.snaps,
        t0=run.t0,
        window_s=run.window_s,
        n_windows=run.n_windows,
        dialect=dialect,
        notes=run.notes,
        device_map=device_map,
        role_label=role_label,
    )


@dataclass(frozen=True)
class ScrapeRun:
    """Whole windows of scrapes per URL (``t`` offsets from ``t0``), with what to note."""

    snaps: dict[str, list[Snapshot]]
    t0: float
    window_s: float
    n_windows: int
    notes: tuple[str, ...]


def scrape_targets(
    urls: Sequence[str],
    *,
    duration_s: float,
    interval_s: float,
    progress: bool = True,
    window_s: float | None = None,
    auth: HttpAuth | None = None,
    timeout_s: float | None = None,
    limits: SourceLimits = DEFAULT_LIMITS,
    windows: WindowPolicy = WINDOWS,
    clock: Clock = SYSTEM_CLOCK,
) -> ScrapeRun:
    """Collect whole windows of scrapes (``load_scrape`` reduces them to Evidence; a what-if
    replay also reads their histograms)."""
    if not urls:
        raise UsageError("no /metrics URL given")
    for name, value in (("duration", duration_s), ("interval", interval_s)):
        if not (math.isfinite(value) and value > 0):
            raise UsageError(f"{name} must be a positive number of seconds, got {value}")
    if timeout_s is not None and not (math.isfinite(timeout_s) and timeout_s > 0):
        raise UsageError(f"timeout must be a positive number of seconds, got {timeout_s}")
    w = window_s or windows.choose(duration_s)
    if w < interval_s:
        raise UsageError(f"window {w:g}s is shorter than the scrape interval {interval_s:g}s")
    n_windows = math.floor(duration_s / w + 1e-9)
    if n_windows < 1:
        raise UsageError(f"duration {duration_s:g}s is shorter than one window of {w:g}s")
    notes: list[str] = []
    normalised = [normalise_url(u, "--scrape") for u in urls]
    urls = [u for u, _ in normalised]
    notes += [n for _, n in normalised if n]
    instances = [instance_of(u) for u in urls]
    if len(set(instances)) != len(instances):
        raise UsageError("two URLs name the same host:port; give each target once")
    auth, auth_notes = _scrape_auth(auth, urls)
    notes += auth_notes
    got = collect(
        urls,
        duration_s=n_windows * w,
        interval_s=interval_s,
        auth=auth,
        timeout_s=timeout_s,
        progress=progress,
        limits=limits,
        give_up_rounds=limits.scrape_give_up_rounds,
        clock=clock,
    )
    if got.skipped:
        notes.append(f"{got.skipped} scrape rounds were skipped because targets answered slowly")
    if got.interrupted_at is not None:
        done = math.floor(got.interrupted_at / w + 1e-9)
        if done < 1 or not got.rounds:
            raise SourceError(
                f"interrupted after {got.interrupted_at:.0f}s, before one whole window of "
                f"{w:g}s was collected; nothing to diagnose"
            )
        notes.append(
            f"interrupted (Ctrl-C) after {got.interrupted_at:.0f}s of {n_windows * w:g}s: "
            f"diagnosed the {min(done, n_windows)} whole window(s) collected so far"
        )
        n_windows = min(done, n_windows)
    elif abs(n_windows * w - duration_s) > 1e-6:
        notes.append(f"scraped {n_windows * w:g}s: whole windows of {w:g}s only")
    snaps = {u: [s for s in got.snaps[u] if window_index(s.t, 0.0, w) < n_windows] for u in urls}
    return ScrapeRun(snaps, got.t0, w, n_windows, tuple(notes))


def _scrape_auth(auth: HttpAuth | None, urls: Sequence[str]) -> tuple[HttpAuth | None, list[str]]:
    """Credentials for /metrics targets: explicit ones only (``collect`` drops an ambient
    token whoever calls it), and notes saying so and naming plain-http targets."""
    if auth is None:
        return None, []
    notes = []
    if auth.token_ambient:
        notes.append(
            "the bearer token from the default environment variable is for --prometheus only; "
            "it was not sent to /metrics targets (name it with --token-env to send it)"
        )
        auth = auth.without_ambient()
    plain = [u for u in urls if urlsplit(u).scheme.lower() == "http"]
    if auth.has_credentials and plain:
        notes.append(
            f"credentials were sent over plain http (unencrypted) to {len(plain)} target(s)"
        )
    return auth, notes
