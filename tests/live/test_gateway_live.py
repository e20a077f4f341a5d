"""``--gateway-url``: a REAL sglang-router's live worker list beside the engines' /metrics.

The router is started in front of three of the four simulated engines: the fourth gets no
routed traffic, and the diagnosis (``diagnose --scrape`` once, ``watch --scrape`` at every
run) must say it is not in the router's pool.
"""

from __future__ import annotations

import json
import threading
from pathlib import Path
from typing import Any

import httpx
import pytest

from helpers.gateway_servers import base_urls, router, scrape_diagnose, sim_engines, volume_gate
from helpers.online_servers import json_handler, serve
from skewscope.cli import main
from skewscope.errors import SourceError
from skewscope.sources.gateway_live import read_workers


def _traffic(url: str, stop: threading.Event) -> None:
    with httpx.Client(timeout=10) as c:
        for j in range(2000):  # bounded; stopped when the scrape ends
            if stop.is_set():
                return
            assert (
                c.post(
                    f"{url}/v1/completions",
                    json={"model": "m", "prompt": f"q {j}", "max_tokens": 4},
                ).status_code
                == 200
            )


def _watch(
    urls: list[str],
    gateway: str,
    runs: int,
    capsys: pytest.CaptureFixture[str],
    load: threading.Thread,
    stop: threading.Event,
    extra: list[str],
) -> dict[str, Any]:
    """``watch --scrape`` with ``--gateway-url`` for ``runs`` runs of 1 s; its last report
    (a run before the first samples has none: it logs its error and prints no JSON)."""
    capsys.readouterr()
    load.start()
    try:
        code = main(
            [
                "watch",
                "--scrape",
                *urls,
                "--interval",
                "250ms",
                "--window",
                "1s",
                "--last",
                "8s",
                "--every",
                "1s",
                "--no-tui",
                "--json-lines",
                "--gateway-url",
                gateway,
                "--runs",
                str(runs),
                *extra,
            ]
        )
    finally:
        stop.set()
        load.join(timeout=30)
    assert code == 0
    out = capsys.readouterr()
    lines = [ln for ln in out.out.splitlines() if ln.startswith("{")]
    assert f"run={runs} verdict=" in out.err, out.err[-3000:]  # the last run was a good one
    return json.loads(lines[-1])  # type: ignore[no-any-return]


@pytest.mark.parametrize("command", ["diagnose", "watch"])
def test_unit_missing_from_the_routers_pool(
    command: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with sim_engines("idle") as cluster:
        workers = base_urls(cluster)
        left_out = workers[3].removeprefix("http://")
        with router("sglang-router", workers[:3], tmp_path, "round_robin") as (url, _):
            assert set(read_workers(url)) == {w.removeprefix("http://") for w in workers[:3]}
            if command == "diagnose":
                doc = scrape_diagnose(
                    cluster,
                    lambda stop: _traffic(url, stop),
                    ["--gateway-url", url, *volume_gate(tmp_path)],
                    tmp_path / "report.json",
                )
            else:
                stop = threading.Event()
                load = threading.Thread(target=_traffic, args=(url, stop))
                doc = _watch(
                    list(cluster.urls.values()), url, 10, capsys, load, stop, volume_gate(tmp_path)
                )
    assert doc["starved_units"] == [left_out], doc["notes"]
    finding = next(f for f in doc["findings"] if left_out in f["units"])
    assert finding["root_causes"][0]["key"] == "health_check"
    assert f"does not list {left_out}" in finding["summary"]
    assert "not in the pool" in finding["summary"]
    assert doc["gateway"]["source"] == "worker-list"
    assert doc["gateway"]["not_in_gateway"] == [left_out]
    assert any(n.startswith("gateway worker list") for n in doc["notes"])


@pytest.mark.parametrize(
    ("status", "body", "needle"),
    [
        (200, b"<html>", "did not return a worker list"),
        (200, b'{"workers": [{"no_url": 1}]}', "did not return a worker list"),
        (404, b"{}", "answered HTTP 404"),
    ],
)
def test_bad_worker_list_is_one_source_error(status: int, body: bytes, needle: str) -> None:
    with serve(json_handler(lambda _h: (status, body))) as url, pytest.raises(SourceError) as e:
        read_workers(url, timeout_s=5)
    assert needle in str(e.value) and "\n" not in str(e.value)
