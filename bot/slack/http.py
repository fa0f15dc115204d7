"""HTTP mode: a threaded server that hands Slack's signed requests to the Bolt app.

Bolt verifies ``X-Slack-Signature`` (SLACK_SIGNING_SECRET) before any listener runs; a request
with a bad signature gets 401 and nothing else happens. ``/healthz`` answers 200 for probes and
``/metrics`` serves the Prometheus text of :mod:`bot.metrics`.
"""

from __future__ import annotations

import socket
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import urlparse

from slack_bolt import App, BoltRequest

EVENTS_PATH = "/slack/events"
MAX_BODY = 4 * 1024 * 1024
IDLE_TIMEOUT = 10.0  # seconds a connection may sit without sending its request (slow clients, half-open)
HEADER_DEADLINE = 10.0  # seconds to send the whole request head, however slowly it trickles in
MAX_CONNECTIONS = 2048  # connections served at once (a thread each); more are closed on arrival
FD_HEADROOM = 128  # descriptors kept free for the database, logs, SSH and Slack's Web API


def _connection_cap() -> int:
    """Raise the soft descriptor limit to the hard one (up to 65 536) and serve at most that many
    connections minus headroom, so a flood of idle connections can neither exhaust descriptors
    (an accept loop spinning on EMFILE) nor starve /healthz."""
    try:
        import resource

        soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        want = hard if hard != resource.RLIM_INFINITY else 65536
        want = min(want, 65536)
        if soft != resource.RLIM_INFINITY and soft < want:
            resource.setrlimit(resource.RLIMIT_NOFILE, (want, hard))
            soft = want
    except (ImportError, ValueError, OSError):
        soft = 1024
    return max(16, min(MAX_CONNECTIONS, int(soft) - FD_HEADROOM))


class _Replays:
    """Signatures of verified requests for Slack's five-minute window: a request signed the same
    way again is a replay. Bounded: the oldest are forgotten first."""

    WINDOW = 300.0
    MAX = 100_000

    def __init__(self) -> None:
        self._seen: dict[str, float] = {}
        self._lock = threading.Lock()

    def seen(self, signature: str) -> bool:
        now = time.monotonic()
        with self._lock:
            t = self._seen.get(signature)
            return t is not None and now - t < self.WINDOW

    def add(self, signature: str) -> None:
        now = time.monotonic()
        with self._lock:
            self._seen[signature] = now
            if len(self._seen) > self.MAX:
                for key in list(self._seen)[: len(self._seen) - self.MAX]:
                    del self._seen[key]
            while self._seen:
                oldest = next(iter(self._seen))
                if now - self._seen[oldest] < self.WINDOW:
                    break
                del self._seen[oldest]


def make_server(app: App, host: str = "127.0.0.1", port: int = 3000) -> ThreadingHTTPServer:
    replays = _Replays()

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"
        timeout = IDLE_TIMEOUT  # socket timeout: a connection that stops sending is dropped

        def log_message(self, *args) -> None:  # the app logs what matters
            pass

        def setup(self) -> None:
            super().setup()
            self.server.pending_add(self.connection)

        # an error before the version is read (a TLS hello, a garbage line) still gets a status line
        default_request_version = "HTTP/1.0"

        def parse_request(self) -> bool:
            ok = super().parse_request()
            self.server.pending_done(self.connection)  # the head is in: no longer a slow client
            self.close_connection = True  # one request per connection: no idle keep-alive to hold
            if ok and len(self.requestline.split()) == 2:  # "GET /healthz": HTTP/0.9, no status line
                self.send_error(400, "HTTP/0.9 is not supported")
                return False
            return ok

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
            raw = (self.headers.get("Content-Length") or "").strip()
            if self.headers.get("Transfer-Encoding") or not raw:
                self.close_connection = True
                self._send(411, b"a Content-Length is required\n", {"Content-Type": "text/plain"})
                return
            if not raw.isdigit():  # "-1", "1e9", " 12, 13": never read to the end of the stream
                self.close_connection = True
                self._send(400, b"bad Content-Length\n", {"Content-Type": "text/plain"})
                return
            length = int(raw)
            if length > MAX_BODY:
                self.close_connection = True
                self._send(413, b"request too large\n", {"Content-Type": "text/plain"})
                return
            body = self.rfile.read(length).decode("utf-8", "replace")
            headers = {k.lower(): [v] for k, v in self.headers.items()}
            signature = self.headers.get("X-Slack-Signature") or ""
            if signature and replays.seen(signature):
                # the same signed request again (a replay, or Slack retrying what was already acked):
                # acknowledged, not run twice
                self._send(200, b"", {"Content-Type": "text/plain"})
                return
            try:  # Bolt parses JSON and form payloads as it builds the request
                request = BoltRequest(body=body, query=parsed.query, headers=headers)
                malformed = not isinstance(request.body, dict)
            except (ValueError, TypeError, AttributeError, RecursionError):
                malformed = True
            if malformed:  # "{not json", "payload=%7Bnot", a JSON list, 5 000 levels deep: no traceback
                self._send(400, b"malformed body: Slack sends a JSON object or a form\n",
                           {"Content-Type": "text/plain"})
                return
            response = app.dispatch(request)
            if signature and response.status != 401:
                replays.add(signature)  # only requests Bolt verified are remembered
            self._send(response.status, (response.body or "").encode("utf-8"), response.headers)

    server = _Server((host, port), Handler)
    return server


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    request_queue_size = 256  # http.server's default backlog of 5 resets bursts of Slack retries

    def __init__(self, *args, **kwargs):
        self.max_connections = _connection_cap()
        self._slots = threading.BoundedSemaphore(self.max_connections)
        self._pending: dict[int, tuple[float, object]] = {}  # connections still sending their head
        self._lock = threading.Lock()
        super().__init__(*args, **kwargs)
        threading.Thread(target=self._reap, name="gpu-triage-http-reaper", daemon=True).start()

    # -- slow and idle clients ------------------------------------------------------------------
    def pending_add(self, sock) -> None:
        with self._lock:
            self._pending[id(sock)] = (time.monotonic(), sock)

    def pending_done(self, sock) -> None:
        with self._lock:
            self._pending.pop(id(sock), None)

    def _drop(self, sock) -> None:
        try:
            sock.shutdown(socket.SHUT_RDWR)  # its handler thread sees EOF, ends and frees the slot
        except OSError:
            pass

    def _evict_oldest(self) -> bool:
        with self._lock:
            if not self._pending:
                return False
            key = next(iter(self._pending))
            _, sock = self._pending.pop(key)
        self._drop(sock)
        return True

    def _reap(self) -> None:
        while True:
            time.sleep(0.5)
            now = time.monotonic()
            with self._lock:
                late = [k for k, (t, _) in self._pending.items() if now - t > HEADER_DEADLINE]
                socks = [self._pending.pop(k)[1] for k in late]
            for sock in socks:
                self._drop(sock)

    # -- a bounded number of connections --------------------------------------------------------
    def process_request(self, request, client_address):
        # at the cap, the oldest connection still trickling its head in makes room (a slowloris
        # flood churns itself; a real request, /healthz included, gets in); with none to evict the
        # new one is closed, never left to exhaust threads or descriptors
        if not self._slots.acquire(blocking=False):
            if not (self._evict_oldest() and self._slots.acquire(timeout=1.0)):
                self.shutdown_request(request)
                return
        try:
            super().process_request(request, client_address)
        except BaseException:
            self._slots.release()
            raise

    def handle_error(self, request, client_address):
        import sys

        if isinstance(sys.exc_info()[1], (ConnectionError, TimeoutError)):
            return  # a client that went away (or was dropped as a slow one): nothing to report
        super().handle_error(request, client_address)

    def process_request_thread(self, request, client_address):
        try:
            super().process_request_thread(request, client_address)
        finally:
            self.pending_done(request)
            self._slots.release()


def serve_in_thread(server: ThreadingHTTPServer) -> threading.Thread:
    thread = threading.Thread(target=server.serve_forever, name="gpu-triage-http", daemon=True)
    thread.start()
    return thread
