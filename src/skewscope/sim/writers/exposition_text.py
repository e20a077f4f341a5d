"""The Prometheus text exposition of simulated metric families: the families as data and
their rendering (Go/Prometheus float text, label escaping, ``_total`` on counters)."""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

from skewscope.catalogue import MetricType
from skewscope.sim.writers.metric_spec import MetricSpec

if TYPE_CHECKING:
    import numpy as np
    from numpy.typing import NDArray

    F64 = NDArray[np.float64]

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"

# ----------------------------------------------------------------------------- families
Labels = tuple[tuple[str, str], ...]


@dataclass
class Series:
    """One exposed sample name + label set, with a value per queried time."""

    name: str
    labels: Labels
    values: F64


@dataclass
class Family:
    """A metric family at the queried times.  ``metrics`` holds one group per label set
    (a single series for counters/gauges; buckets, ``_count``, ``_sum`` for histograms):
    OpenMetrics wants each group's points together, so the grouping is kept."""

    spec: MetricSpec
    metrics: list[list[Series]]


def sorted_labels(labels: Mapping[str, str]) -> Labels:
    return tuple(sorted(labels.items()))


# ----------------------------------------------------------------------------- rendering
def format_value(v: float) -> str:
    """Go/Prometheus float text: ``1.0``, ``0.001``, ``+Inf``, ``NaN``."""
    if math.isnan(v):
        return "NaN"
    if math.isinf(v):
        return "+Inf" if v > 0 else "-Inf"
    return repr(float(v))


def _escape(v: str) -> str:
    return v.replace("\\", r"\\").replace("\n", r"\n").replace('"', r"\"")


def format_labels(labels: Iterable[tuple[str, str]]) -> str:
    body = ",".join(f'{k}="{_escape(v)}"' for k, v in labels)
    return "{" + body + "}" if body else ""


def type_name(spec: MetricSpec, openmetrics: bool) -> str:
    """Family name on ``# TYPE``: text format keeps ``_total`` on counters, OpenMetrics drops it."""
    return spec.name + ("_total" if spec.kind is MetricType.COUNTER and not openmetrics else "")


def render_text(
    families: Iterable[Family], index: int = 0, extra: Mapping[str, str] | None = None
) -> str:
    """Prometheus text exposition (0.0.4) of the ``index``-th queried time, no timestamps."""
    lines: list[str] = []
    for fam in families:
        name = type_name(fam.spec, openmetrics=False)
        lines.append(f"# HELP {name} {fam.spec.help}")
        lines.append(f"# TYPE {name} {fam.spec.kind}")
        for group in fam.metrics:
            for s in group:
                labels = s.labels if not extra else sorted_labels({**dict(s.labels), **extra})
                lines.append(f"{s.name}{format_labels(labels)} {format_value(s.values[index])}")
    return "\n".join(lines) + "\n"
