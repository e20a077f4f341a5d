"""Per-unit PromQL for the method's signals, shared by ``rules`` and ``dashboard``.

One expression per (dialect, level, signal) returns every unit of every peer group at once:
``sum by (<group labels>, instance[, <rank label>])`` over the dialect's alias table, so the
metric names are never written here (they come from ``sources.dialects``) and both spellings of
a ``vllm:`` name match (``name_regex``: Prometheus 2.42 stores ``vllm_x`` when an exporter
negotiated OpenMetrics). Counters are read per second (``rate``); the diagnosis reads the same
roles per window (``sources.promql``).

Aliases of one role are joined with ``or`` (the preferred spelling wins per unit); at DP level a
series whose rank label differs from the dialect's ``rank_label`` is relabelled to it. A dialect
whose names are a subset of another's (vLLM inside ms-service-metric) drops the instances that
expose the superset's own names, and the superset keeps only those, so one deployment is never
counted under two dialects.
"""

from __future__ import annotations

from dataclasses import dataclass

from skewscope.catalogue import MetricType
from skewscope.errors import UsageError
from skewscope.frame import Level
from skewscope.sources.dialects import (
    DIALECTS,
    ROLES,
    SIGNAL_SPECS,
    Alias,
    DialectSpec,
    SignalSpec,
    name_regex,
    required_samples,
)
from skewscope.sources.promql import (
    check_label_name,
    normalise_selector,
    quote,
    series_selector,
)

# Signals a monitor reads (canonical UnitFrame names; their PromQL comes from SIGNAL_SPECS).
MONITOR_SIGNALS: tuple[str, ...] = (
    "requests",
    "prompt_tokens",
    "generation_tokens",
    "running",
    "waiting",
    "queue_wait_mean_ms",
    "ttft_p99_ms",
    "e2e_p99_ms",
    "e2e_mean_ms",
    "kv_usage",
    "free_blocks_min",
)
SPECS: dict[str, SignalSpec] = {s.signal: s for s in SIGNAL_SPECS}
UNIT_LABEL = "instance"


def parse_group_by(text: str) -> tuple[str, ...]:
    """``job,model_name`` -> ("job", "model_name"); labels are checked, ``instance`` refused."""
    labels = tuple(part.strip() for part in text.split(",") if part.strip())
    for label in labels:
        check_label_name(label)
    if UNIT_LABEL in labels:
        raise UsageError("--group-by: 'instance' names a unit, not a peer group")
    if len(set(labels)) != len(labels):
        raise UsageError(f"--group-by: a label is repeated in {text!r}")
    return labels


def levels(dialect: DialectSpec) -> tuple[Level, ...]:
    """Instance level always; DP level when the dialect names a rank label."""
    return (Level.INSTANCE, Level.DP) if dialect.rank_label else (Level.INSTANCE,)


@dataclass(frozen=True)
class Scope:
    """Where a per-unit expression looks: one dialect, one level, the peer-group labels and
    the user's extra matchers (a PromQL selector or Grafana variable matchers)."""

    dialect: DialectSpec
    level: Level
    group_by: tuple[str, ...]
    selector: str = ""

    @property
    def rank_label(self) -> str | None:
        return self.dialect.rank_label if self.level is Level.DP else None

    @property
    def unit_labels(self) -> tuple[str, ...]:
        """Labels naming one unit inside its peer group."""
        return (UNIT_LABEL,) if self.rank_label is None else (UNIT_LABEL, self.rank_label)

    @property
    def peer_labels(self) -> tuple[str, ...]:
        """Labels of a peer group: the group-by labels, plus the instance at DP level."""
        return self.group_by if self.rank_label is None else (*self.group_by, UNIT_LABEL)

    @property
    def by(self) -> tuple[str, ...]:
        return (*self.group_by, *self.unit_labels)


def _names(d: DialectSpec) -> set[str]:
    return {
        s
        for role, aliases in d.roles.items()
        for a in aliases
        for s in required_samples(a, ROLES[role].kind)
    }


def _marker(names: set[str], selector: str) -> str:
    """``group by (instance) ({__name__=~"a|b"})``: the instances exposing any of ``names``."""
    parts = [f"__name__=~{quote('|'.join(name_regex(n) for n in sorted(names)))}"]
    extra = normalise_selector(selector)
    if extra:
        parts.append(extra)
    return f"group by ({UNIT_LABEL}) ({{{', '.join(parts)}}})"


def restrict(scope: Scope, expr: str) -> str:
    """Keep only the instances that belong to this dialect (see the module docstring)."""
    own = _names(scope.dialect)
    for other in DIALECTS.values():
        if other is scope.dialect:
            continue
        theirs = _names(other)
        if own < theirs:  # a superset dialect exists: leave its instances to it
            expr = f"({expr}) unless on ({UNIT_LABEL}) {_marker(theirs - own, scope.selector)}"
        elif theirs < own:  # we are the superset: keep only instances exposing our own names
            expr = f"({expr}) and on ({UNIT_LABEL}) {_marker(own - theirs, scope.selector)}"
    return expr


def _alias_expr(scope: Scope, spec: SignalSpec, alias: Alias, window: str) -> str | None:
    rank = scope.rank_label
    if rank is not None and alias.dp_label is None:
        return None  # this series carries no rank: nothing per rank to read
    role = ROLES[spec.role]

    def inner(sample: str, fn: str) -> str:
        text = f"{fn}({series_selector(sample, alias, scope.selector)}[{window}])"
        if alias.copies:  # copies of one series (SGLang TP ranks, Dynamo frontends): read once
            text = f"max without ({', '.join(alias.copies)}) ({text})"
        if alias.unit_label:  # units named by another label (Dynamo's worker_id): as instance
            text = f'label_replace({text}, "{UNIT_LABEL}", "$1", "{alias.unit_label}", "(.+)")'
        if rank is not None and alias.dp_label != rank:
            text = f'label_replace({text}, "{rank}", "$1", "{alias.dp_label}", "(.*)")'
        return text

    def agg(sample: str, fn: str, how: str = "sum", extra: tuple[str, ...] = ()) -> str:
        return f"{how} by ({', '.join((*scope.by, *extra))}) ({inner(sample, fn)})"

    if role.kind is MetricType.COUNTER:
        expr = agg(alias.name, "rate")
    elif role.kind is MetricType.GAUGE:
        expr = agg(alias.name, f"{spec.over_time}_over_time", spec.across)
    elif spec.over_time == "quantile":  # ">= 0" drops the NaN of a window without requests
        buckets = agg(alias.name + "_bucket", "rate", extra=("le",))
        expr = f"(histogram_quantile({spec.quantile:g}, {buckets}) >= 0)"
    else:  # pooled mean; no sample (rather than NaN) for a window without requests
        count = agg(alias.name + "_count", "rate")
        expr = f"({agg(alias.name + '_sum', 'rate')} / ({count} > 0))"
    return expr if role.scale == 1.0 else f"{role.scale:g} * {expr}"


def unit_expr(scope: Scope, signal: str, window: str) -> str | None:
    """PromQL for ``signal`` per unit (counters per second), or None when the dialect cannot
    give it at this level. ``window`` is a PromQL duration (or ``$__rate_interval``)."""
    spec = SPECS[signal]
    parts = [
        e
        for a in scope.dialect.roles.get(spec.role, ())
        if (e := _alias_expr(scope, spec, a, window)) is not None
    ]
    if not parts:
        return None
    expr = parts[0] if len(parts) == 1 else " or ".join(f"({p})" for p in parts)
    return restrict(scope, expr)
