"""Operations in a real Prometheus (backfilled history, tests/data/operations/): a rolling
restart (counters reset, the unit absent 90 s, back cold) and a scale-out (a unit joining cold)
are no skew and the report says when they happened; a unit that stops answering while hot is
a finding ("lost at T"), never balanced. The same through --scrape: test_operations_scrape."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from test_incidents import diagnose

from helpers.backends import backfill, serve_prometheus
from helpers.binaries import need
from helpers.incidents import OPERATIONS, Incident, incidents, mismatches, samples
from helpers.online_history import to_openmetrics

CASES = incidents(OPERATIONS)


@pytest.fixture(scope="module")
def operations_prometheus(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    prom, promtool = need("prometheus", "prometheus"), need("promtool", "prometheus")
    tmp = tmp_path_factory.mktemp("operations")
    om = tmp / "operations.om"
    om.write_text(to_openmetrics([s for inc in CASES for s in samples(inc)]))
    backfill(promtool, om, tmp / "blocks")
    with serve_prometheus(prom, tmp / "blocks", tmp) as url:
        yield url


@pytest.mark.parametrize("inc", CASES, ids=[c.name for c in CASES])
def test_operation_is_reported_as_what_it_is(
    operations_prometheus: str, inc: Incident, capsys: pytest.CaptureFixture[str]
) -> None:
    doc = diagnose(operations_prometheus, inc, capsys)
    assert mismatches(doc, inc.expect) == [], (doc["findings"], doc["notes"])
