"""The rule file's numbers as named parameters, so ``rules`` and the jsonnet mixin share one text.

The rule builder writes every number that comes from the options or ``config.Thresholds`` as a
token (``param("hot_ratio")``), never as a value: the built rules are a template. ``rules``
fills the tokens with the values ``params`` computes here; ``mixin`` writes the same template
in jsonnet's format syntax (``%(hot_ratio)s``, a literal ``%`` doubled) and the mixin's
``lib/params.libsonnet`` computes the same parameters from its ``_config``, so overriding a
threshold in jsonnet changes the rules exactly as ``--config`` does
(tests/integration/test_mixin.py).
"""

from __future__ import annotations

import re
from typing import Any

from skewscope.config import Thresholds
from skewscope.errors import UsageError

# Thresholds the rules read (each one a parameter of the same name).
RULE_THRESHOLDS: tuple[str, ...] = (
    "hot_ratio",
    "smooth_windows",
    "persist_share",
    "alert_windows",
    "alert_for_windows",
    "hot_noise_sigmas",
    "starved_ratio",
    "starved_busy_ratio",
    "floor_running",
    "floor_waiting",
    "floor_queue_wait_ms",
    "count_ratio",
    "weight_ratio",
    "capability_ratio",
    "explain_share",
    "min_requests_total",
    "min_requests_per_window",
    "min_windows",
    "min_units",
    "trend_min_slope_share",
    "pd_running_ratio",
    "pd_min_waiting",
    "pd_idle_waiting",
)
_OPEN, _CLOSE = "\u27e6", "\u27e7"  # never in PromQL, a label or an annotation we write
_TOKEN = re.compile(f"{_OPEN}([a-z_]+){_CLOSE}")


def param(name: str) -> str:
    """The token standing for parameter ``name`` in the built rules."""
    return f"{_OPEN}{name}{_CLOSE}"


class _Tokens:
    """``THRESHOLD_TOKENS.hot_ratio`` is the token of ``hot_ratio`` (the builder reads the
    thresholds through it, so a value can never be written into the template)."""

    def __getattr__(self, name: str) -> str:
        if name not in RULE_THRESHOLDS:
            raise AttributeError(f"{name} is not a threshold the rules read (RULE_THRESHOLDS)")
        return param(name)


THRESHOLD_TOKENS = _Tokens()


def duration(seconds: float) -> str:
    """A PromQL duration in the largest whole unit (``5m``, ``2h``, ``90s``, ``500ms``)."""
    ms = round(seconds * 1000)
    if ms <= 0:
        raise UsageError(f"durations must be positive, got {seconds:g} s")
    for unit, size in (("d", 86_400_000), ("h", 3_600_000), ("m", 60_000), ("s", 1000)):
        if ms % size == 0:
            return f"{ms // size}{unit}"
    return f"{ms}ms"


def params(
    thresholds: Thresholds,
    window_s: float,
    for_s: float | None,
    lookback_windows: int,
    runbook_url_base: str,
) -> dict[str, str]:
    """Every parameter's text (the same arithmetic as ``lib/params.libsonnet``)."""
    th = thresholds
    out = {name: f"{getattr(th, name):g}" for name in RULE_THRESHOLDS}
    persistence = for_s if for_s is not None else th.alert_for_windows * window_s
    lookback = lookback_windows * window_s
    out.update(
        window=duration(window_s),
        window_seconds=f"{window_s:g}",
        smooth=duration(th.smooth_windows * window_s),
        smooth_seconds=f"{th.smooth_windows * window_s:g}",
        horizon=duration(th.alert_windows * window_s),
        lookback=duration(lookback),
        lookback_seconds=f"{lookback:g}",
        request_floor=f"{th.min_requests_per_window / window_s:g}",
        history=duration(th.min_windows * window_s),
        runbook_url_base=runbook_url_base.rstrip("/"),
        **{"for": duration(persistence)},
    )
    return out


def _walk(obj: Any, fn: Any) -> Any:
    if isinstance(obj, str):
        return fn(obj)
    if isinstance(obj, dict):
        return {k: _walk(v, fn) for k, v in obj.items()}
    if isinstance(obj, list):
        return [_walk(v, fn) for v in obj]
    return obj


def fill(template: Any, values: dict[str, str]) -> Any:
    """The template with every token replaced by its parameter's text."""
    return _walk(template, lambda s: _TOKEN.sub(lambda m: values[m.group(1)], s))


def to_format(template: Any) -> Any:
    """The template in jsonnet's (and Python's) ``%`` format syntax."""
    return _walk(template, lambda s: _TOKEN.sub(r"%(\1)s", s.replace("%", "%%")))


def used(template: Any) -> set[str]:
    """The parameters a template uses."""
    found: set[str] = set()
    _walk(template, lambda s: found.update(_TOKEN.findall(s)))
    return found
