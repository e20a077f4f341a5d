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
  ``SkewscopeDPGapWidening`` none).
"""

from __future__ import annotations

import datetime as dt
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from skewscope.catalogue import Level
from skewscope.errors import InputError

LEVELS: tuple[Level, ...] = tuple(Level)
STARVED_KIND = "starved"


@dataclass(frozen=True)
class AlertEpisode:
    """One firing interval of one alert series (as Prometheus' ``ALERTS{alertstate="firing"}``
    would show it): ``start`` is the first evaluation at which it fired, ``end`` the last."""

    alert: str
    level: str
    instance: str
    dp_rank: str | None
    kind: str  # the alert's kind label; "starved" for SkewscopeStarvedUnit, "" when none
    start: float
    end: float
    peak: float  # the highest alert value while firing
    group: str = ""  # the peer group, as "label=value,..." (alerts per day per group)
    labels: tuple[tuple[str, str], ...] = ()

    @property
    def unit(self) -> tuple[str, str, str | None]:
        return (self.level, self.instance, self.dp_rank if self.level == Level.DP else None)

    @property
    def duration_s(self) -> float:
        return self.end - self.start


@dataclass(frozen=True)
class TruthEpisode:
    id: str
    level: str
    instance: str
    dp_rank: str | None
    kind: str
    start: float
    end: float

    @property
    def unit(self) -> tuple[str, str, str | None]:
        return (self.level, self.instance, self.dp_rank if self.level == Level.DP else None)


@dataclass(frozen=True)
class Match:
    """A truth episode and what the alerts made of it."""

    truth: TruthEpisode
    first_firing: float | None  # None: missed
    kind: str | None  # the earliest matching alert's kind

    @property
    def detected(self) -> bool:
        return self.first_firing is not None

    @property
    def delay_s(self) -> float | None:
        return None if self.first_firing is None else self.first_firing - self.truth.start

    @property
    def kind_correct(self) -> bool:
        return self.kind == self.truth.kind


@dataclass(frozen=True)
class Score:
    matches: tuple[Match, ...]
    false_alerts: tuple[AlertEpisode, ...]
    alerts: int  # alert episodes scored
    true_alerts: int  # alert episodes that matched a truth episode
    span_s: float
    grace_s: float

    @property
    def detected(self) -> int:
        return sum(m.detected for m in self.matches)

    @property
    def missed(self) -> int:
        return len(self.matches) - self.detected

    @property
    def precision(self) -> float | None:
        return self.true_alerts / self.alerts if self.alerts else None

    @property
    def recall(self) -> float | None:
        return self.detected / len(self.matches) if self.matches else None

    @property
    def f1(self) -> float | None:
        p, r = self.precision, self.recall
        if p is None or r is None:
            return None
        return 0.0 if p + r == 0 else 2 * p * r / (p + r)

    @property
    def delays_s(self) -> list[float]:
        return sorted(d for m in self.matches if (d := m.delay_s) is not None)

    @property
    def median_delay_s(self) -> float | None:
        return quantile(self.delays_s, 0.5)

    @property
    def p90_delay_s(self) -> float | None:
        return quantile(self.delays_s, 0.9)

    @property
    def false_alerts_per_day(self) -> float:
        return len(self.false_alerts) / (self.span_s / 86_400) if self.span_s > 0 else 0.0

    @property
    def kind_correct(self) -> int:
        return sum(m.detected and m.kind_correct for m in self.matches)

    def as_dict(self) -> dict[str, Any]:
        return {
            "episodes": len(self.matches), "detected": self.detected, "missed": self.missed,
            "alerts": self.alerts, "true_alerts": self.true_alerts,
            "false_alerts": len(self.false_alerts), "precision": self.precision,
            "recall": self.recall, "f1": self.f1, "median_delay_s": self.median_delay_s,
            "p90_delay_s": self.p90_delay_s, "false_alerts_per_day": self.false_alerts_per_day,
            "kind_correct": self.kind_correct, "span_s": self.span_s, "grace_s": self.grace_s,
            "matches": [
                {"id": m.truth.id, "level": m.truth.level, "instance": m.truth.instance,
                 "dp_rank": m.truth.dp_rank, "kind": m.truth.kind, "start": m.truth.start,
                 "end": m.truth.end, "detected": m.detected, "first_firing": m.first_firing,
                 "delay_s": m.delay_s, "alert_kind": m.kind}
                for m in self.matches
            ],
        }


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


def score(alerts: list[AlertEpisode], truth: list[TruthEpisode], span_s: float,
          grace_s: float) -> Score:
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
    return Score(tuple(matches), false, len(alerts), len(matched), span_s, grace_s)


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
            raise InputError(f"{where}: expected epoch seconds or an RFC 3339 time, "
                             f"got {value[:60]!r}") from None
        if t.tzinfo is None:
            raise InputError(f"{where}: {value[:60]!r} has no UTC offset (RFC 3339 needs one)")
        return t.timestamp()
    raise InputError(f"{where}: expected epoch seconds or an RFC 3339 time, got "
                     f"{type(value).__name__}")


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
        out.append(TruthEpisode(
            id=_text(e, "id", at, optional=True) or f"episode-{n}", level=level,
            instance=str(_text(e, "instance", at)), dp_rank=rank,
            kind=str(_text(e, "kind", at)), start=start, end=end,
        ))
    return out


def load_truth(path: str | Path) -> list[TruthEpisode]:
    """The truth episodes of a truth file (one InputError line naming the file on any fault)."""
    from skewscope.smallfile import load_json

    return parse_truth(load_json(path, str(path)), str(path))


@dataclass(frozen=True)
class Backtest:
    """What a backtest found, for the renderers (report/backtest.py): the alert episodes and,
    with a truth file, their score."""

    start: float
    end: float
    step_s: float
    source: str  # the Prometheus evaluated (its shown URL)
    rules: str  # where the rules came from ("generated: --window 5m ..." or the file)
    episodes: tuple[AlertEpisode, ...]
    per_day: dict[str, float] = field(default_factory=dict)
    score: Score | None = None
    notes: tuple[str, ...] = ()
