"""skewscope.progress: the one progress display (scrape, simulation, live replay)."""

from __future__ import annotations

import io

import pytest

from skewscope.progress import Progress


def test_plain_lines_are_whole_numbers_from_ten_and_carry_the_detail() -> None:
    buf = io.StringIO()
    with Progress("scraping 2 target(s)", 120.0, "s", every_s=0.0, out=buf, tty=False) as p:
        p.update(40.2, "16 scrapes ok, 0 failed")
        p.update(80.0)
    assert buf.getvalue().splitlines() == [
        "skewscope: scraping 2 target(s): 40 of 120 s, 16 scrapes ok, 0 failed",
        "skewscope: scraping 2 target(s): 80 of 120 s",
    ]
    assert Progress("x", 0.4, "s", out=buf, tty=False).line(0.25) == "skewscope: x: 0.2 of 0.4 s"


def test_lines_are_spaced_by_every_s_and_disabled_prints_nothing() -> None:
    buf = io.StringIO()
    p = Progress("simulating", 60.0, "simulated s", every_s=3600.0, out=buf, tty=False)
    for done in range(60):
        p.update(float(done))
    Progress("quiet", 10.0, "s", every_s=0.0, out=buf, tty=True, enabled=False).update(5.0)
    assert buf.getvalue() == ""


@pytest.mark.parametrize("tty", [False, True])
def test_a_hostile_detail_is_escaped(tty: bool) -> None:
    buf = io.StringIO()
    with Progress("scraping", 10.0, "s", every_s=0.0, out=buf, tty=tty) as p:
        p.update(5.0, "evil\x1b]0;pwned\x07[/]\nnext")
    assert "\x1b]0" not in buf.getvalue() and "\x07" not in buf.getvalue()
    if not tty:
        assert buf.getvalue().count("\n") == 1
