"""The CLI run in-process with its output captured: the exit code and what it wrote to stderr."""

from __future__ import annotations

import contextlib
import io

from skewscope.cli import main


def run_cli(*argv: str) -> tuple[int, str]:
    err = io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
        rc = main(list(argv))
    return rc, err.getvalue()
