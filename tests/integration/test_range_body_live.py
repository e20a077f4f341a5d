"""The answers of a REAL Prometheus / VictoriaMetrics are read from their bytes
(sources/range_body.py), and the evidence is the same as when every answer is decoded as JSON."""

from __future__ import annotations

from typing import Any

import pytest

from helpers.online_history import SPAN, T0, WINDOW
from skewscope.sources import prom_client
from skewscope.sources.prometheus import load_prometheus


@pytest.mark.parametrize("job", ["vllm-dp", "sglang", "mindie"])
def test_real_answers_take_the_fast_path_and_read_as_json(
    backend: str, job: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    read = prom_client.decode_range
    outcomes: list[bool] = []

    def counting(body: bytes, cache: Any = None) -> Any:
        got = read(body, cache)
        outcomes.append(got is not None)
        return got

    monkeypatch.setattr(prom_client, "decode_range", counting)
    fast = load_prometheus(backend, start=T0, end=T0 + SPAN, step_s=WINDOW, selector=f'job="{job}"')
    assert outcomes and all(outcomes)  # every range answer of both servers: the usual layout
    monkeypatch.setattr(prom_client, "decode_range", lambda body, cache=None: None)
    slow = load_prometheus(backend, start=T0, end=T0 + SPAN, step_s=WINDOW, selector=f'job="{job}"')
    assert fast.notes == slow.notes
    for a, b in ((fast.instance, slow.instance), (fast.dp, slow.dp)):
        assert (a is None) == (b is None)
        if a is not None and b is not None:
            assert a.df.equals(b.df) and a.missing == b.missing and a.aliases == b.aliases
