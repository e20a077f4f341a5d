"""A ``query_range`` answer read straight from its bytes, without a Python object per point.

At fleet size the answers hold ~230,000 points (1,024 units x 12 windows x 30 queries); decoding
them as JSON makes a list, an int and a string per point, which ``validate.parse_points`` then
reads again. Prometheus and VictoriaMetrics write one exact layout::

    {"status":"success","data":{"resultType":"matrix","result":[
      {"metric":{"instance":"a:8000"},"values":[[1700000100,"2373"],...]},...]}}

(without the line breaks). A body in that layout is checked by one regular expression, the JSON
string grammar for labels and the Prometheus number grammar (``validate``) for values, and its
numbers are converted in one pass: a value becomes one float, a time grid shared by many series
is read once. Anything else (warnings, other key orders, whitespace, a bad point, an escape
this reader does not expand) returns None and the caller decodes JSON as before, so every
answer reads as ``json.loads`` + ``parse_points`` would (property-tested in
tests/unit/test_range_body.py), only faster where the layout is the usual one.
"""

from __future__ import annotations

import json
import re
from typing import NamedTuple

from skewscope.sources.validate import NUMBER_PATTERN

_HEAD = b'{"status":"success","data":{"resultType":"matrix","result":['
_TAIL = b"]}}"
# a JSON string (escapes are expanded by json), the loop unrolled: ~20% faster in re
_STRING = rb'"[^"\\\x00-\x1f]*(?:\\.[^"\\\x00-\x1f]*)*"'
_LABELS = rb"\{(?:" + _STRING + b":" + _STRING + rb"(?:," + _STRING + b":" + _STRING + rb")*)?\}"
# a JSON number as Prometheus writes times: no sign, no exponent, no leading zero, < 10^12
_TIME = rb"(?:0|[1-9][0-9]{0,11})(?:\.[0-9]{1,9})?"
_POINT = rb"\[" + _TIME + rb',"(?i:' + NUMBER_PATTERN.encode() + rb')"\]'
_SERIES = re.compile(
    rb'\{"metric":(' + _LABELS + rb'),"values":\[(' + _POINT + rb"(?:," + _POINT + rb")*)\]\}"
)
_BRACKETS = b'[]"'


class RangeSeries(NamedTuple):
    """One series of a range answer: its labels (shared between answers: read only), its
    times (one tuple shared by the series on the same grid) and its values."""

    labels: dict[str, str]
    times: tuple[float, ...]
    values: list[float]


def _labels(raw: bytes, cache: dict[bytes, dict[str, str]]) -> dict[str, str]:
    """The label set of a ``{"name":"value",...}`` text the regex matched. Without a backslash
    no string holds a quote, so ``","`` and ``":"`` occur only between strings."""
    got = cache.get(raw)
    if got is None:
        if b"\\" in raw or raw == b"{}":
            got = json.loads(raw)  # expands escapes; raises on bad ones
        else:  # decoded as json.loads decodes bytes
            text = raw[2:-2].decode("utf-8", "surrogatepass")
            got = dict(pair.split('":"', 1) for pair in text.split('","'))
        cache[raw] = got
    return got


def decode_range(
    body: bytes, label_cache: dict[bytes, dict[str, str]] | None = None
) -> list[RangeSeries] | None:
    """The series of a successful range answer in the usual layout, else None (decode it as
    JSON). ``label_cache`` keeps the label sets of earlier answers (the same units answer
    every query)."""
    if not (body.startswith(_HEAD) and body.endswith(_TAIL)):
        return None
    cache = {} if label_cache is None else label_cache
    pos, end = len(_HEAD), len(body) - len(_TAIL)
    found: list[tuple[bytes, bytes]] = []
    match = _SERIES.match
    while pos < end:  # series after series, each followed by "," or the end
        m = match(body, pos, end)
        if m is None:
            return None
        found.append(m.groups())  # type: ignore[arg-type]
        pos = m.end()
        if pos != end:
            if body[pos] != 0x2C or pos + 1 == end:  # "," and another series
                return None
            pos += 1
    try:
        tokens = b",".join([p for _, p in found]).translate(None, _BRACKETS)
        numbers = tokens.decode("ascii").split(",") if found else []
        values = list(map(float, numbers[1::2]))
        times = numbers[0::2]
        grids: dict[tuple[str, ...], tuple[float, ...]] = {}
        out = []
        i = 0
        for raw, points in found:
            n = points.count(b"[")
            key = tuple(times[i : i + n])
            grid = grids.get(key)
            if grid is None:
                grid = grids[key] = tuple(map(float, key))
            out.append(RangeSeries(_labels(raw, cache), grid, values[i : i + n]))
            i += n
    except (ValueError, TypeError):  # an escape json refuses, text that is not UTF-8
        return None
    return out
