"""Fixtures: a REAL Prometheus and a REAL VictoriaMetrics on 127.0.0.1, loaded with known history.

A missing binary fails the run loudly with the install command: the online path is only tested
against the real thing. Servers live in tmp dirs, bind loopback only and are killed at teardown.
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
from online_history import history, to_openmetrics, to_vm_import
from online_servers import free_port

from binaries import need


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


@pytest.fixture(scope="session")
def samples() -> list:  # type: ignore[type-arg]
    return history()


@pytest.fixture(scope="session")
def prometheus_url(tmp_path_factory: pytest.TempPathFactory, samples: list) -> Iterator[str]:  # type: ignore[type-arg]
    """Prometheus 2.x on a copy of blocks backfilled with promtool from OpenMetrics text."""
    prom = need("prometheus", "prometheus")
    promtool = need("promtool", "prometheus")
    tmp = tmp_path_factory.mktemp("prometheus")
    (tmp / "history.om").write_text(to_openmetrics(samples))
    blocks = tmp / "blocks"
    backfill(promtool, tmp / "history.om", blocks, timeout_s=60)
    with serve_prometheus(prom, blocks, tmp) as url:
        yield url


@pytest.fixture(scope="session")
def victoria_url(tmp_path_factory: pytest.TempPathFactory, samples: list) -> Iterator[str]:  # type: ignore[type-arg]
    """VictoriaMetrics single node, history imported via /api/v1/import/prometheus (ms)."""
    vm = need("victoria-metrics", "victoria-metrics")
    tmp = tmp_path_factory.mktemp("victoria")
    port = free_port()
    cmd = [
        vm,
        f"-storageDataPath={tmp / 'vm'}",
        f"-httpListenAddr=127.0.0.1:{port}",
        "-retentionPeriod=100y",
        "-search.disableCache",
    ]
    url = f"http://127.0.0.1:{port}"
    with running(cmd, tmp / "vm.log") as proc:
        wait_until(
            lambda: proc.poll() is None and httpx.get(f"{url}/health").status_code == 200,
            f"VictoriaMetrics (log: {tmp / 'vm.log'})",
        )
        resp = httpx.post(f"{url}/api/v1/import/prometheus", content=to_vm_import(samples))
        assert resp.status_code == 204, resp.text
        n_series = len({(s.name, s.labels) for s in samples})

        def all_series_queryable() -> bool:
            httpx.get(f"{url}/internal/force_flush")
            r = httpx.get(
                f"{url}/api/v1/series",
                params={"match[]": '{job=~".+"}', "start": samples[0].t, "end": samples[-1].t},
            )
            return len(r.json().get("data", [])) >= n_series

        wait_until(all_series_queryable, "VictoriaMetrics import")
        yield url


@pytest.fixture(params=["prometheus", "victoria"])
def backend(request: pytest.FixtureRequest) -> str:
    """Each truth test runs against both real backends: the PromQL must not be Prometheus-only."""
    return str(request.getfixturevalue(f"{request.param}_url"))
