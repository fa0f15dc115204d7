"""Structured logs for ``gpu-triage serve``: JSON lines when stderr is not a terminal (journald,
Docker, Kubernetes collect them as they are), readable text on a terminal."""

from __future__ import annotations

import json
import logging
import sys
from datetime import datetime, timezone

_STD = set(vars(logging.LogRecord("", 0, "", 0, "", (), None))) | {"message", "asctime"}


class JSONFormatter(logging.Formatter):
    """One JSON object per line: ts, level, logger, msg, and any ``extra=`` fields."""

    def format(self, record: logging.LogRecord) -> str:
        doc = {"ts": datetime.fromtimestamp(record.created, timezone.utc).isoformat(timespec="milliseconds"),
               "level": record.levelname.lower(), "logger": record.name, "msg": record.getMessage()}
        for key, value in vars(record).items():
            if key not in _STD and not key.startswith("_"):
                doc[key] = value if isinstance(value, (str, int, float, bool, type(None))) else str(value)
        if record.exc_info:
            doc["exc"] = self.formatException(record.exc_info)
        return json.dumps(doc, ensure_ascii=False)


def setup_logging(fmt: str = "auto", level: str = "info", stream=None) -> logging.Handler:
    stream = stream or sys.stderr
    as_json = fmt == "json" or (fmt == "auto" and not (hasattr(stream, "isatty") and stream.isatty()))
    handler = logging.StreamHandler(stream)
    handler.setFormatter(JSONFormatter() if as_json else
                         logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    root = logging.getLogger()
    for old in list(root.handlers):
        root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(getattr(logging, level.upper(), logging.INFO))
    return handler
