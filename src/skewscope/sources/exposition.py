"""Prometheus text exposition (format 0.0.4) -> samples, line by line, strictly.

prometheus_client's parser reads labels and escapes well but is lenient about the rest of a
line (``x 1 2 3 4`` is read as 1, ``x ١`` as 1) and fails the whole text on one bad line. So each
sample line is first checked against the format's shape with ASCII-only values; lines that do
not fit are dropped and counted (the caller notes them), and the good lines go to
prometheus_client for label decoding. Comment lines (``# HELP``/``# TYPE``) are not needed:
signals are matched on sample names.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from skewscope.sources.auth import quoted
from skewscope.sources.validate import parse_number

Labels = tuple[tuple[str, str], ...]  # sorted label pairs: hashable series identity
Sample = tuple[str, Labels, float]  # (sample name as exposed, labels, value)

_NAME = r"[a-zA-Z_:][a-zA-Z0-9_:]*"
_LABEL = r'[a-zA-Z_][a-zA-Z0-9_]*[ \t]*=[ \t]*"(?:[^"\\\n]|\\.)*"'
_LINE = re.compile(
    rf"(?P<name>{_NAME})[ \t]*"
    rf"(?:\{{[ \t]*(?:{_LABEL}(?:[ \t]*,[ \t]*{_LABEL})*[ \t]*,?[ \t]*)?\}})?"
    r"[ \t]+(?P<value>\S+)(?:[ \t]+-?[0-9]{1,19})?[ \t]*"
)


@dataclass(frozen=True)
class Exposition:
    """Samples of one exposition, and the sample lines dropped as malformed."""

    samples: tuple[Sample, ...]
    malformed: int = 0
    example: str = ""  # the first malformed line, numbered, scrubbed and shortened


def _line_ok(line: str) -> bool:
    m = _LINE.fullmatch(line)
    return m is not None and parse_number(m["value"]) is not None


def _parse(lines: list[str]) -> list[Sample]:
    from prometheus_client.parser import text_string_to_metric_families

    return [
        (s.name, tuple(sorted(s.labels.items())), float(s.value))
        for family in text_string_to_metric_families("\n".join(lines) + "\n")
        for s in family.samples
    ]


def parse_exposition(text: str) -> Exposition:
    """Samples of a text exposition (sample names as exposed, ``_total`` kept); never raises."""
    good: list[str] = []
    bad: list[tuple[int, str]] = []
    for number, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        if _line_ok(line):
            good.append(line)
        else:
            bad.append((number, line))
    try:
        samples = _parse(good)
    except (ValueError, TypeError, IndexError, KeyError):  # a shape the check missed: per line
        samples = []
        for line in good:
            try:
                samples.extend(_parse([line]))
            except (ValueError, TypeError, IndexError, KeyError):
                bad.append((0, line))
    example = ""
    if bad:
        number, line = bad[0]
        example = (f"line {number}: " if number else "") + quoted(line, 80)
    return Exposition(tuple(samples), len(bad), example)
