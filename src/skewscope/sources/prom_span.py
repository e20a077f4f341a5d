"""Why a Prometheus range holds nothing: "no samples in this range; the data spans …".

A backfilled history (promtool, a VictoriaMetrics import) queried outside its span lists no
metric names for the range, which reads like a wrong target ("no known serving-engine
metrics"). When the server does hold engine metrics at other times, the span of one of them is
found with a few cheap range queries: ``count(count_over_time(M[S]))`` at 1,000 steps over a
decade around now and the range, then the first and last non-empty steps narrowed the same way
until a step is under 10 ms (seven queries, the first one scanning the metric once).
"""

from __future__ import annotations

import math
import time
from datetime import UTC, datetime
from typing import Any

from skewscope.errors import SkewscopeError, SourceError
from skewscope.sources.dialects import (
    DIALECTS,
    ROLES,
    detect_dialect,
    normalise_name,
    required_samples,
)
from skewscope.sources.prom_client import PromClient, decode_names
from skewscope.sources.promql import quote
from skewscope.sources.validate import parse_number, parse_timestamp

_POINTS = 1000  # evaluations per query (Prometheus allows 11,000)
_FINEST_MS = 10  # narrowed until a step is this short (timestamps are whole milliseconds)
_LOOK_AROUND_S = 10 * 365 * 86400.0  # the first query covers a decade before now and the range


def empty_range_error(
    client: PromClient, start: float, end: float, selector: str
) -> SourceError | None:
    """The error to raise when [start, end] lists no engine metric but the server holds some at
    other times; None when it holds none at all (the caller's own error stands)."""
    try:
        params: dict[str, Any] = {"match[]": "{" + selector + "}"} if selector else {}
        names = decode_names(client.get("/api/v1/label/__name__/values", params), client.where)
        metric = _known_metric(names)
        if metric is None:
            return None
        matchers = ",".join(m for m in (f"__name__={quote(metric)}", selector) if m)
        span = data_span(client, "{" + matchers + "}", start, end)
    except SkewscopeError:
        return None  # the explanation is a courtesy: the caller's error stands
    if span is None:
        return None
    shown = metric + ("{" + selector + "}" if selector else "")
    return SourceError(
        f"{client.where}: no samples in this range ({_iso(start)} .. {_iso(end)}); the data "
        f"spans {_iso(span[0])} .. {_iso(span[1])} ({shown}); give a range inside it"
    )


def _known_metric(names: list[str]) -> str | None:
    """One of ``names`` the best-matching engine dialect reads, or None."""
    try:
        dialect = DIALECTS[detect_dialect(names)]
    except SourceError:
        return None
    wanted = {
        normalise_name(s)
        for role, aliases in dialect.roles.items()
        for a in aliases
        for s in required_samples(a, ROLES[role].kind)
    }
    return next((n for n in sorted(names) if normalise_name(n) in wanted), None)


def data_span(
    client: PromClient, series: str, start: float, end: float
) -> tuple[float, float] | None:
    """(first, last) sample time of ``series`` (a PromQL selector) to within 10 ms, searched
    from a decade before ``min(start, now)`` to ``max(end, now)``; None when it has none.

    Times are whole milliseconds, as the servers keep them: a point at ``t`` counts the samples
    in the step before it, and each narrowing ends exactly on the point it narrows (its start is
    a whole number of steps before it), so no sample falls between two evaluations.
    """
    now = time.time()
    lo_ms = math.floor((min(start, now) - _LOOK_AROUND_S) * 1000)
    hi_ms = math.ceil(max(end, now) * 1000)
    step_ms = max(1, -(-(hi_ms - lo_ms) // _POINTS))
    found = _nonempty(client, series, hi_ms - _POINTS * step_ms, hi_ms, step_ms)
    if not found:
        return None
    first, last = found[0], found[-1]
    while step_ms > _FINEST_MS:
        finer = max(_FINEST_MS // 2, -(-step_ms // _POINTS))
        n = -(-step_ms // finer)
        first = (_nonempty(client, series, first - n * finer, first, finer) or [first])[0]
        last = (_nonempty(client, series, last - n * finer, last, finer) or [last])[-1]
        step_ms = finer
    return first // 1000, last // 1000


def _nonempty(client: PromClient, series: str, lo_ms: int, hi_ms: int, step_ms: int) -> list[int]:
    """Evaluation times (ms) in [lo, hi] whose preceding step holds a sample of ``series``."""
    query = f"count(count_over_time({series}[{step_ms}ms]))"
    times: list[int] = []
    for s in client.query_range(query, lo_ms / 1000, hi_ms / 1000, step_ms / 1000):
        for point in (s.get("values") or []) if isinstance(s, dict) else []:
            t, v = parse_timestamp(point[0]), parse_number(point[1])
            if t is not None and v is not None and v > 0:
                times.append(round(t * 1000))
    return sorted(times)


def _iso(t: float) -> str:
    try:
        return datetime.fromtimestamp(t, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    except (OverflowError, ValueError, OSError):
        return f"{t:.0f}"
