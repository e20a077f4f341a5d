"""Garbage from servers: malformed API responses, labels and exposition lines never give a
traceback; values that cannot be used are dropped with a note that says what and why."""

from __future__ import annotations

import json
import re
from http.server import BaseHTTPRequestHandler
from typing import Any
from urllib.parse import parse_qs, urlsplit

import pytest
from test_scrape import static_handler

from helpers.online_servers import free_port, json_handler, serve
from skewscope.errors import SourceError
from skewscope.report.document import lines
from skewscope.sources.collect import Snapshot
from skewscope.sources.exposition import parse_exposition
from skewscope.sources.prometheus import load_prometheus
from skewscope.sources.scrape import evidence_from_snapshots, load_scrape

T = 1_700_000_040.0  # multiple of 60
NAMES = ["vllm:num_requests_running", "vllm:request_success_total"]


def prom(
    result: Any = None, *, names: Any = NAMES, raw: bytes | None = None, engine: str = "0"
) -> Any:
    """A Prometheus-shaped handler: ``result`` replaces every range-query result (None: one
    good series per unit), ``raw`` replaces every body."""

    def respond(h: BaseHTTPRequestHandler) -> tuple[int, bytes]:
        if raw is not None:
            return 200, raw
        if h.path.startswith("/api/v1/label/"):
            return 200, json.dumps({"status": "success", "data": names}).encode()
        if h.path.startswith("/api/v1/series"):  # no series carries a pool label
            return 200, json.dumps({"status": "success", "data": []}).encode()
        q = parse_qs(urlsplit(h.path).query)
        start, end, step = (float(q[k][0]) for k in ("start", "end", "step"))
        n = round((end - start) / step) + 1
        series = []
        for inst, value in (("x:1", "1"), ("y:1", "NaN")):
            metric = {"instance": inst}
            if "engine" in q["query"][0]:
                metric["engine"] = engine
            series.append(
                {"metric": metric, "values": [[start + i * step, value] for i in range(n)]}
            )
        data = {"resultType": "matrix", "result": series if result is None else result}
        return 200, json.dumps({"status": "success", "data": data}).encode()

    return json_handler(respond)


def _load(url: str) -> Any:
    return load_prometheus(url, start=T, end=T + 120, step_s=60)


@pytest.mark.parametrize(
    ("handler", "needle"),
    [
        (
            prom([{"metric": {"instance": "x:1"}, "values": [[T, "abc"]]}]),
            "point 0 as [1700000040.0, 'abc']",
        ),
        (prom([{"metric": {"instance": "x:1"}, "values": [[T]]}]), 'expected [time, "number"]'),
        (prom([{"metric": {"instance": "x:1"}, "values": [[T, "1", "2"]]}]), "point 0"),
        (prom([{"metric": {"instance": "x:1"}, "values": [["soon", "1"]]}]), "point 0"),
        (prom([{"metric": {"instance": "x:1"}, "values": [[T, "1_000"]]}]), "point 0"),
        (prom([{"metric": {"instance": "x:1"}, "values": 7}]), "without metric labels and values"),
        (prom([{"metric": {"instance": 5}, "values": []}]), "non-text instance label"),
        (prom([42]), "series 0 without metric labels"),
        (prom({"a": 1}), "result is not a list"),
        (prom(names=42), "label values that are not a list of names"),
        (prom(names=[1, 2]), "label values that are not a list of names"),
        (prom(raw=b'{"status": "success", "data": 42}'), "label values that are not a list"),
        (prom(raw=b'{"status": 1}'), "without an API envelope"),
        (prom(raw=b"[1, 2]"), "without an API envelope"),
        (prom(raw=b"\xff\xfe garbage"), "not JSON"),
        (prom(raw=b"[" * 100_000), "not JSON"),
        (prom(raw=b'{"status": "error", "errorType": {"x": 1}, "error": ["a"]}'), "rejected"),
    ],
)
def test_malformed_prometheus_answers_are_one_clean_line(handler: Any, needle: str) -> None:
    with serve(handler) as url, pytest.raises(SourceError) as err:
        _load(url)
    msg = str(err.value)
    assert needle in msg and "\n" not in msg and msg.startswith(f"Prometheus at {url}")


def test_superscript_engine_label_is_skipped_with_a_note_not_a_crash() -> None:
    assert "²".isdigit()  # the trap: int("²") raises
    with serve(prom(engine="²")) as url:
        ev = _load(url)
    assert ev.dp is None
    assert any("skipped" in n and "engine='²'" in n for n in ev.notes), ev.notes


def test_unit_reporting_only_nan_is_named_in_a_note() -> None:
    with serve(prom()) as url:
        ev = _load(url)
    assert ev.instance.df.filter(ev.instance.df["unit"] == "y:1")["running"].null_count() == 2
    assert any(
        "instance unit y:1 reported only NaN/Inf for requests, running" in n for n in ev.notes
    ), ev.notes


# ------------------------------------------------------------------------------------------------
# Exposition


GOOD = (
    "# TYPE vllm:num_requests_running gauge\n"
    'vllm:num_requests_running{engine="0",model_name="m"} 3\n'
    'vllm:num_requests_running{engine="1",model_name="m"} 1\n'
)


def test_malformed_exposition_lines_are_dropped_and_counted() -> None:
    text = GOOD + 'vllm:num_requests_running{engine="2"} 1 2 3 4\nvllm:x ١\nnot a metric line\n'
    parsed = parse_exposition(text)
    assert [s[2] for s in parsed.samples] == [3.0, 1.0]
    assert parsed.malformed == 3
    assert parsed.example.startswith('line 4: vllm:num_requests_running{engine="2"} 1 2 3 4')


def test_malformed_lines_in_a_scrape_become_a_note() -> None:
    text = GOOD + 'vllm:num_requests_running{engine="2"} abc\n'
    with serve(static_handler(text)) as url:
        ev = load_scrape(
            [url + "/metrics"], duration_s=0.4, interval_s=0.2, window_s=0.4, progress=False
        )
    assert ev.dp is not None and sorted(set(ev.dp.df["dp_rank"].to_list())) == [0, 1]
    note = next(n for n in ev.notes if "malformed exposition line" in n)
    # one bad line per scrape; a loaded machine may skip a round, so count, do not fix, them
    assert re.search(r"dropped (\d) malformed exposition line\(s\) in \1 of \1 scrapes", note)
    assert "line 4:" in note


def _snaps(text_by_t: dict[float, str | None]) -> list[Snapshot]:
    out = []
    for t, text in text_by_t.items():
        if text is None:
            out.append(Snapshot(t, None, "cannot connect: connection refused"))
        else:
            out.append(Snapshot(t, parse_exposition(text).samples))
    return out


def _hist(le: str, count: float, engine: str = "0") -> str:
    return (
        f'vllm:time_to_first_token_seconds_bucket{{engine="{engine}",le="{le}"}} {count}\n'
        f'vllm:request_success_total{{engine="{engine}"}} {count}\n'
    )


def test_bucket_bound_that_is_not_a_number_is_skipped_with_a_note() -> None:
    text = GOOD + _hist("0.5", 1) + _hist("abc", 2) + _hist("+Inf", 3)
    ev = evidence_from_snapshots(
        {"h:1": _snaps({0.0: text, 1.0: text})}, t0=0.0, window_s=2.0, n_windows=1
    )
    assert any("le='abc'" in n and "bucket bound" in n for n in ev.notes), ev.notes


def _rank_text(running: float, requests: float) -> str:
    return (
        f'vllm:num_requests_running{{engine="0"}} {running}\n'
        f'vllm:num_requests_running{{engine="1"}} 1\n'
        f'vllm:request_success_total{{engine="0"}} {requests}\n'
        f'vllm:request_success_total{{engine="1"}} {requests / 4}\n'
    )


def test_hot_target_dying_mid_scrape_keeps_early_evidence_and_nulls_the_rest() -> None:
    hot = {float(t): (_rank_text(8, 40 * t) if t < 6 else None) for t in range(12)}
    cold = {float(t): _rank_text(1, 10 * t) for t in range(12)}
    ev = evidence_from_snapshots(
        {"hot:1": _snaps(hot), "cold:1": _snaps(cold)}, t0=0.0, window_s=2.0, n_windows=6
    )
    df = ev.instance.df
    hot_rows = df.filter(df["unit"] == "hot:1").sort("window_start_s")
    assert hot_rows.height == 6  # a row in every window: missing is null, never absent or 0
    # window k holds the scrapes in (2k, 2k+2]; window 0 also the first: 50 requests per second
    assert hot_rows["requests"].to_list()[:3] == [100.0, 100.0, 50.0]  # until it died at t=6
    assert hot_rows["requests"].to_list()[3:] == [None, None, None]
    assert hot_rows["running"].to_list()[3:] == [None, None, None]
    assert any(
        "target hot:1 answered no scrape in 3 of 6 windows (windows 3-5" in n
        and "missing, not zero" in n
        for n in ev.notes
    ), ev.notes


def test_target_down_then_up_does_not_count_the_gap_as_one_burst() -> None:
    snaps = {float(t): (None if 2 <= t < 6 else _rank_text(1, 10 * t)) for t in range(10)}
    ev = evidence_from_snapshots({"h:1": _snaps(snaps)}, t0=0.0, window_s=2.0, n_windows=5)
    got = ev.instance.df.sort("window_start_s")["requests"].to_list()
    # 12.5 requests per second; window 1 (t=3,4) never answered; in window 2 only t=6 did: the
    # first sample after the gap is a new baseline, so the gap's increase lands nowhere
    assert got == [12.5, None, None, 25.0, 12.5]


def test_dead_port_with_scheme_less_url_is_noted_and_named() -> None:
    port = free_port()
    with pytest.raises(SourceError) as err:
        load_scrape(
            [f"127.0.0.1:{port}/metrics"],
            duration_s=0.2,
            interval_s=0.1,
            window_s=0.2,
            progress=False,
        )
    assert f"http://127.0.0.1:{port}/metrics" in str(err.value)


def test_hot_target_that_dies_half_way_is_still_found_hot() -> None:
    from skewscope.analysis.diagnose import diagnose

    snaps = {}
    for i in range(4):
        rate, running = (60, 8) if i == 0 else (20, 2)
        texts = {
            float(t): None if i == 0 and t >= 20 else _rank_text(running, rate * t)
            for t in range(40)
        }
        snaps[f"h{i}:1"] = _snaps(texts)
    ev = evidence_from_snapshots(snaps, t0=0.0, window_s=2.0, n_windows=20)
    report = diagnose(ev, level="instance")
    assert report.verdict == "imbalanced" and report.hot_units[0] == "h0:1"
    assert any(
        "target h0:1 answered no scrape in 10 of 20 windows" in n for n in lines(report.notes)
    )


@pytest.mark.timeout(120)
@pytest.mark.parametrize(
    "text",
    [
        "x" * 300_000,  # a run of letters: the old scheme pattern tried it from every letter
        "a%" * 150_000,
        "https://u:" + "p" * 300_000,
    ],
)
def test_a_300_kb_error_or_warning_is_one_bounded_scrubbed_line(text: str) -> None:
    """A server's 300 KB error message (40 k characters took 8.7 s to scrub): the message is cut
    before it is scrubbed, so it is one short line whatever its length; so is a warning."""
    body = json.dumps({"status": "error", "errorType": "bad_data", "error": text}).encode()
    with serve(prom(raw=body)) as url, pytest.raises(SourceError) as err:
        _load(url)
    assert len(str(err.value)) < 1000 and "\n" not in str(err.value)
    warned = json.dumps({"status": "success", "data": NAMES, "warnings": [text]}).encode()
    with serve(prom(raw=warned)) as url, pytest.raises(SourceError):
        _load(url)
