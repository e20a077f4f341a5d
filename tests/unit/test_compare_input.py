"""A saved report given to ``compare`` is input: a field of the wrong type, a number no float
holds, or a hostile file is one line naming the file and field (exit 3), never a traceback."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from skewscope.cli import main
from skewscope.cli.saved_report import check_report
from skewscope.errors import InputError

EXAMPLE = str(Path(__file__).parents[2] / "examples" / "cluster-skew")


@pytest.fixture(scope="module")
def saved(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    out = tmp_path_factory.mktemp("saved") / "before.json"
    assert main(["diagnose", EXAMPLE, "--level", "instance", "-o", str(out)]) == 0
    doc: dict[str, Any] = json.loads(out.read_text())
    return doc


def _one_line(capsys: pytest.CaptureFixture[str]) -> str:
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("skewscope: error: "), err
    return err


def _set(doc: dict[str, Any], where: tuple[Any, ...], value: Any) -> dict[str, Any]:
    out = copy.deepcopy(doc)
    node: Any = out
    for k in where[:-1]:
        node = node[k]
    node[where[-1]] = value
    return out


def _first_row(doc: dict[str, Any]) -> tuple[Any, ...]:
    signal, per_unit = next(iter(doc["series"]["values"].items()))
    return ("series", "values", signal, next(iter(per_unit)))


@pytest.mark.parametrize(
    ("where", "value", "message"),
    [
        (("hot_units",), 3, "field hot_units: expected a list of unit names, got 3"),
        (("starved_units",), [1], "field starved_units: expected a list of unit names"),
        (("windows",), "many", "field windows: expected a whole number of windows, got 'many'"),
        (("windows",), 10**400, "field windows: expected a whole number of windows"),
        (("window_s",), 10**400, "field window_s: expected a number"),
        (("start_s",), "x", "field start_s: expected a number"),
        (("verdict",), {"a": 1}, "field verdict: expected a string, got dict"),
        (("units",), "inst-0", "field units: expected a list of units"),
        (("units", 0), 7, "field units[0]: expected an object with a 'unit' name"),
        (("units", 0, "instance"), 3, "field units[0].instance: expected a string"),
        (("series",), [], "field series: expected an object or null"),
        (("series", "values"), 1, "field series.values: expected an object of signals"),
        (("gateway",), "nginx", "field gateway: expected an object or null"),
    ],
)
def test_a_wrong_field_is_one_line_naming_it(
    saved: dict[str, Any],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    where: tuple[Any, ...],
    value: Any,
    message: str,
) -> None:
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps(_set(saved, where, value)))
    good = tmp_path / "good.json"
    good.write_text(json.dumps(saved))
    assert main(["compare", str(good), str(bad)]) == 3
    err = _one_line(capsys)
    assert f"{bad}: {message}" in err, err


def test_a_series_row_of_the_wrong_type_or_size(
    saved: dict[str, Any], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    row = _first_row(saved)
    for value, message in [
        ("abc", "expected a list of per-window values"),
        ([1.0, 10**400], '[1]: expected a number, null or "inf"'),
    ]:
        bad = tmp_path / "bad.json"
        bad.write_text(json.dumps(_set(saved, row, value)))
        assert main(["compare", str(bad), str(bad)]) == 3
        err = _one_line(capsys)
        assert message in err and ".".join(row) in err, err


def test_a_hostile_report_file_is_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    deep = tmp_path / "deep.json"
    deep.write_text("[" * 100_000 + "]" * 100_000)
    for path, message in [
        (deep, "nested 100000 levels deep"),
        (Path("/dev/zero"), "not a regular file"),
    ]:
        assert main(["compare", str(path), str(path)]) == 3
        assert f"{path}: {message}" in _one_line(capsys)


_json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-(10**400), 10**400)
    | st.floats()
    | st.text(max_size=4),
    lambda kids: (
        st.lists(kids, max_size=3) | st.dictionaries(st.text(max_size=3), kids, max_size=3)
    ),
    max_leaves=8,
)


@settings(
    max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(data=st.data())
def test_any_value_in_any_field_is_checked_or_harmless(
    saved: dict[str, Any], data: st.DataObject
) -> None:
    """Put any JSON value at any field compare reads: it is refused with one InputError line,
    or the comparison runs (the analysis never meets a value of a type it cannot take)."""
    from skewscope.analysis.compare import compare
    from skewscope.config import DEFAULT_THRESHOLDS

    places = [(k,) for k in saved] + [
        ("units", 0, "unit"),
        ("units", 0, "instance"),
        _first_row(saved),
        (*_first_row(saved), 0),
    ]
    where = data.draw(st.sampled_from(places))
    doc = _set(saved, where, data.draw(_json_values))
    try:
        check_report(json.loads(json.dumps(doc)), Path("r.json"))
    except InputError as e:
        assert "\n" not in str(e) and str(e).startswith("r.json: ")
        return
    compare(saved, doc, th=DEFAULT_THRESHOLDS)
