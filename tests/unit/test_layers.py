"""The `layers` import contract (pyproject.toml, checked by `lint-imports`) names every module: a
module outside every layer would be free to import anything, so a new one must be placed."""

from __future__ import annotations

import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "src" / "skewscope"  # this tree's modules, whichever copy is installed
# packages whose children the layers name one by one: their __init__ itself is in no layer
SPLIT = {"skewscope", "skewscope.report"}


def layers() -> list[list[str]]:
    doc = tomllib.loads((ROOT / "pyproject.toml").read_text())
    contracts = doc["tool"]["importlinter"]["contracts"]
    (contract,) = [c for c in contracts if c["type"] == "layers"]
    return [[m.strip() for m in layer.split("|")] for layer in contract["layers"]]


def modules() -> list[str]:
    out = []
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
        out.append(".".join(parts[:-1] if parts[-1] == "__init__" else parts))
    return out


def test_every_module_is_in_one_layer() -> None:
    named = [m for layer in layers() for m in layer]
    assert len(named) == len(set(named))
    unplaced = [
        m
        for m in modules()
        if m not in SPLIT and not any(m == n or m.startswith(n + ".") for n in named)
    ]
    assert unplaced == []
    missing = [n for n in named if n not in modules()]
    assert missing == []
