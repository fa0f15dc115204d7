"""An uploaded file is fetched with the bot token; a redirect to another host must not carry it."""

from __future__ import annotations

import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from bot.slack.config import SlackConfig
from bot.slack.listeners import download

TOKEN = "xoxb-REDIRECT-TOKEN-MARKER"


def serve(handler) -> ThreadingHTTPServer:
    srv = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    return srv


@pytest.fixture
def servers():
    """``target`` records the Authorization header it gets; ``origin`` redirects /away to the
    target (another host: another port) and /here to its own /file."""
    seen: list[str | None] = []

    class Target(BaseHTTPRequestHandler):
        def log_message(self, *a):
            pass

        def do_GET(self):
            seen.append(self.headers.get("Authorization"))
            self.send_response(200)
            self.send_header("Content-Length", "5")
            self.end_headers()
            self.wfile.write(b"hello")

    target = serve(Target)

    class Origin(Target):
        def do_GET(self):
            if self.path == "/file":
                return super().do_GET()
            where = f"http://127.0.0.1:{target.server_address[1]}/x" if self.path == "/away" else "/file"
            self.send_response(302)
            self.send_header("Location", where)
            self.send_header("Content-Length", "0")
            self.end_headers()

    origin = serve(Origin)
    yield f"http://127.0.0.1:{origin.server_address[1]}", seen
    for srv in (origin, target):
        srv.shutdown()
        srv.server_close()


class Ctx:
    cfg = SlackConfig(bot_token=TOKEN)


def client_for(url: str):
    class Client:
        def files_info(self, file):
            return {"file": {"name": "x.log", "size": 5, "url_private_download": url}}

    return Client()


def test_the_token_does_not_follow_a_redirect_to_another_host(servers, tmp_path):
    base, seen = servers
    assert download(Ctx(), client_for(base + "/away"), "F1", tmp_path).read_bytes() == b"hello"
    assert seen == [None]


def test_the_token_follows_a_redirect_on_the_same_host(servers, tmp_path):
    base, seen = servers
    assert download(Ctx(), client_for(base + "/here"), "F1", tmp_path).read_bytes() == b"hello"
    assert seen == [f"Bearer {TOKEN}"]
