"""Slack settings from the environment (secrets never live in files), validated at start."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Mapping


class ConfigError(Exception):
    """A setting is missing or wrong; the message names the variable and the fix."""


def _set(value: str | None) -> frozenset[str]:
    return frozenset(v.strip() for v in (value or "").replace(";", ",").split(",") if v.strip())


@dataclass
class SlackConfig:
    bot_token: str
    app_token: str | None = None          # Socket Mode (default)
    signing_secret: str | None = None     # HTTP mode
    api_url: str | None = None            # SLACK_API_URL: GovSlack, tests
    # who may trigger SSH collection (deny by default): channels AND (users OR user groups)
    collect_channels: frozenset[str] = field(default_factory=frozenset)
    collect_users: frozenset[str] = field(default_factory=frozenset)
    collect_groups: frozenset[str] = field(default_factory=frozenset)
    # where pasted text may be diagnosed (empty: any channel the bot is in, and DMs)
    diagnose_channels: frozenset[str] = field(default_factory=frozenset)
    lang: str | None = None               # force en/zh; default: each user's Slack locale
    max_upload_bytes: int = 200 * 1024 * 1024
    workers: int = 8
    ssh_config: str | None = None
    login_node: str | None = None
    inventory: str | None = None
    data_dir: str | None = None

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None, *, http: bool = False) -> "SlackConfig":
        env = os.environ if env is None else env
        bot = env.get("SLACK_BOT_TOKEN", "")
        if not bot.startswith("xoxb-"):
            raise ConfigError("SLACK_BOT_TOKEN is not set to a bot token (xoxb-...); copy it from the app's "
                              "OAuth & Permissions page")
        app_token = env.get("SLACK_APP_TOKEN")
        secret = env.get("SLACK_SIGNING_SECRET")
        if http and not secret:
            raise ConfigError("HTTP mode needs SLACK_SIGNING_SECRET (Basic Information > App Credentials)")
        if not http and not (app_token or "").startswith("xapp-"):
            raise ConfigError("Socket Mode needs SLACK_APP_TOKEN (xapp-..., with connections:write); "
                              "or run `gpu-triage serve --http` with SLACK_SIGNING_SECRET")
        lang = env.get("GPU_TRIAGE_SLACK_LANG") or None
        if lang not in (None, "en", "zh"):
            raise ConfigError(f"GPU_TRIAGE_SLACK_LANG={lang!r}: use en or zh, or unset it to follow each user's locale")
        try:
            max_mb = float(env.get("GPU_TRIAGE_MAX_UPLOAD_MB", "200"))
            workers = int(env.get("GPU_TRIAGE_SLACK_WORKERS", "8"))
        except ValueError as exc:
            raise ConfigError(f"GPU_TRIAGE_MAX_UPLOAD_MB / GPU_TRIAGE_SLACK_WORKERS must be numbers ({exc})") from exc
        if max_mb <= 0 or workers < 1:
            raise ConfigError("GPU_TRIAGE_MAX_UPLOAD_MB must be > 0 and GPU_TRIAGE_SLACK_WORKERS >= 1")
        return cls(
            bot_token=bot, app_token=app_token, signing_secret=secret, api_url=env.get("SLACK_API_URL") or None,
            collect_channels=_set(env.get("GPU_TRIAGE_COLLECT_CHANNELS")),
            collect_users=_set(env.get("GPU_TRIAGE_COLLECT_USERS")),
            collect_groups=_set(env.get("GPU_TRIAGE_COLLECT_GROUPS")),
            diagnose_channels=_set(env.get("GPU_TRIAGE_DIAGNOSE_CHANNELS")), lang=lang,
            max_upload_bytes=int(max_mb * 1024 * 1024), workers=workers,
            ssh_config=env.get("GPU_TRIAGE_SSH_CONFIG") or None, login_node=env.get("GPU_TRIAGE_LOGIN_NODE") or None,
            inventory=env.get("GPU_TRIAGE_INVENTORY") or None, data_dir=env.get("GPU_TRIAGE_DATA_DIR") or None)
