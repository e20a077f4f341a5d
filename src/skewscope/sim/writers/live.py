"""Live mode: one loopback HTTP /metrics endpoint per simulated instance, replaying the run.

Lets the online sources and a real Prometheus/VictoriaMetrics scrape a simulated cluster as if
it were real.  Simulated time starts at ``start_s`` and stops at the run's end; how it moves is
the ``LiveClock`` (issue 24: a test steps time instead of racing it):

- ``wall`` (the default, what a user watching a replay wants): ``speed`` x the ``Clock``'s
  monotonic time. A test may pass a ``ManualClock`` and share it with the scraper, so both
  move together at explicit instants.
- ``scrape``: each /metrics answer of an instance is ``step_s`` later than its previous one
  (the first is at ``start_s``), so a scraper on any schedule, a real Prometheus included, sees
  the run at the same instants however busy the machine is.
- ``manual``: time moves only by :meth:`LiveCluster.advance` or ``POST /sim/advance`` with
  ``{"seconds": N}`` on any instance (the whole cluster moves; the answer is the new time).

Every /metrics answer says which simulated time it is (header ``X-Skewscope-Sim-Time``), and
``GET /sim/time`` answers the cluster's. The servers shut themselves down ``grace_s`` wall
seconds after the run's end is reached (by every instance, when stepped per scrape), so a
forgotten cluster never outlives a test run (a ``manual`` one that is never advanced to its end
is stopped by its owner).  Plain text ``version=0.0.4`` is served on purpose: it keeps the
colons in ``vllm:*`` names (OpenMetrics negotiation would escape them, see real-components.md).

Each server also answers what a router in front of an engine needs (docs/gateway.md):
``POST /v1/completions`` and ``/v1/chat/completions`` (OpenAI shape), ``GET /health``,
``/health_generate``, ``/v1/models``, ``/model_info``, ``/server_info`` (what sglang-router
probes at start-up). A routed request is *not* fed into the simulated run (its replay is fixed);
it is counted on top of it: the instance's finished-request, prompt- and generation-token
counters and its running gauge include the routed requests, so engine metrics show what the
router sent. Its latency follows the instance's routed load: ``ROUTED_BASE_S`` plus
``ROUTED_PER_TOKEN_S`` per output token, times (1 + requests in flight / ``ROUTED_SLOTS``),
capped at ``ROUTED_MAX_S``; latency histograms stay the replay's. Prompt tokens are counted as
whitespace-separated words. ``POST /sim/health`` with ``{"healthy": false}`` makes ``/health``
(and the completions) answer 503 until set back: a test's switch for a failing worker. Routed
requests answer after a wall-clock delay whatever the ``LiveClock``: a real router in front
times them.
"""

from __future__ import annotations

import json
import math
import threading
import time
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import TYPE_CHECKING

import numpy as np

from skewscope.catalogue import LiveClock, MetricType
from skewscope.clock import SYSTEM_CLOCK, Clock
from skewscope.sim.writers.exposition import CONTENT_TYPE, ClusterModel, Family, render_text

if TYPE_CHECKING:
    from types import TracebackType

    from skewscope.sim.records import SimResult


MAX_PORT = 65535
READ_TIMEOUT_S = 10.0  # a connection that sends no complete request for this long is closed
_WAIT_SLICE_S = 0.2  # wait() wakes this often so Ctrl-C (SIGINT) is handled in the main thread
_END_POLL_S = 0.2  # the watchdog looks this often whether a stepped run has reached its end
SIM_TIME_HEADER = "X-Skewscope-Sim-Time"
ROUTED_BASE_S = 0.02
ROUTED_PER_TOKEN_S = 0.002
ROUTED_SLOTS = 8
ROUTED_MAX_S = 2.0
ROUTED_MAX_BODY = 1 << 20  # a completion request body above this is refused (413)
_ROUTED_ROLES = ("finished", "prompt_tokens", "generation_tokens", "running")


@dataclass
class Routed:
    """Requests routed to one instance from outside, counted on top of the replay."""

    finished: float = 0.0
    prompt_tokens: float = 0.0
    generation_tokens: float = 0.0
    running: float = 0.0
    healthy: bool = True

    def add_to(self, fams: list[Family]) -> list[Family]:
        """The families with the routed counts added to the first rank's series."""
        for fam in fams:
            role = fam.spec.role
            hist = fam.spec.kind is MetricType.HISTOGRAM
            if role not in _ROUTED_ROLES or hist or not fam.metrics:
                continue
            extra = getattr(self, role)
            carrier = fam.spec.split
            for s in (
                fam.metrics[0]
                if carrier is None
                else [
                    s
                    for g in fam.metrics[: len(carrier[1])]
                    for s in g
                    if (carrier[0], carrier[2]) in s.labels
                ]
            ):
                s.values = s.values + np.float64(extra)
        return fams


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
        path = self.path.split("?", 1)[0]
        cluster = self.server.cluster
        routed = cluster.routed[self.server.instance]
        if path in ("/health", "/health_generate"):
            self._json(200 if routed.healthy else 503, {"healthy": routed.healthy})
            return
        if path == "/v1/models":
            model = cluster.model.model_name
            self._json(200, {"object": "list", "data": [{"id": model, "object": "model"}]})
            return
        if path in ("/model_info", "/get_model_info", "/server_info", "/get_server_info"):
            # no model_path on purpose: sglang-router would try to fetch its tokenizer from
            # the Hugging Face hub (no network here, and none wanted)
            self._json(200, {"dp_size": 1})
            return
        if path == "/sim/time":
            self._json(200, cluster.time_info())
            return
        if path != "/metrics":
            self.send_error(404)
            return
        with cluster.lock:
            t = cluster.scraped(self.server.instance)
            fams = cluster.model.instances[self.server.instance].families(np.array([t]))
            body = render_text(routed.add_to(fams)).encode()
        self.send_response(200)
        self.send_header("Content-Type", CONTENT_TYPE)
        self.send_header("Content-Length", str(len(body)))
        self.send_header(SIM_TIME_HEADER, f"{t:.3f}")
        self.end_headers()
        self.wfile.write(body)

    def do_POST(self) -> None:
        path = self.path.split("?", 1)[0]
        try:
            n = int(self.headers.get("Content-Length") or 0)
        except ValueError:
            n = -1
        if not 0 <= n <= ROUTED_MAX_BODY:
            self.send_error(413 if n > 0 else 411)
            return
        try:
            body = json.loads(self.rfile.read(n) or b"{}")
        except ValueError:
            body = None
        if not isinstance(body, dict):
            self._json(400, {"error": "expected a JSON object"})
            return
        routed = self.server.cluster.routed[self.server.instance]
        if path == "/sim/health":
            routed.healthy = bool(body.get("healthy", True))
            self._json(200, {"healthy": routed.healthy})
            return
        if path == "/sim/advance":
            self._advance(body.get("seconds"))
            return
        if path not in ("/v1/completions", "/v1/chat/completions"):
            self.send_error(404)
            return
        if not routed.healthy:
            self._json(503, {"error": "unhealthy"})
            return
        self._complete(path, body, routed)

    def _advance(self, seconds: object) -> None:
        """``POST /sim/advance``: the whole cluster ``seconds`` on (manual clock only)."""
        cluster = self.server.cluster
        if cluster.live_clock is not LiveClock.MANUAL:
            self._json(
                409,
                {
                    "error": f"simulated time runs on the {cluster.live_clock} clock; "
                    "only a manual one is advanced"
                },
            )
            return
        if not (
            isinstance(seconds, int | float)
            and not isinstance(seconds, bool)
            and math.isfinite(seconds)
            and seconds >= 0
        ):
            self._json(400, {"error": 'expected {"seconds": N}, N a number >= 0'})
            return
        cluster.advance(float(seconds))
        self._json(200, cluster.time_info())

    def _complete(self, path: str, body: dict[str, object], routed: Routed) -> None:
        """Answer after a delay that follows this instance's routed load; count the request."""
        chat = path.endswith("chat/completions")
        text = (
            " ".join(
                str(m.get("content", ""))
                for m in body.get("messages", [])  # type: ignore[attr-defined]
                if isinstance(m, dict)
            )
            if chat
            else str(body.get("prompt", ""))
        )
        prompt = float(len(text.split()))
        raw = body.get("max_tokens", body.get("max_completion_tokens", 16))
        out = float(raw) if isinstance(raw, int | float) and 0 < raw <= 1e6 else 16.0
        lock = self.server.cluster.lock
        with lock:
            routed.running += 1
            load = routed.running
        try:
            time.sleep(
                min(
                    ROUTED_MAX_S,
                    (ROUTED_BASE_S + ROUTED_PER_TOKEN_S * out) * (1 + load / ROUTED_SLOTS),
                )
            )
        finally:
            with lock:
                routed.running -= 1
                routed.finished += 1
                routed.prompt_tokens += prompt
                routed.generation_tokens += out
        choice = (
            {
                "index": 0,
                "message": {"role": "assistant", "content": "ok"},
                "finish_reason": "length",
            }
            if chat
            else {"index": 0, "text": "ok", "finish_reason": "length"}
        )
        self._json(
            200,
            {
                "id": "cmpl-sim",
                "object": "chat.completion" if chat else "text_completion",
                "model": self.server.cluster.model.model_name,
                "choices": [choice],
                "usage": {
                    "prompt_tokens": int(prompt),
                    "completion_tokens": int(out),
                    "total_tokens": int(prompt + out),
                },
            },
        )

    def _json(self, status: int, obj: object) -> None:
        data = json.dumps(obj).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, format: str, *args: object) -> None:
        """Silence per-request logging (scrapers poll every few seconds)."""


class LiveCluster:
    """Running /metrics servers of a simulated cluster; a context manager that stops them."""

    def __init__(
        self,
        model: ClusterModel,
        start_s: float,
        speed: float,
        grace_s: float,
        read_timeout_s: float = READ_TIMEOUT_S,
        *,
        clock: Clock = SYSTEM_CLOCK,
        live_clock: LiveClock = LiveClock.WALL,
        step_s: float = 0.0,
    ) -> None:
        self.model = model
        self.read_timeout_s = read_timeout_s
        self.start_s = start_s
        self.speed = speed
        self.grace_s = grace_s
        self.clock = clock
        self.live_clock = live_clock
        self.step_s = step_s
        self.wall_start = clock.monotonic()
        self._servers: dict[str, _Server] = {}
        self._threads: list[threading.Thread] = []
        self._stopped = threading.Event()
        self._lock = threading.Lock()
        self.lock = threading.Lock()  # guards the routed counts and the stepped times
        self.routed = {i: Routed() for i in model.instances}
        self._advanced = 0.0  # manual: simulated seconds advanced so far
        self._scrapes = dict.fromkeys(model.instances, 0)  # scrape: answers served so far

    def sim_time(self, instance: str | None = None) -> float:
        """Simulated time now (of ``instance`` when stepped per scrape, else of the slowest
        instance: the time of its next answer), clamped to the end of the run."""
        if self.live_clock is LiveClock.MANUAL:
            t = self.start_s + self._advanced
        elif self.live_clock is LiveClock.SCRAPE:
            n = self._scrapes[instance] if instance else min(self._scrapes.values())
            t = self.start_s + n * self.step_s
        else:
            t = self.start_s + (self.clock.monotonic() - self.wall_start) * self.speed
        return min(t, self.model.end_s)

    def scraped(self, instance: str) -> float:
        """The simulated time of this /metrics answer of ``instance`` (call under ``lock``):
        stepped per scrape, the next answer is ``step_s`` later."""
        t = self.sim_time(instance)
        self._scrapes[instance] += 1
        return t

    def advance(self, seconds: float) -> float:
        """Move a manual clock ``seconds`` on (never past the run's end); the new time."""
        if self.live_clock is not LiveClock.MANUAL:
            raise ValueError(f"the {self.live_clock} clock is not advanced by hand")
        if not (math.isfinite(seconds) and seconds >= 0):
            raise ValueError("advance: seconds must be finite and >= 0")
        with self.lock:
            self._advanced = min(self._advanced + seconds, self.model.end_s - self.start_s)
            return self.sim_time()

    def time_info(self) -> dict[str, object]:
        """What ``GET /sim/time`` answers."""
        return {
            "sim_time": self.sim_time(),
            "start_s": self.start_s,
            "end_s": self.model.end_s,
            "clock": str(self.live_clock),
        }

    @property
    def urls(self) -> dict[str, str]:
        """instance name -> ``http://127.0.0.1:<port>/metrics``."""
        return {
            i: f"http://{s.server_address[0]!s}:{s.server_address[1]}/metrics"
            for i, s in self._servers.items()
        }

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
            th = threading.Thread(
                target=srv.serve_forever,
                kwargs={"poll_interval": 0.2},
                name=f"skewscope-live-{inst}",
                daemon=True,
            )
            th.start()
            self._threads.append(th)
        watchdog = threading.Thread(
            target=self._expire, daemon=True, name="skewscope-live-watchdog"
        )
        watchdog.start()

    def _expire(self) -> None:
        """Stop ``grace_s`` wall seconds after the run's end is reached: known in advance on
        the system's wall clock, looked for now and then on any other."""
        end = self.model.end_s
        known = self.live_clock is LiveClock.WALL and self.clock is SYSTEM_CLOCK
        if known and self._stopped.wait(max(0.0, (end - self.start_s) / self.speed)):
            return
        while self.sim_time() < end:
            if self._stopped.wait(_END_POLL_S):
                return
        if not self._stopped.wait(self.grace_s):
            self.stop()

    def wait(self, timeout: float | None = None) -> bool:
        """Block until stopped (by :meth:`stop` or the end-of-run watchdog), or ``timeout``.

        Waits in short slices: an untimed lock wait in the main thread is not woken by SIGINT,
        so Ctrl-C would go unnoticed until the run ended.
        """
        deadline = None if timeout is None else time.monotonic() + timeout
        while not self._stopped.is_set():
            left = (
                _WAIT_SLICE_S
                if deadline is None
                else min(_WAIT_SLICE_S, deadline - time.monotonic())
            )
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

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()


def serve(
    result: SimResult,
    dialect: str = "vllm",
    host: str = "127.0.0.1",
    base_port: int = 0,
    speed: float = 1.0,
    *,
    start_s: float | None = None,
    grace_s: float = 60.0,
    read_timeout_s: float = READ_TIMEOUT_S,
    devices: str | None = None,
    clock: Clock = SYSTEM_CLOCK,
    live_clock: LiveClock = LiveClock.WALL,
    step_s: float = 0.0,
) -> LiveCluster:
    """Start one /metrics server per instance (instance ``k`` on ``base_port + k``, or an
    ephemeral port when ``base_port`` is 0).  Loopback only: the simulator is a test fixture,
    not a service. ``live_clock`` says how simulated time moves (module docstring): ``speed``
    x ``clock`` (wall), ``step_s`` per scrape (scrape), or by ``advance`` (manual)."""
    if host not in ("127.0.0.1", "localhost", "::1"):
        raise ValueError("live mode serves on loopback only")
    if not (math.isfinite(speed) and speed > 0):
        raise ValueError("speed must be finite and positive")
    live_clock = LiveClock(live_clock)
    if live_clock is LiveClock.SCRAPE and not (math.isfinite(step_s) and step_s > 0):
        raise ValueError("a clock stepped per scrape needs a finite positive step_s")
    if not 0 <= base_port <= MAX_PORT - (len(result.instances) - 1 if base_port else 0):
        raise ValueError(
            f"ports {base_port}..{base_port + len(result.instances) - 1} are not all "
            f"in 1..{MAX_PORT}"
        )
    cluster = LiveCluster(
        ClusterModel(result, dialect, devices),
        result.start_s if start_s is None else start_s,
        speed,
        grace_s,
        read_timeout_s,
        clock=clock,
        live_clock=live_clock,
        step_s=step_s,
    )
    try:
        cluster._start(host, base_port)
    except BaseException:
        cluster.stop()
        raise
    return cluster
