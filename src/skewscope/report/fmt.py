"""Value formatting and table layouts shared by the terminal and Markdown renderers."""

from __future__ import annotations

import datetime as dt
import math

from skewscope.catalogue import (
    BOUND_PREFIX,
    METRIC_BY_KEY,
    UNIT_COLUMNS,
    kind_title,
)
from skewscope.errors import one_line
from skewscope.report.facts import rounded
from skewscope.report.model import Episode, Finding, GatewayFacts, Report, UnitReport

__all__ = ["UNIT_COLUMNS"]  # re-exported for the renderers

TEXT_LIMIT = 2000  # characters of one summary or note; a unit id or label is bounded tighter
NAME_LIMIT = 200


def clean(text: str, limit: int = TEXT_LIMIT) -> str:
    """User content (unit ids from folder names or labels, paths, notes quoting files) as one
    bounded line with control characters escaped: an ESC/OSC sequence in a folder name must
    not reach the terminal raw, a newline must not break a table row."""
    return one_line(text, limit)


def name(text: str) -> str:
    """A unit id, label or path: bounded tighter than prose."""
    return one_line(text, NAME_LIMIT)


def names(units: tuple[str, ...] | list[str]) -> str:
    return ", ".join(name(u) for u in units)


def role(u: UnitReport) -> str:
    """A unit's role, with its pool in a prefill/decode fleet: "normal · decode"."""
    return f"{u.role} · {name(u.pool)}" if u.pool else u.role


def hot_share(u: UnitReport) -> str:
    return pct(u.hot_share)


NOT_MEASURED = "—"  # a table cell; a sentence says "n/a" (``missing=``)


def metric_text(key: str, v: float) -> str:
    """A finite value of metric ``key`` as every table and sentence prints it: a fraction as a
    percentage, else by magnitude ``12,345`` / ``12.3`` / ``1.23``."""
    unit = METRIC_BY_KEY[key].unit if key in METRIC_BY_KEY else ""
    if unit == "frac":
        return f"{v:.0%}"
    return f"{v:,.0f}" if abs(v) >= 100 else f"{v:.1f}" if abs(v) >= 10 else f"{v:.2f}"


def value(key: str, v: float | None, bound: str = "", missing: str = NOT_MEASURED) -> str:
    """Format one metric value by its unit; '—' marks a value that was not measured, and a
    histogram bucket bound reads '< 300' (at most) or '> 10,000' (the +Inf bucket)."""
    if v is None or (isinstance(v, float) and not math.isfinite(v)):
        return missing
    return BOUND_PREFIX.get(bound, "") + metric_text(key, v)


def quantity(key: str, v: float, bound: str = "", missing: str = "n/a") -> str:
    """A metric value in a sentence: as in the tables, with ' ms' after a latency."""
    text = value(key, v, bound, missing)
    unit = METRIC_BY_KEY[key].unit if key in METRIC_BY_KEY else ""
    return f"{text} ms" if unit == "ms" and text != missing else text


NA = "n/a"  # a figure a sentence cannot give


def times(v: float) -> str:
    """A ratio in a sentence: ``1.80x``, ``n/a`` when it cannot be given."""
    return ratio(v, missing=NA)


def ratio(r: float, missing: str = NOT_MEASURED) -> str:
    """A ratio the analysis computed: ∞x when the reference did none of it, — when unknown."""
    if r == math.inf:
        return "∞x"
    if not math.isfinite(r):
        return missing
    r = rounded(r)  # the JSON's number: table and JSON never disagree by double rounding
    return f"{r:,.0f}x" if r >= 100 else f"{r:.2f}x"


def pct(share: float, missing: str = NOT_MEASURED, digits: int = 0) -> str:
    """A share (of windows, of time, of requests) as a percentage, whole unless ``digits``."""
    return f"{share:.{digits}%}" if math.isfinite(share) else missing


def count(n: float) -> str:
    """A count of requests, blocks, windows: whole, with thousands separators."""
    return f"{n:,.0f}"


def decimal(v: float, digits: int = 1) -> str:
    """A mean count or rate that is not whole (requests per window, device-hours)."""
    return f"{v:,.{digits}f}"


def seconds(s: float) -> str:
    """A window length or step in seconds, as given ('60 s', '0.5 s')."""
    return f"{s:g} s"


def minutes(s: float) -> str:
    """A duration in seconds shown in minutes, one decimal ('4.4 min'): alert delays and
    episode lengths, where seconds would be too fine to read."""
    return f"{s / 60:.1f} min"


def seconds_about(s: float) -> str:
    """A duration estimated from the data, to two significant figures ('13 s', '5.2 s')."""
    return f"{float(f'{s:.2g}'):g} s"


def plain(v: float) -> str:
    """A configured or exported figure as given, in its shortest form ('0.5', '3')."""
    return f"{v:g}"


def change(v: float | None) -> str:
    """A relative change, signed whole percent ('+12%', '-40%'); '—' when unknown."""
    return NOT_MEASURED if v is None or not math.isfinite(v) else f"{v:+.0%}"


def p_value(p: float) -> str:
    """A permutation test's p-value: three decimals when small, else two."""
    return f"{p:.3f}" if p < 0.1 else f"{p:.2f}"


def short_label(key: str) -> str:
    m = METRIC_BY_KEY.get(key)
    return m.short or m.label if m else key


def label(key: str) -> str:
    m = METRIC_BY_KEY.get(key)
    return f"{m.label} ({m.unit})" if m and m.unit not in ("frac", "x") else (m.label if m else key)


def when(epoch_s: float) -> str:
    if not math.isfinite(epoch_s):
        return "—"
    return dt.datetime.fromtimestamp(epoch_s, tz=dt.UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


def span(start_s: float, end_s: float) -> str:
    """'2025-04-23 00:52:10 → 00:53:15 UTC' (the date again only when it changes)."""
    if not (math.isfinite(start_s) and math.isfinite(end_s)):
        return "—"
    a = dt.datetime.fromtimestamp(start_s, tz=dt.UTC)
    b = dt.datetime.fromtimestamp(end_s, tz=dt.UTC)
    tail = b.strftime("%H:%M:%S" if a.date() == b.date() else "%Y-%m-%d %H:%M:%S")
    return f"{a:%Y-%m-%d %H:%M:%S} → {tail} UTC"


def finding_when(f: Finding) -> str:
    """Onset, end and longest run of a finding, in one line ('' without a timeline)."""
    t = f.timeline
    longest = t.longest if t else None
    if t is None or longest is None:
        return ""
    text = (
        f"When: {span(t.onset_s, t.end_s)} · hot in {t.hot_windows} of {t.judged_windows} windows"
    )
    if len(t.runs) > 1:
        text += (
            f" ({len(t.runs)} runs; longest {longest.windows} windows, "
            f"{span(longest.start_s, longest.end_s)})"
        )
    return text


def episode_line(e: Episode) -> str:
    """A transient burst: unit, when, how hot, and what it did to queueing."""
    hurt = [f"{short_label(k)} {ratio(e.impact[k])} peers" for k in e.hurting]
    driver = e.driver.replace("_", " ")
    peak = f"peak {ratio(e.peak_ratio)} peers on {driver}" if math.isfinite(e.peak_ratio) else ""
    impact = "; " + ", ".join(hurt) if hurt else "; no queueing impact"
    return (
        f"{name(e.unit)}: {span(e.run.start_s, e.run.end_s)} ({e.run.windows} windows, "
        f"{peak}{impact})"
    )


def scope(report: Report) -> str:
    return (
        f"source {name(report.source)} · level {report.level} · {len(report.units)} units · "
        f"{report.windows} windows of {seconds(report.window_s)} · "
        f"{when(report.start_s)} → {when(report.end_s)}"
    )


def table_units(report: Report) -> tuple[UnitReport, ...]:
    """The units the per-unit table lists: every unit, or those the fleet summary chose."""
    if report.fleet is None:
        return report.units
    by_id = {u.unit: u for u in report.units}
    return tuple(by_id[u] for u in report.fleet.shown if u in by_id)


def fleet_line(report: Report) -> str:
    """'1,024 units (2 hot, 1,022 normal); the table lists 20: ...' (empty without a fleet)."""
    f = report.fleet
    if f is None:
        return ""
    roles = ", ".join(f"{count(n)} {role}" for role, n in f.roles.items())
    return (
        f"Fleet: {count(f.units)} units ({roles}); the per-unit table lists {len(f.shown)}: "
        "stalled, hot and starved units first, then the highest load ratios"
    )


FLEET_HEADER = ("metric (over all units)", "min", "median", "p90", "max")


def fleet_rows(report: Report) -> list[list[str]]:
    """One row per table metric: its min, median, p90 and max over the fleet."""
    if report.fleet is None:
        return []
    return [[label(k), *(value(k, v) for v in vals)] for k, vals in report.fleet.spread.items()]


def finding_title(f: Finding) -> str:
    side = f" ({f.weight_side}-heavy)" if f.weight_side else ""
    return f"[{f.severity.upper()}] {kind_title(f.kind)}{side} — {names(f.units)}"


# The thresholds a report's footer always names (the JSON carries all of them).
HEADLINE_THRESHOLDS = (
    "hot_ratio",
    "persist_share",
    "min_consecutive",
    "starved_ratio",
    "impact_ratio",
    "severe_tail_ratio",
)


def thresholds_line(report: Report) -> str:
    """One footer line: the headline thresholds and every one ``--config`` set ("" when the
    report carries none)."""
    th = report.thresholds
    if not th:
        return ""
    shown = [k for k in HEADLINE_THRESHOLDS if k in th]
    line = "thresholds: " + ", ".join(f"{k} {plain(th[k])}" for k in shown)
    if report.thresholds_overridden:
        line += "; set by --config: " + ", ".join(
            f"{k} {plain(th[k])}" for k in report.thresholds_overridden if k in th
        )
    else:
        line += " (defaults)"
    return line + "; the rest in the JSON report"


GATEWAY_COLUMNS = (
    "upstream",
    "unit",
    "router share",
    "engine share",
    "unhealthy",
    "circuit open",
    "router load",
    "req bytes",
    "top keys",
)


def gateway_title(g: GatewayFacts) -> str:
    policy = f"policy {clean(g.policy)}" if g.policy else "policy not exported"
    kind = f" ({g.policy_class.replace('_', '-')})" if g.policy_class else ""
    return f"Gateway: {clean(g.source)}, {policy}{kind}"


def gateway_rows(g: GatewayFacts) -> list[list[str]]:
    """One row per upstream, cells in GATEWAY_COLUMNS order (the JSON report's numbers)."""
    rows = []
    for u in g.units:
        keys = ", ".join(f"{name(k)} ({count(n)})" for k, n in u.top_keys) or "—"
        rows.append(
            [
                name(u.upstream),
                name(u.unit) if u.unit else "—",
                pct(u.router_share),
                pct(u.engine_share),
                pct(u.unhealthy_share),
                pct(u.breaker_open_share),
                decimal(u.router_load) if math.isfinite(u.router_load) else "—",
                count(u.request_bytes) if math.isfinite(u.request_bytes) else "—",
                keys if u.in_pool else f"not in pool; {keys}",
            ]
        )
    return rows
