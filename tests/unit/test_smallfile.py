"""Hostile small files (``smallfile``): every file a user names goes through one reader that
refuses FIFOs, devices, directories, oversized, non-UTF-8 and too deeply nested files with one
line; here through each command that reads one, and the nesting scan against the parsers."""

from __future__ import annotations

import json
import os
import tomllib
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from skewscope.cli import main
from skewscope.errors import InputError, UsageError
from skewscope.settings import MAX_NESTING
from skewscope.smallfile import load_json, load_toml, nesting_depth, read_small
from skewscope.sources.auth import HttpAuth
from skewscope.sources.devices import load_device_map

EXAMPLE = str(Path(__file__).parents[2] / "examples" / "cluster-skew")


def _depth(obj: Any) -> int:
    """Containers under the top level (the measure ``nesting_depth`` bounds), iteratively."""
    deepest = 0
    todo = [(obj, 0)]
    while todo:
        o, d = todo.pop()
        kids = o.values() if isinstance(o, dict) else o if isinstance(o, list) else None
        if kids is None:
            continue
        deepest = max(deepest, d)
        todo.extend((k, d + 1) for k in kids)
    return deepest


# --- the nesting scan never under-counts what the parsers accept -------------------------

_keys = st.sampled_from(["a", "b", "x_1", '"q.k"', "'lit[{'", '"s#\\""'])
_scalars = st.sampled_from(
    [
        "1",
        "1.5",
        '"[{#"',
        "'}]'",
        '"""m\n[x]\n"""',
        "2024-01-01T00:00:00",
        "true",
        "-3e2",
        "'''a'b'''",
    ]
)


@st.composite
def _toml_value(draw: st.DrawFn, depth: int = 0) -> str:
    kind = draw(st.sampled_from(["s", "s", "arr", "tbl"] if depth < 6 else ["s"]))
    if kind == "s":
        return draw(_scalars)
    items = draw(st.lists(_toml_value(depth + 1), max_size=3))
    if kind == "arr":
        return "[" + draw(st.sampled_from([", ", ",\n  ", " ,"])).join(items) + "]"
    pairs = [f"{draw(_dotted)} = {v}" for v in items]
    return "{" + ", ".join(pairs) + "}"


_dotted = st.lists(_keys, min_size=1, max_size=4).map(".".join)


@st.composite
def _toml_doc(draw: st.DrawFn) -> str:
    lines: list[str] = []
    for n, _ in enumerate(range(draw(st.integers(1, 4)))):
        header = draw(st.sampled_from(["", "[{}]", "[[{}]]"]))
        if header and n:
            lines.append(header.format(draw(_dotted)) + draw(st.sampled_from(["", " # c ["])))
        for _ in range(draw(st.integers(1, 3))):
            lines.append(f"{draw(_dotted)} = {draw(_toml_value())}")
    return "\n".join(lines) + "\n"


@settings(max_examples=300, deadline=None)
@given(_toml_doc())
def test_toml_nesting_scan_never_undercounts(text: str) -> None:
    try:
        doc = tomllib.loads(text)
    except tomllib.TOMLDecodeError:
        return  # duplicate keys and the like: the parser refuses it anyway
    assert nesting_depth(text, toml=True) >= _depth(doc), text


_json = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats(allow_nan=False)
    | st.text(alphabet='[]{}"\\ab#.\n', max_size=5),
    lambda kids: (
        st.lists(kids, max_size=3)
        | st.dictionaries(st.text('[]{}"\\.a', max_size=3), kids, max_size=3)
    ),
    max_leaves=20,
)


@settings(max_examples=300, deadline=None)
@given(_json)
def test_json_nesting_scan_is_exact(obj: Any) -> None:
    text = json.dumps(obj, indent=None if isinstance(obj, list) else 1)
    assert nesting_depth(text, toml=False) == _depth(obj) + (
        1 if isinstance(obj, dict | list) else 0
    )


@pytest.mark.parametrize(
    "text",
    [
        "a = " + "[" * 100_000 + "]" * 100_000,
        "a = " + "{b=" * 5000 + "1" + "}" * 5000,
        "a" + ".a" * 100_000 + " = 1",  # tomllib is quadratic in the parts of one dotted key
        "[" + ".".join(["t"] * 40) + "]\n" + ".".join(["k"] * 40) + " = 1",
    ],
)
def test_deep_toml_is_refused_before_the_parser(tmp_path: Path, text: str) -> None:
    f = tmp_path / "deep.toml"
    f.write_text(text)
    with pytest.raises(InputError, match=f"deep.toml: nested .* expected at most {MAX_NESTING}"):
        load_toml(f, str(f))


def test_deep_json_is_refused_before_the_parser(tmp_path: Path) -> None:
    f = tmp_path / "deep.json"
    f.write_text("[" * 100_000 + "]" * 100_000)
    with pytest.raises(InputError, match="nested 100000 levels deep"):
        load_json(f, str(f))


def test_a_shallow_file_reads_whole(tmp_path: Path) -> None:
    f = tmp_path / "ok.toml"
    f.write_text('[t]\na.b = [1, {c = "[[[[["}]\n')
    assert load_toml(f, "x") == {"t": {"a": {"b": [1, {"c": "[[[[["}]}}}


# --- what is not a small regular UTF-8 file --------------------------------------------------


def _fifo(tmp_path: Path) -> Path:
    p = tmp_path / "fifo"
    os.mkfifo(p)
    return p


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (lambda t: _fifo(t), "not a regular file"),
        (lambda t: Path("/dev/zero"), "not a regular file"),
        (lambda t: t, "is a directory"),
        (lambda t: t / "missing", r"cannot read \(No such file or directory\)"),
    ],
)
def test_not_a_regular_file_is_refused_without_reading(
    tmp_path: Path, make: Any, message: str
) -> None:
    with pytest.raises(InputError, match=message):
        read_small(make(tmp_path), "f")


def test_size_and_encoding(tmp_path: Path) -> None:
    big = tmp_path / "big"
    big.write_bytes(b"a" * 101)
    with pytest.raises(InputError, match="101 bytes, expected at most 100"):
        read_small(big, "f", limit=100)
    bad = tmp_path / "bad"
    bad.write_bytes(b"ok\nok\n\xff\n")
    with pytest.raises(InputError, match="line 3: not UTF-8 text"):
        read_small(bad, "f")


# --- through the commands: one line, the documented exit code -------------------------------


def _error(capsys: pytest.CaptureFixture[str]) -> str:
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and err.startswith("skewscope: error: "), err
    assert "Traceback" not in err
    return err


def _hostile(tmp_path: Path) -> dict[str, Path]:
    files = {
        "deep": "a = " + "[" * 50_000 + "]" * 50_000 + "\n",
        "dotted": "a" + ".a" * 50_000 + " = 1\n",
    }
    out = {k: tmp_path / f"{k}.toml" for k in files}
    for k, text in files.items():
        out[k].write_text(text)
    (tmp_path / "latin.toml").write_bytes(b'a = "caf\xe9"\n')
    out["latin"] = tmp_path / "latin.toml"
    out["fifo"] = _fifo(tmp_path)
    out["dir"] = tmp_path / "adir"
    out["dir"].mkdir()
    out["zero"] = Path("/dev/zero")
    return out


@pytest.mark.parametrize("kind", ["deep", "dotted", "latin", "fifo", "dir", "zero"])
@pytest.mark.parametrize(
    ("argv", "code"),
    [
        (["diagnose", EXAMPLE, "--config", "{}"], 3),
        (["simulate", "{}", "--out", "{out}"], 5),
    ],
)
def test_hostile_file_is_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], kind: str, argv: list[str], code: int
) -> None:
    f = _hostile(tmp_path)[kind]
    args = [a.replace("{}", str(f)).replace("{out}", str(tmp_path / "o")) for a in argv]
    got = main(args)
    err = _error(capsys)
    assert got == code, err
    assert str(f) in err


@pytest.mark.parametrize("value", ["9" * 400, "1" + "0" * 30, "-" + "9" * 400])
@pytest.mark.parametrize(
    "key", ["hot_ratio", "permutations", "smooth_windows", "permutation_seed", "floor_waiting"]
)
def test_huge_numbers_in_config_are_refused_by_range(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], key: str, value: str
) -> None:
    f = tmp_path / "c.toml"
    f.write_text(f"[thresholds]\n{key} = {value}\n")
    assert main(["diagnose", EXAMPLE, "--config", str(f)]) == 2
    err = _error(capsys)
    assert f"{key}: expected " in err and len(err) < 300, err


@pytest.mark.parametrize("kind", ["deep", "dotted", "latin", "fifo", "dir", "zero"])
def test_hostile_device_map_is_one_line(tmp_path: Path, kind: str) -> None:
    f = _hostile(tmp_path)[kind]
    with pytest.raises(InputError, match=f"^--device-map {f}: "):
        load_device_map(str(f))


@pytest.mark.parametrize("option", ["token_file", "password_file"])
@pytest.mark.parametrize(
    ("kind", "message"),
    [
        ("latin", "line 1: not UTF-8 text"),
        ("fifo", "not a regular file"),
        ("dir", "is a directory"),
        ("zero", "not a regular file"),
    ],
)
def test_hostile_secret_file_is_one_usage_line(
    tmp_path: Path, option: str, kind: str, message: str
) -> None:
    f = _hostile(tmp_path)[kind]
    extra: dict[str, Any] = {"username": "u"} if option == "password_file" else {}
    flag = "--" + option.replace("_", "-")
    with pytest.raises(UsageError, match=f"^{flag} {f}: {message}"):
        HttpAuth.from_options(**{option: f}, **extra)


def test_a_secret_file_still_reads(tmp_path: Path) -> None:
    f = tmp_path / "tok"
    f.write_text("s3cr3t-token\n")
    auth = HttpAuth.from_options(token_file=f)
    assert auth.headers() == {"Authorization": "Bearer s3cr3t-token"}
