"""gpu-triage preflight: the rules on findings, and the CLI over the real sshd fake nodes."""

import json
import re
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from bot import preflight
from bot.config import load_config
from collectors.findings import Finding

T = load_config(env={}).section("preflight")


def cli(args, data_dir, timeout=180, env=None):
    exe = shutil.which("gpu-triage")
    cmd = [exe] if exe else [sys.executable, "-m", "bot.cli"]
    full = {k: v for k, v in os.environ.items() if k != "GPU_TRIAGE_CONFIG"}
    full.update({"GPU_TRIAGE_DATA_DIR": str(data_dir), **(env or {})})
    return subprocess.run(cmd + list(args), capture_output=True, text=True, env=full, timeout=timeout,
                          stdin=subprocess.DEVNULL)


def judge(f, best=None, **over):
    ctx = preflight.Context(t={**T, **over}, peers_ib_rate=best or {})
    return [(sev, check) for sev, check, _ in preflight.RULES[f.kind](f, ctx)]


@pytest.mark.parametrize("finding,expected", [
    (Finding("xid", {"code": 79, "pci": "0000:3b:00"}), [("critical", "xid")]),      # hardware
    (Finding("xid", {"code": 13}), [("warn", "xid")]),                                # application
    (Finding("gpu-lost", {"pci": "0000:3b:00"}), [("critical", "gpu")]),
    (Finding("row-remap", {"gpu": 1, "pending": True, "failure": False}), [("critical", "gpu")]),
    (Finding("row-remap", {"gpu": 1, "pending": False, "failure": False}), []),
    (Finding("ecc-error", {"type": "uncorrectable", "gpu": 2, "count": 3}), [("critical", "gpu")]),
    (Finding("gpu", {"index": 0, "memory_used_mib": 30000}), [("warn", "gpu")]),
    (Finding("gpu", {"index": 0, "memory_used_mib": 1}), []),
    (Finding("gpu-process", {"gpu": 0, "pid": 42, "name": "python"}), [("warn", "gpu")]),
    (Finding("shm-usage", {"size_bytes": 64 * 1024 * 1024, "used_pct": 1, "docker_default": True}),
     [("critical", "storage")]),
    (Finding("shm-usage", {"size_bytes": 4 * 10**9, "used_pct": 1}), [("warn", "storage")]),
    (Finding("shm-usage", {"size_bytes": 500 * 10**9, "used_pct": 90}), [("warn", "storage")]),
    (Finding("disk-usage", {"mount": "/ckpt", "used_pct": 97}), [("critical", "storage")]),
    (Finding("disk-usage", {"mount": "/boot", "used_pct": 99}), []),
    (Finding("memlock", {"limit_kb": 65536}), [("warn", "memlock")]),
    (Finding("memlock", {"limit_kb": -1}), []),
    (Finding("ib-port", {"device": "mlx5_0", "port": 1, "state": "Down", "phys_state": "Disabled"}),
     [("critical", "ib")]),
    (Finding("node-mismatch", {"what": "nccl", "value": "2.18.1", "others": "2.21.5"}), [("critical", "versions")]),
    (Finding("node-mismatch", {"what": "shm-used-pct", "value": 98, "others": 1}), []),
])
def test_rules(finding, expected):
    assert judge(finding) == expected


def test_slow_ib_port_is_a_warning_and_thresholds_come_from_config():
    slow = Finding("ib-port", {"device": "mlx5_1", "port": 1, "state": "Active", "rate": 100,
                               "link_layer": "InfiniBand"})
    assert judge(slow, {"InfiniBand": 400.0}) == [("warn", "ib")]
    assert judge(Finding("disk-usage", {"mount": "/ckpt", "used_pct": 90}), disk_warn_pct=95,
                 disk_critical_pct=99) == []
    assert judge(Finding("ib-port", {"device": "mlx5_3", "port": 1, "state": "Down"}),
                 ib_ignore_ports=["mlx5_3"]) == []


def test_exit_codes_follow_the_ladder():
    def report(*sev):
        nodes = []
        for i, s in enumerate(sev):
            v = preflight.NodeVerdict(node=f"n{i}", status="ok")
            if s != "ok":
                v.reasons.append(preflight.Reason(s, "x", "y"))
            nodes.append(v)
        return preflight.Report(nodes=nodes)

    assert report("ok", "warn").exit_code == 0
    assert report("ok", "unknown").exit_code == 2
    assert report("unknown", "critical").exit_code == 1
    assert report().exit_code == 2  # nothing checked is never healthy


# the command timeout leaves room for a loaded 2-core CI machine (14 collectors per node over SSH, a
# node's checks read "unknown" when one of them runs out of time); node05's ibstat hangs for good
SSH = ["--connect-timeout", "3", "--command-timeout", "10"]


def test_unhealthy_nodes_flagged_with_their_reason(cluster, data_dir):
    proc = cli(["preflight", "--nodes", "node[01-05],node08,node09", "--ssh-config", str(cluster.ssh_config),
                "--format", "json", *SSH], data_dir)
    assert proc.returncode == 1, proc.stderr
    doc = json.loads(proc.stdout)
    assert doc["severity"] == "critical" and doc["exit_code"] == 1
    nodes = {n["node"]: n for n in doc["nodes"]}
    sev = {name: n["severity"] for name, n in nodes.items()}
    assert sev == {"node01": "warn", "node02": "critical", "node03": "critical", "node04": "critical",
                   "node05": "unknown", "node08": "warn", "node09": "unknown"}

    def reasons(node, severity="critical"):
        return " | ".join(r["reason"] for r in nodes[node]["reasons"] if r["severity"] == severity)

    assert "hardware XID 79" in reasons("node02") and "GPU lost" in reasons("node02")
    assert "mlx5_10:1 is Down (Polling)" in reasons("node03")
    assert "/dev/shm is 98 % used" in reasons("node04")
    assert "ibstat timed out" in reasons("node05", "unknown")
    assert "unreachable" in reasons("node09", "unknown")
    assert not [r for r in nodes["node01"]["reasons"] if r["severity"] in ("critical", "unknown")]


def test_table_output_and_unreachable_means_could_not_check(cluster, data_dir):
    proc = cli(["preflight", "--nodes", "node01,node08,node09", "--ssh-config", str(cluster.ssh_config), *SSH],
               data_dir)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    rows = {line.split()[0]: line for line in proc.stdout.splitlines() if line.startswith("node")}
    assert "UNKNOWN" in rows["node09"] and "unreachable" in rows["node09"]
    assert "WARN" in rows["node01"] and "CRITICAL" not in proc.stdout
    assert "could not check" in proc.stdout and "Traceback" not in proc.stderr


def test_healthy_nodes_exit_0(cluster, data_dir):
    proc = cli(["preflight", "--nodes", "node01,node08", "--ssh-config", str(cluster.ssh_config), *SSH], data_dir)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "healthy (exit 0)" in proc.stdout


def test_unknown_fails_from_the_config_file(cluster, data_dir, tmp_path):
    cfg = tmp_path / "c.yaml"
    cfg.write_text("preflight:\n  unknown_fails: true\n  memlock_warn: false\n")
    proc = cli(["--config", str(cfg), "preflight", "--nodes", "node01,node09", "--ssh-config",
                str(cluster.ssh_config), "--format", "json", *SSH], data_dir)
    doc = json.loads(proc.stdout)
    assert proc.returncode == 1 and doc["exit_code"] == 1
    assert {n["node"]: n["severity"] for n in doc["nodes"]} == {"node01": "ok", "node09": "unknown"}


def test_local_never_reads_ok_when_checks_cannot_run(data_dir):
    proc = cli(["preflight", "--local", "--format", "json", "--command-timeout", "10"], data_dir)
    doc = json.loads(proc.stdout)
    assert proc.returncode == doc["exit_code"] and proc.returncode in (0, 1, 2)
    node = doc["nodes"][0]
    if not shutil.which("nvidia-smi"):  # no GPU here: the GPU check could not run -> unknown, never ok
        assert node["severity"] in ("unknown", "critical")
        assert any(r["check"] == "gpu" and r["severity"] == "unknown" for r in node["reasons"])


def test_preflight_misuse(data_dir):
    assert cli(["preflight"], data_dir).returncode == 2
    assert cli(["preflight", "--local", "--nodes", "x"], data_dir).returncode == 2


# A run of three or more English words outside quotes, code and identifiers: an untranslated sentence.
ENGLISH_RUN = re.compile(r"(?<![\w'/.-])(?:[A-Za-z][a-z]+[ ,]+){2,}[A-Za-z][a-z]+(?![\w'/.-])")


def test_reasons_in_chinese(tmp_path):
    """`preflight --lang zh`: every reason a node gets (an XID, a lost GPU, a port down, a full /dev/shm,
    a collector that did not run, an unreachable node) reads in Chinese, text and JSON alike."""
    import io

    from test_bundle import node

    fix = Path(__file__).resolve().parent / "fixtures" / "cluster"
    results = {
        "gpu02": node("gpu02", [("kernel-log", (fix / "kernel-log" / "11.txt").read_text(), 0)]),
        "gpu03": node("gpu03", [("ibstat", (fix / "ibstat" / "08.txt").read_text(), 0), ("df", "", 127)]),
        "gpu04": node("gpu04", [("df", (fix / "df" / "06-shm98.constructed.txt").read_text(), 0)]),
        "gpu09": preflight.NodeResult("gpu09", "unreachable", "gpu09:22: connection refused"),
    }
    report = preflight.evaluate(preflight.bundle_from_results(results), T)
    out = io.StringIO()
    preflight.render_text(report, out, "zh")
    text = out.getvalue()
    for said in ("硬件 XID 79", "GPU 掉卡", "IB 端口 mlx5_10:1 状态为 Down（Polling）", "/dev/shm 已用 98 %", "未找到 df",
                 "未检查：unreachable", "有阻断性问题"):
        assert said in text, text
    assert not ENGLISH_RUN.findall(re.sub(r"（[^）]*）|\([^)]*\)", "", text)), ENGLISH_RUN.findall(text)
    doc = report.to_json("zh")
    assert doc["lang"] == "zh" and all(re.search(r"[\u4e00-\u9fff]", r["reason"])
                                       for n in doc["nodes"] for r in n["reasons"])
    # English stays the default, word for word as before
    out = io.StringIO()
    preflight.render_text(report, out)
    assert "hardware XID 79" in out.getvalue() and "BLOCKING findings" in out.getvalue()


def test_a_gpu_out_of_spare_rows_is_a_warning():
    # nvidia-smi -q's Bank Remap Availability Histogram: banks at None have no spare row left
    f = Finding(kind="row-remap", attrs={"gpu": 3, "pending": False, "failure": False, "banks_max": 630,
                                         "banks_none": 2})
    assert judge(f) == [("warn", "gpu")]
    assert judge(Finding(kind="row-remap", attrs={"gpu": 3, "pending": False, "failure": False, "banks_max": 640,
                                                  "banks_none": 0})) == []
