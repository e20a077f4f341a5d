"""Assert the skewscope JSON reports of the vLLM e2e run: check.py INSTANCE REPORT.json...

Each report must say verdict `imbalanced`, list `<INSTANCE>/dp0` (and not dp1) among its hot
units, and carry a finding of kind `count` for it. Prints one line per report and a final
`vllm-e2e: PASS` / `vllm-e2e: FAIL`; exit 0 only on PASS.
"""

from __future__ import annotations

import json
import sys


def check(instance: str, path: str) -> list[str]:
    try:
        with open(path) as f:
            rep = json.load(f)
    except (OSError, ValueError) as exc:
        return [f"cannot read report: {exc}"]
    hot = f"{instance}/dp0"
    problems = []
    if rep.get("verdict") != "imbalanced":
        notes = "; ".join(rep.get("notes") or [])[:300]
        problems.append(f"verdict {rep.get('verdict')!r}, expected 'imbalanced' ({notes})")
    if rep.get("level") != "dp":
        problems.append(f"level {rep.get('level')!r}, expected 'dp'")
    hot_units = rep.get("hot_units") or []
    if hot not in hot_units:
        problems.append(f"hot units {hot_units}, expected {hot!r}")
    if f"{instance}/dp1" in hot_units:
        problems.append(f"{instance}/dp1 reported hot, but it got no traffic")
    kinds = [f.get("kind") for f in rep.get("findings") or [] if hot in (f.get("units") or [])]
    if "count" not in kinds:
        problems.append(f"finding kinds for {hot}: {kinds}, expected 'count'")
    return problems


def main() -> int:
    if len(sys.argv) < 3:
        print(__doc__)
        return 2
    instance, paths = sys.argv[1], sys.argv[2:]
    ok = True
    for path in paths:
        problems = check(instance, path)
        if problems:
            ok = False
            for p in problems:
                print(f"  FAIL {path}: {p}")
        else:
            with open(path) as f:
                rep = json.load(f)
            f0 = next(f for f in rep["findings"] if f"{instance}/dp0" in f["units"])
            ratio = f0.get("evidence", {}).get("count_ratio")
            print(
                f"  ok   {path}: source={rep['source']} verdict=imbalanced hot={rep['hot_units']} "
                f"kind=count severity={f0.get('severity')} count_ratio={ratio} "
                f"windows={rep['windows']} window_s={rep['window_s']}"
            )
    print("vllm-e2e: PASS" if ok else "vllm-e2e: FAIL")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
