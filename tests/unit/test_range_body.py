"""range_body: a query_range answer read from its bytes reads as json.loads + parse_points, or
is left to them (None) — on generated answers, on byte-level mutations of them, and on
canonical ones, where the fast reader must answer."""

from __future__ import annotations

import json
import math
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from skewscope.sources.range_body import decode_range
from skewscope.sources.validate import parse_points

_NAME = st.one_of(
    st.sampled_from(["instance", "engine", "le", "__name__", "dp_rank", ""]),
    st.text(max_size=6),
)
_LABEL_VALUE = st.one_of(
    st.sampled_from(["10.0.0.1:8000", "0", "+Inf", 'a"b', "a\\b", "é", "\x01", "}],{", '":"']),
    st.text(max_size=8),
)
_TIME = st.one_of(
    st.integers(0, 2**41),
    st.floats(0, 2e12, allow_nan=False).map(lambda t: round(t, 3)),
    st.sampled_from([-1, 10**13, 1e300, 0.5, 1700000000.123456789, True, None, "1"]),
)
_VALUE = st.one_of(
    st.floats(allow_nan=True, allow_infinity=True).map(repr),
    st.sampled_from(
        [
            "1",
            "-0",
            ".5",
            "5.",
            "1e3",
            "1E-05",
            "+Inf",
            "-inf",
            "NaN",
            "-nan",
            "Infinity",
            "1_000",
            " 1",
            "1\n2",
            "",
            "0x10",
            "٣",
            "1e",
            "inf,",
            "in",
        ]
    ),
    st.text(alphabet="0123456789.eE+-infatyINFATY", max_size=6),
    st.integers(-3, 3),
)


@st.composite
def _answers(draw: st.DrawFn, canonical: bool = False) -> bytes:
    """A range answer as the servers lay it out (keys in their order, no spaces)."""
    if canonical:
        names, values = (
            st.sampled_from(["instance", "engine", "le"]),
            st.from_regex(r"[a-z0-9.:+-]{0,8}", fullmatch=True),
        )
        times = st.integers(0, 10**12 - 1)  # a 13th digit is left to json
        points = st.floats(allow_nan=True, allow_infinity=True).map(repr)
    else:
        names, values, times, points = _NAME, _LABEL_VALUE, _TIME, _VALUE
    series = draw(
        st.lists(
            st.tuples(
                st.dictionaries(names, values, max_size=3),
                st.lists(st.tuples(times, points).map(list), min_size=1, max_size=5),
            ).map(lambda mv: {"metric": mv[0], "values": mv[1]}),
            max_size=4,
        )
    )
    ascii_only = draw(st.booleans())
    body = {"status": "success", "data": {"resultType": "matrix", "result": series}}
    return json.dumps(body, separators=(",", ":"), ensure_ascii=ascii_only).encode()


def _reference(body: bytes) -> list[tuple[dict[str, str], list[float], list[str]]] | None:
    """What the JSON path reads, where it reads every series at once; None where it does not
    (an error, a warning, a series point by point)."""
    try:
        doc = json.loads(body)
    except (ValueError, RecursionError):
        return None
    if not (isinstance(doc, dict) and doc.get("status") == "success" and "warnings" not in doc):
        return None
    data = doc.get("data")
    if not isinstance(data, dict) or data.get("resultType") != "matrix":
        return None
    out = []
    for s in data.get("result") or []:
        got = parse_points(s.get("values")) if isinstance(s, dict) else None
        if got is None or not isinstance(s.get("metric"), dict):
            return None
        out.append((s["metric"], [float(t) for t in got[0]], list(map(repr, got[1]))))
    return out


def _check(body: bytes) -> Any:
    fast = decode_range(body, {})
    if fast is None:
        return None
    ref = _reference(body)
    assert ref is not None, body
    got = [(s.labels, list(s.times), list(map(repr, s.values))) for s in fast]
    assert got == ref
    return fast


@settings(max_examples=300, deadline=None)
@given(_answers())
def test_an_answer_reads_as_json_or_is_left_to_it(body: bytes) -> None:
    _check(body)


@settings(max_examples=300, deadline=None)
@given(_answers(), st.data())
def test_a_mutated_answer_reads_as_json_or_is_left_to_it(body: bytes, data: st.DataObject) -> None:
    at = data.draw(st.integers(0, len(body)))
    cut = data.draw(st.integers(0, 3))
    insert = data.draw(
        st.sampled_from(
            [
                b"",
                b" ",
                b",",
                b'"',
                b"\\",
                b"]",
                b"[",
                b"}",
                b"{",
                b"\n",
                b"e",
                b"\xff",
                b'{"a":"b"}',
                b"1",
            ]
        )
    )
    _check(body[:at] + insert + body[at + cut :])


@settings(max_examples=100, deadline=None)
@given(_answers(canonical=True))
def test_canonical_answers_take_the_fast_path(body: bytes) -> None:
    assert _check(body) is not None


def test_known_answers() -> None:
    body = (
        b'{"status":"success","data":{"resultType":"matrix","result":['
        b'{"metric":{"engine":"0","instance":"a:1"},"values":[[10,"1.5"],[25.5,"NaN"]]},'
        b'{"metric":{},"values":[[10,"+Inf"],[25.5,"2e3"]]},'
        b'{"metric":{"x":"\\u00e9\\"q"},"values":[[10,"-1"]]}]}}'
    )
    fast = _check(body)
    assert fast is not None and len(fast) == 3
    assert fast[0].labels == {"engine": "0", "instance": "a:1"} and fast[0].times == (10, 25.5)
    assert fast[1].values[0] == math.inf and fast[0].times is fast[1].times  # one grid
    assert fast[2].labels == {"x": 'é"q'}
    empty = b'{"status":"success","data":{"resultType":"matrix","result":[]}}'
    assert decode_range(empty) == []
    for other in (
        body.replace(b'"status":"success",', b'"status":"success","warnings":["w"],'),
        body.replace(b"[[10,", b"[[ 10,"),
        body.replace(b'"metric"', b'"METRIC"'),  # the number grammar alone ignores case
        body.replace(b'"1.5"', b'"1_5"'),
        body.replace(b'[[10,"-1"]]', b"[]"),  # a series without points: read point by point
        body.replace(b"[[10,", b"[[010,"),  # no JSON number
        body.replace(b"\\u00e9", b"\\x"),  # an escape json refuses
        body[:-1],
    ):
        assert decode_range(other) is None, other
