"""An HTTPS server on 127.0.0.1 serving client ID metadata documents, with a certificate from a throwaway CA
generated here (``cryptography``); point ``SSL_CERT_FILE`` at ``ca_path`` to trust it.

Paths: ``/client/<name>.json`` a valid document whose ``client_id`` is its own URL (``Cache-Control: max-age=600``),
``/big/<name>.json`` a document larger than any sane bound, ``/slow/<name>.json`` one that answers after
``slow_seconds``, ``/drip/<name>.json`` a valid answer written one byte every ``DRIP_INTERVAL_SECONDS`` from its
status line on (a few hundred bytes: a minute). The certificate also names ``HOSTS`` (made-up names that a
test's resolver maps to 127.0.0.1: documents of different hosts); ``under_way`` counts the requests being answered, and the most at once.
"""

from __future__ import annotations

import datetime
import ipaddress
import json
import ssl
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

REDIRECT = "http://127.0.0.1:47322/callback"
HOSTS = ("docs-a.cimd.test", "docs-b.cimd.test")
DRIP_INTERVAL_SECONDS = 0.2


def _pem(path: Path, data: bytes) -> Path:
    path.write_bytes(data)
    return path


def make_certificates(directory: Path) -> tuple[Path, Path, Path]:
    """(CA certificate, server certificate for 127.0.0.1, server key), as PEM files."""
    now = datetime.datetime.now(datetime.UTC)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "mcp-host test CA")])
    ca = (
        x509.CertificateBuilder()
        .subject_name(ca_name)
        .issuer_name(ca_name)
        .public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                key_cert_sign=True,
                crl_sign=True,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(ca_key.public_key()), critical=False)
        .sign(ca_key, hashes.SHA256())
    )
    key = ec.generate_private_key(ec.SECP256R1())
    cert = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "127.0.0.1")]))
        .issuer_name(ca_name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(
            x509.SubjectAlternativeName(
                [x509.IPAddress(ipaddress.ip_address("127.0.0.1")), *(x509.DNSName(host) for host in HOSTS)]
            ),
            critical=False,
        )
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(x509.ExtendedKeyUsage([x509.oid.ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
        .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()), critical=False)
        .sign(ca_key, hashes.SHA256())
    )
    return (
        _pem(directory / "ca.pem", ca.public_bytes(serialization.Encoding.PEM)),
        _pem(directory / "server.pem", cert.public_bytes(serialization.Encoding.PEM)),
        _pem(
            directory / "server.key",
            key.private_bytes(
                serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
            ),
        ),
    )


@dataclass
class CimdServer:
    base: str
    ca_path: Path
    slow_seconds: float
    fetched: list[str]
    under_way: list[int]  # [requests being answered now, the most ever at once]

    def url(self, kind: str, name: str, host: str | None = None) -> str:
        base = self.base if host is None else self.base.replace("127.0.0.1", host)
        return f"{base}/{kind}/{name}.json"


def document(client_id: str, redirect_uri: str = REDIRECT) -> dict[str, Any]:
    return {
        "client_id": client_id,
        "client_name": "CIMD test client",
        "client_uri": "https://client.example/",
        "redirect_uris": [redirect_uri],
        "grant_types": ["authorization_code", "refresh_token"],
        "response_types": ["code"],
        "token_endpoint_auth_method": "none",
    }


@contextmanager
def cimd_server(directory: Path, slow_seconds: float = 3.0) -> Iterator[CimdServer]:
    ca_path, cert_path, key_path = make_certificates(directory)
    fetched: list[str] = []
    under_way = [0, 0]
    lock = threading.Lock()

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            with lock:
                under_way[0] += 1
                under_way[1] = max(under_way)
            try:
                self.answer()
            finally:
                with lock:
                    under_way[0] -= 1

        def answer(self) -> None:
            fetched.append(self.path)
            kind = self.path.split("/")[1]
            host = (self.headers.get("Host") or "127.0.0.1").rsplit(":", 1)[0]
            url = f"https://{host}:{self.server.server_address[1]}{self.path}"
            if kind == "slow":
                time.sleep(slow_seconds)
            if kind == "big":
                body = json.dumps({**document(url), "padding": "x" * 100_000}).encode()
            else:
                body = json.dumps(document(url)).encode()
            if kind == "drip":
                head = (
                    "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
                    f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n"
                )
                for byte in head.encode() + body:
                    self.wfile.write(bytes([byte]))
                    self.wfile.flush()
                    time.sleep(DRIP_INTERVAL_SECONDS)  # the adversary's pace, not the test's timing
                return
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Cache-Control", "max-age=600")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: Any) -> None:
            pass

    class Server(ThreadingHTTPServer):
        def handle_error(self, request: Any, client_address: Any) -> None:
            pass  # a client that gave up (the slow document) is expected, not an error to print

    server = Server(("127.0.0.1", 0), Handler)
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(cert_path, key_path)
    server.socket = context.wrap_socket(server.socket, server_side=True)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield CimdServer(f"https://127.0.0.1:{server.server_address[1]}", ca_path, slow_seconds, fetched, under_way)
    finally:
        server.shutdown()
        server.server_close()
