"""The app factory and the shared context the listeners use."""

from __future__ import annotations

import logging
import os
import re
import threading
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, Callable

from slack_bolt import App
from slack_sdk import WebClient
from slack_sdk.http_retry.builtin_handlers import (ConnectionErrorRetryHandler, RateLimitErrorRetryHandler,
                                                   ServerErrorRetryHandler)

from bot.slack.config import SlackConfig

log = logging.getLogger("gpu_triage.slack")


class _CountingClient(WebClient):
    """The metrics seam for Slack: every Web API call that fails is counted by method and error."""

    def api_call(self, api_method: str, *args: Any, **kwargs: Any):
        from slack_sdk.errors import SlackApiError

        from bot import metrics

        try:
            return super().api_call(api_method, *args, **kwargs)
        except SlackApiError as exc:
            error = (exc.response.get("error") if exc.response is not None else None) or "unknown"
            metrics.inc("gpu_triage_slack_api_errors_total", method=api_method, error=str(error))
            raise
        except Exception as exc:
            metrics.inc("gpu_triage_slack_api_errors_total", method=api_method, error=exc.__class__.__name__)
            raise


def web_client(cfg: SlackConfig) -> WebClient:
    """A Web API client that rides out 429 (Retry-After) and transient 5xx / connection errors."""
    kwargs: dict[str, Any] = {"token": cfg.bot_token}
    if cfg.api_url:
        kwargs["base_url"] = cfg.api_url if cfg.api_url.endswith("/") else cfg.api_url + "/"
    client = _CountingClient(**kwargs)
    client.retry_handlers.extend([RateLimitErrorRetryHandler(max_retry_count=3),
                                  ServerErrorRetryHandler(max_retry_count=3),
                                  ConnectionErrorRetryHandler(max_retry_count=2)])
    return client


@dataclass
class BotContext:
    """What listeners share: settings, the engine, the incident store, the worker pool."""

    cfg: SlackConfig
    engine: Any                     # bot.engine.Engine
    runbook: Any                    # knowledge.runbook.Runbook
    pool: ThreadPoolExecutor
    collect: Callable[..., Any] | None = None   # injected collection (default: bot.investigate over SSH)
    bot_user_id: str | None = None
    _locales: dict[str, str] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def submit(self, fn: Callable[..., Any], *args: Any) -> Future:
        """Run slow work after the ack; failures are logged, never lost silently."""
        def guarded() -> Any:
            try:
                return fn(*args)
            except Exception:  # noqa: BLE001 - the pool must survive one bad request
                log.exception("gpu-triage: background work %s failed", getattr(fn, "__name__", fn))
                return None

        return self.pool.submit(guarded)

    def lang_for(self, client: WebClient, user: str | None) -> str:
        """The user's Slack locale (zh-* -> zh), unless the language is configured."""
        if self.cfg.lang:
            return self.cfg.lang
        if not user:
            return "en"
        with self._lock:
            if user in self._locales:
                return self._locales[user]
        lang = "en"
        try:
            info = client.users_info(user=user, include_locale=True)
            locale = (info.get("user") or {}).get("locale") or ""
            lang = "zh" if locale.lower().startswith("zh") else "en"
        except Exception:  # noqa: BLE001 - a missing scope must not stop a diagnosis
            log.warning("gpu-triage: users.info failed for %s; answering in English", user)
        with self._lock:
            self._locales[user] = lang
        return lang

    def may_collect(self, client: WebClient, user: str | None, channel: str | None) -> bool:
        """SSH collection is deny-by-default: the channel must be allowed and the user listed,
        directly or through a user group."""
        cfg = self.cfg
        if not user or not channel or channel not in cfg.collect_channels:
            return False
        if user in cfg.collect_users:
            return True
        for group in cfg.collect_groups:
            try:
                members = client.usergroups_users_list(usergroup=group).get("users") or []
            except Exception:  # noqa: BLE001
                log.warning("gpu-triage: usergroups.users.list failed for %s", group)
                continue
            if user in members:
                return True
        return False

    def may_diagnose(self, channel: str | None) -> bool:
        allowed = self.cfg.diagnose_channels
        return not allowed or (channel or "") in allowed or (channel or "").startswith("D")


class _NoBodies(logging.Filter):
    """Bolt logs a request that fails the signature check with its whole body (tokens, pasted logs,
    anything an attacker sends) at INFO; keep the fact, drop the body."""

    def filter(self, record: logging.LogRecord) -> bool:
        text = record.getMessage()
        if "body:" in text:
            record.msg = text.split("body:", 1)[0].rstrip(" ,(") + " (body not logged)"
            record.args = ()
        return True


def _quiet_bolt_bodies() -> None:
    log = logging.getLogger("slack_bolt.RequestVerification")
    if not any(isinstance(f, _NoBodies) for f in log.filters):
        log.addFilter(_NoBodies())


def _take_secrets_from_environ(cfg: SlackConfig) -> None:
    """Once read into ``cfg``, the Slack secrets leave the process environment: the SSH, scontrol
    and srun children of the bot never inherit them, and Bolt, which reads SLACK_BOT_TOKEN itself
    when a client is given too, has no second token to warn about ("As you gave `client` as well,
    `token` will be unused" at every start). Only values equal to the configuration's are removed."""
    for name, value in (("SLACK_BOT_TOKEN", cfg.bot_token), ("SLACK_APP_TOKEN", cfg.app_token),
                        ("SLACK_SIGNING_SECRET", cfg.signing_secret)):
        if value and os.environ.get(name) == value:
            del os.environ[name]


def create_app(cfg: SlackConfig, *, engine=None, runbook=None, client: WebClient | None = None,
               collect: Callable[..., Any] | None = None, http: bool = False) -> tuple[App, BotContext]:
    """Build the Bolt app and register every listener. Nothing happens at import time."""
    _quiet_bolt_bodies()
    from bot.engine import Engine
    from bot.slack.listeners import register_listeners
    from knowledge.runbook import Runbook

    client = client or web_client(cfg)
    if engine is None:
        from knowledge.escalation import Thresholds

        engine = Engine(data_dir=cfg.data_dir, thresholds=Thresholds.from_mapping(cfg.escalation))
    runbook = runbook or Runbook(cfg.data_dir)
    _take_secrets_from_environ(cfg)
    app = App(client=client, signing_secret=cfg.signing_secret if http else None,
              token_verification_enabled=False, request_verification_enabled=http,
              ignoring_self_events_enabled=True)
    ctx = BotContext(cfg=cfg, engine=engine, runbook=runbook,
                     pool=ThreadPoolExecutor(max_workers=cfg.workers, thread_name_prefix="gpu-triage-work"),
                     collect=collect)
    try:
        ctx.bot_user_id = client.auth_test().get("user_id")
    except Exception:  # noqa: BLE001 - tolerated; mentions are then recognised by <@...> alone
        log.warning("gpu-triage: auth.test failed; check SLACK_BOT_TOKEN")
    register_listeners(app, ctx)
    return app, ctx


_MENTION = re.compile(r"<@[UW][A-Z0-9]+(?:\|[^>]*)?>")


def strip_mentions(text: str) -> str:
    return _MENTION.sub("", text or "").strip()
