"""collectors.trainlog on real captured log lines (tests/fixtures/trainlog, SOURCES.md)."""

from __future__ import annotations

import gzip
import io
import os

import pytest

from collectors.findings import KINDS
from collectors.trainlog import InputError, clean_line, parse_paths, parse_text

FIX = os.path.join(os.path.dirname(__file__), "fixtures", "trainlog")


def fx(name: str) -> str:
    with open(os.path.join(FIX, name), encoding="utf-8") as fh:
        return fh.read()


def kinds(result, kind):
    return [f for f in result.findings if f.kind == kind]


# ---- every finding uses a known kind and known attributes ------------------------------------
@pytest.mark.parametrize("name", sorted(n for n in os.listdir(FIX) if n.endswith(".txt")))
def test_findings_follow_kinds(name):
    r = parse_text(fx(name), source=name)
    for f in r.findings:
        assert f.kind in KINDS, f.kind
        assert set(f.attrs) <= set(KINDS[f.kind]), (f.kind, f.attrs)
        assert f.source == name
        assert f.line_no and f.line_no >= 1


# ---- prefixes ------------------------------------------------------------------------------
@pytest.mark.parametrize("raw, text, rank, node, ts", [
    # torchrun --tee / TORCHELASTIC prefix with a glog-style c10d prefix behind it
    ("[rank3]:[W501 12:00:00.123456 ProcessGroupNCCL.cpp:1200] Warning: foo", "Warning: foo", 3, None,
     "--05-01T12:00:00.123456"),
    # DeepSpeed launcher, multi-node
    ("worker-1: [default3]: RuntimeError: boom", "RuntimeError: boom", 3, "worker-1", None),
    # srun --label
    ("3: Traceback (most recent call last):", "Traceback (most recent call last):", 3, None, None),
    # pdsh style host: and host:rank:
    ("gpu07: NCCL INFO x", "NCCL INFO x", None, "gpu07", None),
    ("node-1:3: loss went nan", "loss went nan", 3, "node-1", None),
    # NCCL's own host:pid:tid [dev] prefix
    ("gpu07:12345:12399 [3] NCCL WARN Call to ibv_reg_mr failed", "NCCL WARN Call to ibv_reg_mr failed",
     None, "gpu07", None),
    # Lightning
    ("[rank: 1] Seed set to 42", "Seed set to 42", 1, None, None),
    # timestamps
    ("[2024-05-01 12:00:00,123] [INFO] [launch.py:1] hi", "[launch.py:1] hi", None, None, "2024-05-01T12:00:00.123"),
    ("2024-04-29T14:55:41,678628+02:00 Out of memory: Killed process 1 (x)", "Out of memory: Killed process 1 (x)",
     None, None, "2024-04-29T14:55:41.678628+02:00"),
    ("[Sun Jul 28 09:15:27 2024] NVRM: Xid", "NVRM: Xid", None, None, "2024-07-28T09:15:27"),
    ("[12345.678901] NVRM: Xid", "NVRM: Xid", None, None, None),
    ("E0501 12:00:00.123456 1234 file.cc:12] bad thing", "bad thing", None, None, "--05-01T12:00:00.123456"),
    ("192.168.11.119: kern: warning: [2026-04-22T21:30:51.52643656Z]: NVRM: x", "NVRM: x", None,
     "192.168.11.119", "2026-04-22T21:30:51.52643656Z"),
    ("Jul 28 09:15:27 gpu07 kernel: [  12.5] NVRM: x", "NVRM: x", None, "gpu07", "--07-28T09:15:27"),
    # Slack and ANSI
    ("\x1b[31mRuntimeError\x1b[0m: a &lt;b&gt; &amp;c", "RuntimeError: a <b> &c", None, None, None),
    ("```[rank0]: see <https://pytorch.org/docs|pytorch.org/docs>```", "see pytorch.org/docs", 0, None, None),
    ("(VllmWorker rank=3 pid=4665) ERROR 08-05 x", "ERROR 08-05 x", 3, None, None),
])
def test_clean_line(raw, text, rank, node, ts):
    c = clean_line(raw)
    assert (c.text, c.rank, c.node, c.ts) == (text, rank, node, ts)


@pytest.mark.parametrize("raw", [
    "RuntimeError: CUDA error: an illegal memory access was encountered",
    "torch.distributed.elastic.multiprocessing.errors.ChildFailedError: ",
    "train.py:45: UserWarning: deprecated",
])
def test_clean_line_leaves_messages_alone(raw):
    c = clean_line(raw)
    assert c.text == raw.strip() and c.node is None and c.rank is None


def test_nccl_prefix_gives_device_and_pid():
    c = clean_line("gpu07:12345:12399 [3] NCCL WARN x")
    assert (c.node, c.pid, c.device) == ("gpu07", 12345, 3)


# ---- CUDA OOM figures ------------------------------------------------------------------------
@pytest.mark.parametrize("name, expect", [
    ("oom-old.txt", {"tried_gib": 1.0, "gpu": 0, "total_gib": 15.9, "allocated_gib": 14.25, "free_gib": 0.9683}),
    ("oom-old-reserved.txt", {"tried_gib": 1.63, "total_gib": 44.56, "allocated_gib": 27.91, "reserved_gib": 27.93,
                              "reserved_unallocated_gib": 0.02, "free_gib": 0.5521}),
    ("oom-new.txt", {"tried_gib": 22.78, "gpu": 0, "total_gib": 31.47, "free_gib": 12.73, "process_gib": 18.73,
                     "allocated_gib": 9.08, "reserved_unallocated_gib": 9.35, "reserved_gib": 18.43,
                     "frag_ratio": 0.5073}),
    ("oom-new-process.txt", {"tried_gib": 0.4844, "total_gib": 14.75, "free_gib": 0.2296, "process_gib": 14.52,
                             "allocated_gib": 14.06, "reserved_unallocated_gib": 0.3227}),
])
def test_cuda_oom_figures(name, expect):
    r = parse_text(fx(name))
    (f,) = kinds(r, "cuda-oom")
    for k, v in expect.items():
        assert f.attrs[k] == pytest.approx(v, abs=1e-3), k
    assert f.attrs["at_start"] is True  # no training step logged before
    assert r.first_error.line_no == f.line_no


def test_the_oom_figures_say_when_another_process_holds_the_gpu():
    # a real paste (held-out group-m, a shared node with a zombie process) cut before "CUDA out of memory.":
    # PyTorch holds 86 MiB of 7.92 GiB and 24.56 MiB is free, so the rest is another process's
    cut = ("Tried to allocate 216.00 MiB (GPU 0; 7.92 GiB total capacity; 69.17 MiB already allocated; 24.56 MiB "
           "free; 86.00 MiB reserved in total by PyTorch)")
    (f,) = kinds(parse_text(cut), "cuda-oom")
    assert f.attrs["elsewhere_share"] == pytest.approx(0.986, abs=1e-3)
    # PyTorch <= 1.3 said "cached" for what the allocator holds on top of what is allocated
    old = ("RuntimeError: CUDA out of memory. Tried to allocate 39.12 MiB (GPU 0; 10.76 GiB total capacity; "
           "9.71 GiB already allocated; 5.56 MiB free; 10.13 MiB cached)")
    (f,) = kinds(parse_text(old), "cuda-oom")
    assert f.attrs["reserved_gib"] == pytest.approx(9.72, abs=1e-2) and f.attrs["elsewhere_share"] < 0.1
    # "Process N has ..." is another process, not this one; what PyTorch reserved is this process's
    new = ("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 1.68 GiB. GPU 0 has a total capacity of "
           "79.21 GiB of which 259.19 MiB is free. Process 2828469 has 516.00 MiB memory in use. Process 2856448 "
           "has 78.44 GiB memory in use. Of the allocated memory 70.48 GiB is allocated by PyTorch, and 6.78 GiB "
           "is reserved by PyTorch but unallocated.")
    (f,) = kinds(parse_text(new), "cuda-oom")
    assert "process_gib" not in f.attrs and f.attrs["elsewhere_share"] < 0.05
    # a line that only mentions a capacity is not an OOM
    assert not kinds(parse_text("GPU 0 has a total capacity of 79.21 GiB"), "cuda-oom")


def test_oom_after_training_steps_is_not_at_start():
    text = "step 10 | loss 2.31\n" + fx("oom-new.txt")
    (f,) = kinds(parse_text(text), "cuda-oom")
    assert f.attrs["at_start"] is False


# ---- NCCL ------------------------------------------------------------------------------------
def test_watchdog_timeouts_torchrun():
    r = parse_text(fx("watchdog-torchrun.txt"))
    ts = kinds(r, "nccl-timeout")
    assert [f.rank for f in ts] == [0, 4, 3]
    assert ts[0].attrs == {"seq": 7753, "op": "REDUCE_SCATTER_BASE", "numel_in": 544997376,
                           "timeout_ms": 600000, "elapsed_ms": 600061}
    assert ts[0].ts == "--12-06T18:44:12.715298746"
    assert r.first_error.rank == 0


def test_watchdog_old_format_and_straggler():
    r = parse_text(fx("watchdog-old.txt"))
    ts = kinds(r, "nccl-timeout")
    assert {f.rank for f in ts} == {1, 2, 3, 6, 7}
    assert ts[0].attrs["timeout_ms"] == 1800000 and "numel_in" not in ts[0].attrs
    # ranks 0..7 are visible in the log (rank prefixes), 0, 4 and 5 never reported the timeout
    text = "".join(f"[rank{i}]: step 100 | loss 2.0\n" for i in range(8)) + fx("watchdog-old.txt")
    (s,) = kinds(parse_text(text), "rank-straggler")
    assert s.attrs == {"ranks": "0,4,5", "seq": 469508, "waiting": 5, "op": "ALLREDUCE"}


@pytest.mark.parametrize("workers", ["1", "2"])
def test_a_large_logs_laggard_comes_from_the_world_size_its_nccl_init_lines_give(tmp_path, monkeypatch, workers):
    """In a large log the world size is read only when the laggard analysis needs it (a worker leaves
    it to the parent): the NCCL Init lines at the top say 8 ranks, the timeouts 4 MB below come
    from five of them, so the other three are the laggards, whether one process or the workers
    read the ranges."""
    head = "".join(f"gpu01:48000:48100 [{r}] NCCL INFO comm 0x55d1a000000{r} rank {r} nranks 8 cudaDev {r} "
                   f"busId 1b000 commId 0x0a5eaf7460001eef - Init COMPLETE\n" for r in range(8))
    pad = "".join(f"[2024-05-01 10:{i // 600 % 60:02d}:{i // 10 % 60:02d}] iteration {i:6d} | loss 2.{i % 1000:03d} | "
                  f"lr 1.2e-4 | grad norm 0.91\n" for i in range(60_000))
    # rank prefixes hide ranks 0..7 from the timeout lines' neighbours: only the Init lines name them all
    text = head + pad + fx("watchdog-old.txt") + pad
    log = tmp_path / "job.log"
    log.write_text(text, encoding="utf-8")
    monkeypatch.setenv("GPU_TRIAGE_SCAN_RANGE_KB", "1024")
    monkeypatch.setenv("GPU_TRIAGE_SCAN_WORKERS", workers)
    r = parse_paths([str(log)])
    (s,) = kinds(r, "rank-straggler")
    assert s.attrs == {"ranks": "0,4,5", "seq": 469508, "waiting": 5, "op": "ALLREDUCE"}


def test_no_straggler_when_every_rank_timed_out():
    assert not kinds(parse_text(fx("watchdog-old.txt")), "rank-straggler")


@pytest.mark.parametrize("name, status, vendor, peer", [
    ("nccl-ib.txt", 12, 129, "10.226.98.98"),
    ("nccl-ib-status.txt", 12, 129, "172.36.143.59"),
])
def test_ib_completion_errors(name, status, vendor, peer):
    r = parse_text(fx(name))
    (ib,) = kinds(r, "ib-error")
    assert (ib.attrs["status"], ib.attrs["vendor_err"], ib.attrs["peer"]) == (status, vendor, peer)
    assert ib.node in ("PHLRR4036", "hostname-test")
    assert kinds(r, "nccl-warn")
    assert r.first_error.line_no == ib.line_no  # the chorus after it is not the first error


def test_nccl_error_reason_and_version():
    r = parse_text(fx("nccl-ib.txt"))
    (e,) = kinds(r, "nccl-error")
    assert e.attrs["reason"] == "unhandled-system-error"
    assert {"component": "nccl", "value": "2.14.3"} in [v.attrs for v in kinds(r, "version")]
    # world size from "nranks 16": 16 ranks known
    assert kinds(r, "nccl-timeout") == []


def test_nccl_version_banner():
    r = parse_text(fx("nccl-version.txt"))
    assert [v.attrs for v in kinds(r, "version")] == [{"component": "nccl", "value": "2.19.3+cuda12.3"}]
    assert r.first_error is None  # "No device found" is INFO chatter, not an error


# ---- signals and torchrun's summary ----------------------------------------------------------
def test_childfailed_summary():
    r = parse_text(fx("childfailed-9.txt"))
    (x,) = kinds(r, "exit-signal")
    assert x.attrs["exitcode"] == -9 and x.attrs["signal"] == "SIGKILL" and x.attrs["pid"] == 14750
    assert x.attrs["host"].startswith("mlxlab115") and x.attrs["local_rank"] == 0
    assert x.rank == 0
    assert [p.attrs["type"] for p in kinds(r, "python-exception")] == ["ChildFailedError"]
    assert r.first_error is None  # the summary is chorus; the cause is elsewhere (dmesg)


def test_agent_exitcode_is_chorus():
    r = parse_text(fx("agent-exit-9.txt"))
    (x,) = kinds(r, "exit-signal")
    assert x.attrs == {"exitcode": -9, "signal": "SIGKILL", "local_rank": 3, "pid": 812917}
    assert r.first_error is None


# ---- kernel log pasted in --------------------------------------------------------------------
@pytest.mark.parametrize("name, codes", [
    ("kernel-01.txt", [43, 43, 31, 94]),
    ("kernel-03.txt", [31, 62, 45, 45, 45, 45, 45, 45, 45]),
    ("kernel-06.txt", [13, 13, 13, 109]),
    ("kernel-10.txt", [45] * 7),
    ("kernel-11.txt", [79]),
    ("kernel-12.txt", [154]),
    ("kernel-14.txt", [63]),
])
def test_every_xid_line_is_a_finding(name, codes):
    r = parse_text(fx(name))
    assert [f.attrs["code"] for f in kinds(r, "xid")] == codes


def test_xid_attrs():
    r = parse_text(fx("kernel-01.txt"))
    x = kinds(r, "xid")
    assert x[0].attrs == {"code": 43, "pci": "0000:00:05", "pid": 1045242, "process": "pt_main_thread"}
    assert x[3].attrs["pid"] is None and x[3].attrs["process"] is None
    assert x[0].ts == "2024-07-31T23:14:18"
    assert [v.attrs for v in kinds(r, "version")] == [{"component": "driver", "value": "535.183.01"}]
    assert r.first_error.line_no == x[0].line_no


def test_fallen_off_bus():
    r = parse_text(fx("kernel-11.txt"))
    lost = kinds(r, "gpu-lost")
    assert lost and lost[0].attrs["pci"] == "0000:06:00"


def test_talos_host_prefix():
    (x,) = kinds(parse_text(fx("kernel-12.txt")), "xid")
    assert x.node == "192.168.11.119" and x.ts.startswith("2026-04-22T21:30:51")


def test_row_remap_is_ecc():
    (e,) = kinds(parse_text(fx("kernel-14.txt")), "ecc-error")
    assert e.attrs["type"] == "row-remap"


@pytest.mark.parametrize("name, pid, proc, rss", [
    ("kernel-04.txt", 1440763, "perl", 60356340),
    ("kernel-13.txt", 698405, "python", 12918388),
])
def test_oom_killer(name, pid, proc, rss):
    (k,) = kinds(parse_text(fx(name)), "oom-killer")
    assert k.attrs == {"pid": pid, "process": proc, "anon_rss_kb": rss}


# ---- shared memory, disk, scheduler, rendezvous ----------------------------------------------
@pytest.mark.parametrize("name, kind", [
    ("dataloader-bus.txt", "shm-bus-error"),
    ("mmf-bus.txt", "shm-bus-error"),
    ("deepspeed-shm.txt", "shm-error"),
    ("nospace.txt", "shm-error"),
])
def test_shared_memory(name, kind):
    r = parse_text(fx(name))
    assert kinds(r, kind)
    assert not kinds(r, "disk-full")


def test_deepspeed_shm_ranks():
    r = parse_text(fx("deepspeed-shm.txt"))
    e = kinds(r, "nccl-error")[0]
    assert e.rank == 2 and e.attrs["reason"] == "unhandled-system-error"
    assert {"component": "nccl", "value": "2.20.5"} in [v.attrs for v in kinds(r, "version")]
    assert r.first_error.rank == 2


@pytest.mark.parametrize("name, job", [("slurm-timelimit.txt", "32233190"), ("slurm-canu.txt", "3884617")])
def test_slurm_time_limit(name, job):
    r = parse_text(fx(name))
    (s,) = kinds(r, "slurm-event")
    assert s.attrs["event"] == "time-limit" and s.attrs["job"] == job
    assert r.first_error.line_no == s.line_no


def test_srun_task_lines_are_signals():
    r = parse_text(fx("slurm-timelimit.txt"))
    ex = kinds(r, "exit-signal")
    assert [(e.attrs.get("host"), e.attrs.get("signal")) for e in ex] == [
        ("nid01934", "SIGTERM"), ("nid01935", "SIGTERM")]


def test_rendezvous_and_chained_exceptions():
    r = parse_text(fx("rdzv.txt"))
    (rz,) = kinds(r, "rendezvous-error")
    assert rz.attrs["reason"] in ("timeout", "connect-failed")
    (p,) = kinds(r, "python-exception")
    assert p.attrs["type"] == "DistNetworkError"


def test_python_exception_after_traceback():
    r = parse_text(fx("dataloader-bus.txt"))
    (p,) = kinds(r, "python-exception")
    assert p.attrs["type"] == "RuntimeError" and p.attrs["message"].startswith("DataLoader worker (pid 56811)")


@pytest.mark.parametrize("line, kind, attrs", [
    ("OSError: [Errno 28] No space left on device: '/ckpt/step_1000/model.pt'", "disk-full",
     {"errno": 28, "path": "/ckpt/step_1000/model.pt"}),
    ("OSError: [Errno 122] Disk quota exceeded", "disk-full", {"errno": 122}),
    ("[1234.5] nfs: server filer01 not responding, still trying", "nfs-stall", {"server": "filer01"}),
    ("RuntimeError: CUDA error: an illegal memory access was encountered", "cuda-error",
     {"error": "illegal-memory-access"}),
    ("RuntimeError: CUDA error: device-side assert triggered", "cuda-error", {"error": "device-side-assert"}),
    ("RuntimeError: CUDA error: no kernel image is available for execution on the device", "cuda-error",
     {"error": "no-kernel-image"}),
    ("RuntimeError: [enforce fail at alloc_cpu.cpp:83] err == 0. DefaultCPUAllocator: not enough memory: "
     "you tried to allocate 2147483648 bytes.", "host-oom", {}),
    ("NVIDIA-SMI 535.104.05             Driver Version: 535.104.05   CUDA Version: 12.2", "version",
     {"component": "driver", "value": "535.104.05"}),
    ("PyTorch version: 2.1.0+cu121", "version", {"component": "pytorch", "value": "2.1.0+cu121"}),
    ("slurmstepd: error: Detected 1 oom-kill event(s) in StepId=4567.0. Some of your processes may have been "
     "killed by the cgroup out-of-memory handler.", "slurm-event", {"event": "oom", "job": "4567"}),
])
def test_single_lines(line, kind, attrs):
    found = kinds(parse_text(line), kind)
    assert found, kind
    for k, v in attrs.items():
        assert found[0].attrs[k] == v


# ---- first error -----------------------------------------------------------------------------
def test_first_error_by_timestamp_across_files(tmp_path):
    a = tmp_path / "rank0.log"
    b = tmp_path / "rank5.log"
    a.write_text("[rank0]:[2024-05-01 12:10:00,000] INFO step 900\n" + fx("watchdog-torchrun.txt").splitlines()[0]
                 .replace("[E1206 18:44:12.715298746 ProcessGroupNCCL.cpp:607]", "[2024-05-01 12:10:05,000]") + "\n")
    b.write_text("[rank5]:[2024-05-01 12:00:01,000] " + fx("oom-new.txt").splitlines()[0] + "\n")
    r = parse_paths([str(a), str(b)])
    assert r.first_error.rank == 5 and r.first_error.source == str(b)
    assert r.sources == [str(a), str(b)]


def test_no_match():
    r = parse_text("epoch 1 step 10 loss 2.0\nepoch 1 step 20 loss 1.9\n")
    assert r.findings == [] and r.first_error is None
    assert [ln.text for ln in r.lines] == ["epoch 1 step 10 loss 2.0", "epoch 1 step 20 loss 1.9"]
    assert r.lines_read == 2 and not r.truncated


# ---- inputs ----------------------------------------------------------------------------------
def test_folder_gz_and_stdin(tmp_path):
    d = tmp_path / "logs"
    (d / "sub").mkdir(parents=True)
    with gzip.open(d / "sub" / "node1.log.gz", "wt") as fh:
        fh.write(fx("kernel-11.txt"))
    (d / "slurm-123.out").write_text(fx("slurm-canu.txt"))
    (d / "image.png").write_bytes(b"\x89PNG\r\n\x1a\n\x00\x00")
    r = parse_paths([str(d), "-"], stdin=io.BytesIO(fx("oom-new.txt").encode()))
    assert len(r.sources) == 3 and r.sources[-1] == "stdin"
    got = {f.kind for f in r.findings}
    assert {"xid", "slurm-event", "cuda-oom"} <= got


@pytest.mark.parametrize("setup, needle", [
    (lambda p: str(p / "missing.log"), "no such file"),
    (lambda p: (p / "empty").mkdir() or str(p / "empty"), "no log files"),
    (lambda p: (p / "a.log").write_bytes(b"\x7fELF\x02\x01\x00\x00" * 100) and str(p / "a.log"), "binary"),
    (lambda p: (p / "b.log").write_bytes(b"") or str(p / "b.log"), "empty"),
    (lambda p: (p / "c.log").write_bytes(bytes(range(128, 256)) * 64) and str(p / "c.log"), "not text"),
    (lambda p: (p / "d.log.gz").write_bytes(b"\x1f\x8b\x08\x00garbage-garbage") and str(p / "d.log.gz"), "gzip"),
])
def test_bad_input(tmp_path, setup, needle):
    with pytest.raises(InputError) as e:
        parse_paths([setup(tmp_path)])
    assert needle in str(e.value)


def test_empty_paste():
    with pytest.raises(InputError, match="empty"):
        parse_text("  \n\n")


def test_invalid_utf8_is_a_warning(tmp_path):
    p = tmp_path / "job.log"
    p.write_bytes(b"step 1 ok\n\xff\xfe bad bytes here\n" + fx("oom-new.txt").encode())
    r = parse_paths([str(p)])
    assert any("1 lines were not valid UTF-8" in w for w in r.warnings)
    assert kinds(r, "cuda-oom")


# ---- redaction and bounds --------------------------------------------------------------------
def test_secrets_are_redacted_in_lines_and_findings():
    text = ("export WANDB_API_KEY=0123456789abcdef0123456789abcdef\n"
            "HF_TOKEN=hf_AbCdEfGhIjKlMnOpQrStUvWxYz012345 python train.py\n"
            "RuntimeError: upload failed for https://bot:xoxb-1111-2222-abcdefghijkl@hooks.example/x\n"
            "-----BEGIN OPENSSH PRIVATE KEY-----\nb3BlbnNzaC1rZXktdjEAAAAA\n-----END OPENSSH PRIVATE KEY-----\n")
    r = parse_text(text)
    blob = "\n".join(ln.text for ln in r.lines) + "\n".join(f.line for f in r.findings)
    for secret in ("0123456789abcdef", "hf_AbCd", "xoxb-1111", "b3BlbnNzaC1rZXktdjEAAAAA"):
        assert secret not in blob
    assert "[REDACTED]" in blob


def test_large_input_keeps_candidates_only(tmp_path):
    p = tmp_path / "big.log"
    chatter = "".join(f"[rank{i % 8}]: step {i} | loss 2.{i % 97:02d} | lr 3e-4\n" for i in range(60_000))
    p.write_text(chatter + fx("oom-new.txt") + chatter)
    assert p.stat().st_size > 4 * 1024 * 1024
    r = parse_paths([str(p)])
    assert r.truncated
    assert kinds(r, "cuda-oom")[0].line_no == 60_001
    assert any(ln.line_no == 60_001 for ln in r.lines)
    assert len(r.lines) < 100
    assert r.lines_read == 120_003


def test_keywords_make_candidate_lines(tmp_path):
    p = tmp_path / "big.log"
    chatter = "".join(f"step {i} | loss 2.0\n" for i in range(300_000))
    p.write_text(chatter + "custom sentinel phrase here\n")
    r = parse_paths([str(p)], keywords=["sentinel phrase"])
    assert r.lines[-1].text == "custom sentinel phrase here"
    r2 = parse_paths([str(p)])
    assert all("sentinel" not in ln.text for ln in r2.lines)


# --- Chinese locale (LANG=zh_CN.UTF-8): glibc's translated error and signal texts ------------------
# "OSError：[Errno 28] 设备上没有空间" is how a Chinese-locale Python reports ENOSPC (a blog post's
# title: "Ubuntu在Anaconda环境中安装包时报错：OSError：[Errno 28] 设备上没有空间"); "已杀死" and
# "总线错误 (核心已转储)" are bash's job reports of SIGKILL and SIGBUS in the same locale.
@pytest.mark.parametrize("line, kind, attrs", [
    ("OSError: [Errno 28] 设备上没有空间", "disk-full", {"errno": 28}),
    ("train.sh: 第 12 行：2046993 已杀死               python train.py --cfg a.yaml", "exit-signal",
     {"signal": "SIGKILL"}),
    ("总线错误 (核心已转储)", "exit-signal", {"signal": "SIGBUS"}),
    ("段错误 (核心已转储)", "exit-signal", {"signal": "SIGSEGV"}),
])
def test_chinese_locale_error_texts_read_as_their_english_originals(line, kind, attrs):
    found = [f for f in parse_text(line).findings if f.kind == kind]
    assert found, parse_text(line).findings
    assert attrs.items() <= found[0].attrs.items()


@pytest.mark.parametrize("line", [
    "./run.sh: line 12: 4242 Killed                  python train.py --cfg a.yaml",
    # a paste whose trailing command (or its padding) was trimmed: the report ends at the signal
    "cli_demo.sh: line 5: 12989 Killed",
    "train.sh: 第 3 行：4242 已杀死",
])
def test_bashs_job_report_names_the_signal_with_or_without_the_command(line):
    assert [f.attrs for f in parse_text(line).findings if f.kind == "exit-signal"] == [{"signal": "SIGKILL"}]


@pytest.mark.parametrize("line, signal", [
    ("zsh: killed     python train.py --cfg a.yaml", "SIGKILL"),
    ("zsh: bus error  python train.py", "SIGBUS"),
    ("zsh: abort      python train.py", "SIGABRT"),
    ("fish: Job 1, 'python train.py --cfg a.yaml' terminated by signal SIGKILL (Forced quit)", "SIGKILL"),
    ("SIGKILL", "SIGKILL"),  # a supervisor's bare report, after the last step the process printed
    # the shell's report glued to a progress bar that never printed its newline (mmcv, tqdm; zh bash)
    ("[>>>>>>>>>> ] 1022/5000, 1.5 task/s, elapsed: 673s, ETA: 2621s已杀死", "SIGKILL"),
    ("Epoch 3:  45%|████▌     | 450/1000 [02:11<02:40,  3.42it/s, loss=0.231]Killed", "SIGKILL"),
])
def test_other_shells_reports_of_a_killed_job_name_the_signal(line, signal):
    text = "step 41200 loss 2.13\n" + line + "\n"
    assert [f.attrs for f in parse_text(text).findings if f.kind == "exit-signal"] == [{"signal": signal}]


@pytest.mark.parametrize("line", ["zsh: command not found: torchrun", "raise SIGKILL handler", "SIGKILL sent to 4 workers",
                                  "the worker was Killed", "ETA: 12s, then the scheduler Killed"])
def test_lines_that_only_mention_a_signal_or_zsh_are_no_exit(line):
    assert not [f for f in parse_text(line).findings if f.kind == "exit-signal"]


def test_enospc_under_a_semlock_frame_is_shared_memory_not_the_disk():
    # multiprocessing's SemLock lives in /dev/shm: ENOSPC there means /dev/shm is full
    text = ('  File "/usr/lib/python3.10/multiprocessing/synchronize.py", line 57, in __init__\n'
            '    sl = self._semlock = _multiprocessing.SemLock(\n'
            'OSError: [Errno 28] No space left on device\n')
    kinds = [f.kind for f in parse_text(text).findings]
    assert "shm-error" in kinds and "disk-full" not in kinds


# ---- nvidia-smi's process table beside ps: a stopped or zombie process holding the GPU -------
_SMI_TABLE = """\
+-----------------------------------------------------------------------------+
| Processes:                                                                  |
|  GPU   GI   CI        PID   Type   Process name                  GPU Memory |
|        ID   ID                                                   Usage      |
|=============================================================================|
|    0   N/A  N/A     48213      C   python                          30215MiB |
|    1   N/A  N/A     48377      C   python                            812MiB |
+-----------------------------------------------------------------------------+
"""


@pytest.mark.parametrize("ps_row, state", [
    ("alice    48213  0.0 12.1 89506440 28604880 pts/2 Tl May25 147:37 python train.py --device=cuda:0", "stopped"),
    ("alice    48213  0.0  0.0      0     0 ?        Z    May25   0:00 [python] <defunct>", "zombie"),
])
def test_a_stopped_or_zombie_process_holding_gpu_memory_is_found(ps_row, state):
    text = _SMI_TABLE + "$ ps aux | grep 48213\n" + ps_row + "\n"
    found = [f.attrs for f in parse_text(text).findings if f.kind == "gpu-idle-holder"]
    assert found == [{"pid": 48213, "gpu": 0, "mib": 30215, "state": state}]


def test_a_running_process_or_another_pid_is_no_idle_holder():
    running = "alice    48213 98.0 12.1 89506440 28604880 pts/2 Rl May25 147:37 python train.py"
    other = "alice    51000  0.0  1.0 1234567 204800 pts/3 T    May25   0:01 vim train.py"
    for row in (running, other):
        assert not [f for f in parse_text(_SMI_TABLE + row + "\n").findings if f.kind == "gpu-idle-holder"]


# ---- nvidia-smi process tables: other ranks' contexts on one GPU ------------------------------
def test_other_ranks_contexts_on_one_gpu_are_found():
    r = parse_text(fx("smi-extra-contexts.txt"), source="smi")
    (f,) = kinds(r, "gpu-extra-context")
    assert f.attrs == {"gpu": 0, "processes": 7, "mib": 7 * 871}
    assert f.line_no == 2


def test_a_process_that_is_a_guest_elsewhere_is_found_and_dataparallel_is_not():
    guests = ("|    0   N/A  N/A      4001      C   python      9000MiB |\n"
              "|    1   N/A  N/A      4002      C   python      9000MiB |\n"
              "|    0   N/A  N/A      4002      C   python       600MiB |\n")
    (f,) = kinds(parse_text(guests), "gpu-extra-context")
    assert (f.attrs["gpu"], f.attrs["processes"], f.attrs["mib"]) == (0, 1, 600)
    # one process over two GPUs (DataParallel, device_map) and an unrelated program: nothing
    dp = ("|    0   N/A  N/A      4001      C   python      9000MiB |\n"
          "|    1   N/A  N/A      4001      C   python      7000MiB |\n"
          "|    0   N/A  N/A      5000      C   /usr/bin/Xorg  300MiB |\n")
    assert not kinds(parse_text(dp), "gpu-extra-context")


def test_zero_mib_rows_say_nothing():
    assert not kinds(parse_text(fx("smi-zero-mib.txt")), "gpu-extra-context")


# ---- ENOSPC that is not the disk ------------------------------------------------------------
def test_joblib_semaphore_enospc_is_shared_memory():
    r = parse_text(fx("joblib-semaphore-nospace.txt"))
    assert kinds(r, "shm-error") and not kinds(r, "disk-full")


def test_tensorflow_resource_exhausted_on_a_file_is_a_full_disk():
    # TSL maps ENOSPC/EDQUOT of a file operation to RESOURCE_EXHAUSTED; old versions print only the file
    r = parse_text("tensorflow.python.framework.errors_impl.ResourceExhaustedError: "
                   "/data/run1/model.ckpt-1200_temp_3f/part-00000-of-00001.data-00000-of-00001.tempstate88\n")
    (f,) = kinds(r, "disk-full")
    assert f.attrs["path"].endswith(".tempstate88")
    gpu = parse_text("tensorflow.python.framework.errors_impl.ResourceExhaustedError: OOM when allocating "
                     "tensor with shape[64,1024,1024] and type float on /job:localhost/replica:0/task:0/device:GPU:0\n")
    assert not kinds(gpu, "disk-full")


def test_single_bit_ecc_is_correctable():
    # DCGM_FR_VOLATILE_SBE_DETECTED_MSG (dcgm_errors.h), as DCGM's health check prints it
    r = parse_text("More than 10000 single-bit ECC error(s) detected in GPU 0 Volatile SBEs: 13452\n")
    assert [f.attrs["type"] for f in kinds(r, "ecc-error")] == ["correctable"]


def test_an_oom_excerpt_whose_traceback_is_a_training_step_is_mid_run():
    corpus = os.path.join(os.path.dirname(__file__), "corpus", "gpu-memory")
    # the excerpt starts at the error (no step line before it), but the traceback runs through
    # losses.backward() in detectron2's run_step
    r = parse_paths([os.path.join(corpus, "detectron2-oom-backward-after-22-iterations.log")])
    assert [f.attrs["at_start"] for f in kinds(r, "cuda-oom")][:1] == [False]
    # an OOM while the model loads stays "at start"
    r = parse_paths([os.path.join(corpus, "llamafactory-deepseek-r1-oom-at-model-load.log")])
    assert all(f.attrs["at_start"] for f in kinds(r, "cuda-oom"))


def test_an_xid_line_with_its_pci_id_hidden_is_still_that_xid():
    # people redact PCI ids before pasting: "(PCI:...)", "(PCI:<redacted>)"
    r = parse_text("kernel: NVRM: Xid (PCI:...): 145, RLW_RXPIPE Nonfatal XC0 i0 Link 11 (0x00000004)\n"
                   "NVRM: Xid (PCI:<redacted>): 48, pid=2211, name=python3, An uncorrectable double bit error\n")
    assert [(f.attrs["code"], f.attrs["pci"]) for f in kinds(r, "xid")] == [(145, None), (48, None)]


def test_a_fifo_or_device_is_refused_not_waited_on(tmp_path):
    fifo = tmp_path / "job.log"
    os.mkfifo(fifo)
    with pytest.raises(InputError, match="not a regular file"):
        parse_paths([str(fifo)])
    with pytest.raises(InputError, match="not a regular file"):
        parse_paths(["/dev/zero"])
    # a FIFO inside a folder of logs is skipped, the real log is read
    (tmp_path / "rank0.log").write_text("RuntimeError: CUDA out of memory. Tried to allocate 2.00 GiB\n")
    r = parse_paths([str(tmp_path)])
    assert [os.path.basename(s) for s in r.sources] == ["rank0.log"]


# --- the byte-level prefilter (issue 11) ---------------------------------------------------------
HERE = os.path.dirname(__file__)
CORPUS_LOGS = sorted(os.path.join(r, f) for r, _, fs in os.walk(os.path.join(HERE, "corpus")) for f in fs
                     if f.endswith(".log"))


def _real_lines():
    """Every line of the development corpus and the trainlog fixtures (real captures)."""
    for path in CORPUS_LOGS + [os.path.join(FIX, n) for n in sorted(os.listdir(FIX)) if n.endswith(".txt")]:
        with open(path, "rb") as fh:
            for raw in fh.read().split(b"\n"):
                if raw.strip():
                    yield path, raw


def test_every_line_a_rule_speaks_about_passes_the_prefilter():
    """A line the prefilter drops in a large log must be one no rule would have read: every real line
    that, on its own, yields a finding or a first error is picked as a rule's line."""
    from collectors import trainlog

    pre = trainlog._compile_prefilter(())
    missed = []
    for path, raw in _real_lines():
        r = parse_text(raw.decode("utf-8", "replace"))
        said = [f.kind for f in r.findings if f.kind != "version"] or ([r.first_error.line] if r.first_error else [])
        if said and not pre.select(raw + b"\n").get(0, 0) & trainlog.RULE:
            missed.append((os.path.basename(path), raw[:120], said[:2]))
    assert not missed, missed[:10]


def test_healthy_chatter_is_rejected_at_byte_level():
    """NCCL INFO set-up lines, step/loss lines and healthy kernel lines (tests/fixtures/benign, all real)
    are not lines a rule reads."""
    from collectors import trainlog

    pre = trainlog._compile_prefilter(())
    benign = os.path.join(HERE, "fixtures", "benign")
    kept = []
    for name in ("nccl-info.log", "training-progress.log", "kernel-healthy.log"):
        with open(os.path.join(benign, name), "rb") as fh:
            for raw in fh.read().splitlines():
                if pre.select(raw + b"\n").get(0, 0) & trainlog.RULE and not parse_text(raw.decode()).findings:
                    kept.append(raw[:100])
    # a driver's load banner is read (its version is a finding); "via direct shared memory" only moves
    # the state (a later ENOSPC is /dev/shm's), it is no rule's line
    assert not kept, kept


def test_hyperscan_and_re2_pick_the_same_lines(monkeypatch):
    pytest.importorskip("hyperscan")
    from collectors import trainlog

    keywords = ("nccl watchdog", "cannot open shared object file", "rendezvous")
    data = b"".join(raw + b"\n" for _, raw in _real_lines())
    hs = trainlog._Prefilter(keywords)
    monkeypatch.setenv("GPU_TRIAGE_PREFILTER", "re2")
    re2_ = trainlog._Prefilter(keywords)
    assert (hs.engine, re2_.engine) == ("hyperscan", "re2")
    assert hs.select(data) == re2_.select(data)


# PyTorch's own warning, as the warnings module prints it, from every rank of an activation-
# checkpointing job (torch/utils/checkpoint.py, torch 2.1-2.3)
_CKPT_WARNING = ("[rank40]:/opt/conda/lib/python3.10/site-packages/torch/utils/checkpoint.py:464: UserWarning: "
                 "torch.utils.checkpoint: the use_reentrant parameter should be passed explicitly. In version 2.4 "
                 "we will raise an exception if use_reentrant is not passed. use_reentrant=False is recommended")


@pytest.mark.parametrize("engine", ["hyperscan", "re2"])
def test_a_python_warning_that_mentions_an_exception_is_no_failure_line(monkeypatch, engine):
    """The first-error tiers read a line that says it failed; a Python warning is not one, however it
    words its message: the prefilter does not keep it (with either engine), and alone in a log it is
    no first error. The same words outside a warning are still kept."""
    from collectors import trainlog

    if engine == "hyperscan":
        pytest.importorskip("hyperscan")
    else:
        monkeypatch.setenv("GPU_TRIAGE_PREFILTER", "re2")
    pre = trainlog._Prefilter(())
    assert pre.engine == engine
    data = (_CKPT_WARNING + "\n").encode()
    assert pre.select(data) == {}
    plain = b"[rank40]: step 41200: we will raise an exception if use_reentrant is not passed\n"
    assert pre.select(plain) == {0: trainlog.RULE}
    # a warning line that also holds a failure message is kept for that message
    both = b"train.py:12: UserWarning: NCCL error in: ProcessGroupNCCL.cpp:1191, unhandled system error\n"
    assert pre.select(both).get(0, 0) & trainlog.RULE
    r = parse_text("step 10 loss 2.113\n" + _CKPT_WARNING + "\nstep 20 loss 2.087\n")
    assert r.first_error is None


def _scan_with(monkeypatch, path, workers: str):
    """What the scan of ``path`` yields with ``workers`` scan workers, in comparable form."""
    monkeypatch.setenv("GPU_TRIAGE_SCAN_WORKERS", workers)
    r = parse_paths([str(path)])
    return ([f.to_json() for f in r.findings], r.first_error and r.first_error.to_json(),
            [(ln.source, ln.line_no, ln.text, ln.rank, ln.node, ln.ts) for ln in r.lines],
            r.lines_read, r.bytes_read, r.warnings)


def test_a_folder_scanned_on_all_cores_equals_the_sequential_scan(tmp_path, monkeypatch):
    """Per-rank files over FULL_LIMIT are prefiltered by worker processes; the merged result is the
    one the sequential scan gives, in file order (findings, first error, kept lines, counts)."""
    from collectors import trainlog

    with open(os.path.join(HERE, "fixtures", "benign", "nccl-info.log"), encoding="utf-8") as fh:
        chatter = fh.read()
    pad = chatter * (trainlog.FULL_LIMIT // len(chatter) // 3 + 1)
    folder = tmp_path / "ranks"
    folder.mkdir()
    for i, path in enumerate(CORPUS_LOGS[:12]):
        with open(path, encoding="utf-8", errors="replace") as fh:
            (folder / f"rank{i}.log").write_text(pad + fh.read() + pad, encoding="utf-8")

    seq, par = _scan_with(monkeypatch, folder, "1"), _scan_with(monkeypatch, folder, "2")
    assert seq[0] and seq[1]  # the corpus failures are there to be found
    assert par == seq


def _corpus_in_chatter(count: int, pad_bytes: int, tail: bool = False) -> str:
    """The first ``count`` corpus logs, each after about ``pad_bytes`` of NCCL INFO chatter (and the
    chatter once more after the last when ``tail``): a large log with real failures buried in it."""
    with open(os.path.join(HERE, "fixtures", "benign", "nccl-info.log"), encoding="utf-8") as fh:
        chatter = fh.read()
    pad = chatter * (pad_bytes // len(chatter) + 1)
    parts = []
    for path in CORPUS_LOGS[:count]:
        with open(path, encoding="utf-8", errors="replace") as fh:
            parts += [pad, fh.read()]
    return "".join(parts) + (pad if tail else "")


def test_one_large_file_scanned_in_ranges_equals_the_sequential_scan(tmp_path, monkeypatch):
    """A single log over twice the range size is prefiltered in line-aligned byte ranges on all
    cores; merged in order it gives what one process gives: the same findings, first error, kept
    lines with their line numbers, counts; across range ends too (a traceback, a torchrun summary
    whose follow-lines run into the next range, a /dev/shm frame above an ENOSPC)."""
    from collectors import trainlog

    log = tmp_path / "job.log"
    log.write_text(_corpus_in_chatter(16, trainlog.FULL_LIMIT // 6, tail=True), encoding="utf-8")
    monkeypatch.setenv("GPU_TRIAGE_SCAN_RANGE_KB", "256")  # many ranges, many ends inside failures
    pieces = trainlog._ranges(str(log))
    assert len(pieces) > 20 and pieces[0][1] == 0 and pieces[-1][2] == log.stat().st_size
    assert all(a[2] == b[1] for a, b in zip(pieces, pieces[1:]))

    seq, par = _scan_with(monkeypatch, log, "1"), _scan_with(monkeypatch, log, "2")
    assert seq[0] and seq[1]
    assert par == seq


@pytest.mark.parametrize("chunk", [1 << 24, 50_000, 4_099])
def test_aligned_reads_give_what_the_joined_chunks_give(tmp_path, monkeypatch, chunk):
    """A worker reads a plain file in reads that end at their last newline (no chunk is copied to
    join a line); the lines it keeps, their numbers, flags and look-backs, the counts and the world
    size (read by the parent when it needs it) are the ones the copying reader gives, for a whole
    file and for ranges, whatever the read size, with and without a newline at the end."""
    import dataclasses

    import re2

    from collectors import trainlog as T

    text = _corpus_in_chatter(10, T.UNWRAP_LIMIT // 4)
    monkeypatch.setitem(T._WORKER, "pre", T._compile_prefilter(()))
    monkeypatch.setitem(T._WORKER, "step_b", re2.compile(T._STEP.encode(), T._ci()))
    monkeypatch.setattr(T, "BIG_CHUNK", chunk)
    for ending in ("", "\n"):
        log = tmp_path / "job.log"
        log.write_text(text.rstrip("\n") + ending, encoding="utf-8")
        size = log.stat().st_size
        assert size > T.UNWRAP_LIMIT
        cut = size // 2 + text[size // 2:].index("\n") + 1
        for start, end in ((0, None), (0, cut), (cut, size)):
            with open(log, "rb") as fh:
                assert T._plain_large(fh, start, end)
            data = log.read_bytes()[start:end]
            with open(log, "rb") as fh:
                reads = [(n, bytes(buf)) for n, buf in T._aligned_chunks(fh.fileno(), start, end)]
            assert sum(n for n, _ in reads) == len(data)
            assert all(buf.endswith(b"\n") for _, buf in reads)
            assert b"".join(buf for _, buf in reads) == data + (b"" if data.endswith(b"\n") else b"\n")
            aligned = T._pick_file(str(log), start, end)
            with monkeypatch.context() as m:
                m.setattr(T, "_plain_large", lambda *a: False)
                joined = T._pick_file(str(log), start, end)
            # the world size of an aligned piece is left to the parent, which reads it when it needs it
            assert aligned.lines and aligned.world == 0 and aligned.world_from == (str(log), start, end)
            assert joined.world_from is None
            assert dataclasses.replace(aligned, world=joined.world, world_from=None) == joined, (ending, start, end)
            sc = T._Scanner(())
            sc._world_todo = [aligned.world_from]
            sc._read_world()
            assert sc.world == (joined.world or None) and sc._world_todo == []
            assert joined.world or end is not None  # the whole file's NCCL lines say it


def _look_back_lines(buf: bytes, s: int, prev: bytes) -> tuple[int, int]:
    """The look-back read line by line, as it was first written: the reference for _look_back."""
    from collectors import trainlog as T

    shm = frame = 0
    text, end = buf, s
    for d in range(1, T.STATE_BACK + 1):
        if end <= 0:
            if text is prev or not prev:
                break
            text, end = prev, len(prev)
        st = text.rfind(b"\n", 0, end - 1) + 1
        low = text[st:end].lower()
        end = st
        if not shm and any(h in low for h in T._SHM_HINTS_B):
            shm = d
        if not frame and T._FILE_FRAME_B.search(low):
            frame = d
        if shm and frame:
            break
    return shm, frame


def test_the_one_pass_look_back_answers_as_the_line_by_line_one():
    """_look_back (one lower-casing and one search per hint kind over the lines above) gives what the
    line-by-line reference gives, at every line of the real corpus logs, across a chunk boundary too."""
    import glob

    from collectors import trainlog as T

    checked = 0
    for path in sorted(glob.glob(os.path.join(os.path.dirname(__file__), "corpus", "*", "*.log"))):
        with open(path, "rb") as fh:
            data = fh.read(200_000)
        cut = data.rfind(b"\n", 0, len(data) // 3) + 1
        for prev, buf in ((b"", data), (data[:cut], data[cut:])):
            starts = [0] + [i + 1 for i, c in enumerate(buf[:-1]) if c == 10]
            for s in starts:
                assert T._look_back(buf, s, prev) == _look_back_lines(buf, s, prev), (path, s)
                checked += 1
    assert checked > 2000


def test_a_ray_workers_prefix_is_read_as_its_pid_and_host():
    """Ray prefixes every line a worker or actor prints with "(Name pid=N, ip=A)" or "(Name pid=N)": the
    exception behind it is the worker's own (a real OpenRLHF log), and the ip is the line's host."""
    from collectors.trainlog import clean_line

    path = os.path.join(os.path.dirname(__file__), "corpus", "checkpoint-storage",
                        "openrlhf-ray-critic-save-streamwriter-write-failed.log")
    with open(path, encoding="utf-8") as fh:
        res = parse_text(fh.read())
    (exc,) = [f for f in res.findings if f.kind == "python-exception"][:1]
    assert exc.attrs["type"] == "RuntimeError" and "file write failed" in exc.attrs["message"]
    cl = clean_line("(CommandActor pid=552, ip=10.130.6.168)   File \"/opt/x/torch/distributed/elastic/"
                    "rendezvous/c10d_rendezvous_backend.py\", line 73, in get_state")
    assert (cl.pid, cl.node) == (552, "10.130.6.168") and cl.text.startswith("File \"")


@pytest.mark.parametrize("name, cut_at, area", [
    # real corpus logs cut just before their exception line, as a truncated paste is
    ("checkpoint-storage/dolly-torch-save-errno28-no-space.log", "OSError: [Errno 28]", "file-io"),
    ("communication/adaface-tcpstore-client-socket-timeout.log", "TimeoutError: The client socket", "rendezvous"),
])
def test_a_traceback_cut_before_its_exception_is_read_from_its_innermost_frame(name, cut_at, area):
    path = os.path.join(os.path.dirname(__file__), "corpus", name)
    with open(path, encoding="utf-8") as fh:
        text = fh.read()
    cut = text[:text.index(cut_at)]
    cut = cut[:cut.rindex("\n") + 1]
    (found,) = [f for f in parse_text(cut).findings if f.kind == "traceback-cut"]
    assert found.attrs["area"] == area and "File \"" in found.line
    # the whole log ends with its exception: nothing is inferred from frames
    assert not [f for f in parse_text(text).findings if f.kind == "traceback-cut"]
    # a frame in the user's own code says nothing about the layer
    own = 'Traceback (most recent call last):\n  File "train.py", line 9, in <module>\n    main()\n'
    assert not [f for f in parse_text(own).findings if f.kind == "traceback-cut"]


@pytest.mark.parametrize("name, cut_after, function", [
    # real corpus logs cut inside a framework's checkpoint code, before any torch.save/torch.load frame
    ("checkpoint-storage/sd-scripts-resume-optimizer-central-directory.log", "in load_state", "load_state"),
    ("checkpoint-storage/openrlhf-ray-critic-save-streamwriter-write-failed.log",
     "engine.py\", line 3170, in save_checkpoint", "save_checkpoint"),
])
def test_a_traceback_cut_in_a_frameworks_checkpoint_function_is_file_io(name, cut_after, function):
    path = os.path.join(os.path.dirname(__file__), "corpus", name)
    with open(path, encoding="utf-8") as fh:
        text = fh.read()
    end = text.index("\n", text.index(cut_after))
    (found,) = [f for f in parse_text(text[:end + 1]).findings if f.kind == "traceback-cut"]
    assert found.attrs["area"] == "file-io" and found.attrs["function"] == function
    # the same framework file in a function that is not checkpoint I/O says nothing
    other = ('Traceback (most recent call last):\n  File "train.py", line 9, in <module>\n    main()\n'
             '  File "/venv/lib/python3.10/site-packages/deepspeed/runtime/engine.py", line 2077, in backward\n'
             '    self.optimizer.backward(loss)\n')
    assert not [f for f in parse_text(other).findings if f.kind == "traceback-cut"]


def test_a_huge_line_keeps_the_error_at_its_end(tmp_path):
    """A 20 MB single line (padding, a progress dump) that ends in the error: the scan keeps each
    over-long line's start and end, so the error is still read."""
    path = tmp_path / "one-line.log"
    with open(path, "wb") as fh:
        fh.write(b"a" * (20 << 20))
        fh.write(b" RuntimeError: CUDA out of memory. Tried to allocate 2.00 GiB\n")
    res = parse_paths([str(path)])
    assert any(f.kind == "cuda-oom" for f in res.findings)
    assert all(len(ln.text) <= 4010 for ln in res.lines)


def test_the_world_size_reader_agrees_with_the_word_bounded_pattern():
    """_max_nranks (one search per chunk for an M above the largest seen, the word start checked by
    hand) gives the largest M the \\brank ... nranks pattern finds, on every corpus and held-out log
    and at the edges; the pattern of "numbers above n" is right for every n it is asked about."""
    import glob
    import re

    from collectors.trainlog import _above, _max_nranks

    _NRANKS_B = re.compile(rb"\brank (\d+) nranks (\d+)")  # the word-bounded pattern it stands for

    here = os.path.dirname(__file__)
    paths = glob.glob(os.path.join(here, "corpus", "*", "*.log")) + glob.glob(os.path.join(here, "heldout", "*", "*.log"))
    with_nranks = 0
    for path in paths:
        with open(path, "rb") as fh:
            data = fh.read()
        want = max((int(w) for _, w in _NRANKS_B.findall(data)), default=0)
        with_nranks += want > 0
        assert _max_nranks(data) == want, path
        assert _max_nranks(data, want) == want and _max_nranks(data, want + 1) == want + 1, path
    assert with_nranks >= 10
    edge = b"rank 0 nranks 8\nlocalrank 1 nranks 80 x_rank 2 nranks 90 (rank 3 nranks 16 rank_4 nranks 160"
    assert _max_nranks(edge) == 16 == max(int(w) for _, w in _NRANKS_B.findall(edge))
    # a larger M seen first inside a word and later at a word start is still found
    assert _max_nranks(b"localrank 5 nranks 64\nrank 5 nranks 8\nrank 5 nranks 64") == 64
    assert _max_nranks(b"localrank 5 nranks 8") == 0
    for n in (0, 7, 9, 10, 64, 99, 100, 255, 1000, 4095):
        above = re.compile(f"(?:{_above(n)})")
        assert [v for v in range(20000) if above.fullmatch(str(v))] == list(range(n + 1, 20000)), n


@pytest.mark.parametrize("line", [
    "UnexpectedStatusException: Error for Training job hf-train-1: Failed. Reason: ClientError: Artifact upload failed:Insufficient disk space",
    "OSError: [WinError 112] There is not enough space on the disk: 'D:\\\\ckpt\\\\model.safetensors'",
])
def test_disk_full_in_a_services_or_windows_wording(line):
    res = parse_text(line)
    assert any(f.kind == "disk-full" for f in res.findings)


def test_deepspeeds_memory_line_is_read_and_only_a_full_host_is_a_cause(engine):
    busy = ("[2023-03-01 05:13:31,393] [INFO] [utils.py:834:see_memory_usage] "
            "CPU Virtual Memory:  used = 502.63 GB, percent = 99.8%")
    calm = busy.replace("502.63", "28.43").replace("99.8%", "22.6%")
    assert not [f for f in parse_text(calm).findings if f.kind == "host-memory"] or \
        [f.attrs["available_pct"] for f in parse_text(calm).findings if f.kind == "host-memory"] == [77.4]
    found = [f.attrs for f in parse_text(busy).findings if f.kind == "host-memory"]
    assert found == [{"used_mib": 514693, "available_pct": 0.2}]
    causes = engine.diagnose_text(busy).causes
    assert causes and causes[0].category == "host-memory" and causes[0].confidence >= 0.5
    assert not [c for c in engine.diagnose_text(calm).causes if c.confidence >= 0.5]


@pytest.mark.parametrize("line", [
    "triton.runtime.errors.OutOfResources: out of resource: shared memory, Required: 131072, Hardware limit: 101376. "
    "Reducing block sizes or `num_stages` may help.",
    "ptxas error   : Entry function 'fused_attn_fwd' uses too much shared data (0x1c000 bytes, 0xc000 max)",
    "RuntimeError: CUDA error: invalid argument (cudaFuncSetAttribute cudaFuncAttributeMaxDynamicSharedMemorySize failed)",
])
def test_a_gpu_kernels_shared_memory_is_not_dev_shm(line):
    # on-chip shared memory (SMEM) per block is the GPU's limit and the kernel's configuration, not /dev/shm
    kinds = {f.kind for f in parse_text(line).findings}
    assert not kinds & {"shm-error", "shm-bus-error"}, kinds


def test_dev_shm_is_still_dev_shm():
    line = "OSError: [Errno 28] No space left on device: '/dev/shm/torch_1234_5678_0'"
    assert {f.kind for f in parse_text(line).findings} & {"shm-error"}
