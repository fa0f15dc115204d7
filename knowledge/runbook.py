"""The team runbook: incidents, feedback, drafts, team entries and hardware history.

Everything lives in the same SQLite database as the curated base (``knowledge.store``), built
with sqlite-utils:

* ``incidents``: every diagnosis the bot gives (its reply document, redacted at parse time, never
  the raw paste), with its normalised signature (``knowledge.learning.signature``) and node;
* ``feedback``: "Confirmed" / "Not it" clicks; they move a cause up or down the next time a
  similar signature is seen (``knowledge.learning``);
* ``runbook_drafts``: what the "Add to runbook" modal saved, until ``gpu-triage kb add --draft N``
  turns it into a team entry;
* ``entries`` rows with ``origin = 'team'``: team entries, matched like curated ones (the
  store's rebuild replaces only ``origin = 'curated'`` rows);
* ``node_events``: per node and per GPU (PCI id, serial where known) history of hardware findings
  and failed jobs, read by ``knowledge.escalation``.

Schema versions: ``schema_migrations`` holds one row per applied migration. Each migration is a
function in :data:`MIGRATIONS`, applied in order inside one ``BEGIN IMMEDIATE`` transaction
(DDL is transactional in SQLite), so a process killed half-way leaves the previous version and
the next start applies it again; two processes starting at once apply it once. A database made
before versioning (the tables of version 1 without ``schema_migrations``) is upgraded in place.

Writers: one connection per thread, WAL, a 30 s busy timeout, and every write in a
``BEGIN IMMEDIATE`` transaction: the write lock is taken at the start, so concurrent writers
(the bot's workers, CLI processes) queue on the busy timeout instead of failing with "database
is locked" when a read transaction tries to upgrade.
"""

from __future__ import annotations

import json
import sqlite3
import threading
import uuid
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable

from knowledge.store import StoreError, connect, data_dir, table_exists

if TYPE_CHECKING:
    import sqlite_utils

_LOCK = threading.Lock()


def _not_found() -> type[Exception]:
    from sqlite_utils.db import NotFoundError

    return NotFoundError


def _now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


# --- migrations ----------------------------------------------------------------------------------

def _m1_base(db: sqlite_utils.Database) -> None:
    """Version 1: incidents, feedback and drafts as the Slack bot first stored them."""
    db["incidents"].create({
        "id": str, "created": str, "source": str, "user": str, "channel": str, "ts": str,
        "job": str, "top_cause": str, "category": str, "confidence": float, "first_error": str,
        "outcome": str, "doc": str}, pk="id", if_not_exists=True)
    db["incidents"].create_index(["created"], if_not_exists=True)
    db["feedback"].create({"id": int, "incident_id": str, "cause_id": str, "user": str,
                           "verdict": str, "created": str}, pk="id", if_not_exists=True)
    db["runbook_drafts"].create({"id": int, "incident_id": str, "user": str, "created": str,
                                 "entry": str}, pk="id", if_not_exists=True)


def _m2_signatures_and_history(db: sqlite_utils.Database) -> None:
    """Version 2: incident signatures and nodes, the hardware history, promoted drafts.

    Existing incidents get their signature and node from their stored document, and their
    hardware findings are entered into the history, so nothing recorded before is lost to the
    new features.
    """
    from knowledge.learning import signature_of_doc

    cols = db["incidents"].columns_dict
    if "signature" not in cols:
        db["incidents"].add_column("signature", str, not_null_default="")
    if "node" not in cols:
        db["incidents"].add_column("node", str, not_null_default="")
    db["incidents"].create_index(["signature"], if_not_exists=True)
    db["feedback"].create_index(["incident_id"], if_not_exists=True)
    if "entry_id" not in db["runbook_drafts"].columns_dict:
        db["runbook_drafts"].add_column("entry_id", str, not_null_default="")
    db["node_events"].create({"id": int, "incident_id": str, "created": str, "at": str, "node": str, "gpu": str,
                              "serial": str, "kind": str, "code": str, "job": str, "line": str},
                             pk="id", if_not_exists=True)
    db["node_events"].create_index(["node", "kind", "at"], if_not_exists=True)
    for row in list(db.query("SELECT id, created, job, doc FROM incidents")):
        try:
            doc = json.loads(row["doc"])
        except (TypeError, ValueError):
            continue
        db.execute("UPDATE incidents SET signature = ?, node = ? WHERE id = ?",
                   [signature_of_doc(doc), _failing_node(doc), row["id"]])
        _insert_events(db, row["id"], row["created"], row["job"] or "", doc)


def _m3_feedback_note(db: sqlite_utils.Database) -> None:
    """Version 3: a note with each verdict (the command line's ``feedback --note``)."""
    if "note" not in db["feedback"].columns_dict:
        db["feedback"].add_column("note", str, not_null_default="")


def _m4_signatures_on_the_error(db: sqlite_utils.Database) -> None:
    """Version 4: signatures computed on the error itself (progress bars, rank/host/time prefixes and
    carriage-return overwrites removed), recomputed for stored incidents so old and new compare alike."""
    from knowledge.learning import signature_of_doc

    for row in list(db.query("SELECT id, doc FROM incidents")):
        try:
            doc = json.loads(row["doc"])
        except (TypeError, ValueError):
            continue
        db.execute("UPDATE incidents SET signature = ? WHERE id = ?", [signature_of_doc(doc), row["id"]])


MIGRATIONS: list[tuple[int, Callable[[sqlite_utils.Database], None]]] = [
    (1, _m1_base),
    (2, _m2_signatures_and_history),
    (3, _m3_feedback_note),
    (4, _m4_signatures_on_the_error),
]
SCHEMA_VERSION = MIGRATIONS[-1][0]


def schema_version(db: sqlite_utils.Database | sqlite3.Connection) -> int:
    conn = getattr(db, "conn", db)
    if not table_exists(conn, "schema_migrations"):
        return 0
    row = conn.execute("SELECT max(version) FROM schema_migrations").fetchone()
    return int(row[0] or 0)


def migrate(db: sqlite_utils.Database) -> list[int]:
    """Apply the migrations this database lacks, each in its own transaction; return their versions."""
    applied = []
    for version, fn in MIGRATIONS:
        if schema_version(db) >= version:
            continue
        db.execute("BEGIN IMMEDIATE")
        try:
            db["schema_migrations"].create({"version": int, "name": str, "applied": str}, pk="version",
                                           if_not_exists=True)
            if schema_version(db) < version:  # another process may have applied it while we waited
                fn(db)
                db["schema_migrations"].insert({"version": version, "name": fn.__name__.lstrip("_"),
                                                "applied": _now()})
                applied.append(version)
            db.execute("COMMIT")
        except BaseException:
            if db.conn.in_transaction:
                db.execute("ROLLBACK")
            raise
    return applied


# --- history helpers ----------------------------------------------------------------------------

def _failing_node(doc: dict[str, Any]) -> str:
    """The node an incident points at: the first error's, else the first with a hardware finding."""
    from knowledge.escalation import failing_nodes

    return (failing_nodes(doc) or [""])[0]


def _insert_events(db: sqlite_utils.Database, incident_id: str, created: str, job: str,
                   doc: dict[str, Any]) -> int:
    from knowledge.escalation import events_from_doc

    rows = []
    for ev in events_from_doc(doc, created):
        if ev["kind"] != "job-failed" and db.execute(
                "SELECT 1 FROM node_events WHERE node = ? AND kind = ? AND line = ? AND at = ? LIMIT 1",
                [ev["node"], ev["kind"], ev["line"], ev["at"]]).fetchone():
            continue  # the same kernel-log line collected again (dmesg is read whole each time)
        rows.append({**ev, "incident_id": incident_id, "created": created, "job": job})
    if rows:
        db["node_events"].insert_all(rows)
    return len(rows)


# --- the runbook ---------------------------------------------------------------------------------

class Runbook:
    """One connection per thread (SQLite connections are not shared across threads); WAL and a
    busy timeout let the bot's workers and CLI processes write side by side."""

    def __init__(self, directory: str | Path | None = None):
        self.directory = data_dir(directory)
        self._local = threading.local()
        self._ensure()

    @property
    def conn(self) -> sqlite3.Connection:
        """This thread's connection: what reads need (a diagnosis reads verdicts and node history)."""
        conn = getattr(self._local, "conn", None)
        if conn is None:
            conn = self._local.conn = connect(self.directory)
        return conn

    @property
    def db(self) -> sqlite_utils.Database:
        """The same connection through sqlite-utils, for what migrates and writes."""
        db = getattr(self._local, "db", None)
        if db is None:
            import sqlite_utils

            db = self._local.db = sqlite_utils.Database(self.conn)
        return db

    def _ensure(self) -> None:
        with _LOCK:
            try:
                if schema_version(self.conn) >= SCHEMA_VERSION:
                    return
                migrate(self.db)
            except sqlite3.Error as exc:
                raise StoreError(f"cannot upgrade the gpu-triage database in {self.directory}: {exc}; "
                                 "check GPU_TRIAGE_DATA_DIR") from exc

    def _write(self, fn: Callable[[], Any]) -> Any:
        """Run ``fn`` in one ``BEGIN IMMEDIATE`` transaction: all of it lands, or none of it."""
        with _LOCK:
            db = self.db
            try:
                db.execute("BEGIN IMMEDIATE")
                try:
                    result = fn()
                    db.execute("COMMIT")
                    return result
                except BaseException:
                    if db.conn.in_transaction:
                        db.execute("ROLLBACK")
                    raise
            except sqlite3.Error as exc:
                raise StoreError(f"cannot write to the gpu-triage database: {exc}; check GPU_TRIAGE_DATA_DIR") \
                    from exc

    # incidents

    def record_incident(self, doc: dict[str, Any], *, source: str, user: str | None = None,
                        channel: str | None = None, ts: str | None = None, created: str | None = None) -> str:
        """Store one diagnosis and the hardware findings it saw; return the incident id."""
        from knowledge.learning import signature_of_doc

        incident_id = uuid.uuid4().hex[:12]
        created = created or _now()
        top = doc["causes"][0] if doc.get("causes") else None
        fe = doc.get("first_error") or {}
        job = str(doc.get("job") or "")
        row = {"id": incident_id, "created": created, "source": source, "user": user or "", "channel": channel or "",
               "ts": ts or "", "job": job, "top_cause": top["id"] if top else "",
               "category": top["category"] if top else "", "confidence": top["confidence"] if top else 0.0,
               "first_error": (fe.get("line") or "")[:500], "outcome": "open",
               "doc": json.dumps(doc, ensure_ascii=False),
               "signature": doc.get("signature") or signature_of_doc(doc), "node": _failing_node(doc)}

        def write():
            self.db["incidents"].insert(row)
            _insert_events(self.db, incident_id, created, job, doc)

        self._write(write)
        return incident_id

    def set_message(self, incident_id: str, channel: str, ts: str) -> None:
        self._write(lambda: self.db["incidents"].update(incident_id, {"channel": channel, "ts": ts}))

    def incident(self, incident_id: str) -> dict[str, Any] | None:
        try:
            row = self.db["incidents"].get(incident_id)
        except _not_found():
            return None
        row = dict(row)
        row["doc"] = json.loads(row["doc"])
        return row

    def count(self) -> int:
        return self.db["incidents"].count

    # feedback

    def record_feedback(self, incident_id: str, cause_id: str, user: str, verdict: str, note: str = "") -> None:
        if verdict not in ("confirmed", "not-it"):
            raise ValueError(verdict)

        def write():
            self.db["feedback"].insert({"incident_id": incident_id, "cause_id": cause_id, "user": user,
                                        "verdict": verdict, "created": _now(), "note": note[:2000]})
            if self.db["incidents"].count_where("id = ?", [incident_id]):
                self.db["incidents"].update(incident_id, {"outcome": verdict})

        self._write(write)

    def feedback(self, incident_id: str) -> list[dict[str, Any]]:
        return list(self.db["feedback"].rows_where("incident_id = ?", [incident_id], order_by="id"))

    def verdicts(self) -> list[dict[str, Any]]:
        """Every feedback row with its incident's signature, node and time (for ranking and similar
        incidents); the latest verdict of each user on each incident and cause counts."""
        rows = self.conn.execute(
            "SELECT f.cause_id, f.verdict, i.id, i.signature, i.node, i.created, f.user FROM feedback f "
            "JOIN incidents i ON i.id = f.incident_id WHERE i.signature != '' ORDER BY f.id").fetchall()
        latest: dict[tuple[str, str, str], dict[str, Any]] = {}
        for cause, verdict, incident, sig, node, created, user in rows:
            latest[(incident, cause, user)] = {"cause_id": cause, "verdict": verdict, "incident_id": incident,
                                               "signature": sig, "node": node, "created": created}
        return list(latest.values())

    # drafts

    def add_draft(self, incident_id: str, user: str, entry: dict[str, Any]) -> int:
        def write():
            return self.db["runbook_drafts"].insert({"incident_id": incident_id, "user": user, "created": _now(),
                                                     "entry": json.dumps(entry, ensure_ascii=False),
                                                     "entry_id": ""}).last_pk
        return self._write(write)

    def drafts(self) -> list[dict[str, Any]]:
        return [{**r, "entry": json.loads(r["entry"])} for r in self.db["runbook_drafts"].rows_where(order_by="id")]

    def draft(self, draft_id: int) -> dict[str, Any] | None:
        try:
            row = dict(self.db["runbook_drafts"].get(draft_id))
        except _not_found():
            return None
        row["entry"] = json.loads(row["entry"])
        return row

    def mark_draft(self, draft_id: int, entry_id: str) -> None:
        self._write(lambda: self.db["runbook_drafts"].update(draft_id, {"entry_id": entry_id}))

    # hardware history

    def node_events(self, node: str, *, kinds: tuple[str, ...] | None = None, since: str | None = None
                    ) -> list[dict[str, Any]]:
        where, args = ["node = ?"], [node]
        if kinds:
            where.append(f"kind IN ({', '.join('?' for _ in kinds)})")
            args += list(kinds)
        if since:
            where.append("at >= ?")
            args.append(since)
        cur = self.conn.execute(f"SELECT * FROM node_events WHERE {' AND '.join(where)} ORDER BY at", args)
        names = [c[0] for c in cur.description]
        return [dict(zip(names, row)) for row in cur.fetchall()]

    # App Home

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

    def confirmed_incidents(self, cause_id: str) -> list[dict[str, Any]]:
        """Incidents whose cause the team confirmed (for the published runbook)."""
        rows = self.db.execute(
            "SELECT DISTINCT i.id, i.created, i.node, i.job, i.first_error FROM feedback f "
            "JOIN incidents i ON i.id = f.incident_id WHERE f.cause_id = ? AND f.verdict = 'confirmed' "
            "ORDER BY i.created DESC", [cause_id]).fetchall()
        return [dict(zip(("id", "created", "node", "job", "first_error"), r)) for r in rows]

    def size(self) -> int:
        pending = self.db.execute("SELECT count(*) FROM runbook_drafts WHERE entry_id = ''").fetchone()[0]
        return pending + (self.db.execute("SELECT count(*) FROM entries WHERE origin = 'team'").fetchone()[0]
                          if self.db["entries"].exists() else 0)
