"""HTTP mode: a threaded server that hands Slack's signed requests to the Bolt app.

Bolt verifies ``X-Slack-Signature`` (SLACK_SIGNING_SECRET) before any listener runs; a request
with a bad signature gets 401 and nothing else happens. ``/healthz`` answers 200 for probes and
``/metrics`` serves the Prometheus text of :mod:`bot.metrics`.
"""

from __future__ import annotations

import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import urlparse

from slack_bolt import App, BoltRequest

EVENTS_PATH = "/slack/events"
MAX_BODY = 4 * 1024 * 1024


def make_server(app: App, host: str = "127.0.0.1", port: int = 3000) -> ThreadingHTTPServer:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *args) -> None:  # the app logs what matters
            pass

        def _send(self, status: int, body: bytes, headers: dict | None = None) -> None:
            self.send_response(status)
            for key, values in (headers or {}).items():
                for value in values if isinstance(values, list) else [values]:
                    self.send_header(key, value)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def do_GET(self) -> None:  # noqa: N802 - http.server's naming
            path = urlparse(self.path).path
            if path == "/healthz":
                self._send(200, b"ok\n", {"Content-Type": "text/plain"})
            elif path == "/metrics":
                from bot import metrics

                self._send(200, metrics.render().encode("utf-8"), {"Content-Type": metrics.CONTENT_TYPE})
            else:
                self._send(404, b"not found\n", {"Content-Type": "text/plain"})

        def do_POST(self) -> None:  # noqa: N802
            parsed = urlparse(self.path)
            if parsed.path != EVENTS_PATH:
                self._send(404, b"not found\n", {"Content-Type": "text/plain"})
                return
            length = int(self.headers.get("Content-Length") or 0)
            if length > MAX_BODY:
                self._send(413, b"request too large\n", {"Content-Type": "text/plain"})
                return
            body = self.rfile.read(length).decode("utf-8", "replace")
            headers = {k.lower(): [v] for k, v in self.headers.items()}
            response = app.dispatch(BoltRequest(body=body, query=parsed.query, headers=headers))
            self._send(response.status, (response.body or "").encode("utf-8"), response.headers)

    server = _Server((host, port), Handler)
    return server


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    request_queue_size = 256  # http.server's default backlog of 5 resets bursts of Slack retries


def serve_in_thread(server: ThreadingHTTPServer) -> threading.Thread:
    thread = threading.Thread(target=server.serve_forever, name="gpu-triage-http", daemon=True)
    thread.start()
    return thread
