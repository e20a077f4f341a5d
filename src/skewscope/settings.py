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
        if self.low is not None and self.high is not None:
            return (f"in {'(' if self.low_open else '['}{self.low:g}, {self.high:g}"
                    f"{')' if self.high_open else ']'}")
        if self.low is not None:
            return f"{'>' if self.low_open else '>='} {self.low:g}"
        assert self.high is not None
        return f"{'<' if self.high_open else '<='} {self.high:g}"


# The kinds of setting, each with its range (a field's type says which it is).
Ratio = Annotated[float, Range(1.0, low_open=True)]  # hot / reference: above 1 or meaningless
Share = Annotated[float, Range(0.0, 1.0, low_open=True)]  # a part of a whole, not nothing
Fraction = Annotated[float, Range(0.0, 1.0)]  # a part of a whole, 0 allowed (a margin, a floor)
Probability = Annotated[float, Range(0.0, 1.0, low_open=True, high_open=True)]
Positive = Annotated[float, Range(0.0, low_open=True)]  # an amount, a duration, a slope
Floor = Annotated[float, Range(0.0)]  # an absolute floor under a reference: 0 turns it off
Count = Annotated[int, Range(1)]  # windows, units, draws, rows
Points = Annotated[int, Range(2)]  # a slope needs two points, a peer a second unit
Whole = Annotated[int, Range(0)]  # a seed, a lag in windows (0: none)


def field_kinds(cls: type) -> dict[str, tuple[type, Range | None]]:
    """Field name -> (int or float, its Range if its type carries one)."""
    out: dict[str, tuple[type, Range | None]] = {}
    for name, hint in get_type_hints(cls, include_extras=True).items():
        base, *extra = get_args(hint) if get_origin(hint) is Annotated else (hint,)
        out[name] = (base, next((r for r in extra if isinstance(r, Range)), None))
    return out


def out_of_range(obj: object) -> list[tuple[str, str]]:
    """(field, what it must be) of every field of ``obj`` outside its type's range."""
    return [(name, rng.text()) for name, (_, rng) in field_kinds(type(obj)).items()
            if rng is not None and not rng.holds(getattr(obj, name))]


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
        if (isinstance(value, bool) or not isinstance(value, int | float)
                or (kind is int and not isinstance(value, int))):
            want = "an integer" if kind is int else "a number"
            raise UsageError(f"{where} {key}: expected {want}, got {value!r}")
        if not math.isfinite(value):
            raise UsageError(f"{where} {key}: expected a finite number, got {value!r}")
        if rng is not None and not rng.holds(value):
            want = "an integer" if kind is int else "a number"
            raise UsageError(f"{where} {key}: expected {want} {rng.text()}, got {value!r}")
        clean[key] = float(value) if kind is float else value
    return replace(obj, **clean)  # type: ignore[type-var]


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

    @property
    def max_query_bytes(self) -> int:
        return int(self.max_query_mb * MIB)

    @property
    def max_scrape_bytes(self) -> int:
        return int(self.max_scrape_mb * MIB)

    def updated(self, values: Mapping[str, object], where: str) -> SourceLimits:
        """These limits with ``values`` set (``override``)."""
        return override(self, values, where, "source setting")


DEFAULT_LIMITS = SourceLimits()
SOURCE_SETTINGS = frozenset(f.name for f in fields(SourceLimits))
