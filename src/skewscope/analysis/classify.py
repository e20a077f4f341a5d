"""Step 2: more requests (count), heavier requests (weight) or a weaker unit (capability)?

The hot unit's excess token load over its reference is split exactly into a part explained by
more requests and a part explained by heavier requests:
    T_h - T_r = (N_h - N_r) * w_r  +  N_h * (w_h - w_r)
with N requests per window and w tokens per request. A kind is named only when its part
explains at least ``explain_share`` of the excess.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from skewscope.analysis.matrix import safe_ratio
from skewscope.catalogue import Kind
from skewscope.config import Thresholds


@dataclass(frozen=True)
class Classification:
    kind: Kind | None  # COUNT, WEIGHT, CAPABILITY or UNKNOWN; None: unexplained
    secondary_kind: Kind | None  # the other of count/weight when the skew is mixed
    weight_side: str | None  # "input" | "output" for weight skew
    count_ratio: float
    weight_ratio: float
    input_ratio: float
    output_ratio: float
    capability_ratio: float
    capability_basis: str  # what the ratio was measured on: a metric key, "service_ms" or ""
    count_share: float  # share of the excess token load explained by more requests
    weight_share: float  # share explained by heavier requests
    # its latency not read as capability: "overloaded" (``overloaded``), "" when it was
    capability_not_judged: str = ""

    def as_evidence(self) -> dict[str, float | str | None]:
        return {
            "count_ratio": self.count_ratio,
            "tokens_per_request_ratio": self.weight_ratio,
            "input_tokens_per_request_ratio": self.input_ratio,
            "output_tokens_per_request_ratio": self.output_ratio,
            "capability_ratio": self.capability_ratio,
            "capability_basis": self.capability_basis,
            "secondary_kind": self.secondary_kind,
            "excess_from_more_requests": self.count_share,
            "excess_from_heavier_requests": self.weight_share,
            "capability_not_judged": self.capability_not_judged,
        }


def overloaded(hot: dict[str, float], ref: dict[str, float], th: Thresholds) -> bool:
    """The unit holds far more requests in flight than its peers (``hot_ratio`` x their running)
    with its KV cache near exhaustion or preempting where they do not: its latency is what its
    own load does to it (recompute, a full batch), not how fast it is, so latency at "equal
    load" (equal arrivals, counted as they finish) is no capability test."""
    running = safe_ratio(
        hot.get("running", math.nan), max(ref.get("running", math.nan), th.floor_running)
    )
    kv_full = _finite(hot.get("kv_usage_max", math.nan)) >= th.kv_high
    preempts = _finite(hot.get("preemptions", math.nan)) > max(
        0.0, _finite(ref.get("preemptions", math.nan))
    )
    return _finite(running) >= th.hot_ratio and (kv_full or preempts)


def _capability(
    hot: dict[str, float], ref: dict[str, float], equal_load: bool, th: Thresholds
) -> tuple[float, str]:
    """Slowness: execution time per scheduled token; at equal load, also latency per request.

    Per-token execution time understates a slow unit (its queue grows, its batches get larger
    and amortise the fixed step cost), so when requests and tokens per request are about equal
    the method's own test applies: same load, higher latency — unless the unit is
    ``overloaded``: then only the per-token execution time, measured at the batch it ran, says.
    """
    key = "cost_us_per_token"
    cost = safe_ratio(hot.get(key, math.nan), ref.get(key, math.nan))
    if not equal_load or (math.isfinite(cost) and cost >= th.capability_ratio):
        return cost, "cost_us_per_token" if math.isfinite(cost) else ""
    service = safe_ratio(_service_ms(hot), _service_ms(ref))
    if math.isfinite(service):
        return service, "service_ms"
    for key in ("e2e_mean_ms", "ttft_mean_ms"):
        r = safe_ratio(hot.get(key, math.nan), ref.get(key, math.nan))
        if math.isfinite(r):
            return r, key
    # no latency measured (a frontend's per-worker counters, Dynamo): Little's law, the time a
    # request spends in service is the requests in service over the requests served
    little = safe_ratio(_in_service_s(hot), _in_service_s(ref))
    if math.isfinite(little):
        return little, "in_service_s"
    return cost, "cost_us_per_token" if math.isfinite(cost) else ""


def _service_ms(s: dict[str, float]) -> float:
    """Time a request spends being served, queueing excluded: the unit's own speed."""
    return s.get("e2e_mean_ms", math.nan) - s.get("queue_wait_mean_ms", math.nan)


def _in_service_s(s: dict[str, float]) -> float:
    return safe_ratio(s.get("running", math.nan), s.get("requests_per_s", math.nan))


def decompose(n_h: float, w_h: float, n_r: float, w_r: float) -> tuple[float, float]:
    """Shares of the excess token load from more requests and from heavier requests."""
    excess = n_h * w_h - n_r * w_r
    if not all(map(math.isfinite, (n_h, w_h, n_r, w_r))) or excess <= 0:
        return math.nan, math.nan
    count_part = (n_h - n_r) * w_r
    return count_part / excess, 1.0 - count_part / excess


def classify(hot: dict[str, float], ref: dict[str, float], th: Thresholds) -> Classification:
    n_h, n_r = hot["requests_per_s"], ref["requests_per_s"]
    in_h, in_r = hot["prompt_tokens_per_request"], ref["prompt_tokens_per_request"]
    out_h, out_r = hot["generation_tokens_per_request"], ref["generation_tokens_per_request"]
    w_h, w_r = in_h + out_h, in_r + out_r
    count_ratio = safe_ratio(n_h, n_r)
    if n_r == 0 and n_h > 0:  # peers served nothing (traffic pinned here): measured, not missing
        count_ratio = math.inf
    weight_ratio = safe_ratio(w_h, w_r)
    input_ratio, output_ratio = safe_ratio(in_h, in_r), safe_ratio(out_h, out_r)
    count_share, weight_share = decompose(n_h, w_h, n_r, w_r)
    heavier = max(_finite(weight_ratio), _finite(input_ratio), _finite(output_ratio))
    equal_load = _finite(count_ratio) < th.count_ratio and heavier < th.weight_ratio
    busy = overloaded(hot, ref, th)
    cap_ratio, basis = _capability(hot, ref, equal_load and not busy, th)

    kind: Kind | None = None
    secondary: Kind | None = None
    count_flag = _finite(count_ratio) >= th.count_ratio
    weight_flag = heavier >= th.weight_ratio
    side = "input" if _finite(input_ratio) >= _finite(output_ratio) else "output"
    if count_flag and weight_flag and math.isfinite(count_share):
        # mixed: name the larger part, keep the other when it explains a real share too
        kind = Kind.COUNT if count_share >= weight_share else Kind.WEIGHT
        minor = min(count_share, weight_share)
        other = Kind.WEIGHT if kind == Kind.COUNT else Kind.COUNT
        secondary = other if minor >= th.mixed_share else None
    elif count_flag and not _finite(weight_share) > th.explain_share:
        kind = Kind.COUNT
    elif weight_flag and not _finite(count_share) > th.explain_share:
        kind = Kind.WEIGHT
    elif _finite(cap_ratio) >= (
        th.overloaded_capability_ratio if busy and equal_load else th.capability_ratio
    ):
        kind = Kind.CAPABILITY
    elif _finite(count_ratio) >= th.count_ratio:
        kind = Kind.COUNT
    elif math.isnan(count_ratio):
        kind = Kind.UNKNOWN  # hot, but the source has no per-unit request counts to tell why
    uses_weight = Kind.WEIGHT in (kind, secondary)
    return Classification(
        kind=kind,
        secondary_kind=secondary,
        weight_side=side if uses_weight else None,
        count_ratio=count_ratio,
        weight_ratio=weight_ratio,
        input_ratio=input_ratio,
        output_ratio=output_ratio,
        capability_ratio=cap_ratio,
        capability_basis=basis,
        count_share=count_share,
        weight_share=weight_share,
        capability_not_judged="overloaded" if busy and equal_load else "",
    )


def _finite(x: float) -> float:
    """NaN reads as 'no evidence', i.e. below every threshold."""
    return -math.inf if math.isnan(x) else x
