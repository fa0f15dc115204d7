"""pytest fixtures for the Slack side of the integration tests (DESIGN.md, "Real parts in tests").

Loaded from tests/conftest.py with ``from conftest_slack import *  # noqa: F401,F403``.

* ``slack_api``    a started :class:`slack_fakes.FakeSlackAPI` per test (``slack_api.url`` is the
                   WebClient ``base_url``); stopped at the end of the test.
* ``socket_mode``  a started :class:`slack_fakes.FakeSocketMode` per test, attached to ``slack_api``
                   so apps.connections.open (with APP_TOKEN) returns its ws:// URL.
* ``socket_mode_handlers``  a list; append the Bolt ``SocketModeHandler`` objects a test starts
                   and they are closed before the servers go away (no reconnect storm).

Constants: BOT_TOKEN, APP_TOKEN, SIGNING_SECRET, and the fake workspace's ids (TEAM_ID,
BOT_USER_ID, USER_ID (en-US), ZH_USER_ID (zh-CN), CHANNEL_ID, IM_CHANNEL_ID, ...).
"""

from __future__ import annotations

import pytest

from slack_fakes import (
    API_APP_ID,
    APP_TOKEN,
    BOT_ID,
    BOT_TOKEN,
    BOT_USER_ID,
    CHANNEL_ID,
    IM_CHANNEL_ID,
    SIGNING_SECRET,
    TEAM_ID,
    USER_ID,
    ZH_USER_ID,
    FakeSlackAPI,
    FakeSocketMode,
)

__all__ = [
    "slack_api", "socket_mode", "socket_mode_handlers",
    "BOT_TOKEN", "APP_TOKEN", "SIGNING_SECRET", "TEAM_ID", "API_APP_ID", "BOT_USER_ID", "BOT_ID",
    "USER_ID", "ZH_USER_ID", "CHANNEL_ID", "IM_CHANNEL_ID",
]


@pytest.fixture
def slack_api():
    api = FakeSlackAPI(bot_token=BOT_TOKEN, app_token=APP_TOKEN).start()
    try:
        yield api
    finally:
        api.stop()


@pytest.fixture
def socket_mode(slack_api):
    server = FakeSocketMode(app_id=API_APP_ID).start().attach(slack_api)
    try:
        yield server
    finally:
        slack_api.socket_mode_url = None
        server.stop()


@pytest.fixture
def socket_mode_handlers():
    handlers: list = []
    try:
        yield handlers
    finally:
        for handler in reversed(handlers):
            handler.close()
