"""The team runbook: migrations, concurrent writers, a killed writer, team entries, learning, escalation."""

import json
import multiprocessing
import os
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

from bot.cli import main
from bot.engine import Engine
from bot.render import as_dict
from knowledge.runbook import SCHEMA_VERSION, Runbook, schema_version

ROOT = Path(__file__).resolve().parent.parent

# the exact CREATE statements of the runbook tables before schema versioning (commit a979b74)
OLD_SCHEMA = '''
CREATE TABLE "incidents" (
   "id" TEXT PRIMARY KEY,
   "created" TEXT,
   "source" TEXT,
   "user" TEXT,
   "channel" TEXT,
   "ts" TEXT,
   "job" TEXT,
   "top_cause" TEXT,
   "category" TEXT,
   "confidence" REAL,
   "first_error" TEXT,
   "outcome" TEXT,
   "doc" TEXT
);
CREATE INDEX "idx_incidents_created"
    ON "incidents" ("created");
CREATE TABLE "feedback" (
   "id" INTEGER PRIMARY KEY,
   "incident_id" TEXT,
   "cause_id" TEXT,
   "user" TEXT,
   "verdict" TEXT,
   "created" TEXT
);
CREATE TABLE "runbook_drafts" (
   "id" INTEGER PRIMARY KEY,
   "incident_id" TEXT,
   "user" TEXT,
   "created" TEXT,
   "entry" TEXT
);
'''

XID_DOC = {"causes": [{"id": "xid-79-fallen-off-bus", "category": "gpu-hardware", "confidence": 0.93}],
           "findings": [{"kind": "xid", "node": "gpu07", "attrs": {"code": 79, "pci": "0000:3b:00"},
                         "line": "NVRM: Xid (PCI:0000:3b:00): 79, pid=1, name=python, GPU has fallen off the bus.",
                         "ts": "2026-11-14T10:00:00"}],
           "first_error": {"line": "NVRM: Xid (PCI:0000:3b:00): 79, pid=1, name=python, GPU has fallen off the bus.",
                           "node": "gpu07"}, "nodes": []}


def xid_paste(hour: int, minute: int = 0, pid: int = 1000, node: str = "gpu07") -> str:
    return (f"{node}: [Sat Nov 14 {hour:02d}:{minute:02d}:00 2026] NVRM: Xid (PCI:0000:3b:00): 79, pid={pid}, "
            "name=python, GPU has fallen off the bus.\n[rank3]: RuntimeError: NCCL error")


# --- migrations -------------------------------------------------------------------------------

def test_a_database_of_the_old_schema_is_migrated_with_nothing_lost(tmp_path):
    data = tmp_path / "data"
    data.mkdir()
    db = sqlite3.connect(data / "gpu-triage.db")
    db.executescript(OLD_SCHEMA)
    db.execute("INSERT INTO incidents VALUES ('inc1', '2026-11-14T10:00:00+00:00', 'slash', 'U1', 'C1', '1.2', "
               "'123', 'xid-79-fallen-off-bus', 'gpu-hardware', 0.93, ?, 'confirmed', ?)",
               [XID_DOC["first_error"]["line"], json.dumps(XID_DOC)])
    db.execute("INSERT INTO feedback VALUES (1, 'inc1', 'xid-79-fallen-off-bus', 'U1', 'confirmed', "
               "'2026-11-14T10:05:00+00:00')")
    db.execute("INSERT INTO runbook_drafts VALUES (1, 'inc1', 'U1', '2026-11-14T10:06:00+00:00', '{\"title\": \"t\"}')")
    db.commit()
    db.close()

    rb = Runbook(data)
    assert schema_version(rb.db) == SCHEMA_VERSION
    row = rb.incident("inc1")
    assert row["doc"] == XID_DOC and row["outcome"] == "confirmed" and row["user"] == "U1" and row["job"] == "123"
    assert row["signature"].endswith("|xid") and row["node"] == "gpu07"
    assert rb.feedback("inc1")[0]["verdict"] == "confirmed"
    assert rb.drafts()[0]["entry"] == {"title": "t"}
    # the old incident's hardware finding entered the history
    assert sorted(e["kind"] for e in rb.node_events("gpu07")) == ["job-failed", "xid"]
    assert [r["version"] for r in rb.db["schema_migrations"].rows] == list(range(1, SCHEMA_VERSION + 1))
    # idempotent: a second start applies nothing and changes nothing
    again = Runbook(data)
    assert again.db["schema_migrations"].count == SCHEMA_VERSION and again.count() == 1


# --- concurrent writers and a killed writer -----------------------------------------------------

def _writer(directory: str, name: str, n: int, start) -> None:
    rb = Runbook(directory)
    start.wait()
    for i in range(n):
        rb.record_incident({"causes": [], "findings": [], "first_error": {"line": f"{name} {i}"}}, source=name,
                           user=f"{name}-{i}")


def test_two_processes_writing_1000_incidents_each_lose_nothing(tmp_path):
    Runbook(tmp_path)  # migrated once, so both writers start on the same schema
    ctx = multiprocessing.get_context("spawn")
    start = ctx.Event()
    procs = [ctx.Process(target=_writer, args=(str(tmp_path), name, 1000, start)) for name in ("a", "b")]
    for p in procs:
        p.start()
    start.set()
    for p in procs:
        p.join(180)
        assert p.exitcode == 0
    rb = Runbook(tmp_path)
    assert rb.count() == 2000
    for name in ("a", "b"):
        users = {r[0] for r in rb.db.execute("SELECT user FROM incidents WHERE source = ?", [name])}
        assert users == {f"{name}-{i}" for i in range(1000)}
    assert rb.db.execute("PRAGMA integrity_check").fetchone()[0] == "ok"


KILLED_WRITER = r'''
import sys, time
sys.path.insert(0, sys.argv[2])
from knowledge.runbook import Runbook
rb = Runbook(sys.argv[1])
rb.record_incident({"causes": [], "findings": []}, source="before")
def long_write():
    for i in range(500):
        rb.db["incidents"].insert({"id": f"half-{i}", "created": "x", "source": "half", "doc": "{}"})
    open(sys.argv[1] + "/ready", "w").close()
    time.sleep(60)
rb._write(long_write)
'''


def test_a_writer_killed_mid_transaction_leaves_the_database_consistent(tmp_path):
    proc = subprocess.Popen([sys.executable, "-c", KILLED_WRITER, str(tmp_path), str(ROOT)])
    try:
        deadline = time.time() + 60
        while not (tmp_path / "ready").exists():
            assert proc.poll() is None and time.time() < deadline
            time.sleep(0.05)
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(10)
    finally:
        if proc.poll() is None:
            proc.kill()
    rb = Runbook(tmp_path)  # the next start works
    assert rb.db.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    assert [r["source"] for r in rb.db["incidents"].rows] == ["before"]  # the half transaction is gone
    rb.record_incident({"causes": [], "findings": []}, source="after")
    assert rb.count() == 2


# --- team entries -------------------------------------------------------------------------------

# a real watchdog line (pytorch/pytorch issue threads): the curated nccl-watchdog-timeout entry is generic
LEAF = ("[rank3]: [Rank 3] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=52, OpType=ALLREDUCE, "
        "NumelIn=1, NumelOut=1, Timeout(ms)=600000) ran for 600041 milliseconds before timing out.")


def _add_leaf_entry(data: Path, capsys) -> None:
    assert main(["--data-dir", str(data), "kb", "add", "--title", "Leaf switch 3 reboots under load",
                 "--category", "communication", "--cause",
                 "Leaf switch 3 reboots under all-reduce load (a firmware bug); every job on rack B loses its peers.",
                 "--line", LEAF, "--command", "ssh leaf3 show logging  # look for the reboot", "--fix",
                 "Drain rack B until the switch firmware is upgraded", "--tier", "vendor",
                 "--reference", "https://docs.nvidia.com/networking/"]) == 0
    capsys.readouterr()


def _diagnose(data: Path, log: Path, capsys) -> dict:
    assert main(["--data-dir", str(data), "diagnose", str(log), "--format", "json", "--explain"]) == 0
    return json.loads(capsys.readouterr().out)


def test_a_confirmed_team_entry_outranks_the_generic_curated_one_and_explain_says_why(tmp_path, capsys):
    data, log = tmp_path / "data", tmp_path / "job.log"
    log.write_text(LEAF + "\n")
    _add_leaf_entry(data, capsys)
    before = _diagnose(data, log, capsys)
    ids = [c["id"] for c in before["causes"]]
    assert "leaf-switch-3-reboots-under-load" in ids  # a team entry is matched from then on
    assert ids[0] == "nccl-watchdog-timeout"  # the generic curated entry leads without feedback
    rb = Runbook(data)
    for n in range(3):
        inc = rb.record_incident(before, source="test")
        rb.record_feedback(inc, "leaf-switch-3-reboots-under-load", f"U{n}", "confirmed")
    after = _diagnose(data, log, capsys)
    top = after["causes"][0]
    assert top["id"] == "leaf-switch-3-reboots-under-load"
    assert "+0.30: confirmed 3x by the team for this signature" in top["explain"]
    assert after["similar"][0]["count"] == 3 and "Seen 3 time(s)" in after["similar"][0]["text"]
    assert "Drain rack B" in after["similar"][0]["text"]
    # "Not it" moves a cause down
    for n in range(3):
        inc = rb.record_incident(before, source="test")
        rb.record_feedback(inc, "nccl-watchdog-timeout", f"U{n}", "not-it")
    last = _diagnose(data, log, capsys)
    rejected = {c["id"]: c for c in last["causes"] + last.get("candidates", [])}
    assert any("-0.30: marked 'Not it' 3x" in x for x in rejected["nccl-watchdog-timeout"]["explain"])
    assert rejected["nccl-watchdog-timeout"]["confidence"] < before["causes"][0]["confidence"]
    # the text and Markdown replies carry the similar-incidents line
    main(["--data-dir", str(data), "diagnose", str(log), "--format", "markdown"])
    assert "Seen 3 time(s)" in capsys.readouterr().out
    main(["--data-dir", str(data), "diagnose", str(log), "--lang", "zh"])
    assert "已出现 3 次" in capsys.readouterr().out


def test_export_then_import_round_trips_team_entries_exactly(tmp_path, capsys):
    from knowledge.store import Store

    data = tmp_path / "data"
    _add_leaf_entry(data, capsys)
    assert main(["--data-dir", str(data), "kb", "export", "--team", "-o", str(tmp_path / "out")]) == 0
    files = sorted((tmp_path / "out").rglob("*.yaml"))
    assert [f.relative_to(tmp_path / "out").as_posix() for f in files] == [
        "communication/leaf-switch-3-reboots-under-load.yaml"]
    assert main(["--data-dir", str(tmp_path / "other"), "kb", "import", str(tmp_path / "out")]) == 0
    assert "1 added" in capsys.readouterr().out
    original = Store(data).team_entries()
    imported = Store(tmp_path / "other").team_entries()
    assert [e.to_json() for e in imported] == [e.to_json() for e in original]
    # an export of everything stamps only the team's entries as team entries
    assert main(["--data-dir", str(data), "kb", "export", "-o", str(tmp_path / "all")]) == 0
    stamped = {f.name for f in (tmp_path / "all").rglob("*.yaml")
               if f.read_text(encoding="utf-8").startswith("# team entry")}
    assert stamped == {"leaf-switch-3-reboots-under-load.yaml"}
    assert (tmp_path / "all" / "gpu-hardware" / "xid-79-fallen-off-bus.yaml").read_text(
        encoding="utf-8").startswith("# curated entry, kept in knowledge/entries/gpu-hardware/")
    # and a second export of the imported entry is byte-identical
    main(["--data-dir", str(tmp_path / "other"), "kb", "export", "--team", "-o", str(tmp_path / "out2")])
    assert (tmp_path / "out2" / files[0].relative_to(tmp_path / "out")).read_bytes() == files[0].read_bytes()


def test_kb_add_validates_with_the_loader_rules_and_curated_rows_survive_a_rebuild(tmp_path, capsys):
    from knowledge.store import Store

    data = tmp_path / "data"
    assert main(["--data-dir", str(data), "kb", "add", "--title", "x", "--category", "nonsense", "--cause", "y",
                 "--line", "boom"]) == 1
    err = capsys.readouterr().err
    assert "category 'nonsense'" in err and "reference" in err
    assert main(["--data-dir", str(data), "kb", "add", "--id", "nccl-remote-error-peer-exited", "--title", "x",
                 "--category", "communication", "--cause", "y", "--line", "boom", "--fix", "z",
                 "--reference", "https://example.org"]) == 1
    assert "curated entry" in capsys.readouterr().err
    _add_leaf_entry(data, capsys)
    store = Store(data)
    store.db.execute("UPDATE meta SET value = 'stale' WHERE key = 'fingerprint'")  # force a curated rebuild
    assert "leaf-switch-3-reboots-under-load" in {e.id for e in Store(data).entries()}


def test_kb_edit_with_a_file_and_a_slack_draft_becomes_an_entry(tmp_path, capsys):
    from knowledge.store import Store

    data = tmp_path / "data"
    _add_leaf_entry(data, capsys)
    main(["--data-dir", str(data), "kb", "export", "--team", "-o", str(tmp_path / "out")])
    path = tmp_path / "out" / "communication" / "leaf-switch-3-reboots-under-load.yaml"
    path.write_text(path.read_text().replace("en: Leaf switch 3 reboots under load",
                                             "en: Leaf switch 3 reboots under heavy load"))
    assert main(["--data-dir", str(data), "kb", "edit", "leaf-switch-3-reboots-under-load", "--file",
                 str(path)]) == 0
    assert Store(data).get("leaf-switch-3-reboots-under-load").title["en"] == "Leaf switch 3 reboots under heavy load"
    assert main(["--data-dir", str(data), "kb", "edit", "nccl-remote-error-peer-exited", "--file", str(path)]) == 1
    assert "pull request" in capsys.readouterr().err

    rb = Runbook(data)
    draft = rb.add_draft("inc1", "U1", {"title": "Lustre OST evicted the client", "category": "checkpoint-storage",
                                        "signature": "LustreError: 11-0: scratch-OST0004-osc-ffff8a: operation "
                                                     "ost_write to node 10.1.2.3@o2ib failed: rc = -107",
                                        "cause": "The OST evicted the client; checkpoint writes failed.",
                                        "fix": "Remount /scratch\nRetry from the last checkpoint",
                                        "next_commands": "lctl dl  # list the Lustre devices"})
    assert main(["--data-dir", str(data), "kb", "add", "--draft", str(draft)]) == 1
    assert "--reference" in capsys.readouterr().err
    assert main(["--data-dir", str(data), "kb", "add", "--draft", str(draft), "--reference",
                 "https://doc.lustre.org/lustre_manual.xhtml"]) == 0
    entry = Store(data).get("lustre-ost-evicted-the-client")
    assert entry.origin == "team" and entry.fix["en"] == ["Remount /scratch", "Retry from the last checkpoint"]
    assert rb.draft(draft)["entry_id"] == "lustre-ost-evicted-the-client"
    log = tmp_path / "ost.log"
    log.write_text("LustreError: 11-0: scratch-OST0007-osc-ffff91: operation ost_write to node 10.1.2.9@o2ib "
                   "failed: rc = -107\n")
    capsys.readouterr()
    assert main(["--data-dir", str(data), "diagnose", str(log), "--format", "json"]) == 0
    assert json.loads(capsys.readouterr().out)["causes"][0]["id"] == "lustre-ost-evicted-the-client"


def test_runbook_export_writes_a_bilingual_page_per_failure_mode(tmp_path, capsys):
    data = tmp_path / "data"
    _add_leaf_entry(data, capsys)
    rb = Runbook(data)
    inc = rb.record_incident(XID_DOC, source="test")
    rb.record_feedback(inc, "xid-79-fallen-off-bus", "U1", "confirmed")
    assert main(["--data-dir", str(data), "runbook", "export", "-o", str(tmp_path / "book")]) == 0
    pages = sorted(p.name for p in (tmp_path / "book").glob("*.md"))
    assert pages == ["README.md", "leaf-switch-3-reboots-under-load.md", "xid-79-fallen-off-bus.md"]
    xid = (tmp_path / "book" / "xid-79-fallen-off-bus.md").read_text()
    assert "## English" in xid and "## 中文" in xid and "| gpu07 |" in xid
    assert "Confirmed incidents" in xid and "已确认的事件" in xid


# --- repeat-aware escalation -------------------------------------------------------------------

@pytest.fixture
def fresh_engine(tmp_path):
    return Engine(data_dir=str(tmp_path / "data"))


def test_the_sixth_xid_79_on_the_same_gpu_within_a_day_escalates_to_vendor(fresh_engine):
    rb = fresh_engine.runbook
    for n in range(5):
        diagnosis = fresh_engine.diagnose_text(xid_paste(8 + n, pid=1000 + n))
        rules = [r["rule"] for r in diagnosis.escalation.reasons] if diagnosis.escalation else []
        assert "same_xid_per_gpu" not in rules  # the first five do not escalate on the XID rule
        rb.record_incident(as_dict(diagnosis), source="test")
    sixth = fresh_engine.diagnose_text(xid_paste(20, pid=2000))
    reasons = {r["rule"]: r for r in sixth.escalation.reasons}
    assert reasons["same_xid_per_gpu"]["count"] == 6 and reasons["same_xid_per_gpu"]["gpu"] == "0000:3b:00"
    doc = as_dict(sixth)
    assert doc["escalation"]["tier"] == "vendor"
    assert "Isolate the node, stop restarting, call the vendor." == doc["escalation"]["advice"]
    assert all(c["support"]["tier"] == "vendor" for c in doc["causes"])
    from bot.render.blocks import render
    from bot.render.markdown import render as markdown

    assert "call the vendor" in json.dumps(render(doc, incident_id="x").blocks)
    assert "XID 79 on gpu07 GPU 0000:3b:00 6 times within 24 h" in markdown(doc)
    zh = as_dict(sixth, lang="zh")["escalation"]
    assert "联系厂商" in zh["advice"]


def test_an_xid_burst_counts_once_and_another_gpu_or_day_does_not_add(fresh_engine):
    rb = fresh_engine.runbook
    for n in range(8):  # one burst: eight XIDs within four minutes
        rb.record_incident(as_dict(fresh_engine.diagnose_text(xid_paste(9, minute=n // 2, pid=3000 + n))),
                           source="test")
    assert "same_xid_per_gpu" not in {r["rule"] for r in
                                      (fresh_engine.diagnose_text(xid_paste(12, pid=1)).escalation or
                                       type("E", (), {"reasons": []})).reasons}
    from knowledge.escalation import Thresholds, evaluate

    th = Thresholds.from_mapping({"same_xid_per_gpu": {"more_than": 1, "hours": 1}, "burst_minutes": 1})
    assert th.same_xid_per_gpu.more_than == 1 and th.node_failed_jobs.more_than == 2
    doc = as_dict(fresh_engine.diagnose_text(xid_paste(9, minute=30, pid=9)))
    esc = evaluate(doc, lambda node, since: rb.node_events(node, since=since), thresholds=th)
    assert esc is not None and {r["rule"] for r in esc.reasons} >= {"same_xid_per_gpu"}


def test_cli_records_incidents_and_reads_escalation_thresholds_from_the_config(tmp_path):
    """`diagnose --record` feeds the history; the config file's escalation section sets the bar."""
    import shutil

    cfg = tmp_path / "gpu-triage.yaml"
    cfg.write_text("escalation:\n  same_xid_per_gpu: {more_than: 1, hours: 24}\n")
    env = {**os.environ, "GPU_TRIAGE_DATA_DIR": str(tmp_path / "data")}
    exe = shutil.which("gpu-triage")
    cmd = [exe] if exe else [sys.executable, "-m", "bot.cli"]

    def diagnose(hour: int, *extra: str) -> dict:
        log = tmp_path / f"xid-{hour}.log"
        log.write_text(xid_paste(hour, pid=100 + hour))
        proc = subprocess.run(cmd + ["--config", str(cfg), "diagnose", str(log), "--format", "json", *extra],
                              capture_output=True, text=True, env=env, timeout=120)
        assert proc.returncode == 0, proc.stderr
        return json.loads(proc.stdout)

    first = diagnose(8)  # not recorded, so it adds nothing to the history
    assert "incident" not in first and not first.get("escalation")
    recorded = diagnose(9, "--record")  # one event (the 8 h run was not stored): below "more than 1"
    assert recorded.get("incident") and not recorded.get("escalation")
    second = diagnose(11, "--record")  # the stored 9 h event + this one: 2 > 1
    assert second["escalation"]["tier"] == "vendor"
    assert all(c["support"]["tier"] == "vendor" for c in second["causes"])


def test_the_same_error_behind_a_progress_bar_or_prefix_has_the_same_signature():
    """Feedback on an error applies when the error comes back glued to a tqdm bar (same line or a
    carriage-return overwrite) or to a rank/host prefix; a different error stays different."""
    from knowledge.learning import SIMILAR, signature, similarity

    err = "RuntimeError: CUDA error: an illegal memory access was encountered"
    base = signature(err, ["cuda-error"])
    for glued in ("Training epoch 3/10:  45%|████▌     | 450/1000 [03:10<03:52, 2.36it/s, loss=0.512, "
                  "lr=1e-4, grad_norm=1.23]" + err,
                  "Epoch 3:  12%|█▏        | 120/1000 [00:41<05:02,  2.91it/s, loss=2.31]\r" + err,
                  "[rank5]: " + err, "gpu-node-017: [rank5]: " + err):
        assert similarity(signature(glued, ["cuda-error"]), base) >= 99, glued
    other = "torch.distributed.DistBackendError: NCCL communicator was aborted on rank 3."
    assert similarity(signature(other, ["cuda-error"]), base) < SIMILAR
