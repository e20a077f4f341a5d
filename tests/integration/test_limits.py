"""Total deadlines and response-size limits, shared by the Prometheus and scrape paths.

Each fault server would hang a per-read timeout forever (a byte every 0.2 s) or fill memory (an
endless body). A regression shows as this file's own timeout failing the test, not as a hang.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from helpers.online_servers import endless_handler, serve, trickle_handler
from skewscope.errors import SourceError
from skewscope.settings import SourceLimits
from skewscope.sources.prometheus import load_prometheus
from skewscope.sources.scrape import load_scrape

T = 1_700_000_040.0
pytestmark = pytest.mark.timeout(60)


def _prometheus(url: str, **kw: Any) -> Any:
    return load_prometheus(url, start=T, end=T + 120, step_s=60, **kw)


def _scrape(url: str, **kw: Any) -> Any:
    return load_scrape(
        [url + "/metrics"], duration_s=0.4, interval_s=0.2, window_s=0.4, progress=False, **kw
    )


@pytest.mark.parametrize("in_headers", [False, True], ids=["body", "headers"])
def test_trickling_prometheus_ends_at_the_total_deadline(in_headers: bool) -> None:
    with serve(trickle_handler(in_headers=in_headers)) as url, pytest.raises(SourceError) as err:
        _prometheus(url, timeout_s=1.0)
    assert str(err.value) == f"Prometheus at {url} did not answer within 1s"


def test_trickling_scrape_target_is_a_failed_scrape_not_a_hang() -> None:
    with serve(trickle_handler()) as url, pytest.raises(SourceError) as err:
        _scrape(url, timeout_s=0.5)
    assert "all 1 /metrics targets are down" in str(err.value)
    assert "did not answer within 0.5s" in str(err.value)


@pytest.mark.parametrize("declare", [False, True], ids=["chunked", "content-length"])
def test_endless_prometheus_body_is_cut_at_the_size_limit(declare: bool) -> None:
    small = SourceLimits(max_query_mb=1.0)
    with serve(endless_handler(declare_length=declare)) as url, pytest.raises(SourceError) as e:
        _prometheus(url, limits=small)
    msg = str(e.value)
    assert msg.startswith(f"Prometheus at {url} sent ")
    assert "limit is 1 MiB" in msg if declare else "more than the 1 MiB response limit" in msg


def test_endless_scrape_body_is_cut_at_the_size_limit() -> None:
    with serve(endless_handler()) as url, pytest.raises(SourceError) as err:
        _scrape(url, limits=SourceLimits(max_scrape_mb=0.5))
    assert "more than the 512 KiB response limit" in str(err.value)


def test_config_sources_table_sets_the_scrape_limit(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from skewscope.cli import main

    cfg = tmp_path / "skewscope.toml"
    cfg.write_text("[sources]\nmax_scrape_mb = 0.25\n")
    with serve(endless_handler()) as url:
        code = main(
            [
                "diagnose",
                "--scrape",
                url + "/metrics",
                "--duration",
                "0.4s",
                "--interval",
                "0.2s",
                "--window",
                "0.4s",
                "--config",
                str(cfg),
            ]
        )
    err = capsys.readouterr().err
    assert code == 4
    assert "more than the 256 KiB response limit" in err, err


def test_probing_a_trickling_bare_url_ends_at_the_deadline(
    capsys: pytest.CaptureFixture[str],
) -> None:
    from skewscope.cli import main

    with serve(trickle_handler()) as url:
        code = main(["diagnose", url, "--last", "10m", "--timeout", "1s"])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 4
    assert err[-1].startswith(f"skewscope: error: {url}: no answer (source at {url}")
    assert "did not answer within 1s" in err[-1]
