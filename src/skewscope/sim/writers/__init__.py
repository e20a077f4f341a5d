"""Writers: turn one SimResult into the artefacts the real tools would leave behind.

Profiler CSV folders (``profiler``), a /metrics exposition model per engine dialect
(``exposition``), OpenMetrics / VictoriaMetrics history (``openmetrics``), live HTTP endpoints
(``live``) and the ground truth (``truth``).  The public functions are re-exported lazily so
importing this package does not pull in polars/numpy (keeps ``skewscope --help`` fast).
"""

from __future__ import annotations

import importlib
from typing import Any

_EXPORTS = {
    "write_profiler": "profiler",
    "write_truth": "truth",
    "ClusterModel": "exposition",
    "DIALECTS": "exposition",
    "write_openmetrics": "openmetrics",
    "iter_import_lines": "openmetrics",
    "serve": "live",
    "LiveCluster": "live",
}
__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f"{__name__}.{module}"), name)
