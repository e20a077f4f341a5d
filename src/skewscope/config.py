"""Thresholds and the root-cause table, defined once.

Scores are dimensionless ratios of a unit against the median of its peers in the same window;
a verdict is taken from the scores with these explicit thresholds (scoring is kept apart from
thresholding so the report can show how far from a threshold a unit was).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, fields

from skewscope.errors import UsageError
from skewscope.settings import (
    SOURCE_SETTINGS,
    Count,
    Draws,
    Floor,
    Fraction,
    Lag,
    Listed,
    Points,
    Positive,
    Probability,
    Ratio,
    Share,
    Whole,
    Width,
    override,
)


@dataclass(frozen=True)
class Thresholds:
    # Step 1: a unit is hot in a window when a load or pressure signal exceeds the peer median
    # by this ratio (and by the absolute floors below, so near-idle noise never counts).
    hot_ratio: Ratio = 1.3
    # Signals are smoothed with a centred rolling mean over this many windows before scoring:
    # Poisson noise of a few dozen requests per window alone crosses 1.3x a fifth of the time.
    smooth_windows: Width = 3
    # A unit is a *persistent* hot spot when it is hot in at least this share of active windows
    # and in a run of at least ``min_consecutive`` consecutive windows.
    persist_share: Share = 0.5
    min_consecutive: Count = 3
    # The alerts judge persistence over a horizon that fits paging, not the diagnosis' range:
    # a unit must be hot (starved) in ``persist_share`` of its last ``alert_windows`` windows,
    # that holding for ``alert_for_windows`` windows (the rules' default ``for``). The kind
    # is voted over the same horizon, so a fresh skew is neither diluted nor ``unknown``.
    alert_windows: Count = 4
    alert_for_windows: Count = 1
    # Over such a horizon chance must be ruled out window by window: in the alert rules a unit
    # is hot on a counted signal (requests, running, waiting) only when its excess over the
    # reference is at least this many Poisson sigmas of the reference's count. The diagnosis
    # rules it out over the range: a persistent hot unit driven by a counted signal (or tokens,
    # as the requests they are) must carry that excess summed over its judged windows, in
    # sigmas of the difference of two counts (``chance.beyond_chance``), or a near-idle fleet
    # judged all night draws hot ranks.
    hot_noise_sigmas: Positive = 3.0
    # A persistent hot unit must stay one with its hottest ``burst_s`` seconds left out
    # (``detect.outlasts_burst``): a burst of a minute or so on a rank already a little above
    # its sibling makes, with the queue it leaves and the smoothing, half of a range hot.
    burst_s: Positive = 90.0
    # A unit with less than this share of the peer median request rate is "starved"
    # (failed health check, missing from the pool, joined late).
    starved_ratio: Share = 0.15
    # A unit that still runs at least this share of its peers' batch is busy, not starved,
    # whatever its request log says.
    starved_busy_ratio: Share = 0.5
    # Absolute floors under the peer reference of the pressure signals (per window), so ordinary
    # queueing and near-idle noise never score: running and waiting requests, mean queue wait,
    # and busy time as a share of the window. The request floor is ``min_requests_per_window``.
    floor_running: Floor = 1.0
    floor_waiting: Floor = 2.0
    floor_queue_wait_ms: Floor = 100.0
    floor_busy_share: Fraction = 0.05
    # Step 2: classification dead bands.
    count_ratio: Ratio = 1.2  # requests per window, hot / reference
    weight_ratio: Ratio = 1.25  # tokens per request, hot / reference
    # Tokens per request of a reference unit that served fewer requests than this over the
    # judged windows are noise, not a weight to compare with (peers starved by a router that
    # sends everything to one unit keep a stray request or two): such units do not enter the
    # reference's tokens per request, and with none left the weight is not measured.
    weight_min_requests: Count = 20
    capability_ratio: Ratio = 1.3  # execution time per scheduled token (or TTFT at equal load)
    # An overloaded unit at equal arrivals (``classify.overloaded``: its latency is no capability
    # test) is judged by its execution time per scheduled token alone, which its larger batches
    # understate (they amortise the step's fixed cost): its bar is this lower one.
    overloaded_capability_ratio: Ratio = 1.2
    # A cause is named only when it explains at least this share of the excess token load.
    explain_share: Share = 0.5
    # In a mixed skew the smaller of the two parts (more / heavier requests) is named too, as
    # ``secondary_kind``, when it explains at least this share of the excess token load.
    mixed_share: Share = 0.25
    # When most of a group runs hot, its persistently under-loaded units become the reference
    # only while they are fewer than this share of the group (a strict minority): otherwise
    # "cold" is what the group normally looks like.
    cold_minority_share: Share = 0.5
    # Step 3/4: impact and resource-bound checks.
    impact_ratio: Ratio = 1.5  # hot/idle on queue wait, TTFT, tail latency, waiting
    # Absolute floors under the reference of each impact metric, so 2 ms against 1 ms of queue
    # wait is not "twice as bad" (also under the episode impact and compare's spread).
    impact_floor_queue_wait_p95_ms: Floor = 50.0
    impact_floor_queue_wait_mean_ms: Floor = 20.0
    impact_floor_ttft_p99_ms: Floor = 100.0
    impact_floor_ttft_mean_ms: Floor = 50.0
    impact_floor_e2e_p99_ms: Floor = 200.0
    impact_floor_waiting: Floor = 1.0
    impact_floor_step_time_ms: Floor = 5.0
    impact_floor_kv_usage: Fraction = 0.1
    # Severity: a finding is high when a tail (queue wait p95, TTFT p99, e2e p99) reaches this
    # multiple of its peers' (or on KV exhaustion, a stalled unit, peers with no requests).
    severe_tail_ratio: Ratio = 2.0
    # The hot unit's waiting queue "grows" when its least-squares slope exceeds this many
    # requests per window; a slope is fitted only over at least ``trend_min_points`` windows.
    queue_growth_per_window: Positive = 0.5
    trend_min_points: Points = 3
    kv_high: Share = 0.9  # KV usage at or above this is "near exhaustion"
    kv_free_low_share: Share = 0.05  # free blocks below this share of capacity
    alloc_over_free: Ratio = 1.1  # blocks allocated / freed above this = KV pool filling up
    # Minimum-volume gate: below these the service is too quiet to call imbalanced.
    min_requests_total: Count = 100
    min_requests_per_window: Positive = 2.0
    min_windows: Count = 6
    min_units: Points = 2
    # Stale load (analysis/stale.py): a group's units take turns carrying its load when, in
    # ``persist_share`` of the windows, one of them runs ``hot_ratio`` over its peers while each
    # unit's load is anti-correlated with the sum of its peers' at least this much (mean
    # correlation at or below minus this): a balancer moving load on late counts, not load added
    # (a burst on one unit, or a ramp for all, correlates them positively).
    stale_anticorrelation: Share = 0.3
    # ... and the unit's excess over its peers' median is at least this many Poisson sigmas
    # (sqrt of the median): counting noise alone never makes a swing.
    stale_noise_sigmas: Positive = 3.0
    # Trend rule (online): gap between the hot and the idle units widening while P95/P99 rises.
    trend_min_slope_share: Positive = 0.02  # per window, relative to the mean gap
    # Stalled engine: in a window it holds at least ``stalled_min_in_flight`` requests (mean
    # running + waiting) while its progress (steps executed, else finished requests) stays below
    # ``stalled_max_progress`` — nothing, whatever the window length (a saturated unit that
    # finishes a few requests per short window is slow, not stalled). Persistent by
    # ``persist_share``/``min_consecutive`` over the windows the unit reported, whatever the
    # service's volume: a hung engine is the worst hot unit, never "near-idle".
    stalled_min_in_flight: Positive = 4.0
    stalled_max_progress: Positive = 0.5
    # Saturation: a hot unit sits at its batch ceiling when its mean running stays within this
    # share of its own peak while at least ``saturated_min_waiting`` requests wait, in
    # ``persist_share`` of the judged windows; its request ratio then understates its traffic.
    saturated_running_share: Share = 0.9
    saturated_min_waiting: Positive = 1.0
    # Weight skew must be more than luck: a seeded permutation test reassigns the window cells
    # (tokens, requests) of the hot unit and its peers within each window; heavier requests with
    # a one-sided p-value at or above ``weight_p_value`` are "consistent with chance". The level
    # is strict because a unit is only tested after it was picked as persistently hot, which
    # already favours unlucky draws (Pareto prompts behind round robin: 2 of 12 seeds reach
    # p < 0.05; true weight skew in the built-in scenarios sits at the floor, 0.001).
    weight_p_value: Probability = 0.01
    permutations: Draws = 999
    permutation_seed: Whole = 20250423
    # Fleet-wide DP pattern: the same DP rank hot in at least this many instances and this
    # share of the multi-rank instances is one dispatch policy everywhere, reported once.
    fleet_pattern_min_instances: Count = 2
    # Prefill/decode imbalance (analysis/pools.py), per window over the pools' units: a pool is
    # *saturated* when its mean waiting per unit reaches ``pd_min_waiting`` or its KV usage
    # ``kv_high``, or (prefill) its mean running per unit is ``pd_running_ratio`` times decode's
    # (llm-d's LLMDPrefillDecodeImbalance: prefill/decode running > 3 for 10 m) while it queues;
    # the other pool *idles* when its waiting stays under ``pd_idle_waiting`` and its KV under
    # ``pd_idle_kv``. Persistent by ``persist_share``/``min_consecutive`` of the windows both
    # pools reported.
    pd_running_ratio: Ratio = 3.0
    pd_min_waiting: Positive = 1.0
    pd_idle_waiting: Floor = 0.5
    pd_idle_kv: Share = 0.5
    fleet_pattern_share: Share = 0.5
    # Is the device full (method step 4)? A device at or above this utilisation (DCGM /
    # npu-exporter, else the share of the window spent executing steps) is saturated; a hot
    # unit's device is "busier" than its peers' when it is ``capability_ratio`` times theirs
    # and at least ``device_busier_margin`` higher in absolute terms.
    device_saturated: Share = 0.8
    device_busier_margin: Fraction = 0.1
    # KV block shortage: running requests are "flat" when their least-squares slope per window
    # stays within this share of their mean (while the waiting queue grows).
    running_flat_share: Positive = 0.05
    # The per-unit table lists at most this many units; a larger fleet gets a summary instead
    # (units per role and min/median/p90/max of each column), the listed ones chosen by the
    # analysis: stalled, hot, starved first, then the highest load ratios.
    table_units_max: Listed = 20
    # compare: a signal has converged when no unit is hot_ratio or more from its peers (either
    # way); otherwise it improved (worse) when its log imbalance shrank (grew) by this share.
    compare_change: Share = 0.25
    # Gateway evidence (analysis/gateway.py). The router "sends more" to a unit when its
    # requests over the peers' median reach ``count_ratio``; a few keys "dominate" a hot unit
    # when its ``gateway_top_keys`` biggest keys carry at least ``gateway_key_share`` of its
    # excess over the peers' median; a unit the gateway kept out of rotation (unhealthy or
    # circuit open) for at least ``gateway_down_share`` of the range is reported as such.
    gateway_top_keys: Listed = 3
    gateway_key_share: Share = 0.5
    gateway_down_share: Share = 0.05
    # Stale load: a router that picks by a load figure it polls from the engines (power of two,
    # least loaded, cache/KV-aware fallbacks, endpoint-picker scorers) decides on stale load
    # when its view of a unit's queue differs from the queue the engine measured by at least
    # this share of the engine's mean queue (floored at ``floor_waiting``), on average over
    # the windows: its polling interval is longer than the bursts it should see. The report
    # notes it and by how many windows the router's view lags, tried up to
    # ``gateway_stale_max_lag`` windows.
    gateway_stale_load_gap: Positive = 0.5
    gateway_stale_max_lag: Lag = 3

    def as_dict(self) -> dict[str, float]:
        """The analysis' thresholds by name, as the report carries them."""
        return {f.name: getattr(self, f.name) for f in fields(self)}

    def overridden(self) -> tuple[str, ...]:
        """Names whose value differs from the default (set by ``--config``)."""
        return tuple(k for k, v in self.as_dict().items() if v != getattr(DEFAULT_THRESHOLDS, k))

    def updated(self, values: Mapping[str, object], where: str) -> Thresholds:
        """These thresholds with ``values`` set (``settings.override``: type and range of each),
        then checked against each other (``contradictions``); a source setting is pointed to
        its own table."""
        for key in values:
            if key in SOURCE_SETTINGS:
                raise UsageError(
                    f"{where} {key}: read by the sources, not the analysis; "
                    "set it in the [sources] table"
                )
        new = override(self, values, where, "threshold")
        for want, why in new.contradictions():
            key = next((k for k in values if k in want), next(iter(want)))  # file order
            raise UsageError(
                f"{where} {key}: expected {want[key]}, got {getattr(new, key)!r} ({why})"
            )
        return new

    def contradictions(self) -> list[tuple[dict[str, str], str]]:
        """Thresholds that contradict each other: for each pair, what either would have to be,
        and why. Every range of a single threshold is in its type (``settings.Range``)."""
        found = []
        for low, high, why in _ORDERED:
            a, b = getattr(self, low), getattr(self, high)
            if a > b:
                found.append(
                    ({low: f"at most {high} ({b:g})", high: f"at least {low} ({a:g})"}, why)
                )
        n, p = self.permutations, self.weight_p_value
        if p <= 1 / (n + 1):  # the smallest p-value the permutation test can give
            found.append(
                (
                    {
                        "weight_p_value": f"more than 1/(permutations + 1) = {1 / (n + 1):.3g}",
                        "permutations": f"more than 1/weight_p_value - 1 = {1 / p - 1:g}",
                    },
                    f"{n} permutations cannot give a p-value of {p:g} or less",
                )
            )
        return found

    @property
    def impact_floors(self) -> dict[str, float]:
        """Impact metric -> the floor under its reference, in report order."""
        return {
            "queue_wait_p95_ms": self.impact_floor_queue_wait_p95_ms,
            "queue_wait_mean_ms": self.impact_floor_queue_wait_mean_ms,
            "ttft_p99_ms": self.impact_floor_ttft_p99_ms,
            "ttft_mean_ms": self.impact_floor_ttft_mean_ms,
            "e2e_p99_ms": self.impact_floor_e2e_p99_ms,
            "waiting": self.impact_floor_waiting,
            "step_time_ms": self.impact_floor_step_time_ms,
            "kv_usage": self.impact_floor_kv_usage,
        }


# (lower, higher, why): thresholds that must keep this order.
_ORDERED: tuple[tuple[str, str, str], ...] = (
    ("min_consecutive", "min_windows", "a persistent run must fit in the windows judged"),
    ("impact_ratio", "severe_tail_ratio", "a severe tail is a worse impact than hurting"),
    ("mixed_share", "explain_share", "the secondary kind is the smaller part"),
    ("trend_min_points", "min_windows", "a trend is fitted within the windows judged"),
)
DEFAULT_THRESHOLDS = Thresholds()


@dataclass(frozen=True)
class WhatIfSettings:
    """Numbers of ``skewscope whatif`` (evidence-driven policy replay), once."""

    # A unit is out of the pool before its first / after its last request when its share of
    # the traffic would have brought at least this many requests in that time (a Poisson
    # count of 20 is 0 with probability 2e-9).
    absent_expected_requests: float = 20.0
    # Shares are "equal" (round-robin-like) when every unit is within this many binomial
    # standard deviations of 1/n.
    equal_share_z: float = 3.0
    # A unit is "slow" (a remove-the-slow-unit candidate) when its calibrated step time is at
    # least the diagnosis' capability ratio over the median unit (Thresholds.capability_ratio).
    # Calibration: a replayed metric within this relative error of the observed one is good...
    calibration_max_error: float = 0.25
    # ...or within these floors, so tiny waits do not differ by large ratios for no reason: a
    # latency within this many engine steps (the fitted fixed step time — relative to the
    # service, not a fixed 50 ms that hides +117 % on a 3 ms-step engine), a ratio within 0.1.
    calibration_floor_steps: float = 1.0
    calibration_floor_ratio: float = 0.1
    # Ranking (docs/whatif.md, Ranking): skew first, then tail latency. The current replay is
    # skewed when its persistent load spread reaches Thresholds.hot_ratio (held in
    # persist_share of the diagnosis' default windows). Then a candidate must cut the spread by
    # at least ``min_spread_gain`` (relative) without raising TTFT P99 by more than
    # ``ttft_tolerance``; the lowest TTFT P99 of those is recommended. A balanced run keeps
    # its routing unless a candidate cuts TTFT P99 by at least ``large_gain`` (and leaves the
    # spread under the hot ratio). Every candidate keeps throughput within
    # ``throughput_tolerance`` of the current replay.
    min_spread_gain: float = 0.1
    ttft_tolerance: float = 0.1
    large_gain: float = 0.5
    throughput_tolerance: float = 0.02
    # A placement is correlated with request length (whatif/correlation.py) when a unit's mean
    # log tokens per request is this many standard errors above its peers' (under any policy
    # that ignores lengths it is ~N(0, 1): 5 is never reached by chance).
    weight_correlation_z: float = 5.0
    # An unfinished request's output length is drawn from its unit's requests that arrived
    # before its first unfinished one (an uncensored sample) when there are this many.
    min_length_sample: int = 20
    # Error tables against ground truth (whatif/truth.py): a latency's relative error divides
    # by at least this (a queue wait shorter than a step is no percentage to bet on); a pick is
    # right when it is the truly best or within ``pick_margin`` of it.
    error_floor_ms: float = 10.0
    pick_margin: float = 0.05
    # KV blocks are 16 tokens unless told (the profiler does not record the block size).
    block_size: int = 16
    seed: int = 1


WHATIF = WhatIfSettings()
