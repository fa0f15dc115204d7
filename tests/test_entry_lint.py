"""The advice in the curated entries stays right: options the tools accept, shared state marked,
root said, fabric tests across nodes, one Chinese word for one thing (knowledge/lint.py).

Each lint runs over every shipped entry and must find nothing, and over a synthetic bad entry
(the defects issue 15 found) and must find each defect, so none of them can pass by accident.
"""

from __future__ import annotations

import re
import textwrap
from pathlib import Path

import pytest
import yaml

from knowledge import lint
from knowledge.loader import EntryError, entry_files, entries_dir, load_dir, load_file

ROOT = Path(__file__).resolve().parent.parent

GOOD_HEAD = """\
id: {id}
category: communication
title: {{en: "a synthetic entry", zh: "一个合成条目"}}
signatures: ['synthetic lint probe line']
cause: {{en: "c", zh: "{cause_zh}"}}
fix: {{en: ["f"], zh: ["修复"]}}
support: {{tier: self, why: {{en: "w", zh: "原因"}}}}
references: [https://example.org/]
examples: {{match: ['synthetic lint probe line']}}
next_commands:
"""


def entry_from(tmp_path: Path, commands: list[dict], cause_zh: str = "原因", eid: str = "lint-probe"):
    body = GOOD_HEAD.format(id=eid, cause_zh=cause_zh) + textwrap.indent(
        yaml.safe_dump(commands, allow_unicode=True, sort_keys=False), "  ")
    path = tmp_path / f"{eid}.yaml"
    path.write_text(body, encoding="utf-8")
    return load_file(path)


def cmd(command: str, en: str = "why", zh: str = "原因", **extra) -> dict:
    return {"command": command, "why": {"en": en, "zh": zh}, **extra}


@pytest.fixture(scope="module")
def entries():
    good, errors = load_dir(examples=False)
    assert not errors, errors[:3]
    assert len(good) == len(entry_files(entries_dir()))
    return good


@pytest.fixture(scope="module")
def rules():
    return lint.load_rules()


# ---- the option lists ------------------------------------------------------------------------

def test_every_tool_list_names_its_source(rules):
    for tool, spec in rules["tools"].items():
        assert spec.get("source"), f"{tool}: the option list needs the source it was read from"
        assert spec.get("options"), tool
    for table in ("root_needed", "shared_state"):
        for rule in rules[table]:
            assert rule.get("why") or rule.get("what"), rule


def test_every_flag_an_entry_uses_is_one_the_tool_documents(entries, rules):
    problems = lint.check_options(entries, rules)
    assert not problems, "\n".join(map(str, problems))
    # and the check did look at the tools: the entries use each of them
    used = {t for t in rules["tools"] for e in entries for c in e.next_commands
            if any(True for _ in lint.tool_runs(c["command"], t))}
    assert {"nvidia-smi", "dcgmi", "ibdiagnet", "perfquery", "ib_write_bw", "all_reduce_perf",
            "scontrol", "sacct"} <= used, used


def test_the_option_check_refuses_what_the_tools_do_not_take(tmp_path, rules):
    bad = entry_from(tmp_path, [
        cmd("nvidia-smi -q -d PCIE"),                                   # not a -d type
        cmd("nvidia-smi --query-gpu=index,pcie.replay --format=csv"),   # not a field
        cmd("dcgmi diag -r 5"),                                          # no such level
        cmd("sacct -j <jobid> --format=JobID,Stat"),                    # no such field
        cmd('scontrol update nodename=<node> state=drained reason="x"'),  # not a state
        cmd("perfquery --clear <lid> 1"),                                # not a perfquery flag
        cmd("all_reduce_perf -b 8 -e 4G -x 2 -g 1"),                     # -x is not an nccl-tests flag
    ])
    problems = lint.check_options([bad], rules)
    where = sorted({p.where for p in problems})
    assert where == [f"next_commands[{i}]" for i in range(7)], "\n".join(map(str, problems))
    assert any("'PCIE'" in p.reason for p in problems)
    good = entry_from(tmp_path, [
        cmd("nvidia-smi -q -d ECC,ROW_REMAPPER"),
        cmd("nvidia-smi --query-gpu=index,pci.bus_id,pcie.link.gen.current --format=csv,noheader"),
        cmd("dcgmi diag -r 4 -i 0"),
        cmd("sacct -j <jobid> --format=JobID,State,ExitCode,MaxRSS%12,NodeList"),
        cmd('scontrol update nodename=<node> state=drain reason="x"', caution={"en": "c", "zh": "注意"}),
        cmd("nvidia-smi topo -p2p r; nvidia-smi nvlink -e"),
    ], eid="lint-probe-good")
    assert lint.check_options([good], rules) == []


# ---- shared state ----------------------------------------------------------------------------

def test_real_entries_mark_every_command_that_changes_shared_state(entries, rules):
    problems = lint.check_shared_state(entries, rules)
    assert not problems, "\n".join(map(str, problems))


def test_counter_resets_gpu_resets_drains_and_deletions_need_a_caution(tmp_path, rules):
    risky = ["sudo perfquery -R <lid> 1", "sudo perfquery -x -r <lid> 1", "sudo ibdiagnet --pc -P all=1",
             "sudo nvidia-smi -r -i 0", 'scontrol update nodename=<node> state=drain reason="x"',
             "sudo scontrol update NodeName=<node> State=DOWN Reason=x", "rm -f /dev/shm/nccl-*",
             "echo 1 > /sys/bus/pci/devices/<pci>/remove", "sudo systemctl restart nvidia-fabricmanager",
             "sudo ibqueryerrors -k"]
    bad = entry_from(tmp_path, [cmd(c) for c in risky])
    flagged = {p.where for p in lint.check_shared_state([bad], rules)}
    assert flagged == {f"next_commands[{i}]" for i in range(len(risky))}
    # read-only uses are not flagged: -x only shows the extended counters, -c only hides some
    calm = entry_from(tmp_path, [cmd("sudo perfquery -x <lid> 1"), cmd("sudo ibqueryerrors -c -s XmtWait"),
                                 cmd("nvidia-smi -q -d ECC"), cmd("scontrol show node <node>"),
                                 cmd("systemctl status nvidia-fabricmanager")], eid="lint-probe-calm")
    assert lint.check_shared_state([calm], rules) == []
    marked = entry_from(tmp_path, [cmd(c, caution={"en": "record the counters first", "zh": "先记录计数器"})
                                   for c in risky], eid="lint-probe-marked")
    assert lint.check_shared_state([marked], rules) == []


def test_the_loader_takes_caution_and_root_and_refuses_them_malformed(tmp_path):
    ok = entry_from(tmp_path, [cmd("sudo perfquery -R <lid> 1", caution={"en": "save them", "zh": "先保存"}),
                               cmd("dmesg -T", root=True)])
    assert ok.next_commands[1]["root"] is True
    for extra in ({"caution": {"en": "only English"}}, {"root": "yes"}, {"sudo": True}):
        with pytest.raises(EntryError) as info:
            entry_from(tmp_path, [cmd("dmesg -T", **extra)], eid="lint-probe-bad")
        assert "lint-probe-bad.yaml:" in str(info.value)


# ---- root -------------------------------------------------------------------------------------

def test_real_entries_say_when_a_command_needs_root(entries, rules):
    problems = lint.check_root(entries, rules)
    assert not problems, "\n".join(map(str, problems))


def test_commands_that_need_root_are_refused_unless_they_say_so(tmp_path, rules):
    needs = ["dmesg -T | grep -i xid", "lspci -vvv -s <pci> | grep LnkSta", "nvidia-bug-report.sh",
             "journalctl -k --since -3h | grep -i oom", "perfquery -x <lid> 1", "ipmitool sel elist"]
    bad = entry_from(tmp_path, [cmd(c) for c in needs])
    assert {p.where for p in lint.check_root([bad], rules)} == {f"next_commands[{i}]" for i in range(len(needs))}
    said = entry_from(tmp_path, [cmd("sudo " + c) for c in needs[:3]] + [cmd(needs[3], root=True)]
                      + [cmd('ssh <node> "sudo dmesg -T | tail"'), cmd("lspci | grep -i nvidia"),
                         cmd("journalctl --user -n 50")], eid="lint-probe-said")
    assert lint.check_root([said], rules) == []


# ---- fabric tests -----------------------------------------------------------------------------

def test_real_fabric_tests_span_nodes(entries):
    problems = lint.check_fabric_tests(entries)
    assert not problems, "\n".join(map(str, problems))


def test_a_single_node_all_reduce_is_no_fabric_test(tmp_path):
    bad = entry_from(tmp_path, [
        cmd("NCCL_DEBUG=INFO all_reduce_perf -b 8 -e 4G -f 2 -g 8",
            en="Run nccl-tests on the suspect node pair to rule the fabric in or out.",
            zh="在可疑的节点对上跑 nccl-tests，确认或排除网络问题。"),
        cmd("ib_write_bw -d <hca> --report_gbits", en="Raw RDMA test.", zh="RDMA 测试。"),
    ])
    problems = lint.check_fabric_tests([bad])
    assert [p.where for p in problems] == ["next_commands[0]", "next_commands[1]"]
    assert "fabric test" in problems[0].reason
    good = entry_from(tmp_path, [
        cmd("mpirun -np 2 -H <nodeA>,<nodeB> all_reduce_perf -b 8 -e 4G -f 2 -g 1",
            en="Across the node pair: rule the fabric in or out.", zh="跨节点对测试，确认或排除网络问题。"),
        cmd("srun -N 2 --ntasks-per-node=1 all_reduce_perf -b 8 -e 1G -g 1"),
        cmd("ssh <peer> ib_write_bw -d <hca> & sleep 2; ib_write_bw -d <hca> <peer>"),
        cmd("NCCL_P2P_DISABLE=1 all_reduce_perf -b 8 -e 1G -f 2 -g 8",
            en="On one node: the P2P path between its GPUs.", zh="单节点：本机 GPU 之间的 P2P 通路。"),
    ], eid="lint-probe-fabric")
    assert lint.check_fabric_tests([good]) == []


# ---- the Chinese glossary ---------------------------------------------------------------------

def test_the_glossary_names_each_core_term_with_its_english():
    g = lint.load_glossary()
    terms = {zh: en for zh, en, _ in g.terms}
    for zh in ("显存", "共享内存", "掉卡", "通信超时", "排空", "重置", "内核日志", "核函数"):
        assert zh in terms and re.search(r"[A-Za-z]", terms[zh]), zh
    assert g.banned, "the banned-wording table is empty"


def _catalog_texts():
    from bot import messages
    from knowledge.xid_catalog import XID

    items = [(f"XID {code}", row) for code, row in XID.items()]
    items.append(("knowledge/xid_zh.yaml", {"zh": list((yaml.safe_load(
        (ROOT / "knowledge" / "xid_zh.yaml").read_text(encoding="utf-8"))["buckets"]).values())}))
    for path in sorted((ROOT / "knowledge" / "catalog").glob("*.yaml")):
        items.append((path.name, yaml.safe_load(path.read_text(encoding="utf-8"))))
    items.append(("bot/messages.py TEXT", messages.TEXT))
    items.append(("bot/messages.py GENERIC_STEPS", messages.GENERIC_STEPS))
    return items


def test_every_chinese_text_follows_the_glossary(entries):
    items = [(e.id, e.to_json()) for e in entries] + _catalog_texts()
    assert sum(1 for _, d in items for _ in lint.zh_texts(d)) > 1000  # the walk reaches the texts
    problems = lint.check_zh(items)
    assert not problems, "\n".join(map(str, problems[:20]))


def test_the_banned_calques_are_refused(tmp_path):
    bad = entry_from(tmp_path, [cmd("nvidia-smi", zh="先 drain 节点，再复位 GPU")],
                     cause_zh="这行只是回声，启动器只是传话的，内核日志里的 XID 才是真相；CUDA 内核越界。")
    reasons = " ".join(p.reason for p in lint.check_zh([(bad.id, bad.to_json())]))
    for word in ("回声", "传话", "才是真相", "CUDA 内核", "'drain'", "复位"):
        assert word in reasons, word
    ok = entry_from(tmp_path, [cmd('scontrol update nodename=<node> state=drain reason="x"',
                                   zh="排空（drain）节点后重置 GPU", caution={"en": "c", "zh": "注意"})],
                    cause_zh="这是连带报错；内核日志里的 XID 才是根本原因；核函数越界。", eid="lint-probe-zh")
    assert lint.check_zh([(ok.id, ok.to_json())]) == []


# ---- facts issue 15 corrected stay corrected --------------------------------------------------

# (pattern over the entry's YAML text, the fact and its source)
WRONG_CLAIMS = [
    (r"-d PCIE\b", "PCIE is no nvidia-smi -d type (nvidia-smi(1))"),
    (r"rdzv[_-]conf\s+timeout=", "the c10d rendezvous reads join_timeout (torch dynamic_rendezvous.py)"),
    (r"900 s(?:econds)? by default|默认 900 秒", "the rendezvous join timeout defaults to 600 s (dynamic_rendezvous.py)"),
    (r"NCCL_IB_TIMEOUT\s*\(?\s*(?:in|of)?\s*\d+\s*(?:s|sec|ms|seconds)\b", "NCCL_IB_TIMEOUT is an exponent (NCCL env docs)"),
    (r"CUBLAS_WORKSPACE_CONFIG=:4096:8 \(or smaller\)", ":4096:8 is the large setting (cuBLAS docs)"),
    (r"2[-–]3\s*[x×] the (?:model )?weights", "bf16 weights + fp32 Adam state is about 6-7x (PyTorch docs)"),
    (r"srun -N \$SLURM_JOB_NUM_NODES", "the allocation is gone once the job failed (srun(1))"),
    (r"(?i)(?:journalctl|dmesg)[^\n]*sigbus", "the kernel does not log a SIGBUS delivery"),
]


def test_the_corrected_facts_do_not_come_back():
    found = []
    for path in entry_files(entries_dir()):
        text = path.read_text(encoding="utf-8")
        for pattern, why in WRONG_CLAIMS:
            if re.search(pattern, text):
                found.append(f"{path.name}: {why}")
    assert not found, "\n".join(found)
