"""pre-commit runs the linters CI runs, at the versions CI installs: a hook that drifts from the
[test] extra formats or lints differently from the suite and turns a clean commit red in CI."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[2]


def _extra_pins() -> dict[str, str]:
    extra = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    pins = {}
    for req in extra["test"]:
        if m := re.fullmatch(r"([A-Za-z0-9_.-]+)==(\S+)", req):
            pins[m[1].lower()] = m[2]
    return pins


def test_every_pre_commit_pin_is_the_test_extras_pin() -> None:
    config = yaml.safe_load((ROOT / ".pre-commit-config.yaml").read_text())
    hook_pins = {}
    for repo in config["repos"]:
        for hook in repo["hooks"]:
            for dep in hook.get("additional_dependencies", []):
                name, _, version = dep.partition("==")
                assert version, f"hook {hook['id']}: {dep!r} is not pinned with =="
                hook_pins[name.lower()] = version
    pins = _extra_pins()
    assert hook_pins, "no pinned hook dependency: the hooks would float"
    for name, version in hook_pins.items():
        assert pins.get(name) == version, (name, version, pins.get(name))


def test_the_tools_ci_runs_are_pinned_and_hooked() -> None:
    pins = _extra_pins()
    assert {"ruff", "mypy"} <= pins.keys()
    hooks = {
        h["entry"].split()[0]
        for r in yaml.safe_load((ROOT / ".pre-commit-config.yaml").read_text())["repos"]
        for h in r["hooks"]
    }
    script = (ROOT / "scripts" / "test.sh").read_text()
    for tool in ("ruff", "mypy", "lint-imports"):
        assert tool in hooks and re.search(rf"^{tool}\b", script, re.M), tool
