"""Bounded load for the vLLM e2e check, every request pinned to one DP rank (or none).

N requests, started on an even schedule over --spread seconds, at most --concurrency in flight,
each a token-id list prompt with "ignore_eos": true (exact input and output lengths), sent with
`X-data-parallel-rank: <rank>` (--rank -1: no header, vLLM's own DP balancer places them).
--lengths fixed: every request --prompt-len ids and --max-tokens; mixed: one in five is long
(4x both). Request i's prompt and lengths depend only on --seed and i, so two runs with the same
seed send the same requests at the same offsets from their start (the referee's pair of runs).
A hard --deadline stops the whole run; requests still unsent then are counted as skipped. Writes
a JSON summary to --out (start_s/end_s are the epoch seconds of the first send and the last
answer).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import sys
import time

import httpx

LONG_EVERY, LONG_FACTOR = 5, 4  # --lengths mixed: one request in LONG_EVERY, LONG_FACTOR x


def request(args: argparse.Namespace, i: int) -> tuple[list[int], int]:
    """Request i's prompt token ids and output length: a function of (seed, i) only."""
    rng = random.Random(args.seed * 1_000_003 + i)
    long = args.lengths == "mixed" and rng.randrange(LONG_EVERY) == 0
    n_in = args.prompt_len * (LONG_FACTOR if long else 1)
    n_out = args.max_tokens * (LONG_FACTOR if long else 1)
    return [rng.randrange(10, args.vocab) for _ in range(n_in)], n_out


async def run(args: argparse.Namespace) -> dict[str, object]:
    sem = asyncio.Semaphore(args.concurrency)
    stats: dict[str, int] = dict.fromkeys(
        ("ok", "failed", "skipped", "prompt_tokens", "gen_tokens"), 0
    )
    errors: list[str] = []
    e2e_ms: list[float] = []  # client-side, per answered request (a cross-check of the server's)
    t0 = time.monotonic()
    start_s = time.time()
    last_answer = [start_s]
    headers = {"X-data-parallel-rank": str(args.rank)} if args.rank >= 0 else {}
    limits = httpx.Limits(
        max_connections=args.concurrency, max_keepalive_connections=args.concurrency
    )
    async with httpx.AsyncClient(
        base_url=args.url, timeout=args.request_timeout, limits=limits, headers=headers
    ) as client:

        async def one(i: int) -> None:
            delay = i * args.spread / max(1, args.requests)
            await asyncio.sleep(max(0.0, t0 + delay - time.monotonic()))
            prompt, n_out = request(args, i)
            async with sem:
                body = {
                    "model": args.model,
                    "prompt": prompt,
                    "max_tokens": n_out,
                    "ignore_eos": True,
                    "temperature": 0.0,
                }
                sent = time.monotonic()
                try:
                    r = await client.post("/v1/completions", json=body)
                    r.raise_for_status()
                    usage = r.json().get("usage") or {}
                    stats["ok"] += 1
                    e2e_ms.append(round(1000.0 * (time.monotonic() - sent), 2))
                    stats["prompt_tokens"] += int(usage.get("prompt_tokens", 0))
                    stats["gen_tokens"] += int(usage.get("completion_tokens", 0))
                except (httpx.HTTPError, ValueError) as exc:
                    stats["failed"] += 1
                    if len(errors) < 5:
                        errors.append(f"request {i}: {type(exc).__name__}: {str(exc)[:200]}")
                last_answer[0] = time.time()

        tasks = [asyncio.create_task(one(i)) for i in range(args.requests)]
        _, pending = await asyncio.wait(tasks, timeout=args.deadline)
        for t in pending:
            t.cancel()
        stats["skipped"] = len(pending)
        await asyncio.gather(*pending, return_exceptions=True)
    return {
        "start_s": start_s,
        "end_s": last_answer[0],
        "wall_s": round(time.monotonic() - t0, 1),
        "rank": args.rank,
        "lengths": args.lengths,
        "seed": args.seed,
        "requests": args.requests,
        **stats,
        "errors": errors,
        "client_e2e_ms": sorted(e2e_ms),
    }


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--url", required=True, help="vLLM base URL, e.g. http://127.0.0.1:8000")
    p.add_argument("--model", required=True)
    p.add_argument("--requests", type=int, default=200)
    p.add_argument("--concurrency", type=int, default=16)
    p.add_argument("--spread", type=float, default=75.0, help="seconds over which sends start")
    p.add_argument("--deadline", type=float, default=240.0, help="hard limit for the whole run")
    p.add_argument("--request-timeout", type=float, default=120.0)
    p.add_argument("--prompt-len", type=int, default=32)
    p.add_argument("--max-tokens", type=int, default=64)
    p.add_argument("--vocab", type=int, default=2000)
    p.add_argument("--rank", type=int, default=0, help="DP rank to pin to; -1: no pin header")
    p.add_argument("--lengths", choices=("fixed", "mixed"), default="fixed")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", required=True)
    args = p.parse_args()
    if not (1 <= args.concurrency <= 16 and 1 <= args.requests <= 1000):
        p.error("concurrency must be 1..16 and requests 1..1000")
    summary = asyncio.run(run(args))
    with open(args.out, "w") as f:
        json.dump(summary, f, indent=1)
    where = f"all pinned to rank {args.rank}" if args.rank >= 0 else "no pin (vLLM balances)"
    print(
        f"load: {summary['ok']} ok, {summary['failed']} failed, {summary['skipped']} skipped "
        f"of {args.requests} in {summary['wall_s']} s, {args.lengths} lengths, {where}"
    )
    for e in summary["errors"]:  # type: ignore[attr-defined]
        print(f"load: {e}")
    return 0 if summary["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
