"""Notes: what a report says beside its findings, as a code and its figures, never as words.

Neutral ground: the analysis (through ``report/facts.py``) and the what-if replay both speak in
``Note``s, and neither may word or format them; ``report/phrases.py`` (and
``report/whatif_phrases.py``) turn a note into its sentence for every renderer. The JSON
cleaning (``clean``, ``rounded``) lives here because a note's figures go through it.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

JSON_DECIMALS = 6  # floats in the JSON report; the tables format these same rounded values


def rounded(value: float) -> float:
    """A finite float as the JSON report carries it (renderers format this, so a ratio in a
    table is always the JSON's number at fewer digits)."""
    return round(value, JSON_DECIMALS)


def clean(value: Any) -> Any:
    """JSON has no NaN or infinity: a value that was not measured is null, an infinite ratio
    (the reference did none of it) is the string ``"inf"``, as the tables print ``∞x``."""
    if isinstance(value, float):
        if math.isinf(value):
            return "inf" if value > 0 else "-inf"
        return None if not math.isfinite(value) else rounded(value)
    if isinstance(value, Note):
        return value.to_dict()
    if isinstance(value, Mapping):
        return {k: clean(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [clean(v) for v in value]
    return value


class NoteCode(StrEnum):
    """What a note of the analysis says (``Note.values`` holds its figures)."""

    SOURCE = "source"  # a source's own line, passed through: values {text}
    EMPTY_RANGE = "empty_range"  # no data in the analysed range
    ONE_UNIT = "one_unit"  # {unit, min_units}
    FEW_WINDOWS = "few_windows"  # {windows, min_windows}
    NEAR_IDLE = "near_idle"  # {requests, min_requests}
    NO_REQUEST_COUNTS = "no_request_counts"
    QUEUE_ONLY = "queue_only"  # the source counts no requests: judged by queues alone
    FEW_JUDGED_WINDOWS = "few_judged_windows"  # {judged, windows, min_requests_per_window}
    SKEW_NOT_JUDGED = "skew_not_judged"  # stalled units found, the rest not judged: {reason}
    NO_PROGRESS = "no_progress"  # {windows, of}: no unit progressed (fleet stopped / froze)
    DP_SIZES = "dp_sizes"  # {sizes: {instance: ranks}}
    DP_WITHIN_INSTANCES = "dp_within_instances"  # instances balanced, ranks judged inside
    DP_POOLED = "dp_pooled"  # {instances, min_requests}: too quiet alone, ranks judged together
    DP_NOT_JUDGED = "dp_not_judged"  # {instance, reason}: an auto drill-down's gate said no
    COLD_MINORITY = "cold_minority"  # {units}: most run hot, judged against these
    STARVED_LEFT_OUT = "starved_left_out"  # {units}: starved, not in their peers' reference
    WEIGHT_BY_CHANCE = "weight_by_chance"  # {unit, input_ratio, output_ratio, p_value}
    UNEXPLAINED_PRESSURE = "unexplained_pressure"  # {units}
    SKEW_PRICE = "skew_price"  # SkewPrice's fields
    NO_GATEWAY = "no_gateway"
    GATEWAY_UNJOINED = "gateway_unjoined"  # {upstreams}
    GATEWAY_DOWN = "gateway_down"  # {unit, down: [(what, share)]}: a unit not starved
    GATEWAY_MARKED_DOWN = "gateway_marked_down"  # the same, said of a starved finding's unit
    GATEWAY_NOT_LISTED = "gateway_not_listed"  # {unit, source}
    # {unit, source, policy, policy_class, requests, router_share, lead}: in the pool, healthy,
    # yet (almost) never chosen: its policy sent the traffic elsewhere
    GATEWAY_LISTED_UNUSED = "gateway_listed_unused"
    # {source, policy, policy_class, upstream, router_share, engine_share, router_ratio,
    #  verdict ("more" | "not_more" | "even"), key_name, top_keys, top_keys_excess_share,
    #  request_bytes_ratio, lead_cause}
    GATEWAY_ROUTED = "gateway_routed"
    # {unit, windows, hot_share, hot_run, span_s, often, min_consecutive, held_back, burst_s,
    #  sigmas}
    TRANSIENT = "transient"
    # when units came and went (analysis/presence.py): {unit, at_s}; {unit, from_s, back_s};
    # {unit, at_s, hot}
    UNIT_JOINED = "unit_joined"
    UNIT_ABSENT = "unit_absent"
    UNIT_LOST = "unit_lost"
    KV_EXHAUSTED = "kv_exhausted"  # {kv_peak, kv_high}
    KV_SERVICE_WIDE = "kv_service_wide"  # {kv_peak, reference_peak}
    PREEMPTED_HERE_ONLY = "preempted_here_only"  # {preemptions}
    KV_FILLING = "kv_filling"  # {alloc_free_ratio}
    QUEUE_GROWING = "queue_growing"  # {per_window}
    # compare
    LEVELS_DIFFER = "levels_differ"  # {before, after}
    FOCUS_MISSING = "focus_missing"  # {units}: not in the after side
    NOTHING_COMPARED = "nothing_compared"  # no signal measured on both sides


class WhatifNoteCode(StrEnum):
    """What a note of the what-if replay says (``Note.values`` holds its figures)."""

    NOT_REPRODUCED = "whatif_not_reproduced"  # {metrics}: "" = the model is not calibrated
    FEW_TIMED_STEPS = "whatif_few_timed_steps"  # offline: no service model fitted
    NO_ITL_HISTOGRAM = "whatif_no_itl_histogram"  # online: no service model fitted
    SERVICE_MODEL = "whatif_service_model"  # {fixed_ms, per_prefill_token_ms,
    # per_decode_seq_ms, max_running, token_budget, max_batch_seen, max_tokens_seen,
    # block_size, budget ("" offline | "histogram" | "default"), default_budget}
    # {estimator, decode_windows, prefill_windows, min_windows}: online, fitted on light load
    # (the means of ITL and TTFT; fewer than min_windows windows averaged a running request)
    LIGHT_LOAD = "whatif_light_load"
    NO_KV = "whatif_no_kv"  # {ranks, blocks}: ranks without KV figures, blocks assumed
    NO_TIMED_STEP = "whatif_no_timed_step"  # {ranks}: nominal speed assumed
    THROUGH_BUCKETS = "whatif_through_buckets"  # latency percentiles read through buckets
    NEVER_IN_POOL = "whatif_never_in_pool"  # {instance}: index, it received no request
    JOINED_LATE = "whatif_joined_late"  # {instance, at_s}
    LEFT_EARLY = "whatif_left_early"  # {instance, at_s}
    UNPLACED = "whatif_unplaced"  # {requests}: not placed on a DP rank
    UNFINISHED = "whatif_unfinished"  # {requests}: output length drawn
    NO_SESSIONS = "whatif_no_sessions"  # offline evidence carries no session or prefix ids
    NO_SESSIONS_ONLINE = "whatif_no_sessions_online"  # metrics carry none, no access log
    COUNTED_AT_START = "whatif_counted_at_start"  # {alias}: requests counted leaving the queue
    ONLINE_WORKLOAD = "whatif_online_workload"  # {requests, window_s}
    LENGTHS = "whatif_lengths"  # {what: "prompt" | "output", histogram: bool}
    SESSIONS = "whatif_sessions"  # {keys, key_name, share}
    UNMATCHED_UPSTREAMS = "whatif_unmatched_upstreams"  # {upstreams}
    ONE_INSTANCE = "whatif_one_instance"  # {policy}: no instance-level choice
    # {level, units, ratio, z, heavy_tokens, heavy, excluded}: request weight tied to the unit
    CORRELATED = "whatif_correlated"
    # What the current routing looks like, per level (WhatIfReport.inferred):
    ROUTING_EQUAL = "whatif_routing_equal"  # equal request counts: round_robin-like
    ROUTING_WEIGHTED = "whatif_routing_weighted"  # {shares: [[unit, share], ...]}
    # What each candidate replays (PolicyResult.description):
    PLAN_CURRENT = "whatif_plan_current"  # {inferred: [[level, ROUTING_* note], ...]}
    PLAN_GATEWAY = "whatif_plan_gateway"  # {policy}: gateway policy, DP dispatch as observed
    PLAN_DP = "whatif_plan_dp"  # {policy}: DP dispatcher policy, instances as observed
    PLAN_FIX_WEIGHTS = "whatif_plan_fix_weights"  # {weights}: gateway weights = capacity
    PLAN_DP_EQUAL = "whatif_plan_dp_equal"  # DP dispatcher with equal rank weights
    PLAN_REMOVE_SLOW = "whatif_plan_remove_slow"  # {units}: taken out of the pool
    PLAN_RESTORE_POOL = "whatif_plan_restore_pool"  # every instance in the pool all run


@dataclass(frozen=True)
class Note:
    """One thing the report says beside its findings, as a code and its figures."""

    code: NoteCode | WhatifNoteCode
    values: Mapping[str, Any] = field(default_factory=dict)

    @classmethod
    def text(cls, line: str) -> Note:
        """A source's note (sources speak in lines; the analysis passes them through)."""
        return cls(NoteCode.SOURCE, {"text": line})

    def to_dict(self) -> dict[str, Any]:
        return {"code": str(self.code), **clean(dict(self.values))}
