"""``--config`` values are checked against the range each setting's type carries
(``settings.Range``) and against the thresholds they must keep an order with: a value outside is
one UsageError line naming the key and what was expected; a value inside is taken as given."""

from __future__ import annotations

import dataclasses
import re
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from skewscope.config import DEFAULT_THRESHOLDS, Thresholds
from skewscope.errors import UsageError
from skewscope.settings import (
    DEFAULT_LIMITS,
    Range,
    SourceLimits,
    field_kinds,
    out_of_range,
)

WHERE = "--config f.toml: [x]"
DEFAULTS: list[Any] = [DEFAULT_THRESHOLDS, DEFAULT_LIMITS]


def numeric(cls: type) -> dict[str, tuple[type, Range | None]]:
    """The number settings (a name setting, ``role_label``, has a ``Pattern`` instead)."""
    return {n: k for n, k in field_kinds(cls).items() if k[0] is not str}


@pytest.mark.parametrize("default", DEFAULTS, ids=["thresholds", "sources"])
def test_every_setting_has_a_range_and_its_default_is_in_it(default: Any) -> None:
    kinds = field_kinds(type(default))
    assert {f.name for f in dataclasses.fields(default)} == set(kinds)
    assert [name for name, (_, rng) in numeric(type(default)).items() if rng is None] == []
    assert [n for n, (kind, _) in kinds.items() if kind is str] == (
        ["role_label"] if default is DEFAULT_LIMITS else []
    )
    assert out_of_range(default) == []
    assert DEFAULT_THRESHOLDS.contradictions() == []


@pytest.mark.parametrize(
    ("default", "values", "message"),
    [
        (
            DEFAULT_THRESHOLDS,
            {"hot_ratio": 1.0},
            "hot_ratio: expected a number in (1, 1000], got 1.0",
        ),
        (
            DEFAULT_THRESHOLDS,
            {"count_ratio": 0.8},
            "count_ratio: expected a number in (1, 1000], got 0.8",
        ),
        (
            DEFAULT_THRESHOLDS,
            {"persist_share": 0.0},
            "persist_share: expected a number in (0, 1], got 0.0",
        ),
        (DEFAULT_THRESHOLDS, {"kv_high": 1.5}, "kv_high: expected a number in (0, 1], got 1.5"),
        (
            DEFAULT_THRESHOLDS,
            {"weight_p_value": 1},
            "weight_p_value: expected a number in (0, 1), got 1",
        ),
        (
            DEFAULT_THRESHOLDS,
            {"min_windows": 0},
            "min_windows: expected an integer in [1, 1e9], got 0",
        ),
        (DEFAULT_THRESHOLDS, {"min_units": 1}, "min_units: expected an integer in [2, 1e9], got 1"),
        (
            DEFAULT_THRESHOLDS,
            {"floor_waiting": -1},
            "floor_waiting: expected a number in [0, 1e9], got -1",
        ),
        (
            DEFAULT_THRESHOLDS,
            {"stalled_max_progress": 0},
            "stalled_max_progress: expected a number in (0, 1e9], got 0",
        ),
        (
            DEFAULT_THRESHOLDS,
            {"permutation_seed": -3},
            "permutation_seed: expected an integer in [0, 4294967295], got -3",
        ),
        (
            DEFAULT_THRESHOLDS,
            {"min_consecutive": 8},
            "min_consecutive: expected at most min_windows (6), got 8 (a persistent run must fit "
            "in the windows judged)",
        ),
        (
            DEFAULT_THRESHOLDS,
            {"min_windows": 2},
            "min_windows: expected at least min_consecutive (3), got 2",
        ),
        (
            DEFAULT_THRESHOLDS,
            {"severe_tail_ratio": 1.2, "impact_ratio": 1.5},
            "severe_tail_ratio: expected at least impact_ratio (1.5), got 1.2",
        ),
        (
            DEFAULT_THRESHOLDS,
            {"mixed_share": 0.6},
            "mixed_share: expected at most explain_share (0.5), got 0.6",
        ),
        (
            DEFAULT_THRESHOLDS,
            {"weight_p_value": 0.0005},
            "weight_p_value: expected more than 1/(permutations + 1) = 0.001, got 0.0005 "
            "(999 permutations cannot give a p-value of 0.0005 or less)",
        ),
        (
            DEFAULT_THRESHOLDS,
            {"permutations": 50},
            "permutations: expected more than 1/weight_p_value - 1 = 99, got 50",
        ),
        (DEFAULT_LIMITS, {"max_query_mb": 0}, "max_query_mb: expected a number in (0, 1e9], got 0"),
        (
            DEFAULT_LIMITS,
            {"progress_every_s": -5},
            "progress_every_s: expected a number in (0, 1e9], got -5",
        ),
        (
            DEFAULT_LIMITS,
            {"role_label": "llm-d.ai/role"},
            "role_label: expected a label name, got 'llm-d.ai/role'",
        ),
        (DEFAULT_LIMITS, {"role_label": 3}, "role_label: expected a label name, got 3"),
    ],
)
def test_bad_value_is_one_line_naming_the_key(
    default: Any, values: dict[str, object], message: str
) -> None:
    with pytest.raises(UsageError) as err:
        default.updated(values, WHERE)
    assert str(err.value).startswith(f"{WHERE} ") and message in str(err.value), str(err.value)


def _value(kind: type) -> st.SearchStrategy[float]:
    if kind is int:
        return st.integers(-(10**6), 10**6)
    return st.floats(-1e6, 1e6, allow_nan=False) | st.sampled_from([-1.0, 0.0, 1.0, 2.0])


@given(st.data())
@settings(max_examples=300)
def test_a_value_is_taken_exactly_when_in_range_and_consistent(data: st.DataObject) -> None:
    default = data.draw(st.sampled_from(DEFAULTS))
    name, (kind, rng) = data.draw(st.sampled_from(sorted(numeric(type(default)).items())))
    assert rng is not None
    value = data.draw(_value(kind))
    if not rng.holds(value):
        with pytest.raises(UsageError) as err:
            default.updated({name: value}, WHERE)
        want = "an integer" if kind is int else "a number"
        assert str(err.value) == f"{WHERE} {name}: expected {want} {rng.text()}, got {value!r}"
        return
    wanted = dataclasses.replace(default, **{name: value})
    clash = isinstance(wanted, Thresholds) and wanted.contradictions()
    if clash:
        with pytest.raises(UsageError, match=f"^{re.escape(WHERE)} {name}: expected "):
            default.updated({name: value}, WHERE)
    else:
        got = default.updated({name: value}, WHERE)
        assert getattr(got, name) == value and got == wanted


@given(st.data())
@settings(max_examples=300)
def test_any_toml_number_is_taken_or_refused_in_one_short_line(data: st.DataObject) -> None:
    """Integers far past a float (TOML and tomllib take any size) and floats past every range:
    one UsageError line, never an OverflowError or a setting that allocates gigabytes."""
    default = data.draw(st.sampled_from(DEFAULTS))
    name = data.draw(st.sampled_from(sorted(numeric(type(default)))))
    value = data.draw(
        st.integers(-(10**400), 10**400)
        | st.floats(allow_nan=False)
        | st.sampled_from([10**309, -(10**309), 2**64, 10**9 + 1])
    )
    try:
        got = default.updated({name: value}, WHERE)
    except UsageError as e:
        assert "\n" not in str(e) and len(str(e)) < 200, str(e)
        return
    assert out_of_range(got) == []


def test_every_range_is_closed_above() -> None:
    for default in DEFAULTS:
        for name, (_, rng) in numeric(type(default)).items():
            assert rng is not None and rng.high is not None, name
    highs = {name: rng.high for name, (_, rng) in field_kinds(Thresholds).items() if rng}
    assert highs["permutations"] == 100_000 and highs["smooth_windows"] == 1000


def test_a_pair_set_together_names_the_key_given() -> None:
    # both given: the first in the file; one given: that one, whatever its place in the pair
    with pytest.raises(UsageError, match=r"\] min_consecutive: "):
        DEFAULT_THRESHOLDS.updated({"min_consecutive": 5, "min_windows": 4}, WHERE)
    assert SourceLimits().updated({"max_query_mb": 0.5}, WHERE).max_query_bytes == 2**19
