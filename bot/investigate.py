"""From a job ID or a node expression to a saved bundle: resolve, collect, fetch the job's log.

The CLI and (later) the Slack bot call :func:`investigate`; the diagnosis is then always made from
the bundle it wrote, so every answer can be replayed offline.
"""

from __future__ import annotations

import os
import shutil
import stat
import sys
import tempfile
import time
import weakref
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Sequence

from collectors.bundle import write_bundle
from collectors.fanout import SRUN_CUTOVER, collect_via_srun
from collectors.registry import Collector, collectors
from collectors.remote import Connection, NodeResult, SSHError, SSHSettings, collect_local, collect_nodes, login_runner
from collectors.resolve import (JobInfo, ResolveError, SlurmResolver, check_node, expand_hostlist, load_inventory,
                               local_runner)


@dataclass
class Plan:
    job: str | None
    nodes: list[str]
    job_info: JobInfo | None = None
    logs: dict[str, Path] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    ssh: dict = field(default_factory=dict)  # inventory SSH settings: user, port, identity_file
    tmpdir: Path | None = None  # where the job's logs were copied; removed by cleanup()

    def cleanup(self) -> None:
        """Remove the copies of the job's logs (the bundle keeps what it needs)."""
        if self.tmpdir is not None:
            shutil.rmtree(self.tmpdir, ignore_errors=True)
            self.tmpdir = None


def select_collectors(only: str | None = None, timeout: float | None = None) -> list[Collector]:
    """The collectors to run (all, or the comma-separated ``only``), with an optional time limit each."""
    from dataclasses import replace

    registry = collectors()
    wanted = ([w.strip() for w in only.split(",") if w.strip()] if only
              else [name for name, c in registry.items() if not c.opt_in])
    unknown = [w for w in wanted if w not in registry]
    if unknown:
        raise ResolveError(f"unknown collector(s) {', '.join(unknown)}; known: {', '.join(registry)}")
    if timeout is not None and timeout <= 0:
        raise ResolveError("--command-timeout must be a positive number of seconds")
    return [replace(registry[w], timeout=timeout) if timeout else registry[w] for w in wanted]


def plan(*, job: str | None = None, nodes: str | None = None, inventory: str | None = None,
         settings: SSHSettings, login: str | None = None, fetch_logs: bool = True) -> Plan:
    """Resolve what to collect from: an inventory entry, a Slurm job, or a node expression."""
    if login:
        # the login node is a host name like any node's: never options or shell words (an SSH
        # config's `Match exec` or ProxyCommand would hand it to a shell)
        check_node(login)
    if inventory and job:
        targets = load_inventory(inventory)
        if job in targets:
            t = targets[job]
            logs = {Path(t.log).name: Path(t.log)} if t.log and Path(t.log).is_file() else {}
            return Plan(job=job, nodes=t.nodes, logs=logs, ssh=t.ssh)
    if job:
        runner = login_runner(settings, login) if login else local_runner
        info = SlurmResolver(runner, where=login or "this machine").resolve(job)
        if not info.nodes:
            raise ResolveError(f"job {info.job_id} has no nodes yet (state {info.state}); it may still be pending")
        p = Plan(job=info.job_id, nodes=info.nodes, job_info=info)
        if fetch_logs:
            p.logs, p.notes, p.tmpdir = fetch_job_logs(info, settings, login)
            if p.tmpdir is not None:  # a safety net: the copies go when the plan does, at the latest
                weakref.finalize(p, shutil.rmtree, str(p.tmpdir), True)
        return p
    if nodes:
        return Plan(job=None, nodes=expand_hostlist(nodes))
    raise ResolveError("say what to collect from: --job ID, --nodes 'gpu[01-08]', or --local")


JOB_LOG_CAP = 256 * 1024 * 1024  # bytes of a job log copied (its end: the failure is there)


def fetch_job_logs(info: JobInfo, settings: SSHSettings,
                   login: str | None) -> tuple[dict[str, Path], list[str], Path | None]:
    """Copy the job's StdOut/StdErr (from the login node or this machine) into a temp folder.

    The job's owner chooses those paths (``sbatch -o``), and the bot reads them with its own
    privileges, so only a regular file owned by the job's user is read (checked on the opened file,
    so a symlink swapped in cannot point it elsewhere), and only its last ``JOB_LOG_CAP`` bytes.
    """
    logs: dict[str, Path] = {}
    notes: list[str] = []
    paths = [p for p in dict.fromkeys([info.stdout, info.stderr]) if p]
    if not paths:
        return logs, [f"Slurm did not report log paths for job {info.job_id}; pass the log as an argument"], None
    if info.uid is None:
        return logs, [f"Slurm did not say which user owns job {info.job_id}, so its log is not read with the "
                      "bot's privileges; pass the log as an argument"], None
    tmp = Path(tempfile.mkdtemp(prefix="gpu-triage-joblog-"))
    for remote in paths:
        local = tmp / f"slurm-{info.job_id}-{Path(remote).name}"
        try:
            if login:
                conn = Connection(settings, login).open()
                try:
                    sftp = conn.client.open_sftp()
                    with sftp.open(remote, "rb") as fh:
                        st = fh.stat()
                        refusal = _refuse(remote, st.st_mode, st.st_uid, info.uid)
                        if refusal:
                            notes.append(refusal)
                            continue
                        if st.st_size and st.st_size > JOB_LOG_CAP:
                            fh.seek(st.st_size - JOB_LOG_CAP)
                            notes.append(f"{remote}: only its last {JOB_LOG_CAP >> 20} MB were read")
                        _copy(fh, local)
                finally:
                    conn.close()
            else:
                fd = os.open(remote, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0))
                with os.fdopen(fd, "rb") as fh:
                    st = os.fstat(fh.fileno())
                    refusal = _refuse(remote, st.st_mode, st.st_uid, info.uid)
                    if refusal:
                        notes.append(refusal)
                        continue
                    if st.st_size > JOB_LOG_CAP:
                        fh.seek(st.st_size - JOB_LOG_CAP)
                        notes.append(f"{remote}: only its last {JOB_LOG_CAP >> 20} MB were read")
                    _copy(fh, local)
            logs[local.name] = local
        except (OSError, SSHError) as exc:
            notes.append(f"could not read the job log {remote}: {getattr(exc, 'strerror', None) or exc}")
    return logs, notes, tmp


def _refuse(path: str, mode: int | None, uid: int | None, owner: int) -> str | None:
    if mode is None or not stat.S_ISREG(mode):
        return f"not reading the job log {path}: it is not a regular file"
    if uid != owner:
        return (f"not reading the job log {path}: it belongs to uid {uid}, not to the job's user (uid {owner}); "
                "pass the log as an argument if it is really the job's")
    return None


def _copy(src, dest: Path) -> None:
    with open(dest, "wb") as out:
        remaining = JOB_LOG_CAP
        while remaining > 0:
            chunk = src.read(min(1 << 20, remaining))
            if not chunk:
                break
            out.write(chunk)
            remaining -= len(chunk)


def run_collection(p: Plan, cols: Sequence[Collector], *, settings: SSHSettings, concurrency: int = 32,
                   srun_above: int = SRUN_CUTOVER, login: str | None = None,
                   progress: Callable[[str, str, str], None] | None = None) -> dict[str, NodeResult]:
    if p.ssh:
        unknown = set(p.ssh) - {"user", "port", "identity_file"}
        if unknown:
            raise ResolveError(f"inventory ssh settings {sorted(unknown)} are not supported; use user, port, "
                               "identity_file (everything else goes in the SSH config)")
        settings = SSHSettings(settings.path, connect_timeout=settings.connect_timeout, user=p.ssh.get("user"),
                               identity_file=p.ssh.get("identity_file"), port=p.ssh.get("port"))
    if p.job and p.job_info is not None and len(p.nodes) > srun_above:
        runner = login_runner(settings, login, timeout=max(c.timeout for c in cols) * len(cols) + 60) \
            if login else local_runner
        return count_collection(collect_via_srun(p.job, p.nodes, cols, runner))
    return count_collection(collect_nodes(p.nodes, cols, settings=settings, concurrency=concurrency,
                                          progress=progress))


def count_collection(results: dict[str, NodeResult]) -> dict[str, NodeResult]:
    """The metrics seam of collection: nodes by status, SSH failures by reason."""
    from bot import metrics

    for r in results.values():
        metrics.inc("gpu_triage_nodes_collected_total", status=r.status)
        if r.status in ("unreachable", "auth-failed", "timeout"):
            reason = "host-key" if "host key" in (r.detail or "").lower() else r.status
            metrics.inc("gpu_triage_ssh_failures_total", reason=reason)
    return results


def stderr_progress(stream=None) -> Callable[[str, str, str], None]:
    """One line per node as it finishes (and a start line), on stderr."""
    out = stream or sys.stderr
    started: dict[str, float] = {}

    def report(node: str, event: str, text: str) -> None:
        if event == "connecting":
            started[node] = time.monotonic()
        elif event == "done":
            secs = time.monotonic() - started.get(node, time.monotonic())
            print(f"  {node:24} {text:12} {secs:5.1f} s", file=out, flush=True)

    return report


def local_collection(cols: Sequence[Collector]) -> dict[str, NodeResult]:
    result = collect_local(cols)
    return count_collection({result.node: result})


def bundle_name(job: str | None, stamp: str) -> str:
    """``incident-<job>-<stamp>.tar.gz`` with the job reduced to a plain name: an inventory entry
    called ``../../x`` must not write outside the bundles folder."""
    import re

    slug = re.sub(r"[^A-Za-z0-9_.-]", "_", job or "nodes").lstrip(".")[:64] or "nodes"
    return f"incident-{slug}-{stamp}.tar.gz"


def save(p: Plan, results: dict[str, NodeResult], dest: str | os.PathLike) -> Path:
    try:
        return write_bundle(dest, results, job=p.job, logs=p.logs,
                            job_info=p.job_info.to_json() if p.job_info else None)
    finally:
        p.cleanup()
