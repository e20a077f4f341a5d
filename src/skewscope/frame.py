"""UnitFrame: the one table every source produces and the analysis reads; the window policy.

A row per (time window, unit). Signals are totals or summaries *within the window*, with their
unit in the name. A signal a source cannot provide is null (missing), never 0: the analysis
abstains on missing signals instead of reading them as "idle".
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from skewscope.catalogue import Level as Level  # re-exported for the sources

if TYPE_CHECKING:  # polars import is slow; keep --help fast
    import polars as pl


# Canonical signals: name -> (meaning, how to combine DP rows into an instance row).
# "sum": add across ranks; "mean": average across ranks; "max": worst rank (tail estimates);
# "min": lowest rank (free capacity).
SIGNALS: dict[str, tuple[str, str]] = {
    "requests": ("requests that arrived (offline) or finished (online) in the window", "sum"),
    "prompt_tokens": ("input tokens of those requests", "sum"),
    "generation_tokens": ("output tokens of those requests", "sum"),
    "running": ("mean running requests (decode batch occupancy)", "sum"),
    "waiting": ("mean waiting (queued) requests", "sum"),
    "queue_wait_mean_ms": ("mean queue wait of requests in the window", "mean"),
    "queue_wait_p95_ms": ("p95 queue wait", "max"),
    "ttft_mean_ms": ("mean time to first token", "mean"),
    "ttft_p99_ms": ("p99 time to first token", "max"),
    "e2e_mean_ms": ("mean end-to-end latency", "mean"),
    "e2e_p99_ms": ("p99 end-to-end latency", "max"),
    "steps": ("scheduling steps (iterations) executed", "sum"),
    "batch_size": ("mean sequences per step", "mean"),
    "scheduled_tokens": ("tokens scheduled over all steps", "sum"),
    "busy_ms": ("time spent executing steps", "sum"),
    "kv_usage": ("mean KV-cache usage, fraction 0..1", "mean"),
    "kv_usage_max": ("peak KV-cache usage, fraction 0..1", "max"),
    "free_blocks_min": ("lowest free KV blocks seen", "min"),
    "blocks_allocated": ("KV blocks allocated", "sum"),
    "blocks_freed": ("KV blocks freed", "sum"),
    "preemptions": ("requests preempted or retracted", "sum"),
    # from device exporters joined to the unit (DCGM, npu-exporter), mean over its devices
    "device_util": ("mean device utilisation, fraction 0..1", "mean"),
    "device_mem_mb": ("device memory used (MiB), summed over the unit's devices", "sum"),
}
SIGNAL_COLUMNS: tuple[str, ...] = tuple(SIGNALS)

# Percentiles a source estimates from histogram buckets can be only *bounded*: when the rank
# lands exactly on a bucket's upper bound, or in the +Inf bucket (PromQL then answers the
# highest finite bound), the number is a bucket bound, not a measurement. Such a source fills the
# companion column ``<signal>_bound`` (``bound_column``) of these signals:
#   null          exact, or interpolated inside a bucket (an estimate, but not a bound);
#   BOUND_UPPER   the value is a bucket's upper bound, the true percentile is at most it ("< v");
#   BOUND_LOWER   the rank fell in the +Inf bucket: the true percentile is above it ("> v").
# The analysis never forms a ratio from a bounded value and carries the mark to the Report.
PERCENTILE_SIGNALS: tuple[str, ...] = ("queue_wait_p95_ms", "ttft_p99_ms", "e2e_p99_ms")
BOUND_UPPER = 1.0
BOUND_LOWER = -1.0


def bound_column(signal: str) -> str:
    """Name of the companion bound column of a percentile signal."""
    return f"{signal}_bound"


BOUND_COLUMNS: tuple[str, ...] = tuple(bound_column(s) for s in PERCENTILE_SIGNALS)

# Totals within a window: where a unit's source is present but saw no event, the value is 0
# (a starved unit), not missing.
TOTAL_SIGNALS: frozenset[str] = frozenset(
    {
        "requests",
        "prompt_tokens",
        "generation_tokens",
        "steps",
        "scheduled_tokens",
        "busy_ms",
        "blocks_allocated",
        "blocks_freed",
    }
)


def dp_unit_id(instance: str, dp_rank: int) -> str:
    """Unit id of a DP rank; the JSON contract spells it ``<instance>/dp<rank>``."""
    return f"{instance}/dp{dp_rank}"


@dataclass(frozen=True)
class UnitFrame:
    """A tidy (window x unit) table plus where it came from and what it lacks."""

    df: pl.DataFrame
    level: Level
    window_s: float
    source: str  # "profiler", "prometheus", "scrape"
    aliases: dict[str, str] = field(default_factory=dict)  # signal -> metric/column name found
    missing: tuple[str, ...] = ()  # signals or files the source could not provide
    notes: tuple[str, ...] = ()  # warnings for the report (partial data, dropped rows, ...)
    placed_share: float | None = None  # share of requests placed on a DP rank (offline DP level)
    # DP level, offline: each rank's load per forward iteration (instance, dp_rank, step,
    # start_s, load, step_ms; sources/profiler_forward.py), for the per-step price of DP skew
    step_loads: pl.DataFrame | None = None
    # DP level: do the ranks step in lockstep (every rank joins each step's collective: MoE
    # expert parallelism, DP attention)? None: not known — engine metrics do not say; the user
    # does (diagnose --lockstep yes|no). Decides what the price of DP skew means.
    lockstep: bool | None = None

    @property
    def units(self) -> list[str]:
        return sorted(self.df["unit"].unique().to_list())


@dataclass(frozen=True)
class GatewayUnit:
    """What the gateway did with one upstream over the analysed range.

    ``upstream`` is the gateway's name for it, normalised to ``host:port`` (the same spelling
    as an engine's Prometheus ``instance`` label, which is how the analysis joins the two).
    A share the source cannot tell is NaN; ``keys`` is empty when no client/session key was
    logged."""

    upstream: str
    requests: float  # requests the gateway sent to it
    in_pool: bool = True  # listed in the gateway's worker list (or seen in its log)
    unhealthy_share: float = math.nan  # share of the range it was marked unhealthy
    breaker_open_share: float = math.nan  # share of the range its circuit breaker was open
    request_bytes: float = math.nan  # mean request size in bytes
    keys: tuple[tuple[str, float], ...] = ()  # top client/session keys: (key, requests)
    distinct_keys: int = 0
    # Per window of ``GatewayEvidence.window_starts`` (empty: the source has no time series):
    # requests sent to it, and the load the router believed it had (its polled queue: NaN where
    # the router exports none).
    series: tuple[float, ...] = ()
    load_series: tuple[float, ...] = ()


@dataclass(frozen=True)
class GatewayEvidence:
    """Gateway evidence, carried beside the engine evidence: which upstream the router or
    HTTP gateway sent each request to, its health view and its policy."""

    source: str  # catalogue.GatewaySource
    units: tuple[GatewayUnit, ...]
    policy: str | None = None  # catalogue.POLICY_CLASS key, when the source names it
    key_name: str | None = None  # what the per-key counts are keyed by (header, client address)
    notes: tuple[str, ...] = ()
    window_starts: tuple[float, ...] = ()  # the windows of the units' series (engines' grid)
    # Pool-wide figures the router exports (endpoint pickers: ready endpoints, average KV
    # utilisation and queue), by name: read at the range end / averaged over it.
    pool: tuple[tuple[str, float], ...] = ()
    # The units' ``load_series`` is the engines' queue as the router polled it (an endpoint
    # picker), not the router's own count of its in-flight requests.
    load_polled: bool = False


@dataclass(frozen=True)
class Evidence:
    """What a source loaded: the instance-level frame and, where ranks are known, the DP frame;
    ``gateway`` what the gateway in front of the units decided, when a gateway source was read."""

    instance: UnitFrame
    dp: UnitFrame | None = None
    notes: tuple[str, ...] = ()
    gateway: GatewayEvidence | None = None


def upstream_key(address: str) -> str:
    """``http://10.0.0.1:8000/metrics`` and ``10.0.0.1:8000`` -> ``10.0.0.1:8000``: the one
    spelling of a unit's address that gateway and engine evidence are joined on. A DP-aware
    router's worker ``http://10.0.0.1:8000@2`` keeps its rank: ``10.0.0.1:8000@2``; a
    ``user:password@`` before the host is dropped (it is a credential, not a name)."""
    a = address.strip()
    if "://" in a:
        a = a.split("://", 1)[1]
    a = a.split("/", 1)[0].lower()
    _, sep, rest = a.partition("@")
    if sep and not rest.isdigit():  # user:password@host: never part of a unit's name
        a = rest
    return a


def split_rank(upstream: str) -> tuple[str, int | None]:
    """``host:port@2`` -> (``host:port``, 2); an upstream without a rank -> (it, None)."""
    base, sep, rank = upstream.rpartition("@")
    return (base, int(rank)) if sep and base and rank.isdigit() else (upstream, None)


def empty_schema() -> dict[str, object]:
    """Polars schema of a UnitFrame; sources build their output against it."""
    import polars as pl

    schema: dict[str, object] = {
        "window_start_s": pl.Float64,
        "unit": pl.Utf8,
        "instance": pl.Utf8,
        "dp_rank": pl.Int64,
        # the unit's pool in a prefill/decode disaggregated fleet ("prefill", "decode", or a
        # name --role-label's values give); null: one pool (aggregated serving). Units of
        # different pools are never each other's peers (``sources/pools.py``).
        "pool": pl.Utf8,
    }
    schema.update({name: pl.Float64 for name in (*SIGNAL_COLUMNS, *BOUND_COLUMNS)})
    return schema


def conform(df: pl.DataFrame) -> pl.DataFrame:
    """Add absent signal (and bound) columns as null; cast to the canonical schema and order."""
    import polars as pl

    schema = empty_schema()
    cols = []
    for name, dtype in schema.items():
        if name in df.columns:
            cols.append(pl.col(name).cast(dtype))  # type: ignore[arg-type]
        else:
            cols.append(pl.lit(None, dtype=dtype).alias(name))  # type: ignore[arg-type]
    return df.select(cols).sort("window_start_s", "unit")


@dataclass(frozen=True)
class WindowPolicy:
    """How every source picks its windows when the user gives no ``--window``/``--step``.

    A source's business, not the analysis': the analysis judges whatever windows it is given
    (``Thresholds.min_windows`` only gates how few it accepts).
    """

    # Aim for this many windows (enough to judge persistence), never shorter than
    # ``min_window_s`` (a few requests per window at least).
    target_windows: int = 24
    min_window_s: float = 5.0
    # Most windows any source builds: Prometheus refuses query_range with more points per
    # series, and offline a grid this long (times units and signals) is already hundreds of MB.
    max_windows: int = 11_000

    def choose(self, span_s: float) -> float:
        """Default window over ``span_s``: the span / ``target_windows``, at least
        ``min_window_s``, rounded up to a readable size (1, 2, 5, 10, 15, 20, 30 s, 1 m ...) so
        reports and PromQL steps look sane."""
        raw = max(self.min_window_s, span_s / max(self.target_windows, 1))
        for nice in (1, 2, 5, 10, 15, 20, 30, 60, 120, 300, 600, 900, 1800, 3600):
            if nice >= raw:
                return float(nice)
        return float(int(raw))


WINDOWS = WindowPolicy()
