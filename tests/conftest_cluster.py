"""pytest fixtures for the real servers of the integration tests (DESIGN.md, "Real parts in tests").

Loaded from tests/conftest.py with ``from conftest_cluster import *  # noqa: F401,F403``.

* ``cluster``       one fake cluster for the whole session (tests/cluster.py, ``standard_specs()``):
                    node01 healthy, node02 XID 79, node03 IB port down, node04 /dev/shm 98 %,
                    node05 ibstat hangs, node06 wrong host key in known_hosts, node07 behind
                    ``bastion`` (ProxyJump), node08 healthy, node09 unreachable, node10 silent.
                    Treat it as read-only; tests that need other scenarios use ``make_cluster``.
* ``make_cluster``  factory: ``make_cluster([NodeSpec(...), ...])`` -> a started Cluster, stopped
                    at the end of the test.
* ``slurm``         the one-node Slurm cluster of tests/slurm/setup.sh (started here if needed
                    and we are root); a :class:`SlurmInfo`.
* ``slurm_job``     a finished, FAILED batch job (stderr has a CUDA OOM line): :class:`SlurmJob`.
* ``slurm_running_job``  a RUNNING batch job (cancelled at teardown): :class:`SlurmJob`.

Where sshd or Slurm cannot be started the fixtures skip with the reason, except under CI
(``CI=true``), where they fail: CI must exercise the real servers.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

from cluster import SSHD, Cluster, NodeSpec, standard_specs

__all__ = ["cluster", "make_cluster", "slurm", "slurm_job", "slurm_running_job", "SlurmInfo", "SlurmJob"]

SLURM_DIR = Path(__file__).resolve().parent / "slurm"
# The test cluster's private prefix (tests/slurm/env.sh computes the same): its slurm.conf names
# its own munge socket and ports, so every scontrol/sbatch the tests (and gpu-triage under test)
# run talks to it, never to the machine's own Slurm, whatever SLURM_CONF the caller had.
SLURM_PREFIX = Path(os.environ.get("GPU_TRIAGE_SLURM_PREFIX")
                    or Path(os.environ.get("TMPDIR") or "/tmp") / "gpu-triage-slurm")
os.environ["SLURM_CONF"] = str(SLURM_PREFIX / "etc" / "slurm.conf")


def _need_sshd() -> None:
    if not Path(SSHD).exists() or not shutil.which("ssh-keygen"):
        _unavailable("openssh", f"{SSHD} or ssh-keygen not found: install the Debian packages openssh-server "
                     "and openssh-client")


@pytest.fixture(scope="session")
def cluster():
    _need_sshd()
    with Cluster(standard_specs()) as c:
        yield c


@pytest.fixture
def make_cluster():
    _need_sshd()
    started: list[Cluster] = []

    def make(specs: list[NodeSpec] | None = None, **kwargs) -> Cluster:
        c = Cluster(specs, **kwargs)
        started.append(c)
        return c.start()

    yield make
    for c in started:
        c.stop()


# --- Slurm ------------------------------------------------------------------------------------------


def _in_ci() -> bool:
    return os.environ.get("CI", "").lower() in ("true", "1", "yes")


def _unavailable(what: str, reason: str):
    if _in_ci():
        pytest.fail(f"{what} is required under CI but unavailable: {reason}", pytrace=False)
    pytest.skip(f"{what} unavailable: {reason}")


def _run(*argv: str, timeout: float = 30) -> subprocess.CompletedProcess:
    return subprocess.run(list(argv), capture_output=True, text=True, timeout=timeout,
                          stdin=subprocess.DEVNULL, check=False)


@dataclass(frozen=True)
class SlurmInfo:
    node: str          # the one node's name (hostname -s)
    version: str       # e.g. "22.05.8"


@dataclass(frozen=True)
class SlurmJob:
    job_id: str
    node: str          # NodeList of the job
    state: str         # JobState when the fixture handed it over (FAILED / RUNNING)
    exit_code: str     # "1:0" etc.
    stdout: Path       # StdOut= of scontrol show job
    stderr: Path       # StdErr=
    scontrol: str      # the raw `scontrol show job <id>` text at that moment


def _idle_node() -> str | None:
    try:
        # `scontrol ping` answers at once; `sinfo` retries for ~10 s when no slurmctld runs.
        if _run("scontrol", "ping", timeout=10).returncode != 0:
            return None
        out = _run("sinfo", "-h", "-o", "%n %t", timeout=10)
    except (OSError, subprocess.TimeoutExpired):
        return None
    for line in out.stdout.splitlines():
        name, _, state = line.partition(" ")
        if state.rstrip("*~#") in ("idle", "mix", "alloc"):
            return name
    return None


@pytest.fixture(scope="session")
def slurm() -> SlurmInfo:
    if not shutil.which("sinfo") or not shutil.which("sbatch"):
        _unavailable("Slurm", "sinfo/sbatch not found: install the Debian packages slurm-wlm and munge")
    node = _idle_node()
    if node is None:
        if os.geteuid() != 0:
            _unavailable("Slurm", "no idle node in sinfo, and starting Slurm needs root: run sudo tests/slurm/setup.sh")
        try:
            setup = _run("bash", str(SLURM_DIR / "setup.sh"), timeout=120)
        except subprocess.TimeoutExpired:
            _unavailable("Slurm", "tests/slurm/setup.sh did not finish within 120 s")
        if setup.returncode != 0:
            _unavailable("Slurm", f"tests/slurm/setup.sh failed:\n{setup.stderr.strip()}")
        node = _idle_node()
        if node is None:
            _unavailable("Slurm", "tests/slurm/setup.sh ran but sinfo shows no idle node")
    elif os.geteuid() == 0 and _run("sinfo", "-h", "-n", node, "-o", "%t").stdout.strip().rstrip("*~#") == "alloc":
        # fully allocated before any test of this session ran: jobs an interrupted earlier run left
        # behind hold it (the private cluster keeps its job state); setup.sh cancels them
        _run("bash", str(SLURM_DIR / "setup.sh"), timeout=120)
    version = _run("sinfo", "-V").stdout.split()[-1]
    return SlurmInfo(node=node, version=version)


def _show(job_id: str) -> dict[str, str]:
    """``scontrol show job -o`` as a dict (values never contain spaces except Command/Comment)."""
    out = _run("scontrol", "show", "job", "-o", job_id).stdout.strip()
    fields = {}
    for item in out.split(" "):
        key, sep, value = item.partition("=")
        if sep:
            fields[key] = value
    return fields


def _submit(tmp: Path, wrap: str) -> str:
    res = _run("sbatch", "--parsable", "--job-name", "gpu-triage-test", "-D", str(tmp),
               "-o", str(tmp / "slurm-%j.out"), "-e", str(tmp / "slurm-%j.err"), "--wrap", wrap)
    if res.returncode != 0:
        _unavailable("Slurm", f"sbatch failed: {res.stderr.strip()}")
    return res.stdout.strip().split(";")[0]


def _wait(job_id: str, states: tuple[str, ...], timeout: float = 90) -> dict[str, str]:
    deadline = time.monotonic() + timeout
    fields: dict[str, str] = {}
    while time.monotonic() < deadline:
        fields = _show(job_id)
        if fields.get("JobState") in states:
            return fields
        time.sleep(0.2)
    _unavailable("Slurm", f"job {job_id} did not reach {'/'.join(states)} within {timeout:.0f} s "
                 f"(last state {fields.get('JobState')}, reason {fields.get('Reason')})")
    raise AssertionError("unreachable")


def _job(job_id: str, fields: dict[str, str]) -> SlurmJob:
    return SlurmJob(job_id=job_id, node=fields.get("NodeList", ""), state=fields.get("JobState", ""),
                    exit_code=fields.get("ExitCode", ""), stdout=Path(fields.get("StdOut", "")),
                    stderr=Path(fields.get("StdErr", "")), scontrol=_run("scontrol", "show", "job", job_id).stdout)


@pytest.fixture(scope="session")
def slurm_job(slurm, tmp_path_factory) -> SlurmJob:
    """A batch job that printed a step line, a CUDA OOM on stderr, and exited 1 (JobState FAILED)."""
    tmp = tmp_path_factory.mktemp("slurm-failed")
    tmp.chmod(0o777)  # slurmd writes the output files as the submitting user
    job_id = _submit(tmp, 'echo step 1; echo "RuntimeError: CUDA error: out of memory" 1>&2; exit 1')
    fields = _wait(job_id, ("FAILED", "COMPLETED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "OUT_OF_MEMORY"))
    if fields.get("JobState") != "FAILED":
        pytest.fail(f"test job {job_id} ended {fields.get('JobState')}, expected FAILED: {fields}")
    return _job(job_id, fields)


@pytest.fixture(scope="session")
def slurm_running_job(slurm, tmp_path_factory):
    """A batch job that keeps running (for `scontrol show job` on a live job); cancelled at teardown."""
    tmp = tmp_path_factory.mktemp("slurm-running")
    tmp.chmod(0o777)
    job_id = _submit(tmp, 'echo "rank 0: training started"; sleep 3600')
    try:
        fields = _wait(job_id, ("RUNNING",))
        yield _job(job_id, fields)
    finally:
        _run("scancel", job_id)
