"""Loopback stand-ins for Slack, for the integration tests (DESIGN.md, "Real parts in tests").

Nothing here is mocked inside the bot: the bot's own ``slack_sdk.WebClient`` and Bolt's
``SocketModeHandler`` talk HTTP and WebSocket to these servers on 127.0.0.1.

* :class:`FakeSlackAPI`    the Web API (``WebClient(token=..., base_url=api.url)``), file
                           downloads (``url_private_download``) and the v2 upload URL.
* :class:`FakeSocketMode`  a Socket Mode server: ``hello``, envelopes, acks, disconnects and
                           connections cut by FIN, RST or silence.
* :func:`signed_headers`   Slack request signing for the Bolt app in HTTP mode.
* payload builders         ``slash_payload``/``slash_body``, ``event_callback``/``event_body``,
                           ``interactive_body`` and the event and interaction dicts.

Shapes follow Slack's reference pages (slash commands, Events API wrapper, app_mention,
message.im, message/file_share, app_home_opened, shortcuts, block_actions, view_submission,
Socket Mode envelopes) and what slack_sdk 3.48 reads from the responses.
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import itertools
import json
import os
import re
import socket
import struct
import threading
import time
import uuid
from dataclasses import dataclass, field
from email.parser import BytesParser
from email.policy import HTTP as HTTP_POLICY
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, Callable
from urllib.parse import parse_qsl, urlencode, urlsplit

# ---------------------------------------------------------------------------------------------
# The fake workspace
# ---------------------------------------------------------------------------------------------

BOT_TOKEN = "xoxb-test-0000000000-1111111111-gputriagefaketoken"
APP_TOKEN = "xapp-test-1-A0GPUTRIAGE-2222222222-fakeapptoken"
SIGNING_SECRET = "8f742231b10e8888abcd99yyyzzz85a5"

TEAM_ID = "T0GPUTEST"
TEAM_DOMAIN = "gpu-triage-test"
API_APP_ID = "A0GPUTRIAGE"
BOT_USER_ID = "U0GPUBOT"
BOT_ID = "B0GPUBOT"

USER_ID = "U0ALICE"            # locale en-US
ZH_USER_ID = "U0WEI"           # locale zh-CN
CHANNEL_ID = "C0TRAINING"      # a public channel
IM_CHANNEL_ID = "D0ALICEIM"    # the bot's DM with USER_ID

DOWNLOAD = "download"          # calls() name of a file download (GET url_private_download)
UPLOAD = "upload"              # calls() name of a POST to a files.getUploadURLExternal URL

_CHUNK = 64 * 1024


def _json_param(value: Any) -> Any:
    """Form posts carry blocks/attachments/view as JSON strings; JSON posts carry objects."""
    if isinstance(value, str) and value[:1] in ("[", "{"):
        try:
            return json.loads(value)
        except ValueError:
            return value
    return value


def _truthy(value: Any) -> bool:
    return str(value).lower() in ("1", "true", "yes")


_FILETYPES = {
    "txt": "text", "log": "text", "out": "text", "err": "text", "gz": "gzip", "tgz": "gzip",
    "zip": "zip", "json": "json", "yaml": "yaml", "yml": "yaml", "csv": "csv", "png": "png",
    "jpg": "jpg", "jpeg": "jpg", "pdf": "pdf", "md": "markdown", "py": "python", "sh": "shell",
    "tar": "tar",
}


def _filetype_for(name: str) -> str:
    ext = name.rsplit(".", 1)[-1].lower() if "." in name else ""
    return _FILETYPES.get(ext, ext or "binary")


# ---------------------------------------------------------------------------------------------
# Web API
# ---------------------------------------------------------------------------------------------


@dataclass
class Call:
    """One request the fake answered (or refused)."""

    method: str                 # "chat.postMessage", ..., or DOWNLOAD / UPLOAD
    params: dict[str, Any]      # query + form or JSON body, parsed; JSON-string fields left as sent
    headers: dict[str, str]     # as received (case preserved; use header())
    body: bytes
    http_method: str            # "GET" / "POST"
    path: str
    status: int = 200           # the HTTP status answered
    response: dict | None = None  # the JSON answered (None for file bodies)
    at: float = 0.0             # time.monotonic() when received

    def header(self, name: str, default: str | None = None) -> str | None:
        low = name.lower()
        for k, v in self.headers.items():
            if k.lower() == low:
                return v
        return default

    @property
    def token(self) -> str | None:
        auth = self.header("Authorization") or ""
        if auth.startswith("Bearer "):
            return auth[len("Bearer "):]
        return self.params.get("token")


@dataclass
class FakeFile:
    id: str
    name: str
    mimetype: str
    filetype: str
    data: bytes | None = None     # in memory, or
    path: Path | None = None      # streamed from disk (large files)
    title: str = ""
    user: str = USER_ID
    created: int = field(default_factory=lambda: int(time.time()))
    uploaded: bool = True         # False between getUploadURLExternal and the upload POST
    shares: list[dict] = field(default_factory=list)

    @property
    def size(self) -> int:
        return len(self.data) if self.data is not None else self.path.stat().st_size  # type: ignore[union-attr]


class FakeSlackAPI:
    """A threaded HTTP server on 127.0.0.1 that answers like the Slack Web API.

    ``url`` ends in ``/api/`` so ``WebClient(token=BOT_TOKEN, base_url=api.url)`` works as is.
    Tokens are checked like Slack does: none -> ``not_authed``, unknown -> ``invalid_auth``,
    the app-level token anywhere but ``apps.connections.open`` (and the bot token there) ->
    ``not_allowed_token_type``.
    """

    def __init__(self, bot_token: str = BOT_TOKEN, app_token: str = APP_TOKEN) -> None:
        self.bot_token = bot_token
        self.app_token = app_token
        self.socket_mode_url: Callable[[], str] | None = None  # set by FakeSocketMode.attach
        self._lock = threading.Lock()
        self._changed = threading.Condition(self._lock)
        self._calls: list[Call] = []
        self._failures: dict[str, list[tuple[int, int, str]]] = {}
        self._ids = itertools.count(1)
        self._ts_base = int(time.time())
        self._ts_seq = itertools.count(1)
        self._server: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None
        self.users: dict[str, dict] = {}
        self.channels: dict[str, dict] = {}
        self.usergroups: dict[str, list[str]] = {}
        self.files: dict[str, FakeFile] = {}
        self.messages: dict[str, list[dict]] = {}   # channel -> messages (posted and seeded)
        self.ephemerals: list[dict] = []
        self.views: dict[str, dict] = {}
        self.reactions: dict[tuple[str, str], list[str]] = {}
        self._upload_tickets: dict[str, str] = {}   # upload ticket -> file id
        self.add_user(USER_ID, name="alice", real_name="Alice Example", locale="en-US",
                      tz="America/Los_Angeles", tz_offset=-28800)
        self.add_user(ZH_USER_ID, name="wei", real_name="Wei Zhang", locale="zh-CN",
                      tz="Asia/Shanghai", tz_offset=28800)
        self.add_user(BOT_USER_ID, name="gpu-triage", real_name="gpu-triage", is_bot=True)
        self.add_channel(CHANNEL_ID, name="training")
        self.add_channel(IM_CHANNEL_ID, name=USER_ID, is_im=True, user=USER_ID)

    # -- lifecycle --------------------------------------------------------------------------

    def start(self) -> "FakeSlackAPI":
        handler = type("_Handler", (_APIHandler,), {"api": self})
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, kwargs={"poll_interval": 0.05},
                                        name="fake-slack-api", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None
        if self._thread is not None:
            self._thread.join(timeout=5)
            self._thread = None

    def __enter__(self) -> "FakeSlackAPI":
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    @property
    def port(self) -> int:
        assert self._server is not None, "FakeSlackAPI is not started"
        return self._server.server_address[1]

    @property
    def root(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def url(self) -> str:
        """The Web API base URL (``.../api/``), for ``WebClient(base_url=...)``."""
        return f"{self.root}/api/"

    # -- the record -------------------------------------------------------------------------

    def calls(self, method: str | None = None) -> list[Call]:
        with self._lock:
            return [c for c in self._calls if method is None or c.method == method]

    def last(self, method: str) -> Call:
        found = self.calls(method)
        assert found, f"no {method} call; calls so far: {[c.method for c in self.calls()]}"
        return found[-1]

    def wait_for(self, method: str, count: int = 1, timeout: float = 10) -> list[Call]:
        """Block until ``count`` calls of ``method`` were answered; return them all."""
        deadline = time.monotonic() + timeout
        with self._changed:
            while True:
                found = [c for c in self._calls if c.method == method]
                if len(found) >= count:
                    return found
                left = deadline - time.monotonic()
                if left <= 0:
                    seen = [c.method for c in self._calls]
                    raise TimeoutError(f"{len(found)}/{count} {method} calls after {timeout}s; calls so far: {seen}")
                self._changed.wait(left)

    def response_url(self, n: int | str = 1) -> str:
        """A response_url for a slash command or an action; answers land as method ``response.<n>``."""
        return f"{self.url}response.{n}"

    def wait_for_response(self, timeout: float = 10) -> dict[str, Any]:
        """The first reply sent to any response_url (its JSON body), waiting up to ``timeout``."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for call in self.calls():
                if call.method.startswith("response.") and call.params.get("response_type") != "ephemeral":
                    return {k: _json_param(v) for k, v in call.params.items()}
            time.sleep(0.02)
        raise AssertionError(f"no response_url reply within {timeout}s; calls: {[c.method for c in self.calls()]}")

    def reset(self) -> None:
        """Forget the recorded calls and pending failures (the workspace state stays)."""
        with self._lock:
            self._calls.clear()
            self._failures.clear()

    def _record(self, call: Call) -> None:
        with self._changed:
            self._calls.append(call)
            self._changed.notify_all()

    # -- failure injection ------------------------------------------------------------------

    def fail(self, method: str, times: int = 1, status: int = 429, retry_after: int = 1,
             error: str | None = None) -> None:
        """The next ``times`` calls of ``method`` fail.

        status 429: ``{"ok": false, "error": "ratelimited"}`` with ``Retry-After: retry_after``
        (an integer number of seconds; slack_sdk's RateLimitErrorRetryHandler sleeps that plus
        up to 1 s). 500/503: a server error. 200 with ``error``: an ordinary ``ok: false``
        answer (``channel_not_found``, ...). Also works for DOWNLOAD and UPLOAD.
        """
        if error is None:
            error = {429: "ratelimited"}.get(status, "fatal_error" if status >= 500 else "invalid_request")
        with self._lock:
            self._failures.setdefault(method, []).extend([(status, retry_after, error)] * times)

    def _take_failure(self, method: str) -> tuple[int, int, str] | None:
        with self._lock:
            queue = self._failures.get(method)
            return queue.pop(0) if queue else None

    # -- workspace state --------------------------------------------------------------------

    def add_user(self, user_id: str, name: str | None = None, locale: str = "en-US",
                 tz: str = "Europe/London", tz_offset: int = 0, real_name: str | None = None,
                 is_bot: bool = False) -> dict:
        name = name or user_id.lower()
        user = {
            "id": user_id, "team_id": TEAM_ID, "name": name, "deleted": False,
            "real_name": real_name or name, "tz": tz, "tz_label": tz, "tz_offset": tz_offset,
            "locale": locale, "is_bot": is_bot, "is_admin": False, "is_app_user": False,
            "updated": int(time.time()),
            "profile": {"real_name": real_name or name, "display_name": name, "team": TEAM_ID},
        }
        if is_bot:
            user["profile"]["bot_id"] = BOT_ID
        with self._lock:
            self.users[user_id] = user
        return user

    def set_locale(self, user_id: str, locale: str) -> None:
        with self._lock:
            self.users[user_id]["locale"] = locale

    def add_channel(self, channel_id: str, name: str | None = None, is_im: bool = False,
                    is_private: bool = False, is_member: bool = True, user: str | None = None) -> dict:
        channel: dict[str, Any] = {"id": channel_id, "created": int(time.time()), "is_im": is_im,
                                   "is_archived": False, "is_org_shared": False, "context_team_id": TEAM_ID}
        if is_im:
            channel.update({"user": user or USER_ID, "is_user_deleted": False})
        else:
            channel.update({"name": name or channel_id.lower(), "is_channel": not is_private,
                            "is_group": is_private, "is_private": is_private, "is_member": is_member,
                            "is_general": False, "topic": {"value": ""}, "purpose": {"value": ""}})
        with self._lock:
            self.channels[channel_id] = channel
        return channel

    def set_usergroup(self, usergroup_id: str, user_ids: list[str]) -> None:
        with self._lock:
            self.usergroups[usergroup_id] = list(user_ids)

    def register_file(self, file_id: str, name: str, data: bytes | str | os.PathLike,
                      mimetype: str = "text/plain", filetype: str | None = None,
                      user: str = USER_ID, title: str | None = None) -> dict:
        """Make a file known to files.info and downloadable at its ``url_private_download``.

        ``data`` is the content (bytes or str) or a path, streamed from disk when served.
        Returns the files.info ``file`` object.
        """
        if isinstance(data, str):
            data = data.encode()
        f = FakeFile(id=file_id, name=name, mimetype=mimetype, filetype=filetype or _filetype_for(name),
                     data=data if isinstance(data, bytes) else None,
                     path=None if isinstance(data, bytes) else Path(data), title=title or name, user=user)
        with self._lock:
            self.files[file_id] = f
        return self.file_object(file_id)

    def file_bytes(self, file_id: str) -> bytes:
        f = self.files[file_id]
        return f.data if f.data is not None else f.path.read_bytes()  # type: ignore[union-attr]

    def download_url(self, file_id: str) -> str:
        f = self.files[file_id]
        return f"{self.root}/files-pri/{TEAM_ID}-{file_id}/download/{f.name}"

    def file_object(self, file_id: str) -> dict:
        f = self.files[file_id]
        private = f"{self.root}/files-pri/{TEAM_ID}-{file_id}/{f.name}"
        return {
            "id": f.id, "created": f.created, "timestamp": f.created, "name": f.name, "title": f.title,
            "mimetype": f.mimetype, "filetype": f.filetype, "pretty_type": f.filetype.title(),
            "user": f.user, "user_team": TEAM_ID, "mode": "hosted", "editable": False, "is_external": False,
            "external_type": "", "is_public": False, "size": f.size, "url_private": private,
            "url_private_download": self.download_url(file_id),
            "permalink": f"https://{TEAM_DOMAIN}.slack.com/files/{f.user}/{f.id}/{f.name}",
            "channels": sorted({s["channel"] for s in f.shares}), "groups": [], "ims": [],
        }

    def next_ts(self) -> str:
        """A fresh, increasing message timestamp (``"1700000000.000001"``)."""
        return f"{self._ts_base}.{next(self._ts_seq):06d}"

    def add_message(self, channel: str, text: str = "", user: str = USER_ID, ts: str | None = None,
                    thread_ts: str | None = None, files: list[dict] | None = None, **extra: Any) -> str:
        """Seed a message (a user's, say) so conversations.replies returns it; returns its ts."""
        msg: dict[str, Any] = {"type": "message", "user": user, "text": text, "ts": ts or self.next_ts(),
                               "team": TEAM_ID, **extra}
        if thread_ts:
            msg["thread_ts"] = thread_ts
        if files:
            msg["files"] = files
            msg.setdefault("upload", True)
        with self._lock:
            self.messages.setdefault(channel, []).append(msg)
        return msg["ts"]

    def message(self, channel: str, ts: str) -> dict | None:
        with self._lock:
            for m in self.messages.get(channel, []):
                if m["ts"] == ts:
                    return m
        return None

    def uploads(self) -> list[FakeFile]:
        """Files that came in through the v2 upload flow and were completed."""
        with self._lock:
            return [f for f in self.files.values() if f.shares]

    # -- dispatch ---------------------------------------------------------------------------

    def _answer(self, method: str, params: dict[str, Any], token: str | None) -> dict:
        if method.startswith("response."):  # a slash command's response_url: no token, just the reply
            return {"ok": True}
        if token is None:
            return {"ok": False, "error": "not_authed"}
        if token not in (self.bot_token, self.app_token):
            return {"ok": False, "error": "invalid_auth"}
        needs_app_token = method == "apps.connections.open"
        if needs_app_token != (token == self.app_token):
            return {"ok": False, "error": "not_allowed_token_type"}
        handler = getattr(self, "_m_" + method.replace(".", "_"), None)
        if handler is None:
            return {"ok": False, "error": "unknown_method"}
        return handler(params)

    def _new_id(self, prefix: str) -> str:
        return f"{prefix}0{next(self._ids):08d}"

    def _m_auth_test(self, p: dict) -> dict:
        return {"ok": True, "url": f"https://{TEAM_DOMAIN}.slack.com/", "team": "GPU Triage Test",
                "user": "gpu-triage", "team_id": TEAM_ID, "user_id": BOT_USER_ID, "bot_id": BOT_ID,
                "is_enterprise_install": False}

    def _m_users_info(self, p: dict) -> dict:
        with self._lock:
            user = self.users.get(p.get("user", ""))
            user = json.loads(json.dumps(user)) if user else None
        if user is None:
            return {"ok": False, "error": "user_not_found"}
        if not _truthy(p.get("include_locale", False)):
            user.pop("locale")  # as Slack: the locale comes only with include_locale=true
        return {"ok": True, "user": user}

    def _m_conversations_info(self, p: dict) -> dict:
        with self._lock:
            channel = self.channels.get(p.get("channel", ""))
        if channel is None:
            return {"ok": False, "error": "channel_not_found"}
        return {"ok": True, "channel": channel}

    def _m_chat_postMessage(self, p: dict) -> dict:
        channel = p.get("channel")
        if not channel:
            return {"ok": False, "error": "channel_not_found"}
        if not (p.get("text") or p.get("blocks") or p.get("attachments")):
            return {"ok": False, "error": "no_text"}
        msg: dict[str, Any] = {"type": "message", "subtype": "bot_message", "text": p.get("text", ""),
                               "user": BOT_USER_ID, "bot_id": BOT_ID, "app_id": API_APP_ID,
                               "team": TEAM_ID, "ts": self.next_ts()}
        for key in ("blocks", "attachments", "metadata"):
            if key in p:
                msg[key] = _json_param(p[key])
        if p.get("thread_ts"):
            msg["thread_ts"] = p["thread_ts"]
        with self._lock:
            self.messages.setdefault(channel, []).append(msg)
        return {"ok": True, "channel": channel, "ts": msg["ts"], "message": msg}

    def _m_chat_update(self, p: dict) -> dict:
        channel, ts = p.get("channel", ""), p.get("ts", "")
        with self._lock:
            msg = next((m for m in self.messages.get(channel, []) if m["ts"] == ts), None)
            if msg is None:
                return {"ok": False, "error": "message_not_found"}
            if msg.get("user") != BOT_USER_ID:
                return {"ok": False, "error": "cant_update_message"}
            if "text" in p:
                msg["text"] = p["text"]
            for key in ("blocks", "attachments", "metadata"):
                if key in p:
                    msg[key] = _json_param(p[key])
            msg["edited"] = {"user": BOT_USER_ID, "ts": self.next_ts()}
            answer = {"ok": True, "channel": channel, "ts": ts, "text": msg.get("text", ""),
                      "message": dict(msg)}
        return answer

    def _m_chat_postEphemeral(self, p: dict) -> dict:
        if not p.get("channel") or not p.get("user"):
            return {"ok": False, "error": "channel_not_found" if not p.get("channel") else "user_not_in_channel"}
        ts = self.next_ts()
        entry = {k: _json_param(v) for k, v in p.items()}
        entry["message_ts"] = ts
        with self._lock:
            self.ephemerals.append(entry)
        return {"ok": True, "message_ts": ts}

    def _m_chat_getPermalink(self, p: dict) -> dict:
        ts = p.get("message_ts", "").replace(".", "")
        return {"ok": True, "channel": p.get("channel"),
                "permalink": f"https://{TEAM_DOMAIN}.slack.com/archives/{p.get('channel')}/p{ts}"}

    def _reaction(self, p: dict, add: bool) -> dict:
        key = (p.get("channel", ""), p.get("timestamp", ""))
        name = p.get("name", "")
        with self._lock:
            names = self.reactions.setdefault(key, [])
            if add:
                if name in names:
                    return {"ok": False, "error": "already_reacted"}
                names.append(name)
            else:
                if name not in names:
                    return {"ok": False, "error": "no_reaction"}
                names.remove(name)
        return {"ok": True}

    def _m_reactions_add(self, p: dict) -> dict:
        return self._reaction(p, add=True)

    def _m_reactions_remove(self, p: dict) -> dict:
        return self._reaction(p, add=False)

    def _store_view(self, view: Any, view_id: str | None = None, **extra: Any) -> dict:
        view = _json_param(view)
        if not isinstance(view, dict):
            return {"ok": False, "error": "invalid_arguments"}
        stored = dict(view)
        stored.update({"id": view_id or self._new_id("V"), "team_id": TEAM_ID, "app_id": API_APP_ID,
                       "bot_id": BOT_ID, "hash": uuid.uuid4().hex[:16], "state": {"values": {}}, **extra})
        stored.setdefault("private_metadata", "")
        stored.setdefault("callback_id", "")
        with self._lock:
            self.views[stored["id"]] = stored
        return {"ok": True, "view": stored}

    def _m_views_open(self, p: dict) -> dict:
        if not p.get("trigger_id"):
            return {"ok": False, "error": "invalid_trigger_id"}
        return self._store_view(p.get("view"))

    def _m_views_push(self, p: dict) -> dict:
        return self._m_views_open(p)

    def _m_views_publish(self, p: dict) -> dict:
        if not p.get("user_id"):
            return {"ok": False, "error": "invalid_arguments"}
        with self._lock:
            existing = next((v["id"] for v in self.views.values()
                             if v.get("type") == "home" and v.get("user_id") == p["user_id"]), None)
        return self._store_view(p.get("view"), view_id=existing, user_id=p["user_id"])

    def _m_views_update(self, p: dict) -> dict:
        with self._lock:
            view_id = p.get("view_id")
            if not view_id and p.get("external_id"):
                view_id = next((v["id"] for v in self.views.values()
                                if v.get("external_id") == p["external_id"]), None)
            old = self.views.get(view_id or "")
        if old is None:
            return {"ok": False, "error": "not_found"}
        if p.get("hash") and p["hash"] != old["hash"]:
            return {"ok": False, "error": "hash_conflict"}
        return self._store_view(p.get("view"), view_id=old["id"])

    def _m_conversations_replies(self, p: dict) -> dict:
        channel, ts = p.get("channel", ""), p.get("ts", "")
        with self._lock:
            if channel not in self.channels and channel not in self.messages:
                return {"ok": False, "error": "channel_not_found"}
            thread = [dict(m) for m in self.messages.get(channel, [])
                      if m["ts"] == ts or m.get("thread_ts") == ts]
        if not any(m["ts"] == ts for m in thread):
            return {"ok": False, "error": "thread_not_found"}
        thread.sort(key=lambda m: float(m["ts"]))
        replies = [m for m in thread if m["ts"] != ts]
        for m in thread:
            if m["ts"] == ts and replies:
                m.update({"thread_ts": ts, "reply_count": len(replies),
                          "latest_reply": replies[-1]["ts"]})
        limit = int(p.get("limit") or 1000)
        return {"ok": True, "messages": thread[:limit], "has_more": len(thread) > limit,
                "response_metadata": {"next_cursor": ""}}

    def _m_files_info(self, p: dict) -> dict:
        with self._lock:
            known = p.get("file", "") in self.files and self.files[p["file"]].uploaded
        if not known:
            return {"ok": False, "error": "file_not_found"}
        return {"ok": True, "file": self.file_object(p["file"]), "comments": [],
                "response_metadata": {"next_cursor": ""}}

    def _m_files_getUploadURLExternal(self, p: dict) -> dict:
        if not p.get("filename") or not str(p.get("length", "")).isdigit():
            return {"ok": False, "error": "invalid_arguments"}
        file_id = self._new_id("F")
        ticket = uuid.uuid4().hex
        with self._lock:
            self.files[file_id] = FakeFile(id=file_id, name=p["filename"], data=b"", uploaded=False,
                                           mimetype="application/octet-stream",
                                           filetype=_filetype_for(p["filename"]), user=BOT_USER_ID)
            self._upload_tickets[ticket] = file_id
        return {"ok": True, "upload_url": f"{self.root}/upload/v1/{ticket}", "file_id": file_id}

    def _m_files_completeUploadExternal(self, p: dict) -> dict:
        entries = _json_param(p.get("files", "[]"))
        if not isinstance(entries, list) or not entries:
            return {"ok": False, "error": "invalid_arguments"}
        channels = [c for c in (p.get("channel_id"), *(p.get("channels") or "").split(",")) if c]
        out = []
        with self._lock:
            for entry in entries:
                f = self.files.get(entry.get("id", ""))
                if f is None or not f.uploaded:
                    return {"ok": False, "error": "file_not_found"}
                f.title = entry.get("title") or f.name
                for channel in channels:
                    f.shares.append({"channel": channel, "thread_ts": p.get("thread_ts"),
                                     "initial_comment": p.get("initial_comment")})
                if not channels:
                    f.shares.append({"channel": None, "thread_ts": None, "initial_comment": None})
        for entry in entries:
            out.append({k: v for k, v in self.file_object(entry["id"]).items()})
        return {"ok": True, "files": out}

    def _m_usergroups_users_list(self, p: dict) -> dict:
        with self._lock:
            users = self.usergroups.get(p.get("usergroup", ""))
        if users is None:
            return {"ok": False, "error": "no_such_subteam"}
        return {"ok": True, "users": list(users)}

    def _m_apps_connections_open(self, p: dict) -> dict:
        if self.socket_mode_url is None:
            return {"ok": False, "error": "socket_mode_not_running"}  # no FakeSocketMode attached
        return {"ok": True, "url": self.socket_mode_url()}


_DOWNLOAD_PATH = re.compile(r"^/files-pri/[^/]+-(?P<id>F[^/]+)/(?:download/)?(?P<name>[^/]+)$")
_UPLOAD_PATH = re.compile(r"^/upload/v1/(?P<ticket>[0-9a-f]+)$")
_API_PATH = re.compile(r"^/api/(?P<method>[A-Za-z0-9_.]+)$")


class _APIHandler(BaseHTTPRequestHandler):
    api: FakeSlackAPI
    protocol_version = "HTTP/1.1"
    _call: Call | None = None

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002  (quiet)
        pass

    def do_GET(self) -> None:  # noqa: N802
        self._handle()

    def do_POST(self) -> None:  # noqa: N802
        self._handle()

    def _read_body(self) -> bytes:
        length = int(self.headers.get("Content-Length") or 0)
        return self.rfile.read(length) if length else b""

    def _parse(self, body: bytes, query: str) -> dict[str, Any]:
        params: dict[str, Any] = dict(parse_qsl(query, keep_blank_values=True))
        ctype = (self.headers.get("Content-Type") or "").lower()
        if ctype.startswith("application/json"):
            parsed = json.loads(body or b"{}")
            if isinstance(parsed, dict):
                params.update(parsed)
        elif ctype.startswith("multipart/form-data"):
            msg = BytesParser(policy=HTTP_POLICY).parsebytes(
                b"Content-Type: " + self.headers["Content-Type"].encode() + b"\r\n\r\n" + body)
            for part in msg.iter_parts():
                name = part.get_param("name", header="content-disposition")
                payload = part.get_payload(decode=True)
                params[name] = payload if part.get_filename() else payload.decode("utf-8", "replace")
        elif body:
            params.update(parse_qsl(body.decode("utf-8", "replace"), keep_blank_values=True))
        return params

    def _handle(self) -> None:
        api = self.api
        split = urlsplit(self.path)
        body = self._read_body()
        headers = dict(self.headers.items())
        call = Call(method="", params={}, headers=headers, body=body, http_method=self.command,
                    path=split.path, at=time.monotonic())
        self._call = call
        try:
            if m := _API_PATH.match(split.path):
                call.method = m["method"]
                call.params = self._parse(body, split.query)
                self._api_call(call)
            elif m := _DOWNLOAD_PATH.match(split.path):
                call.method = DOWNLOAD
                call.params = {"file": m["id"], "name": m["name"]}
                self._download(call, m["id"])
            elif (m := _UPLOAD_PATH.match(split.path)) and self.command == "POST":
                call.method = UPLOAD
                call.params = {"ticket": m["ticket"]}
                self._upload(call, m["ticket"])
            else:
                call.method = "?" + split.path
                self._send_json(call, {"ok": False, "error": "unknown_method"}, status=404)
        finally:
            self._commit()

    def _commit(self) -> None:
        """Record the call once, before its answer is written: a test that got the answer finds it."""
        call, self._call = self._call, None
        if call is not None:
            self.api._record(call)

    def _send_json(self, call: Call, payload: dict, status: int = 200, headers: dict | None = None) -> None:
        data = json.dumps(payload).encode()
        call.status, call.response = status, payload
        self._commit()
        self.send_response(status)
        self.send_header("Content-Type", "application/json; charset=utf-8")
        self.send_header("Content-Length", str(len(data)))
        for k, v in (headers or {}).items():
            self.send_header(k, v)
        self.end_headers()
        self.wfile.write(data)

    def _injected(self, call: Call) -> bool:
        failure = self.api._take_failure(call.method)
        if failure is None:
            return False
        status, retry_after, error = failure
        extra = {"Retry-After": str(retry_after)} if status == 429 else {}
        self._send_json(call, {"ok": False, "error": error}, status=status, headers=extra)
        return True

    def _api_call(self, call: Call) -> None:
        if self._injected(call):
            return
        answer = self.api._answer(call.method, call.params, call.token)
        self._send_json(call, answer)

    def _download(self, call: Call, file_id: str) -> None:
        if self._injected(call):
            return
        if (self.headers.get("Authorization") or "") != f"Bearer {self.api.bot_token}":
            self._plain(call, HTTPStatus.FORBIDDEN, b"forbidden: send Authorization: Bearer <bot token>\n")
            return
        f = self.api.files.get(file_id)
        if f is None or not f.uploaded:
            self._plain(call, HTTPStatus.NOT_FOUND, b"file not found\n")
            return
        call.status = 200
        self._commit()
        self.send_response(200)
        self.send_header("Content-Type", f.mimetype)
        self.send_header("Content-Length", str(f.size))
        self.send_header("Content-Disposition", f'attachment; filename="{f.name}"')
        self.end_headers()
        try:
            if f.data is not None:
                view = memoryview(f.data)
                for start in range(0, len(view), _CHUNK):
                    self.wfile.write(view[start:start + _CHUNK])
            else:
                with open(f.path, "rb") as fh:  # type: ignore[arg-type]
                    while chunk := fh.read(_CHUNK):
                        self.wfile.write(chunk)
        except (BrokenPipeError, ConnectionResetError):
            call.status = 499  # the client went away mid-body (a size cap, say)

    def _upload(self, call: Call, ticket: str) -> None:
        if self._injected(call):
            return
        with self.api._lock:
            file_id = self.api._upload_tickets.pop(ticket, None)
            f = self.api.files.get(file_id or "")
            if f is not None:
                f.data, f.uploaded = call.body, True
        if f is None:
            self._plain(call, HTTPStatus.NOT_FOUND, b"unknown or used upload URL\n")
            return
        call.params["file"] = file_id
        self._plain(call, HTTPStatus.OK, f"OK - {len(call.body)}".encode())

    def _plain(self, call: Call, status: int, data: bytes) -> None:
        call.status = int(status)
        self._commit()
        self.send_response(status)
        self.send_header("Content-Type", "text/plain; charset=utf-8")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)


# ---------------------------------------------------------------------------------------------
# Socket Mode
# ---------------------------------------------------------------------------------------------


@dataclass
class Ack:
    envelope_id: str
    type: str                      # the envelope's type: events_api / slash_commands / interactive
    payload: dict | None           # the ack's payload (Bolt's ack(...) body), None for a bare ack
    seconds: float                 # from sending the envelope to receiving its ack
    raw: str


class FakeSocketMode:
    """A ws:// Socket Mode server on 127.0.0.1, in its own thread and event loop.

    ``issue_url()`` hands out a ``ws://127.0.0.1:<port>/link/?ticket=...&app_id=...`` URL
    (``attach(api)`` makes apps.connections.open answer with one). A connection with an
    unknown ticket is refused (HTTP 403). Each connection gets ``hello``; envelopes go to the
    newest open connection; the client's ``{"envelope_id": ..., "payload": ...}`` acks are
    recorded with the time since the envelope was sent. ``send_disconnect(reason)`` asks for a
    new connection as Slack does; ``drop("fin" | "reset" | "stall")`` ends one as a network does.
    """

    def __init__(self, app_id: str = API_APP_ID, ping_interval: float = 0.5) -> None:
        self.app_id = app_id
        # Frequent server pings keep slack_sdk's builtin client responsive: its receive thread
        # holds a lock in a recv() that times out only after 3 s, and close() waits for that lock.
        self.ping_interval = ping_interval
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._server: Any = None
        self._port = 0
        self._tickets: set[str] = set()
        self._lock = threading.Lock()
        self._changed = threading.Condition(self._lock)
        self._connections: list[Any] = []       # open websockets, oldest first
        self._connects = 0
        self._sent: dict[str, tuple[str, float]] = {}   # envelope_id -> (type, monotonic sent)
        self._acks: list[Ack] = []
        self._other: list[str] = []             # client texts that are not acks
        self._hellos: list[float] = []          # monotonic time of each hello sent
        self._stalled: list[Any] = []           # connections drop("stall") left hanging
        self.refused = 0

    # -- lifecycle --------------------------------------------------------------------------

    def start(self) -> "FakeSocketMode":
        ready = threading.Event()
        failure: list[BaseException] = []

        def run() -> None:
            loop = asyncio.new_event_loop()
            self._loop = loop
            asyncio.set_event_loop(loop)
            try:
                loop.run_until_complete(self._serve_start())
            except BaseException as e:  # noqa: BLE001  (reported to start())
                failure.append(e)
                ready.set()
                return
            ready.set()
            loop.run_forever()
            loop.run_until_complete(loop.shutdown_asyncgens())
            loop.close()

        self._thread = threading.Thread(target=run, name="fake-socket-mode", daemon=True)
        self._thread.start()
        ready.wait(10)
        if failure:
            raise failure[0]
        return self

    async def _serve_start(self) -> None:
        from websockets.asyncio.server import serve

        self._server = await serve(self._session, "127.0.0.1", 0, process_request=self._check_ticket,
                                   ping_interval=self.ping_interval, ping_timeout=20, close_timeout=0.5,
                                   compression=None, max_size=2**24)
        self._port = self._server.sockets[0].getsockname()[1]

    def stop(self) -> None:
        """Close every connection (close frame 1001) and stop the server thread."""
        loop = self._loop
        if loop is None:
            return

        async def shutdown() -> None:
            self._server.close(close_connections=True)
            try:
                await asyncio.wait_for(self._server.wait_closed(), 3)
            except asyncio.TimeoutError:
                pass
            rest = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
            for task in rest:
                task.cancel()
            await asyncio.gather(*rest, return_exceptions=True)

        try:
            asyncio.run_coroutine_threadsafe(shutdown(), loop).result(10)
        finally:
            loop.call_soon_threadsafe(loop.stop)
            if self._thread is not None:
                self._thread.join(timeout=5)
            self._loop = None

    def __enter__(self) -> "FakeSocketMode":
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def attach(self, api: FakeSlackAPI) -> "FakeSocketMode":
        """Make ``api``'s apps.connections.open hand out this server's URLs."""
        api.socket_mode_url = self.issue_url
        return self

    @property
    def port(self) -> int:
        return self._port

    def issue_url(self) -> str:
        ticket = uuid.uuid4().hex
        with self._lock:
            self._tickets.add(ticket)
        return f"ws://127.0.0.1:{self._port}/link/?ticket={ticket}&app_id={self.app_id}"

    # -- server side ------------------------------------------------------------------------

    def _check_ticket(self, connection: Any, request: Any) -> Any:
        ticket = dict(parse_qsl(urlsplit(request.path).query)).get("ticket", "")
        with self._lock:
            known = ticket in self._tickets
            self._tickets.discard(ticket)       # single use, as Slack's
            if not known:
                self.refused += 1
        if not known:
            return connection.respond(HTTPStatus.FORBIDDEN, "unknown or used ticket\n")
        return None

    async def _session(self, ws: Any) -> None:
        with self._lock:
            count = len(self._connections) + 1
        hello = {"type": "hello", "num_connections": count,
                 "debug_info": {"host": "applink-fake-1", "build_number": 1,
                                "approximate_connection_time": 18060},
                 "connection_info": {"app_id": self.app_id}}
        try:
            await ws.send(json.dumps(hello))
            # counted once greeted: envelopes go to a connection only after its hello, as Slack's
            with self._changed:
                self._connections.append(ws)
                self._connects += 1
                self._hellos.append(time.monotonic())
                self._changed.notify_all()
            async for text in ws:
                self._received(text if isinstance(text, str) else text.decode("utf-8", "replace"))
        except Exception:  # noqa: BLE001  (a client that drops the socket ends the session)
            pass
        finally:
            with self._changed:
                if ws in self._connections:
                    self._connections.remove(ws)
                self._changed.notify_all()

    def _received(self, text: str) -> None:
        now = time.monotonic()
        try:
            msg = json.loads(text)
        except ValueError:
            msg = None
        with self._changed:
            if isinstance(msg, dict) and msg.get("envelope_id") in self._sent:
                kind, sent = self._sent[msg["envelope_id"]]
                self._acks.append(Ack(envelope_id=msg["envelope_id"], type=kind, payload=msg.get("payload"),
                                      seconds=now - sent, raw=text))
            else:
                self._other.append(text)
            self._changed.notify_all()

    # -- test side --------------------------------------------------------------------------

    @property
    def connections(self) -> int:
        """Open connections now."""
        with self._lock:
            return len(self._connections)

    @property
    def connects(self) -> int:
        """Connections accepted since start (reconnects count)."""
        with self._lock:
            return self._connects

    def wait_connected(self, count: int = 1, timeout: float = 10) -> None:
        """Block until ``count`` connections were accepted and greeted (``hello``) since start."""
        deadline = time.monotonic() + timeout
        with self._changed:
            while self._connects < count or not self._connections:
                left = deadline - time.monotonic()
                if left <= 0:
                    raise TimeoutError(f"no Socket Mode client connected within {timeout}s "
                                       f"({self._connects} connects, {self.refused} refused)")
                self._changed.wait(left)

    def _send(self, text: str, timeout: float) -> None:
        self.wait_connected(timeout=timeout)
        with self._lock:
            ws = self._connections[-1]
        assert self._loop is not None
        asyncio.run_coroutine_threadsafe(ws.send(text), self._loop).result(timeout)

    def send_envelope(self, kind: str, payload: dict, accepts_response_payload: bool,
                      retry_attempt: int = 0, retry_reason: str = "", timeout: float = 10) -> str:
        envelope_id = str(uuid.uuid4())
        envelope = {"envelope_id": envelope_id, "type": kind, "payload": payload,
                    "accepts_response_payload": accepts_response_payload}
        if kind == "events_api":
            envelope.update({"retry_attempt": retry_attempt, "retry_reason": retry_reason})
        with self._lock:
            self._sent[envelope_id] = (kind, time.monotonic())
        self._send(json.dumps(envelope), timeout)
        return envelope_id

    def send_event(self, event_payload: dict, **kw: Any) -> str:
        """An ``events_api`` envelope; ``event_payload`` is an event dict or a whole event_callback."""
        body = event_payload if event_payload.get("type") == "event_callback" else event_callback(event_payload)
        return self.send_envelope("events_api", body, accepts_response_payload=False, **kw)

    def send_slash(self, command_payload: dict, **kw: Any) -> str:
        """A ``slash_commands`` envelope; see :func:`slash_payload`."""
        return self.send_envelope("slash_commands", command_payload, accepts_response_payload=True, **kw)

    def send_interactive(self, payload: dict, **kw: Any) -> str:
        """An ``interactive`` envelope (block_actions, view_submission, message_action, ...)."""
        accepts = payload.get("type") in ("view_submission", "block_suggestion")
        return self.send_envelope("interactive", payload, accepts_response_payload=accepts, **kw)

    def send_disconnect(self, reason: str = "refresh_requested", timeout: float = 10) -> None:
        """Ask the client to reconnect, as Slack does every few hours."""
        self._send(json.dumps({"type": "disconnect", "reason": reason,
                               "debug_info": {"host": "applink-fake-1"}}), timeout)

    def drop(self, how: str = "fin", timeout: float = 10) -> None:
        """End the newest connection the way networks do, never with a WebSocket close frame.

        ``fin``    the TCP connection is shut down and closed (FIN): a proxy restarting, a load
                   balancer or NAT ending an idle flow. The client reads end-of-stream; its next
                   write is answered with a reset.
        ``reset``  the connection is aborted with a TCP RST (SO_LINGER 0): a middlebox rejecting it.
        ``stall``  nothing more is read, answered or sent on it (a black hole: a dropped route, a
                   NAT entry forgotten without telling either side); only pings can tell.

        Envelopes sent afterwards go to the next connection the client opens.
        """
        if how not in ("fin", "reset", "stall"):
            raise ValueError(f"drop(how={how!r}): use 'fin', 'reset' or 'stall'")
        self.wait_connected(timeout=timeout)
        with self._changed:
            ws = self._connections[-1]
            self._connections.remove(ws)        # no envelope goes to it any more
            self._changed.notify_all()

        async def cut() -> None:
            transport = ws.transport
            sock = transport.get_extra_info("socket")
            if how == "stall":
                transport.pause_reading()
                task = getattr(ws, "keepalive_task", None)
                if task is not None:
                    task.cancel()               # our own pings would tell the client we are alive
                self._stalled.append(ws)
            elif how == "reset":
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
                transport.abort()
            else:
                try:
                    sock.shutdown(socket.SHUT_WR)   # FIN now, whatever is still unread here
                except OSError:
                    pass
                transport.abort()

        assert self._loop is not None
        asyncio.run_coroutine_threadsafe(cut(), self._loop).result(timeout)

    def hello_times(self) -> list[float]:
        """``time.monotonic()`` of each ``hello`` sent, oldest first."""
        with self._lock:
            return list(self._hellos)

    def acks(self) -> list[Ack]:
        with self._lock:
            return list(self._acks)

    def wait_ack(self, envelope_id: str, timeout: float = 10) -> Ack:
        deadline = time.monotonic() + timeout
        with self._changed:
            while True:
                for ack in self._acks:
                    if ack.envelope_id == envelope_id:
                        return ack
                left = deadline - time.monotonic()
                if left <= 0:
                    raise TimeoutError(f"no ack for envelope {envelope_id} within {timeout}s "
                                       f"({len(self._acks)} acks so far, {len(self._connections)} connections)")
                self._changed.wait(left)

    def received(self) -> list[str]:
        """Client messages that were not acks of our envelopes."""
        with self._lock:
            return list(self._other)


# ---------------------------------------------------------------------------------------------
# HTTP mode: signing and payloads
# ---------------------------------------------------------------------------------------------


def signed_headers(secret: str, body: bytes | str, timestamp: int | str | None = None,
                   content_type: str | None = None) -> dict[str, str]:
    """Headers Slack sends with a request: ``X-Slack-Request-Timestamp`` and
    ``X-Slack-Signature`` = ``v0=`` + hex HMAC-SHA256(secret, ``"v0:{ts}:{body}"``), plus a
    ``Content-Type`` matching the body (JSON for events, form for commands/interactions)."""
    raw = body.encode() if isinstance(body, str) else body
    ts = str(int(time.time()) if timestamp is None else timestamp)
    digest = hmac.new(secret.encode(), b"v0:" + ts.encode() + b":" + raw, hashlib.sha256).hexdigest()
    if content_type is None:
        content_type = "application/json" if raw.lstrip()[:1] == b"{" else "application/x-www-form-urlencoded"
    return {"X-Slack-Request-Timestamp": ts, "X-Slack-Signature": f"v0={digest}", "Content-Type": content_type}


def _trigger_id() -> str:
    return f"{int(time.time())}.{TEAM_ID[1:]}.{uuid.uuid4().hex}"


def _user_obj(user_id: str) -> dict:
    return {"id": user_id, "username": user_id.lower(), "name": user_id.lower(), "team_id": TEAM_ID}


def _team_obj() -> dict:
    return {"id": TEAM_ID, "domain": TEAM_DOMAIN}


def slash_payload(command: str = "/diagnose", text: str = "", user_id: str = USER_ID,
                  channel_id: str = CHANNEL_ID, response_url: str | None = None,
                  trigger_id: str | None = None, channel_name: str = "training") -> dict[str, str]:
    """A slash command's fields (the form body in HTTP mode, the envelope payload in Socket Mode)."""
    return {
        "token": "deprecated-verification-token", "team_id": TEAM_ID, "team_domain": TEAM_DOMAIN,
        "channel_id": channel_id, "channel_name": channel_name, "user_id": user_id,
        "user_name": user_id.lower(), "command": command, "text": text, "api_app_id": API_APP_ID,
        "is_enterprise_install": "false",
        "response_url": response_url or f"https://hooks.slack.com/commands/{TEAM_ID}/1/{uuid.uuid4().hex}",
        "trigger_id": trigger_id or _trigger_id(),
    }


def slash_body(command: str = "/diagnose", text: str = "", user_id: str = USER_ID,
               channel_id: str = CHANNEL_ID, response_url: str | None = None,
               trigger_id: str | None = None) -> bytes:
    """The form-encoded body Slack POSTs for a slash command."""
    return urlencode(slash_payload(command, text, user_id, channel_id, response_url, trigger_id)).encode()


def event_callback(event: dict, event_id: str | None = None, event_time: int | None = None) -> dict:
    """The Events API wrapper around ``event``."""
    return {
        "token": "deprecated-verification-token", "team_id": TEAM_ID, "context_team_id": TEAM_ID,
        "api_app_id": API_APP_ID, "event": event, "type": "event_callback",
        "event_id": event_id or f"Ev0{uuid.uuid4().hex[:10].upper()}",
        "event_time": event_time or int(time.time()),
        "authorizations": [{"enterprise_id": None, "team_id": TEAM_ID, "user_id": BOT_USER_ID,
                            "is_bot": True, "is_enterprise_install": False}],
        "is_ext_shared_channel": False,
        "event_context": uuid.uuid4().hex,
    }


def event_body(event: dict, **kw: Any) -> bytes:
    """The JSON body Slack POSTs for an event."""
    return json.dumps(event_callback(event, **kw)).encode()


def interactive_body(payload: dict) -> bytes:
    """The form-encoded ``payload=<json>`` body Slack POSTs for an interaction."""
    return urlencode({"payload": json.dumps(payload)}).encode()


def _ts() -> str:
    now = time.time()
    return f"{int(now)}.{int(now * 1e6) % 1_000_000:06d}"


def app_mention_event(text: str = f"<@{BOT_USER_ID}> diagnose job 4242", user: str = USER_ID,
                      channel: str = CHANNEL_ID, ts: str | None = None, thread_ts: str | None = None,
                      files: list[dict] | None = None) -> dict:
    ts = ts or _ts()
    event: dict[str, Any] = {"type": "app_mention", "user": user, "text": text, "ts": ts,
                             "client_msg_id": str(uuid.uuid4()), "team": TEAM_ID, "channel": channel,
                             "event_ts": ts,
                             "blocks": [{"type": "rich_text", "block_id": "b1", "elements": [
                                 {"type": "rich_text_section", "elements": [{"type": "text", "text": text}]}]}]}
    if thread_ts:
        event["thread_ts"] = thread_ts
    if files:
        event["files"] = files
    return event


def im_message_event(text: str = "diagnose job 4242", user: str = USER_ID, channel: str = IM_CHANNEL_ID,
                     ts: str | None = None, thread_ts: str | None = None) -> dict:
    """A ``message.im`` event: a user writes to the bot in its DM."""
    ts = ts or _ts()
    event: dict[str, Any] = {"type": "message", "user": user, "text": text, "ts": ts,
                             "client_msg_id": str(uuid.uuid4()), "team": TEAM_ID, "channel": channel,
                             "event_ts": ts, "channel_type": "im"}
    if thread_ts:
        event["thread_ts"] = thread_ts
    return event


def file_ref(api: FakeSlackAPI, file_id: str) -> dict:
    """The ``files[]`` entry of a message event for a file registered with ``api``."""
    obj = api.file_object(file_id)
    keep = ("id", "created", "timestamp", "name", "title", "mimetype", "filetype", "pretty_type", "user",
            "user_team", "editable", "size", "mode", "is_external", "external_type", "is_public",
            "url_private", "url_private_download", "permalink")
    return {k: obj[k] for k in keep}


def file_share_event(files: list[dict], text: str = "", user: str = USER_ID, channel: str = IM_CHANNEL_ID,
                     ts: str | None = None, thread_ts: str | None = None) -> dict:
    """A ``message`` with subtype ``file_share`` (``files``: from :func:`file_ref`, or ``{"id": ...}``)."""
    ts = ts or _ts()
    event: dict[str, Any] = {"type": "message", "subtype": "file_share", "text": text, "files": files,
                             "upload": True, "user": user, "display_as_bot": False, "ts": ts,
                             "channel": channel, "event_ts": ts,
                             "channel_type": "im" if channel.startswith("D") else "channel"}
    if thread_ts:
        event["thread_ts"] = thread_ts
    return event


def app_home_opened_event(user: str = USER_ID, channel: str = IM_CHANNEL_ID, tab: str = "home") -> dict:
    return {"type": "app_home_opened", "user": user, "channel": channel, "tab": tab, "event_ts": _ts()}


def message_action_payload(callback_id: str = "diagnose_message", message_text: str = "",
                           message_ts: str | None = None, user_id: str = USER_ID,
                           channel_id: str = CHANNEL_ID, message_user: str = USER_ID,
                           files: list[dict] | None = None) -> dict:
    """A message shortcut (``type: message_action``) on a message."""
    message_ts = message_ts or _ts()
    message: dict[str, Any] = {"type": "message", "user": message_user, "ts": message_ts, "text": message_text}
    if files:
        message["files"] = files
    return {
        "type": "message_action", "token": "deprecated-verification-token", "action_ts": _ts(),
        "team": _team_obj(), "user": _user_obj(user_id), "channel": {"id": channel_id, "name": "training"},
        "is_enterprise_install": False, "enterprise": None, "callback_id": callback_id,
        "trigger_id": _trigger_id(), "message_ts": message_ts, "message": message,
        "response_url": f"https://hooks.slack.com/app/{TEAM_ID}/1/{uuid.uuid4().hex}",
    }


def block_actions_payload(action_id: str, value: str = "", block_id: str = "actions",
                          user_id: str = USER_ID, channel_id: str = CHANNEL_ID,
                          message_ts: str | None = None, message: dict | None = None,
                          view: dict | None = None) -> dict:
    """A button click (``type: block_actions``) in a message, or in ``view`` if given."""
    action = {"type": "button", "action_id": action_id, "block_id": block_id, "value": value,
              "text": {"type": "plain_text", "text": action_id, "emoji": True}, "action_ts": _ts()}
    payload: dict[str, Any] = {
        "type": "block_actions", "user": _user_obj(user_id), "api_app_id": API_APP_ID,
        "token": "deprecated-verification-token", "trigger_id": _trigger_id(), "team": _team_obj(),
        "enterprise": None, "is_enterprise_install": False, "actions": [action],
    }
    if view is not None:
        payload.update({"container": {"type": "view", "view_id": view.get("id", "")}, "view": view,
                        "state": view.get("state", {"values": {}})})
    else:
        message_ts = message_ts or (message or {}).get("ts") or _ts()
        payload.update({
            "container": {"type": "message", "message_ts": message_ts, "channel_id": channel_id,
                          "is_ephemeral": False},
            "channel": {"id": channel_id, "name": "training"},
            "message": message or {"type": "message", "user": BOT_USER_ID, "bot_id": BOT_ID, "ts": message_ts,
                                   "text": ""},
            "state": {"values": {}},
            "response_url": f"https://hooks.slack.com/actions/{TEAM_ID}/1/{uuid.uuid4().hex}",
        })
    return payload


def view_submission_payload(callback_id: str, values: dict[str, dict[str, Any]],
                            private_metadata: str = "", user_id: str = USER_ID,
                            view_id: str | None = None) -> dict:
    """A modal submission. ``values`` is ``{block_id: {action_id: value_or_state}}``: a str
    becomes a ``plain_text_input`` state, a dict is used as the element state as is."""
    state = {block: {action: (v if isinstance(v, dict) else {"type": "plain_text_input", "value": v})
                     for action, v in actions.items()}
             for block, actions in values.items()}
    view = {"id": view_id or f"V0{uuid.uuid4().hex[:8].upper()}", "team_id": TEAM_ID, "type": "modal",
            "callback_id": callback_id, "private_metadata": private_metadata, "blocks": [],
            "title": {"type": "plain_text", "text": "gpu-triage"}, "state": {"values": state},
            "hash": uuid.uuid4().hex[:16], "app_id": API_APP_ID, "bot_id": BOT_ID,
            "root_view_id": None, "previous_view_id": None, "external_id": ""}
    return {"type": "view_submission", "team": _team_obj(), "user": _user_obj(user_id),
            "api_app_id": API_APP_ID, "token": "deprecated-verification-token", "trigger_id": _trigger_id(),
            "view": view, "response_urls": [], "is_enterprise_install": False, "enterprise": None}
