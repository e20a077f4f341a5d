"""The Report: frozen data every renderer reads; renderers never compute, they only format.

Data only, no words: a finding carries its facts, the report its notes (``report/facts.py``);
``report/document.py`` words them (through ``report/phrases.py``) and builds the JSON document
(docs/json-report.md, ``schema_version`` 2) from these parts' ``to_dict`` figures."""

from __future__ import annotations

import datetime as dt
import math
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from skewscope.catalogue import Cause, Kind, KvRole, Level, Role, Severity, Verdict
from skewscope.report.facts import FindingFacts, Note, clean

SCHEMA_VERSION = 2  # 2: per-second rates replace the per-window ones

_clean = clean  # comparison.py cleans its numbers the same way


@dataclass(frozen=True)
class FleetSummary:
    """A fleet too large for one table row per unit (more than ``table_units_max``).

    ``shown``: the units the per-unit table lists, in order (stalled, hot, starved, then the
    highest load ratio); ``spread``: per table metric, (min, median, p90, max) over every
    unit that measured it (values that are only histogram bucket bounds left out).
    """

    units: int
    roles: dict[Role, int]
    shown: tuple[str, ...]
    spread: dict[str, tuple[float, float, float, float]]

    def to_dict(self) -> dict[str, Any]:
        return _clean(  # type: ignore[no-any-return]
            {
                "units": self.units,
                "roles": self.roles,
                "shown": list(self.shown),
                "spread": {
                    k: dict(zip(("min", "median", "p90", "max"), v, strict=True))
                    for k, v in self.spread.items()
                },
            }
        )


@dataclass(frozen=True)
class UnitReport:
    unit: str
    instance: str
    dp_rank: int | None
    role: Role
    hot_share: float  # share of judged windows in which the unit was hot
    longest_hot_run: int  # consecutive hot windows
    metrics: dict[str, float]
    # Heat signal -> unit / peers: median over the judged windows of the ratio step 1 scores
    # (smoothed signal over the floored peer median); empty when the unit was not scored.
    load_ratios: dict[str, float] = field(default_factory=dict)
    # Per window of the report: the highest of those ratios (NaN where not judged).
    heat_by_window: tuple[float, ...] = ()
    # Percentile metrics that rest on histogram bucket bounds: "upper" (print "< v"), "lower"
    # ("> v", the +Inf bucket) or "mixed" ("~v"); absent = measured or interpolated.
    bounds: dict[str, str] = field(default_factory=dict)
    # Its pool in a prefill/decode disaggregated fleet (judged only against its own pool).
    pool: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return _clean(  # type: ignore[no-any-return]
            {
                "unit": self.unit,
                "instance": self.instance,
                "dp_rank": self.dp_rank,
                "role": self.role,
                **({"pool": self.pool} if self.pool else {}),
                "hot_share": self.hot_share,
                "longest_hot_run": self.longest_hot_run,
                "load_ratios": self.load_ratios,
                "heat_by_window": list(self.heat_by_window),
                **self.metrics,
                "bounds": self.bounds,
            }
        )


class SideBySide(NamedTuple):
    """One metric of a finding, hot against the median of its peers. ``ratio`` is computed by
    the analysis (inf when the peers did none of it, NaN when not measured or when either side
    is only a bucket bound): renderers print it, they never divide."""

    metric: str
    hot: float
    reference: float
    ratio: float
    hot_bound: str = ""  # "upper" | "lower" | "mixed" when a bucket bound, see UnitReport.bounds
    reference_bound: str = ""


def utc(epoch_s: float) -> str | None:
    """ISO 8601 UTC, as the JSON carries times beside their epoch seconds."""
    if not math.isfinite(epoch_s):
        return None
    return dt.datetime.fromtimestamp(epoch_s, tz=dt.UTC).isoformat().replace("+00:00", "Z")


@dataclass(frozen=True)
class Run:
    """Consecutive hot windows: from the first window's start to the last window's end."""

    start_s: float
    end_s: float
    windows: int

    def to_dict(self) -> dict[str, Any]:
        return _clean(  # type: ignore[no-any-return]
            {
                "start_s": self.start_s,
                "end_s": self.end_s,
                "start": utc(self.start_s),
                "end": utc(self.end_s),
                "windows": self.windows,
            }
        )


@dataclass(frozen=True)
class Timeline:
    """When a unit ran hot: onset (first hot window) to end (last hot window), its runs."""

    runs: tuple[Run, ...]
    judged_windows: int  # windows judged between onset and end (hot or not)

    @property
    def onset_s(self) -> float:
        return self.runs[0].start_s if self.runs else math.nan

    @property
    def end_s(self) -> float:
        return self.runs[-1].end_s if self.runs else math.nan

    @property
    def longest(self) -> Run | None:
        return max(self.runs, key=lambda r: r.windows) if self.runs else None

    @property
    def hot_windows(self) -> int:
        return sum(r.windows for r in self.runs)

    def to_dict(self) -> dict[str, Any]:
        longest = self.longest
        return _clean(  # type: ignore[no-any-return]
            {
                "onset_s": self.onset_s,
                "end_s": self.end_s,
                "onset": utc(self.onset_s),
                "end": utc(self.end_s),
                "hot_windows": self.hot_windows,
                "windows_between": self.judged_windows,
                "longest_run": longest.to_dict() if longest else None,
                "runs": [r.to_dict() for r in self.runs],
            }
        )


@dataclass(frozen=True)
class Episode:
    """A short burst on one unit (not a persistent hot spot): when, how hot, what it cost."""

    unit: str
    run: Run
    peak_ratio: float  # highest heat ratio against the peers in the run
    driver: str  # heat signal that was highest
    impact: dict[str, float]  # impact metric -> unit / peers over the run (NaN = not measured)
    hurting: tuple[str, ...] = ()  # impact metrics at or above the impact threshold

    def to_dict(self) -> dict[str, Any]:
        return _clean(  # type: ignore[no-any-return]
            {
                "unit": self.unit,
                **self.run.to_dict(),
                "peak_ratio": self.peak_ratio,
                "driver": self.driver,
                "impact_ratios": self.impact,
                "hurting": list(self.hurting),
            }
        )


@dataclass(frozen=True)
class Band:
    """The peers of a finding's unit, per window: median and range of one signal."""

    median: tuple[float, ...]
    low: tuple[float, ...]
    high: tuple[float, ...]

    def to_dict(self) -> dict[str, Any]:
        return _clean(  # type: ignore[no-any-return]
            {"median": self.median, "min": self.low, "max": self.high}
        )


@dataclass(frozen=True)
class Series:
    """Per-window values of the report's units, computed by the analysis (renderers draw them,
    ``compare`` reads them). Keys of ``values`` are ``catalogue.SERIES`` keys."""

    window_starts: tuple[float, ...]
    values: dict[str, dict[str, tuple[float, ...]]]  # signal -> unit -> per window
    hot: dict[str, tuple[bool, ...]]  # unit -> hot in that window (heat: UnitReport)

    def to_dict(self) -> dict[str, Any]:
        return _clean(  # type: ignore[no-any-return]
            {
                "window_starts": self.window_starts,
                "values": self.values,
                "hot": self.hot,
            }
        )


@dataclass(frozen=True)
class CauseVotes:
    """What ranks a finding's root causes; ``analysis.causes.rank`` holds the order and the
    finding's ``root_causes`` is that order. Kept on the finding so that the gateway's evidence
    re-ranks it from the same votes (``gateway_lead``) instead of editing a finished list. Not
    in the JSON report: ``root_causes`` and ``evidence.gateway.lead_cause`` say what it ranked."""

    fixed: tuple[Cause, ...] = ()  # causes that follow from the finding alone (starved, stalled…)
    kind: Kind | None = None  # a hot finding's kind: its candidate causes (None: no candidates)
    secondary_kind: Kind | None = None  # the other of count/weight in a mixed skew
    level: Level = Level.INSTANCE  # the candidates differ by level (DP dispatch, routing)
    device_first: tuple[Cause, ...] = ()  # what the device state names first (resource.py)
    kv: KvRole = KvRole.NONE
    gateway_lead: Cause | None = None  # the cause the gateway's evidence puts first


@dataclass(frozen=True)
class Finding:
    kind: Kind
    units: tuple[str, ...]
    reference_units: tuple[str, ...]  # the idle/normal peers they were compared against
    severity: Severity
    facts: FindingFacts  # what the summary says, as numbers and keys (worded: report/document.py)
    evidence: dict[str, Any]
    root_causes: tuple[Cause, ...]  # most likely first (worded, with their actions: document.py)
    votes: CauseVotes  # what ranked them (root_causes == analysis.causes.rank(votes))
    weight_side: str | None = None
    side_by_side: tuple[SideBySide, ...] = ()
    timeline: Timeline | None = None
    peer_bands: dict[str, Band] = field(default_factory=dict)  # series key -> peers' band
    context: tuple[Note, ...] = ()  # what other evidence (the gateway) adds to the summary


@dataclass(frozen=True)
class GatewayUnitFacts:
    """One upstream of the gateway beside its engine (analysis/gateway.py)."""

    upstream: str  # the gateway's name for it, host:port
    unit: str | None  # the engine unit it joined to (None: the engine evidence lacks it)
    requests: float  # requests the gateway sent it
    router_share: float  # its share of the gateway's requests
    engine_share: float  # its engine's share of the engines' requests (NaN: not joined)
    in_pool: bool
    unhealthy_share: float  # share of the range the gateway marked it unhealthy
    breaker_open_share: float  # share of the range its circuit breaker was open
    request_bytes: float  # mean request size
    top_keys: tuple[tuple[str, float], ...] = ()  # (key, requests), biggest first
    top_keys_excess_share: float = math.nan  # share of its excess the top keys carried
    # Per window of GatewayFacts.window_starts: its share of the gateway's requests (NaN: the
    # gateway sent none that window); empty without a time series.
    share_series: tuple[float, ...] = ()
    # Start of the first run of ``min_consecutive`` windows in which the gateway sent it at
    # least ``count_ratio`` x its peers' median: when routing diverged (None: never).
    diverged_from: float | None = None
    router_load: float = math.nan  # mean load the router believed it had (its queue / in-flight)

    def to_dict(self) -> dict[str, Any]:
        return _clean(  # type: ignore[no-any-return]
            {
                "upstream": self.upstream,
                "unit": self.unit,
                "requests": self.requests,
                "router_share": self.router_share,
                "engine_share": self.engine_share,
                "in_pool": self.in_pool,
                "unhealthy_share": self.unhealthy_share,
                "breaker_open_share": self.breaker_open_share,
                "request_bytes": self.request_bytes,
                "top_keys": [{"key": k, "requests": n} for k, n in self.top_keys],
                "top_keys_excess_share": self.top_keys_excess_share,
                "share_series": self.share_series,
                "diverged_from": self.diverged_from,
                "router_load": self.router_load,
            }
        )


@dataclass(frozen=True)
class StaleLoad:
    """A load-aware router deciding on a load figure that differs from the engine's own queue
    (analysis/gateway_series.py): its polled view lags or misses the bursts."""

    unit: str
    router_mean: float  # mean queue the router believed the unit had, per window
    engine_mean: float  # mean queue the engine measured (waiting), per window
    off_by: float  # mean |router - engine| per window, requests
    gap: float  # off_by over the engine's mean queue (floored at Thresholds.floor_waiting)
    lag_windows: int  # shift of the router's view that agrees best with the engine's (0: none)
    window_s: float

    def to_dict(self) -> dict[str, Any]:
        return _clean(  # type: ignore[no-any-return]
            {
                "unit": self.unit,
                "router_mean": self.router_mean,
                "engine_mean": self.engine_mean,
                "off_by": self.off_by,
                "gap": self.gap,
                "lag_windows": self.lag_windows,
                "window_s": self.window_s,
            }
        )


@dataclass(frozen=True)
class GatewayFacts:
    """What the gateway decided, joined to the engine units."""

    source: str  # catalogue.GatewaySource
    policy: str | None
    policy_class: str | None  # catalogue.PolicyClass
    key_name: str | None  # what the per-key counts are keyed by
    units: tuple[GatewayUnitFacts, ...]
    not_in_gateway: tuple[str, ...] = ()  # engine units the gateway does not list / never used
    window_starts: tuple[float, ...] = ()  # windows of the units' share_series
    load_polled: bool = False  # router_load is the engines' queue as the router polled it
    stale_load: tuple[StaleLoad, ...] = ()  # units whose polled load disagreed with the engine
    pool: tuple[tuple[str, float], ...] = ()  # pool-wide figures the router exports

    def to_dict(self) -> dict[str, Any]:
        return {
            "source": self.source,
            "policy": self.policy,
            "policy_class": self.policy_class,
            "key_name": self.key_name,
            "units": [u.to_dict() for u in self.units],
            "not_in_gateway": list(self.not_in_gateway),
            "window_starts": list(self.window_starts),
            "load_polled": self.load_polled,
            "stale_load": [s.to_dict() for s in self.stale_load],
            "pool": _clean({k: v for k, v in self.pool}),
        }


@dataclass(frozen=True)
class SkewPrice:
    """What DP skew costs one instance (analysis/price.py): the ranks' idle share when they step
    in lockstep, ``1 − mean/max`` of the per-step load (per window where no per-step load was
    recorded), and the device-hours it wastes."""

    instance: str
    ranks: int
    basis: str  # "forward_batch" (per step) | "busy_ms" | "scheduled_tokens" | "total_tokens"
    idle_share: float  # per step: weighted by step time; per window: mean over the windows
    worst_window_idle_share: float
    windows: int
    device_hours: float
    devices_per_rank: float
    steps: int | None = None  # forward iterations priced (per-step basis only)
    # the ranks step in lockstep (MoE / DP attention: the idle share is time waiting for the
    # busiest), do not (dense model, plain DP: capacity kept idle by sizing for the busiest), or
    # None: not known (the note gives both readings)
    lockstep: bool | None = None

    def to_dict(self) -> dict[str, Any]:
        return _clean(  # type: ignore[no-any-return]
            {
                "instance": self.instance,
                "ranks": self.ranks,
                "basis": self.basis,
                "idle_share": self.idle_share,
                "worst_window_idle_share": self.worst_window_idle_share,
                "windows": self.windows,
                "device_hours": self.device_hours,
                "devices_per_rank": self.devices_per_rank,
                "steps": self.steps,
                "lockstep": self.lockstep,
            }
        )


@dataclass(frozen=True)
class Report:
    verdict: Verdict
    level: Level
    source: str
    window_s: float
    windows: int
    start_s: float
    end_s: float
    hot_units: tuple[str, ...]
    starved_units: tuple[str, ...]
    units: tuple[UnitReport, ...]
    findings: tuple[Finding, ...]
    transient: tuple[Note, ...] = ()  # short bursts seen and dismissed as jitter
    # The sources' lines and the analysis' notes, in order; insufficient_data: the first is why.
    notes: tuple[Note, ...] = ()
    missing: tuple[str, ...] = ()
    placed_share: float | None = None
    drilldown: tuple[Report, ...] = ()  # DP-level reports of hot instances (auto level)
    aliases: dict[str, str] = field(default_factory=dict)
    episodes: tuple[Episode, ...] = ()  # transient bursts with their times and impact
    series: Series | None = None
    gateway: GatewayFacts | None = None  # the gateway's decisions, when gateway evidence was read
    skew_price: tuple[SkewPrice, ...] = ()  # DP level: per instance with two or more ranks
    fleet: FleetSummary | None = None  # more units than one table should list
    # The analysis' thresholds this report was judged with (config.Thresholds by name), and
    # those set away from their defaults (--config).
    thresholds: dict[str, float] = field(default_factory=dict)
    thresholds_overridden: tuple[str, ...] = ()

    def all_findings(self) -> list[Finding]:
        """Findings of this level and of every drill-down, in report order."""
        out = list(self.findings)
        for d in self.drilldown:
            out.extend(d.all_findings())
        return out
