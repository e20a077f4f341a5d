"""`-o FILE` as users meet it: written whole with ordinary permissions, or not at all."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from skewscope import atomic
from skewscope.cli import main

EXAMPLE = str(Path(__file__).resolve().parents[2] / "examples" / "cluster-skew")


def test_report_file_has_ordinary_permissions(tmp_path: Path) -> None:
    out = tmp_path / "r.md"
    assert main(["diagnose", EXAMPLE, "-o", str(out)]) == 0
    mask = os.umask(0)
    os.umask(mask)
    assert stat.S_IMODE(out.stat().st_mode) == 0o666 & ~mask  # not mkstemp's 0600
    assert out.read_text().startswith("# skewscope report")


def test_unwritable_output_is_one_line_and_leaves_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["diagnose", EXAMPLE, "-o", str(tmp_path / "missing" / "r.json")]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("skewscope: error: -o ") and "\n" not in err
    assert list(tmp_path.iterdir()) == []


def test_failed_write_keeps_the_old_report_and_no_temp(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "r.json"
    out.write_text("previous")
    real_replace = os.replace

    def disk_full(src: str, dst: str) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(atomic.os, "replace", disk_full)
    assert main(["diagnose", EXAMPLE, "-o", str(out), "--force"]) == 2
    monkeypatch.setattr(atomic.os, "replace", real_replace)
    assert "No space left on device" in capsys.readouterr().err
    assert out.read_text() == "previous"
    assert [p.name for p in tmp_path.iterdir()] == ["r.json"]


@pytest.mark.parametrize(
    ("fmt_args", "shown"),
    [
        ([], "inst-1\\x1b]0;pwned\\x07|x"),
        (["--format", "markdown"], "inst-1\\\\x1b\\]0;pwned\\\\x07\\|x"),
    ],
)
def test_hostile_folder_names_never_reach_the_terminal_raw(
    tmp_path: Path, fmt_args: list[str], shown: str, capsys: pytest.CaptureFixture[str]
) -> None:
    import shutil

    evil = "inst-1\x1b]0;pwned\x07|x"  # an OSC title sequence and a table pipe in a folder name
    for name in ("inst-0", "inst-1", "inst-2"):
        shutil.copytree(Path(EXAMPLE) / name, tmp_path / (evil if name == "inst-1" else name))
    assert main(["diagnose", str(tmp_path), *fmt_args]) == 0
    out, err = capsys.readouterr()
    for stream in (out, err):
        assert "\x1b" not in stream and "\x07" not in stream
    assert f"hot {shown}" in out  # the hot unit, escaped and whole


def _widest(text: str) -> int:
    return max(len(line) for line in text.splitlines())


@pytest.mark.parametrize(
    "command",
    [["diagnose", EXAMPLE], ["compare", EXAMPLE, EXAMPLE], ["whatif", EXAMPLE, "--jobs", "1"]],
    ids=lambda c: c[0],
)
def test_piped_text_honours_columns_and_width(
    command: list[str],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Piped or -o text was 140 columns whatever $COLUMNS said; now --width N > $COLUMNS >
    the terminal's > 140."""
    monkeypatch.delenv("COLUMNS", raising=False)
    assert main(command) == 0
    assert _widest(capsys.readouterr().out) == 140
    monkeypatch.setenv("COLUMNS", "100")
    assert main(command) == 0
    assert _widest(capsys.readouterr().out) == 100
    assert main([*command, "--width", "90"]) == 0
    assert _widest(capsys.readouterr().out) == 90
    out = tmp_path / "r.txt"
    assert main([*command, "--width", "85", "-o", str(out)]) == 0
    assert _widest(out.read_text()) == 85
    monkeypatch.setenv("COLUMNS", "not-a-number")  # a shell's odd value: the default, quietly
    assert main(command) == 0
    assert _widest(capsys.readouterr().out) == 140


@pytest.mark.parametrize("width", ["9", "abc", "100000", "-5"])
def test_bad_width_is_refused_before_any_work(
    width: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["diagnose", str(tmp_path / "no-such-folder"), "--width", width]) == 2
    err = capsys.readouterr().err
    assert err == (
        f"skewscope: error: --width: expected a number of columns 40..1000, got {width!r}\n"
    )


def test_watch_width_is_checked_before_it_starts(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["watch", "--scrape", "http://127.0.0.1:9/metrics", "--width", "5"]) == 2
    assert "--width: expected a number of columns 40..1000" in capsys.readouterr().err
