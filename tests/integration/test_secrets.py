"""Secrets: never printed (even when a server echoes them), sent only where asked."""

from __future__ import annotations

import json
from http.server import BaseHTTPRequestHandler
from pathlib import Path

import pytest
from test_scrape import PINNED

from helpers.online_servers import free_port, json_handler, serve
from skewscope.cli import main
from skewscope.sources.auth import HttpAuth, Secret, redact_url, scrub

TOKEN = "tok-9f8e7d6c5b4a"
PASSWORD = "pw-1a2b3c4d5e"
T = "1700000040"


def echo_prometheus(seen: list[dict[str, str]], *, in_warnings: bool = False) -> type:
    """A Prometheus that quotes the request's Authorization header back, as a buggy proxy or an
    over-helpful error page does: in the error, or in the warnings of a good answer."""

    def respond(h: BaseHTTPRequestHandler) -> tuple[int, bytes]:
        echoed = f"denied for Authorization: {h.headers.get('Authorization')} at {h.path}"
        if not in_warnings:
            body = {"status": "error", "errorType": "bad_data", "error": echoed}
            return 400, json.dumps(body).encode()
        if h.path.startswith("/api/v1/label/"):
            data: object = ["vllm:num_requests_running"]
        elif h.path.startswith("/api/v1/series"):
            data = []  # no series carries a pool label
        else:
            values = [[int(T) + 60, "1"], [int(T) + 120, "1"]]
            data = {
                "resultType": "matrix",
                "result": [{"metric": {"instance": "x:1"}, "values": values}],
            }
        body = {"status": "success", "data": data, "warnings": [echoed, f"raw {TOKEN}"]}
        return 200, json.dumps(body).encode()

    return json_handler(respond, seen)


def _diagnose(url: str, *extra: str) -> list[str]:
    return [
        "diagnose",
        "--prometheus",
        url,
        "--start",
        T,
        "--end",
        str(int(T) + 120),
        "--step",
        "60s",
        *extra,
    ]


@pytest.mark.parametrize("in_warnings", [False, True], ids=["error", "warnings"])
def test_echoed_bearer_token_is_never_printed(
    in_warnings: bool, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("SKEWSCOPE_PROM_TOKEN", TOKEN)
    seen: list[dict[str, str]] = []
    with serve(echo_prometheus(seen, in_warnings=in_warnings)) as url:
        code = main(_diagnose(url, "--format", "json"))
    out = capsys.readouterr()
    assert seen[0]["Authorization"] == f"Bearer {TOKEN}"  # sent to Prometheus...
    assert TOKEN not in out.out + out.err  # ...and never shown
    if in_warnings:  # the warnings became report notes
        assert code == 0
        notes = json.loads(out.out)["notes"]
        assert any("Authorization: ***" in n for n in notes), notes
        assert "Prometheus warning: raw ***" in notes
    else:
        assert code == 4 and "Authorization: ***" in out.err


def test_echoed_basic_auth_and_url_password_are_never_printed(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "pw").write_text(PASSWORD + "\n")
    seen: list[dict[str, str]] = []
    with serve(echo_prometheus(seen)) as url:
        assert main(_diagnose(url, "--user", "bob", "--password-file", str(tmp_path / "pw"))) == 4
        host = url.removeprefix("http://")
        assert main(_diagnose(f"http://bob:{PASSWORD}@{host}")) == 4
    err = capsys.readouterr().err
    assert seen[0]["Authorization"].startswith("Basic ")
    assert PASSWORD not in err and seen[0]["Authorization"].split()[1] not in err


def test_scheme_less_url_with_password_is_redacted(capsys: pytest.CaptureFixture[str]) -> None:
    url = f"bob:{PASSWORD}@127.0.0.1:{free_port()}"
    assert main(_diagnose(url)) == 4
    err = capsys.readouterr().err
    assert PASSWORD not in err and "***@127.0.0.1" in err
    assert redact_url(f"bob:{PASSWORD}@h:9/p?token=x") == "***@h:9/p"


def test_scrub_masks_known_secrets_and_credential_shapes() -> None:
    Secret("a-long-secret-value")
    text = scrub(
        'x a-long-secret-value {"authorization": "Bearer abc.123"} u:p4ss@h:1 '
        "https://u:p@h/ ?access_token=zz9&x=1 bearer token basic authentication"
    )
    assert text == (
        'x *** {"authorization": "***"} ***@h:1 https://***@h/ ?access_token=***&x=1 '
        "bearer token basic authentication"
    )


def static_recording(seen: list[dict[str, str]]) -> type:
    body = PINNED.read_bytes()

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, format: str, *args: object) -> None:
            pass

        def do_GET(self) -> None:
            seen.append(dict(self.headers))
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

    return Handler


def _scrape(url: str, *extra: str) -> list[str]:
    return [
        "diagnose",
        "--scrape",
        url + "/metrics",
        "--duration",
        "0.4s",
        "--interval",
        "0.2s",
        "--window",
        "0.4s",
        "--format",
        "json",
        *extra,
    ]


@pytest.mark.parametrize(
    ("extra", "sent", "note"),
    [
        ((), None, "not sent to /metrics targets"),  # the ambient SKEWSCOPE_PROM_TOKEN
        (("--token-env", "MY_SCRAPE_TOKEN"), f"Bearer {TOKEN}", "sent over plain http"),
    ],
    ids=["ambient-held-back", "named-sent"],
)
def test_scrape_targets_get_only_named_credentials(
    extra: tuple[str, ...],
    sent: str | None,
    note: str,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.setenv("SKEWSCOPE_PROM_TOKEN", TOKEN)
    monkeypatch.setenv("MY_SCRAPE_TOKEN", TOKEN)
    seen: list[dict[str, str]] = []
    with serve(static_recording(seen)) as url:
        assert main(_scrape(url, *extra)) == 0
    assert seen and all(h.get("Authorization") == sent for h in seen)
    out = capsys.readouterr().out
    assert TOKEN not in out
    assert any(note in n for n in json.loads(out)["notes"]), out


@pytest.mark.parametrize("option", ["--ca-file", "--cert"])
def test_missing_tls_files_are_one_usage_line(
    option: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    missing = tmp_path / "nope.pem"
    assert main(_diagnose(f"https://127.0.0.1:{free_port()}", option, str(missing))) == 2
    err = capsys.readouterr().err
    assert err == f"skewscope: error: {option} {missing}: no such file\n"


def test_malformed_tls_files_are_one_usage_line(tmp_path: Path) -> None:
    bad = tmp_path / "bad.pem"
    bad.write_text("not a certificate\n")
    for kwargs in ({"ca_file": str(bad)}, {"client_cert": str(bad)}):
        with pytest.raises(Exception) as err:
            HttpAuth.from_options(ambient_envs=False, **kwargs)  # type: ignore[arg-type]
        assert type(err.value).__name__ == "UsageError"
        assert "not a readable PEM" in str(err.value) and "\n" not in str(err.value)


def test_a_plain_http_client_loads_no_cas_and_trusts_no_certificate() -> None:
    import ssl

    from skewscope.sources.fetch import make_client

    def context(base_url: str) -> ssl.SSLContext:
        client = make_client(None, 5.0, base_url=base_url)
        ctx = client._transport._pool._ssl_context  # type: ignore[attr-defined]
        client.close()
        assert isinstance(ctx, ssl.SSLContext)
        return ctx

    plain, tls = context("http://127.0.0.1:9"), context("https://127.0.0.1:9")
    # fails closed: any TLS connection from the plain-HTTP client is refused
    assert plain.verify_mode == ssl.CERT_REQUIRED and plain.check_hostname
    assert plain.cert_store_stats()["x509_ca"] == 0
    system = ssl.create_default_context().cert_store_stats()
    assert tls.verify_mode == ssl.CERT_REQUIRED and tls.cert_store_stats() == system
