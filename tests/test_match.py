"""The matcher's scoring rules, on real log lines, with small entries made for each rule."""

from pathlib import Path

import pytest

from collectors.findings import Finding, FirstError, LogLine
from knowledge.loader import Entry
from knowledge.match import CONFIDENT, Matcher, literal_anchor

HERE = Path(__file__).resolve().parent

# real lines (pytorch/pytorch and NVIDIA/nccl issue threads; see tests/corpus for whole logs)
WATCHDOG = ("[Rank 3] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=52, OpType=ALLREDUCE, "
            "NumelIn=1, NumelOut=1, Timeout(ms)=600000) ran for 600041 milliseconds before timing out.")
BUS = ("RuntimeError: DataLoader worker (pid 4070) is killed by signal: Bus error. It is possible that "
       "dataloader's workers are out of shared memory. Please try to raise your shared memory limit.")
REMOTE = "NCCL WARN NET/IB : Got completion from peer 10.0.0.2<50271> with error 12, opcode 0, len 0, vendor err 129"
XID79 = "NVRM: Xid (PCI:0000:3b:00): 79, pid=1045242, name=python, GPU has fallen off the bus."


def entry(eid, category="communication", signatures=(), phrases=(), findings=(), symptom=False):
    text = {"en": eid, "zh": eid}
    return Entry(id=eid, category=category, title=text, cause=text, next_commands=[], fix={"en": [], "zh": []},
                 support={"tier": "self", "why": text, "drivers": []}, references=["https://example.org"],
                 signatures=list(signatures), phrases=list(phrases), findings=list(findings), symptom=symptom)


def lines(*texts, source="job.log"):
    return [LogLine(text=t, line_no=i, source=source) for i, t in enumerate(texts, 1)]


def by_id(causes):
    return {c.id: c for c in causes}


def test_signature_phrase_and_nothing():
    m = Matcher([entry("watchdog", signatures=["watchdog caught collective operation timeout"]),
                 entry("shm", "shared-memory", phrases=["DataLoader worker is killed by signal: Bus error"])])
    got = by_id(m.match(lines(WATCHDOG, BUS)))
    assert got["watchdog"].confidence >= CONFIDENT and got["watchdog"].evidence[0].line == WATCHDOG
    assert got["shm"].confidence >= CONFIDENT and "phrase" in got["shm"].evidence[0].why
    assert m.match(lines("step 41200 loss 2.13", "KeyError: 'optim'")) == []


def test_a_finding_that_rules_out_cuts_the_score():
    e = entry("watchdog", signatures=["watchdog caught"], findings=[{"kind": "xid", "rules_out": True}])
    m = Matcher([e])
    plain = m.match(lines(WATCHDOG))[0].confidence
    xid = Finding("xid", {"code": 79, "pci": "0000:3b:00"}, XID79, 1, source="kernel-log")
    ruled = m.match(lines(WATCHDOG), [xid])[0]
    assert ruled.confidence < plain * 0.5
    assert any("ruled out" in x for x in ruled.explain)


def test_evidence_from_a_second_source_strengthens():
    e = entry("ib", signatures=["got completion from peer"], findings=[{"kind": "ib-port", "state": ["Down", "Polling"]}])
    m = Matcher([e])
    log_only = m.match(lines(REMOTE))[0].confidence
    port = Finding("ib-port", {"device": "mlx5_0", "port": 1, "state": "Polling"}, "State: Polling", 7,
                   node="gpu07", source="ibstat")
    both = m.match(lines(REMOTE), [port])[0]
    assert both.confidence > log_only
    assert any("2 sources" in x for x in both.explain)


def test_first_error_in_time_counts():
    m = Matcher([entry("watchdog", signatures=["watchdog caught"]),
                 entry("shm", "shared-memory", signatures=["killed by signal: bus error"])])
    ls = lines(BUS, WATCHDOG)
    first = FirstError(line=BUS, line_no=1, source="job.log")
    ranked = m.match(ls, [], first)
    assert ranked[0].id == "shm" and ranked[0].confidence > ranked[1].confidence


def test_symptom_yields_to_a_specific_cause():
    m = Matcher([entry("remote-exited", signatures=["got completion from peer"], symptom=True),
                 entry("xid-79", "gpu-hardware", findings=[{"kind": "xid", "code": 79, "weight": 0.7}])])
    xid = Finding("xid", {"code": 79}, XID79, 1, source="kernel-log")
    ranked = m.match(lines(REMOTE), [xid])
    assert [c.id for c in ranked] == ["xid-79", "remote-exited"]
    assert any("symptom" in x for x in ranked[1].explain)


def test_generic_rule_yields_codes_a_specific_entry_claims():
    m = Matcher([entry("xid-79", "gpu-hardware", findings=[{"kind": "xid", "code": 79}]),
                 entry("xid-other", "gpu-hardware", findings=[{"kind": "xid"}])])
    x79 = Finding("xid", {"code": 79}, XID79, 1, source="kernel-log")
    x45 = Finding("xid", {"code": 45}, "NVRM: Xid (PCI:0000:0a:00): 45, pid='<unknown>'", 2, source="kernel-log")
    assert [c.id for c in m.match([], [x79])] == ["xid-79"]
    got = by_id(m.match([], [x79, x45]))
    assert [f.attrs["code"] for f in got["xid-other"].findings] == [45]


def test_numeric_bounds_in_rules():
    m = Matcher([entry("frag", "gpu-memory", findings=[{"kind": "cuda-oom", "min_frag_ratio": 0.3}])])
    low = Finding("cuda-oom", {"frag_ratio": 0.05}, "", 1)
    high = Finding("cuda-oom", {"frag_ratio": 0.45}, "", 2)
    assert m.match([], [low]) == []
    assert m.match([], [high])[0].id == "frag"


def test_literal_anchor():
    assert literal_anchor("Watchdog caught collective") == "watchdog caught collective"
    assert literal_anchor(r"NCCL WARN NET/IB.*error \d+") == "nccl warn net/ib"
    assert literal_anchor("(foo|bar)") is None


def test_an_entry_about_one_failure_is_not_made_by_generic_evidence(engine):
    """A hang where 63 of 64 ranks time out and one never reports: a laggard and timeouts, nothing
    else. The entries whose failure needs its own fact (an OOM on one rank; a checkpoint save) stay
    below the bar; the watchdog entry answers."""
    from bot.render import as_dict

    lines = [f"[rank{r}]: step 41200 | loss 2.01\n" for r in range(64)]
    lines += [f"[rank{r}]:[E1206 18:44:{12 + r % 40:02d}.715298746 ProcessGroupNCCL.cpp:607] [Rank {r}] Watchdog "
              "caught collective operation timeout: WorkNCCL(SeqNum=41201, OpType=ALLREDUCE, NumelIn=1048576, "
              "NumelOut=1048576, Timeout(ms)=600000) ran for 600061 milliseconds before timing out.\n"
              for r in range(64) if r != 17]
    doc = as_dict(engine.diagnose_text("".join(lines)), explain=True)
    confident = {c["id"]: c["confidence"] for c in doc["causes"] if not c.get("alternative")}
    assert doc["causes"][0]["id"] == "nccl-watchdog-timeout"
    assert "cuda-oom-rank-imbalance" not in confident and "ckpt-save-exceeds-collective-timeout" not in confident
    # with the OOM on that rank (before the others time out), the imbalance entry is back
    oom = "[rank17]: torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB.\n"
    ids = [c["id"] for c in as_dict(engine.diagnose_text("".join(lines[:64]) + oom + "".join(lines[64:])))["causes"]]
    assert "cuda-oom-rank-imbalance" in ids


def test_causes_held_at_the_same_cap_are_ordered_by_their_support(engine):
    # a bare "unhandled system error" (no NCCL WARN naming the call): shared memory and the memlock
    # limit are both held at the support-only cap; /dev/shm has more support (NCCL's troubleshooting
    # guide puts it first for containers, and a memlock failure prints its own ibv_reg_mr WARN)
    text = ("RuntimeError: NCCL error in: ../torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp:1169, "
            "unhandled system error, NCCL version 2.10.3\n"
            "ncclSystemError: System call (socket, malloc, munmap, etc) failed.\n")
    causes = engine.diagnose_text(text).causes
    assert causes[0].id == "nccl-unhandled-system-error"
    capped = [c for c in causes[1:] if c.id in ("nccl-shm-segment-failed", "memlock-limit-too-low")]
    assert [c.id for c in capped] == ["nccl-shm-segment-failed", "memlock-limit-too-low"]
    assert capped[0].confidence == capped[1].confidence and capped[0].support > capped[1].support


def test_an_entry_without_check_next_takes_its_familys(engine):
    # cuda-illegal-memory-access names no check_next; its catalogued messages belong to the CUDA
    # runtime-error family, whose next check is a GPU fault: an illegal address is a code bug first,
    # a failing GPU (XID 31/43 vs 48/79 in the kernel log) second
    m = engine.matcher
    e = m.entry("cuda-illegal-memory-access")
    assert e is not None and not e.check_next
    assert "family-gpu-hardware-fault" in m.check_next(e)
    text = ("RuntimeError: CUDA error: an illegal memory access was encountered\n"
            "CUDA kernel errors might be asynchronously reported at some other API call, so the stacktrace below might be incorrect.\n")
    causes = engine.diagnose_text(text).causes
    assert causes[0].id == "cuda-illegal-memory-access" and causes[0].confidence >= 0.5
    assert "gpu-hardware" in [c.category for c in causes[1:3] if c.alternative]
    # an entry with its own check_next keeps it; one no catalogued message points at has none
    own = m.entry("nccl-watchdog-timeout")
    assert m.check_next(own) == own.check_next
    assert m.check_next(m.entry("xid-13-graphics-exception")) == []


def test_a_store_connect_failure_points_next_at_the_launch_settings(engine):
    # a TCPStore that cannot be reached: the network first, then the address and port the ranks were
    # given (MASTER_ADDR/PORT, a launcher that ignored them), then a master that never came up
    text = ("torch.distributed.DistNetworkError: The client socket has failed to connect to "
            "[node-0]:29500 (errno: 113 - No route to host).\n")
    causes = engine.diagnose_text(text).causes
    assert causes[0].category == "communication" and causes[0].confidence >= 0.5
    alts = [c for c in causes if c.alternative]
    assert [c.id for c in alts][:1] == ["family-launch-config"]


def test_nccls_unhandled_cuda_error_is_a_cuda_call_not_the_network(engine):
    # ncclUnhandledCudaError: "a call to a CUDA function failed"; every reading the entry lists is a
    # driver/CUDA/NCCL mismatch, a faulted GPU or device memory, none is the network
    for text in ("RuntimeError: NCCL error in: ../torch/csrc/distributed/c10d/NCCLUtils.hpp:275, unhandled cuda "
                 "error (run with NCCL_DEBUG=INFO for details), NCCL version 2.20.5\n"
                 "ncclUnhandledCudaError: Call to CUDA function failed.\n",
                 "OSError: (External) NCCL error(1), unhandled cuda error.\n"):
        cats = [c.category for c in engine.diagnose_text(text).causes]
        assert cats[0] == "software" and "gpu-hardware" in cats[:3] and "communication" not in cats[:1], cats


def test_a_clean_nccl_teardown_is_not_a_failure(engine):
    # every local rank prints "[Service thread] Connection closed by localRank N" (INFO) when it closes
    # its proxy connection: at a clean exit as after a crash. Alone it names no cause; beside the
    # error that made a rank leave, the error speaks
    chatter = (HERE / "fixtures" / "benign" / "nccl-info.log").read_text(encoding="utf-8").splitlines()[:40]
    teardown = [f"gpu-node-01:1234:1290 [{r}] NCCL INFO [Service thread] Connection closed by localRank {r}"
                for r in range(4)]
    done = "gpu-node-01:1234:1234 [0] NCCL INFO comm 0x55d0 rank 0 nranks 8 cudaDev 0 busId 1b000 - Destroy COMPLETE"
    assert not [c for c in engine.diagnose_text("\n".join(chatter + teardown + [done])).causes if c.confidence >= 0.5]
    warn = "gpu-node-02:4321:4390 [1] NCCL WARN socketProgress: Connection closed by remote peer gpu-node-01<42830>"
    causes = engine.diagnose_text("\n".join(chatter + [warn] + teardown)).causes
    assert causes and causes[0].id == "nccl-connection-closed-by-peer"


@pytest.mark.parametrize("line", [
    # what NCCL prints at INFO while it probes and falls back, in healthy runs as in failing ones
    "node1:1234:1290 [0] NCCL INFO NET/IB : No device found.",
    "node1:1234:1290 [0] NCCL INFO Failed to initialize NET plugin IBext",
    "node1:1234:1290 [0] NCCL INFO NET/MLX5: Call to mlx5dv_internal_get_data_direct_sysfs_path failed with error "
    "Operation not supported",
    "node1:1234:1290 [0] NCCL INFO Could not enable P2P between dev 0(=1b000) and dev 1(=1c000)",
    "node1:1234:1290 [0] NCCL INFO Call to connect returned Connection refused, retrying",  # a start-up race
    "node1:1234:1290 [0] NCCL INFO Failed to bind NVLink SHARP (NVLS) Multicast memory of size 1048576 : CUDA error "
    "801 'operation not supported'",
])
def test_an_nccl_info_probe_beside_no_failure_is_no_cause(engine, line):
    chatter = (HERE / "fixtures" / "benign" / "nccl-info.log").read_text(encoding="utf-8").splitlines()[:30]
    causes = engine.diagnose_text("\n".join(chatter + [line])).causes
    assert not any(c.id.startswith("xid-74") for c in causes)  # NVLS multicast is not an NVLink link error
    if "NVLS" not in line:  # (its "CUDA error 801" is a CUDA error the line itself reports)
        assert not [c for c in causes if c.confidence >= 0.5], [(c.id, c.confidence) for c in causes]


@pytest.mark.parametrize("lines", [
    # the same connect retried and retried (the job hangs in NCCL's bootstrap), or one whose packets go nowhere
    [f"zgiot:1183664:1184669 [0] NCCL INFO socketPollConnect: connect returned No route to host, retrying "
     f"({n}/34) after sleep for {n}00 msec" for n in (26, 27)],
    ["worker-0:16:63 [0] NCCL INFO Call to connect returned Connection refused, retrying"] * 4,
    ["worker:101542:101934 [0] NCCL INFO Call to connect returned Connection timed out, retrying"],
])
def test_a_connect_that_keeps_failing_is_a_cause_even_at_info(engine, lines):
    causes = engine.diagnose_text("\n".join(lines)).causes
    assert causes and causes[0].category == "communication" and causes[0].confidence >= 0.5


def test_enomem_on_an_rdma_registration_is_the_locked_memory_limit(engine):
    line = ("[1700000000.123456] [node1:1234:0] ib_md.c:349 UCX ERROR ibv_reg_mr(address=0x7f0000000000, "
            "length=4096, access=0xf) failed: Cannot allocate memory")
    assert engine.diagnose_text(line).causes[0].id == "memlock-limit-too-low"


@pytest.mark.parametrize("line, category", [
    # EIO that a network transport reports is the fabric's; EIO from a file write is storage's
    ("node1:1234:1290 [0] NCCL WARN NET/OFI Error posting RDMA ctrl request. RC: -5, Error: Input/output error",
     "communication"),
    ("node1:1:2 [0] NCCL WARN NET/IB : Call to ibv_modify_qp failed with Input/output error", "communication"),
    ("RuntimeError: write(): fd 29 failed with Input/output error", "checkpoint-storage"),
    ("OSError: [Errno 5] Input/output error: '/mnt/nfs/ckpt/step_1200/model.safetensors'", "checkpoint-storage"),
])
def test_an_input_output_error_belongs_to_the_layer_that_reported_it(engine, line, category):
    causes = engine.diagnose_text(line).causes
    assert causes and causes[0].category == category and causes[0].confidence >= 0.5


def test_the_failure_kinds_are_kinds_the_parser_emits():
    from collectors.findings import KINDS
    from knowledge.match import FAILURE_KINDS

    assert set(FAILURE_KINDS) <= set(KINDS)


@pytest.mark.parametrize("line", [
    "beegfs: MessagingTk (requestResponse): Retrying communication with node: meta01 [beegfs-meta:1]",
    'W0502 03:14:07.123456 Retrying WriteObject for "ckpt/step_12000/model_00.pt": InvocationID: '
    "gccl-invocation-id/5f1c, Attempt: 2, due to error: googleapi: Error 429: rate limit exceeded, rateLimitExceeded",
])
def test_a_retry_that_succeeds_is_no_cause_and_one_that_keeps_failing_is(engine, line):
    from knowledge.match import RETRIES_STUCK

    steps = (HERE / "fixtures" / "benign" / "training-progress.log").read_text(encoding="utf-8").splitlines()[:30]
    assert not [c for c in engine.diagnose_text("\n".join(steps + [line])).causes if c.confidence >= 0.5]
    causes = engine.diagnose_text("\n".join(steps + [line] * RETRIES_STUCK)).causes
    assert causes and causes[0].category == "checkpoint-storage" and causes[0].confidence >= 0.5


def test_a_start_up_race_on_every_rank_is_not_a_stuck_connect(engine):
    # each rank's process retries once while rank 0 is not listening yet: a race, not a failure; one
    # process retrying again and again is stuck
    race = "\n".join(f"node1:{1000 + r}:{1100 + r} [{r}] NCCL INFO Call to connect returned Connection refused, "
                     f"retrying" for r in range(8))
    assert not [c for c in engine.diagnose_text(race).causes if c.confidence >= 0.5]
    stuck = "\n".join(["node1:1000:1100 [0] NCCL INFO Call to connect returned Connection refused, retrying"] * 4)
    causes = engine.diagnose_text(stuck).causes
    assert causes and causes[0].category == "communication" and causes[0].confidence >= 0.5
