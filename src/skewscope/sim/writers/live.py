"""Live mode: one loopback HTTP /metrics endpoint per simulated instance, replaying the run.

Lets the online sources and a real Prometheus/VictoriaMetrics scrape a simulated cluster as if
it were real.  Simulated time runs at ``speed`` x wall time from ``start_s`` and stops at the
run's end; the servers shut themselves down ``grace_s`` wall seconds after that, so a forgotten
cluster never outlives a test run.  Plain text ``version=0.0.4`` is served on purpose: it keeps
the colons in ``vllm:*`` names (OpenMetrics negotiation would escape them, see
real-components.md).
"""

from __future__ import annotations

import math
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import TYPE_CHECKING

from skewscope.sim.writers.exposition import CONTENT_TYPE, ClusterModel

if TYPE_CHECKING:
    from types import TracebackType

    from skewscope.sim.records import SimResult


MAX_PORT = 65535
READ_TIMEOUT_S = 10.0  # a connection that sends no complete request for this long is closed
_WAIT_SLICE_S = 0.2  # wait() wakes this often so Ctrl-C (SIGINT) is handled in the main thread


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    cluster: LiveCluster
    instance: str
    read_timeout_s: float


class _Handler(BaseHTTPRequestHandler):
    server: _Server

    def setup(self) -> None:
        super().setup()
        # a client that sends nothing (or half a request) cannot pin a thread forever
        self.connection.settimeout(self.server.read_timeout_s)

    def do_GET(self) -> None:
        if self.path.split("?", 1)[0] != "/metrics":
            self.send_error(404)
            return
        cluster = self.server.cluster
        body = cluster.model.text(self.server.instance, cluster.sim_time()).encode()
        self.send_response(200)
        self.send_header("Content-Type", CONTENT_TYPE)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: object) -> None:
        """Silence per-request logging (scrapers poll every few seconds)."""


class LiveCluster:
    """Running /metrics servers of a simulated cluster; a context manager that stops them."""

    def __init__(self, model: ClusterModel, start_s: float, speed: float, grace_s: float,
                 read_timeout_s: float = READ_TIMEOUT_S) -> None:
        self.model = model
        self.read_timeout_s = read_timeout_s
        self.start_s = start_s
        self.speed = speed
        self.grace_s = grace_s
        self.wall_start = time.monotonic()
        self._servers: dict[str, _Server] = {}
        self._threads: list[threading.Thread] = []
        self._stopped = threading.Event()
        self._lock = threading.Lock()

    def sim_time(self) -> float:
        """Simulated time now, clamped to the end of the run."""
        t = self.start_s + (time.monotonic() - self.wall_start) * self.speed
        return min(t, self.model.end_s)

    @property
    def urls(self) -> dict[str, str]:
        """instance name -> ``http://127.0.0.1:<port>/metrics``."""
        return {i: f"http://{s.server_address[0]!s}:{s.server_address[1]}/metrics"
                for i, s in self._servers.items()}

    @property
    def stopped(self) -> bool:
        return self._stopped.is_set()

    def _start(self, host: str, base_port: int) -> None:
        for k, inst in enumerate(self.model.instances):
            port = base_port + k if base_port else 0
            try:
                srv = _Server((host, port), _Handler)
            except OSError as e:  # name the port: the caller only knows the first one
                raise OSError(e.errno, e.strerror, f"{host}:{port}") from None
            srv.cluster, srv.instance, srv.read_timeout_s = self, inst, self.read_timeout_s
            self._servers[inst] = srv
            th = threading.Thread(target=srv.serve_forever, kwargs={"poll_interval": 0.2},
                                  name=f"skewscope-live-{inst}", daemon=True)
            th.start()
            self._threads.append(th)
        remaining = max(0.0, (self.model.end_s - self.start_s) / self.speed) + self.grace_s
        watchdog = threading.Thread(target=self._expire, args=(remaining,), daemon=True,
                                    name="skewscope-live-watchdog")
        watchdog.start()

    def _expire(self, after_s: float) -> None:
        if not self._stopped.wait(after_s):
            self.stop()

    def wait(self, timeout: float | None = None) -> bool:
        """Block until stopped (by :meth:`stop` or the end-of-run watchdog), or ``timeout``.

        Waits in short slices: an untimed lock wait in the main thread is not woken by SIGINT,
        so Ctrl-C would go unnoticed until the run ended.
        """
        deadline = None if timeout is None else time.monotonic() + timeout
        while not self._stopped.is_set():
            left = _WAIT_SLICE_S if deadline is None else min(_WAIT_SLICE_S,
                                                              deadline - time.monotonic())
            if left <= 0:
                break
            self._stopped.wait(left)
        return self._stopped.is_set()

    def stop(self) -> None:
        """Shut every server down and close its socket (idempotent)."""
        with self._lock:
            if self._stopped.is_set():
                return
            self._stopped.set()
            for srv in self._servers.values():
                srv.shutdown()
                srv.server_close()

    def __enter__(self) -> LiveCluster:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.stop()


def serve(
    result: SimResult, dialect: str = "vllm", host: str = "127.0.0.1", base_port: int = 0,
    speed: float = 1.0, *, start_s: float | None = None, grace_s: float = 60.0,
    read_timeout_s: float = READ_TIMEOUT_S,
) -> LiveCluster:
    """Start one /metrics server per instance (instance ``k`` on ``base_port + k``, or an
    ephemeral port when ``base_port`` is 0).  Loopback only: the simulator is a test fixture,
    not a service."""
    if host not in ("127.0.0.1", "localhost", "::1"):
        raise ValueError("live mode serves on loopback only")
    if not (math.isfinite(speed) and speed > 0):
        raise ValueError("speed must be finite and positive")
    if not 0 <= base_port <= MAX_PORT - (len(result.instances) - 1 if base_port else 0):
        raise ValueError(f"ports {base_port}..{base_port + len(result.instances) - 1} are not all "
                         f"in 1..{MAX_PORT}")
    cluster = LiveCluster(ClusterModel(result, dialect),
                          result.start_s if start_s is None else start_s, speed, grace_s,
                          read_timeout_s)
    try:
        cluster._start(host, base_port)
    except BaseException:
        cluster.stop()
        raise
    return cluster
