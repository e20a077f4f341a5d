"""One vocabulary (issue 24 s.3): every set of words is one StrEnum, defined once, and the
Report's fields are typed with it. Read from the source text (cheap, no imports of every module):
a second enum of the same words, or a ``Verdict = str`` style alias, fails here."""

from __future__ import annotations

import ast
import dataclasses
import typing
from collections import defaultdict
from pathlib import Path

from skewscope import catalogue
from skewscope.report import model

SRC = Path(__file__).resolve().parents[2] / "src" / "skewscope"


def _enums() -> dict[str, list[tuple[str, frozenset[str]]]]:
    """Class name -> (where, member values) of every Enum subclass in the package."""
    out: dict[str, list[tuple[str, frozenset[str]]]] = defaultdict(list)
    for path in sorted(SRC.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if not isinstance(node, ast.ClassDef):
                continue
            bases = {
                b.id if isinstance(b, ast.Name) else getattr(b, "attr", "") for b in node.bases
            }
            if not bases & {"StrEnum", "Enum", "IntEnum"}:
                continue
            values = frozenset(
                str(s.value.value)
                for s in node.body
                if isinstance(s, ast.Assign) and isinstance(s.value, ast.Constant)
            )
            out[node.name].append((str(path.relative_to(SRC)), values))
    return out


def test_no_vocabulary_is_defined_twice() -> None:
    enums = _enums()
    twice = {name: [w for w, _ in where] for name, where in enums.items() if len(where) > 1}
    assert not twice, f"one name, two enums: {twice}"
    by_words: dict[frozenset[str], list[str]] = defaultdict(list)
    for name, [(where, values)] in enums.items():
        by_words[values].append(f"{where}:{name}")
    same = [names for names in by_words.values() if len(names) > 1]
    assert not same, f"the same words in two enums: {same}"


def test_no_alias_of_str_stands_in_for_a_vocabulary() -> None:
    """``Verdict = str`` types nothing; vocabularies named like the catalogue's are its enums."""
    names = {
        n
        for n, v in vars(catalogue).items()
        if isinstance(v, type) and v.__module__ == catalogue.__name__
    }
    for path in sorted(SRC.rglob("*.py")):
        for node in ast.parse(path.read_text(encoding="utf-8")).body:
            if isinstance(node, ast.Assign) and isinstance(node.value, ast.Name):
                targets = {t.id for t in node.targets if isinstance(t, ast.Name)}
                assert not (node.value.id == "str" and targets), (path, targets)
            if isinstance(node, ast.ClassDef) and path.name != "catalogue.py":
                assert node.name not in names, f"{path}: {node.name} shadows catalogue.{node.name}"


def test_the_report_fields_are_typed_with_the_catalogue_enums() -> None:
    expected = {
        (model.Report, "verdict"): catalogue.Verdict,
        (model.Report, "level"): catalogue.Level,
        (model.Finding, "kind"): catalogue.Kind,
        (model.Finding, "severity"): catalogue.Severity,
        (model.UnitReport, "role"): catalogue.Role,
    }
    for (cls, name), enum in expected.items():
        hints = typing.get_type_hints(cls)
        assert name in {f.name for f in dataclasses.fields(cls)}
        assert hints[name] is enum, (cls.__name__, name, hints[name])


def test_a_finding_carries_its_causes_as_keys_only() -> None:
    """The analysis ranks ``catalogue.Cause`` keys; their titles and actions are words
    (report/causes.py), attached where the report is worded, so the Finding has no field for
    them."""
    hints = typing.get_type_hints(model.Finding)
    assert hints["root_causes"] == tuple[catalogue.Cause, ...]
    assert "actions" not in {f.name for f in dataclasses.fields(model.Finding)}
