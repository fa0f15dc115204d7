"""Listener callbacks: plain functions. Each acks first, then hands the work to the pool.

Every user-facing string comes from ``bot.messages`` (English and Chinese). Pasted text and files
are parsed by ``collectors.trainlog``, which redacts secrets before anything is echoed or stored.
"""

from __future__ import annotations

import logging
import re
import shutil
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

from slack_sdk import WebClient
from slack_sdk.errors import SlackApiError

from bot.messages import t
from bot.slack.app import BotContext, strip_mentions
from collectors.resolve import ResolveError, expand_hostlist

log = logging.getLogger("gpu_triage.slack")

JOB_RE = re.compile(r"^(?:job-?)?(\d{1,12}(?:_\d{1,9})?)$", re.IGNORECASE)
NODE_TOKEN = re.compile(r"^[A-Za-z][A-Za-z0-9._-]*\d[A-Za-z0-9._\[\],-]*$")
MAX_PASTE = 4 * 1024 * 1024


def register_listeners(app, ctx: BotContext) -> None:
    """Every listener of the bot, in one place."""

    @app.command("/diagnose")
    def _command(ack, body, client, respond):
        on_diagnose_command(ctx, ack, body, client, respond)

    @app.command("/runbook")
    def _runbook_command(ack, body, client, respond):
        ack()
        ctx.submit(on_runbook_command, ctx, client, body, respond)

    @app.event("app_mention")
    def _mention(event, client, ack):
        ack()
        ctx.submit(handle_message, ctx, client, event)

    @app.event("message")
    def _message(event, client, ack):
        ack()
        if event.get("channel_type") == "im" and event.get("subtype") in (None, "file_share") \
                and not event.get("bot_id"):
            ctx.submit(handle_message, ctx, client, event)

    @app.shortcut("diagnose_message")
    def _shortcut(ack, shortcut, client):
        ack()
        message = dict(shortcut.get("message") or {})
        message["channel"] = (shortcut.get("channel") or {}).get("id")
        message["user"] = (shortcut.get("user") or {}).get("id")
        ctx.submit(handle_message, ctx, client, message)

    @app.action("feedback_confirm")
    def _confirm(ack, body, client):
        ack()
        ctx.submit(on_feedback, ctx, client, body, "confirmed")

    @app.action("feedback_reject")
    def _reject(ack, body, client):
        ack()
        ctx.submit(on_feedback, ctx, client, body, "not-it")

    @app.action("full_report")
    def _report(ack, body, client):
        ack()
        ctx.submit(on_full_report, ctx, client, body)

    @app.action("collect_nodes")
    def _collect(ack, body, client):
        ack()
        ctx.submit(on_collect_button, ctx, client, body)

    @app.action("add_runbook")
    def _add_runbook(ack, body, client):
        ack()
        on_add_runbook(ctx, client, body)  # views.open needs the trigger within 3 s: not deferred

    @app.view("add_runbook")
    def _runbook_submit(ack, body, view):
        ack()
        ctx.submit(on_runbook_submit, ctx, body, view)

    @app.event("app_home_opened")
    def _home(event, client, ack):
        ack()
        ctx.submit(publish_home, ctx, client, event.get("user"))


# --- the slash command ---------------------------------------------------------------------------

def classify(text: str) -> tuple[str, str | None]:
    """('job', id) | ('nodes', expression) | ('text', None) for what followed /diagnose."""
    words = text.split()
    if len(words) == 1 and JOB_RE.match(words[0]):
        return "job", JOB_RE.match(words[0]).group(1)
    if words and len(words) <= 64 and all(NODE_TOKEN.match(w) for w in words) and "\n" not in text.strip():
        return "nodes", ",".join(words)
    return "text", None


def on_diagnose_command(ctx: BotContext, ack, body: dict, client: WebClient, respond) -> None:
    lang = ctx.cfg.lang or "en"
    ack(response_type="ephemeral", text=t("slack_ack", lang))
    ctx.submit(run_command, ctx, client, body, respond)


def run_command(ctx: BotContext, client: WebClient, body: dict, respond) -> None:
    user, channel = body.get("user_id"), body.get("channel_id")
    text = (body.get("text") or "").strip()
    lang = ctx.lang_for(client, user)
    if not text:
        respond(response_type="ephemeral", text=t("slack_usage", lang))
        return
    kind, target = classify(text)
    if kind == "text":
        if not ctx.may_diagnose(channel):
            respond(response_type="ephemeral", text=t("slack_not_here", lang))
            return
        doc, incident = diagnose_text(ctx, text, lang, source="slash", user=user, channel=channel)
        reply = _render(doc, incident)
        respond(response_type="in_channel", text=reply.text, blocks=reply.blocks)
        if reply.overflow:
            _upload(client, channel, None, reply.report_markdown, f"gpu-triage-{incident}.md", lang)
        return
    run_collection(ctx, client, user=user, channel=channel, thread_ts=None, lang=lang,
                   job=target if kind == "job" else None, nodes=target if kind == "nodes" else None)


def on_runbook_command(ctx: BotContext, client: WebClient, body: dict, respond) -> None:
    """``/runbook search <words>`` and ``/runbook <id>``: ephemeral, from the knowledge store."""
    from knowledge.store import MAX_SEARCH_WORD, MAX_SEARCH_WORDS, SearchError, Store

    lang = ctx.lang_for(client, body.get("user_id"))
    words = (body.get("text") or "").split()
    if not words:
        respond(response_type="ephemeral", text=t("runbook_usage", lang))
        return
    store = Store(ctx.cfg.data_dir)  # a connection of this worker thread
    try:
        text, blocks = _runbook_reply(store, words, lang)
    except SearchError:  # a pasted log as search words: the limits, in the user's language
        text, blocks = t("runbook_search_too_long", lang, words=MAX_SEARCH_WORDS, chars=MAX_SEARCH_WORD), None
    finally:
        store.conn.close()
    respond(response_type="ephemeral", text=text, blocks=blocks)


def _runbook_reply(store, words: list[str], lang: str):
    from bot.render.blocks import runbook_entry_blocks, runbook_search_blocks

    if words[0].lower() == "search" and len(words) > 1:
        query = " ".join(words[1:])
        return runbook_search_blocks(query, store.search(query, limit=10), lang)
    entry = store.get(words[0].lower()) if len(words) == 1 else None
    if entry is not None:
        return runbook_entry_blocks(entry, lang)
    query = " ".join(words[1:] if words[0].lower() == "search" else words)
    hits = store.search(query, limit=10) if query else []
    return runbook_search_blocks(query, hits, lang) if hits else (t("runbook_no_entry", lang, id=words[0]), None)


# --- collection ----------------------------------------------------------------------------------

def run_collection(ctx: BotContext, client: WebClient, *, user: str | None, channel: str | None,
                   thread_ts: str | None, lang: str, job: str | None = None, nodes: str | None = None) -> None:
    """Collect from the job's nodes with a progress message edited in place, then answer in its thread."""
    from bot.render.blocks import progress_blocks

    if not ctx.may_collect(client, user, channel):
        client.chat_postEphemeral(channel=channel, user=user, text=t("slack_not_allowed", lang))
        return
    status: dict[str, dict[str, str]] = {}
    if nodes and not job:  # named nodes are known before anything connects: count them from the start
        try:
            status = {n: {"node": n, "status": "connecting"} for n in expand_hostlist(nodes)}
        except ResolveError:
            pass  # the collection below says what is wrong with the list
    last = [0.0]
    text, blocks = progress_blocks(job, list(status.values()), lang)
    posted = _post(client, channel=channel, thread_ts=thread_ts, text=text, blocks=blocks)
    ts = posted.get("ts") if posted else None

    def progress(node: str, event: str, detail: str) -> None:
        status[node] = {"node": node, "status": detail if event == "done" else event}
        now = time.monotonic()
        if ts and now - last[0] > 1.0:
            last[0] = now
            txt, blks = progress_blocks(job, list(status.values()), lang)
            _update(client, channel, ts, txt, blks)

    try:
        bundle_path = (ctx.collect or default_collect)(ctx, job=job, nodes=nodes, progress=progress)
    except Exception as exc:  # noqa: BLE001 - resolver/SSH errors become a message in the thread
        _post(client, channel=channel, thread_ts=ts or thread_ts, text=f"{t('slack_collect_failed', lang)}: {exc}")
        return
    from collectors.bundle import read_bundle
    from bot.render import as_dict

    with read_bundle(bundle_path) as bundle:
        diagnosis = ctx.engine.diagnose_bundle(bundle)
    doc = as_dict(diagnosis, lang=lang)
    doc["bundle"] = str(bundle_path)
    incident = ctx.runbook.record_incident(doc, source="collect", user=user, channel=channel)
    if ts:
        txt, blks = progress_blocks(job, doc["nodes"], lang)
        _update(client, channel, ts, txt, blks)
    _reply(ctx, client, channel, ts or thread_ts, doc, incident, lang)


def default_collect(ctx: BotContext, *, job: str | None, nodes: str | None, progress) -> Path:
    """Resolve and collect over SSH with the bot's settings; return the saved bundle."""
    from datetime import datetime

    from bot import investigate as inv
    from collectors.remote import SSHSettings
    from knowledge.store import data_dir

    cfg = ctx.cfg
    settings = SSHSettings(cfg.ssh_config)
    plan = inv.plan(job=job, nodes=nodes, inventory=cfg.inventory, settings=settings, login=cfg.login_node)
    results = inv.run_collection(plan, inv.select_collectors(), settings=settings, login=cfg.login_node,
                                 progress=progress)
    stamp = datetime.now().strftime("%Y%m%d-%H%M%S")
    dest = data_dir(cfg.data_dir) / "bundles" / inv.bundle_name(plan.job, stamp)
    return inv.save(plan, results, dest)


# --- pasted text, mentions, DMs, files, the shortcut ----------------------------------------------

def handle_message(ctx: BotContext, client: WebClient, event: dict) -> None:
    channel, user, ts = event.get("channel"), event.get("user"), event.get("ts")
    thread = event.get("thread_ts") or ts
    lang = ctx.lang_for(client, user)
    if not ctx.may_diagnose(channel):
        return
    _react(client, channel, ts, "mag")
    text = strip_mentions(event.get("text") or "")
    files = event.get("files") or []
    kind, target = classify(text) if not files else ("text", None)
    if kind in ("job", "nodes"):
        run_collection(ctx, client, user=user, channel=channel, thread_ts=thread, lang=lang,
                       job=target if kind == "job" else None, nodes=target if kind == "nodes" else None)
        _react(client, channel, ts, "white_check_mark")
        return
    tmp = Path(tempfile.mkdtemp(prefix="gpu-triage-slack-"))
    try:
        paths: list[str] = []
        for f in files:
            try:
                paths.append(str(download(ctx, client, f["id"], tmp)))
            except UploadError as exc:
                _post(client, channel=channel, thread_ts=thread, text=exc.message(lang))
                return
        if text:
            (tmp / "message.txt").write_text(text[:MAX_PASTE], encoding="utf-8")
            paths.append(str(tmp / "message.txt"))
        if not paths:
            _post(client, channel=channel, thread_ts=thread, text=t("slack_usage", lang))
            return
        doc, incident = diagnose_paths(ctx, paths, lang, source="message", user=user, channel=channel)
        _reply(ctx, client, channel, thread, doc, incident, lang)
        _react(client, channel, ts, "white_check_mark")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def diagnose_text(ctx: BotContext, text: str, lang: str, **meta) -> tuple[dict, str]:
    from bot.render import as_dict
    from collectors.trainlog import InputError

    try:
        diagnosis = ctx.engine.diagnose_text(text[:MAX_PASTE], source="paste")
    except InputError as exc:
        doc = {"causes": [], "findings": [], "first_error": None, "nodes": [], "lang": lang, "warnings": [str(exc)],
               "message": str(exc), "generic_next_steps": [], "confident": False, "stats": {}}
        return doc, ctx.runbook.record_incident(doc, **meta)
    doc = as_dict(diagnosis, lang=lang)
    _hint(doc, diagnosis)
    return doc, ctx.runbook.record_incident(doc, **meta)


def diagnose_paths(ctx: BotContext, paths: list[str], lang: str, **meta) -> tuple[dict, str]:
    from bot.render import as_dict
    from collectors.trainlog import InputError

    try:
        diagnosis = ctx.engine.diagnose_paths(paths)
    except InputError as exc:
        doc = {"causes": [], "findings": [], "first_error": None, "nodes": [], "lang": lang, "warnings": [str(exc)],
               "message": str(exc), "generic_next_steps": [], "confident": False, "stats": {}}
        return doc, ctx.runbook.record_incident(doc, **meta)
    doc = as_dict(diagnosis, lang=lang)
    _hint(doc, diagnosis)
    return doc, ctx.runbook.record_incident(doc, **meta)


def _hint(doc: dict, diagnosis) -> None:
    """Offer "Collect from nodes" when the log names hosts or a Slurm job and nothing was collected."""
    jobs = [f.attrs.get("job") for f in diagnosis.findings if f.kind == "slurm-event" and f.attrs.get("job")]
    hosts = sorted({f.node for f in diagnosis.findings if f.node} |
                   {str(f.attrs["host"]) for f in diagnosis.findings if f.kind == "exit-signal" and f.attrs.get("host")})
    hosts = [h for h in hosts if _collectable(h)]  # never offer what collection would refuse
    if jobs:
        doc["collect_hint"] = f"job {jobs[0]}"
    elif hosts:
        doc["collect_hint"] = " ".join(hosts[:16])


def _collectable(host: str) -> bool:
    """A name (or hostlist) from a log that collection would accept: 'gpu07;id' and
    'gpu[1-100000000000]' are not offered as a button."""
    try:
        return bool(expand_hostlist(host))
    except ResolveError:
        return False


class UploadError(Exception):
    def __init__(self, key: str, **kw: Any):
        self.key, self.kw = key, kw
        super().__init__(key)

    def message(self, lang: str) -> str:
        return t(self.key, lang, **self.kw)


class _TokenStaysOnHost(urllib.request.HTTPRedirectHandler):
    """Follow a redirect, but send the bot token only to the host it was meant for: a file URL that
    redirects elsewhere (or from https to http) gets no Authorization header."""

    def redirect_request(self, req, fp, code, msg, headers, newurl):
        from urllib.parse import urlsplit

        new = super().redirect_request(req, fp, code, msg, headers, newurl)
        old_url, new_url = urlsplit(req.full_url), urlsplit(new.full_url if new is not None else newurl)
        if new is not None and (new_url.hostname != old_url.hostname or new_url.port != old_url.port
                                or (old_url.scheme == "https" and new_url.scheme != "https")):
            new.remove_header("Authorization")
        return new


def download(ctx: BotContext, client: WebClient, file_id: str, dest: Path) -> Path:
    """Stream an uploaded file to disk with the bot token, within the configured size cap."""
    cap = ctx.cfg.max_upload_bytes
    info = client.files_info(file=file_id).get("file") or {}
    name = re.sub(r"[^A-Za-z0-9._-]", "_", info.get("name") or file_id)[:100] or file_id
    if int(info.get("size") or 0) > cap:
        raise UploadError("slack_file_too_big", name=name, mb=cap // (1024 * 1024))
    url = info.get("url_private_download") or info.get("url_private")
    if not url:
        raise UploadError("slack_file_unreadable", name=name)
    req = urllib.request.Request(url, headers={"Authorization": f"Bearer {ctx.cfg.bot_token}"})  # noqa: S310
    target = dest / name
    total = 0
    try:
        opener = urllib.request.build_opener(_TokenStaysOnHost)
        with opener.open(req, timeout=60) as resp, open(target, "wb") as out:
            while True:
                chunk = resp.read(1 << 20)
                if not chunk:
                    break
                total += len(chunk)
                if total > cap:
                    raise UploadError("slack_file_too_big", name=name, mb=cap // (1024 * 1024))
                out.write(chunk)
    except (urllib.error.URLError, OSError) as exc:
        log.warning("gpu-triage: download of %s failed: %s", file_id, exc)
        raise UploadError("slack_file_unreadable", name=name) from exc
    return target


# --- buttons, the modal, App Home -----------------------------------------------------------------

def _action_value(body: dict) -> tuple[str, str]:
    from bot.render.blocks import parse_button_value

    action = (body.get("actions") or [{}])[0]
    incident, cause = parse_button_value(action.get("value") or "")
    return incident or "", cause or ""


def on_feedback(ctx: BotContext, client: WebClient, body: dict, verdict: str) -> None:
    user = (body.get("user") or {}).get("id")
    incident, cause = _action_value(body)
    ctx.runbook.record_feedback(incident, cause, user or "", verdict)
    channel = (body.get("channel") or {}).get("id")
    lang = ctx.lang_for(client, user)
    if channel and user:
        client.chat_postEphemeral(channel=channel, user=user,
                                  text=t("slack_feedback_confirmed" if verdict == "confirmed" else
                                         "slack_feedback_rejected", lang))


def on_full_report(ctx: BotContext, client: WebClient, body: dict) -> None:
    from bot.render.markdown import render as markdown

    user = (body.get("user") or {}).get("id")
    lang = ctx.lang_for(client, user)
    incident, _ = _action_value(body)
    row = ctx.runbook.incident(incident)
    channel = (body.get("channel") or {}).get("id")
    message = body.get("message") or {}
    thread = message.get("thread_ts") or message.get("ts")
    if row is None:
        client.chat_postEphemeral(channel=channel, user=user, text=t("slack_incident_gone", lang))
        return
    doc = row["doc"]
    _upload(client, channel, thread, markdown(doc), f"gpu-triage-{incident}.md", lang)
    bundle = doc.get("bundle")
    if bundle and Path(bundle).is_file():
        try:
            client.files_upload_v2(channel=channel, thread_ts=thread, file=bundle, filename=Path(bundle).name,
                                   title=Path(bundle).name)
        except SlackApiError as exc:
            log.error("gpu-triage: uploading the bundle failed: %s", exc.response.get("error"))


def on_collect_button(ctx: BotContext, client: WebClient, body: dict) -> None:
    user = (body.get("user") or {}).get("id")
    channel = (body.get("channel") or {}).get("id")
    lang = ctx.lang_for(client, user)
    incident, _ = _action_value(body)
    row = ctx.runbook.incident(incident)
    hint = (row or {}).get("doc", {}).get("collect_hint") if row else None
    if not hint:
        client.chat_postEphemeral(channel=channel, user=user, text=t("slack_no_hint", lang))
        return
    message = body.get("message") or {}
    thread = message.get("thread_ts") or message.get("ts")
    job = hint[4:] if hint.startswith("job ") else None
    run_collection(ctx, client, user=user, channel=channel, thread_ts=thread, lang=lang, job=job,
                   nodes=None if job else ",".join(hint.split()))


def on_add_runbook(ctx: BotContext, client: WebClient, body: dict) -> None:
    from bot.render.blocks import runbook_modal, runbook_prefill

    user = (body.get("user") or {}).get("id")
    lang = ctx.cfg.lang or ctx._locales.get(user or "", "en")
    incident, _ = _action_value(body)
    row = ctx.runbook.incident(incident) or {"doc": {}}
    prefill = runbook_prefill(row["doc"], incident)
    client.views_open(trigger_id=body["trigger_id"], view=runbook_modal(prefill, lang))


def on_runbook_submit(ctx: BotContext, body: dict, view: dict) -> None:
    values: dict[str, Any] = {}
    for block_id, block in ((view.get("state") or {}).get("values") or {}).items():
        for action_id, value in block.items():
            values[action_id] = (value.get("value") if "value" in value else
                                 (value.get("selected_option") or {}).get("value"))
    incident = view.get("private_metadata") or ""
    ctx.runbook.add_draft(incident, (body.get("user") or {}).get("id") or "", values)


def publish_home(ctx: BotContext, client: WebClient, user: str | None) -> None:
    from bot.render.blocks import home_view

    if not user:
        return
    lang = ctx.lang_for(client, user)
    view = home_view(ctx.runbook.recent(10), ctx.runbook.top_causes(30), ctx.runbook.size(), lang)
    client.views_publish(user_id=user, view=view)


# --- posting ---------------------------------------------------------------------------------------

def _render(doc: dict, incident: str):
    from bot.render.blocks import render

    return render(doc, incident_id=incident)


def _reply(ctx: BotContext, client: WebClient, channel: str | None, thread: str | None, doc: dict, incident: str,
           lang: str) -> None:
    reply = _render(doc, incident)
    posted = _post(client, channel=channel, thread_ts=thread, text=reply.text, blocks=reply.blocks)
    if posted and posted.get("ts"):
        ctx.runbook.set_message(incident, channel or "", posted["ts"])
    if reply.overflow:
        _upload(client, channel, thread, reply.report_markdown, f"gpu-triage-{incident}.md", lang)


def _post(client: WebClient, **kwargs: Any) -> dict | None:
    """chat.postMessage; a failure is logged with Slack's error code, never dropped silently."""
    try:
        return client.chat_postMessage(**{k: v for k, v in kwargs.items() if v is not None}).data
    except SlackApiError as exc:
        log.error("gpu-triage: chat.postMessage to %s failed: %s", kwargs.get("channel"), exc.response.get("error"))
        return None


def _update(client: WebClient, channel: str | None, ts: str, text: str, blocks: list) -> None:
    try:
        client.chat_update(channel=channel, ts=ts, text=text, blocks=blocks)
    except SlackApiError as exc:
        log.error("gpu-triage: chat.update failed: %s", exc.response.get("error"))


def _react(client: WebClient, channel: str | None, ts: str | None, name: str) -> None:
    if not (channel and ts):
        return
    try:
        client.reactions_add(channel=channel, timestamp=ts, name=name)
    except SlackApiError as exc:
        if exc.response.get("error") != "already_reacted":
            log.warning("gpu-triage: reactions.add %s failed: %s", name, exc.response.get("error"))


def _upload(client: WebClient, channel: str | None, thread: str | None, content: str, filename: str,
            lang: str) -> None:
    try:
        client.files_upload_v2(channel=channel, thread_ts=thread, content=content, filename=filename,
                               title=t("slack_full_report", lang))
    except SlackApiError as exc:
        log.error("gpu-triage: uploading %s failed: %s", filename, exc.response.get("error"))
