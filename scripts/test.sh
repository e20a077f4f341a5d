#!/usr/bin/env bash
# Installs everything the tests need on a fresh Debian machine, then runs lint, types and tests.
# Real components (Prometheus, promtool, VictoriaMetrics, Chromium for the HTML report, nginx in
# front of the simulated engines) come from Debian; the tests start them. jsonnet renders the
# monitoring mixin (tests/integration/test_mixin.py).
set -euo pipefail
cd "$(dirname "$0")/.."
need=()
for bin in prometheus promtool victoria-metrics chromium nginx prometheus-alertmanager amtool \
    jsonnet; do
  command -v "$bin" >/dev/null 2>&1 || need+=("$bin")
done
# PostgreSQL (watch --save postgresql://...): the tests run initdb/pg_ctl from its bin dir
compgen -G "/usr/lib/postgresql/*/bin/initdb" >/dev/null || need+=(postgresql)
if [ ${#need[@]} -gt 0 ]; then
  echo "installing Debian packages: prometheus victoria-metrics postgresql chromium nginx" \
    "prometheus-alertmanager jsonnet"
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
    prometheus victoria-metrics postgresql chromium fonts-dejavu-core nginx \
    prometheus-alertmanager jsonnet >/dev/null
fi
python3 -m pip install -q -e ".[test]"
ruff check .
ruff format --check .  # ruff format applied once; pre-commit keeps it (.pre-commit-config.yaml)
mypy
lint-imports --no-cache  # the layer contracts in pyproject.toml
# three worker processes (pytest-xdist), a test file each at a time (its module fixtures and
# servers stay in one process); the online tests wait on servers more than they compute, so 3
# on 2 cores takes ~9 min where one process took ~15. SKEWSCOPE_TEST_WORKERS=0 runs serially.
python3 -m pytest -q -p no:cacheprovider -n "${SKEWSCOPE_TEST_WORKERS:-3}" --dist loadfile "$@"
bash scripts/test_min_versions.sh  # the declared minimum versions are tested ones
