"""Fuzz both online decoders: whatever a server sends, the result is Evidence or ONE clean
SourceError line, nothing else (no traceback, no multi-line message, no secret)."""

from __future__ import annotations

import json
from typing import Any

import httpx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from skewscope.errors import MAX_MESSAGE_CHARS, SourceError
from skewscope.frame import Evidence
from skewscope.sources import prom_client, prometheus
from skewscope.sources.collect import Snapshot
from skewscope.sources.exposition import parse_exposition
from skewscope.sources.scrape import evidence_from_snapshots

T = 1_700_000_040.0
FUZZ = settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])

json_leaf = st.one_of(
    st.none(), st.booleans(), st.integers(-(2**70), 2**70), st.floats(), st.text(max_size=8)
)
json_any = st.recursive(
    json_leaf,
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=6), inner, max_size=4)
    ),
    max_leaves=12,
)
label_value = st.one_of(
    st.sampled_from(["0", "1", "2", "²", "-1", "01", "", "1.0", "0x1", "٣"]), st.text(max_size=4)
)
number_text = st.one_of(
    st.sampled_from(["1", "0", "2.5", "NaN", "+Inf", "-Inf", "1e309", "abc", "", "1_0", "٣"]),
    st.floats().map(repr),
    st.text(max_size=5),
)


def mostly(good: st.SearchStrategy[Any], bad: st.SearchStrategy[Any]) -> Any:
    """``good`` four times in five: garbage deep inside a response needs a valid outside."""
    return st.integers(0, 4).flatmap(lambda i: good if i < 4 else bad)


def _is_clean(err: SourceError) -> bool:
    msg = str(err)
    return "\n" not in msg and "\r" not in msg and 0 < len(msg) <= MAX_MESSAGE_CHARS + 200


# ------------------------------------------------------------------------------------------------
# Prometheus: the whole load_prometheus path against a mock transport serving fuzzed bodies

good_number = st.sampled_from(["1", "0", "2.5", "NaN", "+Inf", "7e2"])
point = mostly(
    st.tuples(
        st.sampled_from([T + 60, T + 120, "1700000100", T]), mostly(good_number, number_text)
    ).map(list),
    json_any,
)
series = mostly(
    st.fixed_dictionaries(
        {
            "metric": mostly(
                st.fixed_dictionaries(
                    {"instance": mostly(st.sampled_from(["x:1", "y:1", ""]), json_leaf)},
                    optional={
                        "engine": mostly(
                            st.sampled_from(["0", "1"]), st.one_of(label_value, json_leaf)
                        )
                    },
                ),
                json_any,
            ),
            "values": mostly(st.lists(point, min_size=1, max_size=3), json_any),
        }
    ),
    json_any,
)
matrix = mostly(
    st.fixed_dictionaries(
        {
            "resultType": mostly(st.just("matrix"), st.sampled_from(["vector", ""])),
            "result": mostly(st.lists(series, min_size=1, max_size=4), json_any),
        }
    ),
    json_any,
)
names = mostly(
    st.just(["vllm:num_requests_running", "vllm:request_success_total"]),
    st.one_of(
        st.lists(
            st.one_of(
                st.sampled_from(["vllm:num_requests_running", "sglang:token_usage"]), json_leaf
            ),
            max_size=3,
        ),
        json_any,
    ),
)


def envelope(data: Any) -> Any:
    return mostly(
        st.fixed_dictionaries(
            {"status": st.just("success"), "data": st.just(data)},
            optional={"warnings": st.one_of(st.lists(st.text(max_size=10), max_size=2), json_any)},
        ),
        st.one_of(
            st.fixed_dictionaries(
                {"status": st.sampled_from(["error", "", "ok"])},
                optional={"errorType": json_leaf, "error": json_any},
            ),
            json_any,
        ),
    )


@st.composite
def prometheus_bodies(draw: st.DrawFn) -> tuple[bytes, bytes, int]:
    """(label-values body, range-query body, HTTP status)."""
    as_bytes = lambda v: json.dumps(v).encode()  # noqa: E731
    raw = st.one_of(st.binary(max_size=20), st.just(b"[" * 5000))
    label_body = draw(mostly(envelope(draw(names)).map(as_bytes), raw))
    query_body = draw(mostly(envelope(draw(matrix)).map(as_bytes), raw))
    status = draw(mostly(st.just(200), st.sampled_from([400, 401, 404, 500, 503])))
    return label_body, query_body, status


@FUZZ
@given(prometheus_bodies())
def test_prometheus_decoder_gives_evidence_or_one_clean_error(
    bodies: tuple[bytes, bytes, int],
) -> None:
    label_body, query_body, status = bodies

    def handler(request: httpx.Request) -> httpx.Response:
        is_names = request.url.path.startswith("/api/v1/label/")
        return httpx.Response(status, content=label_body if is_names else query_body)

    def mock_client(auth: Any, timeout_s: float, **kwargs: Any) -> httpx.Client:
        return httpx.Client(transport=httpx.MockTransport(handler), **kwargs)

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(prom_client, "make_client", mock_client)
        mp.setattr(prom_client.time, "sleep", lambda s: None)  # retries without waiting
        try:
            ev = prometheus.load_prometheus("http://prom.test", start=T, end=T + 120, step_s=60)
        except SourceError as err:
            assert _is_clean(err), str(err)
            return
    assert isinstance(ev, Evidence)
    assert all("\n" not in n for n in ev.notes)


# ------------------------------------------------------------------------------------------------
# Exposition: parse_exposition + evidence_from_snapshots on fuzzed /metrics text

NAMES = [
    "vllm:num_requests_running",
    "vllm:request_success_total",
    "vllm:time_to_first_token_seconds_bucket",
    "vllm:kv_cache_usage_perc",
]


@st.composite
def exposition_line(draw: st.DrawFn) -> str:
    kind = draw(st.sampled_from(["sample", "sample", "sample", "comment", "junk"]))
    if kind == "junk":
        return draw(st.text(max_size=30).map(lambda s: s.replace("\n", " ")))
    if kind == "comment":
        return "# TYPE " + draw(st.sampled_from(NAMES)) + " gauge"
    labels = {"engine": draw(label_value)}
    if draw(st.booleans()):
        labels["le"] = draw(st.sampled_from(["0.5", "+Inf", "abc", "NaN", "1e3"]))
    body = ",".join(f'{k}="{v}"'.replace("\n", "") for k, v in labels.items())
    value = draw(number_text).replace("\n", "")
    return f"{draw(st.sampled_from(NAMES))}{{{body}}} {value}"


@FUZZ
@given(
    st.lists(st.lists(exposition_line(), max_size=12).map("\n".join), min_size=1, max_size=5),
    st.booleans(),
)
def test_exposition_path_gives_evidence_or_one_clean_error(
    texts: list[str], with_failure: bool
) -> None:
    snaps = []
    for i, text in enumerate(texts):
        parsed = parse_exposition(text)  # never raises
        assert parsed.malformed >= 0 and "\n" not in parsed.example
        snaps.append(Snapshot(float(i), parsed.samples, "", parsed.malformed, parsed.example))
    if with_failure:
        snaps.append(Snapshot(float(len(texts)), None, "cannot connect: connection refused"))
    try:
        ev = evidence_from_snapshots(
            {"h:1": snaps}, t0=0.0, window_s=2.0, n_windows=max(1, len(snaps) // 2)
        )
    except SourceError as err:
        assert _is_clean(err), str(err)
        return
    assert isinstance(ev, Evidence)
    assert all("\n" not in n for n in ev.notes)
