"""The last resort (knowledge/vocabulary.py): a category read from the words of the failure lines,
only when nothing known reached the bar, at the bar and no higher."""

from pathlib import Path

import pytest

from collectors.trainlog import parse_text
from knowledge import vocabulary
from knowledge.loader import load_dir
from knowledge.match import CONFIDENT

HERE = Path(__file__).resolve().parent
CORPUS = HERE / "corpus"


def _read(text: str) -> list[vocabulary.Reading]:
    parsed = parse_text(text)
    return vocabulary.read(parsed.lines, parsed.first_error)


def test_every_category_speaks_through_a_backstop_family_of_its_own():
    entries, _ = load_dir(examples=False)
    by_id = {e.id: e for e in entries}
    cats, order, echo = vocabulary.load()
    assert sorted(c.name for c in cats) == sorted(order)
    assert len(order) == 8 and echo <= set(order)
    for c in cats:
        for fam in [c.family] + [f for _, f in c.families]:
            assert fam in by_id, fam
            assert by_id[fam].backstop, fam
            assert by_id[fam].category == c.name, (c.name, fam)


def test_a_platform_preemption_no_catalog_knows_is_named_from_its_words(engine):
    # AzureML's own wording (a held-out miss, now in the development set): no catalogued message
    path = CORPUS / "scheduler" / "azureml-low-priority-cluster-pipeline-preemptionerror.log"
    d = engine.diagnose_paths([str(path)])
    assert d.causes, "no cause"
    top = d.causes[0]
    assert (top.category, top.id, top.confidence) == ("scheduler", "family-scheduler-termination", CONFIDENT)
    assert any("words only" in str(s) for s in top.explain), top.explain
    assert top.evidence and "pre-empted" in top.evidence[0].line
    # every face says how weak the reading is
    from bot.render import as_dict
    from bot.render.markdown import render

    for lang, words in (("en", "words of the error lines only"), ("zh", "仅凭报错行的用词判断")):
        doc = as_dict(d, lang=lang)
        assert doc["causes"][0]["basis"] == "words"
        assert words in render(doc)


def test_autoscaler_terminations_name_the_scheduler_with_the_traceback_after_them(engine):
    path = CORPUS / "scheduler" / "skyrl-anyscale-k8s-pod-termination-preempted-placement-group.log"
    d = engine.diagnose_paths([str(path)])
    assert d.causes and d.causes[0].category == "scheduler", [(c.id, c.confidence) for c in d.causes]


@pytest.mark.parametrize("folder", ["unrelated", "benign"])
def test_unrelated_and_healthy_logs_give_the_vocabulary_nothing(engine, folder):
    for path in sorted((HERE / "fixtures" / folder).glob("*.log")):
        text = path.read_text(encoding="utf-8")
        assert _read(text) == [], path.name
        assert engine.diagnose_paths([str(path)]).causes == [], path.name


def test_info_warning_and_retry_lines_never_vote():
    text = "\n".join([
        "gpu7:1234:1290 [7] NCCL INFO NET/IB : No device found, timeout on probe failed",
        "/opt/conda/lib/python3.10/site-packages/torch/cuda/memory.py:12: UserWarning: out of memory "
        "fallback failed",
        "WARNING 05-01 10:12:03 worker.py:88] spot instance could be preempted, failed to pin",
        "Connection refused, retrying (attempt 2 of 5) failed",
    ])
    assert _read(text) == []


def test_a_collective_timeout_is_an_echo_beside_another_layers_words():
    # the ranks that waited say "timed out"; the one that died says why
    text = "\n".join([
        "[rank1]: RuntimeError: collective operation timed out after 600000 ms",
        "[rank2]: RuntimeError: collective operation timed out after 600001 ms",
        "[rank0]: RuntimeError: worker died with a bus error while reading /dev/shm/batch_17",
    ])
    readings = _read(text)
    assert [r.category for r in readings][:2] == ["shared-memory", "communication"]


def test_the_first_error_leads_among_layers_and_the_words_pick_a_family():
    text = "\n".join([
        "RuntimeError: failed to write the checkpoint shard: the file system went read-only",
        "ERROR: worker 3 killed, the host ran out of ram",
        "ERROR: worker 5 killed, cgroup memory limit reached",
    ])
    assert [r.category for r in _read(text)][:2] == ["checkpoint-storage", "host-memory"]
    store = "E0501 10:12:03.000 rendezvous.py:88] failed to reach the c10d store on master-0:29500"
    readings = _read(store)
    assert (readings[0].category, readings[0].family) == ("communication", "family-c10d-store-rendezvous")


def test_a_chorus_counts_once():
    line = "[rank{}]: ERROR: lost connection to the parameter server\n"
    readings = _read("".join(line.format(i) for i in range(64)))
    assert len(readings) == 1 and len(readings[0].lines) == 1


def test_nothing_below_a_known_cause(engine):
    # a catalogued NCCL message reaches the bar: the words of other lines add nothing
    text = ("NCCL WARN NET/IB : Got completion from peer 10.0.0.7<33412> with status=12 opcode=0 len=0 "
            "vendor err 129 (Send)\nRuntimeError: checkpoint save failed: disk quota exceeded soon\n")
    d = engine.diagnose_text(text)
    assert not any("words only" in str(s) for c in d.causes for s in c.explain), [(c.id, c.explain) for c in d.causes]


@pytest.mark.parametrize("code, want", [
    (-9, ["host-memory"]),                 # SIGKILL, no traceback: the host OOM killer first
    (1, ["scheduler", "gpu-memory", "software"]),  # a Python exception: CUDA OOM, version/code errors
    (-7, ["shared-memory"]),               # SIGBUS: a shared-memory mapping that could not be backed
    (-6, ["scheduler", "communication"]),  # SIGABRT: the NCCL watchdog tearing a hung rank down
    (-11, ["scheduler", "software", "gpu-hardware"]),  # SIGSEGV: mismatched builds, then the GPU
])
def test_the_exit_status_of_a_torchrun_summary_says_what_to_check_next(engine, code, want):
    # the agent's own lines (tests/fixtures/trainlog/agent-exit-9.txt) with another exit status:
    # "Sending process ... closing signal SIGTERM" follows any worker's failure; only a kill
    # without a traceback reads as the host's memory
    text = (HERE / "fixtures" / "trainlog" / "agent-exit-9.txt").read_text(encoding="utf-8")
    d = engine.diagnose_text(text.replace("exitcode: -9", f"exitcode: {code}"))
    got = [c.category for c in d.causes]
    assert got[:len(want)] == want, [(c.id, c.confidence) for c in d.causes]
    if code != -9:
        assert got[0] != "host-memory", [(c.id, c.confidence) for c in d.causes]
    if code == 1:
        # the reason shown is the exit status, in both languages
        alt = next(c for c in d.causes if c.alternative and c.category == "gpu-memory")
        assert "exit code 1, a Python exception" in str(alt.explain[-1]), alt.explain
        assert "退出码 1" in alt.explain[-1].zh


# kernel-log lines as the NVIDIA driver prints them (NVRM), one per code
_XID_LINE = "NVRM: Xid (PCI:0000:3b:00): {}, pid=2941, name=python, {}"


@pytest.mark.parametrize("code, tail, want", [
    # shared/reference/xid-catalog.csv: "user application (long/hung kernel) or driver": the code first
    (109, "Ch 00000008 errorString CTX SWITCH TIMEOUT, Info 0x1c001", "family-cuda-runtime-error"),
    # "firmware (GSP) / driver": the driver release
    (119, "Timeout after 6s of waiting for RPC response from GPU0 GSP! Expected function 76 (GSP_RM_CONTROL)",
     "family-version-mismatch"),
])
def test_an_xid_codes_catalog_entry_says_what_to_check_next(engine, code, tail, want):
    d = engine.diagnose_text(_XID_LINE.format(code, tail))
    assert d.causes[0].category == "gpu-hardware", [(c.id, c.confidence) for c in d.causes]
    alt = next((c for c in d.causes if c.alternative and c.category == "software"), None)
    assert alt is not None and alt.id == want, [(c.id, c.confidence) for c in d.causes]
    assert "NVIDIA's XID catalog lists" in str(alt.explain[-1]) and f"XID {code}" in str(alt.explain[-1])
    assert f"XID {code} 的可能原因" in alt.explain[-1].zh


def test_an_xid_the_catalog_puts_in_the_memory_hardware_sends_nowhere_else(engine):
    # XID 48: "memory hardware (DRAM/HBM uncorrectable ECC)": nothing outside the GPU to check
    d = engine.diagnose_text(_XID_LINE.format(48, "An uncorrectable double bit error (DBE) has been detected on GPU "
                                                  "in the framebuffer at partition 6, subpartition 0."))
    assert [c.category for c in d.causes] == ["gpu-hardware"], [(c.id, c.confidence) for c in d.causes]
