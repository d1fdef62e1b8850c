"""A real HTTP server on 127.0.0.1 (ephemeral port, its own thread) that plays a tenant's webhook.

Paths choose the behaviour (``/gate`` holds each call until the test opens the gate of its ``key`` argument);
every request is recorded (method, path, headers, raw body) before it is answered.
Import the ``webhook_server`` fixture into a test module to use it.
"""

from __future__ import annotations

import datetime
import json
import ssl
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

BIG_TOTAL = 64 * 1024 * 1024
WAIT = 10.0


@dataclass
class Recorded:
    method: str
    path: str
    headers: dict[str, str]
    body: bytes

    def json(self) -> Any:
        return json.loads(self.body)


@dataclass
class WebhookServer:
    port: int = 0
    scheme: str = "http"
    # TLS only: the server names clients asked for (SNI).
    sni_names: list[str | None] = field(default_factory=list)
    requests: list[Recorded] = field(default_factory=list)
    received: threading.Event = field(default_factory=threading.Event)
    released: threading.Event = field(default_factory=threading.Event)
    closed_by_client: threading.Event = field(default_factory=threading.Event)
    big_bytes_sent: int = 0
    # ``/gate``: one event per ``arguments.key``; a call waits until the test opens its gate.
    gates: dict[str, threading.Event] = field(default_factory=dict)

    def gate(self, key: str) -> threading.Event:
        return self.gates.setdefault(key, threading.Event())

    def gated_keys(self) -> list[str]:
        """The keys of the ``/gate`` calls received so far, in arrival order."""
        return [str(request.json()["arguments"]["key"]) for request in list(self.requests) if request.path == "/gate"]

    def url(self, path: str, host: str = "127.0.0.1") -> str:
        return f"{self.scheme}://{host}:{self.port}{path}"


def _make_handler(state: WebhookServer) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, format: str, *args: Any) -> None:  # quiet
            pass

        def _reply(self, status: int, body: bytes, content_type: str = "application/json", **headers: str) -> None:
            self.send_response(status)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(body)))
            self.send_header("Connection", "close")
            for name, value in headers.items():
                self.send_header(name.replace("_", "-"), value)
            self.end_headers()
            self.wfile.write(body)

        def _json(self, value: Any, status: int = 200) -> None:
            self._reply(status, json.dumps(value).encode())

        def do_GET(self) -> None:
            self._handle()

        def do_POST(self) -> None:
            self._handle()

        def do_PUT(self) -> None:
            self._handle()

        def do_PATCH(self) -> None:
            self._handle()

        def _handle(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            body = self.rfile.read(length) if length else b""
            parts = urlsplit(self.path)
            state.requests.append(Recorded(self.command, parts.path, dict(self.headers.items()), body))
            state.received.set()
            path = parts.path
            if path == "/content":
                self._json({"content": [{"type": "text", "text": "hello from the webhook"}]})
            elif path == "/structured":
                self._json({"structuredContent": {"temp": 21.5, "unit": "C"}})
            elif path == "/both":
                self._json({"content": [{"type": "text", "text": "warm"}], "structuredContent": {"temp": 30}})
            elif path == "/tool-error":
                self._json({"content": [{"type": "text", "text": "no such city"}], "isError": True})
            elif path == "/value":
                self._json([1, "two", {"three": 3}])
            elif path == "/string":
                self._json("plain words")
            elif path == "/no-content":
                self.send_response(204)
                self.send_header("Connection", "close")
                self.end_headers()
            elif path.startswith("/status/"):
                self._json({"error": "down for maintenance"}, status=int(path.rsplit("/", 1)[1]))
            elif path == "/invalid":
                self._reply(200, b"this is {not json")
            elif path == "/bad-result":
                self._json({"content": [{"type": "text"}]})
            elif path == "/slow":
                state.released.wait(WAIT)
                self._json({"content": [{"type": "text", "text": "late"}]})
            elif path == "/gate":
                key = str(json.loads(body)["arguments"]["key"])
                opened = state.gate(key).wait(WAIT)
                self._json({"content": [{"type": "text", "text": f"{key} {'passed' if opened else 'timed out'}"}]})
            elif path == "/hold":
                # Wait for the client to give up: a closed connection reads as EOF.
                self.connection.settimeout(WAIT)
                try:
                    if self.connection.recv(1) == b"":
                        state.closed_by_client.set()
                except OSError:
                    state.closed_by_client.set()
            elif path == "/declared-big":
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(10**9))
                self.end_headers()
                self.wfile.write(b'{"padding": "')
            elif path == "/big":
                # No Content-Length: only counting while reading can stop this.
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Connection", "close")
                self.end_headers()
                chunk = b" " * 65536
                try:
                    while state.big_bytes_sent < BIG_TOTAL:
                        self.wfile.write(chunk)
                        state.big_bytes_sent += len(chunk)
                except OSError:
                    pass
                self.close_connection = True
            elif path == "/gzip":
                self._reply(200, b"\x1f\x8b...", content_encoding="gzip")
            elif path == "/redirect":
                target = parse_qs(parts.query).get("to", ["http://169.254.169.254/latest/meta-data/"])[0]
                self.send_response(int(parse_qs(parts.query).get("status", ["302"])[0]))
                self.send_header("Location", target)
                self.send_header("Content-Length", "0")
                self.send_header("Connection", "close")
                self.end_headers()
            else:
                self._json({"error": "unknown path"}, status=404)

    return Handler


@contextmanager
def running_server(tls: ssl.SSLContext | None = None) -> Iterator[WebhookServer]:
    """Serve on 127.0.0.1 (over TLS with ``tls``, recording SNI names) until the block ends."""
    state = WebhookServer(scheme="https" if tls else "http")
    server = ThreadingHTTPServer(("127.0.0.1", 0), _make_handler(state))
    server.daemon_threads = True
    if tls is not None:
        tls.sni_callback = lambda sock, name, context: state.sni_names.append(name)  # type: ignore[assignment]
        server.socket = tls.wrap_socket(server.socket, server_side=True)
    state.port = server.server_address[1]
    thread = threading.Thread(target=server.serve_forever, args=(0.05,), name="webhook-server", daemon=True)
    thread.start()
    try:
        yield state
    finally:
        state.released.set()
        for gate in list(state.gates.values()):
            gate.set()
        server.shutdown()
        server.server_close()
        thread.join(WAIT)


@pytest.fixture
def webhook_server() -> Iterator[WebhookServer]:
    with running_server() as state:
        yield state


def self_signed_certificate(directory: Path, host: str) -> tuple[Path, Path]:
    """A self-signed certificate (its own CA) for ``host``; returns (certificate PEM, key PEM) paths."""
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, host)])
    now = datetime.datetime.now(datetime.UTC)
    certificate = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.SubjectAlternativeName([x509.DNSName(host)]), critical=False)
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(key, hashes.SHA256())
    )
    cert_path, key_path = directory / "cert.pem", directory / "key.pem"
    cert_path.write_bytes(certificate.public_bytes(serialization.Encoding.PEM))
    key_path.write_bytes(
        key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    )
    return cert_path, key_path
