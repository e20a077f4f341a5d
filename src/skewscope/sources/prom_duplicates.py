"""Which units a Prometheus holds more than once: the same target scraped by two jobs (a
federation, or a scrape config listed twice: a common mistake), or a unit named by a label
(a router's ``worker_id``) exported by several targets.

The queries (``promql.build_query``) already read such copies once (their max, never their sum:
summed, one unit's rates double and it looks hot); this names them in a note, so a report says
where its evidence came from twice. One instant query, for the first engine signal read.
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any

from skewscope.errors import SourceError
from skewscope.sources.auth import quoted
from skewscope.sources.dialects import Alias
from skewscope.sources.prom_client import PromClient
from skewscope.sources.promql import duplicates_query

SHOWN = 3  # units named in the note; the rest counted


def duplicate_notes(
    client: PromClient, alias: Alias, *, last_t: float, range_s: float, selector: str
) -> list[str]:
    """A note naming the units exported by more than one job / target (``[]`` when none).
    The check is an extra: a backend that refuses it leaves no note (the reading is the same)."""
    try:
        rows = client.query_range(
            duplicates_query(alias, range_s, selector), last_t, last_t, range_s
        )
    except SourceError:
        return []
    unit = alias.unit_label or "instance"
    seen: dict[str, set[str]] = defaultdict(set)
    for row in rows:
        metric: Any = row.get("metric") if isinstance(row, dict) else None
        if not isinstance(metric, dict) or not isinstance(metric.get(unit), str):
            continue
        who = ", ".join(
            f"{k}={v}" for k, v in sorted(metric.items()) if k != unit and isinstance(v, str)
        )
        seen[metric[unit]].add(who)
    twice = sorted((u, sorted(w)) for u, w in seen.items() if len(w) > 1)
    if not twice:
        return []
    shown = "; ".join(
        f"{quoted(u, 60)} from {len(w)} ({quoted(' / '.join(w), 120)})" for u, w in twice[:SHOWN]
    )
    more = f" and {len(twice) - SHOWN} more" if len(twice) > SHOWN else ""
    return [
        f"{len(twice)} unit(s) exported by more than one scrape job or target: {shown}{more}; "
        "each series is read once (their max), not summed (check the scrape config for a "
        "target listed twice, or a federation)"
    ]
