"""A small OpenID Connect provider on loopback, for single sign-on tests: discovery, an
authorization endpoint that signs in whoever `claims` describes (no login form: the test is
the user), a token endpoint that checks the client's secret, the code and its PKCE verifier,
and a userinfo endpoint. What an identity provider does on the wire, nothing more."""

from __future__ import annotations

import base64
import contextlib
import hashlib
import json
import secrets
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlencode, urlsplit

import jwt

CLIENT_ID = "tokvera-site"
CLIENT_SECRET = "provider-secret-for-tests"


class Provider:
    def __init__(self) -> None:
        self.claims: dict = {}
        self.url = ""
        self._codes: dict[str, dict] = {}
        self._tokens: dict[str, dict] = {}
        self.token_requests = 0

    def app(self, name: str = "Acme ID") -> dict:
        """The allauth app settings (settings.SSO_APP) for this provider."""
        return {"provider_id": "sso", "name": name, "client_id": CLIENT_ID,
                "secret": CLIENT_SECRET,
                "settings": {"server_url": self.url, "oauth_pkce_enabled": True}}

    def authorize(self, url: str) -> str:
        """What the provider answers the browser at its authorization URL: the redirect back to
        the site, with a code for the current claims."""
        query = {k: v[0] for k, v in parse_qs(urlsplit(url).query).items()}
        assert query["client_id"] == CLIENT_ID and query["response_type"] == "code"
        code = secrets.token_urlsafe(16)
        self._codes[code] = {"claims": dict(self.claims), "query": query}
        return f"{query['redirect_uri']}?{urlencode({'code': code, 'state': query['state']})}"

    def token(self, form: dict) -> tuple[int, dict]:
        self.token_requests += 1
        if form.get("client_id") != CLIENT_ID or form.get("client_secret") != CLIENT_SECRET:
            return 401, {"error": "invalid_client"}
        grant = self._codes.pop(form.get("code", ""), None)
        if grant is None or grant["query"]["redirect_uri"] != form.get("redirect_uri"):
            return 400, {"error": "invalid_grant"}
        challenge = grant["query"].get("code_challenge")
        if challenge:
            digest = hashlib.sha256(form.get("code_verifier", "").encode()).digest()
            if base64.urlsafe_b64encode(digest).rstrip(b"=").decode() != challenge:
                return 400, {"error": "invalid_grant", "error_description": "PKCE"}
        access = secrets.token_urlsafe(16)
        self._tokens[access] = grant["claims"]
        now = int(time.time())
        id_token = jwt.encode({"iss": self.url, "aud": CLIENT_ID, "iat": now, "exp": now + 300,
                               **grant["claims"]}, "not-checked-over-a-direct-call", "HS256")
        return 200, {"access_token": access, "token_type": "Bearer", "expires_in": 300,
                     "id_token": id_token}

    def userinfo(self, authorization: str) -> tuple[int, dict]:
        claims = self._tokens.get(authorization.removeprefix("Bearer "))
        return (200, claims) if claims is not None else (401, {"error": "invalid_token"})

    def discovery(self) -> dict:
        return {"issuer": self.url, "authorization_endpoint": f"{self.url}/authorize",
                "token_endpoint": f"{self.url}/token", "userinfo_endpoint": f"{self.url}/userinfo",
                "jwks_uri": f"{self.url}/jwks",
                "token_endpoint_auth_methods_supported": ["client_secret_post"]}


@contextlib.contextmanager
def running_provider() -> Iterator[Provider]:
    provider = Provider()

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args: object) -> None:
            pass

        def _answer(self, status: int, body: dict | None = None, location: str = "") -> None:
            self.send_response(status)
            if location:
                self.send_header("Location", location)
            data = json.dumps(body or {}).encode()
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def do_GET(self) -> None:  # noqa: N802 - the handler's API
            path = urlsplit(self.path).path
            if path == "/.well-known/openid-configuration":
                self._answer(200, provider.discovery())
            elif path == "/authorize":
                self._answer(302, location=provider.authorize(self.path))
            elif path == "/userinfo":
                self._answer(*provider.userinfo(self.headers.get("Authorization", "")))
            elif path == "/jwks":
                self._answer(200, {"keys": []})
            else:
                self._answer(404, {"error": "not found"})

        def do_POST(self) -> None:  # noqa: N802
            length = int(self.headers.get("Content-Length") or 0)
            form = {k: v[0] for k, v in parse_qs(self.rfile.read(length).decode()).items()}
            if urlsplit(self.path).path == "/token":
                self._answer(*provider.token(form))
            else:
                self._answer(404, {"error": "not found"})

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    provider.url = f"http://127.0.0.1:{server.server_address[1]}"
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield provider
    finally:
        server.shutdown()
        server.server_close()
