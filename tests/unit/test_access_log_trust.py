"""Hostile access logs: a line too long to be a request is skipped and counted (never held
whole), the key=value reader is linear (keys start at a token's start, quotes are found once),
and nothing shaped like a credential reaches the evidence."""

from __future__ import annotations

import json
import tracemalloc
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from skewscope.sources import access_log as al
from skewscope.sources.access_log import read_access_logs, read_access_requests

LINE = "msec={t} upstream_addr={up} request_length=100 http_x_session_id={key}\n"


def _log(tmp_path: Path, lines: list[str], name: str = "a.log") -> str:
    p = tmp_path / name
    p.write_text("".join(lines))
    return str(p)


# --- the reader's shape: linear in the line ---------------------------------------------------

_names = st.from_regex(r"[A-Za-z_][A-Za-z0-9_.-]{0,12}", fullmatch=True)
_bare = st.from_regex(r'[^\s"]{0,10}', fullmatch=True)
_quoted = st.from_regex(r'([^"\\]|\\[\\"n]){0,10}', fullmatch=True).map(lambda v: f'"{v}"')


@settings(max_examples=300, deadline=None)
@given(
    st.dictionaries(_names, _bare | _quoted, min_size=1, max_size=6),
    st.sampled_from([" ", "  ", "\t"]),
)
def test_pairs_read_back_what_was_written(pairs: dict[str, str], sep: str) -> None:
    line = sep.join(f"{k}={v}" for k, v in pairs.items())
    want = {k: v[1:-1] if v.startswith('"') else v for k, v in pairs.items()}
    assert al._pairs(line) == want


def test_the_key_pattern_starts_only_at_a_token_start() -> None:
    """What makes a run of letters without "=" cost one scan, not one per letter (80 KB took
    25 s): no match can start inside a run of key characters."""
    assert al._KEY.pattern.startswith(r"(?<![\w.-])")
    line = "x" * 5000 + "=1"
    starts = [m.start() for m in al._KEY.finditer(line)]
    assert starts == [0]


@pytest.mark.parametrize(
    "line",
    [
        "a" * 80_000,  # letters and no "=": was quadratic
        'a="' + ' b="' * 15_000,  # a quote storm, none closed: each would scan to the line's end
        "a=" + '"' + "x" * 60_000,  # one unterminated quoted value
    ],
)
def test_hostile_pair_lines_parse(line: str) -> None:
    got = al._pairs(line)
    assert isinstance(got, dict)


# --- line length: skipped, counted, never held --------------------------------------------


def test_a_huge_line_is_skipped_with_a_note_and_never_held(tmp_path: Path) -> None:
    big = 'msec=1.0 upstream_addr=10.0.0.9:80 note="' + "x" * (8 << 20) + '"\n'
    lines = [LINE.format(t=1.0 + i, up=f"10.0.0.{i % 2}:80", key=f"s{i}") for i in range(10)]
    path = _log(tmp_path, [*lines[:5], big, *lines[5:]])
    tracemalloc.start()
    try:
        gw = read_access_logs([path])
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 2 << 20, peak  # the 8 MB line was read past in 64 KiB pieces
    assert {u.upstream: u.requests for u in gw.units} == {"10.0.0.0:80": 5.0, "10.0.0.1:80": 5.0}
    assert any("1 access-log line(s) longer than 64 KiB skipped" in n for n in gw.notes)


def test_the_line_limit_is_a_source_setting(tmp_path: Path) -> None:
    lines = [
        LINE.format(t=1.0, up="10.0.0.1:80", key="k" * 300),
        LINE.format(t=2.0, up="10.0.0.2:80", key="k"),
    ]
    gw = read_access_logs([_log(tmp_path, lines)], max_line=200)
    assert [u.upstream for u in gw.units] == ["10.0.0.2:80"]
    assert any("1 access-log line(s) longer than 0.195312 KiB" in n for n in gw.notes)


def test_a_deeply_nested_json_line_is_one_located_error(tmp_path: Path) -> None:
    from skewscope.errors import InputError

    path = _log(
        tmp_path,
        [
            '{"upstream_addr": "10.0.0.1:80", "msec": 1}\n',
            '{"a": ' + "[" * 20_000 + "]" * 20_000 + "}\n",
        ],
    )
    with pytest.raises(InputError, match=r"a\.log:2: .*nested too deeply"):
        read_access_logs([path])


# --- no credential in the evidence ------------------------------------------------------------

SECRETS = ("Pa55word9", "abc123def456ghi", "tok-9f8e7d6c")


def _secret_log(tmp_path: Path, shape: str) -> str:
    rows = [
        ("alice:Pa55word9@10.0.0.1:8000", "Bearer abc123def456ghi"),
        ("10.0.0.2:8000", "api_key=tok-9f8e7d6c"),
        ("http://bob:Pa55word9@10.0.0.2:8000/v1", "plain-session"),
    ]
    if shape == "json":
        lines = [
            json.dumps(
                {
                    "msec": 1.0 + i,
                    "upstream_addr": up,
                    "http_x_session_id": key,
                    "request_length": 10,
                }
            )
            + "\n"
            for i, (up, key) in enumerate(rows)
        ]
    else:
        lines = [
            f'msec={1.0 + i} upstream_addr={up} request_length=10 http_x_session_id="{key}"\n'
            for i, (up, key) in enumerate(rows)
        ]
    return _log(tmp_path, lines * 3, f"s.{shape}.log")


@pytest.mark.parametrize("shape", ["json", "pairs"])
def test_no_credential_reaches_the_evidence(tmp_path: Path, shape: str) -> None:
    path = _secret_log(tmp_path, shape)
    gw = read_access_logs([path])
    text = repr(gw)
    for secret in SECRETS:
        assert secret not in text, text
    assert {u.upstream for u in gw.units} == {"10.0.0.1:8000", "10.0.0.2:8000"}
    keys = {k for u in gw.units for k, _ in u.keys}
    assert "plain-session" in keys
    hashed = sorted(k for k in keys if k.startswith("key#"))
    assert len(hashed) == 2  # two credentials, still two sessions, each counted 3 times
    assert all(c == 3.0 for u in gw.units for k, c in u.keys)
    requests, _ = read_access_requests([path])
    assert not any(s in repr(requests) for s in SECRETS)


def test_watch_follows_past_a_huge_line_holding_at_most_the_limit(tmp_path: Path) -> None:
    """A live log with a line growing without its end (8 MB over several runs): the follower
    holds no more of it than the limit, then skips it and counts it once it ends."""
    from skewscope.sources.access_log_follow import AccessLogFollower

    path = tmp_path / "live.log"
    good = [LINE.format(t=1.0 + i, up=f"10.0.0.{i % 2}:80", key=f"s{i}") for i in range(4)]
    path.write_text("".join(good[:2]) + 'msec=3.0 upstream_addr=10.0.0.9:80 v="')
    follower = AccessLogFollower([str(path)], keep_s=1e12, clock=lambda: 10.0, max_line=4096)
    follower.poll()
    for _ in range(4):
        with path.open("a") as f:
            f.write("x" * (2 << 20))
        follower.poll()
        assert len(follower.files[0].partial) <= 4097
    with path.open("a") as f:
        f.write('"\n' + "".join(good[2:]))
    gw = follower.evidence(None)
    assert gw is not None
    assert {u.upstream: u.requests for u in gw.units} == {"10.0.0.0:80": 2.0, "10.0.0.1:80": 2.0}
    assert any("1 access-log line(s) longer than 4 KiB skipped" in n for n in gw.notes), gw.notes
