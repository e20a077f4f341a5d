"""The comparison (``skewscope compare``) as a terminal table, and the wording every compare
renderer shares (headline, side lines, cells)."""

from __future__ import annotations

import io
import math

from rich.console import Console, Group
from rich.panel import Panel
from rich.table import Table
from rich.text import Text

from skewscope.catalogue import SERIES_BY_KEY
from skewscope.report import fmt
from skewscope.report.comparison import Comparison, Figures, Side, SignalComparison

VERDICT_STYLE = {"converged": "bold green", "improved": "bold cyan", "unchanged": "yellow",
                 "worse": "bold red"}
DEFAULT_WIDTH = 140


def headline(c: Comparison) -> str:
    """One sentence: did the fix converge?"""
    counts = {v: sum(1 for s in c.signals if s.verdict == v)
              for v in ("converged", "improved", "unchanged", "worse")}
    tally = ", ".join(f"{n} {v}" for v, n in counts.items() if n)
    return f"{c.verdict.capitalize()}: {tally or 'no signal on both sides'} " \
           f"(after: {c.after.verdict})."


def side_line(side: str, s: Side) -> str:
    hot = fmt.names(s.hot_units + s.starved_units) or "none"
    return (f"{side}: {fmt.name(s.label)} · {s.verdict} (hot/starved: {hot}) · "
            f"{len(s.units)} units · {s.windows} windows of {s.window_s:g} s · "
            f"{fmt.span(s.start_s, s.end_s)}")


def signal_label(s: SignalComparison) -> str:
    m = SERIES_BY_KEY[s.signal]
    return m.label if m.unit == "frac" else f"{m.label} ({m.unit})"


def cells(s: SignalComparison, f: Figures) -> list[str]:
    unit = "kv_usage" if s.signal == "kv_usage" else ""
    return [fmt.ratio(f.hot_peer_ratio), fmt.ratio(f.max_median),
            f"{f.cv:.2f}" if math.isfinite(f.cv) else "—",
            f"{fmt.value(unit, f.p95)} / {fmt.value(unit, f.p99)}"]


HEADER = ("hot/peer", "max/median", "CV", "P95 / P99")


def render_comparison(c: Comparison, *, width: int | None = None, color: bool = False) -> str:
    console = Console(record=True, width=width or DEFAULT_WIDTH, file=io.StringIO(),
                      force_terminal=color, color_system="standard" if color else None)
    table = Table(header_style="bold", title="before → after, per signal")
    table.add_column("signal", no_wrap=True)
    for h in HEADER:
        table.add_column(f"{h} before", justify="right")
        table.add_column("after", justify="right")
    table.add_column("verdict")
    for s in c.signals:
        b, a = cells(s, s.before), cells(s, s.after)
        table.add_row(signal_label(s), *(v for pair in zip(b, a, strict=True) for v in pair),
                      Text(s.verdict, style=VERDICT_STYLE.get(s.verdict, "")))
    parts: list[object] = [Panel(Group(
        Text(headline(c), style=VERDICT_STYLE.get(c.verdict, "")),
        Text(side_line("before", c.before), style="dim"),
        Text(side_line("after", c.after), style="dim"),
        Text(f"hot/peer follows: {fmt.names(c.focus_units) or '—'}", style="dim"),
    ), title="skewscope compare"), table]
    parts.extend(Text(f"note: {fmt.clean(n)}", style="yellow") for n in c.notes)
    console.print(Group(*parts))  # type: ignore[arg-type]
    return console.export_text(styles=color)
