"""Sanity tests of the test infrastructure itself: the fake sshd cluster and the one-node Slurm.

If these fail, every integration test built on them is meaningless, so they check the harness
against the real clients: the OpenSSH ``ssh`` binary and paramiko.
"""

from __future__ import annotations

import socket
import subprocess
import time

import paramiko
import pytest

from cluster import (FAIL, FIXTURES, HANG, MISSING, Cluster, NodeSpec, Output, _descendants, scenario,
                     socket_owner)


def fixture_text(rel: str) -> str:
    return (FIXTURES / rel).read_text()


def connect(c: Cluster, name: str, **kwargs) -> paramiko.SSHClient:
    node = c.node(name)
    client = paramiko.SSHClient()
    client.load_host_keys(str(c.known_hosts))
    client.set_missing_host_key_policy(paramiko.RejectPolicy())
    client.connect(node.host, port=node.port, username=c.user, key_filename=str(c.client_key),
                   look_for_keys=False, allow_agent=False, timeout=5, **kwargs)
    return client


def alive(pid: int) -> bool:
    """Running (a zombie waiting for init to reap it counts as gone)."""
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


def run(client: paramiko.SSHClient, command: str) -> tuple[int, str, str]:
    _, out, err = client.exec_command(command, timeout=10)
    return out.channel.recv_exit_status(), out.read().decode(), err.read().decode()


# --- OpenSSH client ----------------------------------------------------------------------------------


def test_openssh_client_runs_the_stand_in(cluster):
    res = cluster.ssh("node01", "nvidia-smi")
    assert res.returncode == 0, res.stderr
    assert res.stdout == fixture_text("nvidia-smi/01.txt")


@pytest.mark.parametrize("command, fixture", [
    ("nvidia-smi", "nvidia-smi/01.txt"),
    ("nvidia-smi topo -m", "nvidia-smi-topo/03.txt"),
    ("nvidia-smi -q", "nvidia-smi-q/01.txt"),
    ("nvidia-smi -q -d ROW_REMAPPER", "nvidia-smi-q/01.txt"),
    ("nvidia-smi --query-gpu=index,pci.bus_id --format=csv,noheader", "nvidia-smi-query/01.txt"),
    ("dmesg -T", "kernel-log/09-banner-only.constructed.txt"),
    ("df -h /dev/shm /", "df/06.txt"),
    ("ibstat", "ibstat/07.txt"),
])
def test_stand_ins_dispatch_on_arguments(cluster, command, fixture):
    res = cluster.ssh("node01", command)
    assert (res.returncode, res.stdout) == (0, fixture_text(fixture)), res.stderr


def test_each_node_has_exactly_its_own_path(cluster):
    for name in ("node01", "node02"):
        res = cluster.ssh(name, 'echo "$PATH"; command -v nvidia-smi; echo "$GPU_TRIAGE_FAKE_NODE"')
        path, nvsmi, fake = res.stdout.splitlines()
        node = cluster.node(name)
        assert path == f"{node.bin}:{cluster.base_bin}"   # no ~/.bashrc additions
        assert nvsmi == f"{node.bin}/nvidia-smi"
        assert fake == name


def test_scenarios_print_their_evidence(cluster):
    assert "Xid" not in cluster.ssh("node01", "dmesg").stdout
    assert "Xid (PCI:0000:06:00): 79, GPU has fallen off the bus." in cluster.ssh("node02", "dmesg -T").stdout
    assert "State: Down" in cluster.ssh("node03", "ibstat").stdout
    assert "State: Down" not in cluster.ssh("node01", "ibstat").stdout
    shm = [line for line in cluster.ssh("node04", "df -h").stdout.splitlines() if line.endswith("/dev/shm")]
    assert shm == ["tmpfs           7.9G  7.7G  164M  98% /dev/shm"]


def test_calls_are_recorded(cluster):
    cluster.ssh("node08", "nvidia-smi topo -m >/dev/null; free -m >/dev/null")
    assert cluster.calls("node08")[-2:] == ["nvidia-smi topo -m", "free -m"]


def test_a_tool_the_scenario_leaves_out_is_not_found(cluster):
    res = cluster.ssh("node01", "ibstatus")
    assert res.returncode == 127 and "command not found" in res.stderr
    # the same through `timeout ... sh -c`, as gpu-triage's runner wraps commands
    res = cluster.ssh("node01", "timeout -k 3 5 sh -c ibstatus")
    assert res.returncode == 127
    # real system tools are there
    assert cluster.ssh("node01", "python3 -c 'print(6*7)'").stdout == "42\n"
    # REAL: this machine's own ps (no captured ps output exists)
    res = cluster.ssh("node01", "command -v ps; ps -o pid= -p $$")
    assert res.returncode == 0 and res.stdout.splitlines()[0] == f"{cluster.node('node01').bin}/ps"


def test_fail_missing_and_custom_outputs(make_cluster):
    denied = "dmesg: read kernel buffer failed: Operation not permitted\n"
    c = make_cluster([NodeSpec("n1", scenario(ibstat=FAIL, df=MISSING, dmesg=Output(
        stdout="kernel-log/11.txt", stderr_text=denied, exit=1)))])
    res = c.ssh("n1", "ibstat")
    assert (res.returncode, res.stdout) == (1, "") and "failed on fake node n1" in res.stderr
    assert c.ssh("n1", "df -h").returncode == 127
    res = c.ssh("n1", "dmesg")
    assert res.returncode == 1 and "fallen off the bus" in res.stdout and "Operation not permitted" in res.stderr


def test_scenario_with_unknown_fixture_is_rejected():
    with pytest.raises(ValueError, match="does not exist"):
        Cluster([NodeSpec("n1", {"df": "df/nope.txt"})])
    with pytest.raises(ValueError, match="unknown scenario key"):
        Cluster([NodeSpec("n1", {"nvidia_smi": "nvidia-smi/01.txt"})])


def test_unknown_nvidia_smi_mode_says_so(make_cluster):
    c = make_cluster([NodeSpec("n1", {"nvidia-smi": "nvidia-smi/01.txt"})])
    res = c.ssh("n1", "nvidia-smi topo -m")
    assert res.returncode == 1 and "scenario key 'nvidia-smi-topo' not set" in res.stderr


# --- hangs, dead nodes, host keys ---------------------------------------------------------------------


def test_hanging_command_never_returns_and_is_cleaned_up(make_cluster):
    c = make_cluster([NodeSpec("n1", scenario(ibstat=HANG))])
    client = connect(c, "n1")
    try:
        chan = client.get_transport().open_session()
        chan.exec_command("ibstat")
        time.sleep(1.5)
        assert not chan.exit_status_ready()
        pids = c.hanging_pids("n1")
        assert len(pids) == 1
        # gpu-triage's runner wraps commands in `timeout`, which must be able to end it
        assert run(client, "timeout -k 1 1 sh -c ibstat")[0] == 124
    finally:
        client.close()
    c.stop()
    assert not alive(pids[0])


def test_unreachable_node_refuses_at_once(cluster):
    node = cluster.node("node09")
    started = time.monotonic()
    with pytest.raises(ConnectionRefusedError):
        socket.create_connection((node.host, node.port), timeout=5)
    assert time.monotonic() - started < 1
    res = cluster.ssh("node09", "true")
    assert res.returncode == 255 and "Connection refused" in res.stderr


def test_silent_node_times_out_in_the_banner(cluster):
    node = cluster.node("node10")
    client = paramiko.SSHClient()
    started = time.monotonic()
    with pytest.raises(paramiko.SSHException, match="banner"):
        client.connect(node.host, port=node.port, username=cluster.user, key_filename=str(cluster.client_key),
                       look_for_keys=False, allow_agent=False, timeout=2, banner_timeout=1)
    assert time.monotonic() - started < 5
    client.close()


def test_paramiko_verifies_the_host_key_and_runs_a_command(cluster):
    client = connect(cluster, "node01")
    try:
        code, out, _ = run(client, "nvidia-smi --query-gpu=index --format=csv")
        assert (code, out) == (0, fixture_text("nvidia-smi-query/01.txt"))
        key = client.get_transport().get_remote_server_key()
        assert f"{key.get_name()} {key.get_base64()}" == cluster.node("node01").known_key
    finally:
        client.close()


def test_wrong_host_key_is_refused_by_both_clients(cluster):
    with pytest.raises(paramiko.BadHostKeyException):
        connect(cluster, "node06")
    res = cluster.ssh("node06", "true")
    assert res.returncode == 255 and "REMOTE HOST IDENTIFICATION HAS CHANGED" in res.stderr
    # the node itself is fine: with its real key it answers
    node = cluster.node("node06")
    real = (node.dir / "ssh_host_ed25519_key.pub").read_text().split()[:2]
    assert real != node.known_key.split()


def test_unknown_host_is_refused(make_cluster):
    c = make_cluster([NodeSpec("n1")])
    c.known_hosts.write_text("")
    with pytest.raises(paramiko.SSHException, match="not found in known_hosts"):
        connect(c, "n1")


# --- ProxyJump ------------------------------------------------------------------------------------------


def _source_port_owner(c: Cluster, argv: list[str]) -> tuple[int | None, int, list[int]]:
    """Start ``ssh ... 'echo $SSH_CLIENT; sleep 2'``; while it runs: who owns its TCP source port,
    our ssh client's pid, and the processes under the bastion's sshd."""
    proc = subprocess.Popen(["ssh", "-F", str(c.ssh_config), *argv, 'echo "$SSH_CLIENT"; sleep 2'],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, stdin=subprocess.DEVNULL)
    try:
        line = proc.stdout.readline()
        assert line, proc.stderr.read()
        src_port = int(line.split()[1])
        return socket_owner(src_port), proc.pid, _descendants(c.sshd_pid("bastion"))
    finally:
        proc.wait(timeout=10)


def test_proxyjump_really_goes_through_the_bastion_openssh(cluster):
    """The TCP connection that reaches node07's sshd belongs to a bastion sshd process.

    On loopback node07 is reachable directly too, so "it worked" proves nothing. Instead, while
    the session is open, the node reports its peer (SSH_CLIENT: source address and port), and
    /proc/net/tcp + /proc/<pid>/fd say which process owns that source socket: through ProxyJump
    it is a child of the bastion's sshd; directly, it is our own ssh client.
    """
    target = cluster.node("node07")
    before = cluster.forwarded().count((target.host, target.port))
    owner, _, under_bastion = _source_port_owner(cluster, ["node07"])
    assert owner is not None and owner in under_bastion
    assert cluster.forwarded().count((target.host, target.port)) == before + 1

    # control: the same node with ProxyJump switched off is reached by our client itself
    owner, ssh_pid, under_bastion = _source_port_owner(cluster, ["-o", "ProxyJump=none", "node07"])
    assert owner == ssh_pid and owner not in under_bastion
    assert cluster.forwarded().count((target.host, target.port)) == before + 1


def test_proxyjump_with_paramiko(cluster):
    bastion, target = cluster.node("bastion"), cluster.node("node07")
    jump = connect(cluster, "bastion")
    try:
        chan = jump.get_transport().open_channel("direct-tcpip", (target.host, target.port), ("127.0.0.1", 0))
        client = paramiko.SSHClient()
        client.load_host_keys(str(cluster.known_hosts))
        client.set_missing_host_key_policy(paramiko.RejectPolicy())
        client.connect(target.host, port=target.port, username=cluster.user, key_filename=str(cluster.client_key),
                       look_for_keys=False, allow_agent=False, sock=chan, timeout=5)
        try:
            code, out, _ = run(client, 'echo "$SSH_CLIENT"')
            assert code == 0
            owner = socket_owner(int(out.split()[1]))
            assert owner is not None and owner in _descendants(bastion.proc.pid)
        finally:
            client.close()
    finally:
        jump.close()


# --- start-up and teardown ------------------------------------------------------------------------------


def test_eight_nodes_start_in_seconds_and_stop_cleanly():
    c = Cluster([NodeSpec(f"n{i}") for i in range(1, 9)]).start()
    try:
        assert c.started_seconds < 10, c.started_seconds
        addresses = [(n.host, n.port) for n in c.nodes.values()]
        assert len({h for h, _ in addresses}) == 8
        pids = [n.proc.pid for n in c.nodes.values()]
        root = c.root
    finally:
        c.stop()
    assert not root.exists()
    assert not any(alive(pid) for pid in pids)
    for host, port in addresses:
        with pytest.raises(OSError):
            socket.create_connection((host, port), timeout=1).close()


def test_sshd_that_cannot_start_is_reported_with_its_stderr(make_cluster, monkeypatch):
    c = Cluster([NodeSpec("n1")], start_timeout=3)
    monkeypatch.setattr(c, "_sshd_config", lambda node: f"ListenAddress {node.host}:{node.port}\nNoSuchOption yes\n")
    from cluster import ClusterError
    with pytest.raises(ClusterError, match="NoSuchOption"):
        c.start()


# --- Slurm ------------------------------------------------------------------------------------------------


def test_slurm_failed_job(slurm, slurm_job):
    assert slurm_job.state == "FAILED" and slurm_job.exit_code == "1:0"
    assert slurm_job.node == slurm.node
    shown = subprocess.run(["scontrol", "show", "job", slurm_job.job_id], capture_output=True, text=True,
                           check=False).stdout
    assert f"JobId={slurm_job.job_id} " in shown and "JobState=FAILED" in shown
    assert f"StdErr={slurm_job.stderr}" in shown
    assert slurm_job.stdout.read_text() == "step 1\n"
    assert "RuntimeError: CUDA error: out of memory" in slurm_job.stderr.read_text()


def test_slurm_running_job(slurm, slurm_running_job):
    job = slurm_running_job
    assert job.state == "RUNNING" and job.node == slurm.node
    assert f"NodeList={slurm.node}" in job.scontrol and f"BatchHost={slurm.node}" in job.scontrol
    def output() -> str:  # slurmstepd creates the file a moment after the job turns RUNNING
        return job.stdout.read_text() if job.stdout.exists() else ""

    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and "training started" not in output():
        time.sleep(0.1)
    assert output() == "rank 0: training started\n"
