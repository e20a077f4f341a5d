"""``skewscope dashboard``: a Grafana 10/11 dashboard of the method's signals, unit by unit.

Built with grafana-foundation-sdk (Grafana's own typed builders), so the JSON follows Grafana's
dashboard schema. Panels query the raw engine metrics (the recording rules need not be loaded):
each per-unit query is the ``monitor.signals`` expression of every chosen dialect joined with
``or``, filtered by the dashboard variables (datasource, one per peer-group label, instance).
Rows: instances, then DP ranks (sibling ranks side by side); each row ends with max/median
ratio panels per peer group; then, for dialects whose stack names prefill/decode pools, the
pools side by side (``monitor.pd_dashboard``); the ``rules`` alerts are drawn as annotations.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from skewscope.frame import Level
from skewscope.monitor.dashboard_options import DashboardOptions, variable_matchers
from skewscope.monitor.panels import DS_VAR, datasource, timeseries_panel
from skewscope.monitor.rules import ALERTS
from skewscope.monitor.signals import UNIT_LABEL, Scope, levels, unit_expr
from skewscope.sources.dialects import DIALECTS, ROLES, name_regex, required_samples
from skewscope.sources.promql import quote

RATE_WINDOW = "$__rate_interval"
UID = "skewscope-load-skew"


@dataclass(frozen=True)
class Panel:
    """One side-by-side panel: a canonical signal (or a derived one) and its Grafana unit."""

    title: str
    unit: str
    signals: tuple[str, ...]  # one signal, or (numerator parts..., denominator) for a ratio
    description: str


PANELS: tuple[Panel, ...] = (
    Panel("Request rate", "reqps", ("requests",), "Finished requests per second."),
    Panel("Prompt tokens/s", "short", ("prompt_tokens",), "Prefill tokens per second."),
    Panel("Generation tokens/s", "short", ("generation_tokens",), "Decode tokens per second."),
    Panel(
        "Tokens per request",
        "short",
        ("prompt_tokens", "generation_tokens", "requests"),
        "(prompt + generation tokens) / requests: heavier requests show here (weight skew).",
    ),
    Panel("Running requests", "short", ("running",), "Requests in the running batch."),
    Panel("Waiting requests", "short", ("waiting",), "Requests queued for a batch slot."),
    Panel("Queue time (mean)", "ms", ("queue_wait_mean_ms",), "Mean time spent waiting."),
    Panel("TTFT P99", "ms", ("ttft_p99_ms",), "Time to first token, 99th percentile."),
    Panel("E2E latency P99", "ms", ("e2e_p99_ms",), "End-to-end latency, 99th percentile."),
    Panel(
        "KV cache usage",
        "percentunit",
        ("kv_usage",),
        "KV-cache usage (MindIE reports percent, 0-100).",
    ),
    Panel("Free KV blocks", "short", ("free_blocks_min",), "Lowest free KV-cache block count."),
)
# Signals whose max/median across peers is drawn (the load and pressure signals of step 1).
RATIO_SIGNALS: tuple[str, ...] = (
    "requests",
    "prompt_tokens",
    "generation_tokens",
    "running",
    "waiting",
)


def _scopes(opts: DashboardOptions, level: Level) -> list[Scope]:
    sel = variable_matchers(opts)
    return [
        Scope(DIALECTS[d], level, opts.group_by, sel)
        for d in opts.dialects
        if level in levels(DIALECTS[d])
    ]


def signal_query(opts: DashboardOptions, level: Level, signal: str) -> str | None:
    """Per-unit PromQL of ``signal`` over every chosen dialect (``or``), None if none has it."""
    parts = [e for s in _scopes(opts, level) if (e := unit_expr(s, signal, RATE_WINDOW))]
    if not parts:
        return None
    return parts[0] if len(parts) == 1 else " or ".join(f"({p})" for p in parts)


def panel_query(opts: DashboardOptions, level: Level, panel: Panel) -> str | None:
    exprs = [signal_query(opts, level, s) for s in panel.signals]
    if any(e is None for e in exprs):
        return None
    if len(exprs) == 1:
        return exprs[0]
    *num, den = exprs
    return f"({' + '.join(f'({e})' for e in num)}) / ({den})"


def _peer_labels(opts: DashboardOptions, level: Level) -> tuple[str, ...]:
    return opts.group_by if level is Level.INSTANCE else (*opts.group_by, UNIT_LABEL)


def ratio_query(opts: DashboardOptions, level: Level, signal: str) -> str | None:
    """max / median of ``signal`` across the units of each peer group."""
    x = signal_query(opts, level, signal)
    if x is None:
        return None
    by = ", ".join(_peer_labels(opts, level))
    return f"max by ({by}) ({x}) / quantile by ({by}) (0.5, {x})"


def legend(opts: DashboardOptions, level: Level) -> str:
    group = " ".join(f"{{{{{lab}}}}}" for lab in opts.group_by)
    if level is Level.INSTANCE:
        return f"{group} {{{{{UNIT_LABEL}}}}}".strip()
    ranks = sorted({r for d in opts.dialects if (r := DIALECTS[d].rank_label)})
    rank = "".join(f"{{{{{r}}}}}" for r in ranks)
    return f"{group} {{{{{UNIT_LABEL}}}}} dp{rank}".strip()


def _unit_names(opts: DashboardOptions) -> str:
    """A selector matching any chosen dialect's running gauge (every unit has one), for the
    variable queries."""
    names = sorted(
        {
            s
            for d in opts.dialects
            for a in DIALECTS[d].roles.get("running", ())
            for s in required_samples(a, ROLES["running"].kind)
        }
    )
    return f"__name__=~{quote('|'.join(name_regex(n) for n in names))}"


def variable_labels(opts: DashboardOptions) -> tuple[str, ...]:
    """The labels with a dashboard variable, in order (each filters the ones after it)."""
    return (*opts.group_by, UNIT_LABEL)


def _variables(opts: DashboardOptions) -> Iterable[Any]:
    from grafana_foundation_sdk.builders.dashboard import DatasourceVariable, QueryVariable
    from grafana_foundation_sdk.models.dashboard import (
        VariableOption,
        VariableRefresh,
        VariableSort,
    )

    yield DatasourceVariable(DS_VAR).label("Data source").type("prometheus")
    names = _unit_names(opts)
    chosen: list[str] = []
    for lab in variable_labels(opts):
        filters = ", ".join([names, *(f'{c}=~"${c}"' for c in chosen)])
        yield (
            QueryVariable(lab)
            .label(lab)
            .datasource(datasource())
            .query(f"label_values({{{filters}}}, {lab})")
            .refresh(VariableRefresh.ON_TIME_RANGE_CHANGED)
            .sort(VariableSort.ALPHABETICAL_ASC)
            .multi(True)
            .include_all(True)
            .all_value(".*")
            .current(VariableOption(selected=True, text="All", value="$__all"))
        )
        chosen.append(lab)


def _row(opts: DashboardOptions, level: Level) -> Iterable[Any]:
    leg = legend(opts, level)
    for p in PANELS:
        expr = panel_query(opts, level, p)
        if expr is not None:
            yield timeseries_panel(p.title, p.unit, p.description, [(expr, leg)])
    group = " ".join(f"{{{{{lab}}}}}" for lab in _peer_labels(opts, level))
    targets = [
        (q, f"{group} {sig}".strip())
        for sig in RATIO_SIGNALS
        if (q := ratio_query(opts, level, sig)) is not None
    ]
    hot = opts.thresholds.hot_ratio  # the line a unit crosses to be hot (rules, diagnose)
    peers = "instances of a peer group" if level is Level.INSTANCE else "ranks of an instance"
    yield _hot_line(
        timeseries_panel(
            "Max / median across peers",
            "short",
            f"Largest unit over the median of the {peers}; 1 is balanced, {hot:g} (hot_ratio, the "
            "dashed line) is where a unit starts to count as hot.",
            targets,
        ),
        hot,
    )


def _hot_line(panel: Any, hot: float) -> Any:
    """The panel with ``hot_ratio`` drawn as a dashed threshold line (red from it up)."""
    from grafana_foundation_sdk.builders.common import GraphThresholdsStyleConfig
    from grafana_foundation_sdk.builders.dashboard import ThresholdsConfig
    from grafana_foundation_sdk.models.common import GraphTresholdsStyleMode
    from grafana_foundation_sdk.models.dashboard import Threshold, ThresholdsMode

    steps = [Threshold(value=None, color="green"), Threshold(value=hot, color="red")]
    return panel.thresholds(
        ThresholdsConfig().mode(ThresholdsMode.ABSOLUTE).steps(steps)
    ).thresholds_style(GraphThresholdsStyleConfig().mode(GraphTresholdsStyleMode.DASHED))


def alerts_annotation(opts: DashboardOptions) -> str:
    names = "|".join(ALERTS)
    matchers = ", ".join(
        [f'alertname=~"{names}"', 'alertstate="firing"']
        + [f'{lab}=~"${lab}"' for lab in opts.group_by]
    )
    return f"ALERTS{{{matchers}}}"


def build_dashboard(opts: DashboardOptions) -> dict[str, Any]:
    """The dashboard model as a JSON-ready dict."""
    from grafana_foundation_sdk.builders.dashboard import AnnotationQuery, Dashboard, Row
    from grafana_foundation_sdk.cog.encoder import JSONEncoder
    from grafana_foundation_sdk.models.dashboard import DashboardCursorSync

    dash = (
        Dashboard(opts.title)
        .uid(UID)
        .tags(["skewscope", "llm", "load-skew"])
        .description("Per-unit signals of the skewscope diagnosis method, hot against idle.")
        .time("now-3h", "now")
        .refresh("1m")
        .tooltip(DashboardCursorSync.CROSSHAIR)
        .annotation(
            AnnotationQuery()
            .name("skewscope alerts")
            .datasource(datasource())
            .enable(True)
            .icon_color("red")
            .expr(alerts_annotation(opts))
        )
    )
    for v in _variables(opts):
        dash = dash.with_variable(v)
    titles = {Level.INSTANCE: "Instances", Level.DP: "DP ranks (sibling ranks of an instance)"}
    for level in (Level.INSTANCE, Level.DP):
        panels = list(_row(opts, level)) if _scopes(opts, level) else []
        if not panels:
            continue
        dash = dash.with_row(Row(titles[level]))
        for panel in panels:
            dash = dash.with_panel(panel)
    from skewscope.monitor.pd_dashboard import ROW_TITLE, pd_panels

    pools = list(pd_panels(opts, RATE_WINDOW))  # a prefill/decode fleet's pools side by side
    if pools:
        dash = dash.with_row(Row(ROW_TITLE))
        for panel in pools:
            dash = dash.with_panel(panel)
    model: dict[str, Any] = json.loads(json.dumps(dash.build(), cls=JSONEncoder))
    return model


def render_dashboard(opts: DashboardOptions) -> str:
    return json.dumps(build_dashboard(opts), indent=2) + "\n"
