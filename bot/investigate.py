"""From a job ID or a node expression to a saved bundle: resolve, collect, fetch the job's log.

The CLI and (later) the Slack bot call :func:`investigate`; the diagnosis is then always made from
the bundle it wrote, so every answer can be replayed offline.
"""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Sequence

from collectors.bundle import write_bundle
from collectors.fanout import SRUN_CUTOVER, collect_via_srun
from collectors.registry import Collector, collectors
from collectors.remote import Connection, NodeResult, SSHError, SSHSettings, collect_local, collect_nodes, login_runner
from collectors.resolve import JobInfo, ResolveError, SlurmResolver, expand_hostlist, load_inventory, local_runner


@dataclass
class Plan:
    job: str | None
    nodes: list[str]
    job_info: JobInfo | None = None
    logs: dict[str, Path] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    ssh: dict = field(default_factory=dict)  # inventory SSH settings: user, port, identity_file


def select_collectors(only: str | None = None, timeout: float | None = None) -> list[Collector]:
    """The collectors to run (all, or the comma-separated ``only``), with an optional time limit each."""
    from dataclasses import replace

    registry = collectors()
    wanted = [w.strip() for w in only.split(",") if w.strip()] if only else list(registry)
    unknown = [w for w in wanted if w not in registry]
    if unknown:
        raise ResolveError(f"unknown collector(s) {', '.join(unknown)}; known: {', '.join(registry)}")
    if timeout is not None and timeout <= 0:
        raise ResolveError("--command-timeout must be a positive number of seconds")
    return [replace(registry[w], timeout=timeout) if timeout else registry[w] for w in wanted]


def plan(*, job: str | None = None, nodes: str | None = None, inventory: str | None = None,
         settings: SSHSettings, login: str | None = None) -> Plan:
    """Resolve what to collect from: an inventory entry, a Slurm job, or a node expression."""
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
        p.logs, p.notes = fetch_job_logs(info, settings, login)
        return p
    if nodes:
        return Plan(job=None, nodes=expand_hostlist(nodes))
    raise ResolveError("say what to collect from: --job ID, --nodes 'gpu[01-08]', or --local")


def fetch_job_logs(info: JobInfo, settings: SSHSettings, login: str | None) -> tuple[dict[str, Path], list[str]]:
    """Copy the job's StdOut/StdErr from the login node (or this machine) into a temp folder."""
    logs: dict[str, Path] = {}
    notes: list[str] = []
    paths = [p for p in dict.fromkeys([info.stdout, info.stderr]) if p]
    if not paths:
        return logs, [f"Slurm did not report log paths for job {info.job_id}; pass the log as an argument"]
    tmp = Path(tempfile.mkdtemp(prefix="gpu-triage-joblog-"))
    for remote in paths:
        local = tmp / f"slurm-{info.job_id}-{Path(remote).name}"
        try:
            if login:
                conn = Connection(settings, login).open()
                try:
                    sftp = conn.client.open_sftp()
                    sftp.get(remote, str(local))
                finally:
                    conn.close()
            else:
                shutil.copyfile(remote, local)
            logs[local.name] = local
        except (OSError, SSHError) as exc:
            notes.append(f"could not read the job log {remote}: {exc}")
    return logs, notes


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


def save(p: Plan, results: dict[str, NodeResult], dest: str | os.PathLike) -> Path:
    return write_bundle(dest, results, job=p.job, logs=p.logs,
                        job_info=p.job_info.to_json() if p.job_info else None)
