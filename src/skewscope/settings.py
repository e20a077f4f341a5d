"""Settings a user may set with ``--config FILE``, and how one TOML table of them is checked.

Neutral ground (it imports no layer): the analysis' ``config.Thresholds`` and the sources'
``SourceLimits`` below are both set through ``override``, so a typo, a wrong type or a
non-finite number reads the same whichever table it is in. The sources read ``SourceLimits``,
never the analysis' thresholds (an import-linter contract keeps ``skewscope.config`` out of
``sources``).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, fields, replace
from typing import Annotated, Any, TypeVar, get_args, get_origin, get_type_hints

from skewscope.errors import UsageError

T = TypeVar("T")

MIB = 2**20


@dataclass(frozen=True)
class Pattern:
    """The text a string setting may hold, written in its type like ``Range``."""

    regex: str
    what: str  # how the error says it ("a label name")

    def holds(self, value: str) -> bool:
        import re

        return re.fullmatch(self.regex, value) is not None


@dataclass(frozen=True)
class Range:
    """The values a setting may take, written in its type (``Annotated[float, Range(...)]``) so
    the range sits next to the setting it guards and reads in the error."""

    low: float | None = None
    high: float | None = None
    low_open: bool = False  # value > low (else >= low)
    high_open: bool = False  # value < high (else <= high)

    def holds(self, value: float) -> bool:
        above = self.low is None or (value > self.low if self.low_open else value >= self.low)
        below = self.high is None or (value < self.high if self.high_open else value <= self.high)
        return above and below

    def text(self) -> str:
        low, high = _num(self.low), _num(self.high)
        if self.low is not None and self.high is not None:
            return (
                f"in {'(' if self.low_open else '['}{low}, {high}{')' if self.high_open else ']'}"
            )
        if self.low is not None:
            return f"{'>' if self.low_open else '>='} {low}"
        assert self.high is not None
        return f"{'<' if self.high_open else '<='} {high}"


def _num(x: float | None) -> str:
    """A bound as a message writes it: 1e9, not 1000000000 or 1e+09; 4294967295 exactly."""
    if x is None:
        return ""
    exp = len(str(int(x))) - 1 if x >= 1e6 and x == int(x) else 0
    return f"1e{exp}" if exp and x == 10**exp else f"{x:.10g}"


# The kinds of setting, each with its range (a field's type says which it is). Every range is
# closed above too: a value past it is a typo or a hostile file (10**400 is no float; a billion
# permutations or smoothing windows would allocate gigabytes), never a setting.
BIG = 1e9  # the ceiling of an amount: a count, a duration in ms, a floor, a size in MB
Ratio = Annotated[float, Range(1.0, 1000.0, low_open=True)]  # hot / reference: above 1
Share = Annotated[float, Range(0.0, 1.0, low_open=True)]  # a part of a whole, not nothing
Fraction = Annotated[float, Range(0.0, 1.0)]  # a part of a whole, 0 allowed (a margin, a floor)
Probability = Annotated[float, Range(0.0, 1.0, low_open=True, high_open=True)]
Positive = Annotated[float, Range(0.0, BIG, low_open=True)]  # an amount, a duration, a slope
Floor = Annotated[float, Range(0.0, BIG)]  # an absolute floor under a reference: 0 turns it off
Count = Annotated[int, Range(1, BIG)]  # windows, units, rows
Points = Annotated[int, Range(2, BIG)]  # a slope needs two points, a peer a second unit
Whole = Annotated[int, Range(0, 2**32 - 1)]  # a seed (numpy's 32-bit legacy range)
# Settings whose size is an allocation or a loop of the analysis get their own, tighter range:
Draws = Annotated[int, Range(1, 100_000)]  # permutations: draws x windows x units floats
Width = Annotated[int, Range(1, 1000)]  # a rolling window: windows of one range
Lag = Annotated[int, Range(0, 1000)]  # a lag tried, in windows (0: none)
Listed = Annotated[int, Range(1, 100_000)]  # rows or keys a report lists

# What the one small-file reader (``smallfile``) accepts: files a user names and a person
# writes (--config, a scenario, --device-map, a token file) are kilobytes; a saved report of a
# large fleet with its timelines is megabytes. Nesting past ``MAX_NESTING`` levels is no
# setting either, and would run ``tomllib``/``json`` into their recursion limit.
SMALL_FILE_BYTES = 4 * MIB
REPORT_FILE_BYTES = 256 * MIB
SECRET_FILE_BYTES = 64 * 1024
TRACE_FILE_BYTES = 1024 * MIB  # a request trace a scenario replays (Azure, Mooncake)
MAX_NESTING = 64


def field_kinds(cls: type) -> dict[str, tuple[type, Range | None]]:
    """Field name -> (int, float or str, its Range if its type carries one)."""
    out: dict[str, tuple[type, Range | None]] = {}
    for name, hint in get_type_hints(cls, include_extras=True).items():
        base, *extra = get_args(hint) if get_origin(hint) is Annotated else (hint,)
        out[name] = (base, next((r for r in extra if isinstance(r, Range)), None))
    return out


def _pattern(cls: type, name: str) -> Pattern | None:
    hint = get_type_hints(cls, include_extras=True)[name]
    extra = get_args(hint)[1:] if get_origin(hint) is Annotated else ()
    return next((p for p in extra if isinstance(p, Pattern)), None)


def out_of_range(obj: object) -> list[tuple[str, str]]:
    """(field, what it must be) of every field of ``obj`` outside its type's range."""
    return [
        (name, rng.text())
        for name, (_, rng) in field_kinds(type(obj)).items()
        if rng is not None and not rng.holds(getattr(obj, name))
    ]


def override(obj: T, values: Mapping[str, object], where: str, what: str) -> T:
    """``obj`` (a frozen dataclass of numbers) with ``values`` set. An unknown key, a wrong type,
    a non-finite number or a value outside the field's ``Range`` is one UsageError line naming
    ``where`` and the key (a typo must never pass silently); ``what`` names a field in that
    message ("threshold")."""
    kinds = field_kinds(type(obj))
    clean: dict[str, Any] = {}
    for key, value in values.items():
        if key not in kinds:
            raise UsageError(f"{where} {key}: unknown {what} (docs/configuration.md)")
        kind, rng = kinds[key]
        if kind is str:  # a name (a label): text, and text of its pattern
            pattern = _pattern(type(obj), key)
            if not isinstance(value, str) or (pattern and value and not pattern.holds(value)):
                want = pattern.what if pattern else "a string"
                raise UsageError(f"{where} {key}: expected {want}, got {_shown(value)}")
            clean[key] = value
            continue
        want = "an integer" if kind is int else "a number"
        if (
            isinstance(value, bool)
            or not isinstance(value, int | float)
            or (kind is int and not isinstance(value, int))
        ):
            raise UsageError(f"{where} {key}: expected {want}, got {_shown(value)}")
        if isinstance(value, float) and not math.isfinite(value):
            raise UsageError(f"{where} {key}: expected a finite number, got {value!r}")
        # an int is compared exactly (10**400 is no float: it must never reach float())
        if rng is not None and not rng.holds(value):
            raise UsageError(f"{where} {key}: expected {want} {rng.text()}, got {_shown(value)}")
        clean[key] = float(value) if kind is float else value
    return replace(obj, **clean)  # type: ignore[type-var]


def _shown(value: object) -> str:
    """A value as a message quotes it: bounded (a 4000-digit integer is not echoed whole)."""
    text = repr(value)
    return text if len(text) <= 40 else f"{text[:20]}...({len(text)} characters)"


@dataclass(frozen=True)
class SourceLimits:
    """What the online sources may read and how often long work says it is alive: settings of
    the reading, not of the judging (a report does not carry them). ``--config``'s ``[sources]``
    table sets them."""

    # A response larger than this is abandoned (an endless or runaway body must not exhaust
    # memory): one Prometheus range query (a long range of a large fleet is tens of MB) / one
    # /metrics scrape, a router's worker list or a probe of a URL given as the source.
    max_query_mb: Positive = 128.0
    max_scrape_mb: Positive = 16.0
    # Without a terminal (logs, CI, a pipe), long work (a scrape, a simulation) prints one
    # progress line on stderr this often; a terminal gets a transient bar instead.
    progress_every_s: Positive = 10.0
    # An access-log line longer than this is skipped and counted in a note (a 64 MB quoted
    # value is no request line; parsing it would hold gigabytes).
    max_log_line_kb: Positive = 64.0
    # The UTC offset of msServiceProfiler datetimes in a folder without any epoch column (the
    # exporter writes Asia/Shanghai time, UTC+8, whatever the host's zone).
    profiler_utc_offset_h: Annotated[float, Range(-14.0, 14.0)] = 8.0
    # A URL (--prometheus, --scrape, --gateway-url, a URL as PATH) or label matchers
    # (--selector, --device-selector) longer than this is refused at the option: servers refuse
    # request lines past 8 KiB, and httpx refuses a URL past 64 KiB with no line to show.
    max_url_kb: Positive = 8.0
    max_selector_kb: Positive = 4.0
    # --scrape gives up (exit 4) when no target has answered in this many rounds from the start
    # (every connection refused or timed out), instead of waiting out the whole --duration.
    scrape_give_up_rounds: Count = 3
    # watch --prometheus keeps the tables of windows already read and reads only the new ones;
    # a window read less than this after it closed is read again at the next run (a scrape
    # stamped just before its end may not have reached the server yet), so a kept window is
    # one the server no longer changes.
    watch_settle_s: Floor = 30.0
    # The label naming each unit's prefill/decode pool, for a stack the dialects do not know
    # (sources/pools.py); "" = the dialect's own (--role-label sets it per command).
    role_label: Annotated[str, Pattern(r"[a-zA-Z_][a-zA-Z0-9_]*", "a label name")] = ""

    @property
    def max_query_bytes(self) -> int:
        return int(self.max_query_mb * MIB)

    @property
    def max_scrape_bytes(self) -> int:
        return int(self.max_scrape_mb * MIB)

    @property
    def max_log_line_bytes(self) -> int:
        return int(self.max_log_line_kb * 1024)

    @property
    def max_url_chars(self) -> int:
        return int(self.max_url_kb * 1024)

    @property
    def max_selector_chars(self) -> int:
        return int(self.max_selector_kb * 1024)

    def updated(self, values: Mapping[str, object], where: str) -> SourceLimits:
        """These limits with ``values`` set (``override``)."""
        return override(self, values, where, "source setting")


DEFAULT_LIMITS = SourceLimits()
SOURCE_SETTINGS = frozenset(f.name for f in fields(SourceLimits))
