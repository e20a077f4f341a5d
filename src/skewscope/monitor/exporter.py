"""Prometheus exporter for ``watch --listen``: the latest diagnosis as metrics, so Alertmanager
alerts on the full method rather than a PromQL approximation of it.

A custom collector renders the current ``WatchStatus`` at every scrape: only the units of the
latest good report are exported, so a unit that left the report leaves no stale series behind.
Names (a contract, docs/monitoring.md):

- ``skewscope_unit_hot{unit,level,kind}``: 1 per hot unit, 0 for every other judged unit
  (``kind="none"`` for those);
- ``skewscope_unit_load_ratio{unit,level,signal}``: unit / peers per heat signal;
- ``skewscope_verdict{verdict}``: 1 for the latest verdict, 0 for the others;
- ``skewscope_last_run_timestamp_seconds``: end of the latest good run;
- ``skewscope_run_duration_seconds``: wall time of the latest run, good or not;
- ``skewscope_run_errors_total{reason}``: failed or partial runs by reason.

Beside ``/metrics`` the server answers the probes a platform deploys it with (docs/deploy.md):
``/healthz`` (200 while the process serves) and ``/readyz`` (200 once a first good report
exists, 503 with the reason before: warming up, or the last error).
"""

from __future__ import annotations

import math
import socket
import threading
from collections.abc import Callable, Iterator
from typing import Any
from wsgiref.simple_server import WSGIRequestHandler, make_server

from prometheus_client import CollectorRegistry
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric

from skewscope.catalogue import Verdict
from skewscope.errors import UsageError
from skewscope.monitor.status import WatchStatus
from skewscope.monitor.units import gateway_shares, hot_units, judged_units

NOT_HOT = "none"  # kind label of a judged unit that is not hot


class ReportCollector:
    """Collector over the latest ``WatchStatus`` (read at scrape time)."""

    def __init__(self, status: Callable[[], WatchStatus]) -> None:
        self._status = status

    def describe(self) -> list[Metric]:
        return []  # families depend on the report; nothing to check at registration

    def collect(self) -> Iterator[Metric]:
        st = self._status()
        hot = GaugeMetricFamily(
            "skewscope_unit_hot",
            "1 when the unit is a persistent hot spot in the latest diagnosis, 0 when judged "
            "and not hot",
            labels=["unit", "level", "kind"],
        )
        ratio = GaugeMetricFamily(
            "skewscope_unit_load_ratio",
            "Unit / peers per heat signal (median over the judged windows of the latest run)",
            labels=["unit", "level", "signal"],
        )
        verdict = GaugeMetricFamily(
            "skewscope_verdict", "1 for the verdict of the latest diagnosis", labels=["verdict"]
        )
        share = GaugeMetricFamily(
            "skewscope_gateway_share",
            "The gateway's share of requests to the unit over the latest run's range (router "
            "metrics in the same Prometheus)",
            labels=["unit", "level", "source"],
        )
        if st.report is not None:
            kinds = {(h.unit, h.level): h.kind for h in hot_units(st.report)}
            for level, u in judged_units(st.report):
                kind = kinds.get((u.unit, level))
                hot.add_metric([u.unit, level, kind or NOT_HOT], 1.0 if kind else 0.0)
                for signal, value in u.load_ratios.items():
                    if math.isfinite(value):
                        ratio.add_metric([u.unit, level, signal], value)
            for v in Verdict:
                verdict.add_metric([v.value], 1.0 if v == st.report.verdict else 0.0)
            for (unit, level), (source, value) in gateway_shares(st.report).items():
                share.add_metric([unit, level, source], value)
        yield hot
        yield ratio
        yield verdict
        yield share
        if st.report_at is not None:
            yield GaugeMetricFamily(
                "skewscope_last_run_timestamp_seconds",
                "Unix time at the end of the latest good diagnosis run",
                value=st.report_at,
            )
        if st.duration_s is not None:
            yield GaugeMetricFamily(
                "skewscope_run_duration_seconds",
                "Wall time of the latest diagnosis run, good or not",
                value=st.duration_s,
            )
        errors = CounterMetricFamily(
            "skewscope_run_errors",
            "Diagnosis runs that failed or were partial, by reason (the last good report stays)",
            labels=["reason"],
        )
        for reason, count in st.errors.items():
            errors.add_metric([reason], float(count))
        yield errors


def parse_listen(text: str) -> tuple[str, int]:
    """``HOST:PORT``, ``[V6]:PORT`` or a bare ``PORT`` (on 127.0.0.1)."""
    host, sep, port = text.rpartition(":")
    if not sep:
        host, port = "127.0.0.1", text
    host = host.strip("[]") or "127.0.0.1"
    if not port.isdigit() or int(port) > 65535:
        raise UsageError(f"--listen: expected HOST:PORT such as 127.0.0.1:9109, got {text!r}")
    return host, int(port)


def readiness(st: WatchStatus) -> tuple[bool, str]:
    """Ready once a good report exists: a platform routes scrapes to it only then."""
    if st.report is not None:
        return True, "ready"
    if st.last_error:
        return False, f"not ready: no good report yet; last error: {st.last_error}"
    return False, f"not ready: {st.warming_up or 'the first run has not finished'}"


def _app(status: Callable[[], WatchStatus], registry: CollectorRegistry) -> Any:
    """WSGI: the probes by path, everything else the Prometheus exposition."""
    from prometheus_client import make_wsgi_app

    metrics = make_wsgi_app(registry)

    def app(environ: dict[str, Any], start_response: Any) -> Any:
        path = environ.get("PATH_INFO", "")
        if path not in PROBES:
            return metrics(environ, start_response)
        ok, text = (True, "ok") if path == "/healthz" else readiness(status())
        start_response(
            "200 OK" if ok else "503 Service Unavailable",
            [("Content-Type", "text/plain; charset=utf-8")],
        )
        return [(text + "\n").encode()]

    return app


PROBES = ("/healthz", "/readyz")


class _QuietHandler(WSGIRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:
        """Probes every few seconds would flood the watch log."""


def serve(status: Callable[[], WatchStatus], listen: str) -> tuple[Any, str]:
    """Start the exporter thread; (server, URL of /metrics). ``server.shutdown()`` stops it."""
    from prometheus_client.exposition import ThreadingWSGIServer

    host, port = parse_listen(listen)
    registry = CollectorRegistry()
    registry.register(ReportCollector(status))

    class Server(ThreadingWSGIServer):
        address_family = socket.AF_INET6 if ":" in host else socket.AF_INET

    try:
        server = make_server(
            host, port, _app(status, registry), Server, handler_class=_QuietHandler
        )
        threading.Thread(
            target=server.serve_forever, daemon=True, name="skewscope-exporter"
        ).start()
    except OSError as e:
        raise UsageError(f"--listen {listen}: cannot listen ({e.strerror or e})") from None
    bound_host, bound_port = str(server.server_address[0]), int(server.server_address[1])
    shown = f"[{bound_host}]" if ":" in bound_host else bound_host
    return server, f"http://{shown}:{bound_port}/metrics"
