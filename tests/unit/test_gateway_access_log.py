"""Access-log reader: real nginx output, Envoy's documented formats, bad input, properties."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from skewscope.errors import InputError
from skewscope.sources.access_log import parse_time, read_access_logs

DATA = Path(__file__).parents[1] / "data" / "gateway"
# tests/data/gateway/SOURCES.md: what each engine was actually sent while nginx logged
NGINX_TRUTH = {
    "127.0.0.1:34335": 8.0,
    "127.0.0.1:41441": 10.0,
    "127.0.0.1:34681": 13.0,
    "127.0.0.1:38417": 9.0,
}


def test_real_nginx_log_gives_what_each_engine_was_sent() -> None:
    gw = read_access_logs([str(DATA / "nginx-sticky.log")])
    assert gw.source == "nginx" and gw.key_name == "http_x_session_id"
    assert {u.upstream: u.requests for u in gw.units} == NGINX_TRUTH
    keys = Counter[str]()
    for u in gw.units:
        keys.update(dict(u.keys))
    assert keys["alice"] == keys["bob"] == keys["carol"] == 8
    # one session always lands on the same upstream (consistent hash)
    assert sum(1 for u in gw.units if "alice" in dict(u.keys)) == 1
    assert any("no upstream" in n for n in gw.notes)


def _logged(name: str) -> list[tuple[float, str]]:
    """(msec, upstream) of every line of a pairs-format nginx log that reached an upstream."""
    out = []
    for ln in (DATA / name).read_text().splitlines():
        fields = dict(f.split("=", 1) for f in ln.split() if "=" in f)
        if fields["upstream_addr"] != "-":
            out.append((float(fields["msec"]), fields["upstream_addr"]))
    return out


def test_time_range_keeps_only_the_engines_window() -> None:
    logged = _logged("nginx-sticky.log")
    times = sorted(t for t, _ in logged)
    first, window_s = times[0], 0.5
    n = int((times[len(times) // 2] - first) // window_s)  # about the first half of the log
    gw = read_access_logs([str(DATA / "nginx-sticky.log")], (first, window_s, n))
    end = first + n * window_s
    assert sum(u.requests for u in gw.units) == sum(first <= t < end for t in times) < 40
    assert any("outside the engines' time range" in n for n in gw.notes)
    # per window of the engines' grid: what each upstream was sent, counted from the log
    assert gw.window_starts == tuple(first + i * window_s for i in range(n))
    for u in gw.units:
        want = [
            sum(
                1
                for t, up in logged
                if up == u.upstream and first + i * window_s <= t < first + (i + 1) * window_s
            )
            for i in range(n)
        ]
        assert list(u.series) == want and sum(want) == u.requests


def test_without_the_engines_grid_a_log_has_no_series() -> None:
    gw = read_access_logs([str(DATA / "nginx-sticky.log")])
    assert gw.window_starts == () and all(u.series == () for u in gw.units)


@pytest.mark.parametrize("name", ["envoy-default.log", "envoy-json.log"])
def test_envoy_formats(name: str) -> None:
    gw = read_access_logs([str(DATA / name)])
    assert gw.source == "envoy"
    by = {u.upstream: u for u in gw.units}
    assert {k: u.requests for k, u in by.items()} == {"10.1.0.2:8000": 2.0, "10.1.0.3:8000": 1.0}
    assert by["10.1.0.2:8000"].request_bytes == pytest.approx((412 + 9012) / 2)
    assert by["10.1.0.2:8000"].keys[0][1] == 2.0
    assert any("1 logged request(s) had no upstream" in n for n in gw.notes)


def test_retried_request_counts_on_the_upstream_that_answered(tmp_path: Path) -> None:
    log = tmp_path / "a.log"
    log.write_text(
        'upstream_addr="10.0.0.1:80, 10.0.0.2:80" request_length=10\n'
        'upstream_addr="10.0.0.3:80 : 10.0.0.2:80" request_length=10\n'
    )
    gw = read_access_logs([str(log)])
    assert [(u.upstream, u.requests) for u in gw.units] == [("10.0.0.2:80", 2.0)]


@pytest.mark.parametrize(
    ("text", "needle"),
    [
        ("", "empty"),
        ('{"upstream_addr": "a:1"}\nnot json\n', ":2: expected a JSON-object"),
        ("status=200 bytes=3\n", ":1: no upstream field"),
        ("[2026] nonsense\n", ":1: expected an Envoy default-format"),
        ("upstream_addr=- status=404\n", "no request in the access log reached an upstream"),
        ("[1, 2]\n", "expected an Envoy"),
    ],
)
def test_bad_logs_fail_with_one_line_naming_file_and_line(
    tmp_path: Path, text: str, needle: str
) -> None:
    log = tmp_path / "bad.log"
    log.write_text(text)
    with pytest.raises(InputError) as e:
        read_access_logs([str(log)])
    assert needle in str(e.value) and str(log) in str(e.value) and "\n" not in str(e.value)


def test_unreadable_file(tmp_path: Path) -> None:
    with pytest.raises(InputError, match="cannot read"):
        read_access_logs([str(tmp_path / "missing.log")])


def test_parse_time_formats() -> None:
    assert parse_time("1796044169.552") == pytest.approx(1796044169.552)
    iso = parse_time("2026-11-30T13:00:00+00:00")
    assert iso == parse_time("30/Nov/2026:13:00:00 +0000") == parse_time("2026-11-30T13:00:00Z")
    assert parse_time("yesterday") is None


_host = st.sampled_from(["10.0.0.1:8000", "10.0.0.2:8000", "10.0.0.3:9000"])
_key = st.text(alphabet="abcxyz019", min_size=1, max_size=6)
_rows = st.lists(st.tuples(_host, _key, st.integers(0, 10**6)), min_size=1, max_size=60)


@settings(max_examples=60, deadline=None)
@given(rows=_rows, as_json=st.booleans())
def test_counts_sizes_and_keys_are_exact(
    tmp_path_factory: pytest.TempPathFactory, rows: list[tuple[str, str, int]], as_json: bool
) -> None:
    log = tmp_path_factory.mktemp("h") / "a.log"
    if as_json:
        text = "\n".join(
            json.dumps({"upstream_addr": h, "http_x_session_id": k, "request_length": b})
            for h, k, b in rows
        )
    else:
        text = "\n".join(
            f'upstream_addr={h} http_x_session_id="{k}" request_length={b}' for h, k, b in rows
        )
    log.write_text(text + "\n")
    gw = read_access_logs([str(log)])
    by = {u.upstream: u for u in gw.units}
    assert {h: u.requests for h, u in by.items()} == dict(Counter(h for h, _, _ in rows))
    for h, u in by.items():
        sizes = [b for hh, _, b in rows if hh == h]
        assert u.request_bytes == pytest.approx(sum(sizes) / len(sizes))
        keys = Counter(k for hh, k, _ in rows if hh == h)
        assert u.distinct_keys == len(keys)
        assert u.keys[0][1] == max(keys.values())
