"""PromQL text for each canonical signal, built from the dialect tables (no execution here).

Every query is plain PromQL (``increase``, ``*_over_time``, ``histogram_quantile``, ``sum by``),
so the same text runs on Prometheus, Thanos, Mimir and VictoriaMetrics. All aggregation is pushed
into the query: one ``query_range`` per signal and level returns every unit at once, whatever
the fleet size. Every label value we put into a selector goes through ``quote``.
"""

from __future__ import annotations

import re

from skewscope.catalogue import MetricType
from skewscope.errors import UsageError
from skewscope.frame import BOUND_LOWER, BOUND_UPPER, Level
from skewscope.sources.dialects import ROLES, Alias, Matcher, SignalSpec, name_regex

_LABEL_NAME = re.compile(r"[a-zA-Z_][a-zA-Z0-9_]*")
_SIMPLE_ESCAPES = {"\\": "\\\\", '"': '\\"', "\n": "\\n", "\r": "\\r", "\t": "\\t"}


def escape_label_value(value: str) -> str:
    """Escape ``value`` for a double-quoted PromQL string (Go string-literal rules).

    Backslash, double quote and control characters are escaped; other characters (any Unicode)
    pass through as UTF-8, which PromQL accepts inside quotes — except U+FFFD, which PromQL's
    lexer reads as a decoding error ("invalid UTF-8 rune"), so it goes as ``\ufffd``.
    """
    out = []
    for ch in value:
        if ch in _SIMPLE_ESCAPES:
            out.append(_SIMPLE_ESCAPES[ch])
        elif ord(ch) < 0x20 or ord(ch) == 0x7F or ch == "\ufffd":
            out.append(f"\\u{ord(ch):04x}")
        else:
            out.append(ch)
    return "".join(out)


def quote(value: str) -> str:
    return '"' + escape_label_value(value) + '"'


_UNESCAPE = {"a": "\a", "b": "\b", "f": "\f", "n": "\n", "r": "\r", "t": "\t", "v": "\v"}


def unquote(literal: str) -> str:
    """Inverse of ``quote`` for double-quoted PromQL strings (used to check the escaper)."""
    if len(literal) < 2 or literal[0] != '"' or literal[-1] != '"':
        raise ValueError("not a double-quoted string")
    body, out, i = literal[1:-1], [], 0
    while i < len(body):
        ch = body[i]
        if ch == '"':
            raise ValueError("unescaped quote")
        if ch != "\\":
            out.append(ch)
            i += 1
            continue
        nxt = body[i + 1]
        if nxt in _UNESCAPE:
            out.append(_UNESCAPE[nxt])
            i += 2
        elif nxt in "\\\"'":
            out.append(nxt)
            i += 2
        elif nxt in "xuU":
            width = {"x": 2, "u": 4, "U": 8}[nxt]
            out.append(chr(int(body[i + 2 : i + 2 + width], 16)))
            i += 2 + width
        else:  # octal \ooo
            out.append(chr(int(body[i + 1 : i + 4], 8)))
            i += 4
    return "".join(out)


def check_label_name(name: str) -> str:
    if not _LABEL_NAME.fullmatch(name):
        raise UsageError(f"invalid label name {name!r}")
    return name


def matcher_text(m: Matcher) -> str:
    return f"{check_label_name(m.label)}{m.op}{quote(m.value)}"


def normalise_selector(selector: str) -> str:
    """The user's extra matchers without braces (``{job="x"}`` and ``job="x"`` both accepted).

    The text is the user's own PromQL and is passed through as written.
    """
    s = selector.strip()
    if s.startswith("{") and s.endswith("}"):
        s = s[1:-1].strip()
    if "{" in s or "}" in s:
        raise UsageError(f'selector must be label matchers like job="vllm", got {selector!r}')
    return s.rstrip(",")


def series_selector(sample_name: str, alias: Alias, selector: str = "") -> str:
    """``{__name__=~"vllm[:_]x", <alias matchers>, <user selector>}`` (both name spellings)."""
    parts = [f"__name__=~{quote(name_regex(sample_name))}"]
    parts += [matcher_text(m) for m in alias.matchers]
    extra = normalise_selector(selector)
    if extra:
        parts.append(extra)
    return "{" + ", ".join(parts) + "}"


def duration(seconds: float) -> str:
    """PromQL duration literal; whole seconds when possible, else milliseconds."""
    ms = round(seconds * 1000)
    if ms <= 0:
        raise UsageError(f"window must be positive, got {seconds} s")
    return f"{ms // 1000}s" if ms % 1000 == 0 else f"{ms}ms"


def group_labels(level: Level, alias: Alias) -> str | None:
    """``instance`` (or the alias' unit label), plus the DP label at DP level; None when the
    metric carries no DP rank."""
    inst = check_label_name(alias.unit_label or "instance")
    if alias.rank_in_unit:  # "<pod>-rank-<n>": ranks are split (and pods combined) afterwards
        return inst
    if level is Level.INSTANCE:
        return inst
    if alias.dp_label is None:
        return None
    return f"{inst}, {check_label_name(alias.dp_label)}"


def _scaled(expr: str, scale: float) -> str:
    return expr if scale == 1.0 else f"{scale:g} * {expr}"


def read_once(expr: str, alias: Alias) -> str:
    """``expr`` with copies of one series (``Alias.read_once``: ``copies``, and the same unit
    from several scrape jobs or targets) collapsed to one (their max), never summed."""
    return f"max without ({', '.join(check_label_name(c) for c in alias.read_once)}) ({expr})"


def duplicates_query(alias: Alias, range_s: float, selector: str = "") -> str:
    """One row per (unit, scrape identity) that exported ``alias`` over the last ``range_s``:
    a unit on more than one row is exported by several jobs or targets (read once, noted)."""
    unit = check_label_name(alias.unit_label or "instance")
    scrape = [c for c in ("job", "instance") if c in alias.read_once and c != unit]
    sel = series_selector(alias.name, alias, selector)
    return f"count by ({', '.join([unit, *scrape])}) (last_over_time({sel}[{duration(range_s)}]))"


def _increase(name: str, alias: Alias, by: str, w: str, selector: str) -> str:
    """A counter's increase over each window, exact where it can be: the difference of the
    last samples at or before the window's end and its start, so every increment between two
    scrapes lands in exactly one window (``increase()`` extrapolates the samples inside a range
    to its edges and loses the step between windows: on a real SGLang scraped every 2 s one
    rank read 181 requests where it served 166). Only series with a sample in the window (the
    lookback would carry a vanished one on at 0); where the counter reset, or the series has no
    sample before the window (it just appeared), ``increase()`` answers as before."""
    sel = series_selector(name, alias, selector)
    exact = (
        f"(({sel} - {sel} offset {w}) >= 0 and count_over_time({sel}[{w}])"
        f" unless resets({sel}[{w}]) > 0)"
    )
    inner = read_once(f"({exact} or increase({sel}[{w}]))", alias)
    return f"sum by ({by}) ({inner})"


def part_query(
    alias: Alias, part: str, *, level: Level, window_s: float, selector: str = ""
) -> str | None:
    """A histogram part's increase over each window, grouped at ``level``, unscaled: ``part``
    "bucket" (grouped by ``le`` too: the buckets of ``histogram_quantile``), "sum" or "count"
    (the two sides of a mean), for the client to combine (``prom_plan``)."""
    by = group_labels(level, alias)
    if by is None:
        return None
    by = by + ", le" if part == "bucket" else by
    return _increase(f"{alias.name}_{part}", alias, by, duration(window_s), selector)


def build_query(
    spec: SignalSpec, alias: Alias, *, level: Level, window_s: float, selector: str = ""
) -> str | None:
    """The PromQL for ``spec`` at ``level`` over windows of ``window_s``; None if not possible."""
    by = group_labels(level, alias)
    if by is None:
        return None
    role = ROLES[spec.role]
    w = duration(window_s)
    if role.kind is MetricType.COUNTER:
        expr = _increase(alias.name, alias, by, w, selector)
    elif role.kind is MetricType.GAUGE:
        sel = series_selector(alias.name, alias, selector)
        inner = read_once(f"{spec.over_time}_over_time({sel}[{w}])", alias)
        expr = f"{spec.across} by ({by}) ({inner})"
    elif spec.over_time == "quantile":
        buckets = _increase(alias.name + "_bucket", alias, by + ", le", w, selector)
        expr = f"histogram_quantile({spec.quantile:g}, {buckets})"
    else:  # histogram mean: pooled sum / pooled count of the window
        total = _increase(alias.name + "_sum", alias, by, w, selector)
        count = _increase(alias.name + "_count", alias, by, w, selector)
        expr = f"({total} / {count})"
    return _scaled(expr, role.scale * alias.scale)


# --- which histogram_quantile answers are only bucket bounds (frame.py: <signal>_bound) -------
# histogram_quantile answers the highest finite bound when the rank falls in the +Inf bucket, and
# a bucket's bound when the rank is exactly its cumulative count. One extra query per histogram
# lists its bucket bounds; every answer equal to one of them is marked.


def bucket_bounds_query(alias: Alias, range_s: float, selector: str = "") -> str:
    """The bucket bounds (``le`` values) a histogram exposed over the last ``range_s``."""
    sel = series_selector(alias.name + "_bucket", alias, selector)
    return f"count by (le) (last_over_time({sel}[{duration(range_s)}]))"


def bound_marks(
    values: dict[tuple[float, str, int | None], float], les: set[float], scale: float
) -> dict[tuple[float, str, int | None], float]:
    """frame.BOUND_LOWER where a value is the highest finite bound (the +Inf bucket answer),
    frame.BOUND_UPPER where it is another bound; other values are interpolated (unmarked)."""
    import numpy as np

    finite = sorted(b for b in les if b == b and b != float("inf"))
    if not finite or not values:
        return {}
    bounds = np.array(finite, dtype=np.float64)
    tolerance = 1e-9 * np.maximum(1.0, np.abs(bounds))
    raw = np.fromiter(values.values(), dtype=np.float64, count=len(values)) / scale
    lower = np.zeros(raw.size, dtype=bool)
    upper = np.zeros(raw.size, dtype=bool)
    for lo in range(0, raw.size, 1 << 15):  # values x bounds at once, in bounded blocks
        part = slice(lo, lo + (1 << 15))
        near = np.abs(raw[part, None] - bounds[None, :]) <= tolerance[None, :]
        lower[part] = near[:, -1]
        upper[part] = ~near[:, -1] & near[:, :-1].any(axis=1)
    keys = list(values)
    out = {keys[i]: BOUND_LOWER for i in np.flatnonzero(lower)}
    out.update({keys[i]: BOUND_UPPER for i in np.flatnonzero(upper)})
    return out
