"""When units came and went: joined late, absent for a while (a restart), or lost for good.

A unit that does not report in a window is absent there (NaN in the matrix, never 0: no
signal of it is read as an idle unit), so a restart is not skew, a unit joining is judged only
from when it reports, and an absent unit is no peer at 0 of a hot one — the report only has to
say when it happened. One case is a finding: a unit that stops reporting while it is hot
(``LostUnit``) — an engine that died under its load, or a target that stopped answering — is
never read as balanced because its windows ended.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from skewscope.analysis.detect import UnitHeat
from skewscope.analysis.matrix import SignalMatrix
from skewscope.report.facts import Note, NoteCode


@dataclass(frozen=True)
class LostUnit:
    """A unit hot in its last reported windows, absent from ``lost_at_s`` to the end."""

    index: int
    unit: str
    lost_at_s: float
    hot_windows: int  # hot windows in a row up to its last report
    absent_windows: int  # windows its group reported without it, to the end


def presence(m: SignalMatrix, heats: list[UnitHeat]) -> tuple[tuple[Note, ...], list[LostUnit]]:
    """Per unit that did not report in every window its group did: a note each for a late
    join, an absence inside the range (back afterwards) and an end before the group's; and the
    units lost while hot."""
    notes: list[Note] = []
    lost: list[LostUnit] = []
    w = m.window_s
    # per group, how many of its units reported in each window (one pass, not one per unit):
    # the others reported where that count exceeds the unit's own report
    count: dict[str, np.ndarray] = {}
    size: dict[str, int] = {}
    for g in heats:
        key = m.groups[g.index]
        count[key] = count.get(key, 0) + g.present.astype(np.int64)
        size[key] = size.get(key, 0) + 1
    for h in heats:
        mine = h.present
        key = m.groups[h.index]
        group = count[key] - mine > 0 if size[key] > 1 else mine
        if not mine.any() or (mine | ~group).all():
            continue
        at = np.flatnonzero(mine)
        first, last = int(at[0]), int(at[-1])
        if group[:first].any():
            notes.append(
                Note(NoteCode.UNIT_JOINED, {"unit": h.unit, "at_s": float(m.windows[first])})
            )
        for lo, hi in _gaps(mine, group, first, last):
            notes.append(
                Note(
                    NoteCode.UNIT_ABSENT,
                    {
                        "unit": h.unit,
                        "from_s": float(m.windows[lo]),
                        "back_s": float(m.windows[hi]),
                    },
                )
            )
        if group[last + 1 :].any():
            end = float(m.windows[last] + w)
            hot_run = _run_up_to(h.hot, last)
            notes.append(
                Note(NoteCode.UNIT_LOST, {"unit": h.unit, "at_s": end, "hot": hot_run > 0})
            )
            if hot_run > 0:
                lost.append(LostUnit(h.index, h.unit, end, hot_run, int(group[last + 1 :].sum())))
    return tuple(notes), lost


def _gaps(mine: np.ndarray, group: np.ndarray, first: int, last: int) -> list[tuple[int, int]]:
    """(first absent window, first window back) of every absence between ``first`` and
    ``last`` while the group reported."""
    out, start = [], None
    for i in range(first, last + 1):
        if not mine[i] and group[i]:
            start = i if start is None else start
        elif mine[i] and start is not None:
            out.append((start, i))
            start = None
    return out


def _run_up_to(hot: np.ndarray, last: int) -> int:
    """Hot windows in a row ending at ``last``."""
    n = 0
    for i in range(last, -1, -1):
        if not hot[i]:
            break
        n += 1
    return n
