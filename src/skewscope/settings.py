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
from typing import Any, TypeVar

from skewscope.errors import UsageError

T = TypeVar("T")

MIB = 2**20


def override(obj: T, values: Mapping[str, object], where: str, what: str) -> T:
    """``obj`` (a frozen dataclass of numbers) with ``values`` set. An unknown key, a wrong type
    or a non-finite number is one UsageError line naming ``where`` and the key (a typo must
    never pass silently); ``what`` names a field in that message ("threshold")."""
    kinds = {f.name: f.type for f in fields(obj)}  # type: ignore[arg-type]
    clean: dict[str, Any] = {}
    for key, value in values.items():
        kind = kinds.get(key)
        if kind is None:
            raise UsageError(f"{where} {key}: unknown {what} (docs/configuration.md)")
        if (isinstance(value, bool) or not isinstance(value, int | float)
                or (kind == "int" and not isinstance(value, int))):
            want = "an integer" if kind == "int" else "a number"
            raise UsageError(f"{where} {key}: expected {want}, got {value!r}")
        if not math.isfinite(value):
            raise UsageError(f"{where} {key}: expected a finite number, got {value!r}")
        clean[key] = float(value) if kind == "float" else value
    return replace(obj, **clean)  # type: ignore[type-var]


@dataclass(frozen=True)
class SourceLimits:
    """What the online sources may read and how often long work says it is alive: settings of
    the reading, not of the judging (a report does not carry them). ``--config``'s ``[sources]``
    table sets them."""

    # A response larger than this is abandoned (an endless or runaway body must not exhaust
    # memory): one Prometheus range query (a long range of a large fleet is tens of MB) / one
    # /metrics scrape, a router's worker list or a probe of a URL given as the source.
    max_query_mb: float = 128.0
    max_scrape_mb: float = 16.0
    # Without a terminal (logs, CI, a pipe), long work (a scrape, a simulation) prints one
    # progress line on stderr this often; a terminal gets a transient bar instead.
    progress_every_s: float = 10.0

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
