"""Online source for what-if replays: the histograms a replay needs beyond the diagnosis' signals.

``diagnose`` reads per-window signals (``Evidence``); a replay also needs the *distributions*
the engines export: prompt and output length per request (to draw each replayed request's
lengths), inter-token latency (the step time of a decoding rank, to calibrate the service
model), and the fleet's TTFT and queue-time buckets (to compare the replay with what was seen
through the same buckets). Their metric names per dialect live here, once (``WORKLOAD_ALIASES``);
the diagnosis' alias tables are not touched, so rules, dashboards and watch are unchanged.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from skewscope.clock import SYSTEM_CLOCK, Clock
from skewscope.frame import Evidence, Level
from skewscope.sources.dialects import Alias, SignalSpec, unit_of
from skewscope.sources.validate import parse_bound

if TYPE_CHECKING:
    from skewscope.sources.scrape import ScrapeRun

Unit = tuple[str, int | None]  # (instance, DP rank or None: the instance as a whole)
Buckets = dict[float, float]  # upper bound (le) -> count observed over the range (not cumulative)

# role -> the histogram family per dialect (base name; the reader adds _bucket/_sum/_count).
# vLLM v1 (vllm/v1/metrics/loggers.py): request_prompt_tokens / request_generation_tokens are
# per finished request, inter_token_latency_seconds per decode token (a decoding rank's step
# time); ms-service-metric adds them unchanged. SGLang's tokenizer exports TTFT, ITL and
# e2e without a dp_rank label and per-rank queue time; its token histograms are off by default,
# so lengths fall back to the per-window token counters. MindIE: no length or ITL histograms.
_E = "engine"
_SG = Alias("sglang:inter_token_latency_seconds")
WORKLOAD_ALIASES: dict[str, dict[str, tuple[Alias, ...]]] = {
    "vllm": {
        "prompt_length": (Alias("vllm:request_prompt_tokens", _E),),
        "output_length": (Alias("vllm:request_generation_tokens", _E),),
        "itl": (Alias("vllm:inter_token_latency_seconds", _E),),
        "ttft": (Alias("vllm:time_to_first_token_seconds", _E),),
        "queue_time": (Alias("vllm:request_queue_time_seconds", _E),),
        "e2e": (Alias("vllm:e2e_request_latency_seconds", _E),),
        "iteration_tokens": (Alias("vllm:iteration_tokens_total", _E),),
    },
    "ms-service-metric": {
        "prompt_length": (
            Alias("vllm:request_prompt_tokens", _E),
            Alias("vllm_profiling_input", _E),
        ),
        "output_length": (
            Alias("vllm:request_generation_tokens", _E),
            Alias("vllm_profiling_output", _E),
        ),
        "itl": (Alias("vllm:inter_token_latency_seconds", _E),),
        "ttft": (Alias("vllm:time_to_first_token_seconds", _E),),
        "queue_time": (Alias("vllm:request_queue_time_seconds", _E),),
        "e2e": (Alias("vllm:e2e_request_latency_seconds", _E),),
        "iteration_tokens": (Alias("vllm:iteration_tokens_total", _E),),
    },
    "sglang": {
        "itl": (_SG,),
        "ttft": (Alias("sglang:time_to_first_token_seconds"),),
        "queue_time": (Alias("sglang:queue_time_seconds", "dp_rank"),),
        "e2e": (Alias("sglang:e2e_request_latency_seconds"),),
    },
    "mindie": {
        "ttft": (Alias("time_to_first_token_seconds"),),
    },
}
# The gauges of requests in the system, read at each window's end (``last`` over the window).
HELD = (SignalSpec("running_end", "running", "last"), SignalSpec("waiting_end", "waiting", "last"))
# Request counters that count a request when it leaves the queue, not when it finishes (SGLang's
# per-rank ``queue_time_seconds`` observations, read as per-rank requests by the DP level).
AT_START_COUNTERS = ("queue_time_seconds_count",)
SECONDS = frozenset({"itl", "ttft", "queue_time", "e2e"})  # histograms in seconds (as ms)
# The KV pool as configured, from an info gauge's labels: vLLM's cache_config_info carries
# ``num_gpu_blocks`` and ``block_size`` per engine (DP rank).
CACHE_CONFIG: dict[str, Alias] = {
    "vllm": Alias("vllm:cache_config_info", _E),
    "ms-service-metric": Alias("vllm:cache_config_info", _E),
}
KV_BLOCKS_LABEL, BLOCK_SIZE_LABEL = "num_gpu_blocks", "block_size"


@dataclass(frozen=True)
class WorkloadEvidence:
    """Evidence plus the histograms a replay needs.

    ``buckets``: role -> unit -> non-cumulative bucket counts over the whole range (a unit at
    the finest level the metric tells apart: (instance, rank) or (instance, None)).
    ``means``: role -> (window start, instance, rank) -> mean of the window (ms for times).
    ``dialect``: the dialect read. ``start_s``/``end_s``: the whole windows read.
    """

    evidence: Evidence
    dialect: str
    start_s: float
    end_s: float
    buckets: dict[str, dict[Unit, Buckets]] = field(default_factory=dict)
    means: dict[str, dict[tuple[float, str, int | None], float]] = field(default_factory=dict)
    notes: tuple[str, ...] = ()
    kv_config: dict[Unit, tuple[int, int]] = field(default_factory=dict)  # (blocks, block size)
    # (window start, instance, rank) -> requests in the system (running + waiting) at the
    # window's end: the last sample of each gauge, so arrivals follow from conservation
    held_at_end: dict[tuple[float, str, int | None], float] = field(default_factory=dict)
    waiting_at_end: dict[tuple[float, str, int | None], float] = field(default_factory=dict)


WindowKey = tuple[float, str, int | None]  # (window start, instance, rank)


def held_gauges(
    ev: Evidence, dialect: str, names: Iterable[str]
) -> tuple[Level, list[tuple[SignalSpec, Alias]]]:
    """The level the evidence reached and the running / waiting gauges present at it."""
    from skewscope.sources.dialects import get_dialect, resolve

    level = Level.DP if ev.dp is not None else Level.INSTANCE
    found = resolve(get_dialect(dialect), names, level)
    return level, [(spec, found[spec.role]) for spec in HELD if spec.role in found]


def add_held(
    spec: SignalSpec,
    ends: Iterable[tuple[WindowKey, float]],
    held: dict[WindowKey, float],
    waiting: dict[WindowKey, float],
) -> None:
    """Add one gauge's window-end values to requests in the system (and to the waiting ones)."""
    for key, v in ends:
        held[key] = held.get(key, 0.0) + v
        if spec.role == "waiting":
            waiting[key] = v


def counted_at_start(alias_text: str) -> bool:
    """Whether the requests signal (its provenance text) counts requests leaving the queue."""
    return any(c in alias_text for c in AT_START_COUNTERS)


def dialect_of(ev: Evidence) -> str:
    """The dialect the evidence was read with (its first note says so)."""
    for n in ev.notes:
        if n.startswith("dialect: "):
            return n.removeprefix("dialect: ").split(" ")[0]
    return ""


def present_alias(dialect: str, role: str, names: set[str]) -> Alias | None:
    """The first alias of ``role`` whose ``_bucket`` (or ``_sum``) samples are present."""
    from skewscope.sources.dialects import normalise_name

    for a in WORKLOAD_ALIASES.get(dialect, {}).get(role, ()):
        if normalise_name(a.name + "_bucket") in names or normalise_name(a.name + "_sum") in names:
            return a
    return None


def kv_config_of(
    alias: Alias, label_sets: Sequence[Mapping[str, str]]
) -> dict[Unit, tuple[int, int]]:
    """Per unit (blocks, block size) from cache-config info series' labels (the last wins);
    series without whole-number labels are skipped."""
    out: dict[Unit, tuple[int, int]] = {}
    for labels in label_sets:
        unit = unit_of(alias, labels, level_of(alias))
        blocks, size = labels.get(KV_BLOCKS_LABEL, ""), labels.get(BLOCK_SIZE_LABEL, "")
        if unit is not None and blocks.isdigit() and size.isdigit() and int(blocks) > 0:
            out[unit] = (int(blocks), max(int(size), 1))
    return out


def decumulate(cumulative: Mapping[float, float]) -> Buckets:
    """Cumulative ``le`` counts -> counts per bucket (a negative step, from counter resets
    landing differently on different buckets, is read as 0)."""
    out: Buckets = {}
    prev = 0.0
    for le in sorted(cumulative):
        c = cumulative[le]
        out[le] = max(c - prev, 0.0)
        prev = max(prev, c)
    return out


def level_of(alias: Alias) -> Level:
    return Level.DP if alias.per_rank else Level.INSTANCE


def matrix_buckets(result: Sequence[Any], alias: Alias) -> dict[Unit, Buckets]:
    """A range matrix of ``sum by (unit, le) (increase(X_bucket[w]))`` -> per unit, the
    bucket counts summed over the windows (non-cumulative)."""
    cum: dict[Unit, dict[float, float]] = defaultdict(lambda: defaultdict(float))
    for series in result:
        labels = series.get("metric", {}) if isinstance(series, dict) else {}
        unit = unit_of(alias, labels, level_of(alias))
        le = parse_bound(str(labels.get("le", "")))
        if unit is None or le is None:
            continue
        for _, v in series.get("values", []):
            x = float(v)
            if math.isfinite(x):
                cum[unit][le] += x
    return {u: decumulate(c) for u, c in cum.items()}


def add_buckets(parts: Sequence[Buckets]) -> Buckets:
    out: Buckets = defaultdict(float)
    for p in parts:
        for le, c in p.items():
            out[le] += c
    return dict(out)


def histogram_quantile(q: float, buckets: Buckets) -> float | None:
    """Prometheus' ``histogram_quantile`` on non-cumulative counts: linear inside the bucket,
    the highest finite bound when the rank falls in +Inf; None without observations."""
    total = sum(buckets.values())
    if total <= 0:
        return None
    rank = q * total
    lo, seen = 0.0, 0.0
    finite = [b for b in sorted(buckets) if math.isfinite(b)]
    for le in sorted(buckets):
        c = buckets[le]
        if seen + c >= rank and c > 0:
            if not math.isfinite(le):
                return finite[-1] if finite else None
            return lo + (le - lo) * (rank - seen) / c
        seen += c
        lo = le if math.isfinite(le) else lo
    return finite[-1] if finite else None


def through_buckets(values: Sequence[float], bounds: Sequence[float]) -> Buckets:
    """Count ``values`` into the buckets ``bounds`` (upper bounds, +Inf included), so a replay
    is read through the same histogram as the evidence it is compared with."""
    import numpy as np

    les = sorted(bounds)
    if not les or math.isfinite(les[-1]):
        les.append(math.inf)
    idx = np.searchsorted(np.asarray(les), np.asarray(values, dtype=float), side="left")
    counts = np.bincount(idx, minlength=len(les))[: len(les)]
    return {le: float(c) for le, c in zip(les, counts, strict=True)}


def _by(alias: Alias) -> str:
    from skewscope.sources.promql import check_label_name

    inst = check_label_name(alias.unit_label or "instance")
    return f"{inst}, {check_label_name(alias.dp_label)}" if alias.dp_label else inst


def load_prometheus_workload(
    ev: Evidence,
    url: str,
    *,
    start: float,
    end: float,
    selector: str = "",
    auth: Any = None,
    timeout_s: float = 30.0,
) -> WorkloadEvidence:
    """The histograms of ``WORKLOAD_ALIASES`` for the windows ``ev`` was read over: per unit
    bucket counts over the range, and per-window means of the inter-token latency."""
    from skewscope.sources.dialects import normalise_name
    from skewscope.sources.prom_client import PromClient
    from skewscope.sources.prom_matrix import matrix_to_values, plan_windows
    from skewscope.sources.promql import (
        build_query,
        duration,
        normalise_selector,
        read_once,
        series_selector,
    )

    w = ev.instance.window_s
    first_t, last_t, _ = plan_windows(start, end, w)
    sel = normalise_selector(selector)
    dialect = dialect_of(ev)
    client = PromClient(url, auth=auth, timeout_s=timeout_s)
    buckets: dict[str, dict[Unit, Buckets]] = {}
    means: dict[str, dict[tuple[float, str, int | None], float]] = {}
    try:
        names = {normalise_name(n) for n in client.metric_names(start, end, sel)}
        for role in (
            "prompt_length",
            "output_length",
            "ttft",
            "queue_time",
            "e2e",
            "itl",
            "iteration_tokens",
        ):
            alias = present_alias(dialect, role, names)
            if alias is None:
                continue
            by, wd = _by(alias), duration(w)
            bsel = series_selector(alias.name + "_bucket", alias, sel)
            q = f"sum by ({by}, le) ({read_once(f'increase({bsel}[{wd}])', alias)})"
            got = matrix_buckets(client.query_range(q, first_t, last_t, w), alias)
            if got:
                buckets[role] = got
            if role == "itl":
                s_sel = series_selector(alias.name + "_sum", alias, sel)
                c_sel = series_selector(alias.name + "_count", alias, sel)
                q = (
                    f"1000 * sum by ({by}) ({read_once(f'increase({s_sel}[{wd}])', alias)}) / "
                    f"sum by ({by}) ({read_once(f'increase({c_sel}[{wd}])', alias)})"
                )
                bad: list[str] = []
                means[role] = matrix_to_values(
                    client.query_range(q, first_t, last_t, w),
                    window_s=w,
                    alias=alias,
                    level=level_of(alias),
                    bad=bad,
                    where=client.where,
                )
        held: dict[WindowKey, float] = {}
        waiting: dict[WindowKey, float] = {}
        level, gauges = held_gauges(ev, dialect, names)
        for spec, alias in gauges:
            gauge = build_query(spec, alias, level=level, window_s=w, selector=sel)
            if gauge is None:
                continue
            ends = matrix_to_values(
                client.query_range(gauge, first_t, last_t, w),
                window_s=w,
                alias=alias,
                level=level,
                bad=[],
                where=client.where,
            )
            add_held(spec, ends.items(), held, waiting)
        kv: dict[Unit, tuple[int, int]] = {}
        info = CACHE_CONFIG.get(dialect)
        if info is not None and normalise_name(info.name) in names:
            kv = kv_config_of(
                info, client.series(series_selector(info.name, info, sel), start, end)
            )
    finally:
        client.close()
    return WorkloadEvidence(
        ev,
        dialect,
        first_t - w,
        last_t,
        buckets,
        means,
        kv_config=kv,
        held_at_end=held,
        waiting_at_end=waiting,
    )


def load_scrape_workload(
    urls: Sequence[str],
    *,
    duration_s: float,
    interval_s: float,
    dialect: str | None = None,
    auth: Any = None,
    timeout_s: float | None = None,
    progress: bool = True,
    clock: Clock = SYSTEM_CLOCK,
) -> WorkloadEvidence:
    """Scrape ``urls`` (as ``load_scrape``, on ``clock``) and read the replay's histograms
    from the same scrapes."""
    from skewscope.sources.scrape import scrape_targets

    run = scrape_targets(
        urls,
        duration_s=duration_s,
        interval_s=interval_s,
        progress=progress,
        auth=auth,
        timeout_s=timeout_s,
        clock=clock,
    )
    return scrape_workload(run, dialect)


def scrape_workload(run: ScrapeRun, dialect: str | None = None) -> WorkloadEvidence:
    """Evidence and the replay's histograms from whole windows of scrapes: bucket increases
    per unit over the run, inter-token latency means and requests in the system per window."""
    from skewscope.sources.dialects import normalise_name
    from skewscope.sources.scrape import evidence_from_targets, instance_of
    from skewscope.sources.scrape_series import bucket_increases, signal_values
    from skewscope.sources.scrape_windows import counter_increases

    ev = evidence_from_targets(
        run.snaps,
        t0=run.t0,
        window_s=run.window_s,
        n_windows=run.n_windows,
        dialect=dialect,
        notes=run.notes,
    )
    chosen = dialect_of(ev)
    by_inst = {instance_of(u): snaps for u, snaps in run.snaps.items()}
    names = {
        normalise_name(s[0])
        for snaps in by_inst.values()
        for snap in snaps
        for s in snap.samples or ()
    }
    w = run.window_s
    buckets: dict[str, dict[Unit, Buckets]] = {}
    means: dict[str, dict[tuple[float, str, int | None], float]] = {}
    bad: list[str] = []
    for role in (
        "prompt_length",
        "output_length",
        "ttft",
        "queue_time",
        "e2e",
        "itl",
        "iteration_tokens",
    ):
        alias = present_alias(chosen, role, names)
        if alias is None:
            continue
        level = level_of(alias)
        cum: dict[Unit, dict[float, float]] = defaultdict(lambda: defaultdict(float))
        for inst, snaps in by_inst.items():
            lost = [s.t for s in snaps if s.samples is None]
            inc = lambda pts, lost=lost: counter_increases(pts, 0.0, w, lost)  # noqa: E731
            for ((named, dp), k), per_le in bucket_increases(alias, snaps, level, inc, bad).items():
                if k < run.n_windows:
                    for le, c in per_le.items():
                        cum[(named or inst, dp)][le] += c
            if role == "itl":
                spec = SignalSpec("itl_mean_ms", "itl", "mean")
                for ((named, dp), k), v in signal_values(spec, alias, snaps, level, w, bad).items():
                    if k < run.n_windows and math.isfinite(v):
                        key = (round(run.t0 + k * w, 6), named or inst, dp)
                        means.setdefault(role, {})[key] = v
        if cum:
            buckets[role] = {u: decumulate(c) for u, c in cum.items()}
    held: dict[WindowKey, float] = {}
    waiting: dict[WindowKey, float] = {}
    level, gauges = held_gauges(ev, chosen, names)
    for spec, alias in gauges:
        for inst, snaps in by_inst.items():
            add_held(
                spec,
                (
                    ((round(run.t0 + k * w, 6), named or inst, dp), v)
                    for ((named, dp), k), v in signal_values(
                        spec, alias, snaps, level, w, bad
                    ).items()
                    if k < run.n_windows and math.isfinite(v)
                ),
                held,
                waiting,
            )
    kv: dict[Unit, tuple[int, int]] = {}
    info = CACHE_CONFIG.get(chosen)
    if info is not None:
        for inst, snaps in by_inst.items():
            last = next((s.samples for s in reversed(snaps) if s.samples is not None), ())
            sets = [
                dict(labels) | {"instance": inst}
                for name, labels, _ in last
                if normalise_name(name) == normalise_name(info.name)
            ]
            kv.update(kv_config_of(info, sets))
    return WorkloadEvidence(
        ev,
        chosen,
        run.t0,
        run.t0 + run.n_windows * w,
        buckets,
        means,
        kv_config=kv,
        held_at_end=held,
        waiting_at_end=waiting,
    )
