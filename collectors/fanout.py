"""Collect through Slurm itself for large jobs: one ``srun --overlap`` step, one task per node.

Hundreds of direct SSH connections from one machine are slow and trip sshd's MaxStartups; Slurm
already has a fan-out tree to every node of the job. Above ``SRUN_CUTOVER`` nodes (configurable)
gpu-triage runs one step inside the job's allocation from the login node::

    srun --jobid=ID --overlap --nodes=N --ntasks-per-node=1 --kill-on-bad-exit=0 sh -c SCRIPT

SCRIPT is built from the collectors' declared commands only. Each task prints its node name and
every collector's output between markers, with the exit code and duration, so the results stream
back over the one connection and are split per node here.
"""

from __future__ import annotations

import re
import shlex
from typing import Callable, Sequence

from collectors.bundle import node_results_from_outputs
from collectors.registry import Collector
from collectors.remote import NodeResult
from collectors.resolve import parse_job_id

SRUN_CUTOVER = 128
_BEGIN = "@@gpu-triage-begin"
_END = "@@gpu-triage-end"
_NODE = "@@gpu-triage-node"
_LABEL = re.compile(r"^\s*(\d+): ?")

Runner = Callable[[Sequence[str]], "tuple[int, str, str]"]


def srun_script(collectors: Sequence[Collector]) -> str:
    parts = [f'echo "{_NODE} $(hostname -s)"']
    for col in collectors:
        parts.append(
            f'echo "{_BEGIN} {col.name}"; s=$(date +%s%N); '
            f"timeout -k 3 {int(col.timeout)} sh -c {shlex.quote(col.command)} 2>/dev/null; rc=$?; "
            f'e=$(date +%s%N); echo; echo "{_END} {col.name} $rc $(( (e - s) / 1000000 ))"')
    return "; ".join(parts)


def srun_argv(job: str, nodes: int, collectors: Sequence[Collector]) -> list[str]:
    job_id = parse_job_id(job)
    return ["srun", f"--jobid={job_id}", "--overlap", f"--nodes={nodes}", "--ntasks-per-node=1",
            "--kill-on-bad-exit=0", "--label", "sh", "-c", srun_script(collectors)]


def parse_srun_output(text: str, collectors: Sequence[Collector]) -> dict[str, NodeResult]:
    commands = {c.name: c.command for c in collectors}
    per_task: dict[str, list[str]] = {}
    for line in text.splitlines():
        m = _LABEL.match(line)
        task = m.group(1) if m else "0"
        per_task.setdefault(task, []).append(line[m.end():] if m else line)
    results: dict[str, NodeResult] = {}
    for task, lines in per_task.items():
        node = f"task{task}"
        rows, current, buf = [], None, []
        for line in lines:
            if line.startswith(_NODE):
                node = line[len(_NODE):].strip() or node
            elif line.startswith(_BEGIN):
                current, buf = line[len(_BEGIN):].strip(), []
            elif line.startswith(_END) and current:
                fields = line[len(_END):].split()
                code = int(fields[1]) if len(fields) > 1 and fields[1].lstrip("-").isdigit() else None
                ms = int(fields[2]) if len(fields) > 2 and fields[2].isdigit() else 0
                if buf and buf[-1] == "":
                    buf = buf[:-1]
                rows.append((current, commands.get(current, ""), "\n".join(buf) + ("\n" if buf else ""), code,
                             ms / 1000))
                current = None
            elif current is not None:
                buf.append(line)
        results[node] = node_results_from_outputs(node, rows)
    return results


def collect_via_srun(job: str, nodes: Sequence[str], collectors: Sequence[Collector],
                     runner: Runner) -> dict[str, NodeResult]:
    """Run the collectors on every node of a running job through one srun step."""
    code, out, err = runner(srun_argv(job, len(nodes), collectors))
    results = parse_srun_output(out, collectors)
    for node in nodes:
        if node not in results:
            reason = (err.strip().splitlines() or [f"srun exited {code}"])[-1]
            results[node] = NodeResult(node, "unreachable", f"no output from the srun step: {reason}")
    return {n: results[n] for n in nodes} | {n: r for n, r in results.items() if n not in nodes}
