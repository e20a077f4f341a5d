"""watch's access-log follower: whatever pieces a live log is appended in, rotated or truncated,
each run tallies what ``diagnose --access-log`` would tally from the same lines."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from skewscope.errors import InputError
from skewscope.frame import GatewayEvidence
from skewscope.sources.access_log import read_access_logs
from skewscope.sources.access_log_follow import AccessLogFollower

DATA = Path(__file__).parents[1] / "data" / "gateway"
LOG = (DATA / "nginx-sticky.log").read_bytes()  # real nginx output (SOURCES.md)
LINES = LOG.splitlines(keepends=True)
UP = [ln for ln in LINES if b"upstream_addr=-" not in ln]  # lines that reached an engine
TIMES = sorted(
    float(f.split("=", 1)[1])
    for ln in LOG.decode().splitlines()
    for f in ln.split()
    if f.startswith("msec=")
)
UP_TIMES = [
    float(f.split("=", 1)[1]) for ln in UP for f in ln.decode().split() if f.startswith("msec=")
]
FOREVER = 1e12  # keep_s: nothing dropped by age
GRID = (TIMES[0], 0.5, int((TIMES[-1] - TIMES[0]) // 0.5) + 1)  # every logged request inside


def _view(gw: GatewayEvidence | None) -> object:
    assert gw is not None
    return (
        [
            (u.upstream, u.requests, u.request_bytes, u.keys, u.distinct_keys, u.series)
            for u in gw.units
        ],
        gw.key_name,
        gw.source,
        gw.window_starts,
    )


@settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(cuts=st.lists(st.integers(0, len(LOG)), max_size=6))
def test_any_appends_tally_as_the_whole_file(tmp_path: Path, cuts: list[int]) -> None:
    """The log written in arbitrary byte pieces (cutting lines in two) and read after each
    piece: the last run equals reading the complete file once."""
    log = tmp_path / f"access-{len(cuts)}-{sum(cuts)}.log"
    log.write_bytes(b"")
    follower = AccessLogFollower([str(log)], keep_s=FOREVER)
    done = 0
    for cut in [*sorted(cuts), len(LOG)]:
        with log.open("ab") as f:
            f.write(LOG[done : max(cut, done)])
        done = max(cut, done)
        follower.evidence(GRID)
    assert _view(follower.evidence(GRID)) == _view(read_access_logs([str(log)], GRID))
    log.unlink()


def test_a_half_written_line_waits_for_its_end(tmp_path: Path) -> None:
    log = tmp_path / "access.log"
    log.write_bytes(UP[0] + UP[1][:20])
    follower = AccessLogFollower([str(log)], keep_s=FOREVER)
    first = follower.evidence(GRID)
    assert first is not None and sum(u.requests for u in first.units) == 1
    assert follower.skipped == 0  # the cut line was not read as a bad one
    with log.open("ab") as f:
        f.write(UP[1][20:])
    second = follower.evidence(GRID)
    assert second is not None and sum(u.requests for u in second.units) == 2


def test_rotation_and_truncation_read_the_new_file_from_its_start(tmp_path: Path) -> None:
    log = tmp_path / "access.log"
    half = len(LINES) // 2
    log.write_bytes(b"".join(LINES[:half]))
    follower = AccessLogFollower([str(log)], keep_s=FOREVER)
    follower.poll()
    os.rename(log, tmp_path / "access.log.1")  # logrotate: move, then a new file
    log.write_bytes(b"".join(LINES[half:]))
    follower.poll()
    whole = tmp_path / "whole.log"
    whole.write_bytes(LOG)
    assert _view(follower.evidence(GRID)) == _view(read_access_logs([str(whole)], GRID))
    log.write_bytes(UP[0])  # copytruncate: the same file, shorter
    follower.poll()
    assert len(follower.kept) == len(TIMES) + 1


def test_old_requests_leave_and_bad_lines_are_counted_not_fatal(tmp_path: Path) -> None:
    log = tmp_path / "access.log"
    log.write_bytes(LOG + b"this is not a key value line\n" + b"upstream_addr=127.0.0.1:1 \n")
    now = [TIMES[-1]]
    follower = AccessLogFollower([str(log)], keep_s=1.0, clock=lambda: now[0])
    gw = follower.evidence(None)
    assert gw is not None
    assert sum(u.requests for u in gw.units) == sum(t >= TIMES[-1] - 1.0 for t in UP_TIMES)
    assert follower.skipped == 1 and f"{log}:{len(LINES) + 1}:" in follower.first_bad
    assert follower.untimed == 1  # the last line has no time: a rolling window cannot place it
    assert any("1 unreadable access-log line(s) skipped" in n for n in gw.notes)
    now[0] += 10.0
    assert follower.evidence(None) is None  # everything aged out: no gateway view, no error


def test_an_unreadable_log_is_one_clean_error_at_the_start(tmp_path: Path) -> None:
    follower = AccessLogFollower([str(tmp_path / "missing.log")], keep_s=60.0)
    with pytest.raises(InputError, match=r"missing\.log: cannot read the access log"):
        follower.check()


def _big_log(path: Path, lines: int, t0: float, bad_at: int) -> list[float]:
    """A time-ordered key=value log, one request every 10 ms over two upstreams, with one bad
    line at line ``bad_at``; returns every line's time."""
    times = [t0 + i * 0.01 for i in range(lines)]
    with path.open("w") as f:
        for i, t in enumerate(times, 1):
            if i == bad_at:
                f.write("not a key value line\n")
            else:
                f.write(
                    f"msec={t:.3f} upstream_addr=127.0.0.1:{8000 + i % 2} "
                    f"request_length={100 + i % 7} http_x_session_id=s{i % 13}\n"
                )
    return times


def test_a_large_log_is_entered_near_the_span_with_the_same_result(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A large log's first read bisects to the lines logged shortly before the span: the
    gateway view, the counts and a bad line's number are those of reading it all."""
    import skewscope.sources.access_log_follow as alf

    log = tmp_path / "big.log"
    times = _big_log(log, 60_000, 1_800_000_000.0, bad_at=59_000)
    now = times[-1] + 0.005
    grid = (now - 30.0, 1.0, 30)  # the last 30 s: 3,000 of the 60,000 lines
    whole = AccessLogFollower([str(log)], keep_s=40.0, clock=lambda: now)
    monkeypatch.setattr(alf, "SEARCH_ABOVE_BYTES", 1 << 40)  # never bisect
    reference = whole.evidence(grid)
    monkeypatch.setattr(alf, "SEARCH_ABOVE_BYTES", 1 << 20)
    monkeypatch.setattr(alf, "SEARCH_SLACK_BYTES", 4 << 10)
    monkeypatch.setattr(alf, "SEARCH_MARGIN_S", 5.0)
    fast = AccessLogFollower([str(log)], keep_s=40.0, clock=lambda: now)
    got = fast.evidence(grid)
    assert log.stat().st_size > (1 << 20)
    assert _view(got) == _view(reference)
    assert sum(u.requests for u in got.units) == sum(grid[0] <= t < now for t in times) - 1
    # started within the slack of the first line logged 45 s before now (keep 40 + margin 5)
    first = next(i for i, t in enumerate(times) if t >= now - 45.0)
    per_line = log.stat().st_size / len(times)
    skipped = fast.files[0].skipped_bytes
    assert (first - 1) * per_line - (8 << 10) <= skipped <= first * per_line + 1
    assert fast.first_bad == whole.first_bad and ":59000:" in fast.first_bad
