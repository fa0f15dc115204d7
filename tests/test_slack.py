"""The real Bolt app over signed HTTP (and Socket Mode) against a loopback Slack Web API."""

import gzip
import json
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest
import yaml
from slack_sdk.models.blocks import Block

from bot.slack.app import create_app
from bot.slack.config import SlackConfig
from bot.slack.http import make_server, serve_in_thread
from corpus_eval import CORPUS
from slack_fakes import (APP_TOKEN, BOT_TOKEN, app_mention_event, event_body, interactive_body,
                         message_action_payload, signed_headers, slash_body)

ROOT = Path(__file__).resolve().parent.parent
SECRET = "8f742231b10e8888abcd99yyyzzz85a5"
ECC_LOG = ROOT / "tests" / "corpus" / "gpu-hardware" / "kohya-sdxl-ecc-nccl-watchdog.log"


@pytest.fixture
def bot(slack_api, engine, tmp_path, cluster):
    """The Bolt app in HTTP mode on loopback, its Web API pointed at the fake."""
    env = {"SLACK_BOT_TOKEN": BOT_TOKEN, "SLACK_SIGNING_SECRET": SECRET, "SLACK_API_URL": slack_api.url,
           "GPU_TRIAGE_COLLECT_CHANNELS": "COPS", "GPU_TRIAGE_COLLECT_USERS": "UADMIN",
           "GPU_TRIAGE_COLLECT_GROUPS": "SGPU", "GPU_TRIAGE_SSH_CONFIG": str(cluster.ssh_config),
           "GPU_TRIAGE_DATA_DIR": str(tmp_path / "data"), "GPU_TRIAGE_MAX_UPLOAD_MB": "1"}
    cfg = SlackConfig.from_env(env, http=True)
    app, ctx = create_app(cfg, engine=engine, http=True)
    server = make_server(app, "127.0.0.1", 0)
    serve_in_thread(server)
    url = f"http://127.0.0.1:{server.server_address[1]}/slack/events"
    yield type("Bot", (), {"url": url, "ctx": ctx, "app": app})
    server.shutdown()
    ctx.pool.shutdown(wait=True, cancel_futures=True)


def post(url: str, body: str, *, secret: str = SECRET, content_type: str = "application/x-www-form-urlencoded"):
    data = body.encode() if isinstance(body, str) else body
    headers = {**signed_headers(secret, data), "Content-Type": content_type}
    req = urllib.request.Request(url, data=data, headers=headers, method="POST")
    started = time.perf_counter()
    try:
        with urllib.request.urlopen(req, timeout=10) as resp:
            return resp.status, resp.read().decode(), time.perf_counter() - started
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode(), time.perf_counter() - started


def blocks_valid(blocks):
    assert 0 < len(blocks) <= 50
    for b in blocks:
        Block.parse(b).validate_json()


def test_bad_signature_is_refused(bot, slack_api):
    status, _, _ = post(bot.url, slash_body(text="job-123", user_id="UADMIN", channel_id="COPS"),
                        secret="not-the-secret")
    assert status == 401
    time.sleep(0.3)
    assert not slack_api.calls("chat.postMessage") and not slack_api.calls("chat.postEphemeral")


def test_pasted_traceback_by_slash_command(bot, slack_api):
    text = ECC_LOG.read_text()
    status, body, secs = post(bot.url, slash_body(text=text, user_id="U1", channel_id="CGEN",
                                                  response_url=slack_api.response_url(1)))
    assert status == 200 and secs < 3
    reply = slack_api.wait_for_response(timeout=20)
    blocks_valid(reply["blocks"])
    assert "ECC" in json.dumps(reply["blocks"]) and reply.get("response_type") == "in_channel"


def test_unauthorised_collection_is_refused_politely(bot, slack_api, cluster):
    before = len(cluster.calls("node02")) if (cluster.node("node02").dir / "calls.log").exists() else 0
    status, _, _ = post(bot.url, slash_body(text="node02", user_id="UINTRUDER", channel_id="COPS"))
    assert status == 200
    eph = slack_api.wait_for("chat.postEphemeral", timeout=10)[0]
    assert eph.params["user"] == "UINTRUDER" and "not allowed" in eph.params["text"]
    after = len(cluster.calls("node02")) if (cluster.node("node02").dir / "calls.log").exists() else 0
    assert after == before and not slack_api.calls("chat.postMessage")


def test_authorised_collection_posts_progress_and_answers_in_thread(bot, slack_api):
    status, _, secs = post(bot.url, slash_body(text="node02", user_id="UADMIN", channel_id="COPS"))
    assert status == 200 and secs < 3
    posts = slack_api.wait_for("chat.postMessage", count=2, timeout=60)
    progress, answer = posts[0], posts[1].params
    assert answer["thread_ts"] == progress.response["ts"]
    # the first progress message already counts the named node (never "from 0 nodes")
    first = json.dumps(progress.params.get("blocks"))
    assert "Collecting evidence from node02" in first and "0 nodes" not in first
    blocks = json.loads(answer["blocks"]) if isinstance(answer["blocks"], str) else answer["blocks"]
    blocks_valid(blocks)
    assert "79" in json.dumps(blocks) and "node02" in json.dumps(blocks)
    assert slack_api.calls("chat.update")


def test_group_member_may_collect(bot, slack_api):
    slack_api.set_usergroup("SGPU", ["UGROUPIE"])
    post(bot.url, slash_body(text="node01", user_id="UGROUPIE", channel_id="COPS"))
    assert len(slack_api.wait_for("chat.postMessage", count=2, timeout=60)) >= 2


def test_mention_with_uploaded_gzip_log(bot, slack_api):
    slack_api.register_file("F1", "rank3.log.gz", gzip.compress(ECC_LOG.read_bytes()), "application/gzip")
    event = {"type": "app_mention", "user": "U1", "channel": "CGEN", "ts": "1700000000.000100",
             "text": "<@UBOT> why did it die?", "files": [{"id": "F1", "name": "rank3.log.gz"}]}
    status, _, _ = post(bot.url, event_body(event), content_type="application/json")
    assert status == 200
    answer = slack_api.wait_for("chat.postMessage", timeout=20)[0].params
    assert answer["thread_ts"] == "1700000000.000100"
    reactions = [c.params["name"] for c in slack_api.wait_for("reactions.add", count=2, timeout=10)]
    assert reactions == ["mag", "white_check_mark"]


def test_upload_over_the_cap_is_refused_with_the_setting_named(bot, slack_api):
    slack_api.register_file("F2", "huge.log", b"x" * (2 * 1024 * 1024), "text/plain")
    event = {"type": "app_mention", "user": "U1", "channel": "CGEN", "ts": "1700000000.000200",
             "text": "<@UBOT>", "files": [{"id": "F2", "name": "huge.log"}]}
    post(bot.url, event_body(event), content_type="application/json")
    msg = slack_api.wait_for("chat.postMessage", timeout=20)[0].params
    assert "GPU_TRIAGE_MAX_UPLOAD_MB" in msg["text"]


def test_secrets_in_a_paste_are_not_echoed_or_stored(bot, slack_api):
    token = "ghp_" + "a1B2c3D4e5F6g7H8i9J0k1L2m3N4o5P6q7R8"
    event = {"type": "message", "channel_type": "im", "user": "U1", "channel": "D1", "ts": "1700000000.000300",
             "text": f"export GITHUB_TOKEN={token}\n" + ECC_LOG.read_text()}
    post(bot.url, event_body(event), content_type="application/json")
    slack_api.wait_for("chat.postMessage", timeout=20)
    assert token not in json.dumps([c.params for c in slack_api.calls()], default=str)
    db = bot.ctx.runbook.db
    assert token not in json.dumps([dict(r) for r in db["incidents"].rows])


def test_buttons_feedback_report_and_modal(bot, slack_api):
    event = {"type": "message", "channel_type": "im", "user": "U1", "channel": "D1", "ts": "1700000000.000400",
             "text": ECC_LOG.read_text()}
    post(bot.url, event_body(event), content_type="application/json")
    answer = slack_api.wait_for("chat.postMessage", timeout=20)[0]
    blocks = answer.params["blocks"]
    blocks = json.loads(blocks) if isinstance(blocks, str) else blocks
    buttons = {e["action_id"]: e for b in blocks if b["type"] == "actions" for e in b["elements"]}
    assert {"feedback_confirm", "feedback_reject", "add_runbook", "full_report"} <= set(buttons)
    msg = {"ts": answer.response["ts"], "thread_ts": "1700000000.000400"}

    def click(action_id):
        payload = {"type": "block_actions", "user": {"id": "U1"}, "channel": {"id": "D1"}, "trigger_id": "T1",
                   "message": msg, "actions": [{"action_id": action_id, "value": buttons[action_id]["value"],
                                                "block_id": "b", "type": "button"}]}
        return post(bot.url, interactive_body(payload))

    assert click("feedback_confirm")[0] == 200
    slack_api.wait_for("chat.postEphemeral", timeout=10)
    incident = buttons["feedback_confirm"]["value"].split(":")[0]
    assert bot.ctx.runbook.feedback(incident)[0]["verdict"] == "confirmed"
    assert click("full_report")[0] == 200
    slack_api.wait_for("files.completeUploadExternal", timeout=10)
    assert click("add_runbook")[0] == 200
    view = slack_api.wait_for("views.open", timeout=10)[0].params["view"]
    view = json.loads(view) if isinstance(view, str) else view
    assert view["callback_id"] == "add_runbook" and view["private_metadata"] == incident
    state = {"values": {"b1": {"title": {"type": "plain_text_input", "value": "GPU ECC on gpu07"}}}}
    submit = {"type": "view_submission", "user": {"id": "U1"},
              "view": {**view, "id": "V1", "state": state}}
    assert post(bot.url, interactive_body(submit))[0] == 200
    deadline = time.time() + 10
    while time.time() < deadline and not bot.ctx.runbook.drafts():
        time.sleep(0.1)
    assert bot.ctx.runbook.drafts()[0]["entry"]["title"] == "GPU ECC on gpu07"


def test_chinese_locale_and_app_home(bot, slack_api):
    slack_api.add_user("UZH", "li.wei", locale="zh-CN")
    event = {"type": "message", "channel_type": "im", "user": "UZH", "channel": "D2", "ts": "1700000000.000500",
             "text": ECC_LOG.read_text()}
    post(bot.url, event_body(event), content_type="application/json")
    answer = slack_api.wait_for("chat.postMessage", timeout=20)[0].params
    assert any("\u4e00" <= ch <= "\u9fff" for ch in json.dumps(answer["blocks"], ensure_ascii=False))
    post(bot.url, event_body({"type": "app_home_opened", "user": "UZH", "tab": "home"}),
         content_type="application/json")
    view = slack_api.wait_for("views.publish", timeout=10)[0].params["view"]
    view = json.loads(view) if isinstance(view, str) else view
    assert view["type"] == "home" and len(view["blocks"]) >= 2


def test_rides_out_429_and_500(bot, slack_api):
    slack_api.fail("chat.postMessage", times=1, status=429, retry_after=0)
    slack_api.fail("chat.postMessage", times=1, status=500)
    event = {"type": "message", "channel_type": "im", "user": "U1", "channel": "D3", "ts": "1700000000.000600",
             "text": ECC_LOG.read_text()}
    post(bot.url, event_body(event), content_type="application/json")
    ok = slack_api.wait_for("chat.postMessage", count=3, timeout=30)
    assert [c.status for c in ok][:2] == [429, 500] and ok[-1].status == 200


def test_big_upload_does_not_delay_other_users(bot, slack_api):
    big = (CORPUS / "communication").glob("*.log")
    data = b"".join(p.read_bytes() for p in big)
    blob = (data * (30 * 1024 * 1024 // len(data) + 1))[:30 * 1024 * 1024]
    bot.ctx.cfg.max_upload_bytes = 64 * 1024 * 1024
    slack_api.register_file("F30", "all-ranks.log", blob, "text/plain")
    mention = {"type": "app_mention", "user": "U1", "channel": "CGEN", "ts": "1700000000.000700",
               "text": "<@UBOT>", "files": [{"id": "F30", "name": "all-ranks.log"}]}
    post(bot.url, event_body(mention), content_type="application/json")
    time.sleep(0.2)
    status, _, secs = post(bot.url, slash_body(text=ECC_LOG.read_text(), user_id="U2", channel_id="CGEN",
                                               response_url=slack_api.response_url(2)))
    assert status == 200 and secs < 1.5
    slack_api.wait_for_response(timeout=20)  # the small paste is answered while the 30 MB log is still parsing
    assert slack_api.wait_for("chat.postMessage", timeout=120)


def test_message_shortcut_answers_in_that_messages_thread(bot, slack_api):
    payload = message_action_payload(message_text=ECC_LOG.read_text(), message_ts="1700000000.000800",
                                     user_id="U1", channel_id="CGEN")
    status, _, secs = post(bot.url, interactive_body(payload))
    assert status == 200 and secs < 3
    answer = slack_api.wait_for("chat.postMessage", timeout=20)[0].params
    assert answer["thread_ts"] == "1700000000.000800" and "ECC" in json.dumps(answer["blocks"])


def test_manifest_matches_the_listeners():
    manifest = yaml.safe_load((ROOT / "deploy" / "slack-manifest.yaml").read_text())
    assert [c["command"] for c in manifest["features"]["slash_commands"]] == ["/diagnose", "/runbook"]
    assert [s["callback_id"] for s in manifest["features"]["shortcuts"]] == ["diagnose_message"]
    assert set(manifest["settings"]["event_subscriptions"]["bot_events"]) == {"app_mention", "message.im",
                                                                               "app_home_opened"}
    assert manifest["settings"]["socket_mode_enabled"] is True


def test_socket_mode_end_to_end(slack_api, socket_mode, engine, tmp_path):
    from slack_bolt.adapter.socket_mode import SocketModeHandler

    env = {"SLACK_BOT_TOKEN": BOT_TOKEN, "SLACK_APP_TOKEN": APP_TOKEN, "SLACK_API_URL": slack_api.url,
           "GPU_TRIAGE_DATA_DIR": str(tmp_path / "data")}
    app, ctx = create_app(SlackConfig.from_env(env), engine=engine)
    handler = SocketModeHandler(app, APP_TOKEN, web_client=app.client)
    handler.connect()
    try:
        envelope = socket_mode.send_slash(json.loads(json.dumps(
            {"command": "/diagnose", "text": ECC_LOG.read_text(), "user_id": "U1", "channel_id": "CGEN",
             "response_url": slack_api.response_url(9), "trigger_id": "T9", "team_id": "T0"})))
        ack = socket_mode.wait_ack(envelope, timeout=10)
        assert ack is not None and ack.seconds < 3
        reply = slack_api.wait_for_response(timeout=20)
        blocks_valid(reply["blocks"])
        # events_api: a mention with a pasted log, answered in its thread
        event = app_mention_event(text="<@UBOT> " + ECC_LOG.read_text(), user="U1", channel="CGEN",
                                  ts="1700000000.000900")
        assert socket_mode.wait_ack(socket_mode.send_event(event), timeout=10) is not None
        answer = slack_api.wait_for("chat.postMessage", timeout=20)[0].params
        assert answer["thread_ts"] == "1700000000.000900"
        # interactive: the message shortcut
        shortcut = message_action_payload(message_text=ECC_LOG.read_text(), message_ts="1700000000.001000",
                                          user_id="U1", channel_id="CGEN")
        assert socket_mode.wait_ack(socket_mode.send_interactive(shortcut), timeout=10) is not None
        answers = slack_api.wait_for("chat.postMessage", count=2, timeout=20)
        assert answers[1].params["thread_ts"] == "1700000000.001000"
    finally:
        handler.close()
        ctx.pool.shutdown(wait=False, cancel_futures=True)


def test_missing_tokens_fail_with_the_variable_named():
    import pytest as _pytest

    from bot.slack.config import ConfigError

    with _pytest.raises(ConfigError, match="SLACK_BOT_TOKEN"):
        SlackConfig.from_env({})
    with _pytest.raises(ConfigError, match="SLACK_APP_TOKEN"):
        SlackConfig.from_env({"SLACK_BOT_TOKEN": "xoxb-1"})
    with _pytest.raises(ConfigError, match="SLACK_SIGNING_SECRET"):
        SlackConfig.from_env({"SLACK_BOT_TOKEN": "xoxb-1"}, http=True)


def test_runbook_slash_command_searches_and_shows_an_entry(bot, slack_api):
    def ask(text, n):
        status, _, secs = post(bot.url, slash_body(command="/runbook", text=text, user_id="U1", channel_id="CGEN",
                                                   response_url=slack_api.response_url(n)))
        assert status == 200 and secs < 3
        params = slack_api.wait_for(f"response.{n}", timeout=20)[0].params
        reply = {k: json.loads(v) if k == "blocks" and isinstance(v, str) else v for k, v in params.items()}
        assert reply.get("response_type") == "ephemeral"
        return reply

    hits = ask("search watchdog timeout", 21)
    blocks_valid(hits["blocks"])
    assert "nccl-watchdog-timeout" in json.dumps(hits["blocks"])
    entry = ask("xid-79-fallen-off-bus", 22)
    blocks_valid(entry["blocks"])
    assert entry["blocks"][0]["type"] == "header" and "XID 79" in json.dumps(entry["blocks"])
    assert "/runbook search" in ask("", 23)["text"]
    too_long = ask("search " + " ".join(f"w{i}" for i in range(1000)), 24)
    assert too_long["text"].startswith("A search takes at most 32 words")
