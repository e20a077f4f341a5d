"""The shared vocabulary: every name a source, the analysis, the report and the simulator agree
on, defined once.

This module is neutral ground: it imports nothing from skewscope, so every layer may read it
without the layers depending on each other.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum


class Level(StrEnum):
    """Where units live: instances behind a gateway, or DP ranks inside one instance."""

    INSTANCE = "instance"
    DP = "dp"


class Verdict(StrEnum):
    IMBALANCED = "imbalanced"
    BALANCED = "balanced"
    INSUFFICIENT_DATA = "insufficient_data"


class Kind(StrEnum):
    """Why a unit is hot (method step 2)."""

    COUNT = "count"
    WEIGHT = "weight"
    CAPABILITY = "capability"
    UNKNOWN = "unknown"
    STALLED = "stalled"  # holds requests, finishes none: not a skew kind, the worst hot unit
    KV_SHORTAGE = "kv_shortage"  # a hot unit out of KV blocks (method step 4 drill-down)
    # prefill/decode disaggregation: one pool saturated while the other idles (not a unit's skew)
    PD_IMBALANCE = "pd_imbalance"
    # a group's units take turns carrying its load: a balancer deciding on late counts
    # (analysis/stale.py); not one unit's skew, and none of its units is a hot spot
    STALE_LOAD = "stale_load"
    # a unit that stopped reporting while it was hot (analysis/presence.py): never "balanced"
    LOST = "lost"
    # a unit persistently served far less than its peers: what monitoring names it (watch's
    # incidents, SkewscopeStarvedUnit); the finding about such units says count (fewer requests)
    STARVED = "starved"


# The pools of a prefill/decode disaggregated fleet (UnitFrame ``pool``; sources/pools.py maps
# the stacks' label values onto them). A pool of another name (``--role-label`` values) is
# judged on its own too, but only these two are compared with each other.
PREFILL, DECODE = "prefill", "decode"


def kind_title(kind: str) -> str:
    """How a finding's kind reads in titles: "count skew", ... but "stalled engine" and
    "KV block shortage" (not skew kinds)."""
    if kind == Kind.STALLED:
        return "stalled engine"
    if kind == Kind.PD_IMBALANCE:
        return "prefill/decode imbalance"
    if kind == Kind.STALE_LOAD:
        return "stale-load pattern"
    if kind == Kind.LOST:
        return "unit lost while hot"
    return "KV block shortage" if kind == Kind.KV_SHORTAGE else f"{kind} skew"


class HeldBack(StrEnum):
    """Why a unit hot often and long enough is still no persistent hot spot
    (``analysis.detect``; the transient note words it)."""

    NONE = ""
    CHANCE = "chance"  # its excess over the range is within chance (``beyond_chance``)
    BURST = "burst"  # one burst made it hot (``outlasts_burst``)


class Cause(StrEnum):
    """A root cause a finding names, most likely first (its ``root_causes``; the JSON report's
    ``root_causes[].key``). The analysis ranks these keys; ``report/causes.py`` words them."""

    ROUTING_WEIGHTS = "routing_weights"
    HEALTH_CHECK = "health_check"
    STICKY_SESSIONS = "sticky_sessions"
    PREFIX_AFFINITY = "prefix_affinity"
    UNIT_LOST = "unit_lost"
    STALE_LOAD = "stale_load"
    DP_DISPATCH = "dp_dispatch"
    LONG_REQUESTS = "long_requests"
    CAPABILITY_MISMATCH = "capability_mismatch"
    PD_RATIO = "pd_ratio"
    ENGINE_STALLED = "engine_stalled"
    DEVICE_OR_PROCESS = "device_or_process"
    SCHEDULER_BOUND = "scheduler_bound"
    KV_SHORTAGE = "kv_shortage"
    KV_EXHAUSTION = "kv_exhaustion"


class KvRole(StrEnum):
    """What KV exhaustion on a hot unit is to its ranking (``analysis.causes.rank``): the cause
    to act on first (the unit cannot admit its work: throttle first), a consequence of the
    other causes (ranked last), or not there."""

    ADMISSION = "admission"
    CONSEQUENCE = "consequence"
    NONE = ""


class Severity(StrEnum):
    HIGH = "high"
    MEDIUM = "medium"
    LOW = "low"


class CompareVerdict(StrEnum):
    """Did a fix converge? ``skewscope compare BEFORE AFTER``, per signal and overall."""

    CONVERGED = "converged"
    IMPROVED = "improved"
    UNCHANGED = "unchanged"
    WORSE = "worse"


class FailOn(StrEnum):
    """``--fail-on``: which outcome gives the gate exit code (errors.GATE_EXIT_CODE)."""

    IMBALANCED = "imbalanced"
    WORSE = "worse"


class Role(StrEnum):
    """A unit's place in the report: hot, stalled (holds requests, finishes none), starved
    (almost no traffic) or normal."""

    HOT = "hot"
    STALLED = "stalled"
    STARVED = "starved"
    NORMAL = "normal"


class Dialect(StrEnum):
    """Online metric dialects (engine exporters)."""

    VLLM = "vllm"
    SGLANG = "sglang"
    MINDIE = "mindie"
    MS_SERVICE_METRIC = "ms-service-metric"
    DYNAMO = "dynamo"  # NVIDIA Dynamo: per-worker series (worker_id)
    LLM_D = "llm-d"  # llm-d endpoint picker: per-endpoint queue (engines not scraped)


# The dialects the simulator can write (sim/writers/exposition.py).
SIMULATED_DIALECTS: tuple[str, ...] = (
    Dialect.VLLM,
    Dialect.SGLANG,
    Dialect.MINDIE,
    Dialect.MS_SERVICE_METRIC,
    Dialect.DYNAMO,
    Dialect.LLM_D,
)
# Device exporters the simulator can write next to an engine dialect (sim/writers/specs_devices.py;
# read by sources/device_exporters.py DEVICE_EXPORTERS under the same names).
SIMULATED_DEVICE_EXPORTERS: tuple[str, ...] = ("dcgm", "npu-exporter")


class LiveClock(StrEnum):
    """How the simulator's live servers (``simulate --serve``, sim/writers/live.py) move
    simulated time: with the wall clock (at ``--speed``), one step per scrape of an instance,
    or only when told (``POST /sim/advance``, ``LiveCluster.advance``)."""

    WALL = "wall"
    SCRAPE = "scrape"
    MANUAL = "manual"


class MetricType(StrEnum):
    """A Prometheus metric family's type (the exposition's ``# TYPE``): how a role's series
    are read (sources/dialects.py) and written (sim/writers/metric_specs.py and its tables)."""

    COUNTER = "counter"
    GAUGE = "gauge"
    HISTOGRAM = "histogram"


class Generation(StrEnum):
    """msServiceProfiler CSV header generations."""

    CURRENT = "current"
    DEC2025 = "dec2025"
    CANN2025 = "cann2025"
    MINDIE = "mindie"


# How a percentile that rests on a histogram bucket bound is printed (UnitReport.bounds):
# "upper" = the truth is at most the value, "lower" = above it (+Inf bucket), "mixed" = both.
BOUND_PREFIX: dict[str, str] = {"upper": "< ", "lower": "> ", "mixed": "~"}


@dataclass(frozen=True)
class Metric:
    """A per-unit summary metric: its key in UnitReport.metrics, label and unit."""

    key: str
    label: str
    unit: str
    short: str = ""  # column header in the compact per-unit table


# The catalogue of summary metrics, in report order. The analysis computes these keys; the
# renderers take labels, units and short names from here.
METRICS: tuple[Metric, ...] = (
    Metric("requests_per_s", "request rate", "req/s", "req/s"),
    Metric("prompt_tokens_per_request", "input tokens / request", "tok", "in tok/req"),
    Metric("generation_tokens_per_request", "output tokens / request", "tok", "out tok/req"),
    Metric("tokens_per_s", "token rate", "tok/s"),
    Metric("batch_size", "batch size (mean)", "seq"),
    Metric("scheduled_tokens_per_s", "scheduled token rate", "tok/s"),
    Metric("step_time_ms", "batch execution time", "ms", "step ms"),
    Metric("cost_us_per_token", "execution time / scheduled token", "µs"),
    Metric("running", "running requests (mean)", "req", "running"),
    Metric("waiting", "waiting requests (mean)", "req", "waiting"),
    Metric("queue_wait_mean_ms", "queue wait (mean)", "ms"),
    Metric("queue_wait_p95_ms", "queue wait p95", "ms", "queue p95 ms"),
    Metric("ttft_mean_ms", "TTFT (mean)", "ms"),
    Metric("ttft_p99_ms", "TTFT p99", "ms", "TTFT p99 ms"),
    Metric("e2e_mean_ms", "end-to-end latency (mean)", "ms"),
    Metric("e2e_p99_ms", "end-to-end latency p99", "ms", "e2e p99 ms"),
    Metric("kv_usage", "KV usage (mean)", "frac", "KV mean"),
    Metric("kv_usage_max", "KV usage (peak)", "frac", "KV peak"),
    Metric("free_blocks_min", "free KV blocks (lowest)", "blocks"),
    Metric("alloc_free_ratio", "KV blocks allocated / freed", "x"),
    Metric("preemptions", "preemptions", "req"),
    Metric("device_util", "device utilisation (mean)", "frac"),
    Metric("busy_share", "share of time executing steps", "frac"),
)
METRIC_BY_KEY: dict[str, Metric] = {m.key: m for m in METRICS}


# Columns of the compact per-unit table, in order (each has a short name above).
UNIT_COLUMNS: tuple[str, ...] = (
    "requests_per_s",
    "prompt_tokens_per_request",
    "generation_tokens_per_request",
    "running",
    "waiting",
    "queue_wait_p95_ms",
    "ttft_p99_ms",
    "e2e_p99_ms",
    "step_time_ms",
    "kv_usage",
    "kv_usage_max",
)

# Step 1's heat signals, in report order: the keys of a unit's ``load_ratios``. The first two
# are load (what a balancer distributes); the rest are pressure (analysis/detect.py says why).
LOAD_SIGNALS: tuple[str, ...] = ("requests", "total_tokens")
HEAT_SIGNALS: tuple[str, ...] = (
    *LOAD_SIGNALS,
    "busy_ms",
    "running",
    "waiting",
    "queue_wait_mean_ms",
)
# Heat signals that count requests (per smoothing span, or in the batch / queue): their chance
# spread between units is Poisson, so an excess over the reference counts only beyond
# ``Thresholds.hot_noise_sigmas`` of it (analysis/detect.py: sigmas of the difference, the
# reference as noisy as the median it is; the alert rules, per window: of the reference).
COUNTED_SIGNALS: tuple[str, ...] = ("requests", "running", "waiting")

# Per-window series the report carries for each unit (the HTML report draws them; compare
# reads them): key, label, unit. Rates are per second so they do not change with --window.
SERIES: tuple[Metric, ...] = (
    Metric("requests_per_s", "request rate", "req/s", "req/s"),
    Metric("tokens_per_s", "token rate", "tok/s", "tok/s"),
    Metric("tokens_per_request", "tokens / request", "tok", "tok/req"),
    Metric("running", "running requests", "req", "running"),
    Metric("waiting", "waiting requests", "req", "waiting"),
    Metric("queue_wait_mean_ms", "queue wait (mean)", "ms", "queue ms"),
    Metric("ttft_p99_ms", "TTFT p99", "ms", "TTFT p99 ms"),
    Metric("kv_usage", "KV usage", "frac", "KV"),
)
SERIES_BY_KEY: dict[str, Metric] = {m.key: m for m in SERIES}
# The series a KV block shortage finding charts; the hot finding of the same unit leaves them to
# it, so a page never draws one signal twice for one unit.
KV_SERIES: tuple[str, ...] = ("running", "waiting", "kv_usage")


class GatewaySource(StrEnum):
    """Where gateway evidence came from (docs/gateway.md)."""

    SGLANG_ROUTER = "sglang-router"  # SGLang Model Gateway, metric prefix ``smg_``
    VLLM_ROUTER = "vllm-router"  # vLLM's router (a fork of it), prefix ``vllm_router_``
    NGINX = "nginx"  # access log with $upstream_addr
    ENVOY = "envoy"  # JSON access log with %UPSTREAM_HOST%
    # Endpoint pickers (EPP) of llm-d (``llm_d_epp_*`` / ``llm_d_router_epp_*``) and of the
    # Gateway API Inference Extension (``inference_extension_*``, ``inference_pool_*``)
    LLM_D_EPP = "llm-d-epp"
    INFERENCE_EXTENSION_EPP = "inference-extension-epp"
    PRODUCTION_STACK = "vllm-production-stack"  # vLLM production-stack router, ``server`` label
    WORKER_LIST = "worker-list"  # a router's live GET /workers only (no request counts)


class PolicyClass(StrEnum):
    """What a routing policy looks at, which decides the cause its skew points to."""

    TOKEN_BLIND = "token_blind"  # counts requests, not tokens, queues or KV
    STICKY = "sticky"  # a key (session, user, header) pins requests to a unit
    PREFIX = "prefix"  # a shared prompt prefix or cached KV pins requests to a unit
    LOAD_AWARE = "load_aware"  # picks by a polled load figure


# What an endpoint picker calls its policy: it scores every endpoint on the queue, KV and
# prefix figures it polls from the engines (llm-d's default scorer weights 2, 2, 3).
EPP_POLICY = "epp-scorers"

# Router policy names (sglang-router ``--policy``/``smg_worker_selection_total{policy}``,
# vllm-router ``--routing-logic``, production-stack ``--routing-logic`` /
# ``vllm:routing_decisions_total{algorithm}``) and what each one looks at.
POLICY_CLASS: dict[str, PolicyClass] = {
    "round_robin": PolicyClass.TOKEN_BLIND,
    "roundrobin": PolicyClass.TOKEN_BLIND,
    "random": PolicyClass.TOKEN_BLIND,
    "consistent_hash": PolicyClass.STICKY,
    "consistent_hashing": PolicyClass.STICKY,
    "manual": PolicyClass.STICKY,
    "session": PolicyClass.STICKY,
    "sticky_least_loaded": PolicyClass.STICKY,
    "cache_aware": PolicyClass.PREFIX,
    "prefix_hash": PolicyClass.PREFIX,
    "prefixaware": PolicyClass.PREFIX,
    "kv_aware": PolicyClass.PREFIX,
    "kvaware": PolicyClass.PREFIX,
    "power_of_two": PolicyClass.LOAD_AWARE,
    "least_loaded": PolicyClass.LOAD_AWARE,
    EPP_POLICY: PolicyClass.LOAD_AWARE,
}
# Policy classes that pick by a load figure the router polls from the engines, and so can act
# on a stale one (prefix policies fall back to the least-loaded worker when imbalanced).
POLLED_LOAD_CLASSES: frozenset[PolicyClass] = frozenset(
    {PolicyClass.LOAD_AWARE, PolicyClass.PREFIX}
)
