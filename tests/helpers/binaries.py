"""The real components the tests run (Prometheus, promtool, jsonnet, ...): found on PATH, or the
test fails loudly with the install line — never skipped (scripts/test.sh installs them)."""

from __future__ import annotations

import shutil

import pytest

APT = "apt-get update && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends"


def need(binary: str, package: str) -> str:
    path = shutil.which(binary)
    if path is None:
        pytest.fail(f"{binary} not found: install it with `{APT} {package}`", pytrace=False)
    return path
