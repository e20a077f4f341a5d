"""``skewscope watch``: re-run the diagnosis every ``every_s`` over the last ``last_s``.

The loop calls a source's loader, then ``analysis.diagnose``, and publishes a ``WatchStatus``
(the last good Report plus run bookkeeping) that the exporter and the screen read. A failing
source never stops the loop: the last good Report stays published, the error is counted by
reason and shown. Runs execute on one worker thread so SIGINT/SIGTERM stop the loop promptly
even while a slow query is in flight: the run is abandoned, and whatever it would still have
recorded is dropped (the history is written by one thread at a time, under ``_record_lock``).
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Protocol

from skewscope.analysis.diagnose import diagnose
from skewscope.clock import SYSTEM_CLOCK, Clock
from skewscope.config import DEFAULT_THRESHOLDS, Thresholds
from skewscope.errors import SkewscopeError, SourceError, one_line
from skewscope.frame import Evidence
from skewscope.monitor.history import LEASE_RUNS, LEASE_SLACK_S, HistoryStore
from skewscope.monitor.incidents import CALM_RUNS, OPEN_RUNS, Incident, IncidentTracker
from skewscope.monitor.status import WatchStatus
from skewscope.report.model import Report
from skewscope.sources.sampler import STOP_GRACE_S, NotReady, RollingScraper


class Source(Protocol):
    """What the loop needs from a source: a description, a loader, and cleanup."""

    description: str

    def load(self, now: float) -> Evidence: ...

    def problems(self, since: float) -> list[str]:
        """Partial failures since ``since`` (epoch s) that did not stop the load."""
        ...

    def close(self) -> None: ...


@dataclass
class PrometheusSource:
    """Each run loads [now - last, now] (``loader``: a full read such as a partial of
    load_prometheus, or ``IncrementalPrometheus.load``, which reads only the windows it does not
    keep; ``closer`` then ends its connections)."""

    description: str
    last_s: float
    loader: Callable[[float, float], Evidence]  # (start, end) -> Evidence
    closer: Callable[[], None] | None = None

    def load(self, now: float) -> Evidence:
        return self.loader(now - self.last_s, now)

    def problems(self, since: float) -> list[str]:
        return []

    def close(self) -> None:
        if self.closer is not None:
            self.closer()


@dataclass
class ScrapeSource:
    """A rolling sampler: runs reduce the scrapes already in memory (``load_with``: the same
    with the gateway's view attached, given the run's range)."""

    description: str
    sampler: RollingScraper
    load_with: Callable[[float, float], Evidence] | None = None

    def load(self, now: float) -> Evidence:
        if self.load_with is not None:
            return self.load_with(now - self.sampler.span_s, now)
        return self.sampler.evidence()

    def problems(self, since: float) -> list[str]:
        """Targets that failed every scrape since the previous run; all of them failing is a
        source failure (the buffer holds only stale data), not a partial one."""
        failing = self.sampler.failing_targets(since)
        if failing and len(failing) == len(self.sampler.urls):
            raise SourceError(
                f"all {len(failing)} /metrics targets failed every scrape since "
                f"the previous run (e.g. {failing[0]})"
            )
        return failing

    def close(self) -> None:
        self.sampler.stop()


def _reason(exc: BaseException) -> str:
    if isinstance(exc, SourceError):
        return "source"
    if isinstance(exc, SkewscopeError):  # bad data, or a level the data does not have
        return "input"
    return "internal"


class Watcher:
    """Runs the loop; ``status`` is safe to read from any thread."""

    def __init__(
        self,
        source: Source,
        *,
        last_s: float,
        every_s: float,
        level: str = "auto",
        thresholds: Thresholds = DEFAULT_THRESHOLDS,
        store: HistoryStore | None = None,
        on_run: Callable[[WatchStatus, bool], None] | None = None,
        clock: Clock = SYSTEM_CLOCK,
        calm_runs: int = CALM_RUNS,
        open_runs: int = OPEN_RUNS,
    ) -> None:
        self.source, self.level, self.thresholds = source, level, thresholds
        self.store = store
        self.on_run = on_run  # called after every run with (status, run_was_good)
        self.clock = clock
        self.tracker = IncidentTracker(source.description, calm_runs, open_runs)
        self.stop_event = threading.Event()
        self._lock = threading.Lock()
        self._record_lock = threading.Lock()  # the tracker and the store: one thread at a time
        self._status = WatchStatus(source=source.description, last_s=last_s, every_s=every_s)
        self._prev_run_at = clock.time()
        self._judged: tuple[Evidence, Report] | None = None  # the last evidence and its report
        if store is not None:
            store.close_orphans(self._prev_run_at)

    def _lease(self, now: float) -> float:
        """Until when this writer's open incidents are its own without a renewal."""
        return now + LEASE_RUNS * self.status.every_s + LEASE_SLACK_S

    @property
    def status(self) -> WatchStatus:
        with self._lock:
            return self._status

    def _publish(self, **changes: object) -> WatchStatus:
        with self._lock:
            self._status = replace(self._status, **changes)  # type: ignore[arg-type]
            return self._status

    def run_once(self) -> bool:
        """One diagnosis run; True when it produced a new report."""
        started, t0 = self.clock.time(), self.clock.monotonic()
        st = self.status
        errors = dict(st.errors)
        since, self._prev_run_at = self._prev_run_at, started
        problems: tuple[str, ...] = ()
        try:
            problems = tuple(self.source.problems(since))
            evidence = self.source.load(started)
            if self._judged is not None and evidence is self._judged[0]:
                report = self._judged[1]  # the very evidence judged last run: the same report
            else:
                report = diagnose(evidence, level=self.level, th=self.thresholds)
                self._judged = (evidence, report)
        except NotReady as e:
            self._publish(
                runs=st.runs + 1,
                duration_s=self.clock.monotonic() - t0,
                last_error="",
                warming_up=str(e),
                problems=problems,
                errors=errors,
            )
            return False
        except Exception as e:  # a run never kills the loop: count, show, keep the last report
            self._renew(started, errors)
            reason = _reason(e)
            errors[reason] += 1
            message = one_line(
                str(e) if isinstance(e, SkewscopeError) else f"{type(e).__name__}: {e}"
            )
            self._publish(
                runs=st.runs + 1,
                duration_s=self.clock.monotonic() - t0,
                last_error=f"{reason}: {message}",
                last_error_at=started,
                warming_up="",
                problems=problems,
                errors=errors,
            )
            return False
        ended = self.clock.time()
        errors["target"] += len(problems)
        last_error, last_error_at = "", st.last_error_at
        try:
            with self._record_lock:
                if self.stop_event.is_set():  # abandoned: _finish owns the tracker now
                    return False
                self._record(self.tracker.update(report, ended), ended)
        except Exception as e:  # the history failing must not stop the monitoring
            errors["history"] += 1
            last_error, last_error_at = one_line(f"history: {e}"), ended
        self._publish(
            report=report,
            report_at=ended,
            runs=st.runs + 1,
            good_runs=st.good_runs + 1,
            duration_s=self.clock.monotonic() - t0,
            last_error=last_error,
            last_error_at=last_error_at,
            warming_up="",
            problems=problems,
            errors=errors,
            open_incidents=tuple(self.tracker.open.values()),
        )
        return True

    def _record(self, changed: list[Incident], now: float) -> None:
        if self.store is None:
            return
        lease = self._lease(now)
        for incident in changed:
            self.tracker.assign(self.store.save(incident, lease))
        self.store.renew(lease)
        self.store.close_orphans(now)  # a watch that died while this one runs: its lease ends

    def _renew(self, now: float, errors: dict[str, int]) -> None:
        """A failed run keeps this writer's incidents open (and its own)."""
        if self.store is None or not self.tracker.open:
            return
        try:
            with self._record_lock:
                if not self.stop_event.is_set():
                    self.store.renew(self._lease(now))
        except Exception:
            errors["history"] += 1

    def _notify(self, good: bool) -> None:
        if self.on_run is not None:
            self.on_run(self.status, good)

    def loop(self, max_runs: int | None = None) -> None:
        """Run every ``every_s`` until ``stop()`` (or ``max_runs``); a run longer than the
        interval delays the next one instead of stacking runs. A run still in flight when the
        loop stops is abandoned (its thread is a daemon), so stopping never waits on a query."""
        every = self.status.every_s
        runs = 0
        next_due = self.clock.monotonic()
        while not self.stop_event.is_set():
            result: list[bool] = []
            worker = threading.Thread(
                target=self._run_into, args=(result,), name="skewscope-run", daemon=True
            )
            worker.start()
            while worker.is_alive() and not self.stop_event.wait(0.05):
                pass
            if not result:  # stopped mid-run
                break
            self._notify(result[0])
            runs += 1
            if max_runs is not None and runs >= max_runs:
                break
            next_due = max(next_due + every, self.clock.monotonic())
            self.clock.sleep(max(0.0, next_due - self.clock.monotonic()), self.stop_event)
        self._finish()

    def _run_into(self, result: list[bool]) -> None:
        result.append(self.run_once())

    def _finish(self) -> None:
        """End the open incidents. An abandoned run records nothing after this; one stuck in a
        history write gets ``STOP_GRACE_S``, after which the incidents are left to their lease
        (the next watch closes them), so stopping never waits on the database either."""
        self.stop_event.set()
        if not self._record_lock.acquire(timeout=STOP_GRACE_S):
            return
        try:
            self._save_closed(self.tracker.close_all())
        finally:
            self._record_lock.release()

    def _save_closed(self, closed: list[Incident]) -> None:
        if self.store is not None:
            for incident in closed:
                try:
                    self.store.save(incident)
                except Exception:  # shutting down: the next start closes what is left open
                    break

    def stop(self) -> None:
        self.stop_event.set()
