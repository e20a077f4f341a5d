"""Serving-engine dialects: which metric names and labels carry each semantic role.

Names drift between engine versions and forks, so every name lives in exactly ONE alias table
per role (``DIALECTS``) and both online sources (PromQL and direct /metrics scraping) read it.
Each canonical UnitFrame signal is defined once in ``SIGNAL_SPECS`` as (role, reducer over time,
combination across series); ``promql.py`` turns a spec into a query, ``scrape.py`` evaluates the
same spec in Python, so the two paths cannot disagree on what a signal means.

Only the alias tables and dialect detection live here; turning the value tables both sources
produce into Evidence is ``evidence.py``'s job.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from skewscope.catalogue import Dialect, MetricType
from skewscope.errors import SourceError
from skewscope.frame import SIGNAL_COLUMNS, Level
from skewscope.sources.validate import parse_rank


@dataclass(frozen=True)
class Matcher:
    """A label matcher applied to a role's series (e.g. SGLang ``priority=""``).

    Kept as data so PromQL renders it and the scrape path evaluates it identically.
    An absent label counts as the empty string, as in PromQL.
    """

    label: str
    op: str  # "=", "!=", "=~", "!~"
    value: str
    selects: bool = False  # picks a part of the family (SGLang ``mode``): shown in provenance

    def matches(self, labels: Mapping[str, str]) -> bool:
        got = labels.get(self.label, "")
        if self.op == "=":
            return got == self.value
        if self.op == "!=":
            return got != self.value
        hit = re.fullmatch(self.value, got) is not None
        return hit if self.op == "=~" else not hit


@dataclass(frozen=True)
class Alias:
    """One spelling of a role in one engine version.

    ``name`` is the sample name as exposed (counters keep ``_total``); for histograms it is the
    family base name, the query adds ``_bucket``/``_sum``/``_count``. ``dp_label`` is the label
    carrying the DP rank on this metric (None: instance level only).
    """

    name: str
    dp_label: str | None = None
    matchers: tuple[Matcher, ...] = ()
    scale: float = 1.0  # this spelling's unit to the role's (DCGM_FI_DEV_GPU_UTIL % -> fraction)
    # The label naming the unit's instance when it is not the target itself (a router or
    # frontend exporting one series per backend: Dynamo ``worker_id``, llm-d
    # ``model_server_endpoint``); None: Prometheus ``instance`` / the scraped target.
    unit_label: str | None = None
    # The unit label's value is ``<instance>-rank-<n>`` (llm-d endpoints of a DP pod): the rank
    # comes from the suffix. Such aliases are only for counters and gauges (combined per pod
    # after the query, which a histogram quantile cannot be).
    rank_in_unit: bool = False
    # Labels that only tell copies of one series apart (SGLang: every TP rank of a DP rank
    # exports the same scheduler series with its own ``tp_rank``): series differing only in
    # them are one, read once (their max), never summed.
    copies: tuple[str, ...] = ()

    @property
    def read_once(self) -> tuple[str, ...]:
        """Labels whose series are copies of one unit's series in a Prometheus: ``copies``, plus
        the scrape's own identity. The same target scraped by two jobs (a federation or a
        duplicated scrape config: a common mistake) differs only in ``job``; a unit named by a
        label (a router's ``worker_id``) seen from several targets only in ``instance`` too.
        Summed, such copies would double one unit's rates and make it look hot."""
        scrape = ("job",) if self.unit_label in (None, "instance") else ("job", "instance")
        return tuple(dict.fromkeys((*self.copies, *scrape)))

    @property
    def per_rank(self) -> bool:
        """Whether this metric tells DP ranks apart."""
        return self.dp_label is not None or self.rank_in_unit


_RANK_SUFFIX = re.compile(r"^(?P<inst>.+)-rank-(?P<rank>[0-9]+)$")


def unit_of(
    alias: Alias, labels: Mapping[str, str], level: Level, target: str = ""
) -> tuple[str, int | None] | None:
    """(instance, rank or None) a series belongs to; None when it names no usable unit.

    ``target`` is the instance when the alias has no unit label and the labels carry none
    (a direct scrape). A DP-level series whose rank is not a non-negative integer is None.
    """
    inst = labels.get(alias.unit_label or "instance", "") or ("" if alias.unit_label else target)
    if not inst:
        return None
    if alias.rank_in_unit:
        m = _RANK_SUFFIX.match(inst)
        if level is Level.INSTANCE:
            return (m["inst"] if m else inst), None
        return (m["inst"], int(m["rank"])) if m else None
    if level is Level.INSTANCE:
        return inst, None
    rank = parse_rank(labels.get(alias.dp_label or "", ""))
    return None if rank is None else (inst, rank)


@dataclass(frozen=True)
class MetricRole:
    kind: MetricType
    scale: float = 1.0  # multiply values by this (seconds -> ms)
    maybe_percent: bool = False  # values > 1 in a series mean the series is in percent


# Roles and their kinds (the unit conversion belongs to the role, not to a dialect).
ROLES: dict[str, MetricRole] = {
    "finished_requests": MetricRole(MetricType.COUNTER),
    "prompt_tokens": MetricRole(MetricType.COUNTER),
    "generation_tokens": MetricRole(MetricType.COUNTER),
    "running": MetricRole(MetricType.GAUGE),
    "waiting": MetricRole(MetricType.GAUGE),
    "kv_usage": MetricRole(MetricType.GAUGE, maybe_percent=True),
    "free_blocks": MetricRole(MetricType.GAUGE),
    "ttft": MetricRole(MetricType.HISTOGRAM, scale=1000.0),
    "e2e": MetricRole(MetricType.HISTOGRAM, scale=1000.0),
    "queue_time": MetricRole(MetricType.HISTOGRAM, scale=1000.0),
    "batch": MetricRole(MetricType.HISTOGRAM),
    "steps": MetricRole(MetricType.COUNTER),
    "scheduled_tokens": MetricRole(MetricType.COUNTER),
    "busy": MetricRole(MetricType.COUNTER, scale=1000.0),
    "preemptions": MetricRole(MetricType.COUNTER),
    # read by what-if replays only (sources/online_workload.py names their metrics)
    "itl": MetricRole(MetricType.HISTOGRAM, scale=1000.0),
}


@dataclass(frozen=True)
class SignalSpec:
    """How one canonical signal is computed from a role over a window.

    ``over_time``: "increase" (counters), "avg"/"max"/"min" (gauges), "quantile"/"mean"
    (histograms). ``across``: how series of one unit (and ranks of one instance) combine.
    """

    signal: str
    role: str
    over_time: str
    across: str = "sum"
    quantile: float | None = None


SIGNAL_SPECS: tuple[SignalSpec, ...] = (
    SignalSpec("requests", "finished_requests", "increase"),
    SignalSpec("prompt_tokens", "prompt_tokens", "increase"),
    SignalSpec("generation_tokens", "generation_tokens", "increase"),
    SignalSpec("running", "running", "avg", "sum"),
    SignalSpec("waiting", "waiting", "avg", "sum"),
    SignalSpec("kv_usage", "kv_usage", "avg", "avg"),
    SignalSpec("kv_usage_max", "kv_usage", "max", "max"),
    SignalSpec("free_blocks_min", "free_blocks", "min", "min"),
    SignalSpec("ttft_p99_ms", "ttft", "quantile", quantile=0.99),
    SignalSpec("ttft_mean_ms", "ttft", "mean"),
    SignalSpec("e2e_p99_ms", "e2e", "quantile", quantile=0.99),
    SignalSpec("e2e_mean_ms", "e2e", "mean"),
    SignalSpec("queue_wait_p95_ms", "queue_time", "quantile", quantile=0.95),
    SignalSpec("queue_wait_mean_ms", "queue_time", "mean"),
    SignalSpec("batch_size", "batch", "mean"),
    SignalSpec("steps", "steps", "increase"),
    SignalSpec("scheduled_tokens", "scheduled_tokens", "increase"),
    SignalSpec("busy_ms", "busy", "increase"),
    SignalSpec("preemptions", "preemptions", "increase"),
)
assert {s.signal for s in SIGNAL_SPECS} <= set(SIGNAL_COLUMNS)
SPEC_BY_SIGNAL: dict[str, SignalSpec] = {s.signal: s for s in SIGNAL_SPECS}


def combine(values: list[float], how: str) -> float:
    """Several series' values of one unit and window, combined as the spec says."""
    if how == "sum":
        return sum(values)
    if how == "avg":
        return sum(values) / len(values)
    return max(values) if how == "max" else min(values)


assert {s.role for s in SIGNAL_SPECS} <= set(ROLES)


@dataclass(frozen=True)
class DialectSpec:
    name: str
    roles: dict[str, tuple[Alias, ...]] = field(
        default_factory=dict
    )  # role -> aliases, preferred first
    # The one label that names a DP rank in what skewscope writes for this dialect (rules,
    # alerts, dashboards); aliases whose rank label differs are relabelled to it. None: the
    # dialect has no DP level.
    rank_label: str | None = None


# vLLM production-stack's router re-exports some engine names per backend with a ``server``
# label (vllm:num_requests_running{server}, sources/gateway_names.py): an engine's own series
# never has one, so the router's copies are not read as one more engine.
_NOT_ROUTER = (Matcher("server", "=", ""),)

_VLLM_ROLES: dict[str, tuple[Alias, ...]] = {
    "finished_requests": (Alias("vllm:request_success_total", "engine", _NOT_ROUTER),),
    "prompt_tokens": (Alias("vllm:prompt_tokens_total", "engine", _NOT_ROUTER),),
    "generation_tokens": (Alias("vllm:generation_tokens_total", "engine", _NOT_ROUTER),),
    "running": (Alias("vllm:num_requests_running", "engine", _NOT_ROUTER),),
    "waiting": (Alias("vllm:num_requests_waiting", "engine", _NOT_ROUTER),),
    "kv_usage": (
        Alias("vllm:kv_cache_usage_perc", "engine", _NOT_ROUTER),
        Alias("vllm:gpu_cache_usage_perc", "engine", _NOT_ROUTER),
        Alias("vllm:npu_cache_usage_perc", "engine", _NOT_ROUTER),
    ),
    "ttft": (Alias("vllm:time_to_first_token_seconds", "engine", _NOT_ROUTER),),
    "e2e": (Alias("vllm:e2e_request_latency_seconds", "engine", _NOT_ROUTER),),
    "queue_time": (Alias("vllm:request_queue_time_seconds", "engine", _NOT_ROUTER),),
    "steps": (Alias("vllm:iteration_tokens_total_count", "engine", _NOT_ROUTER),),
    "scheduled_tokens": (Alias("vllm:iteration_tokens_total_sum", "engine", _NOT_ROUTER),),
    "preemptions": (Alias("vllm:num_preemptions_total", "engine", _NOT_ROUTER),),
}

# ms-service-metric adds vllm_profiling_* to vLLM's own /metrics: vLLM's names come first, the
# profiling ones fill roles vLLM lacks. Engine-core metrics carry ``dp``, API-server ones
# ``engine`` (which is the rank; ``dp`` there is fixed per process). Seen in 26.0.0 on a real
# vLLM (tests/unit/test_ms_service_metric_capture.py): the KV-block families are histograms, not the
# gauge read here (newer code: gauges), so they are not read; ``dp="-1"`` is no rank
# (validate.parse_rank); ``running_to_waiting_count`` is a counter of newer code only.
_MS_EXTRA: dict[str, tuple[Alias, ...]] = {
    "free_blocks": (Alias("vllm_profiling_free_kvcache_blocks", "dp"),),
    "batch": (Alias("vllm_profiling_batch_size", "engine"),),
    "preemptions": (
        Alias("vllm_profiling_running_to_waiting_count_total", "dp"),
        Alias("vllm_profiling_running_to_waiting_count", "dp"),
    ),
}

# SGLang: every scheduler of a DP rank exports the same series with its own ``tp_rank`` (and
# ``moe_ep_rank``) — all of them with --enable-metrics-for-all-schedulers, else the first of
# the rank, whose ``tp_rank`` is not 0 for DP ranks > 0 under --enable-dp-attention — so they
# are copies, read once (``Alias.copies``), never summed and never filtered to tp_rank 0. With
# priority scheduling, ``priority=""`` is the aggregate of the labelled per-priority series and
# is also what an engine without priorities exports, so keep only it.
_SG = (Matcher("priority", "=", ""),)
_SG_COPIES = ("tp_rank", "moe_ep_rank")


def _sg(name: str, dp_label: str | None, matchers: tuple[Matcher, ...]) -> Alias:
    return Alias(name, dp_label, matchers, copies=_SG_COPIES)


# Per-rank load from the schedulers (python/sglang/srt/metrics/collector.py, verified at
# sgl-project/sglang@00ae9c1590d2): the ``_count`` of ``queue_time_seconds`` counts requests
# leaving each rank's waiting queue (observed when a request enters its first forward);
# ``realtime_tokens_total{mode}`` counts tokens per rank as they are processed, input side =
# ``prefill_compute`` + ``prefill_cache``, output side = ``decode``. The tokenizer-side counters
# (one series per instance, no dp_rank) stay first, so the instance level is unchanged; at DP
# level the first alias carrying a DP label is used (``resolve``).
_SG_INPUT = (*_SG, Matcher("mode", "=~", "prefill_compute|prefill_cache", selects=True))
_SG_OUTPUT = (*_SG, Matcher("mode", "=", "decode", selects=True))
_SGLANG_ROLES: dict[str, tuple[Alias, ...]] = {
    "finished_requests": (
        _sg("sglang:num_requests_total", None, _SG),
        _sg("sglang:queue_time_seconds_count", "dp_rank", _SG),
    ),
    "prompt_tokens": (
        _sg("sglang:prompt_tokens_total", None, _SG),
        _sg("sglang:realtime_tokens_total", "dp_rank", _SG_INPUT),
    ),
    "generation_tokens": (
        _sg("sglang:generation_tokens_total", None, _SG),
        _sg("sglang:realtime_tokens_total", "dp_rank", _SG_OUTPUT),
    ),
    "running": (_sg("sglang:num_running_reqs", "dp_rank", _SG),),
    "waiting": (_sg("sglang:num_queue_reqs", "dp_rank", _SG),),
    "kv_usage": (_sg("sglang:token_usage", "dp_rank", _SG),),
    "ttft": (_sg("sglang:time_to_first_token_seconds", None, _SG),),  # no dp_rank label
    "e2e": (_sg("sglang:e2e_request_latency_seconds", None, _SG),),
    "queue_time": (_sg("sglang:queue_time_seconds", "dp_rank", _SG),),
    "busy": (_sg("sglang:gpu_execution_seconds_total", "dp_rank", _SG),),
    "preemptions": (_sg("sglang:num_retracted_requests_total", "dp_rank", _SG),),
}

_MINDIE_ROLES: dict[str, tuple[Alias, ...]] = {
    "finished_requests": (Alias("request_success_total"),),
    "prompt_tokens": (Alias("prompt_tokens_total"),),
    "generation_tokens": (Alias("generation_tokens_total"),),
    "running": (Alias("num_requests_running"),),
    "waiting": (Alias("num_requests_waiting"),),
    "kv_usage": (Alias("npu_cache_usage_perc"),),
    "ttft": (Alias("time_to_first_token_seconds"),),
    "e2e": (Alias("e2e_request_latency_seconds"),),
    "preemptions": (Alias("num_preemptions_total"),),
}


# NVIDIA Dynamo. Worker (component) metrics, lib/runtime/src/metrics/prometheus_names.rs at
# ai-dynamo/dynamo@04070c75b52f: every worker's component metrics are prefixed
# ``dynamo_component_`` and carry the worker's instance id as the auto-injected ``worker_id``
# label, so units are named by ``worker_id`` (one frontend or Prometheus job may expose many
# workers). The work handler's ``requests_total`` / ``inflight_requests`` on the ``generate``
# endpoint count the worker's requests. ``kvstats_*`` are plain gauges created with no label of
# their own (``KvStatsPrometheusGauges::new``, lib/llm/src/kv_router/publisher.rs at
# ai-dynamo/dynamo@43855aecd440): one series per worker, no ``dp_rank``;
# ``kvstats_gpu_cache_usage_percent`` is a fraction (0..1) despite its name.
# Per DP rank, only the frontend's per-worker gauges (lib/llm/src/kv_router/metrics.rs,
# ``WorkerLoadMetrics``; labels ``worker_id``, ``dp_rank``, ``worker_type``) tell ranks apart:
# ``dynamo_frontend_worker_active_decode_blocks`` / ``..._active_prefill_tokens`` (KV blocks and
# prefill tokens the router predicts, at ai-dynamo/dynamo@c7810b035df4: no canonical signal,
# not read), and in later revisions of the same file ``..._num_requests_waiting`` (requests
# waiting in the worker's scheduler queue) and ``..._request_active_slots`` (backend request
# slots in use), read as ``waiting`` and ``running`` per rank (one revision spells the first
# ``..._waiting_requests``). Several frontends each export the gauges of every worker they
# route to, from the same worker load events: the copies differ only in the frontend's target
# labels and are read once (their max), never summed.
_DYN = (Matcher("dynamo_endpoint", "=~", "generate|"),)
_DYN_FRONTEND_COPIES = ("instance", "pod", "job", "container", "endpoint", "service")


def _dyn_rank(name: str) -> Alias:
    return Alias(name, "dp_rank", unit_label="worker_id", copies=_DYN_FRONTEND_COPIES)


_DYNAMO_ROLES: dict[str, tuple[Alias, ...]] = {
    "finished_requests": (
        Alias("dynamo_component_requests_total", matchers=_DYN, unit_label="worker_id"),
    ),
    "running": (
        Alias("dynamo_component_inflight_requests", matchers=_DYN, unit_label="worker_id"),
        _dyn_rank("dynamo_frontend_worker_request_active_slots"),
    ),
    "waiting": (
        _dyn_rank("dynamo_frontend_worker_num_requests_waiting"),
        _dyn_rank("dynamo_frontend_worker_waiting_requests"),
    ),
    "kv_usage": (
        Alias("dynamo_component_kvstats_gpu_cache_usage_percent", unit_label="worker_id"),
    ),
}

# llm-d endpoint picker (EPP), when the engines are not scraped directly: its per-endpoint queue
# is the model server's waiting queue as the router polls it. Endpoints of a DP pod are named
# ``<pod>-rank-<n>``. Names: ``llm_d_router_epp_per_endpoint_queue_size{name,
# model_server_endpoint}`` (llm-d/llm-d-router pkg/epp/metrics/llm_d_router_metrics.go at
# 047069960690), ``llm_d_epp_per_endpoint_queue_size`` (llm-d-router v0.10/v0.11 releases), and
# the Gateway API Inference Extension's ``inference_pool_per_pod_queue_size{name,
# model_server_pod}`` (kubernetes-sigs/gateway-api-inference-extension pkg/epp/metrics).
_LLMD_ROLES: dict[str, tuple[Alias, ...]] = {
    "waiting": (
        Alias(
            "llm_d_router_epp_per_endpoint_queue_size",
            unit_label="model_server_endpoint",
            rank_in_unit=True,
        ),
        Alias(
            "llm_d_epp_per_endpoint_queue_size",
            unit_label="model_server_endpoint",
            rank_in_unit=True,
        ),
        # Inference Extension >= 1.3 names a DP pod's endpoints ``<pod>-rank-<n>`` here too
        Alias(
            "inference_pool_per_pod_queue_size", unit_label="model_server_pod", rank_in_unit=True
        ),
    ),
}


def _merge(
    base: dict[str, tuple[Alias, ...]], extra: dict[str, tuple[Alias, ...]]
) -> dict[str, tuple[Alias, ...]]:
    roles = dict(base)
    for role, aliases in extra.items():
        roles[role] = roles.get(role, ()) + aliases
    return roles


# Detection order matters only on ties: ms-service-metric is a superset of vLLM, so plain vLLM
# wins unless profiling names are present.
DIALECTS: dict[str, DialectSpec] = {
    d.name: d
    for d in (
        DialectSpec("vllm", _VLLM_ROLES, "engine"),
        DialectSpec("ms-service-metric", _merge(_VLLM_ROLES, _MS_EXTRA), "dp"),
        DialectSpec("sglang", _SGLANG_ROLES, "dp_rank"),
        DialectSpec("mindie", _MINDIE_ROLES),
        DialectSpec("dynamo", _DYNAMO_ROLES),
        DialectSpec("llm-d", _LLMD_ROLES),
    )
}
assert set(DIALECTS) == {d.value for d in Dialect}


def normalise_name(name: str) -> str:
    """Comparable form of a metric name: prometheus_client 0.26 + OpenMetrics negotiation stores
    ``vllm:x`` as ``vllm_x`` (client_python #1177), real vLLM keeps the colon; treat them alike."""
    return name.replace(":", "_")


def name_regex(name: str) -> str:
    """A ``__name__=~`` regex matching both the colon and the escaped underscore spelling."""
    return "[:_]".join(re.escape(part) for part in name.split(":"))


def required_samples(
    alias: Alias, kind: MetricType, over_time: str | None = None
) -> tuple[str, ...]:
    """Sample names that must exist for ``alias`` to provide a reducer (any reducer if None)."""
    if kind is not MetricType.HISTOGRAM:
        return (alias.name,)
    if over_time == "quantile":
        return (alias.name + "_bucket",)
    return (alias.name + "_sum", alias.name + "_count")


def detect_dialect(metric_names: Iterable[str]) -> str:
    """The dialect whose alias table explains most of ``metric_names``.

    Raises SourceError when no known serving-engine metric is present (wrong target or selector).
    """
    present = {normalise_name(n) for n in metric_names}
    best, best_score = "", 0
    for d in DIALECTS.values():
        score = sum(
            1
            for role, aliases in d.roles.items()
            for a in aliases
            if all(normalise_name(s) in present for s in required_samples(a, ROLES[role].kind))
        )
        if score > best_score:
            best, best_score = d.name, score
    if not best:
        raise SourceError(
            "no known serving-engine metrics found (looked for vLLM, ms-service-metric, SGLang, "
            "MindIE, Dynamo, llm-d names); check the target or selector"
        )
    return best


def get_dialect(name: str) -> DialectSpec:
    """The dialect called ``name`` (user override), or SourceError listing the known ones."""
    try:
        return DIALECTS[name]
    except KeyError:
        known = ", ".join(DIALECTS)
        raise SourceError(f"unknown dialect {name!r}; known dialects: {known}") from None


def resolve(
    dialect: DialectSpec, metric_names: Iterable[str], level: Level = Level.INSTANCE
) -> dict[str, Alias]:
    """Signal -> the first alias of its role whose samples are present (absent signals omitted).

    At DP level only aliases carrying a DP label count: a role may be read from one metric per
    instance and from another per rank (SGLang's tokenizer and scheduler counters).
    """
    present = {normalise_name(n) for n in metric_names}
    found: dict[str, Alias] = {}
    for spec in SIGNAL_SPECS:
        kind = ROLES[spec.role].kind
        for alias in dialect.roles.get(spec.role, ()):
            if level is Level.DP and not alias.per_rank:
                continue
            samples = required_samples(alias, kind, spec.over_time)
            if all(normalise_name(s) in present for s in samples):
                found[spec.signal] = alias
                break
    return found


def present_spellings(alias: Alias, names: Iterable[str]) -> str:
    """The stored spelling(s) of an alias (``vllm:x``, ``vllm_x`` or both), for provenance."""
    want = normalise_name(alias.name)
    found = sorted(
        {n for n in names if normalise_name(n) == want}
        | {
            n[: -len(sfx)]
            for n in names
            for sfx in ("_bucket", "_sum", "_count")
            if n.endswith(sfx) and normalise_name(n[: -len(sfx)]) == want
        }
    )
    parts = ",".join(f'{m.label}{m.op}"{m.value}"' for m in alias.matchers if m.selects)
    return ("|".join(found) or alias.name) + (f"{{{parts}}}" if parts else "")
