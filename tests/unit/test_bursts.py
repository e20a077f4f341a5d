"""A burst is no hot spot (``detect.outlasts_burst``): seeded frames whose truth is known."""

from __future__ import annotations

import pytest

from helpers.frame_builder import Spec, make_frame
from skewscope.analysis.diagnose import diagnose_frame
from skewscope.catalogue import HeldBack
from skewscope.frame import Level
from skewscope.notes import NoteCode
from skewscope.report.phrases import note as note_text

WINDOW = 60.0  # the day's watch window; burst_s (90 s) is two of them


@pytest.mark.parametrize("seed", [1, 3])
def test_one_burst_on_a_slightly_busier_rank_is_no_hot_spot(seed: int) -> None:
    # dp0 carries 1.15x its sibling's requests (under hot_ratio) and a 4x burst of two windows:
    # with the queue it leaves and the smoothing, half of the range and more runs hot
    specs = {"i/dp0": Spec(rate=23.0, burst={6: 4.0, 7: 4.0}), "i/dp1": Spec(rate=20.0)}
    report = diagnose_frame(
        make_frame(specs, windows=14, window_s=WINDOW, level=Level.DP, seed=seed)
    )
    assert report.hot_units == ()
    (note,) = [n for n in report.transient if n.values["unit"] == "i/dp0"]
    assert note.code == NoteCode.TRANSIENT
    assert note.values["often"]  # hot often and long enough: only the burst check held it back
    assert note.values["held_back"] == HeldBack.BURST
    assert "only through one burst" in note_text(note)


@pytest.mark.parametrize("seed", range(8))
def test_a_skew_that_holds_is_found_wherever_the_cut_falls(seed: int) -> None:
    # dp0 at 1.7x from window 5 on: 9 of 14 windows, longer than any burst
    specs = {"i/dp0": Spec(burst={w: 1.7 for w in range(5, 14)}), "i/dp1": Spec()}
    report = diagnose_frame(
        make_frame(specs, windows=14, window_s=WINDOW, level=Level.DP, seed=seed)
    )
    assert report.hot_units == ("i/dp0",)
