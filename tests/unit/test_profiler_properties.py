"""Property tests of the profiler reader's vectorised parsers against plain Python truth."""

from __future__ import annotations

import ast
import csv
import tempfile
from datetime import datetime
from pathlib import Path

import polars as pl
from hypothesis import example, given, settings
from hypothesis import strategies as st

from skewscope.sources import profiler_schema as ps
from skewscope.sources.profiler_frame import WI, Grid
from skewscope.sources.profiler_ranks import place_requests
from skewscope.sources.profiler_read import (
    SCHED_NAMES,
    carried_matches,
    entry_count,
    extract_rids,
    fill_missing,
    first_rows,
    first_rows_of,
    prefill_count,
    prefill_first_rows,
)
from skewscope.sources.profiler_schema import datetime_to_us
from skewscope.sources.profiler_validate import _bad_share

EPOCH = datetime(1970, 1, 1)


@given(st.datetimes(min_value=datetime(1900, 1, 1), max_value=datetime(2200, 1, 1)))
def test_profiler_datetime_round_trips(dt: datetime) -> None:
    text = dt.strftime("%Y-%m-%d %H:%M:%S:%f")  # the profiler's colon before microseconds
    got = pl.select(datetime_to_us(pl.lit(text))).item()
    assert got == (dt - EPOCH) // (datetime(1970, 1, 1, 0, 0, 0, 1) - EPOCH)


RID = st.text(
    alphabet=st.characters(
        whitelist_categories=("Ll", "Lu", "Nd"), whitelist_characters="-_.:'/ \"\\{},"
    ),
    min_size=1,
    max_size=24,
)


@st.composite
def res_lists(draw: st.DrawFn) -> list[dict[str, object]]:
    typed = draw(st.booleans())  # vLLM dicts carry 'type'; MindIE only rid/iter
    items = []
    for rid in draw(st.lists(RID, max_size=12)):
        d: dict[str, object] = {"rid": rid, "iter": draw(st.integers(0, 3000))}
        if typed:
            d["type"] = draw(st.integers(0, 1))
            d["num_scheduled_tokens"] = draw(st.integers(0, 8192))
            d["num_prompt_tokens"] = draw(st.integers(0, 8192))
        items.append(d)
    return items


@given(st.lists(res_lists(), min_size=1, max_size=8))
@example([[{"rid": "'type': ", "iter": 0}]])  # a rid that reads like a key is not one
@example([[{"rid": "x'rid': y", "iter": 1}, {"rid": "a'b\"c\\", "iter": 0}]])  # nor an entry
@settings(max_examples=200)
def test_res_list_extraction_equals_literal_eval(rows: list[list[dict[str, object]]]) -> None:
    cells = pl.Series("res_list", [repr(r) for r in rows])
    got = pl.DataFrame(cells).select(
        extract_rids(pl.col("res_list")).alias("rids"),
        prefill_count(pl.col("res_list")).alias("p"),
        entry_count(pl.col("res_list")).alias("n"),
    )
    for cell, rids, prefill, n in zip(cells, got["rids"], got["p"], got["n"], strict=True):
        parsed = ast.literal_eval(cell)  # truth, in the test only
        assert rids.to_list() == [d["rid"] for d in parsed]
        assert n == len(parsed)
        want = sum(1 for d in parsed if (d["type"] == 0 if "type" in d else d["iter"] == 0))
        assert prefill == want


@given(
    st.lists(st.floats(1.6e9, 1.8e9, allow_nan=False), min_size=1, max_size=200),
    st.sampled_from([1.0, 5.0, 15.0, 60.0, 300.0]),
)
def test_window_assignment_conserves_counts(times: list[float], window_s: float) -> None:
    df = pl.DataFrame({"start_s": times})
    grid = Grid.spanning(min(times), max(times), window_s)
    idx = df.select(grid.index())
    per_window = idx.group_by("_wi").len()
    assert per_window["len"].sum() == len(times)
    assert idx["_wi"].is_between(grid.first, grid.last).all()
    starts = idx["_wi"] * window_s
    assert ((df["start_s"] >= starts - 1e-6) & (df["start_s"] < starts + window_s + 1e-6)).all()


def test_window_index_agrees_across_frame_sizes_at_an_edge() -> None:
    """Found by hypothesis: polars divided a one-row and a two-row frame differently, so the
    grid's first window missed the event that spanned it."""
    t = 1799999999.9999998  # just below 360000000 * 5
    grid = Grid.spanning(t, t, 5.0)
    one = pl.DataFrame({"start_s": [t]}).select(grid.index())[WI].to_list()
    two = pl.DataFrame({"start_s": [t, t]}).select(grid.index())[WI].to_list()
    assert one == [359999999] and two == [359999999, 359999999]
    assert grid.first == grid.last == 359999999


@given(st.binary(max_size=300) | st.text(max_size=200).map(str.encode))
@example(b"a\tb\r\nc\x00\x1f\x7f \xff\xfe")
def test_bad_share_counts_undecodable_and_control_characters(head: bytes) -> None:
    """The binary sniff's share of bad characters, as the character-by-character definition:
    U+FFFD (undecodable or written) and control characters other than tab, CR and LF."""
    text = head.decode("utf-8", errors="replace")
    bad = sum(1 for ch in text if ch == "\ufffd" or (ch < " " and ch not in "\t\r\n"))
    assert _bad_share(head) == (bad / len(text) if text else 0.0)


@st.composite
def scheduled_fleets(draw: st.DrawFn) -> tuple[pl.DataFrame, pl.DataFrame, list[str]]:
    """batch.csv's name/res_list rows over 3 ranks, the rank of each row, and request rids.

    Each rid lives on one rank and is scheduled on a subset of its rank's steps with a rising
    iter: from 0 (its prefill; a restart after preemption begins at 0 again), or from k > 0
    when its prefill came before the profile. Entries are written rid-first (vLLM, MindIE) or
    iter-first (another key order, never read as a prefill). res_list rids may carry the vLLM
    suffix; requests hold some of them and rids that were never scheduled.
    """
    n = draw(st.integers(1, 24))
    rank_of = draw(st.lists(st.integers(0, 2), min_size=n, max_size=n))
    names = draw(
        st.lists(st.sampled_from(["batchFrameworkProcessing", "modelExec"]), min_size=n, max_size=n)
    )
    cells: list[list[dict[str, object]]] = [[] for _ in range(n)]
    rids = draw(st.lists(RID, min_size=1, max_size=8, unique=True))
    requests = []
    for rid in rids:
        rank = draw(st.integers(0, 2))
        own = [i for i in range(n) if rank_of[i] == rank]
        rows = sorted(draw(st.lists(st.sampled_from(own), unique=True)) if own else [])
        text = rid + "-0a1b2c3d" if draw(st.booleans()) else rid  # the vLLM suffix
        it = 0 if draw(st.booleans()) else draw(st.integers(1, 9))
        iter_first = draw(st.booleans())
        for row in rows:
            if names[row] == "modelExec":  # not a scheduling step: read by neither pass
                cells[row].append({"rid": text, "iter": 0})
                continue
            if draw(st.integers(0, 9)) == 0:  # preempted: scheduled again from its prefill
                it = 0
            entry: dict[str, object] = {"rid": text, "iter": it, "type": int(it > 0)}
            cells[row].append({"iter": it, "rid": text} if iter_first else entry)
            it += 1
        if draw(st.booleans()):
            requests.append(rid)
    requests += draw(st.lists(RID, max_size=3))  # most likely never scheduled
    batch = pl.DataFrame({"name": names, "res_list": [repr(c) for c in cells]})
    ranks = pl.DataFrame(
        {ps.ROW: range(n), "dp_rank": rank_of}, schema={ps.ROW: pl.UInt32, "dp_rank": pl.Int64}
    )
    return batch, ranks, requests


def _fleet(
    cells: list[str], ranks: list[int], requests: list[str]
) -> tuple[pl.DataFrame, pl.DataFrame, list[str]]:
    """An explicit ``scheduled_fleets`` example: scheduling rows' res_lists on their ranks."""
    batch = pl.DataFrame({"name": ["batchFrameworkProcessing"] * len(cells), "res_list": cells})
    rows = pl.DataFrame(
        {ps.ROW: range(len(ranks)), "dp_rank": ranks},
        schema={ps.ROW: pl.UInt32, "dp_rank": pl.Int64},
    )
    return batch, rows, requests


# a double-quoted rid holding text that reads like another rid's prefill
FAKE_PREFILL = repr([{"rid": "x', 'rid': 'y', 'iter': 0, 'z", "iter": 4}])


@given(scheduled_fleets(), st.integers(0, 6))
@example(  # a request whose only entries were written iter-first: the search finds it
    _fleet(["[{'iter': 3, 'rid': 'a'}]", "[{'rid': 'b', 'iter': 0}]"], [1, 0], ["a", "b"]), 0
)
@example(_fleet([FAKE_PREFILL, "[{'rid': 'y', 'iter': 0}]"], [1, 0], ["y"]), 0)
@settings(max_examples=300, deadline=None)
def test_prefill_placement_equals_reading_every_entry(
    fleet: tuple[pl.DataFrame, pl.DataFrame, list[str]], prefix_rows: int
) -> None:
    """The fast rid pass (prefills, the first rows, then a search for what it missed) places
    every request where reading every res_list entry places it."""
    batch, ranks, requests = fleet
    lf = batch.lazy().with_row_index(ps.ROW)
    req = pl.DataFrame({"rid": requests}, schema={"rid": pl.Utf8})
    fast = prefill_first_rows(lf, prefix_rows).collect()
    fast = fill_missing(Path("batch.csv"), lf, fast, req["rid"])
    full = first_rows(lf).collect()

    def placed(first: pl.DataFrame) -> list[int | None]:
        return place_requests(req, first.join(ranks, on=ps.ROW))["dp_rank"].to_list()

    assert placed(fast) == placed(full)


@given(scheduled_fleets(), st.integers(0, 6))
@example(_fleet(["[{'rid': 'y', 'iter': 0}]", FAKE_PREFILL], [1, 0], ["y"]), 1)  # past row 1
@settings(max_examples=300, deadline=None)
def test_carried_matches_reduce_to_the_prefill_pass(
    fleet: tuple[pl.DataFrame, pl.DataFrame, list[str]], prefix_rows: int
) -> None:
    """The prefill matches batch.csv's row pass carries give the prefill pass's rid -> first
    row exactly, or None (that pass then runs) when a scheduling row past the first rows holds
    a ``"``: those it reads whole, the carried columns do not."""
    batch, _, _ = fleet
    lf = batch.lazy().with_row_index(ps.ROW)
    carried = lf.select(ps.ROW, *carried_matches(prefix_rows)).collect()
    got = first_rows_of(carried)
    quoted = any(
        row >= prefix_rows and name in SCHED_NAMES and '"' in cell
        for row, (name, cell) in enumerate(zip(batch["name"], batch["res_list"], strict=True))
    )
    if quoted:
        assert got is None
        return
    assert got is not None
    want = prefill_first_rows(lf, prefix_rows).collect()
    assert got.sort("rid").equals(want.sort("rid"))


CELL = st.text(
    alphabet=st.characters(
        whitelist_categories=("Ll", "Nd", "Zs"), whitelist_characters="\",\n\r'é€"
    ),
    max_size=12,
)


@given(
    st.lists(st.tuples(CELL, CELL), max_size=12),
    st.floats(0.0, 1.0),
    st.integers(1, 6),
    st.none() | st.integers(0, 12),
)
@settings(max_examples=300, deadline=None)
def test_head_from_the_first_bytes_equals_reading_the_file(
    rows: list[tuple[str, str]], cut: float, head_rows: int, n_rows: int | None
) -> None:
    """The time-column sample parsed from a file's first bytes is the sample polars reads
    from the file, wherever the bytes cut it (inside a quoted cell, a line, a character)."""
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "batch.csv"
        with path.open("w", newline="", encoding="utf-8") as fh:
            fh.write("name,start_time\n")
            csv.writer(fh, lineterminator="\n").writerows(rows)
        prep = ps.Prepared(path, ["name", "start_time"], n_rows)
        n = head_rows if n_rows is None else min(head_rows, n_rows)
        want = pl.read_csv(
            path,
            n_rows=n,
            infer_schema=False,
            columns=["start_time", "name"],
            encoding="utf8-lossy",
            glob=False,
        )
        saved = ps.HEAD_BYTES, ps.HEAD_ROWS
        ps.HEAD_BYTES = max(1, int(cut * path.stat().st_size))  # anywhere in the file
        ps.HEAD_ROWS = head_rows
        try:
            got = ps._head(prep, ["start_time", "name"])
        finally:
            ps.HEAD_BYTES, ps.HEAD_ROWS = saved
        assert got.equals(want)
