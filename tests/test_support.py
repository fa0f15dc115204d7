"""Support tier and cost figures are claims: each one read from evidence, on real excerpts."""

from __future__ import annotations

from pathlib import Path

from collectors.trainlog import parse_paths, parse_text
from knowledge.support import RateCard, adjust_tier, job_shape

HERE = Path(__file__).resolve().parent
FIX = HERE / "fixtures"
CORPUS = HERE / "corpus"
RATES = HERE.parent / "deploy" / "rate-card.example.yaml"


def shape_of(path: Path):
    r = parse_paths([str(path)])
    return job_shape(r.lines, r.findings)


# ---- network type: from the transport lines, whole words ------------------------------------
def test_network_type_comes_from_the_transport_lines():
    roce = shape_of(FIX / "support" / "nccl-roce-devices.txt")
    assert (roce.network, roce.network_basis) == ("roce", "roce-devices")
    ib = shape_of(FIX / "support" / "nccl-ib-devices.txt")
    assert (ib.network, ib.network_basis) == ("infiniband", "ib-devices")
    # NET/IB completion errors with no device list: InfiniBand verbs, said as such
    ib2 = shape_of(CORPUS / "communication" / "ddp-ib-completion-status12-vendor-err129.log")
    assert (ib2.network, ib2.network_basis) == ("infiniband", "net-ib")


def test_the_word_process_is_not_roce_and_no_network_line_means_no_network():
    path = CORPUS / "host-memory" / "torch-distributed-launch-exitcode-9-sigkill.log"
    assert "process" in path.read_text(encoding="utf-8").lower()
    assert shape_of(path).network is None


# ---- GPU count: from the communicator size, else a lower bound that says so -----------------
def test_gpu_count_from_nccl_nranks_is_exact():
    s = shape_of(CORPUS / "communication" / "hf-trainer-multinode-allreduce-timeout-connection-closed.log")
    assert (s.gpus, s.gpus_basis, s.gpus_exact) == (16, "nranks", True)


def test_gpu_count_from_ranks_seen_is_only_a_lower_bound():
    s = shape_of(CORPUS / "host-memory" / "open-r1-grpo-childfailed-signal9-sigkill.log")
    assert s.gpus_basis == "ranks-seen" and s.gpus_exact is False
    s = job_shape(parse_text("WORLD_SIZE=8\n[rank3]: RuntimeError: boom\n").lines, [])
    assert (s.gpus, s.gpus_basis, s.gpus_exact) == (8, "world-size", True)


def test_gpus_given_on_the_command_line_win():
    r = parse_paths([str(FIX / "support" / "nccl-roce-devices.txt")])
    s = job_shape(r.lines, r.findings, gpus=64)
    assert (s.gpus, s.gpus_basis, s.gpus_exact) == (64, "given", True)


# ---- the estimate includes the waiting the rate card names ----------------------------------
def test_a_tier_costs_its_waiting_too():
    card = RateCard.load(RATES)
    est = card.estimate("vendor", 64)
    # the example card's vendor tier: no fee, 48 hours of waiting at 64 x 20 per GPU-hour
    assert est["tier_cost"] == 0 and est["idle_cost_while_waiting"] == 64 * 20 * 48
    assert est["total_cost"] == 64 * 20 * 48 and est["gpus_at_least"] is False
    low = card.estimate("self", 3, gpus_exact=False)
    assert low["gpus_at_least"] is True and low["total_cost"] == 600 + 3 * 20 * 2


def test_the_rendered_estimate_names_fee_waiting_and_total(data_dir, capsys):
    from bot.cli import main

    log = CORPUS / "communication" / "hf-trainer-multinode-allreduce-timeout-connection-closed.log"
    assert main(["--data-dir", str(data_dir), "diagnose", str(log), "--rate-card", str(RATES)]) == 0
    out = capsys.readouterr().out
    assert "16 idle GPUs" in out and "GPU count (16; NCCL nranks)" in out
    assert "0.0 idle hours" not in out


# ---- tiers: NVIDIA's resolution bucket, not "any hardware XID means the vendor" -------------
def _xids(text: str):
    return parse_text(text).findings


def test_one_contained_xid_94_is_a_restart_not_an_rma():
    kernel = (FIX / "trainlog" / "kernel-01.txt").read_text(encoding="utf-8")
    line = next(ln for ln in kernel.splitlines() if "): 94," in ln)
    tier, why = adjust_tier("vendor", "gpu-hardware", _xids(line))
    assert tier == "self" and "XID 94" in why and "restart app" in why


def test_a_gpu_off_the_bus_goes_on_site_before_the_vendor():
    log = CORPUS / "gpu-hardware" / "rtx5090-xid79-fallen-off-bus-gsp.log"
    tier, why = adjust_tier("vendor", "gpu-hardware", parse_paths([str(log)]).findings)
    assert tier == "onsite", why


def test_a_failed_row_remap_is_the_vendor():
    from collectors.findings import Finding

    tier, why = adjust_tier("onsite", "gpu-hardware", [Finding("row-remap", {"gpu": 3, "failure": True})])
    assert tier == "vendor" and "remap failed" in why


# ---- confidence: one fact counts once; a launcher's traceback is not the rank's --------------
def test_one_exit_counts_once_and_the_launcher_traceback_rules_nothing_out(engine):
    log = CORPUS / "host-memory" / "open-r1-grpo-childfailed-signal9-sigkill.log"
    r = parse_paths([str(log)])
    assert any(f.kind == "python-exception" and f.attrs["launcher"] for f in r.findings)
    d = engine.diagnose_paths([str(log)])
    top = d.causes[0]
    assert top.id == "host-oom-killer-sigkill"
    votes = [e for e in top.explain if e.startswith("+") and "exit-signal" in e and not e.startswith("+0:")]
    assert len(votes) == 1, top.explain
    # the exit is read from the line the exitcode signature matched: it does not count twice
    assert "on the signature's line" in votes[0] and top.confidence < 0.7, top.explain
    launcher = next(c for c in d.causes + d.candidates if c.id == "launcher-killed-rank-without-traceback")
    assert not any("ruled out by python-exception" in e for e in launcher.explain), launcher.explain
    # and an expert's next reading of a SIGKILL is offered beside it: the scheduler killed it
    assert any(c.category == "scheduler" and c.alternative for c in d.causes), [c.id for c in d.causes]


# ---- tiers from evidence (issue 15): vendor only on a failed remap, XID 64 or repeats ---------
def _xid(code: int):
    from collectors.findings import Finding

    return Finding("xid", {"code": code, "pci": "0000:3b:00"})


def test_memory_events_nvidia_buckets_as_ignore_or_restart_stay_with_the_team():
    # 63 (remap pending), 92 (corrected-error rate) and 94 (contained) are ignore / restart-app
    for code in (63, 92, 94):
        tier, why = adjust_tier("vendor", "gpu-hardware", [_xid(code)])
        assert tier == "self", (code, why)


def test_xid_64_a_failed_remap_is_the_vendor_and_a_reset_is_remote():
    assert adjust_tier("self", "gpu-hardware", [_xid(64)])[0] == "vendor"
    assert adjust_tier("self", "gpu-hardware", [_xid(48)])[0] == "remote"   # drain, reset, check remap
    assert adjust_tier("self", "gpu-hardware", [_xid(95)])[0] == "remote"   # RESET_GPU
    assert adjust_tier("vendor", "gpu-hardware", [_xid(79)])[0] == "onsite"  # reboot, reseat first


def test_the_catalog_hardware_flag_follows_nvidias_bucket():
    from knowledge.xid_catalog import XID

    for code in (63, 92, 93, 94, 109, 121, 137):
        assert XID[code]["hardware"] is False, code
    for code in (48, 64, 74, 79, 95):
        assert XID[code]["hardware"] is True, code


def test_only_physical_link_evidence_sends_a_network_fault_on_site():
    from collectors.findings import Finding

    completion = Finding("ib-error", {"status": "12", "vendor_err": "129"})
    # a RoCE GID misconfiguration shows completion errors too: no on-site visit for a setting
    assert adjust_tier("remote", "communication", [completion]) == ("remote", None)
    roce_down = Finding("ib-port", {"state": "Down", "link_layer": "Ethernet"})
    assert adjust_tier("remote", "communication", [completion, roce_down]) == ("remote", None)
    ib_down = Finding("ib-port", {"state": "Down", "link_layer": "InfiniBand"})
    assert adjust_tier("remote", "communication", [completion, ib_down])[0] == "onsite"
    symbols = Finding("nic-counter", {"device": "mlx5_0:1", "counter": "SymbolErrorCounter", "value": "1843"})
    assert adjust_tier("remote", "communication", [symbols])[0] == "onsite"
    clean = Finding("nic-counter", {"device": "mlx5_0:1", "counter": "SymbolErrorCounter", "value": "0"})
    assert adjust_tier("remote", "communication", [clean]) == ("remote", None)
