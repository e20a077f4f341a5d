"""Headless Debian Chromium for the HTML report tests: DOM after scripts ran, console messages,
screenshots. A missing chromium fails the test loudly (scripts/test.sh installs it)."""

from __future__ import annotations

import re
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

import pytest

TIMEOUT_S = 90
# With --enable-logging=stderr --v=0 Chromium logs every console message (console.error, an
# uncaught exception) as '...:INFO:CONSOLE:<line>] "<message>", source: <url> (<line>)'.
CONSOLE = re.compile(r":CONSOLE(?::\d+|\(\d+\))\] (.*)")


@dataclass(frozen=True)
class Page:
    dom: str
    console: list[str]

    def body_attrs(self) -> dict[str, str]:
        body = re.search(r"<body([^>]*)>", self.dom)
        assert body, "no <body> in the DOM"
        return dict(re.findall(r'([\w-]+)="([^"]*)"', body.group(1)))


def chromium() -> str:
    exe = shutil.which("chromium") or shutil.which("chromium-browser")
    if exe is None:
        pytest.fail("chromium is not installed (apt-get install chromium; scripts/test.sh does)")
    return exe


def _run(url: str, *extra: str) -> subprocess.CompletedProcess[str]:
    with tempfile.TemporaryDirectory() as profile:
        return subprocess.run(
            [
                chromium(),
                "--headless",
                "--no-sandbox",
                "--disable-gpu",
                "--disable-background-networking",
                "--disable-component-update",
                "--no-first-run",
                "--disable-extensions",
                f"--user-data-dir={profile}",
                *extra,
                url,
            ],
            capture_output=True,
            text=True,
            timeout=TIMEOUT_S,
            check=False,
        )


def load(path: Path) -> Page:
    """The DOM once the page's scripts ran, and every console message it logged."""
    done = _run(path.resolve().as_uri(), "--enable-logging=stderr", "--v=0", "--dump-dom")
    assert done.returncode == 0, done.stderr[-2000:]
    return Page(done.stdout, CONSOLE.findall(done.stderr))


def screenshot(path: Path, out: Path, size: str = "1280,2000") -> Path:
    done = _run(path.resolve().as_uri(), f"--window-size={size}", f"--screenshot={out}")
    assert done.returncode == 0 and out.exists(), done.stderr[-2000:]
    return out
