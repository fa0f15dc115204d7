"""One configuration file (YAML) for the CLI and the bot; secrets stay in the environment.

``load_config(path=None)`` reads ``path``, else ``$GPU_TRIAGE_CONFIG``, else nothing (the
defaults), validates every key against :data:`SCHEMA` (unknown keys are rejected with the list
of known ones), then applies the environment variables of :data:`ENV` on top: the environment
overrides the file, and a command-line flag overrides both.  Every problem is reported at once,
each as ``KEY: what is wrong; the fix``.

Secrets (SLACK_BOT_TOKEN, SLACK_APP_TOKEN, SLACK_SIGNING_SECRET) are never read from the file: a
key that looks like one is rejected with the variable to use instead.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Mapping

ENV_PATH = "GPU_TRIAGE_CONFIG"


class ConfigError(Exception):
    """The configuration is wrong; ``problems`` lists each as ``key: reason; fix``."""

    def __init__(self, problems: list[str], source: str | None = None):
        self.problems = problems
        self.source = source
        where = f"{source}: " if source else ""
        super().__init__(where + ("; ".join(problems) if len(problems) == 1 else
                                  f"{len(problems)} problems:\n  " + "\n  ".join(problems)))


# --- value checkers: (value) -> (normalised value, error or None) -------------------------------

Check = Callable[[Any], "tuple[Any, str | None]"]


def _opt_str(v: Any):
    if v is None or (isinstance(v, str) and v.strip()):
        return (v.strip() if isinstance(v, str) else v), None
    return v, "must be a non-empty string (or null)"


def _choice(*options: Any) -> Check:
    def check(v: Any):
        return v, None if v in options else f"must be one of {', '.join(repr(o) for o in options)}"
    return check


def _number(minimum: float = 0.0, *, integer: bool = False, optional: bool = False, strict: bool = False) -> Check:
    def check(v: Any):
        if v is None and optional:
            return v, None
        if isinstance(v, str):
            try:
                v = int(v) if integer else float(v)
            except ValueError:
                pass
        if isinstance(v, bool) or not isinstance(v, (int, float)) or (integer and not isinstance(v, int)):
            return v, f"must be {'a whole number' if integer else 'a number'}"
        if v < minimum or (strict and v == minimum):
            return v, f"must be {'>' if strict else '>='} {minimum:g}"
        return v, None
    return check


def _bool(v: Any):
    if isinstance(v, str) and v.lower() in ("1", "true", "yes", "on", "0", "false", "no", "off"):
        return v.lower() in ("1", "true", "yes", "on"), None
    return v, None if isinstance(v, bool) else "must be true or false"


def _str_list(v: Any):
    if isinstance(v, str):  # environment form: comma-separated
        v = [s.strip() for s in v.replace(";", ",").split(",") if s.strip()]
    if not isinstance(v, list) or not all(isinstance(s, (str, int)) for s in v):
        return v, "must be a list of strings, e.g. [C0123456789]"
    return [str(s) for s in v], None


def _int_list(v: Any):
    if isinstance(v, str):
        v = [s.strip() for s in v.split(",") if s.strip()]
    try:
        return [int(s) for s in v], None
    except (TypeError, ValueError):
        return v, "must be a list of whole numbers, e.g. [13, 31]"


# key -> (checker, default).  Nested sections are dicts.  The example file documents each key.
SCHEMA: dict[str, Any] = {
    "data_dir": (_opt_str, None),
    "lang": (_choice("en", "zh"), "en"),
    "rate_card": (_opt_str, None),
    "region": (_opt_str, None),
    "ssh": {
        "config": (_opt_str, None),
        "login_node": (_opt_str, None),
        "inventory": (_opt_str, None),
        "connect_timeout": (_number(0, strict=True), 10.0),
        "command_timeout": (_number(0, strict=True, optional=True), None),
        "concurrency": (_number(1, integer=True), 32),
        "srun_above": (_number(0, integer=True), 128),
    },
    "slack": {
        "collect_channels": (_str_list, []),
        "collect_users": (_str_list, []),
        "collect_groups": (_str_list, []),
        "diagnose_channels": (_str_list, []),
        "lang": (_choice(None, "en", "zh"), None),
        "max_upload_mb": (_number(0, strict=True), 200),
        "workers": (_number(1, integer=True), 8),
        "post_channel": (_opt_str, None),
    },
    "preflight": {
        "xid_max_age_hours": (_number(0), 0),
        "xid_ignore": (_int_list, []),
        "shm_critical_below_gb": (_number(0), 1.0),
        "shm_warn_below_gb": (_number(0), 8.0),
        "disk_critical_pct": (_number(0), 95),
        "disk_warn_pct": (_number(0), 85),
        "mounts": (_str_list, []),
        "gpu_busy_mib": (_number(0), 1024),
        "ib_ignore_ports": (_str_list, []),
        "ib_rate_warn_ratio": (_number(0), 1.0),
        "memlock_warn": (_bool, True),
        "skip_checks": (_str_list, []),
        "unknown_fails": (_bool, False),
    },
    "escalation": {  # repeat-aware escalation (knowledge/escalation.py): counts within a window
        "same_xid_per_gpu": {"more_than": (_number(0, integer=True), 5), "hours": (_number(0, strict=True), 24)},
        "hardware_per_gpu": {"more_than": (_number(0, integer=True), 5), "hours": (_number(0, strict=True), 24)},
        "node_failed_jobs": {"more_than": (_number(0, integer=True), 2), "days": (_number(0, strict=True), 7)},
        "burst_minutes": (_number(0), 5),
    },
    "metrics": {
        "enabled": (_bool, True),
        "host": (_opt_str, "0.0.0.0"),
        "port": (_number(1, integer=True), 9464),
    },
    "log": {
        "format": (_choice("auto", "json", "text"), "auto"),
        "level": (_choice("debug", "info", "warning", "error"), "info"),
    },
}

# environment variable -> key; the environment overrides the file (existing variables kept).
ENV: dict[str, str] = {
    "GPU_TRIAGE_DATA_DIR": "data_dir",
    "GPU_TRIAGE_LANG": "lang",
    "GPU_TRIAGE_RATE_CARD": "rate_card",
    "GPU_TRIAGE_REGION": "region",
    "GPU_TRIAGE_SSH_CONFIG": "ssh.config",
    "GPU_TRIAGE_LOGIN_NODE": "ssh.login_node",
    "GPU_TRIAGE_INVENTORY": "ssh.inventory",
    "GPU_TRIAGE_CONNECT_TIMEOUT": "ssh.connect_timeout",
    "GPU_TRIAGE_COMMAND_TIMEOUT": "ssh.command_timeout",
    "GPU_TRIAGE_CONCURRENCY": "ssh.concurrency",
    "GPU_TRIAGE_SRUN_ABOVE": "ssh.srun_above",
    "GPU_TRIAGE_COLLECT_CHANNELS": "slack.collect_channels",
    "GPU_TRIAGE_COLLECT_USERS": "slack.collect_users",
    "GPU_TRIAGE_COLLECT_GROUPS": "slack.collect_groups",
    "GPU_TRIAGE_DIAGNOSE_CHANNELS": "slack.diagnose_channels",
    "GPU_TRIAGE_SLACK_LANG": "slack.lang",
    "GPU_TRIAGE_MAX_UPLOAD_MB": "slack.max_upload_mb",
    "GPU_TRIAGE_SLACK_WORKERS": "slack.workers",
    "GPU_TRIAGE_POST_CHANNEL": "slack.post_channel",
    "GPU_TRIAGE_METRICS_PORT": "metrics.port",
    "GPU_TRIAGE_METRICS": "metrics.enabled",
    "GPU_TRIAGE_LOG_FORMAT": "log.format",
    "GPU_TRIAGE_LOG_LEVEL": "log.level",
}

SECRETS = {"bot_token": "SLACK_BOT_TOKEN", "app_token": "SLACK_APP_TOKEN", "signing_secret": "SLACK_SIGNING_SECRET",
           "token": "SLACK_BOT_TOKEN", "slack_bot_token": "SLACK_BOT_TOKEN", "slack_app_token": "SLACK_APP_TOKEN",
           "slack_signing_secret": "SLACK_SIGNING_SECRET"}


@dataclass
class Config:
    """Validated settings: ``values`` is the nested dict of SCHEMA's shape."""

    values: dict[str, Any]
    source: str | None = None                       # the file read, if any
    from_env: dict[str, str] = field(default_factory=dict)  # key -> variable that set it

    def get(self, dotted: str) -> Any:
        node: Any = self.values
        for part in dotted.split("."):
            node = node[part]
        return node

    def section(self, name: str) -> dict[str, Any]:
        return dict(self.values[name])


def _defaults(schema: Mapping[str, Any]) -> dict[str, Any]:
    return {k: _defaults(v) if isinstance(v, dict) else (list(v[1]) if isinstance(v[1], list) else v[1])
            for k, v in schema.items()}


def _validate(data: Any, schema: Mapping[str, Any], prefix: str, out: dict[str, Any], problems: list[str]) -> None:
    if not isinstance(data, dict):
        problems.append(f"{prefix.rstrip('.') or '(top level)'}: must be a mapping of keys to values")
        return
    for key, value in data.items():
        name = f"{prefix}{key}"
        if str(key).lower() in SECRETS:
            problems.append(f"{name}: secrets are not read from the file; set the environment variable "
                            f"{SECRETS[str(key).lower()]} instead (systemd EnvironmentFile, a Kubernetes Secret)")
            continue
        if key not in schema:
            problems.append(f"{name}: unknown key; known keys here: {', '.join(schema)}")
            continue
        spec = schema[key]
        if isinstance(spec, dict):
            if value is None:
                continue
            _validate(value, spec, f"{name}.", out[key], problems)
            continue
        if isinstance(value, str) and _looks_secret(value):
            problems.append(f"{name}: this value looks like a secret (a token or key); secrets are not "
                            "read from the file: put it in the environment (systemd EnvironmentFile, a "
                            "Kubernetes Secret)")
            continue
        normalised, error = spec[0](value)
        if error:
            problems.append(f"{name}: {error} (got {value!r})")
        else:
            out[key] = normalised


def _looks_secret(value: str) -> bool:
    """A value the log redactor would hide (Slack/GitHub/AWS/HF tokens, private keys ...)."""
    from collectors.redact import redact

    return redact(value) != value


def _cross_checks(values: dict[str, Any], problems: list[str]) -> None:
    pf = values["preflight"]
    if pf["disk_warn_pct"] > pf["disk_critical_pct"]:
        problems.append("preflight.disk_warn_pct: must not exceed preflight.disk_critical_pct "
                        f"({pf['disk_warn_pct']} > {pf['disk_critical_pct']})")
    if pf["shm_warn_below_gb"] < pf["shm_critical_below_gb"]:
        problems.append("preflight.shm_warn_below_gb: must be >= preflight.shm_critical_below_gb")
    known = {"xid", "gpu", "ib", "storage", "memlock", "versions"}
    bad = [c for c in pf["skip_checks"] if c not in known]
    if bad:
        problems.append(f"preflight.skip_checks: unknown check(s) {', '.join(bad)}; known: {', '.join(sorted(known))}")


def load_config(path: str | os.PathLike | None = None, env: Mapping[str, str] | None = None) -> Config:
    """Defaults <- the file (``path`` or $GPU_TRIAGE_CONFIG) <- environment variables."""
    env = os.environ if env is None else env
    source = str(path) if path else (env.get(ENV_PATH) or None)
    values = _defaults(SCHEMA)
    problems: list[str] = []
    if source:
        import yaml

        p = Path(source).expanduser()
        try:
            text = p.read_text(encoding="utf-8")
        except OSError as exc:
            raise ConfigError([f"cannot read the config file ({exc.strerror or exc}); pass an existing file with "
                               f"--config or {ENV_PATH}"], source) from exc
        try:
            data = yaml.safe_load(text)
        except yaml.YAMLError as exc:
            mark = getattr(exc, "problem_mark", None)
            where = f"line {mark.line + 1}: " if mark else ""
            raise ConfigError([f"{where}not valid YAML ({getattr(exc, 'problem', exc)}); fix the syntax"], source) from exc
        if data is not None:
            _validate(data, SCHEMA, "", values, problems)
    from_env: dict[str, str] = {}
    for var, dotted in ENV.items():
        raw = env.get(var)
        if raw is None or raw == "":
            continue
        *parents, leaf = dotted.split(".")
        spec: Any = SCHEMA
        target = values
        for part in parents:
            spec, target = spec[part], target[part]
        normalised, error = spec[leaf][0](raw)
        if error:
            problems.append(f"{var} (overrides {dotted}): {error} (got {raw!r}); fix or unset the variable")
        else:
            target[leaf] = normalised
            from_env[dotted] = var
    _cross_checks(values, problems)
    if problems:
        raise ConfigError(problems, source)
    return Config(values=values, source=source, from_env=from_env)
