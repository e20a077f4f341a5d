"""What one moment of ``watch`` looks like: the last good Report plus run bookkeeping. The
exporter and the screen read only this (and the Report inside), never the analysis."""

from __future__ import annotations

from dataclasses import dataclass, field

from skewscope.monitor.incidents import Incident
from skewscope.report.model import Report

# skewscope_run_errors_total{reason}: every reason is exported from the start (at 0).
ERROR_REASONS: dict[str, str] = {
    "source": "the source failed (Prometheus error or unreachable, all /metrics targets down)",
    "target": "one /metrics target failed every scrape since the previous run (others used)",
    "input": "the source answered with data that cannot be analysed",
    "history": "the incident history could not be written",
    "internal": "an unexpected error in skewscope (a bug: please report it)",
}


@dataclass(frozen=True)
class WatchStatus:
    """Everything the exporter and the screen show; replaced whole after every run."""

    source: str
    last_s: float
    every_s: float
    report: Report | None = None  # the last good report
    report_at: float | None = None  # epoch s at the end of the run that produced it
    runs: int = 0
    good_runs: int = 0
    duration_s: float | None = None  # wall time of the latest run, good or not
    last_error: str = ""  # of the latest run; "" when it was good
    last_error_at: float | None = None
    warming_up: str = ""  # the source is not ready yet (not an error)
    problems: tuple[str, ...] = ()  # partial failures in the latest run
    errors: dict[str, int] = field(default_factory=lambda: dict.fromkeys(ERROR_REASONS, 0))
    open_incidents: tuple[Incident, ...] = ()  # "hot since" per unit
