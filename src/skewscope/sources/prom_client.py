"""Prometheus HTTP API client: the response envelope, bounded retries on 429/5xx, and strict
decoders of label values and range matrices; every error one scrubbed line (SourceError)."""

from __future__ import annotations

import json
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import httpx

from skewscope.errors import SourceError
from skewscope.settings import DEFAULT_LIMITS
from skewscope.sources.auth import HttpAuth, quoted, redact_url
from skewscope.sources.fetch import Fetched, bounded_get, make_client
from skewscope.sources.range_body import RangeSeries, decode_range
from skewscope.sources.validate import parse_timestamp

RETRY_STATUS = frozenset({429, 500, 502, 503, 504})


def decode_envelope(fetched: Fetched, where: str) -> tuple[Any, list[str]]:
    """(``data``, scrubbed warnings) of an API response, or one SourceError line.

    ``where`` names the server ("Prometheus at URL"). Server text (errors, warnings) is
    flattened and scrubbed of secrets before it goes anywhere.
    """
    if fetched.status in (401, 403):
        raise SourceError(f"{where} refused the credentials (HTTP {fetched.status})")
    try:
        body = json.loads(fetched.body)
    except (ValueError, RecursionError):
        raise SourceError(
            f"{where} answered HTTP {fetched.status} with a body that is not JSON "
            "(is this the Prometheus API base URL?)"
        ) from None
    if not isinstance(body, dict) or not isinstance(body.get("status"), str):
        raise SourceError(f"{where} answered without an API envelope (HTTP {fetched.status})")
    raw_warnings = body.get("warnings")
    warnings = [
        f"Prometheus warning: {quoted(w)}"
        for w in (raw_warnings if isinstance(raw_warnings, list) else ())
    ]
    if body["status"] != "success":
        kind = quoted(body.get("errorType") or "error", 40)
        message = quoted(body.get("error") or "no error message")
        raise SourceError(f"{where} rejected the request ({kind}): {message}")
    return body.get("data"), warnings


@dataclass
class PromClient:
    """Minimal Prometheus API client: envelope handling, bounded retries, safe error messages.

    Every request has a total deadline of ``timeout_s`` and a body limit of ``max_bytes``
    (``fetch.bounded_get``); retries are bounded too.
    """

    url: str
    auth: HttpAuth | None = None
    timeout_s: float = 30.0
    retries: int = 3  # extra attempts on 429/5xx
    backoff_s: float = 0.25  # first back-off; doubles, capped at max_backoff_s
    max_backoff_s: float = 4.0
    max_bytes: int = DEFAULT_LIMITS.max_query_bytes
    warnings: list[str] = field(default_factory=list)
    _client: httpx.Client | None = field(default=None, repr=False)
    # label sets of the range answers read so far (the same units answer every query)
    _labels: dict[bytes, dict[str, str]] = field(default_factory=dict, repr=False)

    def __post_init__(self) -> None:
        self._client = make_client(self.auth, self.timeout_s, base_url=self.url.rstrip("/"))

    @property
    def shown_url(self) -> str:
        return redact_url(self.url)

    @property
    def where(self) -> str:
        return f"Prometheus at {self.shown_url}"

    def close(self) -> None:
        if self._client is not None:
            self._client.close()

    def _send(self, path: str, params: Mapping[str, Any]) -> Fetched:
        assert self._client is not None
        for attempt in range(self.retries + 1):
            fetched = bounded_get(
                self._client,
                path,
                what="Prometheus",
                shown_url=self.url,
                deadline_s=self.timeout_s,
                max_bytes=self.max_bytes,
                params=params,
            )
            if fetched.status not in RETRY_STATUS or attempt == self.retries:
                return fetched
            time.sleep(self._delay(attempt, fetched))
        raise AssertionError("unreachable")

    def _delay(self, attempt: int, fetched: Fetched) -> float:
        delay = self.backoff_s * (2**attempt)
        after = parse_timestamp(fetched.headers.get("Retry-After", ""))
        if after is not None:
            delay = max(delay, after)
        return float(min(delay, self.max_backoff_s))

    def get(self, path: str, params: Mapping[str, Any]) -> Any:
        """GET an API path and return ``data``; API warnings are collected in ``warnings``."""
        return self._data(self._send(path, params))

    def _data(self, fetched: Fetched) -> Any:
        """An answer's ``data`` (its API warnings collected in ``warnings``)."""
        data, warnings = decode_envelope(fetched, self.where)
        self.warnings.extend(warnings)
        return data

    def metric_names(self, start: float, end: float, selector: str) -> list[str]:
        params: dict[str, Any] = {"start": start, "end": end}
        if selector:
            params["match[]"] = "{" + selector + "}"
        data = self.get("/api/v1/label/__name__/values", params)
        return decode_names(data, self.where)

    def series(self, match: str, start: float, end: float) -> list[dict[str, str]]:
        """Label sets of the series matching ``match`` in [start, end]."""
        data = self.get("/api/v1/series", {"match[]": match, "start": start, "end": end})
        if not isinstance(data, list) or not all(
            isinstance(d, dict) and all(isinstance(v, str) for v in d.values()) for d in data
        ):
            raise SourceError(f"{self.where} returned series that are not label sets")
        return data

    def query_range(self, query: str, start: float, end: float, step: float) -> list[Any]:
        data = self.get(
            "/api/v1/query_range", {"query": query, "start": start, "end": end, "step": step}
        )
        return decode_matrix(data, self.where)

    def query_range_series(
        self, query: str, start: float, end: float, step: float
    ) -> list[RangeSeries] | list[Any]:
        """``query_range``, read without a Python object per point when the answer has the
        usual layout (``range_body``); otherwise its JSON ``result`` as ``query_range`` gives."""
        params = {"query": query, "start": start, "end": end, "step": step}
        fetched = self._send("/api/v1/query_range", params)
        if fetched.status == 200:
            series = decode_range(fetched.body, self._labels)
            if series is not None:
                return series
        return decode_matrix(self._data(fetched), self.where)


def decode_names(data: Any, where: str) -> list[str]:
    """The ``data`` of a label-values call: a list of names (null means none)."""
    if data is None:
        return []
    if not isinstance(data, list) or not all(isinstance(n, str) for n in data):
        raise SourceError(f"{where} returned label values that are not a list of names")
    return data


def decode_matrix(data: Any, where: str) -> list[Any]:
    """The ``result`` of a range query, checked to be a matrix (series are checked later)."""
    if not isinstance(data, dict) or data.get("resultType") != "matrix":
        raise SourceError(f"{where} did not return a range matrix")
    result = data.get("result")
    if result is None:
        return []
    if not isinstance(result, list):
        raise SourceError(f"{where} returned a range matrix whose result is not a list")
    return result
