"""What-if report: frozen dataclasses; ``to_dict()`` is the JSON contract (docs/whatif.md) but
for the notes' sentences: what-if hands its notes over as ``Note`` facts (``note_facts``) and the
report layer words them (``report.whatif.document`` adds ``notes``), as the diagnosis does.

The model sits in the report layer, beside ``report.model``, so that ``whatif`` produces it and
the renderers only read it (neither imports the other); what computes its figures stays in
``whatif`` (``whatif.spread`` the ``Spread``, ``whatif.fixes`` the ``FixSetting`` rows)."""

from __future__ import annotations

import math
from dataclasses import dataclass, fields
from enum import StrEnum
from typing import Any

from skewscope.notes import Note

# Metric keys in display order; every metric is "lower is better" except throughput.
METRIC_KEYS: tuple[str, ...] = (
    "max_over_median_load",
    "min_over_median_load",
    "queue_wait_p95_ms",
    "ttft_p99_ms",
    "e2e_p50_ms",
    "e2e_p99_ms",
    "kv_peak",
    "throughput_rps",
)
METRIC_LABELS: dict[str, str] = {
    "max_over_median_load": "max/median load",
    "min_over_median_load": "min/median load",
    "queue_wait_p95_ms": "queue wait P95",
    "ttft_p99_ms": "TTFT P99",
    "e2e_p50_ms": "E2E median",
    "e2e_p99_ms": "E2E P99",
    "kv_peak": "KV peak",
    "throughput_rps": "throughput",
}


def _num(v: float | None) -> float | None:
    return None if v is None or not math.isfinite(v) else round(v, 4)


@dataclass(frozen=True)
class Metrics:
    """What a run did. Load = execution time per engine process (DP rank) over the run, among
    the ranks in the pool; latencies over requests that got a first token (E2E over the
    finished ones); KV peak a fraction of the pool; throughput = requests finished per
    second."""

    max_over_median_load: float | None
    min_over_median_load: float | None
    queue_wait_p95_ms: float | None
    ttft_p99_ms: float | None
    e2e_p50_ms: float | None
    e2e_p99_ms: float | None
    kv_peak: float | None
    throughput_rps: float | None

    def get(self, key: str) -> float | None:
        v: float | None = getattr(self, key)
        return v

    def to_dict(self) -> dict[str, float | None]:
        return {f.name: _num(getattr(self, f.name)) for f in fields(self)}


@dataclass(frozen=True)
class Spread:
    """The load spread a replay leaves (computed by ``whatif.spread.persistent_spread``).
    ``high``: the max/median load the hottest unit stays at or above in ``persist_share`` of
    the windows; ``low``: the min/median the coldest unit stays at or below as long (0 = idle).
    ``value`` = max(high, 1 / low): how far the worst unit persistently is from the median
    either way (inf when a unit is persistently idle)."""

    high: float | None
    low: float | None
    window_s: float

    @property
    def value(self) -> float | None:
        if self.high is None or self.low is None:
            return None
        return max(self.high, 1.0 / self.low if self.low > 0 else math.inf)


# FixSetting.match: the stack ships the same algorithm, only the nearest one, or none
EXACT, CLOSEST, NONE = "exact", "closest", "none"


@dataclass(frozen=True)
class FixSetting:
    """The recommended candidate as one serving stack's setting (``whatif.fixes`` spells it)."""

    stack: str  # whatif.fixes.GATEWAYS or ENGINES
    setting: str  # the change as that stack spells it ("" when it has none)
    match: str  # EXACT, CLOSEST or NONE
    in_use: bool  # the evidence came from this stack

    def to_dict(self) -> dict[str, Any]:
        return {
            "stack": self.stack,
            "setting": self.setting,
            "match": self.match,
            "in_use": self.in_use,
        }


@dataclass(frozen=True)
class CalibrationRow:
    metric: str
    observed: float | None
    replayed: float | None
    error: float | None  # (replayed - observed) / observed; None when observed is 0 or absent
    ok: bool  # within WhatIfSettings.calibration_max_error or the absolute floor

    def to_dict(self) -> dict[str, Any]:
        return {
            "observed": _num(self.observed),
            "replayed": _num(self.replayed),
            "error": _num(self.error),
            "ok": self.ok,
        }


@dataclass(frozen=True)
class PolicyResult:
    name: str
    level: str  # "observed" (the current placement), "instance" or "dp"
    description: Note  # what it replays, worded by report/whatif_phrases
    predicted: Metrics
    unit_load: tuple[tuple[str, float], ...]  # rank unit id -> share of the execution time
    spread: Spread  # the persistent load spread the ranking reads
    # With a correlated placement (whatif/correlation.py), a load-aware candidate's metrics
    # when the heavy requests stay pinned where they were: its robustness to the correlation.
    robust: Metrics | None = None

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "level": self.level,
            "description_facts": self.description.to_dict(),
            "predicted": self.predicted.to_dict(),
            "robust": None if self.robust is None else self.robust.to_dict(),
            "spread": {
                "high": _num(self.spread.high),
                "low": _num(self.spread.low),
                "value": _num(self.spread.value),
            },
            "unit_load": {u: round(v, 4) for u, v in self.unit_load},
        }


class RankingVerdict(StrEnum):
    """Ranking.verdict: why the recommendation is what it is (worded by report/whatif_phrases)."""

    FIXES_SKEW = "fixes_skew"  # skewed, and the pick cuts the spread without costing tail latency
    NO_FIX = "no_fix"  # skewed, and no candidate cuts it within the latency tolerance
    BALANCED = "balanced"  # not skewed, and no candidate's latency gain is large: nothing to fix
    LATENCY_ONLY = "latency_only"  # not skewed, but the pick's tail-latency gain is large


@dataclass(frozen=True)
class Ranking:
    """The criterion the recommendation was picked by, as facts (docs/whatif.md, Ranking):
    skew first — the current replay's persistent spread against the hot ratio — then TTFT P99,
    with the thresholds used."""

    verdict: RankingVerdict
    current_spread: float | None  # Spread.value of the current replay (None: not measurable)
    skewed: bool
    settings: tuple[tuple[str, float], ...]  # hot_ratio, persist_share, window_s, tolerances
    # A correlated placement: candidates not offered as the fix (they count requests, as the
    # current router does), and the others ranked on their worse TTFT P99 of plain and pinned.
    excluded: tuple[str, ...] = ()
    robust: bool = False

    def setting(self, key: str) -> float:
        return dict(self.settings)[key]

    def to_dict(self) -> dict[str, Any]:
        return {
            "criterion": "spread_then_ttft",
            "verdict": self.verdict,
            "current_spread": _num(self.current_spread),
            "skewed": self.skewed,
            "settings": {k: _num(v) for k, v in self.settings},
            "excluded": list(self.excluded),
            "robust": self.robust,
        }


@dataclass(frozen=True)
class UnitModel:
    """The calibrated service model of one engine process."""

    unit: str
    speed: float  # step-time multiplier against the fleet fit (1.8 = 1.8x slower)
    total_blocks: int
    requests: int  # observed requests placed on it

    def to_dict(self) -> dict[str, Any]:
        return {
            "unit": self.unit,
            "speed": round(self.speed, 3),
            "total_blocks": self.total_blocks,
            "requests": self.requests,
        }


@dataclass(frozen=True)
class WhatIfReport:
    source: str
    duration_s: float
    n_requests: int
    instances: int
    dp_ranks: int
    current_policy: str
    inferred: tuple[tuple[str, Note], ...]  # level -> what the current routing looks like
    step_model: dict[str, float]  # fixed_ms, per_prefill_token_ms, per_decode_seq_ms, ...
    units: tuple[UnitModel, ...]
    calibration: tuple[CalibrationRow, ...]
    trusted: bool
    policies: tuple[PolicyResult, ...]
    recommended: str
    gain: dict[str, float | None]  # metric -> relative change of the recommended vs current
    ranking: Ranking
    notes: tuple[Note, ...] = ()
    dp_sizes: tuple[tuple[str, int], ...] = ()  # instance -> DP size (mixed fleets differ)
    engine: str = ""  # the evidence's stack: its dialect online, "profiler" offline
    fix: tuple[FixSetting, ...] = ()  # the recommended candidate as each stack's setting
    light_load: Note | None = None  # online: the step law fitted on light load's means

    def policy(self, name: str) -> PolicyResult:
        return next(p for p in self.policies if p.name == name)

    def to_dict(self) -> dict[str, Any]:
        return {
            "kind": "whatif",
            "source": self.source,
            "duration_s": round(self.duration_s, 3),
            "n_requests": self.n_requests,
            "instances": self.instances,
            "dp_ranks": self.dp_ranks,
            "dp_sizes": dict(self.dp_sizes),
            "current_policy": self.current_policy,
            "inferred_facts": {lvl: n.to_dict() for lvl, n in self.inferred},
            "service_model": {
                "step": {k: round(v, 6) for k, v in self.step_model.items()},
                "units": [u.to_dict() for u in self.units],
                **(
                    {"light_load": dict(self.light_load.values)}
                    if self.light_load is not None
                    else {}
                ),
            },
            "calibration": {r.metric: r.to_dict() for r in self.calibration},
            "trusted": self.trusted,
            "policies": [p.to_dict() for p in self.policies],
            "recommended": self.recommended,
            "ranking": self.ranking.to_dict(),
            "gain": {k: _num(v) for k, v in self.gain.items()},
            "note_facts": [n.to_dict() for n in self.notes],
            "fix": {
                "policy": self.recommended,
                "engine": self.engine,
                "settings": [f.to_dict() for f in self.fix],
            },
        }
