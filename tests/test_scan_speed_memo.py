"""The scan's shortcuts (issue 11) say what the long way says: the redaction memo by digit template,
the per-text memo of the rules, the rules' substring gates, and the cached Hyperscan database."""

from __future__ import annotations

import os
import re

import pytest

from collectors import redact, trainlog
from collectors.trainlog import parse_text

WATCHDOG = ("[rank{r}]:[E813 04:12:1{r}.123 ProcessGroupNCCL.cpp:607] [Rank {r}] Watchdog caught collective "
            "operation timeout: WorkNCCL(SeqNum={s}, OpType=ALLREDUCE, NumelIn=8388608, NumelOut=8388608, "
            "Timeout(ms)=600000) ran for 600081 milliseconds before timing out.")


def _digit_free(pattern: str) -> bool:
    """No literal digit and no class that tells digits apart, once quantifiers ({20,}) and the whole
    range 0-9 are taken out."""
    p = re.sub(r"\{\d+(,\d*)?\}", "", pattern).replace("0-9", "")
    return not re.search(r"\d", p)


def test_the_redactor_treats_all_digits_alike():
    """_Scanner._redacted remembers lines by their digit template; that is sound only while no
    pattern of collectors/redact.py tells one digit from another."""
    pats = [v for v in vars(redact).values() if isinstance(v, re.Pattern)]
    assert len(pats) >= 8
    bad = [p.pattern for p in pats if not _digit_free(p.pattern)]
    assert not bad, bad
    assert not any(ch.isdigit() for h in redact._HINTS for ch in h)


def test_redaction_memo_says_what_the_redactor_says():
    lines = [WATCHDOG.format(r=r, s=s) for r in (1, 2) for s in (7, 8)] + [
        "export WANDB_API_KEY=0123456789abcdef0123456789abcdef",
        "export WANDB_API_KEY=9876543210abcdef0123456789abcdef",
        "caught 12 things", "caught 34 things",
        "token: ghp_0123456789012345678901234567890",
        "-----BEGIN RSA PRIVATE KEY-----", "caught 12 things", "MIIEow0123", "-----END RSA PRIVATE KEY-----",
        "caught 56 things",
    ]
    sc = trainlog._Scanner(())
    plain = redact.Redactor()
    assert [sc._redacted(ln) for ln in lines] == [plain(ln) for ln in lines]
    assert "[REDACTED]" in sc._redacted("export WANDB_API_KEY=1111111111abcdef")


def test_repeated_lines_get_findings_of_their_own():
    """The rules read a repeated text once; each line still gets its own finding and attributes."""
    text = "\n".join(WATCHDOG.format(r=r, s=101) for r in range(4)) + "\n"
    r = parse_text(text)
    found = [f for f in r.findings if f.kind == "nccl-timeout"]
    assert [f.rank for f in found] == [0, 1, 2, 3]
    assert len({id(f.attrs) for f in found}) == 4
    assert all(f.attrs["seq"] == 101 for f in found)


@pytest.mark.parametrize("line, kind", [
    ("srun: error: gpu07: task 3: Killed", "exit-signal"),
    ("train.sh: line 3: 12345 Killed                 python train.py", "exit-signal"),
    ("torchrun: Killed by signal: Killed", "exit-signal"),
    # the long s (U+017F) matches 's' case-insensitively and lower() keeps it: such lines are searched
    ("torchrun: killed by \u017fignal: Killed", "exit-signal"),
    ("process exits with return code 3", "exit-signal"),
    ("RuntimeError: CUDA error: an illegal memory access was encountered", "cuda-error"),
    ("RuntimeError: cuDNN error: CUDNN_STATUS_EXECUTION_FAILED", "cuda-error"),
    ("NCCL WARN NET/IB : transport retry counter exceeded", "ib-error"),
    ("DeepSpeed version: 0.14.2", "version"),
    ("NVIDIA-SMI 550.54.15    Driver Version: 550.54.15    CUDA Version: 12.4", "version"),
])
def test_gated_rules_still_read_their_lines(line, kind):
    assert kind in {f.kind for f in parse_text(line + "\n").findings}


def test_gates_only_skip_searches_that_find_nothing():
    """Each gated search, run on every line of the real fixtures, finds nothing where its gate says no."""
    fix = os.path.join(os.path.dirname(__file__), "fixtures", "trainlog")
    gates = [
        (trainlog._CUDA_ERR_TRIG, lambda t, low: trainlog._maybe(t, low, trainlog._CUDA_ERR_WORDS)),
        (trainlog._IB_RETRY, lambda t, low: trainlog._maybe(t, low, trainlog._IB_RETRY_WORDS)),
        (trainlog._RET_CODE, lambda t, low: trainlog._maybe(t, low, trainlog._RET_CODE_WORDS)),
        (trainlog._WEAK_WORD, lambda t, low: trainlog._maybe(t, low, trainlog._WEAK_WORDS)),
    ] + [(rx, (lambda w, exact: lambda t, low: (w in t) if exact else trainlog._maybe(t, low, (w,)))(w, exact))
         for (_, rx), (w, exact) in zip(trainlog._VERSIONS, trainlog._VERSION_WORDS)]
    n = 0
    for name in sorted(os.listdir(fix)):
        with open(os.path.join(fix, name), encoding="utf-8", errors="replace") as fh:
            for raw in fh:
                t = raw.rstrip("\n")
                low = t.lower()
                for rx, gate in gates:
                    if rx.search(t):
                        n += 1
                        assert gate(t, low), (rx.pattern, t)
                if trainlog._FILE_FRAME.search(low):
                    assert any(w in low for w in trainlog._FILE_FRAME_WORDS), t
    assert n > 20


def test_hyperscan_database_is_cached_and_rebuilt_when_damaged(tmp_path, monkeypatch):
    pytest.importorskip("hyperscan")
    monkeypatch.setenv("GPU_TRIAGE_CACHE_DIR", str(tmp_path))
    data = b"".join(x.encode() + b"\n" for x in [
        "step 1 loss 2.0", "torch.OutOfMemoryError: CUDA out of memory.", "nccl watchdog hit",
        "NCCL INFO Channel 00/0 : 3[3] -> 4[4] via P2P/IPC/read", "Traceback (most recent call last):"])
    keywords = ("nccl watchdog", "rendezvous")
    first = trainlog._Prefilter(keywords)
    assert first.engine == "hyperscan"
    cached = [p for p in os.listdir(tmp_path) if p.endswith(".hsdb")]
    assert len(cached) == 1
    inode = (tmp_path / cached[0]).stat().st_ino
    second = trainlog._Prefilter(keywords)  # read back, not compiled (a compile writes a new file)
    assert (tmp_path / cached[0]).stat().st_ino == inode
    assert second.select(data) == first.select(data) and first.select(data)
    (tmp_path / cached[0]).write_bytes(b"not a database")
    third = trainlog._Prefilter(keywords)  # compiled anew, and the cache rewritten
    assert third.select(data) == first.select(data)
    assert (tmp_path / cached[0]).read_bytes() != b"not a database"


def test_threads_scan_with_one_prefilter_at_once():
    """The Slack bot diagnoses in a thread pool with the one cached prefilter: each thread scans with
    scratch space of its own (Hyperscan refuses a scratch already in use)."""
    import threading

    pre = trainlog._compile_prefilter(("nccl watchdog",))
    data = b"torch.OutOfMemoryError: CUDA out of memory.\nstep 1 loss 2\n" * 200_000
    want = pre.select(data)
    got, errors = [], []

    def run():
        try:
            got.append(pre.select(data))
        except Exception as e:  # noqa: BLE001 - reported below
            errors.append(e)

    threads = [threading.Thread(target=run) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors and got == [want] * 4


def test_prefix_patterns_treat_all_digits_alike():
    """_Scanner._cleaned replays the prefixes a line's digit template took; every prefix pattern and
    the file-name check must then read any ASCII digit as any other."""
    pats = [v for k, v in vars(trainlog).items() if k.startswith("_P_") and isinstance(v, re.Pattern)]
    pats.append(trainlog._NOT_HOST)
    assert len(pats) >= 20
    bad = [p.pattern for p in pats if not _digit_free(p.pattern)]
    assert not bad, bad


def test_a_replayed_prefix_reads_what_cleaning_reads():
    """Every plain line of the real fixtures, with its digits changed, cleaned by the plan its first
    form took, gives what cleaning it the long way gives (rank, host, time, level, text)."""
    import random

    def fields(r):
        cl, tkey, yearless = r
        return cl.text, cl.rank, cl.node, cl.ts, cl.device, cl.pid, cl.level, tkey, yearless

    rng = random.Random(11)
    fix = os.path.join(os.path.dirname(__file__), "fixtures", "trainlog")
    n = 0
    for name in sorted(os.listdir(fix)):
        with open(os.path.join(fix, name), encoding="utf-8", errors="replace") as fh:
            lines = fh.read().split("\n")
        for raw in lines:
            if not trainlog._plain(raw):
                continue
            for year in (None, 2024):
                plan = trainlog._clean_plan(raw, year)[3]
                other = "".join(str(rng.randrange(10)) if ch.isdigit() else ch for ch in raw)
                assert fields(trainlog._clean_by_plan(other, plan, year)) == fields(trainlog._clean(other, year))
                n += 1
    assert n > 400
