"""The secret scrubber (sources/auth.py) is linear by construction, not by a stopwatch: a
quoted message depends on a bounded prefix of what the server sent, and no pattern can
backtrack more than a constant per start. And it still masks what it must."""

from __future__ import annotations

import re
from re import _parser as sre_parse  # type: ignore[attr-defined]
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from skewscope.errors import MAX_MESSAGE_CHARS
from skewscope.sources.auth import (
    _SECRET_PATTERNS,
    MAX_CREDENTIAL,
    Secret,
    quoted,
    scrub,
    scrub_head,
)

_REPEATS = {sre_parse.MAX_REPEAT, sre_parse.MIN_REPEAT, sre_parse.POSSESSIVE_REPEAT}
_UNBOUNDED = sre_parse.MAXREPEAT


def _shape(items: Any, top: bool, inside_repeat: bool) -> list[str]:
    """Why a parsed pattern could backtrack more than a constant per start ([] when none)."""
    problems: list[str] = []
    seq = list(items)
    for i, (op, av) in enumerate(seq):
        if op in _REPEATS:
            _low, high, body = av
            if inside_repeat:
                problems.append("a repeat inside a repeat")
            last = top and i == len(seq) - 1
            if high == _UNBOUNDED and not last:
                problems.append("an unbounded repeat that something must follow")
            problems += _shape(body, False, inside_repeat or high > 1)  # "(x_?)?" is no loop
        elif op == sre_parse.SUBPATTERN:
            problems += _shape(av[-1], top and i == len(seq) - 1, inside_repeat)
        elif op == sre_parse.BRANCH:
            for alt in av[1]:
                problems += _shape(alt, False, inside_repeat)
        elif op in (sre_parse.ASSERT, sre_parse.ASSERT_NOT):
            problems += _shape(av[1], False, inside_repeat)
    return problems


@pytest.mark.parametrize("pattern", [p for p, _ in _SECRET_PATTERNS], ids=lambda p: p.pattern[:30])
def test_every_pattern_is_linear_by_shape(pattern: re.Pattern[str]) -> None:
    assert _shape(sre_parse.parse(pattern.pattern, pattern.flags), True, False) == []


def test_the_shape_check_catches_the_old_scheme_pattern() -> None:
    old = r"(?i)([a-z][a-z0-9+.-]*://)[^/\s@]+@"  # 40 k letters took 8.7 s
    assert _shape(sre_parse.parse(old), True, False)


_hostile = st.sampled_from(
    [
        "a",
        "a%",
        "a:",
        "x://",
        "bearer ",
        "user:pw",
        "@",
        " ",
        "%20",
        "token=",
        "é",
        "Authorization: ",
    ]
)


@settings(max_examples=200, deadline=None)
@given(st.lists(_hostile, min_size=1, max_size=8), st.integers(1, 50_000))
def test_a_quoted_message_depends_on_a_bounded_prefix(parts: list[str], reps: int) -> None:
    """``quoted`` of any text equals ``quoted`` of its first few thousand characters: what is
    scrubbed is bounded whatever the server sends (a 300 KB error costs what a short one does)."""
    text = "".join(parts) * reps
    bound = 4 * MAX_MESSAGE_CHARS + 2 * max([MAX_CREDENTIAL, *(len(s) for s in _known())])
    if len(text) > bound:
        assert quoted(text) == quoted(text[:bound] + "tail")


def _known() -> list[str]:
    from skewscope.sources import auth

    return list(auth._KNOWN)


@settings(max_examples=200, deadline=None)
@given(
    st.integers(0, 5000),
    st.sampled_from(
        [
            ("https://alice:Pa55word9@prom:9090/x", "Pa55word9"),
            ("Authorization: Bearer abc.def-123456", "abc.def-123456"),
            ("curl -H 'Bearer Zm9vYmFyYmF6MTIz' x", "Zm9vYmFyYmF6MTIz"),
            ("http://x/q?access_token=s3cr3tvalue&y=1", "s3cr3tvalue"),
            ("upstream alice:Pa55word9@10.0.0.1:8000", "Pa55word9"),
        ]
    ),
    st.text(alphabet="ab :/-", max_size=40),
)
def test_no_credential_is_shown_even_cut_in_part(
    pad: int, case: tuple[str, str], after: str
) -> None:
    """Wherever the credential falls, across the cut included, none of it is shown."""
    secret, value = case
    shown = quoted(" " * min(pad, 1) + "x" * pad + " " + secret + after)
    assert value[:5] not in shown, shown


def test_a_known_secret_cut_by_the_window_is_not_shown_in_part() -> None:
    token = "K" + "n0wnT0ken" * 150  # longer than MAX_CREDENTIAL
    Secret(token)
    for pad in range(0, 4000, 97):
        shown = scrub_head("x" * pad + token + " rest", 1600)
        assert "n0wnT0ken" not in shown, pad


def test_scrub_still_masks_the_known_shapes() -> None:
    got = scrub(
        "GET https://bob:hunter22@h/x Authorization: Bearer abc123def "
        "api_key=zzz9 upstream u:p4ss@10.0.0.1:80"
    )
    for secret in ("hunter22", "abc123def", "zzz9", "p4ss"):
        assert secret not in got, got
