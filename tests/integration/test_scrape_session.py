"""A scrape session as a user lives it: Ctrl-C, progress without a terminal, URLs without a
scheme."""

from __future__ import annotations

import json
import os
import re
import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager

import pytest
from test_garbage import T, prom
from test_scrape import PINNED, static_handler

from helpers.online_servers import serve
from skewscope.cli import main
from skewscope.settings import SourceLimits
from skewscope.sources.prometheus import load_prometheus
from skewscope.sources.scrape import load_scrape

pytestmark = pytest.mark.timeout(60)


def counting_handler() -> tuple[type, list[int]]:
    """The pinned vLLM capture, counting the scrapes it served."""
    served = [0]
    base = static_handler(PINNED.read_text())

    class Handler(base):  # type: ignore[misc, valid-type]
        def do_GET(self) -> None:
            super().do_GET()
            served[0] += 1

    return Handler, served


@contextmanager
def ctrl_c_after_scrapes(served: list[int], n: int) -> Iterator[None]:
    """A real SIGINT to this process (what Ctrl-C in a terminal sends) once ``n`` scrapes were
    served: the collection is known to be running, however slow the imports before it were."""
    stop = threading.Event()

    def watch() -> None:
        while not stop.wait(0.02):
            if served[0] >= n:
                os.kill(os.getpid(), signal.SIGINT)
                return

    thread = threading.Thread(target=watch, daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join(timeout=5)


def _scrape_argv(url: str, duration: str) -> list[str]:
    return [
        "diagnose",
        "--scrape",
        url + "/metrics",
        "--duration",
        duration,
        "--interval",
        "0.1s",
        "--window",
        "0.2s",
        "--format",
        "json",
    ]


def test_ctrl_c_during_scrape_diagnoses_what_was_collected(
    capsys: pytest.CaptureFixture[str],
) -> None:
    handler, served = counting_handler()
    with serve(handler) as url, ctrl_c_after_scrapes(served, 8):
        code = main(_scrape_argv(url, "30s"))
    out = capsys.readouterr()
    assert code == 0, out.err
    doc = json.loads(out.out)
    note = next(n for n in doc["notes"] if n.startswith("interrupted (Ctrl-C)"))
    assert "of 30s: diagnosed the" in note
    assert doc["source"] == "scrape" and doc["windows"] >= 2, doc["notes"]


def test_ctrl_c_before_one_window_is_one_clean_line(capsys: pytest.CaptureFixture[str]) -> None:
    handler, served = counting_handler()
    with serve(handler) as url, ctrl_c_after_scrapes(served, 1):
        code = main([*_scrape_argv(url, "30s")[:-4], "--window", "10s"])
    err = capsys.readouterr().err
    assert code == 4
    assert re.match(
        r"skewscope: error: interrupted after \d+s, before one whole window of 10s", err
    )
    assert err.count("\n") == 1


def test_progress_without_a_terminal_is_a_plain_line(capsys: pytest.CaptureFixture[str]) -> None:
    with serve(static_handler(PINNED.read_text())) as url:
        load_scrape(
            [url + "/metrics"],
            duration_s=0.4,
            interval_s=0.1,
            window_s=0.2,
            progress=True,
            limits=SourceLimits(progress_every_s=0.0),
        )
    lines = capsys.readouterr().err.splitlines()
    assert len(lines) >= 4
    assert re.fullmatch(
        r"skewscope: scraping 1 target\(s\): [\d.]+ of 0\.4 s, [1-5] scrapes ok, 0 failed",
        lines[-1],
    ), lines
    assert "\x1b" not in "".join(lines)  # no spinner or cursor control in a log


def test_scrape_url_without_scheme_assumes_http_and_says_so() -> None:
    with serve(static_handler(PINNED.read_text())) as url:
        bare = url.removeprefix("http://") + "/metrics"
        ev = load_scrape([bare], duration_s=0.4, interval_s=0.2, window_s=0.4, progress=False)
    assert f"--scrape http://{bare} has no scheme; http:// assumed" in ev.notes
    assert ev.dp is not None and ev.dp.df.height == 2  # one window, two ranks


def test_prometheus_url_without_scheme_assumes_http_and_says_so() -> None:
    with serve(prom()) as url:
        bare = url.removeprefix("http://")
        ev = load_prometheus(bare, start=T, end=T + 120, step_s=60)
    assert f"--prometheus http://{bare} has no scheme; http:// assumed" in ev.notes
    assert ev.instance.df.height == 4


@pytest.mark.parametrize(
    ("url", "needle"),
    [
        ("ftp://h/metrics", "scheme must be http or https, got 'ftp'"),
        ("http://h:99999/metrics", "is not a valid URL"),
        ("http:///metrics", "has no host"),
    ],
)
def test_unusable_scrape_urls_are_usage_errors(
    url: str, needle: str, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = ["diagnose", "--scrape", url, "--duration", "1s", "--interval", "1s", "--window", "1s"]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert needle in err and err.count("\n") == 1


def test_collect_fetches_scheme_less_urls_over_http() -> None:
    """watch's rolling sampler scrapes through ``collect``'s round scraper, without load_scrape's
    URL check."""
    from skewscope.sources.collect import collect

    with serve(static_handler(PINNED.read_text())) as url:
        bare = url.removeprefix("http://") + "/metrics"
        got = collect([bare], duration_s=0.0, interval_s=1.0, progress=False)
    (snap,) = got.snaps[bare]
    assert snap.error == "" and snap.samples and len(snap.samples) == 673


def test_rolling_sampler_stamps_each_round_with_its_nominal_tick() -> None:
    """watch's sampler ticks as ``collect`` does (``sources.ticker``): each scrape takes 7 s of a
    ManualClock on a 5 s grid, so every other round starts 2 s late (stamped on the grid all
    the same, as diagnose --scrape stamps it) and every third tick is skipped."""
    import time

    from helpers.online_servers import Quiet
    from skewscope.clock import ManualClock
    from skewscope.sources.sampler import RollingScraper

    clock = ManualClock(1000.0)
    body = PINNED.read_bytes()

    class Slow(Quiet):
        def do_GET(self) -> None:
            clock.advance(7.0)
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

    with serve(Slow) as url:
        sampler = RollingScraper(
            [url + "/metrics"], span_s=600.0, interval_s=5.0, window_s=10.0, clock=clock
        ).start()
        deadline = time.monotonic() + 20
        while len(sampler._buf[url + "/metrics"]) < 5 and time.monotonic() < deadline:
            time.sleep(0.01)
        sampler.stop()
    stamps = [t for t, _ in sampler._buf[url + "/metrics"]][:5]
    assert stamps == [1000.0, 1005.0, 1015.0, 1020.0, 1030.0]
    assert sampler.skipped >= 2
