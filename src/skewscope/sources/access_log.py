"""HTTP gateway access logs -> GatewayEvidence: requests and request sizes per upstream, and how
concentrated each upstream's traffic is by client or session key.

Three line shapes are read, detected per file from its first non-blank line:
- Envoy's default format string (``[%START_TIME%] "%REQ(:METHOD)% ..." ... "%UPSTREAM_HOST%"``,
  envoyproxy.io configuration/observability/access_log "Default format string"); its client
  key is ``X-Forwarded-For``;
- JSON objects, one a line: nginx ``log_format NAME escape=json '{...}'`` and Envoy's
  ``json_format`` access logs;
- ``key=value`` pairs (values may be double-quoted), e.g. nginx
  ``log_format skewscope 'upstream_addr=$upstream_addr request_length=$request_length ...'``.
Field names are looked up in the alias tuples below (the nginx variable name without ``$``, or
Envoy's command operator name), so a log keeps its own names. docs/gateway.md lists them.

A log is written by a gateway that anything may reach: a line longer than
``SourceLimits.max_log_line_kb`` is skipped and counted in a note (never held whole), every
line shape is parsed in time linear in its length, and what a line carries into the evidence
holds no credential: an upstream loses its ``user:password@`` (``frame.upstream_key``), and a
client / session key shaped like one (``Bearer …``, ``user:pw@``, a secret this process holds,
or longer than ``MAX_KEY_CHARS``) is replaced by a digest, so sessions still count apart.
"""

from __future__ import annotations

import bisect
import datetime as dt
import hashlib
import json
import math
import re
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import BinaryIO

from skewscope.catalogue import GatewaySource
from skewscope.errors import InputError
from skewscope.frame import GatewayEvidence, GatewayUnit, upstream_key
from skewscope.settings import DEFAULT_LIMITS
from skewscope.sources.auth import scrub

UPSTREAM = ("upstream_addr", "upstream_host", "UPSTREAM_HOST", "upstream")
TIME = ("msec", "time_iso8601", "time_local", "start_time", "START_TIME", "timestamp", "time")
REQUEST_BYTES = ("request_length", "bytes_received", "BYTES_RECEIVED")
# Client / session keys, most specific first: a session or user header, then the client.
KEYS = (
    "http_x_session_id",
    "x_session_id",
    "session_id",
    "session",
    "http_x_smg_routing_key",
    "http_x_user_id",
    "user_id",
    "user",
    "remote_addr",
    "downstream_remote_address",
    "DOWNSTREAM_REMOTE_ADDRESS",
    "x_forwarded_for",
    "client",
)
ENVOY_HINTS = (
    "upstream_host",
    "UPSTREAM_HOST",
    "downstream_remote_address",
    "DOWNSTREAM_REMOTE_ADDRESS",
    "bytes_received",
    "BYTES_RECEIVED",
)
KEPT_KEYS = 10  # per upstream, the biggest keys carried in the evidence
MAX_KEY_CHARS = 200  # a longer client / session key is carried as its digest
ENVOY_DEFAULT = re.compile(
    r'^\[(?P<START_TIME>[^\]]+)\] "(?P<request>[^"]*)" (?P<RESPONSE_CODE>\S+) '
    r"(?P<RESPONSE_FLAGS>\S+) (?P<BYTES_RECEIVED>\S+) (?P<BYTES_SENT>\S+) (?P<DURATION>\S+) "
    r'(?P<upstream_service_time>\S+) "(?P<x_forwarded_for>[^"]*)" "(?P<user_agent>[^"]*)" '
    r'"(?P<x_request_id>[^"]*)" "(?P<authority>[^"]*)" "(?P<UPSTREAM_HOST>[^"]*)"'
)
# key=value pairs are read in time linear in the line: a key starts only at a token's start (a
# run of letters without "=" is scanned once, not once per letter), and a quoted value ends at
# the next unescaped quote, looked up among the line's quotes found once (an unterminated quote
# is not scanned to the line's end once per key).
_KEY = re.compile(r"(?<![\w.-])([A-Za-z_][\w.-]*)=")
_BARE = re.compile(r"\S*")
_QUOTE_OR_ESCAPE = re.compile(r'\\.|"', re.S)
_EMPTY = ("", "-")
SHAPES = {"json": "a JSON-object", "envoy": "an Envoy default-format", "pairs": "a key=value"}


def _parse_line(line: str, shape: str) -> dict[str, str]:
    if shape == "envoy":
        m = ENVOY_DEFAULT.match(line)
        if m is None:
            raise ValueError("not Envoy's default format")
        return m.groupdict()
    if shape == "json":
        try:
            obj = json.loads(line)
        except RecursionError:
            raise ValueError("nested too deeply") from None
        if not isinstance(obj, dict):
            raise ValueError("not a JSON object")
        return {str(k): "" if v is None else str(v) for k, v in obj.items()}
    pairs = _pairs(line)
    if not pairs:
        raise ValueError("no key=value pair")
    return pairs


def _pairs(line: str) -> dict[str, str]:
    """``key=value`` and ``key="quoted value"`` pairs (an unterminated quote reads as a bare
    value); a later key wins. Linear in ``len(line)`` (``_KEY``)."""
    out: dict[str, str] = {}
    quotes: list[int] | None = None  # the unescaped quotes' positions, found when first needed
    pos = 0
    while (m := _KEY.search(line, pos)) is not None:
        start = m.end()
        end = -1
        if line.startswith('"', start):
            if quotes is None:
                quotes = [q.start() for q in _QUOTE_OR_ESCAPE.finditer(line) if q.group() == '"']
            i = bisect.bisect_right(quotes, start)
            end = quotes[i] if i < len(quotes) else -1
        if end >= 0:
            out[m.group(1)] = line[start + 1 : end]
            pos = end + 1
        else:
            bare = _BARE.match(line, start)
            assert bare is not None  # \S* always matches
            out[m.group(1)] = bare.group()
            pos = bare.end()  # past the "=", so the search moves on
    return out


def _first(fields: dict[str, str], names: Sequence[str]) -> tuple[str | None, str]:
    for n in names:
        v = fields.get(n)
        if v is not None and v not in _EMPTY:
            return n, v
    return None, ""


def safe_key(key: str) -> str:
    """``key`` as the evidence may carry it: a key shaped like a credential (an API key or
    bearer token used as a session id) or too long to be a name becomes ``key#<digest>``, the
    same for the same key, so a session still counts as one."""
    if len(key) <= MAX_KEY_CHARS and scrub(key) == key:
        return key
    return "key#" + hashlib.sha256(key.encode("utf-8", "replace")).hexdigest()[:12]


def _last_upstream(value: str) -> str:
    """nginx lists every upstream it tried (``a, b`` after a retry, ``a : b`` across an internal
    redirect): the last one answered."""
    return upstream_key(re.split(r"\s*[,:]\s+", value)[-1])


def parse_time(value: str) -> float | None:
    """Epoch seconds of nginx ``$msec``, ``$time_iso8601``, ``$time_local`` or Envoy's
    ``%START_TIME%``; None when the text is none of them."""
    try:
        return float(value)
    except ValueError:
        pass
    try:
        t = dt.datetime.fromisoformat(value)
    except ValueError:
        try:
            t = dt.datetime.strptime(value, "%d/%b/%Y:%H:%M:%S %z")
        except ValueError:
            return None
    if t.tzinfo is None:
        t = t.replace(tzinfo=dt.UTC)
    return t.timestamp()


@dataclass(frozen=True)
class Logged:
    """One access-log line as tallied: where it went (``host:port``, "" when the gateway answered
    itself), when (epoch s, None without a readable time), its request bytes (NaN when absent),
    its client / session key ("" when none) and whether its fields are Envoy's."""

    upstream: str
    t_s: float | None
    size: float
    key: str
    envoy: bool


@dataclass
class LineReader:
    """One file's reading state: its line shape (from its first non-blank line) and its key
    field (from its first line with an upstream), so a followed file keeps them across reads."""

    path: str
    shape: str | None = None
    key_field: str | None = None
    max_line: int = DEFAULT_LIMITS.max_log_line_bytes
    too_long: int = 0  # lines skipped for their length

    def read(self, line: str) -> Logged | None:
        """The line's request, None for a blank line or one longer than ``max_line`` (counted
        in ``too_long``); ValueError names the problem (the caller adds ``path:line``)."""
        if len(line) > self.max_line:
            self.too_long += 1
            return None
        if not line.strip():
            return None
        if self.shape is None:
            head = line.lstrip()
            self.shape = (
                "json" if head.startswith("{") else "envoy" if head.startswith("[") else "pairs"
            )
        try:
            fields = _parse_line(line, self.shape)
        except ValueError as e:
            raise ValueError(
                f"expected {SHAPES[self.shape]} access-log line like the file's first line ({e})"
            ) from None
        if not any(u in fields for u in UPSTREAM):
            raise ValueError(f"no upstream field (expected one of {', '.join(UPSTREAM)})")
        _, up = _first(fields, UPSTREAM)
        _, when = _first(fields, TIME)
        _, size = _first(fields, REQUEST_BYTES)
        try:
            b = float(size)
        except ValueError:
            b = math.nan
        key = ""
        if up:
            if self.key_field is None:
                self.key_field = next((k for k in KEYS if k in fields), "")
            key = fields.get(self.key_field, "") if self.key_field else ""
        return Logged(
            upstream=_last_upstream(up) if up else "",
            t_s=parse_time(when) if when else None,
            size=b if math.isfinite(b) else math.nan,
            key="" if key in _EMPTY else safe_key(key),
            envoy=any(h in fields for h in ENVOY_HINTS),
        )


def bounded_lines(fh: BinaryIO, limit: int) -> Iterator[str]:
    """The file's lines, each read at most ``limit + 1`` bytes at a time: a longer line is
    yielded as its first ``limit + 1`` characters (too long, so skipped by ``LineReader``) and
    the rest is read past without being held."""
    while raw := fh.readline(limit + 1):
        if len(raw) > limit and not raw.endswith(b"\n"):
            while (more := fh.readline(limit + 1)) and not more.endswith(b"\n"):
                pass
        yield raw.decode("utf-8", errors="replace").rstrip("\r\n")


def too_long_note(readers: Iterable[LineReader]) -> list[str]:
    """The note for the lines skipped for their length, [] when none was."""
    seen = list(readers)
    n = sum(r.too_long for r in seen)
    kib = max(r.max_line for r in seen) / 1024 if seen else 0
    return (
        [f"{n} access-log line(s) longer than {kib:g} KiB skipped ([sources] max_log_line_kb)"]
        if n
        else []
    )


def _lines(paths: Sequence[str], limit: int) -> Iterator[tuple[LineReader, Logged]]:
    """Every request line of the files; one clean InputError names the first unreadable file or
    bad line (a line whose shape differs from its file's first line, or one without any
    upstream field)."""
    for path in paths:
        reader = LineReader(path, max_line=limit)
        seen = False
        try:
            with open(path, "rb") as fh:
                for n, line in enumerate(bounded_lines(fh, limit), 1):
                    seen = seen or bool(line.strip())
                    try:
                        got = reader.read(line)
                    except ValueError as e:
                        raise InputError(f"{path}:{n}: {e}") from None
                    if got is not None:
                        yield reader, got
        except OSError as e:
            raise InputError(f"{path}: cannot read the access log ({e.strerror})") from None
        if not seen:
            raise InputError(f"{path}: the access log is empty")


@dataclass
class _Tally:
    requests: int = 0
    bytes_total: float = 0.0
    bytes_seen: int = 0
    keys: Counter[str] = field(default_factory=Counter)
    by_window: Counter[int] = field(default_factory=Counter)


def tally(
    logged: Iterable[Logged],
    windows: tuple[float, float, int] | None,
    *,
    key_name: Callable[[], str | None],
    shown: str,
    notes: Sequence[str] = (),
    late_notes: Callable[[], Sequence[str]] = tuple,
) -> GatewayEvidence:
    """Requests by upstream (inside the engines' ``windows`` when given: first window start,
    window length, count; epoch seconds), with their per-window series and biggest keys.

    Only requests logged inside the engines' range count, so the gateway and the engines are
    compared over the same time, and each upstream gets its requests per window (the series
    the report's routing-share timeline reads). ``shown`` names the log(s) in an error;
    ``key_name`` and ``late_notes`` are asked once ``logged`` is consumed (a file's key field
    is known from its first lines, so a stream of lines is tallied without being held)."""
    start = end = None
    if windows is not None:
        first, window_s, n_windows = windows
        start, end = first, first + window_s * n_windows
    tallies: dict[str, _Tally] = {}
    outside = untimed = no_upstream = 0
    envoy = False
    for r in logged:
        envoy = envoy or r.envoy
        if not r.upstream:
            no_upstream += 1  # answered by the gateway itself (4xx, cache, no upstream)
            continue
        if start is not None and end is not None:
            if r.t_s is None:
                untimed += 1
            elif not start <= r.t_s < end:
                outside += 1
                continue
        t = tallies.setdefault(r.upstream, _Tally())
        t.requests += 1
        if windows is not None and r.t_s is not None:
            t.by_window[int((r.t_s - windows[0]) // windows[1])] += 1
        if not math.isnan(r.size):
            t.bytes_total += r.size
            t.bytes_seen += 1
        if r.key:
            t.keys[r.key] += 1
    if not tallies:
        raise InputError(
            f"{shown}: no request in the access log reached an upstream"
            + (" in the engines' time range" if outside else "")
        )
    notes = [*notes, *late_notes()]
    if no_upstream:
        notes.append(
            f"{no_upstream} logged request(s) had no upstream (answered by the gateway "
            "itself) and are not counted"
        )
    if outside:
        notes.append(f"{outside} logged request(s) outside the engines' time range left out")
    if untimed:
        notes.append(
            f"{untimed} logged request(s) without a readable time (fields "
            f"{', '.join(TIME)}) counted whatever their time"
        )
    # per-window series only when every counted request had a time (else they would not sum)
    grid = windows if windows is not None and not untimed else None
    units = tuple(
        GatewayUnit(
            upstream=up,
            requests=float(t.requests),
            request_bytes=t.bytes_total / t.bytes_seen if t.bytes_seen else math.nan,
            keys=tuple((k, float(c)) for k, c in t.keys.most_common(KEPT_KEYS)),
            distinct_keys=len(t.keys),
            series=tuple(float(t.by_window[i]) for i in range(grid[2])) if grid else (),
        )
        for up, t in sorted(tallies.items())
    )
    return GatewayEvidence(
        source=GatewaySource.ENVOY if envoy else GatewaySource.NGINX,
        units=units,
        key_name=key_name(),
        notes=tuple(notes),
        window_starts=tuple(grid[0] + i * grid[1] for i in range(grid[2])) if grid else (),
    )


def first_key_name(readers: Iterable[LineReader]) -> str | None:
    """The key field of the first file that has one (a session header before a client)."""
    return next((r.key_field for r in readers if r.key_field), None)


def read_access_logs(
    paths: Sequence[str],
    windows: tuple[float, float, int] | None = None,
    *,
    max_line: int = DEFAULT_LIMITS.max_log_line_bytes,
) -> GatewayEvidence:
    """Tally every file's lines by upstream (``tally``); one clean InputError names the first
    bad line."""
    readers: dict[str, LineReader] = {}

    def logged() -> Iterator[Logged]:
        for reader, r in _lines(paths, max_line):
            readers.setdefault(reader.path, reader)
            yield r

    return tally(
        logged(),
        windows,
        key_name=lambda: first_key_name(readers.values()),
        shown=", ".join(paths),
        late_notes=lambda: too_long_note(readers.values()),
    )


@dataclass(frozen=True)
class LoggedRequest:
    """One request the gateway sent upstream: when (epoch seconds), where (``host:port``), and
    its session / client key ("" when the line has none)."""

    t_s: float
    upstream: str
    key: str


def read_access_requests(
    paths: Sequence[str],
    *,
    max_line: int = DEFAULT_LIMITS.max_log_line_bytes,
) -> tuple[list[LoggedRequest], str | None]:
    """Every timed request that reached an upstream, in time order, and the key field read
    (a session or user header first; what-if replays keep the keys so sticky and
    consistent-hash routing see the same sessions)."""
    out: list[LoggedRequest] = []
    readers: dict[str, LineReader] = {}
    for reader, r in _lines(paths, max_line):
        readers.setdefault(reader.path, reader)
        if r.upstream and r.t_s is not None:
            out.append(LoggedRequest(r.t_s, r.upstream, r.key))
    out.sort(key=lambda r: r.t_s)
    return out, first_key_name(readers.values())
