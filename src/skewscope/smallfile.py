"""One reader for every small file a user names (``--config``, a scenario, ``--device-map``, a
saved report for ``compare``, ``--token-file``, ``--password-file``).

Why one boundary: each of those files can be hostile or simply wrong (a FIFO that never ends, a
directory, ``/dev/zero``, megabytes of one dotted key, ten thousand nested brackets, bytes that are
not UTF-8). Every check happens here, before a parser runs, so each reader gets the same one-line
error naming the file and what was expected, and none gets a hang, a ``MemoryError`` or a
``RecursionError``:

1. the path is opened without blocking (a FIFO's ``open`` would wait for a writer) and must be a
   regular file (``fstat``), so a directory, FIFO, socket or device is refused before a read;
2. at most ``limit`` bytes are read (a file that grows past it while read is refused too);
3. the bytes must be UTF-8 (the message names the line of the first bad byte);
4. for TOML and JSON, the nesting (brackets, inline tables and dotted-key parts) is counted by a
   linear scan that skips strings and comments, and a document deeper than ``MAX_NESTING`` is
   refused before ``tomllib``/``json`` recurse (or go quadratic on a key of 10 000 dotted parts).

Neutral ground: it imports only ``errors`` and ``settings`` (every layer may use it).
"""

from __future__ import annotations

import json
import os
import stat
import tomllib
from pathlib import Path
from typing import Any

from skewscope.errors import InputError, SkewscopeError, one_line
from skewscope.settings import MAX_NESTING, SMALL_FILE_BYTES

__all__ = ["load_json", "load_toml", "nesting_depth", "read_small"]


def _fail(error: type[SkewscopeError], what: str, why: str) -> SkewscopeError:
    return error(one_line(f"{what}: {why}"))


def read_small(
    path: str | Path,
    what: str,
    *,
    limit: int = SMALL_FILE_BYTES,
    error: type[SkewscopeError] = InputError,
) -> str:
    """The text of the regular file ``path`` (at most ``limit`` bytes, UTF-8), or ``error``
    with one line starting ``what:`` (e.g. ``"--config f.toml"``)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    except OSError as exc:
        raise _fail(error, what, f"cannot read ({exc.strerror})") from None
    try:
        st = os.fstat(fd)
        if stat.S_ISDIR(st.st_mode):
            raise _fail(error, what, "is a directory, expected a file")
        if not stat.S_ISREG(st.st_mode):
            raise _fail(error, what, "not a regular file (a FIFO, socket or device is not read)")
        if st.st_size > limit:
            raise _fail(error, what, f"{st.st_size} bytes, expected at most {limit}")
        chunks: list[bytes] = []
        got = 0
        while got <= limit:
            chunk = os.read(fd, min(1 << 20, limit + 1 - got))
            if not chunk:
                break
            chunks.append(chunk)
            got += len(chunk)
        if got > limit:
            raise _fail(error, what, f"more than {limit} bytes, expected at most {limit}")
    except OSError as exc:
        raise _fail(error, what, f"cannot read ({exc.strerror})") from None
    finally:
        os.close(fd)
    data = b"".join(chunks)
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = data.count(b"\n", 0, exc.start) + 1
        raise _fail(error, what, f"line {line}: not UTF-8 text (byte {exc.start})") from None


def nesting_depth(text: str, *, toml: bool) -> int:
    """The deepest nesting of ``text`` (TOML or JSON): the containers under the top level,
    counting open ``[``/``{`` and, in TOML, the tables a dotted key (``a.b.c = 1``: two) or a
    ``[table]`` header opens. Linear, one pass; strings and comments are skipped, so brackets
    inside them do not count. It never under-counts a document its parser accepts
    (property-tested against ``tomllib``/``json``)."""
    deepest = depth = base = 0  # base: the depth of the current [table]
    stack: list[tuple[str, int]] = []  # open "[" / "{" and the depth each added
    header = 0  # inside a [table] (1) or [[array]] (2) header, else 0
    key = toml  # TOML: at a key (line start, after "{", or "," in an inline table)
    dots = val_dots = 0  # dots of the key being read / of the key whose value this is
    i, n = 0, len(text)
    while i < n:
        ch = text[i]
        if ch == '"' or (toml and ch == "'"):
            i = _string_end(text, i, toml)
            continue
        if toml and ch == "#":
            nl = text.find("\n", i)
            i = n if nl < 0 else nl
            continue
        if header:
            if ch == ".":
                dots += 1
            elif ch == "]":
                base = dots + header
                deepest = max(deepest, base)
                i += header
                header = dots = 0
                continue
            i += 1
            continue
        if ch in "[{":
            if key and ch == "[" and not stack:  # TOML: a [table] or [[array]] header
                header = 2 if text.startswith("[[", i) else 1
                i += header
                dots = 0
                continue
            added = 1 + val_dots
            stack.append((ch, added))
            depth += added
            key = toml and ch == "{"
            dots = val_dots = 0
        elif ch in "]}":
            if stack:
                depth -= stack.pop()[1]
            key = False
            dots = val_dots = 0
        elif toml and key and ch == ".":
            dots += 1
        elif toml and ch == "=":
            val_dots, dots, key = dots, 0, False
        elif toml and ch == ",":
            key = bool(stack) and stack[-1][0] == "{"
            dots = val_dots = 0
        elif toml and ch == "\n" and not stack:
            key = True
            dots = val_dots = 0
        deepest = max(deepest, base + depth + dots + val_dots)
        i += 1
    return deepest


def _string_end(text: str, i: int, toml: bool) -> int:
    """The index after the string starting at ``text[i]`` (basic, literal, or multi-line)."""
    quote = text[i]
    if toml and text.startswith(quote * 3, i):
        end = text.find(quote * 3, i + 3)
        if quote == '"':
            while end >= 0 and _escaped(text, end):
                end = text.find('"""', end + 1)
        if end < 0:
            return len(text)
        end += 3
        while end < len(text) and text[end] == quote:  # up to two quotes may end the content
            end += 1
        return end
    j = i + 1
    while True:
        end = text.find(quote, j)
        nl = text.find("\n", j)
        if end < 0 or (0 <= nl < end):  # unterminated: the parser reports it
            return len(text) if nl < 0 else nl
        if quote == '"' and _escaped(text, end):
            j = end + 1
            continue
        return end + 1


def _escaped(text: str, at: int) -> bool:
    """Whether the quote at ``text[at]`` is escaped (an odd run of backslashes before it)."""
    k = at
    while k > 0 and text[k - 1] == "\\":
        k -= 1
    return (at - k) % 2 == 1


def _check_depth(text: str, what: str, error: type[SkewscopeError], toml: bool) -> None:
    depth = nesting_depth(text, toml=toml)
    if depth > MAX_NESTING:
        raise _fail(error, what, f"nested {depth} levels deep, expected at most {MAX_NESTING}")


def load_toml(
    path: str | Path,
    what: str,
    *,
    limit: int = SMALL_FILE_BYTES,
    error: type[SkewscopeError] = InputError,
) -> dict[str, Any]:
    """``read_small`` + the nesting check + ``tomllib``; invalid TOML is ``error`` with the
    parser's line and column."""
    text = read_small(path, what, limit=limit, error=error)
    _check_depth(text, what, error, toml=True)
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise _fail(error, what, f"not TOML ({exc})") from None
    except (RecursionError, ValueError) as exc:  # a backstop; ValueError: a 5000-digit integer
        raise _fail(error, what, f"not TOML ({type(exc).__name__}: {exc})") from None


def load_json(
    path: str | Path,
    what: str,
    *,
    limit: int = SMALL_FILE_BYTES,
    error: type[SkewscopeError] = InputError,
) -> Any:
    """``read_small`` + the nesting check + ``json``; invalid JSON is ``error`` with its line."""
    text = read_small(path, what, limit=limit, error=error)
    _check_depth(text, what, error, toml=False)
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise _fail(
            error, what, f"not JSON (line {exc.lineno} column {exc.colno}: {exc.msg})"
        ) from None
    except (RecursionError, ValueError) as exc:
        raise _fail(error, what, f"not JSON ({exc})") from None
