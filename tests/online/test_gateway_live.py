"""``--gateway-url``: a REAL sglang-router's live worker list beside the engines' /metrics.

The router is started in front of three of the four simulated engines: the fourth gets no
routed traffic, and the diagnosis must say it is not in the router's pool.
"""

from __future__ import annotations

import threading
from pathlib import Path

import httpx
import pytest
from gateway_servers import base_urls, router, scrape_diagnose, sim_engines
from online_servers import json_handler, serve

from skewscope.errors import SourceError
from skewscope.sources.gateway_live import read_workers


def _traffic(url: str, stop: threading.Event) -> None:
    with httpx.Client(timeout=10) as c:
        for j in range(2000):  # bounded; stopped when the scrape ends
            if stop.is_set():
                return
            assert c.post(f"{url}/v1/completions",
                          json={"model": "m", "prompt": f"q {j}", "max_tokens": 4}
                          ).status_code == 200


def test_unit_missing_from_the_routers_pool(tmp_path: Path) -> None:
    with sim_engines("idle") as cluster:
        workers = base_urls(cluster)
        left_out = workers[3].removeprefix("http://")
        with router("sglang-router", workers[:3], tmp_path, "round_robin") as (url, _):
            assert set(read_workers(url)) == {w.removeprefix("http://") for w in workers[:3]}
            doc = scrape_diagnose(cluster, lambda stop: _traffic(url, stop),
                                  ["--gateway-url", url], tmp_path / "report.json")
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
    [(200, b"<html>", "did not return a worker list"),
     (200, b'{"workers": [{"no_url": 1}]}', "did not return a worker list"),
     (404, b"{}", "answered HTTP 404")],
)
def test_bad_worker_list_is_one_source_error(status: int, body: bytes, needle: str) -> None:
    with serve(json_handler(lambda _h: (status, body))) as url, pytest.raises(SourceError) as e:
        read_workers(url, timeout_s=5)
    assert needle in str(e.value) and "\n" not in str(e.value)
