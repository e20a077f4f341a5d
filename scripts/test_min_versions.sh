#!/usr/bin/env bash
# Runs the reader, parser, HTTP and CLI tests against the lowest dependency versions that
# pyproject.toml declares (scripts/min-versions.txt), in a throw-away venv: a declared minimum
# is a tested one. Called by scripts/test.sh.
set -euo pipefail
cd "$(dirname "$0")/.."
pins=scripts/min-versions.txt
python3 - "$pins" <<'PY'
import re, sys, tomllib
pins = {re.split(r"[=<>]", l)[0].strip().lower(): l.split("==")[1].strip()
        for l in open(sys.argv[1]) if l.strip() and not l.startswith("#")}
deps = tomllib.load(open("pyproject.toml", "rb"))["project"]["dependencies"]
for d in deps:
    name, _, low = re.match(r"([A-Za-z0-9_.-]+)\s*((?:>=|==)\s*([^,;\s]+))?", d).groups()
    key = name.lower()
    if key not in pins:
        sys.exit(f"min-versions: {name} is a dependency but not pinned in {sys.argv[1]}")
    if low != pins[key]:
        sys.exit(f"min-versions: pyproject.toml says {d!r}, {sys.argv[1]} tests {pins[key]}")
PY
venv=$(mktemp -d)/venv
trap 'rm -rf "$(dirname "$venv")"' EXIT
python3 -m venv "$venv"
"$venv/bin/pip" install -q -r "$pins" pytest pytest-timeout hypothesis 2>&1 | grep -v '^WARNING' || true
"$venv/bin/pip" install -q --no-deps -e . 2>&1 | grep -v '^WARNING' || true
echo "min-versions: $(grep -v '^#' "$pins" | tr '\n' ' ')"
"$venv/bin/python" -m pytest -q -p no:cacheprovider \
  tests/unit/test_profiler_reader.py tests/unit/test_cli_offline.py tests/unit/test_report_render.py \
  tests/integration/test_scrape.py tests/integration/test_faults.py tests/integration/test_cli_online.py
