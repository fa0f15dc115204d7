"""Socket Mode that rides out Slack's routine reconnects (issue 16).

Slack ends every Socket Mode connection now and then: a ``disconnect`` envelope (``warning`` a few
seconds ahead, ``refresh_requested`` every few hours, ``link_disabled`` when the app's Socket Mode
is switched off), or the network ends it without a close frame (a proxy restart or an idle flow
dropped by a load balancer: FIN; a middlebox: RST; a forgotten NAT entry: silence). The clients
shipped with slack_sdk each miss one of these (README, "Socket Mode", has the measurements):
the built-in one spins a core on a FIN and stays deaf about a minute, and reads a refreshed socket
only after the old one's 3 s receive timeout; websocket-client's never notices a silent peer; the
aiohttp one notices a FIN only at its next ping.

This client, on the ``websockets`` library's threaded implementation:

* one thread per connection blocks in ``recv``: nothing polls, an idle bot uses no CPU, and a
  FIN or RST ends the read at once;
* keepalive pings every ``PING_INTERVAL`` s, and a connection whose pong is ``PING_TIMEOUT`` s late
  is given up (the silent case);
* a ``disconnect`` envelope opens the new connection first and closes the old one after the new
  one's ``hello`` (make before break): events are read on the new socket the moment it is open;
* a lost connection is replaced at once, then with growing pauses (``RETRY_PAUSES``) while Slack
  cannot be reached; ``state()`` says whether the bot is connected and since when, for ``/healthz``
  and the ``gpu_triage_socket_connected`` gauge.

It plugs into Bolt like slack_sdk's clients: :class:`SocketModeClient` is a
``BaseSocketModeClient`` (its message queue and request listeners), and :class:`SocketModeHandler`
runs Bolt's own ``run_bolt_app``/``send_response`` for each request.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from queue import Queue
from typing import Any, Callable

from slack_sdk import WebClient
from slack_sdk.socket_mode.client import BaseSocketModeClient

log = logging.getLogger("gpu_triage.slack.socket_mode")

PING_INTERVAL = 5.0      # seconds between keepalive pings
PING_TIMEOUT = 10.0      # a pong later than this: the connection is dead (bolt-js's 5 s gave false
                         # disconnects while Slack recycles its servers: slackapi/bolt-js#2496)
OPEN_TIMEOUT = 10.0      # TCP + TLS + WebSocket handshake + hello
CLOSE_TIMEOUT = 2.0      # waiting for the peer's close frame when we close
RETRY_PAUSES = (0.0, 1.0, 2.0, 5.0, 10.0, 30.0)   # between reconnect attempts; the last one repeats


class SocketModeError(Exception):
    """Slack refused the app-level token (or apps.connections.open failed for good); the message
    names the variable to fix."""


# apps.connections.open errors that no retry can fix
_FATAL = {"invalid_auth", "not_authed", "account_inactive", "token_revoked", "token_expired",
          "missing_scope", "not_allowed_token_type", "invalid_token"}


@dataclass(frozen=True)
class State:
    connected: bool
    since: float            # time.time() since when connected (or not)
    detail: str             # why not connected, or the connection's hello host


class SocketModeClient(BaseSocketModeClient):
    """A Socket Mode client that notices a dead socket within seconds and never polls."""

    def __init__(self, app_token: str, web_client: WebClient, *, logger: logging.Logger | None = None,
                 concurrency: int = 10, ping_interval: float = PING_INTERVAL,
                 ping_timeout: float = PING_TIMEOUT, retry_pauses: tuple[float, ...] = RETRY_PAUSES,
                 on_state: Callable[[State], None] | None = None) -> None:
        self.app_token = app_token
        self.web_client = web_client
        self.logger = logger or log
        self.ping_interval = ping_interval
        self.ping_timeout = ping_timeout
        self.retry_pauses = retry_pauses or (1.0,)
        self.on_state = on_state
        self.message_queue = Queue()
        self.message_listeners = []
        self.socket_mode_request_listeners = []
        self.message_workers = ThreadPoolExecutor(max_workers=concurrency, thread_name_prefix="socket-mode-work")
        self.connect_operation_lock = threading.Lock()
        self.closed = False
        self.wss_uri = None  # type: ignore[assignment]
        self._ws: Any = None                      # the connection events are read from and acks sent on
        self._changed = threading.Condition()
        self._wake = threading.Event()            # the supervisor's doorbell
        self._replace = False                     # a disconnect envelope asked for a new connection
        self._state = State(False, time.time(), "connecting")
        if on_state is not None:
            on_state(self._state)
        self._processor = threading.Thread(target=self.process_messages, name="socket-mode-dispatch",
                                           daemon=True)
        self._supervisor: threading.Thread | None = None
        self._processor.start()

    # -- state ------------------------------------------------------------------------------

    def state(self) -> State:
        with self._changed:
            return self._state

    def is_connected(self) -> bool:
        with self._changed:
            return self._ws is not None

    def _set_state(self, connected: bool, detail: str) -> None:
        with self._changed:
            if self._state.connected == connected and self._state.detail == detail:
                return
            since = time.time() if self._state.connected != connected else self._state.since
            self._state = State(connected, since, detail)
            state = self._state
            self._changed.notify_all()
        if self.on_state is not None:
            try:
                self.on_state(state)
            except Exception:  # noqa: BLE001 - a metrics hook must not break the connection
                self.logger.exception("gpu-triage: Socket Mode state hook failed")

    # -- connecting -------------------------------------------------------------------------

    def connect(self) -> None:
        """Open a connection now (raising when Slack refuses it), then keep one open until close()."""
        with self.connect_operation_lock:
            self._open_and_swap(self.issue_new_wss_url())
        if self._supervisor is None:
            self._supervisor = threading.Thread(target=self._supervise, name="socket-mode-supervisor", daemon=True)
            self._supervisor.start()

    def connect_in_background(self) -> None:
        """Like connect(), but a first failure is retried in the background (transient network
        trouble at start); only a refused token raises."""
        try:
            self.connect()
        except SocketModeError:
            raise
        except Exception as exc:  # noqa: BLE001 - retried by the supervisor
            self.logger.warning("gpu-triage: could not connect to Slack in Socket Mode (%s); retrying", exc)
            self._set_state(False, f"cannot connect: {exc}")
            self._supervisor = threading.Thread(target=self._supervise, name="socket-mode-supervisor", daemon=True)
            self._supervisor.start()
            self._wake.set()

    def issue_new_wss_url(self) -> str:
        from slack_sdk.errors import SlackApiError

        try:
            return super().issue_new_wss_url()
        except SlackApiError as exc:
            error = (exc.response.get("error") if exc.response is not None else None) or "unknown"
            if error in _FATAL:
                raise SocketModeError(f"Slack refused SLACK_APP_TOKEN for Socket Mode ({error}); create an "
                                      "app-level token with connections:write (Basic Information > App-Level "
                                      "Tokens) and enable Socket Mode for the app") from exc
            raise

    def connect_to_new_endpoint(self, force: bool = False) -> None:
        """BaseSocketModeClient's reconnect entry point: handed to the supervisor, never blocking."""
        with self._changed:
            self._replace = self._replace or force
        self._wake.set()

    def _open_and_swap(self, url: str) -> None:
        """Open a connection on its own thread; return once it is greeted and current (raising
        what stopped it otherwise)."""
        opened: Future = Future()
        threading.Thread(target=self._run_connection, args=(url, opened), name="socket-mode-read",
                         daemon=True).start()
        opened.result(timeout=3 * OPEN_TIMEOUT)

    def _run_connection(self, url: str, opened: Future) -> None:
        """One connection's whole life: handshake, hello, swap in, then block in recv until it ends."""
        from websockets.sync.client import connect

        try:
            with connect(url, open_timeout=OPEN_TIMEOUT, close_timeout=CLOSE_TIMEOUT,
                         ping_interval=self.ping_interval, ping_timeout=self.ping_timeout, max_size=2**24,
                         compression=None, proxy=True, logger=self.logger,
                         ssl=self.web_client.ssl if url.startswith("wss:") else None) as ws:
                first = ws.recv(timeout=OPEN_TIMEOUT)
                hello = json.loads(first) if isinstance(first, str) and first.startswith("{") else {}
                if not isinstance(hello, dict) or hello.get("type") != "hello":
                    raise ConnectionError(f"Slack's first Socket Mode message was not hello: {str(first)[:200]}")
                self._swap_in(ws, url, hello)
                opened.set_result(ws)
                self._read(ws)
        except BaseException as exc:  # noqa: BLE001 - reported to the opener, or the connection is over
            if not opened.done():
                opened.set_exception(exc)

    def _swap_in(self, ws: Any, url: str, hello: dict) -> None:
        host = ((hello.get("debug_info") or {}).get("host")) or "slack"
        with self._changed:
            old, self._ws = self._ws, ws
            self._replace = False
            self.wss_uri = url
            self._changed.notify_all()
        self._set_state(True, f"connected to {host}")
        self.logger.info("gpu-triage: Socket Mode connected (%s, %s connection(s))", host,
                         hello.get("num_connections", "?"))
        if old is not None:   # make before break: the old socket closes only now
            threading.Thread(target=old.close, name="socket-mode-close-old", daemon=True).start()

    def _supervise(self) -> None:
        """Keep one connection open: replace a lost one at once, then with growing pauses."""
        attempt = 0
        while not self.closed:
            self._wake.wait()
            self._wake.clear()
            while not self.closed:
                with self._changed:
                    needed = self._ws is None or self._replace
                if not needed:
                    attempt = 0
                    break
                pause = self.retry_pauses[min(attempt, len(self.retry_pauses) - 1)]
                if pause and self._sleep(pause):
                    return
                attempt += 1
                try:
                    with self.connect_operation_lock:
                        self._open_and_swap(self.issue_new_wss_url())
                except Exception as exc:  # noqa: BLE001 - keep trying; the state says why
                    self.logger.warning("gpu-triage: Socket Mode reconnect attempt %d failed: %s", attempt, exc)
                    with self._changed:
                        connected = self._ws is not None
                    if not connected:
                        self._set_state(False, f"reconnecting: {exc}")

    def _sleep(self, seconds: float) -> bool:
        """Wait, waking early on close(); True when closed."""
        with self._changed:
            self._changed.wait_for(lambda: self.closed, timeout=seconds)
        return self.closed

    # -- reading ----------------------------------------------------------------------------

    def _read(self, ws: Any) -> None:
        """Block in recv on one connection until it ends; hand each message to the queue."""
        from websockets.exceptions import ConnectionClosed

        why = "closed"
        try:
            for message in ws:
                if not isinstance(message, str):
                    continue
                reason = _disconnect_reason(message)
                if reason is not None:
                    self.logger.info("gpu-triage: Slack asked for a new Socket Mode connection (%s)%s", reason,
                                     "; if reconnecting fails, Socket Mode was switched off for the app "
                                     "(api.slack.com/apps > Socket Mode)" if reason == "link_disabled" else "")
                    self.connect_to_new_endpoint(force=True)
                    continue
                self.enqueue_message(message)
        except ConnectionClosed as exc:
            why = str(exc) or exc.__class__.__name__
        except Exception as exc:  # noqa: BLE001 - any read failure ends this connection
            why = f"{exc.__class__.__name__}: {exc}"
        with self._changed:
            current = self._ws is ws
            if current:
                self._ws = None
        if current and not self.closed:
            self.logger.warning("gpu-triage: Socket Mode connection lost (%s); reconnecting", why)
            self._set_state(False, f"connection lost: {why}")
            self._wake.set()

    # -- sending ----------------------------------------------------------------------------

    def send_message(self, message: str) -> None:
        """Send on the current connection; if it just died, once more on its replacement (an ack
        still counts within Slack's 3 s)."""
        from websockets.exceptions import ConnectionClosed

        deadline = time.monotonic() + 2.0
        while True:
            with self._changed:
                self._changed.wait_for(lambda: self._ws is not None or self.closed,
                                       timeout=max(0.0, deadline - time.monotonic()))
                ws = self._ws
            if ws is None:
                raise ConnectionError("no Socket Mode connection to send on")
            try:
                ws.send(message)
                return
            except ConnectionClosed:
                with self._changed:
                    if self._ws is ws:
                        self._ws = None
                if time.monotonic() >= deadline:
                    raise
                self._wake.set()

    # -- closing ----------------------------------------------------------------------------

    def disconnect(self) -> None:
        with self._changed:
            ws, self._ws = self._ws, None
        if ws is not None:
            ws.close()

    def close(self) -> None:
        with self._changed:
            self.closed = True
            self._changed.notify_all()
        self._wake.set()
        self.disconnect()
        self._set_state(False, "closed")
        self.message_workers.shutdown(wait=False)


def _disconnect_reason(message: str) -> str | None:
    """The reason of a ``disconnect`` envelope ("" when it gives none); None for anything else."""
    if '"disconnect"' not in message:
        return None
    try:
        doc = json.loads(message)
    except ValueError:
        return None
    if not isinstance(doc, dict) or doc.get("type") != "disconnect":
        return None
    return str(doc.get("reason") or "")


def publish_state(state: State) -> None:
    """The connection's state on ``/metrics`` (gpu_triage_socket_connected) and ``/healthz``."""
    from bot import metrics

    metrics.set_gauge("gpu_triage_socket_connected", 1 if state.connected else 0)
    metrics.set_health("slack-socket-mode", state.connected, state.detail, since=state.since)


class SocketModeHandler:
    """Bolt's Socket Mode handler shape (connect / start / close) over :class:`SocketModeClient`;
    its state is published to /metrics and /healthz unless ``on_state`` says otherwise."""

    def __init__(self, app: Any, app_token: str, *, web_client: WebClient | None = None,
                 on_state: Callable[[State], None] | None = publish_state, **kwargs: Any) -> None:
        self.app = app
        self.client = SocketModeClient(app_token, web_client or app.client, logger=log, on_state=on_state,
                                       **kwargs)
        self.client.socket_mode_request_listeners.append(self.handle)

    def handle(self, client: SocketModeClient, req: Any) -> None:
        from slack_bolt.adapter.socket_mode.internals import run_bolt_app, send_response

        start = time.time()
        send_response(client, req, run_bolt_app(self.app, req), start)

    def connect(self) -> "SocketModeHandler":
        self.client.connect()
        return self

    def start(self) -> None:
        """Connect (retrying in the background unless the token is refused) and serve until killed."""
        self.client.connect_in_background()
        threading.Event().wait()

    def close(self) -> None:
        self.client.close()
