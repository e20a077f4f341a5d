"""Markdown report, for tickets and pull requests."""

from __future__ import annotations

import re

from skewscope.report import compare_text, document, fmt
from skewscope.report.comparison import Comparison
from skewscope.report.model import Finding, Report

_MD_SPECIAL = re.compile(r"([\\`*_\[\]|#])")


def render_text(report: Report, *, width: int | None = None, color: bool = False) -> str:
    return render(report) + "\n"


def render(report: Report, heading: str = "#") -> str:
    out = [
        f"{heading} skewscope report",
        "",
        f"**{_text(document.headline(report))}**",
        "",
        _text(fmt.scope(report)),
        "",
    ]
    for f in report.findings:
        out.extend(_finding(f, heading + "#"))
    if report.units:
        out.extend(_units(report, heading + "#"))
    if report.gateway:
        out.append(f"{heading}# {_text(fmt.gateway_title(report.gateway))}")
        out.extend(["", _row(list(fmt.GATEWAY_COLUMNS)), "|---|---|" + "---:|" * 5 + "---|"])
        out.extend(_row(r) for r in fmt.gateway_rows(report.gateway))
        out.append("")
    if report.episodes:
        out.append(f"{heading}# Transient episodes")
        out.extend(f"- {_text(fmt.episode_line(e))}" for e in report.episodes)
        out.append("")
    if report.transient:
        out.append(f"{heading}# Dismissed as jitter")
        out.extend(f"- {_text(fmt.clean(t))}" for t in document.lines(report.transient))
        out.append("")
    notes = document.footer_notes(report)
    if notes:
        out.append(f"{heading}# Notes")
        out.extend(f"- {_text(n)}" for n in notes)
        out.append("")
    for d in report.drilldown:
        out.append(render(d, heading + "#"))
    if heading == "#" and report.thresholds:
        out.extend(["", f"_{_text(fmt.thresholds_line(report))}_", ""])
    return "\n".join(out)


def _text(text: str) -> str:
    """Report text as Markdown: one line (``fmt.clean`` ran before), with the characters
    Markdown would act on escaped — a ``|`` in a unit id must not split a table cell, a ``<`` not
    open an HTML tag, an ``*`` not start emphasis."""
    return _MD_SPECIAL.sub(r"\\\1", text).replace("<", "&lt;").replace(">", "&gt;")


def _row(cells: list[str]) -> str:
    return "| " + " | ".join(_text(c) for c in cells) + " |"


def _finding(f: Finding, h: str) -> list[str]:
    when = [_text(fmt.finding_when(f)), ""] if f.timeline else []
    cause = "Likely cause: " + "; or ".join(fmt.clean(t) for t in document.cause_titles(f))
    lines = [
        f"{h} {_text(fmt.finding_title(f))}",
        "",
        _text(fmt.clean(document.summary(f))),
        "",
        *when,
        _text(cause),
        "",
        "Actions:",
    ]
    lines.extend(f"- {_text(fmt.clean(a))}" for a in document.actions(f))
    if f.side_by_side:  # a fleet-wide pattern has no single hot unit to put side by side
        lines.extend(
            [
                "",
                _row(["metric", fmt.names(f.units), "peers (median)", "unit / peers"]),
                "|---|---:|---:|---:|",
            ]
        )
    for row in f.side_by_side:
        hot = fmt.value(row.metric, row.hot, row.hot_bound)
        ref = fmt.value(row.metric, row.reference, row.reference_bound)
        if hot == "—" and ref == "—":
            continue
        lines.append(_row([fmt.label(row.metric), hot, ref, fmt.ratio(row.ratio)]))
    lines.append("")
    return lines


def _units(report: Report, h: str) -> list[str]:
    cols = ["unit", "role", "hot %", *(fmt.short_label(k) for k in fmt.UNIT_COLUMNS)]
    lines = [f"{h} Units", ""]
    if report.fleet:
        lines.extend(
            [
                _text(fmt.fleet_line(report)),
                "",
                _row(list(fmt.FLEET_HEADER)),
                "|---|" + "---:|" * (len(fmt.FLEET_HEADER) - 1),
            ]
        )
        lines.extend(_row(row) for row in fmt.fleet_rows(report))
        lines.append("")
    lines.extend([_row(cols), "|" + "---|" * 3 + "---:|" * len(fmt.UNIT_COLUMNS)])
    for u in fmt.table_units(report):
        vals = [fmt.value(k, u.metrics.get(k), u.bounds.get(k, "")) for k in fmt.UNIT_COLUMNS]
        lines.append(_row([fmt.name(u.unit), fmt.role(u), fmt.hot_share(u), *vals]))
    lines.append("")
    return lines


def render_comparison(c: Comparison, *, width: int | None = None, color: bool = False) -> str:
    ct = compare_text
    out = [
        "# skewscope compare",
        "",
        f"**{_text(ct.headline(c))}**",
        "",
        f"- {_text(ct.side_line('before', c.before))}",
        f"- {_text(ct.side_line('after', c.after))}",
        f"- hot/peer follows: {_text(fmt.names(c.focus_units) or '—')}",
        *(f"- {_text(line)}" for line in ct.gateway_lines(c)),
        "",
        _row(
            [
                "signal",
                *(f"{h} {side}" for h in ct.HEADER for side in ("before", "after")),
                "verdict",
            ]
        ),
        "|---|" + "---:|---:|" * len(ct.HEADER) + "---|",
    ]
    for s in c.signals:
        pairs = [
            v
            for pair in zip(ct.cells(s, s.before), ct.cells(s, s.after), strict=True)
            for v in pair
        ]
        out.append(_row([ct.signal_label(s), *pairs, s.verdict]))
    if c.notes:
        out.extend(["", "## Notes", *(f"- {_text(fmt.clean(n))}" for n in document.lines(c.notes))])
    return "\n".join(out) + "\n"
