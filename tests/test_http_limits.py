"""HTTP mode's resource bounds, against the real Bolt app on loopback: a body is never read past
its limit whatever Content-Length says, idle connections are dropped, and a flood of them neither
exhausts descriptors nor silences /healthz."""

from __future__ import annotations

import socket
import threading
import time

import pytest
from slack_bolt import App

from bot.slack import http as http_mod
from bot.slack.http import make_server, serve_in_thread


@pytest.fixture
def server(monkeypatch):
    monkeypatch.setattr(http_mod, "IDLE_TIMEOUT", 1.0)
    app = App(token="xoxb-test", signing_secret="s" * 32, token_verification_enabled=False)
    srv = make_server(app, "127.0.0.1", 0)
    srv.RequestHandlerClass.timeout = 1.0
    serve_in_thread(srv)
    yield srv
    srv.shutdown()
    srv.server_close()


def status_of(sock: socket.socket) -> bytes:
    sock.settimeout(5)
    data = b""
    while b"\r\n" not in data:
        chunk = sock.recv(256)
        if not chunk:
            break
        data += chunk
    return data.split(b"\r\n", 1)[0]


def healthz(port: int) -> bytes:
    with socket.create_connection(("127.0.0.1", port), timeout=5) as s:
        s.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
        return status_of(s)


@pytest.mark.parametrize("header, want", [
    (b"Content-Length: -1\r\n", b"400"),
    (b"Content-Length: 1e9\r\n", b"400"),
    (b"Transfer-Encoding: chunked\r\n", b"411"),
    (b"", b"411"),
    (b"Content-Length: 99999999\r\n", b"413"),
])
def test_a_body_is_never_read_past_the_limit(server, header, want):
    port = server.server_address[1]
    with socket.create_connection(("127.0.0.1", port)) as s:
        s.sendall(b"POST /slack/events HTTP/1.1\r\nHost: x\r\nContent-Type: application/x-www-form-urlencoded\r\n"
                  + header + b"\r\n")
        started = time.monotonic()
        try:  # the server answers without waiting for (or reading) the body, then closes
            for _ in range(64):
                s.sendall(b"a" * (1 << 16))
        except OSError:
            pass
        assert status_of(s).split(b" ")[1] == want
        assert time.monotonic() - started < 5
    assert healthz(port).split(b" ")[1] == b"200"


@pytest.mark.parametrize("ctype, body", [
    ("application/json", b"{not json"),
    ("application/x-www-form-urlencoded", b"payload=%7Bnot%20json"),
    ("application/json", b"[1,2]"),
    ("application/json", b'"x"'),
    ("application/json", b"{" + b'"a":{' * 5000 + b"}" * 5001),
])
def test_a_malformed_body_gets_400_not_a_dropped_connection(server, ctype, body):
    port = server.server_address[1]
    with socket.create_connection(("127.0.0.1", port)) as s:
        s.sendall(b"POST /slack/events HTTP/1.1\r\nHost: x\r\nContent-Type: " + ctype.encode()
                  + b"\r\nContent-Length: " + str(len(body)).encode() + b"\r\n\r\n" + body)
        assert status_of(s).split(b" ")[1] == b"400"
    assert healthz(port).split(b" ")[1] == b"200"


@pytest.mark.parametrize("head", [b"GET /healthz\r\n", b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03" + b"\x00" * 100])
def test_an_http_0_9_or_garbage_request_gets_a_400_status_line(server, head):
    with socket.create_connection(("127.0.0.1", server.server_address[1])) as s:
        s.sendall(head)
        s.shutdown(socket.SHUT_WR)
        assert status_of(s).startswith(b"HTTP/1.1 400 ")


def test_idle_connections_are_dropped_and_healthz_keeps_answering(server):
    port = server.server_address[1]
    idle = [socket.create_connection(("127.0.0.1", port)) for _ in range(300)]
    try:
        started = time.monotonic()
        assert healthz(port).split(b" ")[1] == b"200"
        assert time.monotonic() - started < 2
        # a connection that never sends its request is closed after the idle timeout
        idle[0].settimeout(5)
        assert idle[0].recv(16) == b""
    finally:
        for s in idle:
            s.close()


def test_at_the_cap_the_oldest_slow_client_makes_room(monkeypatch):
    monkeypatch.setattr(http_mod, "MAX_CONNECTIONS", 20)
    app = App(token="xoxb-test", signing_secret="s" * 32, token_verification_enabled=False)
    srv = make_server(app, "127.0.0.1", 0)
    assert srv.max_connections == 20
    serve_in_thread(srv)
    port = srv.server_address[1]
    held = [socket.create_connection(("127.0.0.1", port)) for _ in range(20)]
    try:
        for s in held:  # slowloris: a request head that trickles in and never ends
            s.sendall(b"GET /healthz HTTP/1.1\r\n")
        time.sleep(0.3)
        started = time.monotonic()
        assert healthz(port).split(b" ")[1] == b"200"  # a real request still gets in
        assert time.monotonic() - started < 3
        dropped = 0  # a slow client (the oldest to register) was dropped to make room
        for s in held:
            s.settimeout(0.2)
            try:
                dropped += s.recv(16) == b""
            except (socket.timeout, TimeoutError):
                pass
            except OSError:
                dropped += 1
        assert dropped >= 1
        assert threading.active_count() < 60
    finally:
        for s in held:
            s.close()
        srv.shutdown()
        srv.server_close()


def test_a_head_that_trickles_in_is_cut_at_the_deadline(server, monkeypatch):
    monkeypatch.setattr(http_mod, "HEADER_DEADLINE", 1.0)
    port = server.server_address[1]
    with socket.create_connection(("127.0.0.1", port)) as s:
        started = time.monotonic()
        s.settimeout(0.5)
        closed = False
        while time.monotonic() - started < 6:
            try:
                s.sendall(b"X")  # one byte at a time, each well inside the idle timeout
                if s.recv(16) == b"":
                    closed = True
                    break
            except socket.timeout:
                continue
            except OSError:
                closed = True
                break
        assert closed and time.monotonic() - started < 4


def test_a_request_failing_the_signature_check_is_logged_without_its_body(caplog):
    from slack_bolt import BoltRequest

    from bot.slack.app import _quiet_bolt_bodies

    _quiet_bolt_bodies()
    app = App(token="xoxb-test", signing_secret="s" * 32, token_verification_enabled=False)
    with caplog.at_level("INFO", logger="slack_bolt.RequestVerification"):
        resp = app.dispatch(BoltRequest(body="token=xoxb-SECRET-TOKEN&text=password%3Dhunter2",
                                        headers={"x-slack-signature": ["v0=bad"], "x-slack-request-timestamp": ["1"]}))
    assert resp.status == 401
    said = "\n".join(r.getMessage() for r in caplog.records)
    assert "Invalid request signature" in said and "body not logged" in said
    assert "SECRET" not in said and "hunter2" not in said


def test_a_replayed_signed_request_runs_once():
    """The same signed request three times (an attacker replaying it within Slack's five minutes, or
    a retry of what was already acked): it is acknowledged each time and run once."""
    import urllib.request

    from slack_fakes import signed_headers

    from slack_bolt.authorization import AuthorizeResult

    secret = "8f742231b10e8888abcd99yyyzzz85a5"

    def authorize(**_kw):  # one workspace, no Web API call (nothing to reach here)
        return AuthorizeResult(enterprise_id=None, team_id="T1", bot_token="xoxb-test", bot_id="B1",
                               bot_user_id="UBOT")

    app = App(signing_secret=secret, authorize=authorize)
    runs = []

    @app.command("/diagnose")
    def on_command(ack, command):
        ack()
        runs.append(command["text"])

    srv = make_server(app, "127.0.0.1", 0)
    serve_in_thread(srv)
    url = f"http://127.0.0.1:{srv.server_address[1]}/slack/events"
    body = b"command=%2Fdiagnose&text=job-123&team_id=T1&user_id=U1&channel_id=C1&response_url=http%3A%2F%2F127.0.0.1%3A1%2F"
    headers = {**signed_headers(secret, body), "Content-Type": "application/x-www-form-urlencoded"}
    try:
        codes = []
        for _ in range(3):
            req = urllib.request.Request(url, data=body, headers=headers, method="POST")
            with urllib.request.urlopen(req, timeout=10) as resp:
                codes.append(resp.status)
        assert codes == [200, 200, 200] and runs == ["job-123"]
        # a request that fails the signature check is not remembered: it cannot block the real one
        bad = {**headers, "X-Slack-Signature": "v0=" + "0" * 64}
        req = urllib.request.Request(url, data=body, headers=bad, method="POST")
        try:
            urllib.request.urlopen(req, timeout=10)
        except urllib.error.HTTPError as exc:
            assert exc.code == 401
    finally:
        srv.shutdown()
        srv.server_close()
