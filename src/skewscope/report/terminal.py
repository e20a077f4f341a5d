"""Readable terminal report (rich), at any width from 80 columns up.

Numbers are never cut: value columns do not wrap, and the per-unit table is split into several
tables (each repeating the unit column) when all its columns do not fit the width; when not even
one value column fits beside a unit id, each unit becomes a stacked block of ``metric  value``
lines. Every piece of user content (unit ids, paths, notes) goes through ``fmt.clean``/``fmt.name``
and into ``Text`` objects, so neither control sequences nor rich markup in a folder name or label
reach the terminal.
"""

from __future__ import annotations

import io

from rich.cells import cell_len
from rich.console import Console, Group, RenderableType
from rich.panel import Panel
from rich.table import Table
from rich.text import Text

from skewscope.catalogue import Role, Severity, Verdict
from skewscope.report import document, fmt
from skewscope.report.model import Finding, Report, UnitReport

VERDICT_STYLE = {
    Verdict.IMBALANCED: "bold red",
    Verdict.BALANCED: "bold green",
    Verdict.INSUFFICIENT_DATA: "yellow",
}
SEVERITY_STYLE = {Severity.HIGH: "bold red", Severity.MEDIUM: "yellow", Severity.LOW: "cyan"}
ROLE_STYLE = {Role.HOT: "red", Role.STALLED: "bold red", Role.STARVED: "blue"}

DEFAULT_WIDTH = 140  # when the output is not a terminal that tells its width
MIN_WIDTH = 40  # narrower consoles are laid out as if this wide
_UNITS_TITLE = "Per-unit load and impact (judged windows)"
_HOT_HEADER_MAX = 16  # a longer unit id heads the finding's value column as "unit"
_CELL_OVERHEAD = 3  # a bordered table cell: one space each side plus the separator


def render(report: Report, console: Console) -> None:
    console.print(_body(report, max(console.width, MIN_WIDTH)))


def render_text(report: Report, *, width: int | None = None, color: bool = False) -> str:
    """The report as text; with ``color``, ANSI styles for a terminal."""
    console = Console(
        record=True,
        width=max(width or DEFAULT_WIDTH, MIN_WIDTH),
        file=io.StringIO(),
        force_terminal=color,
        color_system="standard" if color else None,
    )
    render(report, console)
    return console.export_text(styles=color)


def _body(report: Report, width: int, nested: bool = False) -> Group:
    parts: list[RenderableType] = []
    title = Text(document.headline(report), style=VERDICT_STYLE.get(report.verdict, ""))
    parts.append(
        Panel(
            Group(title, Text(fmt.scope(report), style="dim")),
            title="skewscope" if not nested else "DP drill-down",
        )
    )
    for f in report.findings:
        parts.append(_finding(f))
    if report.fleet:
        parts.append(_fleet(report))
    if report.units:
        parts.extend(_units(report, width))
    if report.gateway:
        parts.append(_gateway(report))
    for e in report.episodes:
        parts.append(Text(f"episode: {fmt.episode_line(e)}", style="dim"))
    for line in document.lines(report.transient):
        parts.append(Text(f"· {fmt.clean(line)}", style="dim"))
    for line in document.footer_notes(report):
        parts.append(Text(f"note: {line}", style="yellow"))
    for d in report.drilldown:
        parts.append(_body(d, width, nested=True))
    if not nested and report.thresholds:
        parts.append(Text(fmt.thresholds_line(report), style="dim"))
    return Group(*parts)


def _gateway(report: Report) -> Table:
    assert report.gateway is not None
    table = Table(
        title=fmt.gateway_title(report.gateway),
        title_justify="left",
        show_header=True,
        header_style="bold",
        box=None,
        pad_edge=False,
    )
    for col in fmt.GATEWAY_COLUMNS:
        table.add_column(
            col,
            justify="left" if col in ("upstream", "unit", "top keys") else "right",
            overflow="fold",
        )
    for row in fmt.gateway_rows(report.gateway):
        table.add_row(*row)
    return table


def _finding(f: Finding) -> Panel:
    table = Table(show_header=True, header_style="bold", box=None, pad_edge=False)
    table.add_column("metric", min_width=12)  # the only column that may wrap
    ids = fmt.names(f.units)  # long ids are in the panel title already: keep the numbers whole
    table.add_column(
        Text(ids if cell_len(ids) <= _HOT_HEADER_MAX else "unit"),
        justify="right",
        style="bold",
        no_wrap=True,
    )
    table.add_column("peers (median)", justify="right", no_wrap=True)
    table.add_column("unit / peers", justify="right", no_wrap=True)
    for row in f.side_by_side:
        hot = fmt.value(row.metric, row.hot, row.hot_bound)
        ref = fmt.value(row.metric, row.reference, row.reference_bound)
        if hot == "—" and ref == "—":
            continue
        table.add_row(Text(fmt.label(row.metric)), hot, ref, fmt.ratio(row.ratio))
    causes = Text(
        "\n".join(
            x
            for x in (
                fmt.finding_when(f),
                "Likely cause: " + "; or ".join(fmt.clean(t) for t in document.cause_titles(f)),
            )
            if x
        )
    )
    actions = Text("\n".join(f"→ {fmt.clean(a)}" for a in document.actions(f)), style="green")
    summary = Text(fmt.clean(document.summary(f)))
    return Panel(
        Group(summary, causes, actions, *([table] if table.rows else [])),
        title=Text(fmt.finding_title(f), style=SEVERITY_STYLE.get(f.severity, "")),
        title_align="left",
    )


def _fleet(report: Report) -> RenderableType:
    table = Table(title=Text(fmt.fleet_line(report)), title_justify="left", header_style="bold")
    for i, head in enumerate(fmt.FLEET_HEADER):
        table.add_column(head, justify="left" if i == 0 else "right", no_wrap=i > 0)
    for row in fmt.fleet_rows(report):
        table.add_row(Text(row[0]), *row[1:])
    return table


def _unit_columns(units: tuple[UnitReport, ...]) -> list[tuple[str, list[str]]]:
    """(header, one cell per unit) for every column after the unit id."""
    cols = [("role", [fmt.role(u) for u in units]), ("hot %", [fmt.hot_share(u) for u in units])]
    cols += [
        (fmt.short_label(k), [fmt.value(k, u.metrics.get(k), u.bounds.get(k, "")) for u in units])
        for k in fmt.UNIT_COLUMNS
    ]
    return cols


def _units(report: Report, width: int) -> list[RenderableType]:
    units = fmt.table_units(report)
    out: list[RenderableType] = [Text(_UNITS_TITLE, style="bold")]
    out += column_tables(
        "unit",
        [fmt.name(u.unit) for u in units],
        _unit_columns(units),
        width,
        [ROLE_STYLE.get(u.role, "") for u in units],
    )
    return out


def column_tables(
    key_header: str,
    keys: list[str],
    cols: list[tuple[str, list[str]]],
    width: int,
    styles: list[str],
) -> list[RenderableType]:
    """A table of ``keys`` (first column) and ``cols`` (header, one cell per key) that fits
    ``width``: split into several tables each repeating the key column when all columns do not
    fit, or one stacked block per key when not even one value column fits beside a key. The
    first value column is left-aligned (a label such as a role), the others right-aligned."""
    need = [max(cell_len(h), *(cell_len(c) for c in cells)) + _CELL_OVERHEAD for h, cells in cols]
    key_w = max(cell_len(key_header), *(cell_len(k) for k in keys)) + _CELL_OVERHEAD + 1
    if key_w + min(need) > width:  # a key fills the line: one block per key
        return _stacked(keys, cols, styles)
    groups: list[list[int]] = [[]]
    used = key_w
    for i, w in enumerate(need):
        if groups[-1] and used + w > width:
            groups.append([])
            used = key_w
        groups[-1].append(i)
        used += w
    out: list[RenderableType] = []
    for group in groups:
        table = Table(header_style="bold")
        table.add_column(key_header, no_wrap=True)
        for i in group:
            table.add_column(cols[i][0], justify="left" if i == 0 else "right", no_wrap=True)
        for row, key in enumerate(keys):
            table.add_row(Text(key), *(cols[i][1][row] for i in group), style=styles[row])
        out.append(table)
    return out


def _stacked(
    keys: list[str], cols: list[tuple[str, list[str]]], styles: list[str]
) -> list[RenderableType]:
    out: list[RenderableType] = []
    for row, key in enumerate(keys):
        out.append(Text(key, style=styles[row] or "bold"))
        grid = Table.grid(padding=(0, 2))
        grid.add_column(no_wrap=True)
        grid.add_column(justify="right", no_wrap=True)
        for header, cells in cols:
            grid.add_row(f"  {header}", cells[row])
        out.append(grid)
    return out
