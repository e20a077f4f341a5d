"""Markdown report, for tickets and pull requests."""

from __future__ import annotations

from skewscope.report import fmt
from skewscope.report.model import Finding, Report


def render_text(report: Report, *, width: int | None = None, color: bool = False) -> str:
    return render(report) + "\n"


def render(report: Report, heading: str = "#") -> str:
    out = [f"{heading} skewscope report", "", f"**{fmt.headline(report)}**", "",
           fmt.scope(report), ""]
    for f in report.findings:
        out.extend(_finding(f, heading + "#"))
    if report.units:
        out.extend(_units(report, heading + "#"))
    if report.transient:
        out.append(f"{heading}# Dismissed as jitter")
        out.extend(f"- {t}" for t in report.transient)
        out.append("")
    notes = fmt.footer_notes(report)
    if notes:
        out.append(f"{heading}# Notes")
        out.extend(f"- {n}" for n in notes)
        out.append("")
    for d in report.drilldown:
        out.append(render(d, heading + "#"))
    return "\n".join(out)


def _finding(f: Finding, h: str) -> list[str]:
    lines = [f"{h} {fmt.finding_title(f)}", "", f.summary, "",
             "Likely cause: " + "; or ".join(c.title for c in f.root_causes), "",
             "Actions:"]
    lines.extend(f"- {a}" for a in f.actions)
    lines.extend(["", f"| metric | {', '.join(f.units)} | peers (median) | unit / peers |",
                  "|---|---:|---:|---:|"])
    for key, hot, ref, ratio in f.side_by_side:
        if fmt.value(key, hot) == "—" and fmt.value(key, ref) == "—":
            continue
        lines.append(f"| {fmt.label(key)} | {fmt.value(key, hot)} | {fmt.value(key, ref)} "
                     f"| {fmt.ratio(ratio)} |")
    lines.append("")
    return lines


def _units(report: Report, h: str) -> list[str]:
    cols = ["unit", "role", "hot %", *(fmt.short_label(k) for k in fmt.UNIT_COLUMNS)]
    lines = [f"{h} Units", "", "| " + " | ".join(cols) + " |",
             "|" + "---|" * 3 + "---:|" * len(fmt.UNIT_COLUMNS)]
    for u in report.units:
        share = "—" if u.hot_share != u.hot_share else f"{u.hot_share:.0%}"
        vals = [fmt.value(k, u.metrics.get(k)) for k in fmt.UNIT_COLUMNS]
        lines.append("| " + " | ".join([u.unit, u.role, share, *vals]) + " |")
    lines.append("")
    return lines
