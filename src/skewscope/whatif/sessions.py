"""Session keys for a replayed workload, from the gateway's access log.

Metrics carry no session ids, but an nginx/Envoy access log with a session or user header does.
Each replayed request of an instance gets a key the gateway logged for that instance's upstream
(``host:port``, the instance label's spelling) in the same window, in time order; so a heavy
session stays as heavy, on the upstream and in the windows it was seen, and ``sticky``,
``consistent_hash`` and ``cache_aware`` (a session standing for its shared prefix) are replayed
on the real key mix instead of being left out.
"""

from __future__ import annotations

import dataclasses
import zlib
from collections import defaultdict
from collections.abc import Sequence

import numpy as np

from skewscope.frame import upstream_key
from skewscope.notes import Note
from skewscope.notes import WhatifNoteCode as W
from skewscope.sim.workload import Workload
from skewscope.sources.access_log import LoggedRequest
from skewscope.whatif.extract import Layout


def session_id(key: str) -> int:
    """A stable non-negative id from the key itself (routers hash the key, not its rank of
    appearance), so a consistent-hash ring spreads the real keys as it would."""
    return zlib.crc32(key.encode("utf-8")) & 0x7FFFFFFF


def with_sessions(
    wl: Workload,
    layout: Layout,
    t0: float,
    window_s: float,
    logged: Sequence[LoggedRequest],
    key_name: str | None,
    rng: np.random.Generator,
) -> tuple[Workload, list[Note]]:
    """``wl`` with a session id per request from ``logged`` (-1 where its instance's upstream
    logged no key), and notes saying what was matched."""
    assert wl.instance_hint is not None
    by_slot: dict[tuple[str, int], list[str]] = defaultdict(list)
    by_up: dict[str, list[str]] = defaultdict(list)
    for r in logged:
        if r.key:
            by_slot[(r.upstream, int((r.t_s - t0) // window_s))].append(r.key)
            by_up[r.upstream].append(r.key)
    ids: dict[str, int] = {}
    session = np.full(len(wl), -1, dtype=np.int64)
    window = ((wl.arrival_s) // window_s).astype(np.int64)
    unmatched = []
    for i, name in enumerate(layout.instances):
        up = upstream_key(name)
        if up not in by_up:
            unmatched.append(name)
            continue
        for k in np.unique(window[wl.instance_hint == i]):
            mine = np.flatnonzero((wl.instance_hint == i) & (window == k))
            keys = by_slot.get((up, int(k))) or by_up[up]
            if len(keys) >= mine.shape[0]:  # spread over the window's keys, in time order
                pick = [keys[j * len(keys) // mine.shape[0]] for j in range(mine.shape[0])]
            else:  # more replayed requests than logged ones: the window's keys, at random
                pick = [keys[j] for j in rng.integers(0, len(keys), mine.shape[0])]
            session[mine] = [ids.setdefault(key, session_id(key)) for key in pick]
    notes: list[Note] = []
    if ids:
        share = float((session >= 0).mean()) if len(wl) else 0.0
        notes.append(Note(W.SESSIONS, {"keys": len(ids), "key_name": key_name, "share": share}))
    if unmatched:
        notes.append(Note(W.UNMATCHED_UPSTREAMS, {"upstreams": list(unmatched)}))
    return dataclasses.replace(wl, session=session), notes
