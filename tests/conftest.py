"""Shared fixtures. Helpers live in the ``helpers`` package (pyproject: pytest ``pythonpath``).

The backends: a REAL Prometheus and a REAL VictoriaMetrics on 127.0.0.1, loaded with known
history (session scope, started only by the tests that ask for them). A missing binary fails the
run loudly with the install command: the online path is only tested against the real thing.
"""

from __future__ import annotations

import os
from collections.abc import Iterator

import httpx
import pytest
from hypothesis import settings

from helpers.backends import backfill, running, serve_prometheus, wait_until
from helpers.binaries import need
from helpers.online_history import history, to_openmetrics, to_vm_import
from helpers.online_servers import free_port

# CI shares two cores with servers the tests start: judge properties, not per-example speed.
settings.register_profile("shared-cores", deadline=None)
# In CI the examples are derandomized: a red build is reproducible, never a roll of the dice.
settings.register_profile("ci", deadline=None, derandomize=True, print_blob=True)
settings.load_profile("ci" if os.environ.get("CI") else "shared-cores")


def pytest_collection_modifyitems(config, items):  # type: ignore[no-untyped-def]
    """Heavy tests are opt-in: without ``-m`` selecting them they are deselected (not skipped)."""
    if config.getoption("-m"):
        return
    heavy = [i for i in items if i.get_closest_marker("heavy")]
    if heavy:
        config.hook.pytest_deselected(items=heavy)
        items[:] = [i for i in items if not i.get_closest_marker("heavy")]


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
