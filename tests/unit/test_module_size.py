"""Every module under src/skewscope stays within LIMIT lines (the team brief: modules < ~500
lines): one past it does more than one job, so it fails here, named with its length, to be
split."""

from __future__ import annotations

from pathlib import Path

LIMIT = 500
# the checkout's root, wherever under tests/ this file sits
ROOT = next(p for p in Path(__file__).resolve().parents if (p / "pyproject.toml").is_file())
PACKAGE = ROOT / "src" / "skewscope"  # this tree's modules, whichever copy is installed


def too_long(package: Path, limit: int = LIMIT) -> list[str]:
    """Each module of ``package`` (subpackages too) longer than ``limit`` lines, with its
    length, in path order."""
    out = []
    for path in sorted(package.rglob("*.py")):
        n = len(path.read_text(encoding="utf-8").splitlines())
        if n > limit:
            out.append(f"{path.relative_to(package.parent)}: {n} lines (limit {limit})")
    return out


def test_no_module_passes_the_limit() -> None:
    assert PACKAGE.is_dir()
    assert too_long(PACKAGE) == []


def test_a_module_past_the_limit_is_named_with_its_length(tmp_path: Path) -> None:
    pkg = tmp_path / "pkg"
    (pkg / "sub").mkdir(parents=True)
    (pkg / "at_limit.py").write_text("x = 1\n" * LIMIT)
    (pkg / "sub" / "past.py").write_text("x = 1\n" * (LIMIT + 1))
    (pkg / "notes.txt").write_text("x\n" * (LIMIT + 10))  # not a module
    assert too_long(pkg) == [f"pkg/sub/past.py: {LIMIT + 1} lines (limit {LIMIT})"]
