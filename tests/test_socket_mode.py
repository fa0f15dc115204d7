"""Socket Mode across Slack's routine reconnects (issue 16) and a quiet start (issue 14).

The real Bolt app with the bot's listeners talks to the loopback WebSocket stand-in
(``slack_fakes.FakeSocketMode``: real frames, its URL handed out by the loopback Web API's
apps.connections.open). Each case cuts the connection the way a network does, or sends one of
Slack's ``disconnect`` envelopes, then sends an event that must be acked within Slack's 3 s.
CPU is the process's own (user + system, all threads) over a wait window: a client that spins on
a dead socket uses a whole core there (slack_sdk's built-in client: 99 %).
"""

from __future__ import annotations

import json
import logging
import os
import re
import resource
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from bot import metrics
from bot.slack.app import create_app
from bot.slack.config import SlackConfig
from bot.slack.socket_mode import SocketModeError, SocketModeHandler
from slack_fakes import APP_TOKEN, BOT_TOKEN, FakeSocketMode, app_home_opened_event

ROOT = Path(__file__).resolve().parent.parent
ACK_DEADLINE = 3.0          # Slack's
WINDOW = 3.0                # seconds of CPU accounting after a cut
MAX_CPU_SHARE = 0.25        # of one core over the window; a spinning client is near 1.0


def _cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


@pytest.fixture
def socket_mode(slack_api):
    """The stand-in without server pings (conftest's pings every 0.5 s): Slack pings far less often
    (bolt-js waits 30 s for one: slackapi/bolt-js#2496), and a client must read a fresh socket
    without a ping waking up its old one (slack_sdk's built-in client does not)."""
    with FakeSocketMode(ping_interval=None) as server:
        yield server.attach(slack_api)


@pytest.fixture
def bot(slack_api, socket_mode, engine, tmp_path):
    """start(**client_options) -> a connected SocketModeHandler for the bot's real app."""
    metrics.reset()
    env = {"SLACK_BOT_TOKEN": BOT_TOKEN, "SLACK_APP_TOKEN": APP_TOKEN, "SLACK_API_URL": slack_api.url,
           "GPU_TRIAGE_DATA_DIR": str(tmp_path / "data")}
    app, ctx = create_app(SlackConfig.from_env(env), engine=engine)
    handlers: list[SocketModeHandler] = []

    def start(**options) -> SocketModeHandler:
        handler = SocketModeHandler(app, APP_TOKEN, web_client=app.client, **options)
        handlers.append(handler)
        handler.connect()
        socket_mode.wait_connected(1, timeout=10)
        # the first event on a fresh app also warms Bolt up; it must be in time as well
        assert socket_mode.wait_ack(socket_mode.send_event(app_home_opened_event()), timeout=10).seconds \
            < ACK_DEADLINE
        return handler

    yield start
    for handler in handlers:
        handler.close()
    ctx.pool.shutdown(wait=False, cancel_futures=True)
    metrics.reset()


def _ack_now(socket_mode) -> float:
    return socket_mode.wait_ack(socket_mode.send_event(app_home_opened_event()), timeout=10).seconds


@pytest.mark.parametrize("how, options, reconnect_within", [
    ("fin", {}, 5.0),                                           # read ends at once: no ping needed
    ("reset", {}, 5.0),
    ("stall", {"ping_interval": 1.0, "ping_timeout": 1.0}, 8.0),  # only a missing pong tells
])
def test_a_dead_socket_is_replaced_within_seconds_without_spinning(bot, socket_mode, how, options,
                                                                  reconnect_within):
    bot(**options)
    before = socket_mode.connects
    t0, cpu0 = time.monotonic(), _cpu()
    socket_mode.drop(how)
    socket_mode.wait_connected(before + 1, timeout=15)
    reconnected = socket_mode.hello_times()[-1] - t0
    ack = _ack_now(socket_mode)
    time.sleep(max(0.0, t0 + WINDOW - time.monotonic()))
    used, elapsed = _cpu() - cpu0, time.monotonic() - t0
    assert reconnected < reconnect_within, f"{how}: reconnected after {reconnected:.1f} s"
    assert ack < ACK_DEADLINE, f"{how}: event acked {ack:.2f} s after it was sent"
    assert used < MAX_CPU_SHARE * elapsed, f"{how}: {used:.2f} CPU s in {elapsed:.1f} s"


@pytest.mark.parametrize("reason", ["refresh_requested", "link_disabled", "warning"])
def test_a_disconnect_envelope_moves_to_the_new_socket_at_once(bot, socket_mode, reason):
    bot()
    before = socket_mode.connects
    socket_mode.send_disconnect(reason)
    socket_mode.wait_connected(before + 1, timeout=10)
    ack = _ack_now(socket_mode)             # sent the moment the new connection's hello is out
    assert ack < 1.0, f"{reason}: acked {ack:.2f} s after the event (slack_sdk's built-in client: 3.1 s)"
    # make before break: the old connection is closed by the bot once the new one is open
    deadline = time.monotonic() + 5
    while socket_mode.connections > 1 and time.monotonic() < deadline:
        time.sleep(0.05)
    assert socket_mode.connections == 1
    assert socket_mode.connects == before + 1       # one new connection, no reconnect storm


def test_idle_connection_uses_no_cpu(bot, socket_mode):
    bot()
    time.sleep(0.5)
    t0, cpu0 = time.monotonic(), _cpu()
    time.sleep(WINDOW)
    used, elapsed = _cpu() - cpu0, time.monotonic() - t0
    assert used < 0.1 * elapsed, f"{used:.2f} CPU s while idle for {elapsed:.1f} s"
    assert _ack_now(socket_mode) < ACK_DEADLINE


def _get(url: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(url, timeout=5) as resp:
            return resp.status, resp.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()


def _until(predicate, timeout: float = 10.0):
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value or time.monotonic() > deadline:
            return value
        time.sleep(0.05)


def test_healthz_and_gauge_follow_the_connection(bot, socket_mode, slack_api):
    server = metrics.serve("127.0.0.1", 0)
    base = f"http://127.0.0.1:{server.server_address[1]}"
    try:
        bot(retry_pauses=(0.0, 0.2))
        assert _get(base + "/healthz")[0] == 200
        assert "\ngpu_triage_socket_connected 1\n" in _get(base + "/metrics")[1]

        slack_api.socket_mode_url = None            # apps.connections.open now fails: no way back
        socket_mode.drop("reset")
        assert _until(lambda: _get(base + "/healthz")[0] == 503), "healthz stayed 200 without a connection"
        status, body = _get(base + "/healthz")
        assert status == 503 and "slack-socket-mode" in body and "FAILING" in body
        assert "\ngpu_triage_socket_connected 0\n" in _get(base + "/metrics")[1]

        socket_mode.attach(slack_api)               # Slack is back
        assert _until(lambda: _get(base + "/healthz")[0] == 200), "healthz did not recover"
        assert "\ngpu_triage_socket_connected 1\n" in _get(base + "/metrics")[1]
        assert _ack_now(socket_mode) < ACK_DEADLINE
    finally:
        server.shutdown()


def test_a_refused_app_token_names_the_variable(slack_api, socket_mode, engine, tmp_path):
    env = {"SLACK_BOT_TOKEN": BOT_TOKEN, "SLACK_APP_TOKEN": APP_TOKEN, "SLACK_API_URL": slack_api.url,
           "GPU_TRIAGE_DATA_DIR": str(tmp_path / "data")}
    app, ctx = create_app(SlackConfig.from_env(env), engine=engine)
    handler = SocketModeHandler(app, "xapp-1-not-this-apps-token", web_client=app.client, on_state=None)
    try:
        with pytest.raises(SocketModeError, match="SLACK_APP_TOKEN.*invalid_auth"):
            handler.connect()
    finally:
        handler.close()
        ctx.pool.shutdown(wait=False, cancel_futures=True)
    assert socket_mode.connects == 0


def test_create_app_gives_bolt_no_second_token(slack_api, engine, tmp_path, monkeypatch, caplog):
    """Issue 14: Bolt read SLACK_BOT_TOKEN from the environment beside our client and warned."""
    monkeypatch.setenv("SLACK_BOT_TOKEN", BOT_TOKEN)
    monkeypatch.setenv("SLACK_APP_TOKEN", APP_TOKEN)
    env = {"SLACK_BOT_TOKEN": BOT_TOKEN, "SLACK_APP_TOKEN": APP_TOKEN, "SLACK_API_URL": slack_api.url,
           "GPU_TRIAGE_DATA_DIR": str(tmp_path / "data")}
    with caplog.at_level(logging.DEBUG):
        app, ctx = create_app(SlackConfig.from_env(env), engine=engine)
    ctx.pool.shutdown(wait=False)
    assert not [r for r in caplog.records if "will be unused" in r.getMessage()]
    assert app.client.token == BOT_TOKEN
    # the secrets left the environment: no child process (ssh, scontrol, srun) inherits them
    assert "SLACK_BOT_TOKEN" not in os.environ and "SLACK_APP_TOKEN" not in os.environ


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _serve(slack_api, tmp_path, app_token: str, port: int) -> subprocess.Popen:
    exe = shutil.which("gpu-triage")
    cmd = [exe] if exe else [sys.executable, "-m", "bot.cli"]
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SLACK_", "GPU_TRIAGE_"))}
    env.update({"SLACK_BOT_TOKEN": BOT_TOKEN, "SLACK_APP_TOKEN": app_token, "SLACK_API_URL": slack_api.url,
                "GPU_TRIAGE_DATA_DIR": str(tmp_path / "data"), "GPU_TRIAGE_METRICS_PORT": str(port),
                "GPU_TRIAGE_LOG_FORMAT": "text"})
    return subprocess.Popen(cmd + ["serve"], env=env, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)


def test_serve_connects_quietly_and_reports_health(slack_api, socket_mode, tmp_path):
    port = _free_port()
    proc = _serve(slack_api, tmp_path, APP_TOKEN, port)
    connected = healthy = False
    try:
        try:
            socket_mode.wait_connected(1, timeout=60)
            connected = True
            healthy = _until(lambda: _get(f"http://127.0.0.1:{port}/healthz")[0] == 200, timeout=10)
            ack = _ack_now(socket_mode)
        except TimeoutError:
            ack = None
    finally:
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=20)
    assert connected and healthy, err
    assert ack is not None and ack < ACK_DEADLINE, err
    assert "will be unused" not in err, err
    assert re.search(r"Socket Mode connected", err), err
    assert "Traceback" not in err


def test_serve_with_a_refused_app_token_exits_1_with_the_fix(slack_api, socket_mode, tmp_path):
    proc = _serve(slack_api, tmp_path, "xapp-1-not-this-apps-token", _free_port())
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 1, err
    assert "SLACK_APP_TOKEN" in err and "connections:write" in err
    assert "Traceback" not in err
    assert socket_mode.connects == 0


def test_stand_in_cuts_are_real(socket_mode):
    """The stand-in's cuts reach a plain client as a network's would: EOF, a reset, silence."""
    from websockets.exceptions import ConnectionClosedError
    from websockets.sync.client import connect

    outcomes = {}
    for how in ("fin", "reset", "stall"):
        with connect(socket_mode.issue_url(), ping_interval=None, close_timeout=0.5) as ws:
            assert json.loads(ws.recv(timeout=5))["type"] == "hello"
            socket_mode.drop(how)
            try:
                ws.recv(timeout=2)
                outcomes[how] = "message"
            except ConnectionClosedError as exc:
                outcomes[how] = "no close frame" if exc.rcvd is None else f"close frame {exc.rcvd.code}"
            except TimeoutError:
                outcomes[how] = "silence"
    assert outcomes == {"fin": "no close frame", "reset": "no close frame", "stall": "silence"}
