"""The SQLite store: curated entries built from YAML, searchable with FTS5.

The database lives in the user's data directory (``GPU_TRIAGE_DATA_DIR`` or the platform's
user data dir) and is built on first use.  It is rebuilt when the entry files change (a hash of
their names and contents is kept in ``meta``).  A rebuild replaces only the curated rows inside
one transaction, so the team's own rows (runbook, incidents) are never touched, and a failed
rebuild leaves the previous base in place.
"""

from __future__ import annotations

import json
import re
import os
import sqlite3
from pathlib import Path
from typing import TYPE_CHECKING

from knowledge.loader import Entry, EntryError, entries_dir, fingerprint, load_dir

if TYPE_CHECKING:
    import sqlite_utils

DB_NAME = "gpu-triage.db"
SCHEMA_VERSION = 1


class StoreError(Exception):
    """The knowledge store cannot be used; the message says what to change."""


class SearchError(StoreError):
    """A search the store will not run: more than MAX_SEARCH_WORDS words, or a word over MAX_SEARCH_WORD."""


# A search is a few distinctive words: each becomes an FTS5 group (and a LIKE scan when FTS finds
# nothing), so a pasted log of 1 000 words or one 50 000-character word is refused, not run.
MAX_SEARCH_WORDS = 32
MAX_SEARCH_WORD = 200


def data_dir(override: str | os.PathLike | None = None) -> Path:
    if override:
        return Path(override)
    env = os.environ.get("GPU_TRIAGE_DATA_DIR")
    if env:
        return Path(env)
    from platformdirs import user_data_dir

    return Path(user_data_dir("gpu-triage", appauthor=False))


def _unusable(path: Path, exc: BaseException) -> StoreError:
    reason = getattr(exc, "strerror", None) or str(exc)
    return StoreError(
        f"cannot use the data directory {path}: {reason}. Set GPU_TRIAGE_DATA_DIR (or pass "
        "--data-dir) to a folder you can write to.")


def connect(directory: Path) -> sqlite3.Connection:
    """The database's connection: what reading needs (sqlite-utils, with the numpy and pandas it
    imports when they are installed, is loaded only by what writes)."""
    try:
        # the team's incidents, feedback and pasted lines are the owner's alone, whatever the umask:
        # a new data directory is 0700 and a new database 0600 (SQLite gives its -wal and -shm
        # files the database's mode); an existing directory or database keeps its mode
        directory.mkdir(parents=True, exist_ok=True, mode=0o700)
        if not os.access(directory, os.W_OK | os.X_OK):
            raise PermissionError(13, "Permission denied")
        try:
            os.close(os.open(directory / DB_NAME, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600))
        except FileExistsError:
            pass
        conn = sqlite3.connect(directory / DB_NAME, timeout=30, isolation_level=None)
        conn.execute("PRAGMA journal_mode=WAL")
        conn.execute("PRAGMA busy_timeout=30000")
    except (OSError, sqlite3.Error) as exc:
        raise _unusable(directory, exc) from exc
    return conn


def open_db(directory: Path) -> sqlite_utils.Database:
    import sqlite_utils

    return sqlite_utils.Database(connect(directory))


def table_exists(conn: sqlite3.Connection, table: str) -> bool:
    return conn.execute("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = ?", [table]).fetchone() is not None


def _code_fingerprint() -> str:
    """Entries are stored as the loader shaped them: a new loader or store means a rebuild."""
    import hashlib

    here = Path(__file__).resolve().parent
    digest = hashlib.sha256()
    for name in ("loader.py", "store.py"):
        digest.update((here / name).read_bytes())
    return digest.hexdigest()[:16]


def _fts_row(entry: Entry) -> dict:
    return {
        "id": entry.id,
        "category": entry.category,
        "origin": entry.origin,
        "title_en": entry.title["en"],
        "title_zh": entry.title["zh"],
        "cause_en": entry.cause["en"],
        "cause_zh": entry.cause["zh"],
        "text": " ".join(entry.signatures + entry.phrases + entry.examples.get("match", [])),
        "body": json.dumps(entry.to_json(), ensure_ascii=False),
    }


class Store:
    """Open (and build when needed) the knowledge database."""

    def __init__(self, directory: str | os.PathLike | None = None, *, entries: Path | None = None):
        self.directory = data_dir(directory)
        self.entries_path = Path(entries) if entries else entries_dir()
        self.conn = connect(self.directory)
        self._db: sqlite_utils.Database | None = None
        self.rebuilt = False

    @property
    def db(self) -> sqlite_utils.Database:
        """The same connection through sqlite-utils, for what builds and writes."""
        if self._db is None:
            import sqlite_utils

            self._db = sqlite_utils.Database(self.conn)
        return self._db

    def ensure(self) -> None:
        """Build or rebuild the curated entries when their files changed."""
        current = f"{SCHEMA_VERSION}:{_code_fingerprint()}:{fingerprint(self.entries_path)}"
        if self._meta("fingerprint") == current and table_exists(self.conn, "entries"):
            return
        entries, errors = load_dir(self.entries_path)
        if errors:
            raise KnowledgeInvalid(errors)
        try:
            with self.conn:  # one transaction; the old base stays if anything fails
                self.conn.execute("BEGIN IMMEDIATE")
                if self._meta("fingerprint") == current and table_exists(self.conn, "entries"):
                    return  # another process rebuilt it while we waited
                self._build(entries)
                self._set_meta("fingerprint", current)
                self._set_meta("schema", str(SCHEMA_VERSION))
        except sqlite3.Error as exc:
            raise _unusable(self.directory, exc) from exc
        self.rebuilt = True

    def _build(self, entries: list[Entry]) -> None:
        table = self.db["entries"]
        if not table.exists():
            table.create({"id": str, "category": str, "origin": str, "title_en": str, "title_zh": str,
                          "cause_en": str, "cause_zh": str, "text": str, "body": str}, pk="id")
            table.enable_fts(["id", "title_en", "title_zh", "cause_en", "cause_zh", "text"],
                             create_triggers=True, tokenize="trigram")
        self.db.execute("DELETE FROM entries WHERE origin = 'curated'")
        table.insert_all((_fts_row(e) for e in entries), replace=True)

    def _meta(self, key: str) -> str | None:
        if not table_exists(self.conn, "meta"):
            return None
        row = self.conn.execute("SELECT value FROM meta WHERE key = ?", [key]).fetchone()
        return row[0] if row else None

    def _set_meta(self, key: str, value: str) -> None:
        if not table_exists(self.conn, "meta"):
            self.db["meta"].create({"key": str, "value": str}, pk="key")
        self.db["meta"].upsert({"key": key, "value": value}, pk="key")

    # --- team entries: rows with origin = 'team', never touched by a rebuild ---------------------

    def put_team_entry(self, entry: Entry) -> bool:
        """Insert or replace a team entry (validated by the caller with the loader's rules).

        Refuses an id the curated base already has: a curated entry changes by pull request.
        Returns True when the entry was new.
        """
        self.ensure()
        entry.origin = "team"
        entry.path = ""
        try:
            with self.conn:
                self.conn.execute("BEGIN IMMEDIATE")
                row = self.db.execute("SELECT origin FROM entries WHERE id = ?", [entry.id]).fetchone()
                if row and row[0] != "team":
                    raise StoreError(f"{entry.id!r} is a curated entry; change knowledge/entries/ by pull request, "
                                     "or give the team entry another id")
                self.db["entries"].insert(_fts_row(entry), replace=True)
                self._set_meta("team_rev", str(int(self._meta("team_rev") or 0) + 1))
        except sqlite3.Error as exc:
            raise _unusable(self.directory, exc) from exc
        return row is None

    def delete_team_entry(self, entry_id: str) -> bool:
        self.ensure()
        with self.conn:
            self.conn.execute("BEGIN IMMEDIATE")
            gone = self.db.execute("DELETE FROM entries WHERE id = ? AND origin = 'team'", [entry_id]).rowcount
            self._set_meta("team_rev", str(int(self._meta("team_rev") or 0) + 1))
        return bool(gone)

    def team_entries(self) -> list[Entry]:
        self.ensure()
        rows = self.conn.execute("SELECT body FROM entries WHERE origin = 'team' ORDER BY category, id").fetchall()
        return [Entry.from_json(json.loads(body)) for (body,) in rows]

    def team_revision(self) -> str:
        """Changes whenever a team entry is added, edited or removed (the bot reloads its matcher)."""
        return self._meta("team_rev") or "0"

    def entries(self) -> list[Entry]:
        self.ensure()
        rows = self.conn.execute("SELECT body FROM entries ORDER BY category, id").fetchall()
        return [Entry.from_json(json.loads(body)) for (body,) in rows]

    def get(self, entry_id: str) -> Entry | None:
        self.ensure()
        row = self.conn.execute("SELECT body FROM entries WHERE id = ?", [entry_id]).fetchone()
        return Entry.from_json(json.loads(row[0])) if row else None

    def search(self, words: str, limit: int = 10) -> list[tuple[Entry, float]]:
        """Full-text search over titles, causes, signatures and examples (both languages).

        Each word also matches its synonyms in the other language (``SYNONYMS``: 显存不足 finds
        "out of memory", 共享内存 finds /dev/shm); "xid 94" lists the entries whose finding rules
        name XID 94 first.
        """
        self.ensure()
        codes = [int(c) for c in _XID_QUERY.findall(words)]
        rest = _XID_QUERY.sub(" ", words) if codes else words
        terms = [t for t in rest.split() if t]
        if len(terms) > MAX_SEARCH_WORDS:
            raise SearchError(f"a search takes at most {MAX_SEARCH_WORDS} words ({len(terms)} given); "
                              "search for the distinctive ones, such as the error's name or code")
        longest = max(terms, key=len, default="")
        if len(longest) > MAX_SEARCH_WORD:
            raise SearchError(f"a search word is at most {MAX_SEARCH_WORD} characters (one has {len(longest)}); "
                              "search for a shorter part of it")
        first: list[tuple[Entry, float]] = []
        if codes:
            for (body,) in self.conn.execute("SELECT body FROM entries ORDER BY id"):
                entry = Entry.from_json(json.loads(body))
                rank = _xid_rank(entry, codes)
                if rank is not None:
                    first.append((entry, float(rank)))
            # among equals, the entry that is about the code (xid-79-..., "XID 79" in its title) first
            first.sort(key=lambda h: (h[1], not any(f"xid-{c}" in h[0].id or f"xid {c}" in h[0].title["en"].lower()
                                                    for c in codes), h[0].id))
            if not terms:
                return first[:limit]
        if not terms:
            return []
        # each term quoted: FTS5 syntax in a user's words must not be interpreted; a term with
        # synonyms matches any of them
        groups = [_synonyms(t) for t in terms]
        query = " AND ".join("(" + " OR ".join('"' + w.replace('"', '""') + '"' for w in g) + ")" for g in groups)
        try:
            rows = self.conn.execute(
                "SELECT entries.body, bm25(entries_fts) AS rank FROM entries_fts "
                "JOIN entries ON entries.rowid = entries_fts.rowid "
                "WHERE entries_fts MATCH ? ORDER BY rank LIMIT ?", [query, limit]).fetchall()
        except sqlite3.OperationalError:
            rows = []
        if not rows:  # trigram needs 3+ characters; fall back to a LIKE scan
            where, args = [], []
            for g in groups:
                where.append("(" + " OR ".join("(title_en || title_zh || cause_en || cause_zh || text) LIKE ? "
                                               "ESCAPE '\\'" for _ in g) + ")")
                # % and _ are the user's characters, not LIKE wildcards
                args += ["%" + re.sub(r"([\\%_])", r"\\\1", w) + "%" for w in g]
            rows = self.conn.execute(f"SELECT body, 0 FROM entries WHERE {' AND '.join(where)} LIMIT ?",
                                   args + [limit]).fetchall()
        hits = [(Entry.from_json(json.loads(body)), float(rank)) for body, rank in rows]
        if first:
            ids = {e.id for e, _ in first}
            hits = first + [h for h in hits if h[0].id not in ids]
        return hits[:limit]


# "xid 94", "XID94", "Xid: 94", "xid-79"
_XID_QUERY = re.compile(r"(?i)\bxid\s*[-:#]?\s*(\d{1,3})\b")

# Words a reader types for the same thing in either language; each group matches as one.
SYNONYMS: tuple[tuple[str, ...], ...] = (
    ("显存不足", "显存溢出", "爆显存", "out of memory", "OOM"),
    ("显存", "GPU memory", "CUDA memory"),
    ("共享内存", "/dev/shm", "shared memory", "shm"),
    ("总线错误", "bus error", "SIGBUS"),
    ("内存不足", "主机内存", "host memory", "OOM killer", "oom-kill", "Cannot allocate memory"),
    ("磁盘满", "磁盘已满", "磁盘空间不足", "空间不足", "No space left", "disk full", "ENOSPC"),
    ("超时", "timeout", "timed out"),
    ("掉卡", "fallen off the bus", "GPU lost"),
    ("抢占", "preempt", "preemption", "preempted"),
    ("检查点", "checkpoint"),
    ("版本不匹配", "版本不一致", "version mismatch"),
    ("网卡", "NIC", "HCA"),
)
_SYN_INDEX = {w.lower(): g for g in SYNONYMS for w in g}


def _synonyms(term: str) -> tuple[str, ...]:
    return _SYN_INDEX.get(term.lower(), (term,))


def _xid_rank(entry: Entry, codes: list[int]) -> int | None:
    """0 when an entry's finding rule names exactly one of the codes, 1 when the code is in a list
    of codes, 2 for a rule on any XID (the catalog's fallback entry); None when it names none."""
    best = None
    for rule in entry.findings:
        if rule.get("kind") != "xid" or rule.get("rules_out"):
            continue
        want = rule.get("code")
        if want is None:
            rank = 2
        elif isinstance(want, list):
            rank = 1 if any(c in want for c in codes) else None
        else:
            rank = 0 if want in codes else None
        if rank is not None and (best is None or rank < best):
            best = rank
    return best


class KnowledgeInvalid(Exception):
    """One or more entry files failed validation."""

    def __init__(self, errors: list[EntryError]):
        self.errors = errors
        lines = "\n".join(f"  {e}" for e in errors[:20])
        more = f"\n  ... and {len(errors) - 20} more" if len(errors) > 20 else ""
        super().__init__(f"{len(errors)} knowledge entr{'y is' if len(errors) == 1 else 'ies are'} "
                         f"invalid; fix them (gpu-triage kb validate):\n{lines}{more}")
