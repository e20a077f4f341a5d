"""The backtest's model (``skewscope backtest``): would-be alert episodes, the truth episodes
they are scored against, the score and the whole result. Frozen data in the report layer:
``monitor.backtest`` and ``monitor.backtest_score`` produce it (every figure computed there),
``report.backtest`` only renders it."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from skewscope.catalogue import Level


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
    """The alerts against the truth, every figure computed by ``monitor.backtest_score.score``
    (recall over truth episodes, precision over alert episodes, delays sorted)."""

    matches: tuple[Match, ...]
    false_alerts: tuple[AlertEpisode, ...]
    alerts: int  # alert episodes scored
    true_alerts: int  # alert episodes that matched a truth episode
    span_s: float
    grace_s: float
    detected: int  # truth episodes an alert matched
    missed: int
    precision: float | None  # None: no alert episode
    recall: float | None  # None: no truth episode
    f1: float | None
    delays_s: tuple[float, ...]  # first matching firing - start, per detected episode, sorted
    median_delay_s: float | None
    p90_delay_s: float | None
    false_alerts_per_day: float
    kind_correct: int  # detected episodes whose earliest matching alert named their kind

    def as_dict(self) -> dict[str, Any]:
        return {
            "episodes": len(self.matches),
            "detected": self.detected,
            "missed": self.missed,
            "alerts": self.alerts,
            "true_alerts": self.true_alerts,
            "false_alerts": len(self.false_alerts),
            "precision": self.precision,
            "recall": self.recall,
            "f1": self.f1,
            "median_delay_s": self.median_delay_s,
            "p90_delay_s": self.p90_delay_s,
            "false_alerts_per_day": self.false_alerts_per_day,
            "kind_correct": self.kind_correct,
            "span_s": self.span_s,
            "grace_s": self.grace_s,
            "matches": [
                {
                    "id": m.truth.id,
                    "level": m.truth.level,
                    "instance": m.truth.instance,
                    "dp_rank": m.truth.dp_rank,
                    "kind": m.truth.kind,
                    "start": m.truth.start,
                    "end": m.truth.end,
                    "detected": m.detected,
                    "first_firing": m.first_firing,
                    "delay_s": m.delay_s,
                    "alert_kind": m.kind,
                }
                for m in self.matches
            ],
        }


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
