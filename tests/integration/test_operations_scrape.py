"""The operations of test_operations through --scrape: each unit of a fixture is its own
/metrics target stepping one history step per scrape (no wall-clock truth); a restart answers
503 while the unit is absent and comes back with its counters from 0, a lost unit stops
answering. The restart is no skew and is said; the unit lost while hot is a finding."""

from __future__ import annotations

import contextlib

import pytest

from helpers.incidents import OPERATIONS, T0, incidents, samples
from helpers.online_servers import Quiet, serve
from skewscope.analysis.diagnose import diagnose
from skewscope.clock import ManualClock
from skewscope.report.document import report_document
from skewscope.sources.scrape import load_scrape

CASES = {c.name: c for c in incidents(OPERATIONS)}


def stepping(steps: dict[int, list[str]], last: int) -> type[Quiet]:
    """Serves one history step per scrape (the lines of that step), 503 where the unit is
    absent; after the history's end, its last step again."""
    state = {"n": 0}

    class Handler(Quiet):
        def do_GET(self) -> None:
            n = min(state["n"], last)
            state["n"] += 1
            lines = steps.get(n)
            if lines is None:
                self.send_response(503)
                self.end_headers()
                return
            body = "".join(lines).encode()
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

    return Handler


@pytest.mark.parametrize("name", ["rolling-restart", "lost-while-hot"])
def test_operation_through_scrape(name: str) -> None:
    inc = CASES[name]
    step = inc.step_s
    last = inc.span_s // step - 1
    by_unit: dict[str, dict[int, list[str]]] = {}
    for s in samples(inc):
        labels = dict(s.labels)
        unit = labels.pop("instance")
        labels.pop("job")
        text = ",".join(f'{k}="{v}"' for k, v in sorted(labels.items()))
        by_unit.setdefault(unit, {}).setdefault((s.t - T0) // step, []).append(
            f"{s.name}{{{text}}} {s.value!r}\n"
        )
    # The handlers step the history once per scrape, so real time is irrelevant: a ManualClock
    # runs the rounds back to back (none late, none skipped) through the path diagnose --scrape
    # takes (load_scrape, diagnose, the JSON document).
    with contextlib.ExitStack() as stack:
        urls = {
            u: stack.enter_context(serve(stepping(steps, last)))
            for u, steps in sorted(by_unit.items())
        }
        evidence = load_scrape(
            [f"{url}/metrics" for url in urls.values()],
            duration_s=(last + 1) * step,
            interval_s=step,
            window_s=4 * step,
            progress=False,
            clock=ManualClock(T0),
        )
    doc = report_document(diagnose(evidence))
    assert not any("rounds were skipped" in n for n in doc["notes"]), doc["notes"]
    unit_of = {u: url.removeprefix("http://") for u, url in urls.items()}
    if name == "rolling-restart":
        assert doc["verdict"] == "balanced", doc["findings"]
        assert doc["starved_units"] == [] and doc["hot_units"] == []
        assert any(f"{unit_of['e1:8000']} was absent from" in n for n in doc["notes"]), doc["notes"]
    else:
        lost = unit_of["e2:8000"]
        assert doc["verdict"] == "imbalanced" and lost in doc["hot_units"], doc["notes"]
        f = next(f for f in doc["findings"] if f["units"] == [lost])
        assert f["kind"] in ("lost", "count"), f
        assert any(f"{lost} stopped reporting at" in n for n in doc["notes"]), doc["notes"]
