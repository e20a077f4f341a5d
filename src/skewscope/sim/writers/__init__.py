"""Writers: turn one SimResult into the artefacts the real tools would leave behind.

Profiler CSV folders (``profiler``), a /metrics exposition model per engine dialect
(``exposition``), OpenMetrics / VictoriaMetrics history (``openmetrics``), live HTTP endpoints
(``live``) and the ground truth (``truth``).  Submodules import polars lazily via their own
imports; import the one you need.
"""

from __future__ import annotations

__all__ = ["exposition", "live", "openmetrics", "profiler", "truth"]
