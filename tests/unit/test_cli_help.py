"""The diagnose help says what the README says (they drifted apart once: '>= 24 windows')."""

from __future__ import annotations

import re
from pathlib import Path

from skewscope.cli.diagnose import LEVEL_HELP, window_help

README = Path(__file__).resolve().parents[2] / "README.md"


def _norm(text: str) -> str:
    text = text.replace("…", "...").replace("–", "-").replace("—", "-").replace("`", "")
    return " ".join(text.split())


def test_window_help_matches_readme() -> None:
    readme = _norm(README.read_text(encoding="utf-8"))
    m = re.search(r"--window 10s - window length \((default: [^)]*)\)", readme)
    assert m, "README lost its --window line"
    assert f"({m.group(1)})" in _norm(window_help())


def test_level_help_matches_readme() -> None:
    readme = _norm(README.read_text(encoding="utf-8"))
    core = _norm(LEVEL_HELP).removeprefix("auto (default) ").split(";", 2)
    assert "--level auto|instance|dp - auto " + ";".join(core[:2]) in readme
