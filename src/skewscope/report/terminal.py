"""Readable terminal report (rich)."""

from __future__ import annotations

import io

from rich.console import Console, Group
from rich.panel import Panel
from rich.table import Table
from rich.text import Text

from skewscope.report import fmt
from skewscope.report.model import Finding, Report

VERDICT_STYLE = {"imbalanced": "bold red", "balanced": "bold green", "insufficient_data": "yellow"}
SEVERITY_STYLE = {"high": "bold red", "medium": "yellow", "low": "cyan"}


DEFAULT_WIDTH = 140  # when the output is not a terminal that tells its width


def render(report: Report, console: Console) -> None:
    console.print(_body(report))


def render_text(report: Report, *, width: int | None = None, color: bool = False) -> str:
    """The report as text; with ``color``, ANSI styles for a terminal."""
    console = Console(record=True, width=width or DEFAULT_WIDTH, file=io.StringIO(),
                      force_terminal=color, color_system="standard" if color else None)
    render(report, console)
    return console.export_text(styles=color)


def _body(report: Report, nested: bool = False) -> Group:
    parts: list[object] = []
    title = Text(fmt.headline(report), style=VERDICT_STYLE.get(report.verdict, ""))
    parts.append(Panel(Group(title, Text(fmt.scope(report), style="dim")),
                       title="skewscope" if not nested else "DP drill-down"))
    for f in report.findings:
        parts.append(_finding(f))
    if report.units:
        parts.append(_units(report))
    for line in report.transient:
        parts.append(Text(f"· {line}", style="dim"))
    for line in fmt.footer_notes(report):
        parts.append(Text(f"note: {line}", style="yellow"))
    for d in report.drilldown:
        parts.append(_body(d, nested=True))
    return Group(*parts)  # type: ignore[arg-type]


def _finding(f: Finding) -> Panel:
    table = Table(show_header=True, header_style="bold", box=None, pad_edge=False)
    table.add_column("metric")
    table.add_column(", ".join(f.units), justify="right", style="bold")
    table.add_column("peers (median)", justify="right")
    table.add_column("unit / peers", justify="right")
    for key, hot, ref, ratio in f.side_by_side:
        if fmt.value(key, hot) == "—" and fmt.value(key, ref) == "—":
            continue
        table.add_row(fmt.label(key), fmt.value(key, hot), fmt.value(key, ref),
                      fmt.ratio(ratio))
    causes = Text("Likely cause: " + "; or ".join(c.title for c in f.root_causes))
    actions = Text("\n".join(f"→ {a}" for a in f.actions), style="green")
    return Panel(
        Group(Text(f.summary), causes, actions, table),
        title=Text(fmt.finding_title(f), style=SEVERITY_STYLE.get(f.severity, "")),
        title_align="left",
    )


def _units(report: Report) -> Table:
    table = Table(title="Per-unit load and impact (judged windows)", header_style="bold")
    table.add_column("unit", no_wrap=True)  # ids like 127.0.0.1:inst-0/dp0 must stay whole
    table.add_column("role")
    table.add_column("hot %", justify="right")
    for key in fmt.UNIT_COLUMNS:
        table.add_column(fmt.short_label(key), justify="right")
    for u in report.units:
        style = {"hot": "red", "starved": "blue"}.get(u.role, "")
        share = "—" if u.hot_share != u.hot_share else f"{u.hot_share:.0%}"
        table.add_row(u.unit, u.role, share,
                      *(fmt.value(k, u.metrics.get(k)) for k in fmt.UNIT_COLUMNS), style=style)
    return table
