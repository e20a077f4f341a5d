"""Serving-engine dialects: which metric names and labels carry each semantic role.

Names drift between engine versions and forks, so every name lives in exactly ONE alias table
per role (``DIALECTS``) and both online sources (PromQL and direct /metrics scraping) read it.
Each canonical UnitFrame signal is defined once in ``SIGNAL_SPECS`` as (role, reducer over time,
combination across series); ``promql.py`` turns a spec into a query, ``scrape.py`` evaluates the
same spec in Python, so the two paths cannot disagree on what a signal means.

This module also assembles the per-level value tables both sources produce into UnitFrames.
"""

from __future__ import annotations

import math
import re
from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from enum import StrEnum

from skewscope.errors import SourceError
from skewscope.frame import (
    SIGNAL_COLUMNS,
    Evidence,
    Level,
    UnitFrame,
    conform,
    dp_unit_id,
    empty_schema,
)


class Kind(StrEnum):
    COUNTER = "counter"
    GAUGE = "gauge"
    HISTOGRAM = "histogram"


@dataclass(frozen=True)
class Matcher:
    """A label matcher applied to a role's series (e.g. SGLang ``tp_rank=~"0|"``).

    Kept as data so PromQL renders it and the scrape path evaluates it identically.
    An absent label counts as the empty string, as in PromQL.
    """

    label: str
    op: str  # "=", "!=", "=~", "!~"
    value: str

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


@dataclass(frozen=True)
class Role:
    kind: Kind
    scale: float = 1.0  # multiply values by this (seconds -> ms)
    maybe_percent: bool = False  # values > 1 in a series mean the series is in percent


# Roles and their kinds (the unit conversion belongs to the role, not to a dialect).
ROLES: dict[str, Role] = {
    "finished_requests": Role(Kind.COUNTER),
    "prompt_tokens": Role(Kind.COUNTER),
    "generation_tokens": Role(Kind.COUNTER),
    "running": Role(Kind.GAUGE),
    "waiting": Role(Kind.GAUGE),
    "kv_usage": Role(Kind.GAUGE, maybe_percent=True),
    "free_blocks": Role(Kind.GAUGE),
    "ttft": Role(Kind.HISTOGRAM, scale=1000.0),
    "e2e": Role(Kind.HISTOGRAM, scale=1000.0),
    "queue_time": Role(Kind.HISTOGRAM, scale=1000.0),
    "batch": Role(Kind.HISTOGRAM),
    "steps": Role(Kind.COUNTER),
    "scheduled_tokens": Role(Kind.COUNTER),
    "busy": Role(Kind.COUNTER, scale=1000.0),
    "preemptions": Role(Kind.COUNTER),
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
assert {s.role for s in SIGNAL_SPECS} <= set(ROLES)


@dataclass(frozen=True)
class Dialect:
    name: str
    roles: dict[str, tuple[Alias, ...]] = field(
        default_factory=dict
    )  # role -> aliases, preferred first


_VLLM_ROLES: dict[str, tuple[Alias, ...]] = {
    "finished_requests": (Alias("vllm:request_success_total", "engine"),),
    "prompt_tokens": (Alias("vllm:prompt_tokens_total", "engine"),),
    "generation_tokens": (Alias("vllm:generation_tokens_total", "engine"),),
    "running": (Alias("vllm:num_requests_running", "engine"),),
    "waiting": (Alias("vllm:num_requests_waiting", "engine"),),
    "kv_usage": (
        Alias("vllm:kv_cache_usage_perc", "engine"),
        Alias("vllm:gpu_cache_usage_perc", "engine"),
        Alias("vllm:npu_cache_usage_perc", "engine"),
    ),
    "ttft": (Alias("vllm:time_to_first_token_seconds", "engine"),),
    "e2e": (Alias("vllm:e2e_request_latency_seconds", "engine"),),
    "queue_time": (Alias("vllm:request_queue_time_seconds", "engine"),),
    "steps": (Alias("vllm:iteration_tokens_total_count", "engine"),),
    "scheduled_tokens": (Alias("vllm:iteration_tokens_total_sum", "engine"),),
    "preemptions": (Alias("vllm:num_preemptions_total", "engine"),),
}

# ms-service-metric adds vllm_profiling_* to vLLM's own /metrics: vLLM's names come first, the
# profiling ones fill roles vLLM lacks. Engine-core metrics carry ``dp``, API-server ones
# ``engine``.
_MS_EXTRA: dict[str, tuple[Alias, ...]] = {
    "free_blocks": (Alias("vllm_profiling_free_kvcache_blocks", "dp"),),
    "batch": (Alias("vllm_profiling_batch_size", "engine"),),
    "preemptions": (Alias("vllm_profiling_running_to_waiting_count", "dp"),),
}

# SGLang: one series per tp_rank with --enable-metrics-for-all-schedulers (keep tp_rank 0 or the
# unlabelled series); with priority scheduling, ``priority=""`` is the aggregate of the labelled
# per-priority series and is also what an engine without priorities exports, so keep only it.
_SG = (Matcher("tp_rank", "=~", "0|"), Matcher("priority", "=", ""))
_SGLANG_ROLES: dict[str, tuple[Alias, ...]] = {
    # tokenizer-side counters: one series per instance, no dp_rank
    "finished_requests": (Alias("sglang:num_requests_total", None, _SG),),
    "prompt_tokens": (Alias("sglang:prompt_tokens_total", None, _SG),),
    "generation_tokens": (Alias("sglang:generation_tokens_total", None, _SG),),
    "running": (Alias("sglang:num_running_reqs", "dp_rank", _SG),),
    "waiting": (Alias("sglang:num_queue_reqs", "dp_rank", _SG),),
    "kv_usage": (Alias("sglang:token_usage", "dp_rank", _SG),),
    "ttft": (Alias("sglang:time_to_first_token_seconds", None, _SG),),  # no dp_rank label
    "e2e": (Alias("sglang:e2e_request_latency_seconds", None, _SG),),
    "queue_time": (Alias("sglang:queue_time_seconds", "dp_rank", _SG),),
    "busy": (Alias("sglang:gpu_execution_seconds_total", "dp_rank", _SG),),
    "preemptions": (Alias("sglang:num_retracted_requests_total", "dp_rank", _SG),),
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


def _merge(
    base: dict[str, tuple[Alias, ...]], extra: dict[str, tuple[Alias, ...]]
) -> dict[str, tuple[Alias, ...]]:
    roles = dict(base)
    for role, aliases in extra.items():
        roles[role] = roles.get(role, ()) + aliases
    return roles


# Detection order matters only on ties: ms-service-metric is a superset of vLLM, so plain vLLM
# wins unless profiling names are present.
DIALECTS: dict[str, Dialect] = {
    d.name: d
    for d in (
        Dialect("vllm", _VLLM_ROLES),
        Dialect("ms-service-metric", _merge(_VLLM_ROLES, _MS_EXTRA)),
        Dialect("sglang", _SGLANG_ROLES),
        Dialect("mindie", _MINDIE_ROLES),
    )
}


def normalise_name(name: str) -> str:
    """Comparable form of a metric name: prometheus_client 0.26 + OpenMetrics negotiation stores
    ``vllm:x`` as ``vllm_x`` (client_python #1177), real vLLM keeps the colon; treat them alike."""
    return name.replace(":", "_")


def name_regex(name: str) -> str:
    """A ``__name__=~`` regex matching both the colon and the escaped underscore spelling."""
    return "[:_]".join(re.escape(part) for part in name.split(":"))


def required_samples(alias: Alias, kind: Kind, over_time: str | None = None) -> tuple[str, ...]:
    """Sample names that must exist for ``alias`` to provide a reducer (any reducer if None)."""
    if kind is not Kind.HISTOGRAM:
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
            "MindIE names); check the target or selector"
        )
    return best


def get_dialect(name: str) -> Dialect:
    """The dialect called ``name`` (user override), or SourceError listing the known ones."""
    try:
        return DIALECTS[name]
    except KeyError:
        known = ", ".join(DIALECTS)
        raise SourceError(f"unknown dialect {name!r}; known dialects: {known}") from None


def resolve(dialect: Dialect, metric_names: Iterable[str]) -> dict[str, Alias]:
    """Signal -> the first alias of its role whose samples are present (absent signals omitted)."""
    present = {normalise_name(n) for n in metric_names}
    found: dict[str, Alias] = {}
    for spec in SIGNAL_SPECS:
        kind = ROLES[spec.role].kind
        for alias in dialect.roles.get(spec.role, ()):
            samples = required_samples(alias, kind, spec.over_time)
            if all(normalise_name(s) in present for s in samples):
                found[spec.signal] = alias
                break
    return found


# ---------------------------------------------------------------------------------------------
# Assembly: both sources produce {signal: {(window_start_s, instance, dp_rank): value}} per level.

Key = tuple[float, str, int | None]
Values = dict[str, dict[Key, float]]


def clean(value: float) -> float | None:
    """NaN/inf (empty histogram window, 0/0 mean) is missing, never a number."""
    return value if math.isfinite(value) else None


def percent_units(tables: Iterable[Mapping[Key, float]]) -> set[tuple[str, int | None]]:
    """Units whose KV usage series is in percent: any value > 1 in any of ``tables``."""
    return {(key[1], key[2]) for table in tables for key, v in table.items() if v > 1.0}


def divide_units(
    table: Mapping[Key, float], units: set[tuple[str, int | None]]
) -> dict[Key, float]:
    return {k: (v / 100.0 if (k[1], k[2]) in units else v) for k, v in table.items()}


def unit_id(instance: str, dp_rank: int | None) -> str:
    """Instance id, or ``<instance>/dp<rank>`` for a DP rank."""
    return instance if dp_rank is None else dp_unit_id(instance, dp_rank)


def _row_order(item: tuple[Key, object]) -> tuple[float, str, int]:
    t, inst, dp = item[0]
    return (t, inst, -1 if dp is None else dp)


def assemble(
    level: Level,
    values: Values,
    *,
    aliases: Mapping[str, str],
    window_s: float,
    source: str,
    notes: Iterable[str] = (),
) -> UnitFrame:
    """Build a UnitFrame: rows only where a unit has data; absent signals listed as missing.

    Units that are not present in every window (scale in/out, series that stop) get a note.
    """
    import polars as pl

    rows: dict[tuple[float, str, int | None], dict[str, float | None]] = {}
    for signal, table in values.items():
        for key, value in table.items():
            rows.setdefault(key, {})[signal] = clean(value)
    missing = tuple(s for s in SIGNAL_COLUMNS if not values.get(s))
    records = [
        {
            "window_start_s": t,
            "unit": unit_id(inst, dp),
            "instance": inst,
            "dp_rank": dp,
            **sig,
        }
        for (t, inst, dp), sig in sorted(rows.items(), key=_row_order)
    ]
    all_notes = list(notes)
    windows = sorted({k[0] for k in rows})
    per_unit: dict[str, set[float]] = defaultdict(set)
    for t, inst, dp in rows:
        per_unit[unit_id(inst, dp)].add(t)
    for unit, ts in sorted(per_unit.items()):
        if len(ts) < len(windows):
            all_notes.append(
                f"{level.value} unit {unit} has data in {len(ts)} of {len(windows)} windows "
                "(joined late, left early or its series stopped); rows only where present"
            )
    if records:
        df = conform(pl.DataFrame(records, schema=empty_schema(), strict=False))  # type: ignore[arg-type]
    else:
        df = conform(pl.DataFrame(schema=empty_schema()))  # type: ignore[arg-type]
    return UnitFrame(
        df=df,
        level=level,
        window_s=window_s,
        source=source,
        aliases=dict(aliases),
        missing=missing,
        notes=tuple(all_notes),
    )


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
    return "|".join(found) or alias.name


QUANTILE_NOTE = (
    "percentiles (p95/p99) are estimated from histogram buckets with linear interpolation inside "
    "a bucket, as PromQL histogram_quantile does; they are only as fine as the bucket bounds"
)


def nonfinite_notes(values: Values, level: Level) -> list[str]:
    """Units whose counter or gauge signal was only ever NaN/±Inf: say so, they are missing.

    (Histogram signals are NaN in any window without observations, which is not news.)
    """
    only_bad: dict[str, list[str]] = defaultdict(list)
    for spec in SIGNAL_SPECS:
        if ROLES[spec.role].kind is Kind.HISTOGRAM or spec.signal not in values:
            continue
        seen: dict[tuple[str, int | None], bool] = {}
        for (_, inst, dp), v in values[spec.signal].items():
            seen[(inst, dp)] = seen.get((inst, dp), False) or math.isfinite(v)
        for unit, any_finite in seen.items():
            if not any_finite:
                only_bad[unit_id(*unit)].append(spec.signal)
    return [
        f"{level.value} unit {unit} reported only NaN/Inf for {', '.join(signals)}; "
        "those values are missing for it (not zero, not under-loaded)"
        for unit, signals in sorted(only_bad.items())
    ]


def build_evidence(
    inst_values: Values,
    dp_values: Values | None,
    *,
    resolved: Mapping[str, Alias],
    names: Iterable[str],
    window_s: float,
    source: str,
    notes: Iterable[str] = (),
) -> Evidence:
    """Turn per-level value tables into Evidence; shared by the Prometheus and scrape paths.

    KV usage reported in percent is rescaled per unit; the DP frame is dropped (with a note)
    when no instance shows more than one rank, because there is nothing to compare inside it.
    """
    names = set(names)
    all_notes = list(notes)
    aliases = {sig: present_spellings(a, names) for sig, a in resolved.items()}
    if any(s.over_time == "quantile" and s.signal in resolved for s in SIGNAL_SPECS):
        all_notes.append(QUANTILE_NOTE)

    def fix_percent(values: Values, level: Level) -> Values:
        kv = [values.get("kv_usage", {}), values.get("kv_usage_max", {})]
        units = percent_units(kv)
        if not units:
            return values
        all_notes.append(
            f"KV usage of {len(units)} {level.value} unit(s) was reported in percent "
            f"({', '.join(sorted(unit_id(*u) for u in units))}); divided by 100"
        )
        out = dict(values)
        for sig in ("kv_usage", "kv_usage_max"):
            if sig in out:
                out[sig] = divide_units(out[sig], units)
        return out

    all_notes += nonfinite_notes(inst_values, Level.INSTANCE)
    inst_values = fix_percent(inst_values, Level.INSTANCE)
    dp_frame = None
    if dp_values is not None:
        ranks: dict[str, set[int]] = defaultdict(set)
        for table in dp_values.values():
            for _, inst, dp in table:
                if dp is not None:
                    ranks[inst].add(dp)
        if ranks and max(len(r) for r in ranks.values()) >= 2:
            all_notes += nonfinite_notes(dp_values, Level.DP)
            dp_values = fix_percent(dp_values, Level.DP)
            dp_aliases = {s: a for s, a in aliases.items() if dp_values.get(s)}
            dp_frame = assemble(
                Level.DP, dp_values, aliases=dp_aliases, window_s=window_s, source=source
            )
        else:
            all_notes.append("no instance shows more than one DP rank; DP level skipped")
    inst_frame = assemble(
        Level.INSTANCE, inst_values, aliases=aliases, window_s=window_s, source=source
    )
    return Evidence(instance=inst_frame, dp=dp_frame, notes=tuple(all_notes))
