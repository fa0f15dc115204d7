"""The SQLite store: built on first use, rebuilt when entries change, never loses what it has."""

import os
import shutil
import sqlite3

import pytest

from knowledge.loader import entries_dir
from knowledge.store import KnowledgeInvalid, Store, StoreError


@pytest.fixture
def entries(tmp_path):
    """A private copy of the shipped entries that a test may edit."""
    dest = tmp_path / "entries"
    shutil.copytree(entries_dir(), dest)
    return dest


def test_built_on_first_use_and_searchable(tmp_path, entries):
    store = Store(tmp_path / "data", entries=entries)
    loaded = store.entries()
    assert store.rebuilt and len(loaded) >= 60
    assert (tmp_path / "data" / "gpu-triage.db").is_file()
    assert Store(tmp_path / "data", entries=entries).entries() and not Store(tmp_path / "data", entries=entries).rebuilt
    hits = [e.id for e, _ in store.search("watchdog timeout")]
    assert hits and all("watchdog" in (e.title["en"] + e.cause["en"] + " ".join(e.signatures)).lower()
                        for e, _ in store.search("watchdog timeout"))



@pytest.mark.parametrize("query, first_ids, among", [
    # the Chinese word finds the English texts too (/dev/shm, bus error, out of memory)
    ("共享内存", None, "shm-exhausted-dataloader-bus-error"),
    ("总线错误", {"shm-exhausted-dataloader-bus-error"}, "host-ram-exhausted-shm-bus-error"),
    ("显存不足", None, "cuda-oom-mid-run"),
    # an XID number ranks the entry about that code first
    ("xid 94", {"xid-94-contained-ecc"}, None),
    ("XID 79", {"xid-79-fallen-off-bus"}, None),
    ("Xid: 48", {"xid-48-double-bit-ecc"}, None),
])
def test_search_finds_across_languages_and_by_xid(tmp_path, query, first_ids, among):
    hits = [e.id for e, _ in Store(tmp_path / "data").search(query)]
    assert hits, query
    if first_ids:
        assert hits[0] in first_ids, hits
    if among:
        assert among in hits, hits
    if query == "显存不足":
        assert sum(h.startswith("cuda-oom") for h in hits) >= 3, hits


def test_a_search_is_bounded_and_its_words_are_never_syntax(tmp_path):
    from knowledge.store import MAX_SEARCH_WORD, MAX_SEARCH_WORDS, SearchError

    store = Store(tmp_path / "data")
    # a pasted log of 1 001 words, one word of 50 000 characters: refused with the limit, not a
    # "LIKE or GLOB pattern too complex" or "Expression tree is too large" traceback
    with pytest.raises(SearchError, match=f"at most {MAX_SEARCH_WORDS} words \\(1001 given\\)"):
        store.search(" ".join(f"w{i}" for i in range(1001)))
    with pytest.raises(SearchError, match=f"at most {MAX_SEARCH_WORD} characters \\(one has 50000\\)"):
        store.search("a" * 50_000)
    assert store.search(" ".join(["watchdog"] * MAX_SEARCH_WORDS))  # at the limit: searched
    # % and _ are characters to find, not LIKE wildcards ("q%z" would match any q before a z)
    assert store.search("q%z") == [] and store.search("k_q") == []
    assert store.search("NCCL_IB_TIMEOUT")


def test_a_new_data_directory_and_database_are_the_owners_alone_whatever_the_umask(tmp_path):
    import stat

    old = os.umask(0o022)  # a login shell's umask: 0755 folders, 0644 files
    try:
        data = tmp_path / "data"
        store = Store(data)
        store.search("watchdog")  # builds the base: the -wal and -shm files exist now
        modes = {p.name: stat.S_IMODE(p.stat().st_mode) for p in [data, *data.iterdir()]}
    finally:
        os.umask(old)
    assert modes["data"] == 0o700
    assert modes["gpu-triage.db"] == 0o600 and modes.get("gpu-triage.db-wal", 0o600) == 0o600, modes
    assert all(mode == 0o600 for name, mode in modes.items() if name != "data"), modes


def test_rebuilt_when_an_entry_changes(tmp_path, entries):
    store = Store(tmp_path / "data", entries=entries)
    before = {e.id for e in store.entries()}
    victim = sorted(entries.rglob("*.yaml"))[0]
    copy = victim.with_name("copied-entry.yaml")
    copy.write_text(victim.read_text(encoding="utf-8").replace(f"id: {victim.stem}", "id: copied-entry", 1),
                    encoding="utf-8")
    store2 = Store(tmp_path / "data", entries=entries)
    after = {e.id for e in store2.entries()}
    assert store2.rebuilt and after == before | {"copied-entry"}
    copy.unlink()
    assert {e.id for e in Store(tmp_path / "data", entries=entries).entries()} == before


def test_invalid_entry_stops_the_rebuild_and_keeps_the_old_base(tmp_path, entries):
    store = Store(tmp_path / "data", entries=entries)
    count = len(store.entries())
    db = sqlite3.connect(tmp_path / "data" / "gpu-triage.db")
    db.execute("CREATE TABLE incidents (id INTEGER PRIMARY KEY, note TEXT)")
    db.execute("INSERT INTO incidents (note) VALUES ('kept')")
    db.commit()
    db.close()
    victim = sorted(entries.rglob("*.yaml"))[0]
    victim.write_text(victim.read_text(encoding="utf-8").replace("category:", "category: nonsense\nx:", 1),
                      encoding="utf-8")
    with pytest.raises(KnowledgeInvalid) as exc:
        Store(tmp_path / "data", entries=entries).entries()
    assert victim.name in str(exc.value) and ":" in str(exc.value)
    db = sqlite3.connect(tmp_path / "data" / "gpu-triage.db")
    assert db.execute("SELECT count(*) FROM entries").fetchone()[0] == count
    assert db.execute("SELECT note FROM incidents").fetchall() == [("kept",)]


@pytest.mark.skipif(os.geteuid() == 0, reason="root can write anywhere; covered by the file-in-the-way case")
def test_unwritable_data_dir(tmp_path):
    ro = tmp_path / "ro"
    ro.mkdir(mode=0o500)
    with pytest.raises(StoreError, match="GPU_TRIAGE_DATA_DIR"):
        Store(ro / "sub")


def test_data_dir_that_is_a_file(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("not a folder")
    with pytest.raises(StoreError, match=r"cannot use the data directory .*GPU_TRIAGE_DATA_DIR"):
        Store(blocker)


def test_a_diagnosis_reads_the_store_without_loading_sqlite_utils(tmp_path):
    """sqlite-utils (and the numpy and pandas it imports when they are installed) is for what builds
    and writes the database: once the store is built, a new process diagnoses a paste without it."""
    import subprocess
    import sys

    code = ("import sys\n"
            "from bot.engine import Engine\n"
            "d = Engine(data_dir=sys.argv[1]).diagnose_text('RuntimeError: CUDA out of memory. Tried to allocate 2.00 GiB')\n"
            "print(d.causes[0].category, 'sqlite_utils' in sys.modules)\n")
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    first = subprocess.run([sys.executable, "-c", code, str(tmp_path)], capture_output=True, text=True, cwd=root)
    assert first.returncode == 0, first.stderr
    assert first.stdout.split()[0] == "gpu-memory"  # the first run built the store (with sqlite-utils)
    again = subprocess.run([sys.executable, "-c", code, str(tmp_path)], capture_output=True, text=True, cwd=root)
    assert again.returncode == 0, again.stderr
    assert again.stdout.split() == ["gpu-memory", "False"]
