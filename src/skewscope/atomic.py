"""Atomic writes: a failed or interrupted write leaves no truncated file or half-written folder
behind — the target is either untouched or complete. A target that is a device or a FIFO
(``-o /dev/stdout``, ``/dev/null``) is written in place: renaming onto it would replace the
device with a regular file."""

from __future__ import annotations

import contextlib
import os
import secrets
import shutil
import stat
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import BinaryIO, TextIO


@contextlib.contextmanager
def atomic_open(path: str | Path) -> Iterator[TextIO]:
    """A text handle on a temporary file beside ``path``, renamed into place when the block
    ends without an exception (and removed when it raises or is interrupted)."""
    with _atomic(path) as fd, os.fdopen(fd, "w", encoding="utf-8") as f:
        yield f


@contextlib.contextmanager
def atomic_open_binary(path: str | Path) -> Iterator[BinaryIO]:
    """``atomic_open`` for bytes (large files written by blocks, or copied in by the kernel)."""
    with _atomic(path) as fd, os.fdopen(fd, "wb") as f:
        yield f


@contextlib.contextmanager
def _atomic(path: str | Path) -> Iterator[int]:
    """A descriptor of a temporary file beside ``path``, renamed into place when the block
    ends without an exception (and removed when it raises or is interrupted). The caller
    closes the descriptor inside the block."""
    target = Path(path)
    if is_special(target):
        yield os.open(target, os.O_WRONLY)
        return
    tmp = _beside(target)
    try:
        # created inside the try: a signal right after the file appears still removes it
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)  # umask applies
        yield fd
        os.replace(tmp, target)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def _beside(target: Path) -> Path:
    """A temporary name beside ``target`` that nobody else picks (64 random bits), chosen
    before anything is created so the cleanup knows it from the first instant (``mkstemp``
    and ``mkdtemp`` name what they made only once it exists)."""
    return target.parent / f".{target.name}.{secrets.token_hex(8)}.tmp"


def is_special(path: Path) -> bool:
    """An existing file that is neither a regular file nor a folder (a device, a FIFO, a
    socket): writing into it overwrites nothing."""
    try:
        mode = path.stat().st_mode
    except OSError:
        return False
    return not (stat.S_ISREG(mode) or stat.S_ISDIR(mode))


def write_text_atomic(path: str | Path, text: str) -> None:
    """Write ``text`` to a temporary file beside ``path``, then rename it into place."""
    with atomic_open(path) as f:
        f.write(text)


@contextlib.contextmanager
def atomic_folder(path: str | Path) -> Iterator[Path]:
    """A temporary folder beside ``path`` to write into; when the block succeeds it becomes
    ``path`` (one rename when ``path`` is absent or empty), else it is removed.

    When ``path`` already holds files (an ``--force`` overwrite), each top-level entry written
    replaces its namesake by rename and other entries are kept: every entry is then whole, old
    or new, though the folder as a whole is not switched in one step.
    """
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = _beside(target)
    try:
        tmp.mkdir(0o777)  # inside the try (see _beside); the umask applies
        yield tmp
        if target.is_dir() and any(target.iterdir()):
            _merge_into(tmp, target)
        else:
            os.replace(tmp, target)  # replaces an empty folder in one step
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def _merge_into(src: Path, dst: Path) -> None:
    for entry in sorted(src.iterdir()):
        final = dst / entry.name
        if final.is_dir() and not final.is_symlink():
            old = Path(tempfile.mkdtemp(prefix=f".{entry.name}.", suffix=".old", dir=dst))
            os.replace(final, old / entry.name)
            os.replace(entry, final)
            shutil.rmtree(old, ignore_errors=True)
        else:
            os.replace(entry, final)
