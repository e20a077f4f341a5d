"""A saved diagnose report given to ``compare``, read and type-checked at one boundary.

A report file is input like any other: it may be hand-edited, truncated, from another tool, or
hostile. The reader (``smallfile.load_json``) bounds its size and nesting; this module then
checks every field ``analysis.compare`` reads, with its type and, for numbers, that it is one a
float can hold (``10**400`` is valid JSON), so the comparison never meets a ``TypeError`` or an
``OverflowError``. A wrong field is one line naming the file, the field's JSON path and what was
expected (exit 3).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from skewscope.errors import InputError
from skewscope.settings import REPORT_FILE_BYTES
from skewscope.smallfile import load_json

FLOAT_MAX = 1.7976931348623157e308

Check = Callable[[Any], bool]


def _number(v: Any) -> bool:
    return (
        isinstance(v, int | float)
        and not isinstance(v, bool)
        and (isinstance(v, float) or abs(v) <= FLOAT_MAX)
    )


def _opt(check: Check) -> Check:
    return lambda v: v is None or check(v)


def _str(v: Any) -> bool:
    return isinstance(v, str)


def _names(v: Any) -> bool:
    return isinstance(v, list) and all(isinstance(u, str) for u in v)


def _count(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool) and 0 <= v <= 10**9


# the top-level fields compare reads: (check, what was expected)
_FIELDS: dict[str, tuple[Check, str]] = {
    "verdict": (_str, "a string"),
    "level": (_str, "a string"),
    "source": (_str, "a string"),
    "window_s": (_opt(_number), "a number"),
    "windows": (_count, "a whole number of windows"),
    "start_s": (_opt(_number), "a number"),
    "end_s": (_opt(_number), "a number"),
    "hot_units": (_names, "a list of unit names"),
    "starved_units": (_names, "a list of unit names"),
}


def _bad(path: Path, where: str, expected: str, got: Any) -> InputError:
    shown = type(got).__name__ if isinstance(got, dict | list) else repr(got)[:40]
    return InputError(f"{path}: field {where}: expected {expected}, got {shown}")


def check_report(doc: Any, path: Path) -> dict[str, Any]:
    """``doc`` when every field compare reads has its type; else InputError naming it."""
    if not isinstance(doc, dict) or "verdict" not in doc or "units" not in doc:
        raise InputError(f"{path}: expected a skewscope diagnose JSON report")
    for key, (check, expected) in _FIELDS.items():
        if key in doc and not check(doc[key]):
            raise _bad(path, key, expected, doc[key])
    units = doc["units"]
    if not isinstance(units, list):
        raise _bad(path, "units", "a list of units", units)
    for i, u in enumerate(units):
        if not (isinstance(u, dict) and isinstance(u.get("unit"), str)):
            raise _bad(path, f"units[{i}]", "an object with a 'unit' name", u)
        if not _opt(_str)(u.get("instance")):
            raise _bad(path, f"units[{i}].instance", "a string", u.get("instance"))
    _check_series(doc.get("series"), path)
    _check_gateway(doc.get("gateway"), path)
    return doc


def _check_series(series: Any, path: Path) -> None:
    """``series``: null, or ``{"values": {signal: {unit: [number | null | "inf", ...]}}}``."""
    if series is None:
        return
    if not isinstance(series, dict):
        raise _bad(path, "series", "an object or null", series)
    values = series.get("values", {})
    if not isinstance(values, dict):
        raise _bad(path, "series.values", "an object of signals", values)
    for signal, per_unit in values.items():
        if not isinstance(per_unit, dict):
            raise _bad(path, f"series.values.{signal}", "an object of units", per_unit)
        for unit, row in per_unit.items():
            where = f"series.values.{signal}.{unit}"
            if not isinstance(row, list):
                raise _bad(path, where, "a list of per-window values", row)
            for j, v in enumerate(row):
                if not (v is None or isinstance(v, str) or _number(v)):
                    raise _bad(path, f"{where}[{j}]", 'a number, null or "inf"', v)


def _check_gateway(gw: Any, path: Path) -> None:
    """``gateway``: null, or an object whose ``units`` hold a numeric ``router_share``."""
    if gw is None:
        return
    if not isinstance(gw, dict):
        raise _bad(path, "gateway", "an object or null", gw)
    if not _opt(_str)(gw.get("source")):
        raise _bad(path, "gateway.source", "a string", gw.get("source"))
    units = gw.get("units") or []
    if not isinstance(units, list):
        raise _bad(path, "gateway.units", "a list of units", units)
    for i, u in enumerate(units):
        if not isinstance(u, dict):
            raise _bad(path, f"gateway.units[{i}]", "an object", u)
        if not _opt(_number)(u.get("router_share")):
            raise _bad(path, f"gateway.units[{i}].router_share", "a number", u.get("router_share"))


def read_report(path: Path) -> dict[str, Any]:
    """The saved report at ``path``: bounded, parsed, and type-checked (InputError, exit 3)."""
    return check_report(load_json(path, str(path), limit=REPORT_FILE_BYTES), path)
