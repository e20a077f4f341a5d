"""Real gateways on 127.0.0.1 in front of the simulator's OpenAI-compatible live servers:
nginx (Debian ``nginx``, a plain process with its own prefix), sglang-router and vllm-router
(PyPI ``sglang-router``, ``vllm-router``), plus a real Prometheus scraping router and engines.

Every process binds loopback only, lives in a tmp dir and is stopped at teardown; load is a
bounded number of requests sent by the test itself.
"""

from __future__ import annotations

import contextlib
import json
import threading
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import httpx

from helpers.backends import running, wait_until
from helpers.binaries import need
from helpers.online_servers import free_port
from skewscope.catalogue import LiveClock
from skewscope.cli import main
from skewscope.sim.engine import simulate
from skewscope.sim.scenario import load_scenario
from skewscope.sim.writers.live import LiveCluster, serve

# nginx variables as docs/gateway.md recommends logging them (key=value, auto-detected).
NGINX_FORMAT = (
    "msec=$msec time=$time_iso8601 remote_addr=$remote_addr status=$status "
    "request_length=$request_length request_time=$request_time "
    "upstream_addr=$upstream_addr upstream_response_time=$upstream_response_time "
    'http_x_session_id="$http_x_session_id"'
)


@contextlib.contextmanager
def sim_engines(scenario: str = "idle", grace_s: float = 120.0) -> Iterator[LiveCluster]:
    """The scenario's instances served live (OpenAI API + /metrics) on free loopback ports, on
    a manual clock that the gateway tests never move: the replay stays at its start, so the
    engines' counters are exactly the requests the router sent them (the truth is what the
    test did), however long a busy machine makes the test."""
    result = simulate(load_scenario(scenario), record_members=False)
    with serve(result, "vllm", grace_s=grace_s, live_clock=LiveClock.MANUAL) as cluster:
        yield cluster


def base_urls(cluster: LiveCluster) -> list[str]:
    return [u.removesuffix("/metrics") for u in cluster.urls.values()]


@contextlib.contextmanager
def nginx(upstreams: Sequence[str], tmp: Path, balance: str = "") -> Iterator[tuple[str, Path]]:
    """nginx proxying to ``upstreams`` (host:port); yields (its URL, its access log)."""
    binary = need("nginx", "nginx")
    port = free_port()
    for d in ("logs", "tmp"):
        (tmp / d).mkdir(parents=True, exist_ok=True)
    servers = "\n".join(f"    server {u};" for u in upstreams)
    log = tmp / "logs" / "access.log"
    conf = tmp / "nginx.conf"
    conf.write_text(f"""
daemon off;
master_process off;
worker_processes 1;
pid {tmp}/nginx.pid;
error_log {tmp}/logs/error.log warn;
events {{ worker_connections 256; }}
http {{
  client_body_temp_path {tmp}/tmp/body;
  proxy_temp_path {tmp}/tmp/proxy;
  fastcgi_temp_path {tmp}/tmp/fastcgi;
  uwsgi_temp_path {tmp}/tmp/uwsgi;
  scgi_temp_path {tmp}/tmp/scgi;
  log_format skewscope '{NGINX_FORMAT}';
  access_log {log} skewscope;
  upstream engines {{
    {balance}
{servers}
  }}
  server {{
    listen 127.0.0.1:{port};
    location = /nginx-ready {{ return 204; }}
    location / {{ proxy_pass http://engines; }}
  }}
}}
""")
    url = f"http://127.0.0.1:{port}"
    with running([binary, "-p", str(tmp), "-c", str(conf)], tmp / "nginx.out") as proc:
        wait_until(
            lambda: proc.poll() is None and httpx.get(f"{url}/nginx-ready").status_code == 204,
            f"nginx (log: {tmp / 'logs' / 'error.log'})",
        )
        yield url, log


ROUTER_PACKAGES = {"sglang-router": "sglang-router (pip)", "vllm-router": "vllm-router (pip)"}


@contextlib.contextmanager
def router(
    kind: str, workers: Sequence[str], tmp: Path, policy: str, extra: Sequence[str] = ()
) -> Iterator[tuple[str, str]]:
    """sglang-router or vllm-router (same flags; sglang's under ``launch``) in front of
    ``workers``; yields (its URL, its /metrics host:port)."""
    binary = need(kind, ROUTER_PACKAGES[kind])
    port, mport = free_port(), free_port()
    cmd = [
        binary,
        *(["launch"] if kind == "sglang-router" else []),
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--worker-urls",
        *workers,
        "--policy",
        policy,
        "--prometheus-host",
        "127.0.0.1",
        "--prometheus-port",
        str(mport),
        "--worker-startup-check-interval",
        "1",
        "--worker-startup-timeout-secs",
        "30",
        "--health-check-interval-secs",
        "1",
        "--log-level",
        "warn" if kind == "sglang-router" else "warning",
        *extra,
    ]
    url = f"http://127.0.0.1:{port}"
    with running(cmd, tmp / "router.log") as proc:
        wait_until(
            lambda: (
                proc.poll() is None
                and len(httpx.get(f"{url}/workers").json().get("workers", [])) == len(workers)
            ),
            f"{kind} (log: {tmp / 'router.log'})",
            timeout_s=60,
        )
        yield url, f"127.0.0.1:{mport}"


@contextlib.contextmanager
def scraping_prometheus(targets: Sequence[str], tmp: Path, interval_s: int = 1) -> Iterator[str]:
    """A real Prometheus scraping ``targets`` (host:port) every ``interval_s`` seconds."""
    binary = need("prometheus", "prometheus")
    port = free_port()
    listed = ", ".join(f"'{t}'" for t in targets)
    (tmp / "prometheus.yml").write_text(
        f"global:\n  scrape_interval: {interval_s}s\n  evaluation_interval: {interval_s}s\n"
        f"scrape_configs:\n  - job_name: fleet\n    static_configs:\n"
        f"      - targets: [{listed}]\n"
    )
    cmd = [
        binary,
        f"--config.file={tmp / 'prometheus.yml'}",
        f"--storage.tsdb.path={tmp / 'data'}",
        f"--web.listen-address=127.0.0.1:{port}",
    ]
    url = f"http://127.0.0.1:{port}"
    with running(cmd, tmp / "prometheus.log") as proc:
        wait_until(
            lambda: proc.poll() is None and httpx.get(f"{url}/-/ready").status_code == 200,
            f"Prometheus (log: {tmp / 'prometheus.log'})",
        )
        yield url


def volume_gate(tmp: Path) -> list[str]:
    """``--config`` with the volume gates lowered (30 requests in the range, 1 a unit a window):
    the traffic is as fast as the gateway answers, so a busy machine sends fewer than the
    default 100 in the range (57 seen) and some 1 s windows fall under 2 requests a unit (5 of 9
    seen); what the gateway tests check is who got the traffic, not the gates."""
    (tmp / "gate.toml").write_text(
        "[thresholds]\nmin_requests_total = 30\nmin_requests_per_window = 1.0\n"
    )
    return ["--config", str(tmp / "gate.toml")]


def scrape_diagnose(
    cluster: LiveCluster, load: Callable[[threading.Event], None], extra: Sequence[str], out: Path
) -> dict[str, Any]:
    """``diagnose --scrape`` of every engine for 9 s (1 s windows) while ``load`` runs in a
    thread until told to stop; the JSON report."""
    stop = threading.Event()
    thread = threading.Thread(target=load, args=(stop,))
    thread.start()
    try:
        code = main(
            [
                "diagnose",
                "--scrape",
                *cluster.urls.values(),
                "--duration",
                "9s",
                "--interval",
                "250ms",
                "--window",
                "1s",
                *extra,
                "--format",
                "json",
                "-o",
                str(out),
            ]
        )
    finally:
        stop.set()
        thread.join(timeout=30)
    assert code == 0
    return json.loads(out.read_text())  # type: ignore[no-any-return]
