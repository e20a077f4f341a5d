"""Request workloads: synthetic arrivals and lengths, or replay of real public traces.

A workload is generated up front as plain numpy columns (arrival time, input and output length,
class tag, session id) so the engine's event loop only reads arrays; all randomness comes from
one ``numpy.random.Generator`` so a seed reproduces the run exactly.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass, field
from datetime import UTC, datetime
from importlib import resources
from pathlib import Path

import numpy as np

from skewscope.errors import InputError, SchemaError, SimulationError
from skewscope.settings import TRACE_FILE_BYTES
from skewscope.smallfile import read_small

NO_TAG = ""  # tag index 0: a request of no named class

# Built-in trace excerpts shipped in ``skewscope/sim/data`` (see SOURCES.md there).
BUILTIN_TRACES: dict[str, tuple[str, str]] = {
    "azure-code": ("azure_code_2023_head2000.csv", "azure"),
    "azure-conv": ("azure_conv_2023_head2000.csv", "azure"),
    "mooncake": ("mooncake_conversation_head1000.jsonl", "mooncake"),
}


@dataclass(frozen=True)
class LengthDist:
    """A token-length distribution, clipped to ``[min, max]``.

    ``lognormal``: median ``median``, shape ``sigma`` (LLM prompt/output lengths are roughly
    lognormal); ``pareto``: classical Pareto with minimum ``scale`` and tail index ``alpha``
    (heavy tails: a few very long requests); ``fixed``: always ``median``.
    """

    dist: str = "lognormal"
    median: float = 512.0
    sigma: float = 0.6
    scale: float = 128.0
    alpha: float = 1.5
    min: int = 1
    max: int = 8192

    def sample(self, rng: np.random.Generator, n: int) -> np.ndarray:
        if self.dist == "lognormal":
            raw = rng.lognormal(np.log(self.median), self.sigma, n)
        elif self.dist == "pareto":
            raw = (rng.pareto(self.alpha, n) + 1.0) * self.scale
        elif self.dist == "fixed":
            raw = np.full(n, self.median)
        else:  # validated by the scenario loader; kept for direct API use
            raise SimulationError(f"unknown length distribution {self.dist!r}")
        return np.clip(np.rint(raw), self.min, self.max).astype(np.int64)


@dataclass(frozen=True)
class RequestClass:
    """A tagged share of requests with their own lengths (e.g. "long" requests a policy steers)."""

    tag: str
    share: float
    input: LengthDist
    output: LengthDist


@dataclass(frozen=True)
class Burst:
    """Extra arrivals at ``rate * (multiplier - 1)`` during a window, tagged so routing can
    send them to one unit (a transient hot spot)."""

    start_s: float
    duration_s: float
    multiplier: float
    tag: str = "burst"


@dataclass(frozen=True)
class OnOff:
    """On/off traffic: ``on_s`` s at the full rate, then ``off_s`` s at ``off_factor * rate``."""

    on_s: float
    off_s: float
    off_factor: float = 0.0


@dataclass(frozen=True)
class TraceSpec:
    """Replay a real trace: a built-in excerpt name (see ``BUILTIN_TRACES``) or a file path."""

    source: str
    format: str | None = None  # "azure" | "mooncake"; inferred from the name/suffix if None
    time_scale: float = 1.0  # > 1 replays faster (inter-arrival times divided by it)
    max_input: int = 32768
    max_output: int = 4096


@dataclass(frozen=True)
class WorkloadSpec:
    """What traffic the gateway sees."""

    arrival: str = "poisson"  # "poisson" | "onoff" | "trace"
    rate: float = 8.0  # requests per second (mean, cluster-wide)
    input: LengthDist = field(default_factory=LengthDist)
    output: LengthDist = field(default_factory=lambda: LengthDist(median=128.0, max=2048))
    classes: tuple[RequestClass, ...] = ()
    burst: Burst | None = None
    onoff: OnOff | None = None
    trace: TraceSpec | None = None
    sessions: int = 0  # > 0: requests carry a session id 0..sessions-1 (sticky routing)
    heavy_session_share: float = 0.0  # share of requests from session 0 (one heavy client)

    def describe(self) -> str:
        if self.arrival == "trace" and self.trace is not None:
            return f"trace {self.trace.source} x{self.trace.time_scale:g}"
        return f"{self.arrival} {self.rate:g} req/s"


@dataclass(frozen=True)
class Workload:
    """Generated requests, sorted by arrival (seconds from the run start)."""

    arrival_s: np.ndarray  # float64
    input_tokens: np.ndarray  # int64
    output_tokens: np.ndarray  # int64
    tag: np.ndarray  # int64 index into ``tags``; 0 = no class
    session: np.ndarray  # int64; -1 = no session
    tags: tuple[str, ...] = (NO_TAG,)
    # Where the evidence placed each request (instance index, DP rank; -1 = unknown): read by
    # the ``observed`` routing policy only, to replay the current placement exactly.
    instance_hint: np.ndarray | None = None
    rank_hint: np.ndarray | None = None

    def __len__(self) -> int:
        return int(self.arrival_s.shape[0])


@dataclass(frozen=True)
class Trace:
    """A parsed trace: arrival offsets from its first request, and lengths."""

    arrival_s: np.ndarray
    input_tokens: np.ndarray
    output_tokens: np.ndarray


def tag_names(spec: WorkloadSpec) -> tuple[str, ...]:
    """Tag vocabulary of a workload; index 0 is the untagged class."""
    names = [NO_TAG]
    for c in spec.classes:
        if c.tag not in names:
            names.append(c.tag)
    if spec.burst is not None and spec.burst.tag not in names:
        names.append(spec.burst.tag)
    return tuple(names)


def poisson_arrivals(rng: np.random.Generator, rate: float, start: float, end: float) -> np.ndarray:
    """A homogeneous Poisson process on [start, end): Poisson count, then sorted uniform times."""
    if rate <= 0 or end <= start:
        return np.empty(0)
    n = int(rng.poisson(rate * (end - start)))
    return np.sort(rng.uniform(start, end, n))


def onoff_arrivals(rng: np.random.Generator, rate: float, onoff: OnOff, end: float) -> np.ndarray:
    """Thinning of a rate-``rate`` process: keep off-period arrivals with prob ``off_factor``."""
    t = poisson_arrivals(rng, rate, 0.0, end)
    period = onoff.on_s + onoff.off_s
    off = np.mod(t, period) >= onoff.on_s
    keep = ~off | (rng.uniform(size=t.shape[0]) < onoff.off_factor)
    kept: np.ndarray = t[keep]
    return kept


def generate(spec: WorkloadSpec, duration_s: float, rng: np.random.Generator) -> Workload:
    """Draw the whole workload for a run of ``duration_s`` seconds."""
    tags = tag_names(spec)
    if spec.arrival == "trace":
        if spec.trace is None:
            raise SimulationError("workload.arrival = 'trace' needs a [workload.trace] table")
        tr = load_trace(spec.trace)
        keep = tr.arrival_s < duration_s
        arr = tr.arrival_s[keep]
        inp, out = tr.input_tokens[keep], tr.output_tokens[keep]
        tag = np.zeros(arr.shape[0], dtype=np.int64)
    else:
        if spec.arrival == "onoff" and spec.onoff is not None:
            arr = onoff_arrivals(rng, spec.rate, spec.onoff, duration_s)
        else:
            arr = poisson_arrivals(rng, spec.rate, 0.0, duration_s)
        n = arr.shape[0]
        inp, out, tag = (
            spec.input.sample(rng, n),
            spec.output.sample(rng, n),
            _draw_classes(spec, tags, rng, n),
        )
        for c in spec.classes:
            sel = np.flatnonzero(tag == tags.index(c.tag))
            inp[sel] = c.input.sample(rng, sel.shape[0])
            out[sel] = c.output.sample(rng, sel.shape[0])
        if spec.burst is not None:
            b = spec.burst
            extra = poisson_arrivals(
                rng,
                spec.rate * (b.multiplier - 1.0),
                b.start_s,
                min(b.start_s + b.duration_s, duration_s),
            )
            m = extra.shape[0]
            arr = np.concatenate([arr, extra])
            inp = np.concatenate([inp, spec.input.sample(rng, m)])
            out = np.concatenate([out, spec.output.sample(rng, m)])
            tag = np.concatenate([tag, np.full(m, tags.index(b.tag), dtype=np.int64)])
            order = np.argsort(arr, kind="stable")
            arr, inp, out, tag = arr[order], inp[order], out[order], tag[order]
    session = _draw_sessions(spec, rng, arr.shape[0])
    return Workload(arr.astype(np.float64), inp, out, tag, session, tags)


def _draw_classes(
    spec: WorkloadSpec, tags: tuple[str, ...], rng: np.random.Generator, n: int
) -> np.ndarray:
    if not spec.classes:
        return np.zeros(n, dtype=np.int64)
    shares = np.array([c.share for c in spec.classes])
    p = np.concatenate([[max(0.0, 1.0 - shares.sum())], shares])
    codes = np.array([0] + [tags.index(c.tag) for c in spec.classes], dtype=np.int64)
    return codes[rng.choice(p.shape[0], size=n, p=p / p.sum())]


def _draw_sessions(spec: WorkloadSpec, rng: np.random.Generator, n: int) -> np.ndarray:
    """Session ids: session 0 is one heavy client with ``heavy_session_share``; others uniform."""
    if spec.sessions <= 0:
        return np.full(n, -1, dtype=np.int64)
    ids = rng.integers(1 if spec.sessions > 1 else 0, spec.sessions, n)
    if spec.heavy_session_share > 0:
        ids[rng.uniform(size=n) < spec.heavy_session_share] = 0
    return ids.astype(np.int64)


# --- trace replay -------------------------------------------------------------------------

_AZURE_TS = re.compile(
    r"^(\d{4}-\d{2}-\d{2}[ T]\d{2}:\d{2}:\d{2})(?:\.(\d{1,9}))?(Z|[+-]\d{2}:?\d{2})?$"
)


def parse_azure_timestamp(text: str) -> float:
    """Seconds since the epoch of an Azure trace timestamp.

    ``datetime.fromisoformat`` rejects the 2023 traces' 7 fractional digits, so the fraction is
    parsed separately; naive stamps are read as UTC (only differences matter for replay).
    """
    m = _AZURE_TS.match(text.strip())
    if m is None:
        raise ValueError(f"not an Azure trace timestamp: {text!r}")
    base = datetime.fromisoformat(m.group(1).replace("T", " "))
    tz = m.group(3)
    if tz and tz != "Z":
        base = datetime.fromisoformat(f"{m.group(1).replace('T', ' ')}{tz}")
    else:
        base = base.replace(tzinfo=UTC)
    frac = float(f"0.{m.group(2)}") if m.group(2) else 0.0
    return base.timestamp() + frac


def read_azure_csv(path: Path) -> Trace:
    """Parse ``TIMESTAMP,ContextTokens,GeneratedTokens`` (Azure LLM inference traces 2023/2024)."""
    lines = _read_lines(path)
    header = [h.strip() for h in lines[0].split(",")] if lines else []
    if header != ["TIMESTAMP", "ContextTokens", "GeneratedTokens"]:
        raise SchemaError(
            f"{path}: line 1: expected header TIMESTAMP,ContextTokens,GeneratedTokens, "
            f"got {lines[0][:80]!r}"
            if lines
            else f"{path}: empty trace file"
        )
    ts: list[float] = []
    inp: list[int] = []
    out: list[int] = []
    for no, line in enumerate(lines[1:], start=2):
        if not line.strip():
            continue
        parts = line.split(",")
        try:
            if len(parts) != 3:
                raise ValueError(f"expected 3 fields, got {len(parts)}")
            ts.append(parse_azure_timestamp(parts[0]))
            inp.append(_tokens(parts[1]))
            out.append(_tokens(parts[2]))
        except ValueError as exc:
            raise SchemaError(f"{path}: line {no}: {exc}") from None
    return _trace(np.array(ts), inp, out, path)


def read_mooncake_jsonl(path: Path) -> Trace:
    """Parse Mooncake JSON lines: ``timestamp`` (ms from start), ``input_length``,
    ``output_length`` (``hash_ids`` are ignored: the simulator models no prefix cache)."""
    ts: list[float] = []
    inp: list[int] = []
    out: list[int] = []
    for no, line in enumerate(_read_lines(path), start=1):
        if not line.strip():
            continue
        try:
            rec = json.loads(line)
            t_ms = float(rec["timestamp"])
            if not math.isfinite(t_ms):
                raise ValueError(f"timestamp {t_ms!r} is not a finite number")
            ts.append(t_ms / 1000.0)
            inp.append(_tokens(rec["input_length"]))
            out.append(_tokens(rec["output_length"]))
        except (ValueError, KeyError, TypeError, OverflowError, RecursionError) as exc:
            raise SchemaError(f"{path}: line {no}: bad Mooncake record ({exc})") from None
    return _trace(np.array(ts), inp, out, path)


MAX_TRACE_TOKENS = 2**31 - 1  # one request's length in a trace (no int64 overflow after)


def _tokens(value: object) -> int:
    """A request length from a trace: a whole number in [0, MAX_TRACE_TOKENS]."""
    n: int = int(value)  # type: ignore[call-overload]  # ValueError/TypeError name a bad one
    if not 0 <= n <= MAX_TRACE_TOKENS:
        raise ValueError(f"a length of {str(n)[:20]} tokens is outside [0, {MAX_TRACE_TOKENS}]")
    return n


def _read_lines(path: Path) -> list[str]:
    """A trace's lines, through the one small-file reader (a regular UTF-8 file, bounded:
    a FIFO or a device is refused, not read forever)."""
    return read_small(path, f"{path}: trace", limit=TRACE_FILE_BYTES, error=InputError).splitlines()


def _trace(ts: np.ndarray, inp: list[int], out: list[int], path: Path) -> Trace:
    if ts.shape[0] == 0:
        raise SchemaError(f"{path}: trace has no requests")
    order = np.argsort(ts, kind="stable")
    t = ts[order] - ts[order][0]
    return Trace(t, np.asarray(inp, dtype=np.int64)[order], np.asarray(out, dtype=np.int64)[order])


def resolve_trace(spec: TraceSpec) -> tuple[Path, str]:
    """Path and format of a trace: a built-in excerpt name or a file (format from suffix)."""
    if spec.source in BUILTIN_TRACES:
        fname, fmt = BUILTIN_TRACES[spec.source]
        path = Path(str(resources.files("skewscope.sim") / "data" / fname))
    else:
        path = Path(spec.source)
        fmt = "mooncake" if path.suffix in (".jsonl", ".json") else "azure"
    return path, spec.format or fmt


def load_trace(spec: TraceSpec) -> Trace:
    """Read, time-scale and clip a trace for replay."""
    path, fmt = resolve_trace(spec)
    tr = read_mooncake_jsonl(path) if fmt == "mooncake" else read_azure_csv(path)
    return Trace(
        tr.arrival_s / spec.time_scale,
        np.clip(tr.input_tokens, 1, spec.max_input),
        np.clip(tr.output_tokens, 1, spec.max_output),
    )
