"""``diagnose --post CHANNEL``: post a diagnosis to Slack from outside Slack, once per job and channel.

Several nodes' epilogs fire for one job; they all call ``diagnose --job ID --post CHANNEL``.  The
first to claim (job, channel) in the data directory's SQLite database posts; the others find the
claim and stop before collecting anything.  The claim is one ``INSERT OR IGNORE`` on a primary
key, which SQLite serialises, so exactly one of any number of concurrent processes wins.  A
claim whose holder died before posting (still ``pending`` after :data:`STALE_S`) may be taken
over; a post that fails releases the claim so that a later run can try again.

Deduplication needs every epilog to see the same database: run the hook once per job (Slurm's
``EpilogSlurmctld``), on one host, or with ``GPU_TRIAGE_DATA_DIR`` on a shared local disk.
"""

from __future__ import annotations

import socket
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

TABLE = "posted_jobs"
STALE_S = 1800


class PostError(Exception):
    """Posting failed; the message names Slack's error code and the fix."""


def _db(data_dir: str | None):
    from knowledge.store import data_dir as resolve, open_db

    db = open_db(Path(resolve(data_dir)))
    db.execute(f"""CREATE TABLE IF NOT EXISTS {TABLE} (
        job TEXT NOT NULL, channel TEXT NOT NULL, state TEXT NOT NULL, claimed_at TEXT NOT NULL,
        host TEXT, posted_at TEXT, ts TEXT, PRIMARY KEY (job, channel))""")
    return db


def _now() -> datetime:
    return datetime.now(timezone.utc)


def claim(data_dir: str | None, job: str, channel: str) -> bool:
    """True when this process may post the diagnosis of ``job`` to ``channel`` (it won the claim)."""
    db = _db(data_dir)
    try:
        now = _now()
        cur = db.execute(f"INSERT OR IGNORE INTO {TABLE} (job, channel, state, claimed_at, host) "
                         "VALUES (?, ?, 'pending', ?, ?)", [job, channel, now.isoformat(), socket.gethostname()])
        if cur.rowcount == 1:
            return True
        stale = (now - timedelta(seconds=STALE_S)).isoformat()
        cur = db.execute(f"UPDATE {TABLE} SET claimed_at = ?, host = ? WHERE job = ? AND channel = ? "
                         "AND state = 'pending' AND claimed_at < ?",
                         [now.isoformat(), socket.gethostname(), job, channel, stale])
        return cur.rowcount == 1
    finally:
        db.conn.close()


def done(data_dir: str | None, job: str, channel: str, ts: str | None) -> None:
    db = _db(data_dir)
    try:
        db.execute(f"UPDATE {TABLE} SET state = 'posted', posted_at = ?, ts = ? WHERE job = ? AND channel = ?",
                   [_now().isoformat(), ts, job, channel])
    finally:
        db.conn.close()


def release(data_dir: str | None, job: str, channel: str) -> None:
    db = _db(data_dir)
    try:
        db.execute(f"DELETE FROM {TABLE} WHERE job = ? AND channel = ? AND state = 'pending'", [job, channel])
    finally:
        db.conn.close()


def posted(data_dir: str | None, job: str, channel: str) -> dict[str, Any] | None:
    db = _db(data_dir)
    try:
        rows = list(db.query(f"SELECT * FROM {TABLE} WHERE job = ? AND channel = ?", [job, channel]))
        return rows[0] if rows else None
    finally:
        db.conn.close()


def post_diagnosis(doc: dict[str, Any], channel: str, env=None) -> str | None:
    """chat.postMessage with the bot token (SLACK_BOT_TOKEN; SLACK_API_URL honoured); the full report
    goes into the thread when the reply did not fit.  Returns the message ts."""
    import os

    from slack_sdk.errors import SlackApiError

    from bot.render.blocks import render
    from bot.slack.app import web_client
    from bot.slack.config import SlackConfig

    env = os.environ if env is None else env
    token = env.get("SLACK_BOT_TOKEN", "")
    if not token.startswith("xoxb-"):
        raise PostError("--post needs SLACK_BOT_TOKEN (xoxb-..., the bot token of the gpu-triage Slack app) "
                        "in the environment")
    client = web_client(SlackConfig(bot_token=token, api_url=env.get("SLACK_API_URL") or None))
    reply = render(doc, actions=False)
    try:
        res = client.chat_postMessage(channel=channel, text=reply.text, blocks=reply.blocks, unfurl_links=False)
    except SlackApiError as exc:
        error = exc.response.get("error") if exc.response is not None else str(exc)
        fix = {"channel_not_found": "check the channel ID or name", "not_in_channel": "invite the bot to the channel",
               "invalid_auth": "check SLACK_BOT_TOKEN", "missing_scope": "reinstall the app with chat:write"}
        raise PostError(f"posting to {channel} failed: {error}; {fix.get(error, 'see the Slack API docs')}") from exc
    except OSError as exc:
        raise PostError(f"posting to {channel} failed: cannot reach Slack ({exc}); check SLACK_API_URL / the proxy") \
            from exc
    ts = res.get("ts")
    if reply.overflow:
        try:
            client.files_upload_v2(channel=res.get("channel") or channel, thread_ts=ts,
                                   content=reply.report_markdown, filename=f"gpu-triage-{doc.get('job') or 'report'}.md",
                                   title="gpu-triage full report")
        except SlackApiError:
            pass  # the message is out; the full report stays available through `diagnose --bundle`
    return ts
