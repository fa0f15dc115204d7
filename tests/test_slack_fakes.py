"""The Slack fakes answer real slack_sdk / slack_bolt clients the way Slack does."""

from __future__ import annotations

import json
import logging
import time
import urllib.error
import urllib.request

import pytest
from slack_sdk import WebClient
from slack_sdk.errors import SlackApiError
from slack_sdk.http_retry.builtin_handlers import RateLimitErrorRetryHandler, ServerErrorRetryHandler
from slack_sdk.http_retry.builtin_interval_calculators import FixedValueRetryIntervalCalculator
from slack_sdk.signature import SignatureVerifier
from websockets.exceptions import InvalidStatus
from websockets.sync.client import connect as ws_connect

import slack_fakes as sf
from conftest_slack import APP_TOKEN, BOT_TOKEN, CHANNEL_ID, SIGNING_SECRET, USER_ID, ZH_USER_ID


@pytest.fixture
def client(slack_api):
    return WebClient(token=BOT_TOKEN, base_url=slack_api.url, timeout=10)


def test_post_update_and_thread(client, slack_api):
    posted = client.chat_postMessage(channel=CHANNEL_ID, text="Diagnosing job 4242 …")
    assert posted["channel"] == CHANNEL_ID
    parent = posted["ts"]
    client.chat_postMessage(channel=CHANNEL_ID, thread_ts=parent, text="node02: XID 79",
                            blocks=[{"type": "section", "text": {"type": "mrkdwn", "text": "*XID 79*"}}])
    updated = client.chat_update(channel=CHANNEL_ID, ts=parent, text="Job 4242: GPU fell off the bus")
    assert updated["ts"] == parent

    call = slack_api.last("chat.update")
    assert call.header("Authorization") == f"Bearer {BOT_TOKEN}"
    assert call.params["text"] == "Job 4242: GPU fell off the bus"

    thread = client.conversations_replies(channel=CHANNEL_ID, ts=parent)["messages"]
    assert [m["text"] for m in thread] == ["Job 4242: GPU fell off the bus", "node02: XID 79"]
    assert thread[1]["blocks"][0]["text"]["text"] == "*XID 79*"
    with pytest.raises(SlackApiError) as err:
        client.chat_update(channel=CHANNEL_ID, ts="1.000000", text="x")
    assert err.value.response["error"] == "message_not_found"


def test_users_info_locale_needs_include_locale(client):
    assert client.users_info(user=ZH_USER_ID, include_locale=True)["user"]["locale"] == "zh-CN"
    assert client.users_info(user=USER_ID, include_locale=True)["user"]["locale"] == "en-US"
    assert "locale" not in client.users_info(user=ZH_USER_ID)["user"]


def test_tokens_are_checked(slack_api):
    with pytest.raises(SlackApiError) as err:
        WebClient(token="xoxb-wrong", base_url=slack_api.url).auth_test()
    assert err.value.response["error"] == "invalid_auth"
    with pytest.raises(SlackApiError) as err:
        WebClient(token=BOT_TOKEN, base_url=slack_api.url).apps_connections_open(app_token=BOT_TOKEN)
    assert err.value.response["error"] == "not_allowed_token_type"
    with pytest.raises(SlackApiError) as err:
        WebClient(token=BOT_TOKEN, base_url=slack_api.url).api_call("nope.nothing")
    assert err.value.response["error"] == "unknown_method"
    assert slack_api.calls("nope.nothing")


def test_files_upload_v2(client, slack_api):
    data = b"rank 3: CUDA error: an illegal memory access was encountered\n" * 100
    done = client.files_upload_v2(content=data, filename="diagnosis.txt", title="Diagnosis",
                                  channel=CHANNEL_ID, initial_comment="full report", thread_ts="1.000001")
    file_id = done["file"]["id"]
    assert [c.method for c in slack_api.calls()] == [
        "files.getUploadURLExternal", sf.UPLOAD, "files.completeUploadExternal"]
    assert slack_api.last(sf.UPLOAD).body == data
    assert slack_api.last("files.getUploadURLExternal").params["length"] == str(len(data))
    (uploaded,) = slack_api.uploads()
    assert uploaded.id == file_id and uploaded.title == "Diagnosis"
    assert uploaded.shares == [{"channel": CHANNEL_ID, "thread_ts": "1.000001", "initial_comment": "full report"}]
    assert client.files_info(file=file_id)["file"]["size"] == len(data)


def test_download_needs_bot_token(client, slack_api):
    big = bytes(range(256)) * (3 * 1024 * 1024 // 256 + 7)   # > 3 MiB, many chunks
    slack_api.register_file("F0TRAINLOG", "train.log", big, mimetype="text/plain")
    info = client.files_info(file="F0TRAINLOG")["file"]
    assert (info["name"], info["size"], info["filetype"]) == ("train.log", len(big), "text")
    url = info["url_private_download"]
    assert url.startswith(slack_api.root)

    req = urllib.request.Request(url, headers={"Authorization": f"Bearer {BOT_TOKEN}"})
    with urllib.request.urlopen(req, timeout=10) as resp:
        assert resp.read() == big
    with pytest.raises(urllib.error.HTTPError) as err:
        urllib.request.urlopen(url, timeout=10)
    assert err.value.code == 403
    assert [c.status for c in slack_api.calls(sf.DOWNLOAD)] == [200, 403]


def test_rides_out_one_429_and_one_500(slack_api):
    quick = FixedValueRetryIntervalCalculator(0.05)   # the 500 retry's wait; 429 waits Retry-After + <1 s
    client = WebClient(token=BOT_TOKEN, base_url=slack_api.url,
                       retry_handlers=[RateLimitErrorRetryHandler(max_retry_count=1),
                                       ServerErrorRetryHandler(max_retry_count=1, interval_calculator=quick)])
    slack_api.fail("chat.postMessage", times=1, status=429, retry_after=0)
    assert client.chat_postMessage(channel=CHANNEL_ID, text="after 429")["ok"]
    calls = slack_api.calls("chat.postMessage")
    assert [c.status for c in calls] == [429, 200]
    assert calls[0].response == {"ok": False, "error": "ratelimited"}

    slack_api.fail("chat.update", times=1, status=500)
    assert client.chat_update(channel=CHANNEL_ID, ts=calls[1].response["ts"], text="after 500")["ok"]
    assert [c.status for c in slack_api.calls("chat.update")] == [500, 200]

    slack_api.fail("chat.postMessage", times=2, status=500)
    with pytest.raises(SlackApiError):      # one retry allowed, two failures: the error surfaces
        client.chat_postMessage(channel=CHANNEL_ID, text="x")


def test_views_reactions_usergroups(client, slack_api):
    view = {"type": "modal", "callback_id": "diag", "title": {"type": "plain_text", "text": "Diagnose"},
            "blocks": []}
    opened = client.views_open(trigger_id="1.2.3", view=view)["view"]
    assert opened["id"].startswith("V") and opened["callback_id"] == "diag"
    assert client.views_update(view_id=opened["id"], view=view)["view"]["id"] == opened["id"]
    home = {"type": "home", "blocks": []}
    first = client.views_publish(user_id=USER_ID, view=home)["view"]["id"]
    assert client.views_publish(user_id=USER_ID, view=home)["view"]["id"] == first

    client.reactions_add(channel=CHANNEL_ID, timestamp="1.000001", name="eyes")
    client.reactions_remove(channel=CHANNEL_ID, timestamp="1.000001", name="eyes")
    assert slack_api.reactions[(CHANNEL_ID, "1.000001")] == []

    slack_api.set_usergroup("S0ONCALL", [USER_ID])
    assert client.usergroups_users_list(usergroup="S0ONCALL")["users"] == [USER_ID]
    assert client.conversations_info(channel=CHANNEL_ID)["channel"]["is_member"]
    assert client.chat_postEphemeral(channel=CHANNEL_ID, user=USER_ID, text="only you")["message_ts"]


def test_signed_headers_verify():
    body = sf.slash_body(text="job 4242")
    headers = sf.signed_headers(SIGNING_SECRET, body)
    verifier = SignatureVerifier(SIGNING_SECRET)
    assert verifier.is_valid_request(body, headers)
    assert verifier.is_valid(body.decode(), headers["X-Slack-Request-Timestamp"], headers["X-Slack-Signature"])
    assert not verifier.is_valid_request(body + b"x", headers)
    stale = sf.signed_headers(SIGNING_SECRET, body, timestamp=int(time.time()) - 600)
    assert not verifier.is_valid_request(body, stale)
    assert headers["Content-Type"] == "application/x-www-form-urlencoded"
    event = sf.event_body(sf.app_mention_event())
    assert sf.signed_headers(SIGNING_SECRET, event)["Content-Type"] == "application/json"
    assert json.loads(event)["event"]["type"] == "app_mention"


def test_bolt_socket_mode_slash_command(slack_api, socket_mode, socket_mode_handlers):
    from slack_bolt import App
    from slack_bolt.adapter.socket_mode import SocketModeHandler

    app = App(token=BOT_TOKEN, client=WebClient(token=BOT_TOKEN, base_url=slack_api.url),
              logger=logging.getLogger("test-bolt"))
    seen = []

    @app.command("/diagnose")
    def diagnose(ack, command):
        seen.append(command)
        ack(f"Looking at {command['text']}")

    @app.event("app_mention")
    def mention(event, say):
        say(text="on it", thread_ts=event["ts"])

    handler = SocketModeHandler(app, APP_TOKEN)   # web_client defaults to app.client
    socket_mode_handlers.append(handler)
    started = time.monotonic()
    handler.connect()
    socket_mode.wait_connected(timeout=10)
    connected = time.monotonic() - started
    assert slack_api.last("apps.connections.open").token == APP_TOKEN

    envelope = socket_mode.send_slash(sf.slash_payload(text="job 4242"))
    ack = socket_mode.wait_ack(envelope, timeout=10)
    assert ack.type == "slash_commands"
    assert ack.payload == {"text": "Looking at job 4242"}
    assert seen[0]["user_id"] == USER_ID
    assert ack.seconds < 3, ack.seconds
    print(f"connect {connected * 1000:.0f} ms, slash ack {ack.seconds * 1000:.0f} ms")

    mention_ts = "1700000000.000100"
    envelope = socket_mode.send_event(sf.app_mention_event(ts=mention_ts))
    assert socket_mode.wait_ack(envelope).payload is None
    reply = slack_api.wait_for("chat.postMessage")[0]
    assert reply.params["thread_ts"] == mention_ts
    assert connected < 5, connected


def test_socket_mode_refuses_unknown_ticket_and_reconnects_on_disconnect(slack_api, socket_mode,
                                                                        socket_mode_handlers):
    from slack_sdk.socket_mode import SocketModeClient

    url = socket_mode.issue_url()
    forged = url.split("ticket=")[0] + "ticket=0000&app_id=" + sf.API_APP_ID
    with pytest.raises(InvalidStatus) as refused:
        ws_connect(forged, open_timeout=5).close()
    assert refused.value.response.status_code == 403 and socket_mode.refused == 1

    client = SocketModeClient(app_token=APP_TOKEN, web_client=WebClient(base_url=slack_api.url))
    socket_mode_handlers.append(client)
    client.connect()
    socket_mode.wait_connected(1)
    socket_mode.send_disconnect()
    socket_mode.wait_connected(2)
    assert len(slack_api.calls("apps.connections.open")) == 2


def test_http_mode_payloads_pass_bolt_verification_and_routing(slack_api):
    """Every builder's body, signed, is accepted and routed by a Bolt app in HTTP mode."""
    from slack_bolt import App, BoltRequest

    app = App(signing_secret=SIGNING_SECRET, token=BOT_TOKEN,
              client=WebClient(token=BOT_TOKEN, base_url=slack_api.url))
    hits = []
    app.command("/diagnose")(lambda ack, command: (hits.append(("command", command["text"])), ack()))
    app.event("app_mention")(lambda event: hits.append(("mention", event["text"])))
    app.event("app_home_opened")(lambda event: hits.append(("home", event["tab"])))
    app.event("message")(lambda event: hits.append((event.get("subtype") or "im", event["channel"])))
    app.shortcut("diagnose_message")(lambda ack, shortcut: (hits.append(("shortcut", shortcut["message_ts"])), ack()))
    app.action("rerun")(lambda ack, body: (hits.append(("action", body["actions"][0]["value"])), ack()))
    app.view("diag")(lambda ack, view: (hits.append(("view", view["state"]["values"]["job"]["id"]["value"])), ack()))

    slack_api.register_file("F0LOG", "rank0.log", b"NCCL WARN timeout\n")
    bodies = [
        sf.slash_body(text="job 4242"),
        sf.event_body(sf.app_mention_event(text=f"<@{sf.BOT_USER_ID}> why")),
        sf.event_body(sf.app_home_opened_event()),
        sf.event_body(sf.im_message_event()),
        sf.event_body(sf.file_share_event([sf.file_ref(slack_api, "F0LOG")])),
        sf.interactive_body(sf.message_action_payload(message_ts="1.000002")),
        sf.interactive_body(sf.block_actions_payload("rerun", value="4242")),
        sf.interactive_body(sf.view_submission_payload("diag", {"job": {"id": "4242"}})),
    ]
    for body in bodies:
        resp = app.dispatch(BoltRequest(body=body.decode(), headers=sf.signed_headers(SIGNING_SECRET, body)))
        assert resp.status == 200, (body[:80], resp.body)
    forged = sf.slash_body()
    resp = app.dispatch(BoltRequest(body=forged.decode(), headers=sf.signed_headers("wrong", forged)))
    assert resp.status == 401
    deadline = time.monotonic() + 5
    while len(hits) < len(bodies) and time.monotonic() < deadline:
        time.sleep(0.02)   # events run their listeners on Bolt's thread pool
    assert sorted(hits) == sorted([
        ("command", "job 4242"), ("mention", f"<@{sf.BOT_USER_ID}> why"), ("home", "home"),
        ("im", sf.IM_CHANNEL_ID), ("file_share", sf.IM_CHANNEL_ID), ("shortcut", "1.000002"),
        ("action", "4242"), ("view", "4242")])
