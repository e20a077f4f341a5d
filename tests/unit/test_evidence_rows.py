"""evidence.assemble reads columns by position when the value tables share one key order; the
frame is the one the general path (the sorted union of keys, a lookup per key) builds."""

from __future__ import annotations

import math

from hypothesis import given, settings
from hypothesis import strategies as st

from skewscope.frame import Level
from skewscope.sources import evidence
from skewscope.sources.evidence import Key, assemble

_KEYS = st.lists(
    st.tuples(
        st.sampled_from([0.0, 15.0, 30.0]),
        st.sampled_from(["a:1", "b:1", "c"]),
        st.sampled_from([None, 0, 1, 2]),
    ),
    min_size=1,
    max_size=20,
    unique=True,
)
_VALUE = st.one_of(st.floats(-1e6, 1e6), st.sampled_from([math.nan, math.inf, 0.0]))


def _general(tables: dict[str, dict[Key, float]]) -> tuple[list[Key], dict[str, list[object]]]:
    keys = sorted(set().union(*tables.values()), key=evidence._key_order)
    return keys, {s: list(map(t.get, keys)) for s, t in tables.items()}


@st.composite
def _tables(draw: st.DrawFn) -> dict[str, dict[Key, float]]:
    keys = draw(_KEYS)
    out = {}
    for signal in ("requests", "running", "kv_usage", "ttft_p99_ms_bound"):
        how = draw(st.sampled_from(["same", "subset", "shuffled", "extra"]))
        ks = list(keys)
        if how == "subset":
            ks = [k for k in ks if draw(st.booleans())]
        elif how == "shuffled":
            ks = draw(st.permutations(ks))
        elif how == "extra":
            ks = [*ks, (45.0, "d", None)]
        out[signal] = {k: draw(_VALUE) for k in ks}
    return out


@settings(max_examples=300, deadline=None)
@given(_tables())
def test_rows_read_by_position_equal_the_general_path(tables: dict[str, dict[Key, float]]) -> None:
    keys, columns = evidence._rows(tables)
    want_keys, want = _general(tables)
    assert keys == want_keys
    got = columns()
    assert list(got) == list(want)
    for s in want:
        assert [repr(v) for v in got[s]] == [repr(v) for v in want[s]]


def test_shared_order_takes_the_positional_path_and_builds_the_same_frame() -> None:
    keys = [(t, inst, dp) for inst in ("b:1", "a:1") for dp in (1, 0) for t in (15.0, 0.0)]
    tables = {
        "requests": {k: float(i) for i, k in enumerate(keys)},
        "running": {k: 2.0 * i for i, k in enumerate(keys)},
        "ttft_p99_ms_bound": {keys[3]: 1.0},
    }
    frame = assemble(Level.DP, tables, aliases={}, window_s=15.0, source="t")
    rows = frame.df.select("window_start_s", "instance", "dp_rank", "requests").rows()
    assert rows == sorted(
        ((t, i, d, float(keys.index((t, i, d)))) for t, i, d in keys),
        key=lambda r: (r[0], r[1], r[2]),
    )
    assert frame.df["ttft_p99_ms_bound"].drop_nulls().to_list() == [1.0]
