"""A REAL PostgreSQL for the history tests: initdb + pg_ctl in a temp dir, TCP on 127.0.0.1 only,
run as the ``postgres`` user when the tests run as root (the server refuses root). A missing
installation fails the test with the install command; it never skips."""

from __future__ import annotations

import contextlib
import glob
import os
import pwd
import shutil
import socket
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

INSTALL = "apt-get install -y --no-install-recommends postgresql"


def _bin(name: str) -> str:
    found = sorted(glob.glob(f"/usr/lib/postgresql/*/bin/{name}")) or [shutil.which(name) or ""]
    if not found[-1]:
        pytest.fail(f"PostgreSQL's {name} not found: install it with `{INSTALL}`", pytrace=False)
    return found[-1]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextlib.contextmanager
def postgres() -> Iterator[str]:
    """Yields a ``postgresql://`` URL of a fresh server; stops it and removes its files after."""
    initdb, pg_ctl = _bin("initdb"), _bin("pg_ctl")
    prefix: list[str] = []
    root = tempfile.mkdtemp(prefix="skewscope-pg-")
    if os.geteuid() == 0:
        try:
            user = pwd.getpwnam("postgres")
        except KeyError:
            pytest.fail(f"no postgres user to run the server as: `{INSTALL}`", pytrace=False)
        os.chown(root, user.pw_uid, user.pw_gid)
        prefix = ["runuser", "-u", "postgres", "--"]
    data, log = Path(root) / "data", Path(root) / "server.log"
    port = _free_port()

    def run(*cmd: str) -> None:
        done = subprocess.run([*prefix, *cmd], capture_output=True, text=True, timeout=120)
        assert done.returncode == 0, (cmd, done.stdout[-2000:], done.stderr[-2000:])

    try:
        run(initdb, "-D", str(data), "-A", "trust", "-U", "skewscope", "-E", "UTF8", "--no-sync")
        run(
            pg_ctl,
            "-D",
            str(data),
            "-l",
            str(log),
            "-w",
            "-t",
            "60",
            "start",
            "-o",
            f"-h 127.0.0.1 -p {port} -k {root} -F",
        )
        try:
            yield f"postgresql://skewscope@127.0.0.1:{port}/postgres"
        finally:
            run(pg_ctl, "-D", str(data), "-m", "immediate", "-w", "stop")
    finally:
        shutil.rmtree(root, ignore_errors=True)
