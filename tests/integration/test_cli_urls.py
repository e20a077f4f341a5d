"""A bare URL as diagnose's source: a real Prometheus is read as --prometheus, a (simulated)
/metrics endpoint as --scrape, a URL without a scheme gets http:// with a note, and a URL where
nothing answers is one clear line (exit 4)."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from helpers.online_history import SPAN, T0
from helpers.online_servers import free_port
from skewscope.catalogue import LiveClock
from skewscope.cli import main
from skewscope.cli.urls import looks_like_url
from skewscope.sim.engine import simulate
from skewscope.sim.scenario import builtin_scenarios
from skewscope.sim.writers.live import serve

RANGE = [
    "--start",
    str(T0),
    "--end",
    str(T0 + SPAN),
    "--step",
    "60s",
    "--selector",
    'job="vllm-dp"',
    "--format",
    "json",
]


@pytest.mark.parametrize("strip_scheme", [False, True])
def test_prometheus_url_as_path_reads_the_api(
    prometheus_url: str, strip_scheme: bool, capsys: pytest.CaptureFixture[str]
) -> None:
    arg = prometheus_url.removeprefix("http://") if strip_scheme else prometheus_url
    assert main(["diagnose", arg, *RANGE]) == 0
    out, err = capsys.readouterr()
    assert json.loads(out)["source"] == "prometheus"
    assert "answers as a Prometheus API (/api/v1/status/buildinfo)" in err
    assert ("http:// assumed" in err) == strip_scheme


def test_prometheus_url_without_a_range_says_so(
    prometheus_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["diagnose", prometheus_url]) == 2
    assert "is a Prometheus API: give a range" in capsys.readouterr().err


def test_metrics_endpoint_as_path_is_scraped(capsys: pytest.CaptureFixture[str]) -> None:
    result = simulate(builtin_scenarios()["dp-count"], record_members=False)
    with serve(result, "vllm", live_clock=LiveClock.SCRAPE, step_s=5.0, grace_s=30.0) as cluster:
        base = cluster.urls["inst-0"].removesuffix("/metrics").removeprefix("http://")
        code = main(
            [
                "diagnose",
                base,
                "--duration",
                "3s",
                "--interval",
                "0.5s",
                "--window",
                "1s",
                "--format",
                "json",
            ]
        )
    assert code == 0
    out, err = capsys.readouterr()
    assert json.loads(out)["source"] == "scrape"
    assert "http:// assumed" in err and f"reading it as --scrape http://{base}/metrics" in err


def test_nothing_answering_is_one_line_exit_4(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["diagnose", f"http://127.0.0.1:{free_port()}"]) == 4
    err = capsys.readouterr().err.strip()
    assert err.startswith("skewscope: error:") and "\n" not in err and "no answer" in err


class _Html(BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        body = b"<html><body>hello</body></html>"
        self.send_response(200)
        self.send_header("Content-Type", "text/html")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: object) -> None:
        pass


@pytest.fixture
def html_site() -> Iterator[str]:
    srv = ThreadingHTTPServer(("127.0.0.1", 0), _Html)
    th = threading.Thread(target=srv.serve_forever, daemon=True)
    th.start()
    try:
        yield f"http://127.0.0.1:{srv.server_address[1]}"
    finally:
        srv.shutdown()
        srv.server_close()


def test_a_web_page_is_neither_and_says_what_was_tried(
    html_site: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["diagnose", html_site]) == 4
    err = capsys.readouterr().err.strip()
    assert "neither a Prometheus API nor a /metrics endpoint" in err
    assert "/api/v1/status/buildinfo: not JSON" in err and "not a metrics exposition" in err


def test_which_paths_are_urls(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "a:1").mkdir()
    assert looks_like_url("http://prom:9090") and looks_like_url("host:9090")
    assert looks_like_url("10.0.0.5:8000/metrics") and looks_like_url("[::1]:9090")
    assert not looks_like_url("prof/node-a") and not looks_like_url("a=prof/0423")
    assert not looks_like_url("a:1")  # an existing folder wins
