"""py-spy: where each training process's Python is right now, for a job that hangs.

Command: for every process that holds a GPU (``nvidia-smi --query-compute-apps=pid``; at most 16),
``py-spy dump --pid PID`` (read-only: py-spy reads the process's memory through ptrace and lets it
go on). Only when py-spy is installed on the node; it needs root or CAP_SYS_PTRACE. Opt in:
``--only py-spy`` (a dump takes seconds per process and only means something while the job hangs).

Format handled: py-spy's dump, one block per process::

    Process 782: /opt/venv/bin/python train.py
    Python v3.11.7 (/usr/local/bin/python3.11)

    Thread 782 (idle): "MainThread"
        all_reduce (torch/distributed/distributed_c10d.py:3252)
        train_step (train.py:26)

Findings: one ``py-stack`` per process: its pid and command, the main thread's frames (innermost
first) and ``where`` it is: ``collective`` (inside torch.distributed's collectives: it waits for the
other ranks), ``dataloader``, ``checkpoint``, or ``python`` (anywhere else: its own code). On a hung
job, the one process that is not in the collective everyone else waits in is the laggard.

Fixtures: ``tests/fixtures/py-spy/`` (real dumps of a two-rank gloo job, one rank held back).
"""

from __future__ import annotations

import re

from collectors.findings import Finding
from collectors.node import _text
from collectors.registry import Collector

NAME = "py-spy"
MAX_PIDS = 16
MAX_FRAMES = 12

_PROCESS = re.compile(r"^Process (\d+): (.*)$")
_THREAD = re.compile(r'^Thread (\w+) \((\w+)\): "(.*)"$')
_FRAME = re.compile(r"^\s+(\S.*?) \((.+?):(\d+)\)$")
_SKIP = re.compile(r"^(Python v\d|=== |\s*$)")

# Where a frame's file puts the process (first match, innermost frame first).
_WHERE = (
    ("collective", re.compile(r"torch/distributed/(distributed_c10d|c10d_logger|_functional_collectives)\.py$|"
                              r"deepspeed/comm/|horovod/")),
    ("dataloader", re.compile(r"torch/utils/data/")),
    ("checkpoint", re.compile(r"torch/serialization\.py$|torch/distributed/checkpoint/|safetensors/")),
)


def _where(frames: list[tuple[str, str, int]]) -> str:
    for func, path, _ in frames:
        for name, rx in _WHERE:
            if rx.search(path):
                return name
    return "python"


def parse(text: str) -> tuple[list[Finding], list[str]]:
    findings: list[Finding] = []
    unparsed: list[str] = []
    if not text.strip():
        return [], [_text.note("no process holds a GPU on this node, or py-spy printed nothing")]
    proc: dict | None = None
    thread: str | None = None

    def close() -> None:
        if proc and proc["frames"]:
            frames = proc["frames"]
            findings.append(Finding(
                kind="py-stack",
                attrs={"pid": proc["pid"], "command": proc["command"][:200], "thread": proc["thread"],
                       "state": proc["state"], "where": _where(frames), "function": frames[0][0],
                       "frames": [f"{f} ({p}:{n})" for f, p, n in frames[:MAX_FRAMES]]},
                line=f"{frames[0][0]} ({frames[0][1]}:{frames[0][2]})", line_no=proc["line_no"], source=NAME))

    for line_no, raw in _text.lines(text, ("py-spy", "nvidia-smi")):
        line = raw.rstrip()
        m = _PROCESS.match(line)
        if m:
            close()
            proc, thread = {"pid": int(m.group(1)), "command": m.group(2), "frames": [], "thread": None,
                            "state": None, "line_no": line_no}, None
            continue
        m = _THREAD.match(line)
        if m and proc is not None:
            # the main thread's stack is the one that says where the rank is
            thread = m.group(3)
            if proc["thread"] is None or (thread == "MainThread" and proc["thread"] != "MainThread"):
                proc.update(thread=thread, state=m.group(2), frames=[], line_no=line_no)
            continue
        m = _FRAME.match(line)
        if m and proc is not None:
            if thread == proc["thread"] and len(proc["frames"]) < 64:
                proc["frames"].append((m.group(1), m.group(2), int(m.group(3))))
            continue
        if _SKIP.match(line):
            continue
        if line.startswith(("Error:", "error:", "Permission denied", "py-spy:")):
            unparsed.append(_text.note(line.strip()[:200]))
            continue
        unparsed.append(line)
    close()
    return findings, unparsed


COMMAND = (
    "command -v py-spy >/dev/null 2>&1 || { echo 'py-spy: command not found' >&2; exit 127; }; "
    f"for p in $(nvidia-smi --query-compute-apps=pid --format=csv,noheader 2>/dev/null | sort -un | head -n {MAX_PIDS}); "
    "do timeout 15 py-spy dump --pid \"$p\" 2>&1 | head -n 400; done"
)

COLLECTOR = Collector(
    name=NAME,
    command=COMMAND,
    parse=parse,
    binaries=("py-spy", "nvidia-smi"),
    timeout=120.0,
    root=True,
    description="Python stacks of the processes holding a GPU (py-spy dump), for a job that hangs: which rank "
    "waits in a collective and which is elsewhere. Opt in with --only py-spy.",
    tags=("communication",),
    opt_in=True,
)
