"""The online options' boundary: absurd URL and selector sizes refused at the option, a URL
httpx cannot request is one SourceError line, and ``--scrape`` against ports nobody listens on
gives up after a few rounds instead of waiting out ``--duration``."""

from __future__ import annotations

from pathlib import Path

import pytest

from helpers.online_servers import Quiet, free_port, serve
from skewscope.cli import main

LONG_URL = "http://127.0.0.1:9/" + "a" * 120_000
LONG_SELECTOR = '{job="' + "a" * 100_000 + '"}'


def one_line(capsys: pytest.CaptureFixture[str]) -> str:
    err = capsys.readouterr().err
    assert "Traceback" not in err and err.count("\n") == 1, err
    return err.strip()


@pytest.mark.parametrize(
    ("argv", "option"),
    [
        (["diagnose", "--prometheus", LONG_URL, "--last", "10m"], "--prometheus"),
        (["diagnose", LONG_URL], "PATH"),
        (["diagnose", "--scrape", LONG_URL], "--scrape"),
        (
            [
                "diagnose",
                "--prometheus",
                "http://127.0.0.1:9",
                "--last",
                "10m",
                "--gateway-url",
                LONG_URL,
            ],
            "--gateway-url",
        ),
        (
            [
                "diagnose",
                "--prometheus",
                "http://127.0.0.1:9",
                "--last",
                "10m",
                "--selector",
                LONG_SELECTOR,
            ],
            "--selector",
        ),
        (
            [
                "diagnose",
                "--prometheus",
                "http://127.0.0.1:9",
                "--last",
                "10m",
                "--device-selector",
                LONG_SELECTOR,
            ],
            "--device-selector",
        ),
        (
            [
                "compare",
                "--prometheus",
                LONG_URL,
                "--before-start",
                "0",
                "--before-end",
                "60",
                "--after-start",
                "60",
                "--after-end",
                "120",
            ],
            "--prometheus",
        ),
        (["watch", "--scrape", LONG_URL, "--runs", "1"], "--scrape"),
        (["whatif", "--prometheus", LONG_URL, "--last", "10m"], "--prometheus"),
        (["rules", "--selector", LONG_SELECTOR], "--selector"),
        (["dashboard", "--selector", LONG_SELECTOR], "--selector"),
    ],
)
def test_absurd_sizes_are_refused_at_the_option(
    argv: list[str], option: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(argv) == 2
    err = one_line(capsys)
    assert err.startswith(f"skewscope: error: {option}: ") and "KiB allowed" in err, err


def test_a_url_httpx_refuses_is_one_source_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """With the option's bound raised past httpx's own, httpx.InvalidURL is caught in the one
    HTTP boundary (sources/fetch.py), for the Prometheus client and for a scrape."""
    config = tmp_path / "big.toml"
    config.write_text("[sources]\nmax_url_kb = 200\n")
    assert (
        main(["diagnose", "--config", str(config), "--prometheus", LONG_URL, "--last", "10m"]) == 4
    )
    assert "not a URL httpx can request (URL too long)" in one_line(capsys)
    assert (
        main(
            [
                "diagnose",
                "--config",
                str(config),
                "--scrape",
                LONG_URL,
                "--interval",
                "0.1s",
                "--duration",
                "10m",
            ]
        )
        == 4
    )
    assert "not a URL httpx can request" in one_line(capsys)


@pytest.mark.timeout(120)  # without the give-up this run would last its whole 10 minutes
@pytest.mark.parametrize(("config", "rounds"), [("", 3), ("scrape_give_up_rounds = 5\n", 5)])
def test_scrape_of_ports_nobody_listens_on_gives_up_early(
    tmp_path: Path, config: str, rounds: int, capsys: pytest.CaptureFixture[str]
) -> None:
    cfg = tmp_path / "c.toml"
    cfg.write_text("[sources]\n" + config)
    urls = [f"http://127.0.0.1:{free_port()}/metrics" for _ in range(2)]
    assert (
        main(
            [
                "diagnose",
                "--config",
                str(cfg),
                "--scrape",
                *urls,
                "--interval",
                "0.1s",
                "--duration",
                "10m",
            ]
        )
        == 4
    )
    err = one_line(capsys)
    assert f"no /metrics target answered in {rounds} scrape rounds" in err
    assert "all 2 targets: cannot connect to /metrics target at" in err
    assert "connection refused" in err


class Failing(Quiet):
    def do_GET(self) -> None:
        self.send_response(500)
        self.send_header("Content-Length", "0")
        self.end_headers()


def test_a_target_that_answers_is_never_given_up_on(capsys: pytest.CaptureFixture[str]) -> None:
    """HTTP 500 every time is an answer: the scrape runs its duration and reports the failure
    as before (the give-up is for nobody listening at all)."""
    with serve(Failing) as url:
        code = main(
            [
                "diagnose",
                "--scrape",
                url + "/metrics",
                "--interval",
                "0.1s",
                "--duration",
                "1s",
                "--window",
                "0.5s",
            ]
        )
    err = capsys.readouterr().err
    assert code == 4, err
    assert "no /metrics target answered" not in err
