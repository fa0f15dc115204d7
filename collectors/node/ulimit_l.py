"""ulimit-l: the locked-memory limit (RLIMIT_MEMLOCK) that RDMA needs to register memory.

Command: ``ulimit -l`` (a shell builtin in bash, dash and busybox sh).

Format handled: a single line, ``unlimited`` or a number of KiB (``64``, ``8192``); a pasted
prompt or other lines around it are reported as unparsed.  Note that the SSH session sees the
limit PAM and sshd give it; a job started by Slurm or a container runtime may run with another.

Findings: one ``memlock`` (limit_kb, -1 for unlimited).

Fixtures: none; no clean public capture was found (see shared/reference/README.md), so the tests
use the two forms the builtin prints.
"""

from __future__ import annotations

import re

from collectors.findings import Finding
from collectors.node import _text
from collectors.registry import Collector

NAME = "ulimit-l"

_VALUE = re.compile(r"^(unlimited|infinity|\d+)$", re.IGNORECASE)


def parse(text: str) -> tuple[list[Finding], list[str]]:
    findings: list[Finding] = []
    unparsed: list[str] = []
    if not text.strip():
        return [], [_text.note("empty output: ulimit -l printed nothing")]
    for line_no, raw in _text.lines(text, ("ulimit",)):
        line = raw.strip()
        if not line:
            continue
        m = _VALUE.match(line)
        if m and not findings:
            value = m.group(1).lower()
            limit = -1 if value in ("unlimited", "infinity") else int(value)
            findings.append(Finding(kind="memlock", attrs={"limit_kb": limit}, line=line, line_no=line_no,
                                    source=NAME))
            continue
        unparsed.append(line)
    return findings, unparsed


COLLECTOR = Collector(
    name=NAME,
    command="ulimit -l",
    parse=parse,
    binaries=(),
    timeout=5.0,
    root=False,
    description="Locked-memory limit (ulimit -l) of a login session: RDMA/NCCL over InfiniBand needs it "
    "unlimited or large.",
    tags=("communication",),
)
