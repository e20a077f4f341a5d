"""Scoring would-be alert episodes against known incidents (``skewscope backtest --episodes``).

Pure functions over plain data, so the alert benchmark (benchmarks/bench_alerts.py) scores
every source — the generated rules, ``watch``, the field's rules — with the same code:

- ``load_truth(path)`` / ``parse_truth(doc, where)``: the truth file of ``skewscope.sim.day``
  (``truth.json``, the format of /work/notes/contract-day.md: ``episodes`` with ``id``,
  ``level``, ``instance``, ``dp_rank``, ``kind``, ``start``, ``end``; ``noise``, ignored here;
  times as epoch seconds or RFC 3339 strings). A bad file is one ``InputError`` line naming
  the file and the field.
- ``score(alerts, truth, span_s, grace_s)``: an alert episode is a true positive when it names
  a truth episode's unit (its level and instance, and at DP level its rank; a DP episode
  without a rank is any rank of its instance) and overlaps
  ``[start, end + grace]``; an alert episode that matches no truth episode is a false alert.
  Recall is over truth episodes, precision over alert episodes; the delay of a detected episode
  is its first matching firing minus its start; its kind is right when the earliest matching
  alert that names a kind names it (``SkewscopeStarvedUnit`` names ``starved``;
  ``SkewscopeDPGapWidening`` none). Every figure of the ``Score`` is computed here; the
  episodes, the score and the whole ``Backtest`` are the report layer's data
  (``report.backtest_model``), which ``report.backtest`` renders.
"""

from __future__ import annotations

import datetime as dt
import math
from pathlib import Path
from typing import Any

from skewscope.catalogue import Kind, Level
from skewscope.errors import InputError
from skewscope.report.backtest_model import AlertEpisode, Match, Score, TruthEpisode

LEVELS: tuple[Level, ...] = tuple(Level)
STARVED_KIND = Kind.STARVED  # the kind SkewscopeStarvedUnit names (its rule has no kind label)


def quantile(sorted_values: list[float], q: float) -> float | None:
    """The ``q`` quantile with linear interpolation (numpy's default), None when empty."""
    if not sorted_values:
        return None
    pos = q * (len(sorted_values) - 1)
    lo = math.floor(pos)
    hi = min(lo + 1, len(sorted_values) - 1)
    return sorted_values[lo] + (sorted_values[hi] - sorted_values[lo]) * (pos - lo)


def overlaps(a: AlertEpisode, t: TruthEpisode, grace_s: float) -> bool:
    return a.start <= t.end + grace_s and a.end >= t.start


def names(a: AlertEpisode, t: TruthEpisode) -> bool:
    """The alert names the episode's unit: its level and instance, and at DP level its rank
    (a DP-level episode without a rank, e.g. a stale-load balancer, is any rank of it)."""
    if (a.level, a.instance) != (t.level, t.instance):
        return False
    return t.level != Level.DP or t.dp_rank is None or a.dp_rank == t.dp_rank


def score(
    alerts: list[AlertEpisode], truth: list[TruthEpisode], span_s: float, grace_s: float
) -> Score:
    """The alerts against the truth (module docstring); ``span_s`` is the range evaluated."""
    matched: set[int] = set()
    matches = []
    for t in truth:
        hits = [i for i, a in enumerate(alerts) if names(a, t) and overlaps(a, t, grace_s)]
        matched.update(hits)
        if not hits:
            matches.append(Match(t, None, None))
            continue
        hits.sort(key=lambda i: alerts[i].start)
        kinds = [alerts[i].kind for i in hits if alerts[i].kind]  # a gap alert names none
        matches.append(Match(t, alerts[hits[0]].start, kinds[0] if kinds else ""))
    false = tuple(a for i, a in enumerate(alerts) if i not in matched)
    detected = sum(m.detected for m in matches)
    precision = len(matched) / len(alerts) if alerts else None
    recall = detected / len(matches) if matches else None
    f1 = (
        None
        if precision is None or recall is None
        else 0.0
        if precision + recall == 0
        else 2 * precision * recall / (precision + recall)
    )
    delays = sorted(d for m in matches if (d := m.delay_s) is not None)
    return Score(
        tuple(matches),
        false,
        len(alerts),
        len(matched),
        span_s,
        grace_s,
        detected=detected,
        missed=len(matches) - detected,
        precision=precision,
        recall=recall,
        f1=f1,
        delays_s=tuple(delays),
        median_delay_s=quantile(delays, 0.5),
        p90_delay_s=quantile(delays, 0.9),
        false_alerts_per_day=len(false) / (span_s / 86_400) if span_s > 0 else 0.0,
        kind_correct=sum(m.detected and m.kind_correct for m in matches),
    )


def alerts_per_day(alerts: list[AlertEpisode], span_s: float) -> dict[str, float]:
    """Alert episodes per day, per peer group (``AlertEpisode.group``)."""
    days = span_s / 86_400 if span_s > 0 else 1.0
    out: dict[str, float] = {}
    for a in alerts:
        out[a.group] = out.get(a.group, 0.0) + 1 / days
    return dict(sorted(out.items()))


# -- the truth file --------------------------------------------------------------------------


def _time(value: Any, where: str) -> float:
    if isinstance(value, bool):
        raise InputError(f"{where}: expected epoch seconds or an RFC 3339 time, got {value!r}")
    if isinstance(value, int | float):
        if not math.isfinite(value):
            raise InputError(f"{where}: expected a finite time, got {value!r}")
        return float(value)
    if isinstance(value, str):
        try:
            t = dt.datetime.fromisoformat(value.replace("Z", "+00:00"))
        except ValueError:
            raise InputError(
                f"{where}: expected epoch seconds or an RFC 3339 time, got {value[:60]!r}"
            ) from None
        if t.tzinfo is None:
            raise InputError(f"{where}: {value[:60]!r} has no UTC offset (RFC 3339 needs one)")
        return t.timestamp()
    raise InputError(
        f"{where}: expected epoch seconds or an RFC 3339 time, got {type(value).__name__}"
    )


def _text(doc: dict[str, Any], key: str, where: str, optional: bool = False) -> str | None:
    v = doc.get(key)
    if v is None and optional:
        return None
    if isinstance(v, int) and not isinstance(v, bool):
        return str(v)
    if not isinstance(v, str) or not v:
        raise InputError(f"{where}.{key}: expected a non-empty string, got {v!r}"[:300])
    return v


def parse_truth(doc: Any, where: str) -> list[TruthEpisode]:
    """The truth episodes of a parsed truth file (``where`` names the file in errors)."""
    if not isinstance(doc, dict):
        raise InputError(f"{where}: expected a JSON object with an 'episodes' list")
    episodes = doc.get("episodes")
    if not isinstance(episodes, list):
        raise InputError(f"{where}: episodes: expected a list, got {type(episodes).__name__}")
    out = []
    for n, e in enumerate(episodes):
        at = f"{where}: episodes[{n}]"
        if not isinstance(e, dict):
            raise InputError(f"{at}: expected an object, got {type(e).__name__}")
        level = _text(e, "level", at)
        if level not in LEVELS:
            raise InputError(f"{at}.level: expected one of {', '.join(LEVELS)}, got {level!r}")
        rank = _text(e, "dp_rank", at, optional=True)
        start, end = _time(e.get("start"), f"{at}.start"), _time(e.get("end"), f"{at}.end")
        if end < start:
            raise InputError(f"{at}: end is before start")
        out.append(
            TruthEpisode(
                id=_text(e, "id", at, optional=True) or f"episode-{n}",
                level=level,
                instance=str(_text(e, "instance", at)),
                dp_rank=rank,
                kind=str(_text(e, "kind", at)),
                start=start,
                end=end,
            )
        )
    return out


def load_truth(path: str | Path) -> list[TruthEpisode]:
    """The truth episodes of a truth file (one InputError line naming the file on any fault)."""
    from skewscope.smallfile import load_json

    return parse_truth(load_json(path, str(path)), str(path))
