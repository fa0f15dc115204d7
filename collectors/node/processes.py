"""`ps -eo pid,ppid,rss,etimes,args --no-headers`: training processes and their DataLoader workers.

The process tree is rebuilt from pid/ppid.  A *trainer* is a Python process started by a
launcher (torchrun / torch.distributed.run / launch, deepspeed, accelerate, mpirun, srun/
slurmstepd), or one that has worker-like Python children.  A *DataLoader worker* is a Python
child of a trainer that is a fork of it (same command line), a ``multiprocessing`` spawn or
forkserver child, or named ``pt_data_worker`` (recent PyTorch names its worker threads so).
Helpers that are not workers -- the multiprocessing resource tracker, the forkserver itself,
torch.compile's compile workers -- are left out.

One dataloader-workers finding per node (count, trainers, per_rank = most workers under one
trainer); zero trainers is a fact too (nothing is training here), unless ps printed nothing.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass

from collectors.findings import Finding
from collectors.node import _text
from collectors.registry import Collector

NAME = "processes"

_ROW = re.compile(r"^\s*(?P<pid>\d+)\s+(?P<ppid>\d+)\s+(?P<rss>\d+)\s+(?P<etimes>\d+)\s+(?P<args>\S.*)$")
_PYTHON = re.compile(r"^(?:python(?:\d+(?:\.\d+)*)?|pt_data_worker|pt_main_thread)$")
_LAUNCHER = re.compile(r"(?:^|[\s/])(?:torchrun|deepspeed|accelerate)(?:\s|$)|torch\.distributed\.(?:run|launch)"
                       r"|deepspeed\.launcher|accelerate\.commands\.launch|torch\.distributed\.elastic")
_MPI_PARENTS = re.compile(r"^(?:\S*/)?(?:slurmstepd|srun|mpirun|mpiexec|orted|prted|hydra_pmi_proxy)\b")
_SPAWNED = re.compile(r"multiprocessing\.spawn import spawn_main|--multiprocessing-fork|multiprocessing\.forkserver")
_HELPER = re.compile(r"multiprocessing\.resource_tracker|multiprocessing\.semaphore_tracker|"
                     r"forkserver import main|compile_worker|torch\._inductor")


@dataclass
class _Proc:
    pid: int
    ppid: int
    args: str
    line: str
    line_no: int

    @property
    def is_python(self) -> bool:
        first = self.args.split(None, 1)[0] if self.args else ""
        return bool(_PYTHON.match(os.path.basename(first)))

    @property
    def is_launcher(self) -> bool:
        return bool(_LAUNCHER.search(self.args))


def _is_worker_of(child: _Proc, parent: _Proc) -> bool:
    if not child.is_python or child.is_launcher or _HELPER.search(child.args):
        return False
    return (child.args == parent.args or "pt_data_worker" in child.args or bool(_SPAWNED.search(child.args)))


def parse(text: str) -> tuple[list[Finding], list[str]]:
    unparsed: list[str] = []
    procs: dict[int, _Proc] = {}
    for no, raw in _text.lines(text, ("ps",)):
        line = raw.strip()
        row = _ROW.match(line)
        if not row:
            if line and not line.startswith("PID "):
                unparsed.append(raw)
            continue
        proc = _Proc(int(row.group("pid")), int(row.group("ppid")), row.group("args").strip(), line, no)
        procs[proc.pid] = proc
    if not procs:
        if not unparsed:
            unparsed.append(_text.note("ps printed no processes: DataLoader workers not checked"))
        return [], unparsed

    children: dict[int, list[_Proc]] = {}
    for proc in procs.values():
        children.setdefault(proc.ppid, []).append(proc)

    trainers: list[_Proc] = []
    for proc in procs.values():
        if not proc.is_python or proc.is_launcher or _HELPER.search(proc.args) or _SPAWNED.search(proc.args):
            continue
        parent = procs.get(proc.ppid)
        if parent is not None and parent.is_python and not parent.is_launcher:
            if _is_worker_of(proc, parent) or parent in trainers:
                continue  # a fork of another Python process, not a rank
        by_launcher = parent is not None and (parent.is_launcher or bool(_MPI_PARENTS.match(parent.args)))
        has_workers = any(_is_worker_of(c, proc) for c in children.get(proc.pid, []))
        if by_launcher or has_workers:
            trainers.append(proc)

    trainer_pids = {t.pid for t in trainers}
    workers_per: dict[int, int] = {}
    for trainer in trainers:
        workers_per[trainer.pid] = sum(1 for c in children.get(trainer.pid, [])
                                       if c.pid not in trainer_pids and _is_worker_of(c, trainer))
    count = sum(workers_per.values())
    evidence = trainers[0] if trainers else None
    attrs = {"count": count, "trainers": len(trainers), "per_rank": max(workers_per.values(), default=0)}
    finding = Finding(kind="dataloader-workers", attrs=attrs, line=evidence.line if evidence else "",
                      line_no=evidence.line_no if evidence else None, source=NAME)
    return [finding], unparsed


COLLECTOR = Collector(
    name=NAME,
    command="ps -eo pid,ppid,rss,etimes,args --no-headers",
    parse=parse,
    binaries=("ps",),
    timeout=20.0,
    root=False,
    description="process table: training processes (ranks) on the node and their DataLoader worker "
    "processes, the count behind /dev/shm pressure",
    tags=("shared-memory",),
)
