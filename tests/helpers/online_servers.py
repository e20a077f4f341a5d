"""Tiny stdlib HTTP servers on 127.0.0.1 for fault and scrape tests."""

from __future__ import annotations

import contextlib
import http.server
import socket
import threading
import time
from collections.abc import Callable, Iterator


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Quiet(http.server.BaseHTTPRequestHandler):
    def log_message(self, format: str, *args: object) -> None:
        pass


@contextlib.contextmanager
def serve(handler: type[http.server.BaseHTTPRequestHandler]) -> Iterator[str]:
    """A stdlib HTTP server on 127.0.0.1 in a thread; yields its base URL."""
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05})
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)


# ------------------------------------------------------------------------------------------------
# Fault handlers: servers that misbehave in ways a real network or proxy can.


def trickle_handler(*, in_headers: bool = False, every_s: float = 0.2) -> type[Quiet]:
    """Answers 200 and then sends one byte every ``every_s`` forever (in the headers, or in a
    body that claims to be long): each read succeeds, so only a total deadline ends it."""

    class Handler(Quiet):
        def do_GET(self) -> None:
            try:
                self.wfile.write(b"HTTP/1.1 200 OK\r\n")
                if not in_headers:
                    self.wfile.write(b"Content-Length: 1000\r\n\r\n")
                self.wfile.flush()
                while True:
                    time.sleep(every_s)
                    self.wfile.write(b"X" if in_headers else b"#")
                    self.wfile.flush()
            except OSError:  # the client gave up: what the test wants
                return

    return Handler


def endless_handler(*, declare_length: bool = False) -> type[Quiet]:
    """A body that never ends (chunked), or one that declares 1 TiB up front."""

    class Handler(Quiet):
        protocol_version = "HTTP/1.1"

        def do_GET(self) -> None:
            self.send_response(200)
            self.send_header("Content-Type", "text/plain")
            try:
                if declare_length:
                    self.send_header("Content-Length", str(2**40))
                    self.end_headers()
                else:
                    self.send_header("Transfer-Encoding", "chunked")
                    self.end_headers()
                block = b"# " + b"x" * 65_000 + b"\n"
                chunk = f"{len(block):x}\r\n".encode() + block + b"\r\n"
                while True:
                    self.wfile.write(chunk)
            except OSError:
                return

    return Handler


def json_handler(
    respond: Callable[[http.server.BaseHTTPRequestHandler], tuple[int, bytes]],
    seen: list[dict[str, str]] | None = None,
) -> type[Quiet]:
    """Answers every GET with ``respond(handler)`` -> (status, body); records request headers."""

    class Handler(Quiet):
        def do_GET(self) -> None:
            if seen is not None:
                seen.append(dict(self.headers))
            code, body = respond(self)
            self.send_response(code)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

    return Handler
