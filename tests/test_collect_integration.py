"""Collection end to end against real servers: an OpenSSH sshd per fake node on loopback (stand-in
tools print real captured outputs) and a real one-node Slurm. The CLI runs as a user runs it."""

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from collectors.bundle import read_bundle
from collectors.registry import collectors
from collectors.remote import SSHSettings, collect_nodes

NODES8 = "node[01-08]"


def cli(args, data_dir, timeout=180, env_extra=None):
    exe = shutil.which("gpu-triage")
    cmd = [exe] if exe else [sys.executable, "-m", "bot.cli"]
    env = {**os.environ, "GPU_TRIAGE_DATA_DIR": str(data_dir), **(env_extra or {})}
    return subprocess.run(cmd + list(args), capture_output=True, text=True, env=env, timeout=timeout,
                          stdin=subprocess.DEVNULL)


@pytest.fixture(scope="module")
def eight(cluster, tmp_path_factory, data_dir):
    """One collection from node01..node08 through the CLI, kept as a bundle."""
    out = tmp_path_factory.mktemp("bundle") / "incident.tar.gz"
    proc = cli(["collect", "--nodes", NODES8, "--ssh-config", str(cluster.ssh_config), "-o", str(out),
                "--command-timeout", "4", "--connect-timeout", "5"], data_dir)
    assert proc.returncode == 0, proc.stderr
    return out, proc


def test_eight_nodes_collected_in_parallel_with_a_status_each(eight):
    out, proc = eight
    assert "Traceback" not in proc.stderr
    for n in range(1, 9):
        assert f"node{n:02d}" in proc.stderr  # a progress line per node
    with read_bundle(out) as bundle:
        status = {n.node: n.status for n in bundle.nodes.values()}
        detail = {n.node: n.detail for n in bundle.nodes.values()}
        assert status == {"node01": "ok", "node02": "ok", "node03": "ok", "node04": "ok", "node05": "partial",
                          "node06": "auth-failed", "node07": "ok", "node08": "ok"}, detail
        assert "ibstat" in detail["node05"] and "timed out" in detail["node05"]
        assert "host key" in detail["node06"] and "ssh-keygen -R" in detail["node06"]
        # the hung collector cost one command, not the node: its other collectors came back
        assert "kernel-log" in bundle.nodes["node05"].outputs and bundle.nodes["node05"].meta["ibstat"]["timed_out"]
        # every collector but the opt-in ones (py-spy runs only when named)
        assert set(bundle.nodes["node01"].outputs) == {n for n, c in collectors().items() if not c.opt_in}


def test_the_bad_nodes_are_named(eight, engine):
    out, _ = eight
    with read_bundle(out) as bundle:
        d = engine.diagnose_bundle(bundle)
    xids = {(f.node, f.attrs.get("code")) for f in d.findings if f.kind == "xid"}
    assert ("node02", 79) in xids and all(node == "node02" for node, _ in xids)
    assert d.causes[0].category == "gpu-hardware", "\n".join(f"{c.id} {c.confidence} {c.explain}" for c in (d.causes + d.candidates)[:5])
    assert any(e.node == "node02" for e in d.causes[0].evidence)
    down = {(f.node, f.attrs.get("state")) for f in d.findings if f.kind == "ib-port" and f.attrs.get("state") != "Active"}
    assert any(node == "node03" and state == "Down" for node, state in down)
    odd = {(f.node, f.attrs["what"]) for f in d.findings if f.kind == "node-mismatch"}
    assert ("node03", "ib-port") in odd and ("node04", "shm-used-pct") in odd
    shm = [f for f in d.findings if f.kind == "shm-usage" and f.node == "node04"]
    assert shm and shm[0].attrs["used_pct"] >= 98
    statuses = {n["node"]: n["status"] for n in d.nodes}
    assert statuses["node06"] == "auth-failed"


def test_bundle_replays_to_the_same_diagnosis(eight, data_dir):
    out, _ = eight
    first = json.loads(cli(["diagnose", "--bundle", str(out), "--format", "json"], data_dir).stdout)
    second = json.loads(cli(["diagnose", "--bundle", str(out), "--format", "json"], data_dir).stdout)
    assert [c["id"] for c in first["causes"]] == [c["id"] for c in second["causes"]]
    assert first["findings"] == second["findings"] and first["nodes"] == second["nodes"]


def test_proxyjump_goes_through_the_bastion(cluster):
    before = len(cluster.forwarded())
    settings = SSHSettings(str(cluster.ssh_config), connect_timeout=5)
    res = collect_nodes(["node07"], [collectors()["df"]], settings=settings)
    assert res["node07"].status == "ok" and res["node07"].results[0].exit == 0
    node07 = cluster.node("node07")
    assert (node07.host, node07.port) in cluster.forwarded()[before:]


def test_unreachable_and_silent_nodes(cluster):
    settings = SSHSettings(str(cluster.ssh_config), connect_timeout=2)
    res = collect_nodes(["node09", "node10", "node01"], [collectors()["df"]], settings=settings)
    assert res["node09"].status == "unreachable"
    assert res["node10"].status == "timeout"
    assert res["node01"].status == "ok"


def test_dead_nodes_in_a_diagnosis_are_reported_not_checked(cluster, data_dir):
    proc = cli(["diagnose", "--nodes", "node[08-09]", "--ssh-config", str(cluster.ssh_config), "--format", "json",
                "--connect-timeout", "2", "--only", "kernel-log,df"], data_dir)
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    assert {n["node"]: n["status"] for n in doc["nodes"]} == {"node08": "ok", "node09": "unreachable"}


def test_node_names_never_reach_a_shell(cluster, data_dir):
    proc = cli(["collect", "--nodes", "node01;touch /tmp/pwned", "-o", "/tmp/never.tar.gz",
                "--ssh-config", str(cluster.ssh_config)], data_dir)
    assert proc.returncode == 1 and "not a valid node name" in proc.stderr
    assert not Path("/tmp/pwned").exists()


# --- Slurm -------------------------------------------------------------------------------------

def _config_with_alias(cluster, alias: str, tmp_path: Path, target: str = "node01") -> Path:
    node = cluster.node(target)
    cfg = tmp_path / "ssh_config"
    cfg.write_text(f"Host {alias}\n    HostName {node.host}\n    Port {node.port}\n"
                   + cluster.ssh_config.read_text().split(f"Host {target}\n", 1)[1].split("Host ", 1)[0]
                   .replace(f"    HostName {node.host}\n", "").replace(f"    Port {node.port}\n", "")
                   + "\n" + cluster.ssh_config.read_text())
    return cfg


def test_job_id_resolves_to_its_node_and_log(slurm_job, cluster, tmp_path, data_dir):
    cfg = _config_with_alias(cluster, slurm_job.node, tmp_path)
    scratch = tmp_path / "tmp"
    scratch.mkdir()
    proc = cli(["diagnose", "--job", slurm_job.job_id, "--ssh-config", str(cfg), "--format", "json",
                "--command-timeout", "5"], data_dir, env_extra={"TMPDIR": str(scratch)})
    assert proc.returncode == 0, proc.stderr
    assert not list(scratch.glob("gpu-triage-joblog-*")), "the copies of the job's log outlive the diagnosis"
    doc = json.loads(proc.stdout)
    assert doc["job"] == slurm_job.job_id
    assert [n["node"] for n in doc["nodes"]] == [slurm_job.node]
    assert doc["nodes"][0]["status"] in ("ok", "partial")
    # the job's stderr (read from Slurm's StdErr path) carries the CUDA OOM
    assert any(f["kind"] == "cuda-oom" or "out of memory" in f["line"].lower() for f in doc["findings"])
    assert doc["causes"] and doc["causes"][0]["category"] == "gpu-memory"


def test_unknown_job_is_a_clear_error(slurm, data_dir):
    proc = cli(["diagnose", "--job", "987654321"], data_dir)
    assert proc.returncode == 1 and "does not know job 987654321" in proc.stderr and "Traceback" not in proc.stderr


def test_large_job_collects_through_srun(slurm_running_job, tmp_path, data_dir):
    out = tmp_path / "srun.tar.gz"
    proc = cli(["collect", "--job", slurm_running_job.job_id, "--srun-above", "0", "--only", "df,free,ulimit-l",
                "-o", str(out)], data_dir)
    assert proc.returncode == 0, proc.stderr
    with read_bundle(out) as bundle:
        node = bundle.nodes[slurm_running_job.node]
        assert set(node.outputs) == {"df", "free", "ulimit-l"}
        assert "Mem:" in node.outputs["free"] and node.meta["df"]["exit"] == 0


def test_a_flooding_node_is_kept_to_its_last_part(cluster, monkeypatch):
    """A node that prints far more than a collector should (a kernel log flooded by a looping driver)
    is read to the end but only its last MAX_OUTPUT bytes are kept, and the result says so."""
    from collectors import remote
    from collectors.remote import Connection

    monkeypatch.setattr(remote, "MAX_OUTPUT", 100_000)
    flood = "i=0; while [ $i -lt 60000 ]; do echo \"line $i of a flooding kernel log\"; i=$((i+1)); done"
    conn = Connection(SSHSettings(str(cluster.ssh_config), connect_timeout=5), "node01").open()
    try:
        res = conn.run("kernel-log", flood, timeout=60)
    finally:
        conn.close()
    assert res.exit == 0 and len(res.stdout) <= 100_000
    assert res.stdout.rstrip().endswith("line 59999 of a flooding kernel log")
    assert "bytes were dropped" in res.stderr
    # the same bound on this machine (collect --local)
    code, out, err, dropped, timed_out = remote._run_bounded(flood, 60)
    assert code == 0 and len(out) <= 100_000 and dropped > 0 and out.rstrip().endswith(b"line 59999 of a flooding kernel log")
