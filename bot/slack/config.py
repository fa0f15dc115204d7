"""Slack settings from the environment (secrets never live in files), validated at start."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Mapping

if TYPE_CHECKING:
    from bot.config import Config


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

    post_channel: str | None = None
    escalation: dict | None = None        # thresholds for repeat-aware escalation (config "escalation")

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None, *, http: bool = False,
                 settings: "Config | None" = None) -> "SlackConfig":
        """Secrets from the environment; everything else from ``settings`` (bot.config: the config
        file with the environment on top), loaded here from ``env`` when not given."""
        from bot.config import ConfigError as FileConfigError
        from bot.config import load_config

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
        if settings is None:
            try:
                settings = load_config(env=env)
            except FileConfigError as exc:
                raise ConfigError(str(exc)) from exc
        slack, ssh = settings.section("slack"), settings.section("ssh")
        return cls(
            bot_token=bot, app_token=app_token, signing_secret=secret, api_url=env.get("SLACK_API_URL") or None,
            collect_channels=frozenset(slack["collect_channels"]), collect_users=frozenset(slack["collect_users"]),
            collect_groups=frozenset(slack["collect_groups"]),
            diagnose_channels=frozenset(slack["diagnose_channels"]), lang=slack["lang"],
            max_upload_bytes=int(float(slack["max_upload_mb"]) * 1024 * 1024), workers=int(slack["workers"]),
            ssh_config=ssh["config"], login_node=ssh["login_node"], inventory=ssh["inventory"],
            data_dir=settings.get("data_dir"), post_channel=slack["post_channel"],
            escalation=settings.section("escalation"))
