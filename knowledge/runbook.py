"""Incidents, feedback and runbook drafts in the same SQLite database as the curated base.

Every diagnosis the bot gives is stored as an incident (its reply document, redacted at parse
time, never the raw paste); "Confirmed" / "Not it" clicks are feedback rows; the "Add to runbook"
modal stores a draft team entry. Issue #5 builds ranking and repeat-aware escalation on these.
"""

from __future__ import annotations

import json
import sqlite3
import threading
import uuid
from datetime import datetime, timedelta, timezone
from typing import Any

import sqlite_utils

from knowledge.store import StoreError, data_dir, open_db

_LOCK = threading.Lock()


def _now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


class Runbook:
    """One connection per thread (SQLite connections are not shared across threads); WAL and a
    busy timeout let the bot's workers and CLI processes write side by side."""

    def __init__(self, directory: str | None = None):
        self.directory = data_dir(directory)
        self._local = threading.local()
        self._ensure()

    @property
    def db(self) -> sqlite_utils.Database:
        db = getattr(self._local, "db", None)
        if db is None:
            db = self._local.db = open_db(self.directory)
        return db

    def _ensure(self) -> None:
        with _LOCK:
            if not self.db["incidents"].exists():
                self.db["incidents"].create({
                    "id": str, "created": str, "source": str, "user": str, "channel": str, "ts": str,
                    "job": str, "top_cause": str, "category": str, "confidence": float, "first_error": str,
                    "outcome": str, "doc": str}, pk="id", if_not_exists=True)
                self.db["incidents"].create_index(["created"], if_not_exists=True)
            if not self.db["feedback"].exists():
                self.db["feedback"].create({"id": int, "incident_id": str, "cause_id": str, "user": str,
                                            "verdict": str, "created": str}, pk="id", if_not_exists=True)
            if not self.db["runbook_drafts"].exists():
                self.db["runbook_drafts"].create({"id": int, "incident_id": str, "user": str, "created": str,
                                                  "entry": str}, pk="id", if_not_exists=True)

    def _write(self, fn) -> Any:
        try:
            with _LOCK, self.db.conn:
                return fn()
        except sqlite3.Error as exc:
            raise StoreError(f"cannot write to the gpu-triage database: {exc}; check GPU_TRIAGE_DATA_DIR") from exc

    def record_incident(self, doc: dict[str, Any], *, source: str, user: str | None = None,
                        channel: str | None = None, ts: str | None = None) -> str:
        incident_id = uuid.uuid4().hex[:12]
        top = doc["causes"][0] if doc.get("causes") else None
        fe = doc.get("first_error") or {}
        row = {"id": incident_id, "created": _now(), "source": source, "user": user or "", "channel": channel or "",
               "ts": ts or "", "job": doc.get("job") or "", "top_cause": top["id"] if top else "",
               "category": top["category"] if top else "", "confidence": top["confidence"] if top else 0.0,
               "first_error": (fe.get("line") or "")[:500], "outcome": "open",
               "doc": json.dumps(doc, ensure_ascii=False)}
        self._write(lambda: self.db["incidents"].insert(row))
        return incident_id

    def set_message(self, incident_id: str, channel: str, ts: str) -> None:
        self._write(lambda: self.db["incidents"].update(incident_id, {"channel": channel, "ts": ts}))

    def incident(self, incident_id: str) -> dict[str, Any] | None:
        try:
            row = self.db["incidents"].get(incident_id)
        except sqlite_utils.db.NotFoundError:
            return None
        row = dict(row)
        row["doc"] = json.loads(row["doc"])
        return row

    def record_feedback(self, incident_id: str, cause_id: str, user: str, verdict: str) -> None:
        if verdict not in ("confirmed", "not-it"):
            raise ValueError(verdict)

        def write():
            self.db["feedback"].insert({"incident_id": incident_id, "cause_id": cause_id, "user": user,
                                        "verdict": verdict, "created": _now()})
            if self.db["incidents"].count_where("id = ?", [incident_id]):
                self.db["incidents"].update(incident_id, {"outcome": verdict})

        self._write(write)

    def feedback(self, incident_id: str) -> list[dict[str, Any]]:
        return list(self.db["feedback"].rows_where("incident_id = ?", [incident_id], order_by="id"))

    def add_draft(self, incident_id: str, user: str, entry: dict[str, Any]) -> int:
        def write():
            return self.db["runbook_drafts"].insert({"incident_id": incident_id, "user": user, "created": _now(),
                                                     "entry": json.dumps(entry, ensure_ascii=False)}).last_pk
        return self._write(write)

    def drafts(self) -> list[dict[str, Any]]:
        return [{**r, "entry": json.loads(r["entry"])} for r in self.db["runbook_drafts"].rows_where(order_by="id")]

    def recent(self, limit: int = 10) -> list[dict[str, Any]]:
        rows = self.db.execute(
            "SELECT id, created, top_cause, category, confidence, outcome, job FROM incidents "
            "ORDER BY created DESC, rowid DESC LIMIT ?", [limit]).fetchall()
        keys = ("id", "created", "top_cause", "category", "confidence", "outcome", "job")
        return [dict(zip(keys, r)) for r in rows]

    def top_causes(self, days: int = 30, limit: int = 5) -> list[tuple[str, int]]:
        since = (datetime.now(timezone.utc) - timedelta(days=days)).isoformat(timespec="seconds")
        rows = self.db.execute(
            "SELECT top_cause, count(*) FROM incidents WHERE created >= ? AND top_cause != '' "
            "GROUP BY top_cause ORDER BY count(*) DESC LIMIT ?", [since, limit]).fetchall()
        return [(r[0], r[1]) for r in rows]

    def size(self) -> int:
        return self.db["runbook_drafts"].count + (
            self.db.execute("SELECT count(*) FROM entries WHERE origin = 'team'").fetchone()[0]
            if self.db["entries"].exists() else 0)
