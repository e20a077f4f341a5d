"""Failure modes of the Prometheus path: each ends in a one-line SourceError or a note."""

from __future__ import annotations

import json
import time
from collections import defaultdict
from typing import Any
from urllib.parse import parse_qs, urlsplit

import httpx
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from helpers.online_servers import Quiet, free_port, serve
from skewscope.errors import SourceError
from skewscope.sources.auth import HttpAuth, Secret, redact_url
from skewscope.sources.prometheus import load_prometheus
from skewscope.sources.promql import quote, unquote
from skewscope.sources.scrape_windows import counter_increases, window_index

T = 1_700_000_040.0  # multiple of 60
TOKEN = "s3cr3t-t0ken-value"


def fake_prometheus(
    *,
    fail_first: int = 0,
    warnings: tuple[str, ...] = (),
    error: dict[str, str] | None = None,
    sleep_s: float = 0.0,
    status: int = 200,
) -> tuple[type[Quiet], dict[str, Any]]:
    """A stdlib handler speaking the Prometheus API: one vLLM rank of one instance, value 1."""
    state: dict[str, Any] = {"calls": 0, "auth": []}

    class Handler(Quiet):
        def do_GET(self) -> None:
            state["calls"] += 1
            state["auth"].append(self.headers.get("Authorization"))
            if sleep_s:
                time.sleep(sleep_s)
            if state["calls"] <= fail_first:
                return self._send(
                    503, {"status": "error", "errorType": "unavailable", "error": "busy"}
                )
            if error is not None:
                return self._send(400, {"status": "error", **error})
            if status != 200:
                return self._send(status, {"status": "error", "errorType": "auth", "error": "no"})
            q = parse_qs(urlsplit(self.path).query)
            if self.path.startswith("/api/v1/label/"):
                data: Any = ["vllm:num_requests_running", "vllm:request_success_total"]
            elif self.path.startswith("/api/v1/series"):
                data = []  # no series carries a pool label
            else:
                start, end, step = (float(q[k][0]) for k in ("start", "end", "step"))
                n = round((end - start) / step) + 1
                values = [[start + i * step, "1"] for i in range(n)]
                metric = {"instance": "x:1"}
                if "engine" in q["query"][0]:
                    metric["engine"] = "0"
                data = {"resultType": "matrix", "result": [{"metric": metric, "values": values}]}
            body: dict[str, Any] = {"status": "success", "data": data}
            if warnings:
                body["warnings"] = list(warnings)
            self._send(200, body)

        def _send(self, code: int, body: dict[str, Any]) -> None:
            raw = json.dumps(body).encode()
            self.send_response(code)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(raw)))
            self.end_headers()
            self.wfile.write(raw)

    return Handler, state


def _load(url: str, **kw: Any) -> Any:
    return load_prometheus(url, start=T, end=T + 120, step_s=60, **kw)


def test_prometheus_down_is_one_line_source_error() -> None:
    url = f"http://127.0.0.1:{free_port()}"
    with pytest.raises(SourceError) as err:
        _load(url)
    msg = str(err.value)
    assert "\n" not in msg and "connection refused" in msg and url in msg


def test_slow_prometheus_names_the_timeout() -> None:
    handler, _ = fake_prometheus(sleep_s=1.0)
    with serve(handler) as url, pytest.raises(SourceError) as err:
        _load(url, timeout_s=0.3)
    assert str(err.value) == f"Prometheus at {url} did not answer within 0.3s"


def test_error_envelope_becomes_source_error_with_error_type() -> None:
    handler, _ = fake_prometheus(
        error={"errorType": "bad_data", "error": "parse error:\nunexpected"}
    )
    with serve(handler) as url, pytest.raises(SourceError) as err:
        _load(url)
    msg = str(err.value)
    assert "(bad_data)" in msg and "parse error: unexpected" in msg and "\n" not in msg


def test_warnings_become_notes() -> None:
    handler, _ = fake_prometheus(warnings=("PromQL info: metric might not be a counter",))
    with serve(handler) as url:
        ev = _load(url)
    assert any("metric might not be a counter" in n for n in ev.notes)
    assert ev.instance.df["running"].to_list() == [1.0, 1.0]


def test_503_then_success_is_retried() -> None:
    handler, state = fake_prometheus(fail_first=2)
    with serve(handler) as url:
        ev = _load(url)
    assert state["calls"] > 2
    assert ev.instance.df.height == 2


def test_persistent_503_gives_up_after_bounded_retries() -> None:
    handler, state = fake_prometheus(fail_first=1000)
    with serve(handler) as url, pytest.raises(SourceError, match="unavailable"):
        _load(url)
    assert state["calls"] == 4  # 1 try + 3 retries


def test_partial_data_lists_missing_signals() -> None:
    handler, _ = fake_prometheus()
    with serve(handler) as url:
        ev = _load(url)
    assert set(ev.instance.aliases) == {"running", "requests"}
    assert "ttft_p99_ms" in ev.instance.missing and "running" not in ev.instance.missing


def test_secrets_never_appear_in_repr_or_errors(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SKEWSCOPE_PROM_TOKEN", TOKEN)
    auth = HttpAuth.from_options()
    assert TOKEN not in repr(auth) and TOKEN not in str(auth) and "***" in repr(auth)
    assert TOKEN not in repr(Secret(TOKEN)) and TOKEN not in f"{Secret(TOKEN)}"
    handler, state = fake_prometheus(status=401)
    with serve(handler) as url, pytest.raises(SourceError) as err:
        _load(url, auth=auth)
    assert state["auth"][0] == f"Bearer {TOKEN}"  # the token was sent...
    assert TOKEN not in str(err.value) and TOKEN not in repr(err.value)  # ...and never shown
    # basic auth from a file, password in the URL: neither leaks
    basic = HttpAuth.from_options(
        token_env=None, username="bob", password_env="SKEWSCOPE_PROM_TOKEN"
    )
    assert TOKEN not in repr(basic)
    url = f"http://bob:{TOKEN}@127.0.0.1:{free_port()}"
    with pytest.raises(SourceError) as err:
        _load(url)
    assert TOKEN not in str(err.value)
    assert redact_url(f"https://u:{TOKEN}@h:9/p?token={TOKEN}") == "https://***@h:9/p"


@given(st.text())
def test_label_value_escaping_round_trips(value: str) -> None:
    assert unquote(quote(value)) == value


@settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
# Label values are UTF-8 text: a lone surrogate cannot be sent at all (not a quoting question).
@given(value=st.text(st.characters(exclude_categories=("Cs",)), max_size=30))
@example(value="\ufffd")  # read as a decoding error by PromQL's lexer when sent raw
@example(value='a"b\\c\n\x7f')
def test_real_prometheus_parses_escaped_values_back(prometheus_url: str, value: str) -> None:
    """label_join with two absent source labels yields exactly the separator string."""
    query = f'label_join(vector(1), "x", {quote(value)}, "absent_a", "absent_b")'
    body = httpx.get(f"{prometheus_url}/api/v1/query", params={"query": query}).json()
    assert body["status"] == "success", body
    assert body["data"]["result"][0]["metric"].get("x", "") == value


@given(
    st.lists(st.tuples(st.integers(0, 10_000), st.booleans()), min_size=1, max_size=60),
    st.floats(0.5, 10.0),
)
def test_counter_increases_equal_true_increments_across_resets(
    steps: list[tuple[int, bool]], window: float
) -> None:
    t0, value = 1000.0, 0
    points: list[tuple[float, float | None]] = [(t0, 0.0)]
    truth: dict[int, float] = defaultdict(float)
    for i, (inc, restart) in enumerate(steps, 1):
        t = t0 + i
        value = inc if restart and inc < value else value + inc  # a restart counts from 0
        points.append((t, float(value)))
        truth[window_index(t, t0, window)] += inc
    got = counter_increases(points, t0, window)
    assert all(v >= 0 for v in got.values())
    assert {k: v for k, v in got.items() if v} == {k: v for k, v in truth.items() if v}


def test_new_series_counts_from_zero_and_baseline_does_not_count() -> None:
    points: list[tuple[float, float | None]] = [(0.0, 50.0), (1.0, 55.0), (2.0, None), (3.0, 4.0)]
    assert counter_increases(points, 0.0, 10.0) == {0: 9.0}
