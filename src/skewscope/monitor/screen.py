"""What ``watch`` shows: a rich live view, or one log line per run (``--no-tui``).

Both read a ``WatchStatus`` only (the last good Report plus run bookkeeping); ratios, kinds and
"hot since" come from the Report and the incident tracker, nothing is computed here.
"""

from __future__ import annotations

import datetime as dt
import math
from collections.abc import Sequence

from rich.console import Group, RenderableType
from rich.panel import Panel
from rich.table import Table
from rich.text import Text

from skewscope.catalogue import Kind
from skewscope.errors import one_line
from skewscope.monitor.incidents import Incident
from skewscope.monitor.status import WatchStatus
from skewscope.monitor.units import gateway_shares, hot_units
from skewscope.report import document, fmt
from skewscope.report.facts import NoteCode
from skewscope.report.terminal import VERDICT_STYLE

BARS = "▁▂▃▄▅▆▇█"


def clock(epoch_s: float | None) -> str:
    """Local wall-clock time of day, as an operator reads it on screen."""
    if epoch_s is None or not math.isfinite(epoch_s):
        return "—"
    return dt.datetime.fromtimestamp(epoch_s).strftime("%H:%M:%S")


def iso(epoch_s: float) -> str:
    return dt.datetime.fromtimestamp(epoch_s, tz=dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def sparkline(values: Sequence[float]) -> str:
    """One bar per window, scaled from 0 to the series' maximum; a gap where not judged."""
    finite = [v for v in values if math.isfinite(v)]
    top = max(finite, default=0.0)
    if top <= 0:
        return "".join(" " if not math.isfinite(v) else BARS[0] for v in values)
    out = []
    for v in values:
        if not math.isfinite(v):
            out.append(" ")
        else:
            out.append(BARS[min(len(BARS) - 1, int(max(v, 0.0) / top * (len(BARS) - 1)))])
    return "".join(out)


def _ratios(load_ratios: dict[str, float]) -> str:
    parts = [
        f"{k.replace('total_', '').replace('_mean_ms', '').replace('_', ' ')} {fmt.ratio(v)}"
        for k, v in load_ratios.items()
        if math.isfinite(v)
    ]
    return ", ".join(parts) or "—"


def _state_line(st: WatchStatus) -> Text:
    line = Text()
    line.append(f"run {st.runs}", style="bold")
    if st.duration_s is not None:
        line.append(f" · took {st.duration_s:.2f}s")
    line.append(f" · every {st.every_s:g}s over the last {st.last_s:g}s")
    if st.report_at is not None:
        line.append(f" · report of {clock(st.report_at)}")
    errors = sum(st.errors.values())
    if errors:
        counts = ", ".join(f"{k} {v}" for k, v in st.errors.items() if v)
        line.append(f" · errors: {counts}", style="red")
    return line


def render(st: WatchStatus) -> RenderableType:
    """The live view: verdict, hot units with kind, ratios, hot since and a sparkline."""
    parts: list[RenderableType] = []
    if st.report is None:
        head = Text("waiting for the first good run", style="yellow")
    else:
        head = Text(document.headline(st.report), style=VERDICT_STYLE.get(st.report.verdict, ""))
    sub = Group(head, Text(one_line(st.source), style="dim"), _state_line(st))
    parts.append(Panel(sub, title="skewscope watch"))
    if st.last_error:
        shown = f"showing the report of {clock(st.report_at)}" if st.report else "no report yet"
        parts.append(
            Text(
                f"last run failed at {clock(st.last_error_at)}: {st.last_error} ({shown})",
                style="bold red",
            )
        )
    for p in st.problems:
        parts.append(Text(f"target failing: {one_line(p)}", style="red"))
    if st.warming_up:
        parts.append(Text(st.warming_up, style="yellow"))
    if st.report is not None:
        hot = hot_units(st.report)
        if hot:
            since = {i.key: i.onset_s for i in st.open_incidents}
            shares = gateway_shares(st.report)
            table = Table(expand=False)
            cols = ["unit", "level", "kind", "unit / peers", "hot since", "heat per window"]
            for col in cols + (["gateway share"] if shares else []):
                table.add_column(col)
            for h in hot:  # cells as Text: a unit id is user content, never rich markup
                share = shares.get((h.unit, h.level))
                extra = [f"{share[1]:.0%}" if share else "—"] if shares else []
                table.add_row(
                    Text(fmt.name(h.unit)),
                    h.level,
                    h.kind,
                    _ratios(h.report.load_ratios),
                    clock(since.get((h.unit, h.level))),
                    Text(sparkline(h.report.heat_by_window)),
                    *extra,
                )
            parts.append(table)
        if st.report.starved_units:
            parts.append(Text("starved: " + fmt.names(st.report.starved_units), style="yellow"))
        if any(n.code == NoteCode.NO_PROGRESS for n in st.report.notes):
            parts.append(
                Text(
                    "no progress anywhere: the whole service stopped or its metrics "
                    "froze (not skew)",
                    style="yellow",
                )
            )
        for note in document.footer_notes(st.report)[:3]:
            parts.append(Text(f"note: {one_line(note)}", style="dim"))
    return Group(*parts)


def log_line(st: WatchStatus, now: float) -> str:
    """One line per run for a service log."""
    head = f"{iso(now)} run={st.runs}"
    took = f" took={st.duration_s:.2f}s" if st.duration_s is not None else ""
    if st.last_error:
        kept = f"keeping report of {iso(st.report_at)}" if st.report_at else "no report yet"
        return f'{head} error="{st.last_error}" ({kept}){took}'
    if st.warming_up:
        return f"{head} {one_line(st.warming_up)}{took}"
    if st.report is None:
        return f"{head} no report{took}"
    since = {i.key: i.onset_s for i in st.open_incidents}
    hot = " ".join(
        f"{fmt.name(h.unit)}({h.level},{h.kind},{fmt.ratio(h.ratio)}"
        + (f",since {iso(since[(h.unit, h.level)])})" if (h.unit, h.level) in since else ")")
        for h in hot_units(st.report)
    )
    problems = f" failing_targets={len(st.problems)}" if st.problems else ""
    still = (
        " no_progress_anywhere"
        if any(n.code == NoteCode.NO_PROGRESS for n in st.report.notes)
        else ""
    )
    return (
        f"{head} verdict={st.report.verdict} hot=[{hot}] windows={st.report.windows}"
        f"{still}{problems}{took}"
    )


# ------------------------------------------------------------------------------------------------
# Incident history (``skewscope history``)


def _duration(seconds: float) -> str:
    s = round(seconds)
    return f"{s // 3600}h{s % 3600 // 60:02d}m" if s >= 3600 else f"{s // 60}m{s % 60:02d}s"


def peak_text(i: Incident) -> str:
    """An incident's peak ratio; a stalled unit has none (it finished nothing to compare)."""
    if i.kind == Kind.STALLED and not math.isfinite(i.peak_ratio):
        return "stalled"
    return fmt.ratio(i.peak_ratio)


def incident_table(incidents: Sequence[Incident]) -> Table:
    table = Table(title=f"{len(incidents)} incident(s), newest first")
    for col in ("id", "unit", "level", "kind", "onset", "end", "lasted", "peak", "ended by"):
        table.add_column(col, justify="right" if col in ("id", "lasted", "peak") else "left")
    for i in incidents:
        end = iso(i.end_s) if i.end_s is not None else "ongoing"
        lasted = _duration((i.end_s if i.end_s is not None else i.last_seen_s) - i.onset_s)
        peak = peak_text(i)
        table.add_row(
            str(i.id),
            Text(fmt.name(i.unit)),
            Text(fmt.name(i.level)),
            Text(fmt.name(i.kind)),
            iso(i.onset_s),
            end,
            lasted,
            peak,
            Text(fmt.name(i.end_reason or "—")),
        )
    return table


def incident_detail(i: Incident) -> Panel:
    rows = [
        ("unit", fmt.name(i.unit)),
        ("level", fmt.name(i.level)),
        ("kind", fmt.name(i.kind)),
        ("onset", f"{iso(i.onset_s)} (first run that found it hot)"),
        ("last seen hot", iso(i.last_seen_s)),
        ("end", f"{iso(i.end_s)} ({i.end_reason})" if i.end_s is not None else "ongoing"),
        ("peak unit / peers", peak_text(i)),
        ("source", fmt.clean(i.source)),
    ]
    grid = Table.grid(padding=(0, 2))
    grid.add_column(style="bold")
    grid.add_column()
    for k, v in rows:  # stored text may come from any database: shown literally
        grid.add_row(k, Text(v))
    body: list[RenderableType] = [grid]
    if i.summary:
        body.append(Text(f"\nat the peak: {one_line(i.summary, 2000)}"))
    return Panel(Group(*body), title=f"incident {i.id}")
