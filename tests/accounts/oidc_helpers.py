"""Identity providers for the single sign-on tests.

`RealProvider`: tests/oidc_provider (django-oauth-toolkit) as a separate process on a free loopback port,
with its own SQLite file and an RS256 key generated at start; `next_token_fault` makes it issue a faulty
ID token through its real code flow.
`FakeProvider`: a tiny OpenID provider in a thread of the test process, whose token endpoint answers
with whatever ID token a test forges (wrong audience, other key, alg none, expired, other issuer).
"""
from __future__ import annotations

import json
import os
import secrets
import socket
import subprocess
import sys
import threading
import time
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import parse_qs, urlparse

from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa

PROVIDER_DIR = Path(__file__).resolve().parent.parent / "oidc_provider"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def rsa_private_pem() -> str:
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    return key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                             serialization.NoEncryption()).decode()


class RealProvider:
    """django-oauth-toolkit's OpenID provider, run with its own runserver."""

    def __init__(self, workdir: Path):
        self.workdir = workdir
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.issuer = f"{self.url}/o"
        key = workdir / "idp-rs256.pem"
        key.write_text(rsa_private_pem())
        self.admin_token = secrets.token_urlsafe(16)
        self.env = {**os.environ, "IDP_DB": str(workdir / "idp.sqlite3"), "IDP_RSA_KEY_FILE": str(key),
                    "IDP_ADMIN_TOKEN": self.admin_token, "PYTHONPATH": str(PROVIDER_DIR)}
        self.env.pop("DJANGO_SETTINGS_MODULE", None)
        self.process = None

    def manage(self, *args: str) -> None:
        result = subprocess.run([sys.executable, str(PROVIDER_DIR / "manage.py"), *args], env=self.env,
                                capture_output=True, text=True, timeout=120)
        if result.returncode != 0:
            raise RuntimeError(f"provider manage.py {args[0]} failed: {result.stderr[-2000:]}")

    def start(self) -> "RealProvider":
        self.manage("migrate", "--noinput")
        self.log = open(self.workdir / "idp.log", "w")
        self.process = subprocess.Popen(
            [sys.executable, str(PROVIDER_DIR / "manage.py"), "runserver", f"127.0.0.1:{self.port}", "--noreload"],
            env=self.env, stdout=self.log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 30
        while True:
            try:
                urllib.request.urlopen(f"{self.issuer}/.well-known/openid-configuration", timeout=2).read()
                return self
            except OSError:
                if self.process.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError("the test OpenID provider did not start: "
                                       + (self.workdir / "idp.log").read_text()[-2000:])
                time.sleep(0.2)

    def client(self, client_id: str, secret: str, redirect_uris: list[str], post_logout_uris: list[str]) -> None:
        args = ["idp_client", client_id, "--secret", secret]
        for uri in redirect_uris:
            args += ["--redirect-uri", uri]
        for uri in post_logout_uris:
            args += ["--post-logout-uri", uri]
        self.manage(*args)

    def user(self, username: str, password: str, groups: list[str], email: str = "") -> None:
        """Create or update a user of the provider with these groups (through its test-admin endpoint)."""
        body = json.dumps({"username": username, "password": password, "groups": groups, "email": email}).encode()
        request = urllib.request.Request(f"{self.url}/test-admin/user", data=body, method="POST", headers={
            "Authorization": f"Bearer {self.admin_token}", "Content-Type": "application/json"})
        urllib.request.urlopen(request, timeout=10).read()

    def next_token_fault(self, fault: str | None) -> None:
        """Make the provider issue its next ID token with this fault (tests/oidc_provider/idp/validators.py:
        wrong-audience, expired, unknown-issuer, unsigned, other-key, unknown-key); None: a sound one."""
        request = urllib.request.Request(f"{self.url}/test-admin/fault", data=json.dumps({"fault": fault}).encode(),
                                         method="POST", headers={"Authorization": f"Bearer {self.admin_token}",
                                                                 "Content-Type": "application/json"})
        urllib.request.urlopen(request, timeout=10).read()

    def stop(self) -> None:
        if self.process is not None:
            self.process.terminate()
            try:
                self.process.wait(10)
            except subprocess.TimeoutExpired:
                self.process.kill()
            self.log.close()


class FakeProvider:
    """Discovery, keys and a token endpoint that returns `next_id_token` (set by the test)."""

    def __init__(self, jwks: dict, issuer_override: str | None = None, end_session: bool = True):
        self.jwks = jwks
        self.next_id_token: str | None = None
        self.token_requests: list[dict] = []
        provider = self

        class Handler(BaseHTTPRequestHandler):
            def _json(self, data, status=200):
                body = json.dumps(data).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def do_GET(self):  # noqa: N802
                path = urlparse(self.path).path
                if path == "/.well-known/openid-configuration":
                    data = {
                        "issuer": issuer_override or provider.url,
                        "authorization_endpoint": f"{provider.url}/authorize",
                        "token_endpoint": f"{provider.url}/token",
                        "jwks_uri": f"{provider.url}/jwks",
                        "userinfo_endpoint": f"{provider.url}/userinfo",
                        "response_types_supported": ["code"],
                        "id_token_signing_alg_values_supported": ["RS256"],
                        "code_challenge_methods_supported": ["S256"],
                    }
                    if end_session:
                        data["end_session_endpoint"] = f"{provider.url}/logout"
                    self._json(data)
                elif path == "/jwks":
                    self._json(provider.jwks)
                elif path == "/userinfo":
                    self._json({})
                else:
                    self._json({"error": "not_found"}, 404)

            def do_POST(self):  # noqa: N802
                length = int(self.headers.get("Content-Length", 0))
                form = {k: v[0] for k, v in parse_qs(self.rfile.read(length).decode()).items()}
                form["authorization"] = self.headers.get("Authorization", "")
                provider.token_requests.append(form)
                self._json({"access_token": "access-token", "token_type": "Bearer", "expires_in": 300,
                            "id_token": provider.next_id_token})

            def log_message(self, *args):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def stop(self):
        self.server.shutdown()
