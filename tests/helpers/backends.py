"""Real servers for the integration and live tests: start a process, wait on a condition (never a
sleep), backfill promtool blocks and serve them with a real Prometheus on 127.0.0.1.

Servers live in tmp dirs, bind loopback only and are killed at teardown.
"""

from __future__ import annotations

import contextlib
import shutil
import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx
import pytest

from helpers.online_servers import free_port


def wait_until(check: Callable[[], bool], what: str, timeout_s: float = 30.0) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        with contextlib.suppress(httpx.HTTPError):
            if check():
                return
        time.sleep(0.1)
    pytest.fail(f"{what} not ready after {timeout_s:g}s", pytrace=False)


def scraped_after(prom: str, t: float, targets: int, job: str = "fleet") -> bool:
    """Prometheus has scraped all ``targets`` of ``job`` (up) at or after epoch ``t``: what
    happened before ``t`` is in its TSDB. A condition to wait on, instead of a sleep."""
    r = httpx.get(
        f"{prom}/api/v1/query",
        timeout=10,
        params={"query": f'count(timestamp(up{{job="{job}"}} == 1) >= {t:.3f})'},
    )
    got = r.json()["data"]["result"]
    return bool(got) and int(float(got[0]["value"][1])) == targets


@contextlib.contextmanager
def running(cmd: list[str], log: Path) -> Iterator[subprocess.Popen[bytes]]:
    with log.open("wb") as out:
        proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT)
        try:
            yield proc
        finally:
            proc.terminate()
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout=10)


@contextlib.contextmanager
def serve_prometheus(prom: str, blocks: Path, tmp: Path) -> Iterator[str]:
    """A real Prometheus on a copy of promtool-backfilled ``blocks``, on a free loopback port."""
    data = tmp / "data"
    shutil.copytree(blocks, data)
    (tmp / "prometheus.yml").write_text("global:\n  scrape_interval: 15s\n")
    port = free_port()
    cmd = [
        prom,
        f"--config.file={tmp / 'prometheus.yml'}",
        f"--storage.tsdb.path={data}",
        "--storage.tsdb.retention.time=100y",
        f"--web.listen-address=127.0.0.1:{port}",
    ]
    url = f"http://127.0.0.1:{port}"
    with running(cmd, tmp / "prometheus.log") as proc:
        wait_until(
            lambda: proc.poll() is None and httpx.get(f"{url}/-/ready").status_code == 200,
            f"Prometheus (log: {tmp / 'prometheus.log'})",
        )
        yield url


def backfill(promtool: str, openmetrics: Path, blocks: Path, timeout_s: float = 120) -> None:
    """Add the OpenMetrics file's history to the TSDB blocks dir with ``promtool``."""
    done = subprocess.run(
        [promtool, "tsdb", "create-blocks-from", "openmetrics", str(openmetrics), str(blocks)],
        capture_output=True,
        text=True,
        timeout=timeout_s,
    )
    assert done.returncode == 0, done.stderr[-2000:]
