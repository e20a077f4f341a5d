"""Per-rank counts read from Prometheus equal what the load sent (exact.py PROM LOAD.json):
the requests and tokens of every window summed over the load's range, at the scrape interval
and at coarser steps, against the load's own count, within 1 %. Prints one line per step and
`exact: PASS` / `exact: FAIL`; exit 0 only on PASS."""

from __future__ import annotations

import json
import math
import sys

from skewscope.sources.prometheus import load_prometheus


def main(prom: str, load_path: str) -> int:
    with open(load_path) as f:
        load = json.load(f)
    start, end = math.floor(load["start_s"]) - 10, math.ceil(load["end_s"]) + 10
    want = {
        "requests": load["ok"],
        "prompt_tokens": load["prompt_tokens"],
        "generation_tokens": load["gen_tokens"],
    }
    rank = load["rank"]
    bad = 0
    for step in (2.0, 5.0, 10.0):
        ev = load_prometheus(prom, start=start, end=end, step_s=step)
        assert ev.dp is not None, "no DP level"
        df = ev.dp.df
        got = {k: float(df.filter(df["dp_rank"] == rank)[k].sum()) for k in want}
        others = float(df.filter(df["dp_rank"] != rank)["requests"].sum())
        off = {k: abs(got[k] - want[k]) / want[k] for k in want}
        ok = all(v <= 0.01 for v in off.values()) and others == 0
        bad += not ok
        print(
            f"  {'ok  ' if ok else 'FAIL'} step {step:g} s: rank {rank} "
            + ", ".join(f"{k} {got[k]:g} (sent {want[k]:g})" for k in want)
            + f"; other ranks {others:g} requests"
        )
    print("exact: PASS" if not bad else "exact: FAIL")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], sys.argv[2]))
