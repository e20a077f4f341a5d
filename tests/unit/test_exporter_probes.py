"""The probes a platform deploys ``watch --listen`` with (deploy/, docs/deploy.md): /healthz is
200 while the process serves, /readyz only once a first good report exists (before, 503 with
the reason), and /metrics is unchanged beside them."""

from __future__ import annotations

from pathlib import Path

import httpx

from helpers.scripted_source import ScriptedSource
from skewscope.errors import SourceError
from skewscope.monitor.exporter import serve
from skewscope.monitor.watch import Watcher
from skewscope.sources.profiler import load_profiler

EXAMPLE = Path(__file__).parents[1].parent / "examples" / "cluster-skew"


def test_ready_only_once_a_good_report_exists() -> None:
    evidence = load_profiler([str(EXAMPLE)])
    down = SourceError("Prometheus at http://p:9090 did not answer")
    w = Watcher(ScriptedSource([down, evidence]), last_s=60, every_s=30)
    server, url = serve(lambda: w.status, "127.0.0.1:0")
    base = url.removesuffix("/metrics")
    try:
        with httpx.Client(timeout=10) as c:
            assert c.get(f"{base}/healthz").status_code == 200
            first = c.get(f"{base}/readyz")
            assert first.status_code == 503 and "first run has not finished" in first.text
            assert not w.run_once()
            failed = c.get(f"{base}/readyz")
            assert failed.status_code == 503
            assert "did not answer" in failed.text and "no good report yet" in failed.text
            assert c.get(f"{base}/healthz").status_code == 200
            assert w.run_once()
            assert c.get(f"{base}/readyz").status_code == 200
            metrics = c.get(url)
            assert metrics.status_code == 200
            assert 'skewscope_verdict{verdict="imbalanced"} 1.0' in metrics.text
    finally:
        server.shutdown()
        server.server_close()
