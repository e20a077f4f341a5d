"""The comparison (``skewscope compare``) as a terminal table, and the wording every compare
renderer shares (headline, side lines, cells)."""

from __future__ import annotations

import io
import math

from rich import box
from rich.console import Console, Group
from rich.panel import Panel
from rich.table import Table
from rich.text import Text

from skewscope.catalogue import SERIES_BY_KEY, CompareVerdict
from skewscope.report import document, fmt
from skewscope.report.comparison import Comparison, Figures, Side, SignalComparison

VERDICT_STYLE = {
    CompareVerdict.CONVERGED: "bold green",
    CompareVerdict.IMPROVED: "bold cyan",
    CompareVerdict.UNCHANGED: "yellow",
    CompareVerdict.WORSE: "bold red",
}
DEFAULT_WIDTH = 140


def headline(c: Comparison) -> str:
    """One sentence: did the fix converge?"""
    counts = {v: sum(1 for s in c.signals if s.verdict == v) for v in CompareVerdict}
    tally = ", ".join(f"{n} {v}" for v, n in counts.items() if n)
    return (
        f"{c.verdict.capitalize()}: {tally or 'no signal on both sides'} "
        f"(after: {c.after.verdict})."
    )


def side_line(side: str, s: Side) -> str:
    hot = fmt.names(s.hot_units + s.starved_units) or "none"
    return (
        f"{side}: {fmt.name(s.label)} · {s.verdict} (hot/starved: {hot}) · "
        f"{len(s.units)} units · {s.windows} windows of {fmt.seconds(s.window_s)} · "
        f"{fmt.span(s.start_s, s.end_s)}"
    )


def signal_label(s: SignalComparison) -> str:
    m = SERIES_BY_KEY[s.signal]
    return m.label if m.unit == "frac" else f"{m.label} ({m.unit})"


def cells(s: SignalComparison, f: Figures) -> list[str]:
    unit = "kv_usage" if s.signal == "kv_usage" else ""
    return [
        fmt.ratio(f.hot_peer_ratio),
        fmt.ratio(f.max_median),
        fmt.decimal(f.cv, 2) if math.isfinite(f.cv) else fmt.NOT_MEASURED,
        f"{fmt.value(unit, f.p95)} / {fmt.value(unit, f.p99)}",
    ]


HEADER = ("hot/peer", "max/median", "CV", "P95 / P99")


def gateway_lines(c: Comparison) -> list[str]:
    """Per followed unit, the gateway's share of requests before → after."""
    out = []
    for g in c.gateway:
        src = (
            g.source_before
            if g.source_before == g.source_after
            else f"{g.source_before or 'none'} → {g.source_after or 'none'}"
        )
        out.append(
            f"gateway share of {fmt.name(g.unit)} ({src}): "
            f"{_arrow(fmt.pct(g.before), fmt.pct(g.after))}"
        )
    return out


def _arrow(before: str, after: str) -> str:
    return f"{before} → {after}"


def render_comparison(c: Comparison, *, width: int | None = None, color: bool = False) -> str:
    """Two narrow tables (spread across units, fleet tail), each cell 'before → after', so the
    comparison reads from 80 columns."""
    console = Console(
        record=True,
        width=width or DEFAULT_WIDTH,
        file=io.StringIO(),
        force_terminal=color,
        color_system="standard" if color else None,
    )
    spread = Table(header_style="bold", title="across units, before → after", box=box.SIMPLE_HEAD)
    tail = Table(header_style="bold", title="fleet tail, before → after", box=box.SIMPLE_HEAD)
    for table in (spread, tail):
        table.add_column("signal", no_wrap=True)
    for h in ("hot/peer", "max/median", "CV"):
        spread.add_column(h, justify="right", no_wrap=True)
    spread.add_column("verdict", no_wrap=True)
    for h in ("P95", "P99"):
        tail.add_column(h, justify="right", no_wrap=True)
    for s in c.signals:
        b, a = cells(s, s.before), cells(s, s.after)
        short = SERIES_BY_KEY[s.signal].short
        spread.add_row(
            short,
            *(_arrow(p, q) for p, q in zip(b[:3], a[:3], strict=True)),
            Text(s.verdict, style=VERDICT_STYLE.get(s.verdict, "")),
        )
        unit = "kv_usage" if s.signal == "kv_usage" else ""
        tail.add_row(
            short,
            _arrow(fmt.value(unit, s.before.p95), fmt.value(unit, s.after.p95)),
            _arrow(fmt.value(unit, s.before.p99), fmt.value(unit, s.after.p99)),
        )
    parts: list[object] = [
        Panel(
            Group(
                Text(headline(c), style=VERDICT_STYLE.get(c.verdict, "")),
                Text(side_line("before", c.before), style="dim"),
                Text(side_line("after", c.after), style="dim"),
                Text(f"hot/peer follows: {fmt.names(c.focus_units) or '—'}", style="dim"),
                *(Text(line, style="dim") for line in gateway_lines(c)),
            ),
            title="skewscope compare",
        ),
        spread,
        tail,
    ]
    parts.extend(Text(f"note: {fmt.clean(n)}", style="yellow") for n in document.lines(c.notes))
    console.print(Group(*parts))  # type: ignore[arg-type]
    return console.export_text(styles=color)
