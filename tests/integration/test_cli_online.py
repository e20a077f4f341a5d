"""The CLI's online paths end to end: live simulated /metrics scraped by `diagnose --scrape`,
and user-facing errors from `diagnose --prometheus` as one line with the right exit code."""

from __future__ import annotations

import json

import pytest

from skewscope.catalogue import LiveClock
from skewscope.cli import main
from skewscope.sim.engine import simulate
from skewscope.sim.scenario import builtin_scenarios
from skewscope.sim.writers.live import serve


def test_scrape_of_live_simulated_dp_skew_finds_the_hot_rank(
    capsys: pytest.CaptureFixture[str],
) -> None:
    result = simulate(builtin_scenarios()["dp-count"], record_members=False)
    # the scrape's 28 rounds see 140 of the run's 150 simulated seconds, 5 s per scrape
    # however late a busy machine makes them (the run never ends before the scrape does)
    with serve(result, "vllm", live_clock=LiveClock.SCRAPE, step_s=5.0, grace_s=30.0) as cluster:
        urls = list(cluster.urls.values())
        code = main(
            [
                "diagnose",
                "--scrape",
                *urls,
                "--duration",
                "7s",
                "--interval",
                "0.25s",
                "--window",
                "1s",
                "--format",
                "json",
            ]
        )
    assert code == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["source"] == "scrape"
    assert doc["level"] == "dp"
    assert doc["verdict"] == "imbalanced"
    assert doc["hot_units"][0].endswith("/dp0")
    assert doc["findings"][0]["kind"] == "count"


def test_prometheus_down_is_one_line_and_exit_4(capsys: pytest.CaptureFixture[str]) -> None:
    from helpers.online_servers import free_port

    url = f"http://127.0.0.1:{free_port()}"
    assert main(["diagnose", "--prometheus", url, "--last", "10m"]) == 4
    err = capsys.readouterr().err.strip()
    assert err.startswith("skewscope: error:") and "\n" not in err
    assert "127.0.0.1" in err


@pytest.mark.parametrize(
    ("argv", "needle"),
    [
        (["diagnose"], "give profiler PATHs"),
        (["diagnose", "--prometheus", "http://127.0.0.1:1"], "needs a range"),
        (["diagnose", "--prometheus", "http://127.0.0.1:1", "--last", "soon"], "--last"),
        (
            ["diagnose", "--scrape", "http://127.0.0.1:1/metrics", "--duration=-3s"],
            "positive duration",
        ),
    ],
)
def test_usage_errors_are_one_line_with_exit_2(
    argv: list[str], needle: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert needle in err and "\n" not in err


def test_argparse_errors_return_exit_2_instead_of_raising(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert main(["diagnose", "--level", "rack"]) == 2
    assert "invalid choice" in capsys.readouterr().err
