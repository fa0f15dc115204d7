"""Mask secrets in log lines before they leave the parser.

Pasted logs carry whatever the job printed: environment dumps with API keys, URLs with
passwords, Slack and GitHub tokens.  Every line the training-log parser keeps (and every
finding's line) passes through :class:`Redactor` first, which replaces the secret part with
``[REDACTED]`` and leaves the rest of the line readable.

The redactor is stateful only for PEM private-key blocks, whose body spans several lines.
"""

from __future__ import annotations

import re

MASK = "[REDACTED]"

# Whole-token secrets: the match itself is the secret.
_TOKENS = [
    r"xox[abposre]-[A-Za-z0-9-]{8,}",  # Slack bot/user/app tokens
    r"xapp-[A-Za-z0-9-]{8,}",
    r"gh[pousr]_[A-Za-z0-9]{20,}",  # GitHub tokens
    r"github_pat_[A-Za-z0-9_]{20,}",
    r"\b(?:AKIA|ASIA)[0-9A-Z]{16}\b",  # AWS access key ids
    r"\bhf_[A-Za-z0-9]{20,}",  # Hugging Face tokens
    r"\bsk-[A-Za-z0-9_-]{20,}",  # OpenAI-style keys
    r"hooks\.slack\.com/services/[A-Za-z0-9/]+",
    r"\bglpat-[A-Za-z0-9_-]{20,}",  # GitLab personal access tokens
]

# key=value secrets: keep the key, mask the value.
_KEYED = (
    r"(?i)(?P<key>\b(?:aws_secret_access_key|aws_session_token|wandb_api_key|hf_token|"
    r"huggingface_hub_token|[a-z0-9_]*api[_-]?key|[a-z0-9_]*secret(?:_key)?|"
    r"[a-z0-9_]*password|passwd|pwd|[a-z0-9_]*access[_-]?token|auth[_-]?token|token)"
    r"[\"']?\s*(?:=|:)\s*)(?P<val>\"[^\"]*\"|'[^']*'|[^\s,;&\"']+)"
)

_BEARER = r"(?i)(?P<key>\b(?:bearer|authorization:\s*basic)\s+)(?P<val>[A-Za-z0-9._~+/=-]{8,})"
# command-line flags and bare key/value pairs separated by a space: --password hunter2,
# aws_secret_access_key wJalr..., and cookies: "Cookie: session=..."
# (a flag ending in -key or _key too: --wandb-key VALUE, --wandb-key=VALUE)
_FLAG = (r"(?i)(?P<key>(?:--?[a-z0-9_-]*(?:password|passwd|secret|token|[_-]key|api[_-]?key|secret[_-]?key|"
         r"access[_-]?key)|\baws_secret_access_key|\baws_session_token)(?:\s+|=))(?P<val>[^\s-][^\s]*)")
# an AWS key pair as printed together: the access key id, then its 40-character secret
_AWS_PAIR = r"(?P<key>\b(?:AKIA|ASIA)[0-9A-Z]{16}[\s,:;|]+)(?P<val>[A-Za-z0-9/+=]{30,})"
_COOKIE = r"(?i)(?P<key>\b(?:set-)?cookie:\s*)(?P<val>[^\r\n]+)"
_URL_PASS = r"(?P<key>[a-z][a-z0-9+.-]*://[^/\s:@]+:)(?P<val>[^/\s@]+)(?=@)"

_TOKEN_RE = re.compile("|".join(_TOKENS))
_KEYED_RE = re.compile(_KEYED)
_BEARER_RE = re.compile(_BEARER)
_FLAG_RE = re.compile(_FLAG)
_AWS_PAIR_RE = re.compile(_AWS_PAIR)
_COOKIE_RE = re.compile(_COOKIE)
_URL_PASS_RE = re.compile(_URL_PASS)
_PEM_BEGIN = re.compile(r"-----BEGIN [A-Z0-9 ]*PRIVATE KEY-----")
_PEM_END = re.compile(r"-----END [A-Z0-9 ]*PRIVATE KEY-----")

# Cheap gate: most lines hold none of these, so the substitutions never run on them.
_HINTS = ("xox", "xapp-", "gh", "akia", "asia", "hf_", "sk-", "hooks.slack", "secret", "passw", "pwd",
          "bearer", "basic", "://", "-----begin", "glpat-", "cookie:", "-token", "-key", "_token")
_KV = re.compile(r"(?:key|token)[\"']?\s*[=:]")


def _maybe_secret(line: str) -> bool:
    low = line.lower()
    if any(h in low for h in _HINTS):
        return True
    return ("key" in low or "token" in low) and _KV.search(low) is not None


def _keep_key(m: re.Match[str]) -> str:
    return m.group("key") + MASK


class Redactor:
    """Masks secrets line by line; remembers whether it is inside a private-key block."""

    def __init__(self) -> None:
        self._in_pem = False

    def __call__(self, line: str) -> str:
        if self._in_pem:
            if _PEM_END.search(line):
                self._in_pem = False
            return MASK
        if not _maybe_secret(line):
            return line
        if _PEM_BEGIN.search(line):
            self._in_pem = not _PEM_END.search(line)
            return MASK
        line = _AWS_PAIR_RE.sub(_keep_key, line)  # before the id itself is masked
        line = _TOKEN_RE.sub(MASK, line)
        line = _URL_PASS_RE.sub(_keep_key, line)
        line = _BEARER_RE.sub(_keep_key, line)
        line = _KEYED_RE.sub(_keep_key, line)
        line = _FLAG_RE.sub(_keep_key, line)
        line = _COOKIE_RE.sub(_keep_key, line)
        return line


def redact(text: str) -> str:
    """Redact a block of text (several lines)."""
    r = Redactor()
    return "\n".join(r(line) for line in text.split("\n"))


_CHUNK_GATE = re.compile("|".join(re.escape(h) for h in _HINTS) + r"|key|token", re.IGNORECASE)


def redact_stream(src, dest, chunk: int = 1 << 20) -> None:
    """Copy a (possibly multi-GB) text stream with its secrets masked: a chunk with no hint of a
    secret is copied as it is; the others go line by line through one Redactor."""
    r = Redactor()
    carry = b""
    while True:
        data = src.read(chunk)
        if not data:
            break
        data = carry + data
        cut = data.rfind(b"\n")
        if cut < 0:
            carry = data
            continue
        carry, data = data[cut + 1:], data[:cut + 1]
        text = data.decode("utf-8", "replace")
        if not r._in_pem and not _CHUNK_GATE.search(text):
            dest.write(data)
            continue
        dest.write("".join(r(ln) + "\n" for ln in text[:-1].split("\n")).encode("utf-8"))
    if carry:
        dest.write(r(carry.decode("utf-8", "replace")).encode("utf-8"))
