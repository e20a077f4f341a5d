"""Facts: what the analysis found, as numbers, vocabulary keys and flags, never as words.

The analysis fills these; ``report/phrases.py`` turns them into the sentences every renderer
shows (and the JSON report carries beside them). A fact names metrics by their
``catalogue.METRICS`` key, kinds by ``catalogue.Kind``, causes by ``catalogue.Cause``;
a ratio is the analysis' number (NaN: not measured, inf: the peers did none of it).
"""

from __future__ import annotations

from dataclasses import dataclass, fields, is_dataclass
from typing import Any

# The note type and the JSON cleaning are neutral ground (``skewscope.notes``): what-if speaks
# in the same notes and may not import the report. Re-exported here for the report's modules.
from skewscope.catalogue import Kind
from skewscope.notes import JSON_DECIMALS, Note, NoteCode, WhatifNoteCode, clean, rounded

__all__ = ["JSON_DECIMALS", "Note", "NoteCode", "WhatifNoteCode", "clean", "rounded"]


@dataclass(frozen=True)
class Compared:
    """One metric of a unit against its peers' median, as a sentence quotes it."""

    metric: str  # catalogue.METRICS key
    hot: float
    reference: float
    hot_bound: str = ""  # "upper" | "lower" | "mixed": only a histogram bucket bound
    reference_bound: str = ""


@dataclass(frozen=True)
class SaturationFacts:
    """A hot unit at its batch ceiling with requests waiting."""

    ceiling: float  # running requests at the ceiling
    share: float  # of the judged windows
    queue_growing: bool
    lower_bound: str  # why the request ratio understates: "finished" | "unplaced" | ""
    unplaced_per_window: float  # its instance's unplaced requests linked to it (NaN: none)
    count_ratio_with_unplaced: float


@dataclass(frozen=True)
class DeviceFacts:
    """How full the hot unit's device is, and what that says."""

    basis: str  # "device_util" | "busy_share"
    hot: float
    reference: float
    # why a capability skew is slower, when the device says: "busier" (device busier at equal
    # load), "slower_device" (more device time than the peers' cost model predicts for its
    # work), "host_bound" (device time as predicted, steps longer), "" (it does not say)
    capability: str
    cost_ratio: float  # device time over the peers' cost model's prediction
    step_cost_ratio: float  # step time over the same
    queue_not_compute: bool  # its queue grows while the device is below saturation


@dataclass(frozen=True)
class HotFacts:
    """A persistent hot spot: how hot, why (the kind and its ratios), and what it costs."""

    unit: str
    kind: Kind
    secondary_kind: str | None
    weight_side: str | None
    hot_share: float
    judged_windows: int
    hot_run: int
    driver: str  # the heat signal that ran highest
    count_ratio: float
    weight_ratio: float  # tokens per request
    input_ratio: float
    output_ratio: float
    capability_ratio: float
    # cost_us_per_token | service_ms | e2e_mean_ms | ttft_mean_ms | in_service_s | ""
    capability_basis: str
    more_requests: bool  # count ratio at or above the count threshold
    weight_p_value: float  # NaN: not tested
    count_share: float  # excess token load from more requests (NaN: not decomposed)
    weight_share: float
    hurting: tuple[Compared, ...]  # impact metrics at or above the impact threshold
    bounded: tuple[Compared, ...]  # tail metrics resting on bucket bounds (no ratio formed)
    kv_exhausted: bool
    saturation: SaturationFacts | None
    widening: bool  # gap widening while the service's tail rises
    device: DeviceFacts | None
    kv_shortage: bool  # a kv_shortage finding follows
    resource: tuple[Note, ...] = ()  # step 4's resource observations
    # KV near exhaustion while the unit still admits its work (no queue growth, no preemption,
    # no batch ceiling): a consequence of its load, ranked after the load's cause
    kv_consequence: bool = False
    # far more in flight than its peers at a full KV cache or preempting: its latency was not
    # read as capability (analysis/classify.overloaded)
    overloaded: bool = False

    type = "hot"


@dataclass(frozen=True)
class KvShortageFacts:
    """The KV block shortage case; ``symptoms`` in the method's order (their figures beside)."""

    unit: str
    symptoms: tuple[str, ...]  # kv_high, batch_at_ceiling, alloc_outpaces_free, preemptions,
    # waiting_grows_running_flat
    kv_peak: float
    free_blocks_min: float
    free_blocks_capacity: float  # NaN unless the free blocks fell low (then kv_high says so)
    batch_ceiling: float
    saturated_share: float
    alloc_free_ratio: float
    preemptions: float
    waiting_growth_per_window: float

    type = "kv_shortage"


@dataclass(frozen=True)
class StarvedFacts:
    """Units with almost no traffic while their peers carried the load."""

    shares: tuple[tuple[str, float], ...]  # (unit, share of windows starved)

    type = "starved"


@dataclass(frozen=True)
class StallFacts:
    """A unit holding requests but making no progress."""

    unit: str
    in_flight: float
    progress: float  # per stalled window
    progress_signal: str  # "steps" | "requests"
    stalled_share: float
    measured_windows: int
    stalled_run: int

    type = "stalled"


@dataclass(frozen=True)
class FleetPatternFacts:
    """The same DP rank hot in most multi-rank instances."""

    dp_rank: int
    instances: tuple[str, ...]
    of_instances: int
    kind: str

    type = "fleet_dp_pattern"


@dataclass(frozen=True)
class PdFacts:
    """One pool of a prefill/decode disaggregated fleet saturated while the other idles."""

    saturated: str  # "prefill" | "decode"
    idle: str
    share: float  # of the windows both pools reported
    windows: int  # windows both pools reported
    run: int  # longest run of such windows
    prefill_units: int
    decode_units: int
    running_ratio: float  # prefill / decode mean running per unit (llm-d's ratio)
    saturated_waiting: float  # mean waiting per unit of the saturated pool
    idle_waiting: float
    saturated_kv: float  # mean KV usage of the saturated pool (NaN: not measured)
    idle_kv: float
    ttft_first_ms: float  # fleet's mean TTFT over the first / last windows (NaN: none)
    ttft_last_ms: float

    type = "pd_imbalance"


@dataclass(frozen=True)
class StaleLoadFacts:
    """A group's units taking turns carrying its load (a balancer deciding on late counts)."""

    group: str  # the instance at DP level, "" at instance level
    signal: str  # the load signal read: "requests" | "arrivals" | "running" (analysis/stale.py)
    swing_share: float  # of the judged windows: one unit ran hot_ratio over its peers
    judged_windows: int
    anticorrelation: float  # mean correlation of a unit's load with its peers' sum (< 0)
    switch_every_s: float  # how long the same unit stays the busiest
    window_s: float
    turns: tuple[tuple[str, int], ...]  # (unit, windows it was the busiest)
    range_ratio: float  # the highest unit over the range against its peers (< hot_ratio)

    type = "stale_load"


@dataclass(frozen=True)
class LostFacts:
    """A unit that stopped reporting while it was hot."""

    unit: str
    lost_at_s: float  # epoch s: the end of its last reported window
    hot_windows: int  # hot windows in a row up to its last report
    absent_windows: int  # windows its peers reported without it, to the end

    type = "lost"


FindingFacts = (
    HotFacts
    | KvShortageFacts
    | StarvedFacts
    | StallFacts
    | FleetPatternFacts
    | PdFacts
    | StaleLoadFacts
    | LostFacts
)


def _plain(value: Any) -> Any:
    if isinstance(value, Note):
        return value.to_dict()
    if is_dataclass(value) and not isinstance(value, type):
        return {f.name: _plain(getattr(value, f.name)) for f in fields(value)}
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    return value


def facts_dict(facts: FindingFacts) -> dict[str, Any]:
    """The JSON form: ``type`` first, then the fields (nested facts as objects)."""
    return clean({"type": facts.type, **_plain(facts)})  # type: ignore[no-any-return]
