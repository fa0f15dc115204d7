"""The CLI end to end: DESIGN.md's JSON on real logs, exit codes, and bad input without tracebacks."""

import gzip
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from bot.cli import main
from corpus_eval import CORPUS, load_cases
from knowledge.loader import CATEGORIES

ROOT = Path(__file__).resolve().parent.parent
XID_LINE = re.compile(r"NVRM: Xid \((?:PCI:)?[0-9a-fA-F:.]+\): (\d+)")


def run_cli(args, data_dir, stdin=None, env=None):
    """The real console script in a child process."""
    exe = shutil.which("gpu-triage")
    cmd = [exe] if exe else [sys.executable, "-m", "bot.cli"]
    full_env = {**os.environ, "GPU_TRIAGE_DATA_DIR": str(data_dir), **(env or {})}
    return subprocess.run(cmd + list(args), input=stdin, capture_output=True, env=full_env, timeout=300)


def diagnose_json(path, data_dir, capsys, *extra):
    code = main(["--data-dir", str(data_dir), "diagnose", str(path), "--format", "json", *extra])
    out = capsys.readouterr().out
    assert code == 0
    return json.loads(out)


def check_design_shape(doc):
    assert set(doc) >= {"causes", "findings", "first_error", "nodes"}
    confs = [c["confidence"] for c in doc["causes"]]
    assert confs == sorted(confs, reverse=True)
    for cause in doc["causes"]:
        assert set(cause) >= {"id", "category", "title", "confidence", "evidence", "next_commands", "support"}
        assert cause["category"] in CATEGORIES
        assert 0 <= cause["confidence"] <= 1
        assert cause["evidence"], f"{cause['id']} has no evidence"
        for ev in cause["evidence"]:
            assert set(ev) >= {"source", "node", "rank", "line"}
        for cmd in cause["next_commands"]:
            assert cmd["command"] and cmd["why"]
        assert cause["support"]["tier"] in ("self", "remote", "onsite", "vendor")
        assert "why" in cause["support"] and "estimate" in cause["support"]
    for f in doc["findings"]:
        assert set(f) >= {"kind", "node", "attrs", "line"}
    if doc["first_error"] is not None:
        assert set(doc["first_error"]) >= {"rank", "node", "line", "line_no"}
    assert isinstance(doc["nodes"], list)


@pytest.mark.parametrize("case", load_cases(), ids=lambda c: c.file)
def test_every_corpus_file_gives_design_json_with_every_xid(case, data_dir, capsys):
    doc = diagnose_json(case.path, data_dir, capsys)
    check_design_shape(doc)
    text = case.path.read_text(encoding="utf-8", errors="replace")
    in_log = {int(c) for c in XID_LINE.findall(text)}
    found = {f["attrs"].get("code") for f in doc["findings"] if f["kind"] == "xid"}
    assert in_log <= found, f"XID codes {sorted(in_log - found)} in the log but not in the findings"


def test_kernel_log_fixtures_every_xid_is_a_finding(data_dir, capsys):
    fixtures = sorted((ROOT / "tests" / "fixtures" / "kernel-log").glob("*.txt"))
    assert fixtures
    for path in fixtures:
        doc = diagnose_json(path, data_dir, capsys)
        in_log = {int(c) for c in XID_LINE.findall(path.read_text(encoding="utf-8", errors="replace"))}
        found = {f["attrs"].get("code") for f in doc["findings"] if f["kind"] == "xid"}
        assert in_log <= found, path.name


def test_user_code_bug_and_a_poem_get_no_confident_cause(tmp_path, data_dir, capsys):
    bug = tmp_path / "keyerror.log"
    bug.write_text('Traceback (most recent call last):\n  File "train.py", line 88, in <module>\n'
                   '    lr = cfg["optim"]["lr"]\nKeyError: \'optim\'\n')
    poem = tmp_path / "poem.txt"
    poem.write_text("床前明月光，疑是地上霜。\nThe woods are lovely, dark and deep,\nBut I have promises to keep.\n")
    for path in (bug, poem):
        doc = diagnose_json(path, data_dir, capsys)
        assert doc["causes"] == [] and doc["confident"] is False
        assert "No confident cause" in doc["message"]
        assert len(doc["generic_next_steps"]) >= 3


def test_chinese_and_markdown_output(data_dir, capsys):
    log = CORPUS / "shared-memory" / "torchtitan-ci-dev-shm-16mb-nccl-system-error.log"
    doc = diagnose_json(log, data_dir, capsys, "--lang", "zh")
    assert doc["causes"] and re.search(r"[\u4e00-\u9fff]", doc["causes"][0]["title"] + doc["causes"][0]["cause"])
    assert main(["--data-dir", str(data_dir), "diagnose", str(log), "--format", "markdown"]) == 0
    md = capsys.readouterr().out
    assert md.startswith("# gpu-triage diagnosis") and "## Probable cause" in md and "```" in md


def test_explain_shows_the_votes(data_dir, capsys):
    log = CORPUS / "shared-memory" / "torchtitan-ci-dev-shm-16mb-nccl-system-error.log"
    doc = diagnose_json(log, data_dir, capsys, "--explain")
    assert doc["causes"][0]["explain"] and any(e.startswith("+") for e in doc["causes"][0]["explain"])
    assert "candidates" in doc


def test_rate_card_estimate(data_dir, capsys):
    log = CORPUS / "shared-memory" / "torchtitan-ci-dev-shm-16mb-nccl-system-error.log"
    doc = diagnose_json(log, data_dir, capsys, "--rate-card", str(ROOT / "deploy" / "rate-card.example.yaml"),
                        "--gpus", "64", "--region", "shanghai")
    est = doc["causes"][0]["support"]["estimate"]
    assert est["example_rates"] is True and est["idle_cost_per_hour"] == 64 * 20


def test_secrets_are_redacted_before_output(tmp_path, data_dir, capsys):
    token = "xoxb-" + "1234567890-0987654321-" + "AbCdEfGhIjKlMnOpQrStUvWx"
    log = tmp_path / "secret.log"
    log.write_text(f"export SLACK_BOT_TOKEN={token}\nRuntimeError: CUDA error: out of memory token={token}\n")
    assert main(["--data-dir", str(data_dir), "diagnose", str(log), "--format", "json"]) == 0
    assert token not in capsys.readouterr().out


def test_stdin_and_piped_output_has_no_colour(data_dir):
    log = (CORPUS / "shared-memory" / "torchtitan-ci-dev-shm-16mb-nccl-system-error.log").read_bytes()
    proc = run_cli(["diagnose", "-"], data_dir, stdin=log)
    assert proc.returncode == 0, proc.stderr
    assert b"\x1b[" not in proc.stdout and b"Probable cause" in proc.stdout


def test_gzip_and_folder_of_rank_logs(tmp_path, data_dir, capsys):
    logs = tmp_path / "ranks"
    logs.mkdir()
    src = CORPUS / "shared-memory" / "torchtitan-ci-dev-shm-16mb-nccl-system-error.log"
    with gzip.open(logs / "rank0.log.gz", "wb") as fh:
        fh.write(src.read_bytes())
    (logs / "rank1.log").write_text("step 100 loss 2.31\n")
    doc = diagnose_json(logs, data_dir, capsys)
    assert doc["causes"] and len(doc["stats"]["sources"]) == 2


# --- bad input: a clear message, the right exit code, never a traceback ------------------------

def assert_clean_failure(proc, code, *needles):
    err = proc.stderr.decode("utf-8", "replace")
    assert proc.returncode == code, (proc.returncode, err)
    assert "Traceback" not in err
    for needle in needles:
        assert needle in err, err


def test_missing_file(tmp_path, data_dir):
    assert_clean_failure(run_cli(["diagnose", str(tmp_path / "nope.log")], data_dir), 1, "nope.log")


def test_directory_without_logs(tmp_path, data_dir):
    (tmp_path / "empty").mkdir()
    assert_clean_failure(run_cli(["diagnose", str(tmp_path / "empty")], data_dir), 1, "empty")


def test_binary_file(tmp_path, data_dir):
    blob = tmp_path / "core.bin"
    blob.write_bytes(bytes(range(256)) * 64)
    assert_clean_failure(run_cli(["diagnose", str(blob)], data_dir), 1, "core.bin")


def test_empty_paste(tmp_path, data_dir):
    (tmp_path / "empty.log").write_text("")
    assert_clean_failure(run_cli(["diagnose", str(tmp_path / "empty.log")], data_dir), 1, "empty")
    assert_clean_failure(run_cli(["diagnose", "-"], data_dir, stdin=b""), 1)


def test_invalid_utf8_is_diagnosed_with_a_warning(tmp_path, data_dir):
    log = tmp_path / "latin1.log"
    log.write_bytes(b"caf\xe9 \xff\xfe\n" + (CORPUS / "shared-memory" /
                                              "torchtitan-ci-dev-shm-16mb-nccl-system-error.log").read_bytes())
    proc = run_cli(["diagnose", str(log), "--format", "json"], data_dir)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["causes"]
    assert b"UTF-8" in proc.stderr


def test_unusable_data_dir(tmp_path):
    blocker = tmp_path / "not-a-dir"
    blocker.write_text("x")
    log = CORPUS / "shared-memory" / "torchtitan-ci-dev-shm-16mb-nccl-system-error.log"
    assert_clean_failure(run_cli(["diagnose", str(log)], blocker), 1, "GPU_TRIAGE_DATA_DIR")


def test_malformed_entry_is_named(tmp_path, data_dir):
    bad = tmp_path / "entries"
    bad.mkdir()
    (bad / "broken.yaml").write_text("id: broken\ncategory: gpu-memory\nsignatures:\n  - '(unclosed'\n")
    assert_clean_failure(run_cli(["kb", "validate", str(bad)], data_dir), 1, "broken.yaml:4:")


def test_misuse_exits_2(data_dir):
    assert run_cli(["diagnose"], data_dir).returncode == 2
    assert run_cli(["diagnose", "x.log", "--format", "yaml"], data_dir).returncode == 2
    assert run_cli(["frobnicate"], data_dir).returncode == 2


def test_kb_commands(data_dir):
    proc = run_cli(["kb", "list", "--category", "gpu-hardware"], data_dir)
    assert proc.returncode == 0 and b"gpu-hardware" in proc.stdout
    assert_clean_failure(run_cli(["kb", "show", "no-such-entry"], data_dir), 1, "no-such-entry")
    assert_clean_failure(run_cli(["kb", "list", "--category", "nope"], data_dir), 1, "categories:")
    proc = run_cli(["kb", "search", "watchdog"], data_dir)
    assert proc.returncode == 0 and b"communication" in proc.stdout


def test_two_gigabyte_log_streams_in_bounded_memory(tmp_path, data_dir):
    """A 2 GB log (NCCL INFO chatter, one buried XID) is scanned whole without being loaded."""

    chatter = "".join(
        f"gpu{r % 8:02d}:{4000 + r}:{4100 + r} [{r % 8}] NCCL INFO Channel {r % 32:02d}/0 : {r} -> {r + 1} via P2P/IPC\n"
        f"[rank{r}]: step 41{r:03d} loss 2.{r:03d} lr 3.0e-4\n" for r in range(64)).encode()
    block = chatter * (1024 * 1024 // len(chatter) + 1)
    buried = b"[Tue Nov 24 03:12:09 2026] NVRM: Xid (PCI:0000:3b:00): 79, pid=48213, name=python, GPU has fallen off the bus.\n"
    big = tmp_path / "big.log"
    size = 0
    with open(big, "wb") as fh:
        while size < 2 * 1024 ** 3:
            fh.write(block)
            size += len(block)
            if size >= int(1.4 * 1024 ** 3) and buried:
                fh.write(buried)
                buried = b""
    # the child's own peak: VmHWM of its process image, read as it exits. (rusage's maxrss would
    # also count the forked copy of this test process from before exec.)
    code = ("import sys\nfrom bot.cli import main\nrc = main(sys.argv[1:])\n"
            "print(next(l for l in open('/proc/self/status') if l.startswith('VmHWM')), file=sys.stderr)\n"
            "sys.exit(rc)")
    cmd = [sys.executable, "-c", code, "diagnose", str(big), "--format", "json"]
    env = {**os.environ, "GPU_TRIAGE_DATA_DIR": str(data_dir)}
    out_path = tmp_path / "out.json"
    with open(out_path, "wb") as out, open(tmp_path / "err.txt", "wb") as err:
        child = subprocess.run(cmd, stdout=out, stderr=err, env=env, cwd=ROOT)
    hwm = re.search(r"VmHWM:\s+(\d+) kB", (tmp_path / "err.txt").read_text())
    assert hwm, (tmp_path / "err.txt").read_text()
    peak_mb = int(hwm.group(1)) / 1024
    big.unlink()
    assert child.returncode == 0, (tmp_path / "err.txt").read_text()
    doc = json.loads(out_path.read_text())
    assert doc["stats"]["bytes"] >= 2 * 1024 ** 3
    assert any(f["kind"] == "xid" and f["attrs"]["code"] == 79 for f in doc["findings"])
    assert doc["causes"][0]["id"].startswith("xid-79")
    print(f"peak RSS {peak_mb:.0f} MB")
    assert peak_mb < 300, f"peak RSS {peak_mb:.0f} MB"


def test_feedback_from_the_command_line_builds_the_runbook(tmp_path, capsys):
    # a private database: a verdict here must not move other tests' answers
    data_dir = tmp_path / "data"
    log = CORPUS / "host-memory" / "open-r1-grpo-childfailed-signal9-sigkill.log"
    assert main(["--data-dir", str(data_dir), "diagnose", "--record", str(log)]) == 0
    err = capsys.readouterr().err
    incident = re.search(r"recorded as incident ([0-9a-f]+)", err).group(1)
    assert f"gpu-triage feedback {incident} confirm" in err
    # a wrong id or a cause the incident never proposed: a clear message, exit 1, nothing stored
    assert main(["--data-dir", str(data_dir), "feedback", "0000", "confirm"]) == 1
    assert "no incident '0000'" in capsys.readouterr().err
    assert main(["--data-dir", str(data_dir), "feedback", incident, "reject", "--cause", "xid-79-fallen-off-bus"]) == 1
    assert "did not propose" in capsys.readouterr().err
    assert main(["--data-dir", str(data_dir), "feedback", incident, "confirm", "--note", "dmesg: oom-kill"]) == 0
    capsys.readouterr()
    from knowledge.runbook import Runbook

    (row,) = Runbook(data_dir).feedback(incident)
    assert (row["cause_id"], row["verdict"], row["note"]) == ("host-oom-killer-sigkill", "confirmed", "dmesg: oom-kill")
    # the next diagnosis of the same failure says it was seen and confirmed before
    assert main(["--data-dir", str(data_dir), "diagnose", str(log)]) == 0
    assert "Seen 1 time(s)" in capsys.readouterr().out
