"""kernel-log: the node's kernel ring buffer.

Command: ``dmesg -T``; where dmesg is restricted to root (``kernel.dmesg_restrict=1``) it falls
back to ``journalctl -k -o short-iso``, then to plain ``dmesg``.

Formats handled: ``dmesg -T`` ctime stamps (``[Sun Jul 28 09:15:27 2024]``), monotonic stamps
(``[24128.828315]``), ``dmesg --time-format iso``, journalctl short/short-iso lines
(``... host kernel: ...``), bare ``kernel:`` prefixes, remote-syslog lines with a host and level
prefix (Talos: ``192.168.11.119: kern: warning: [2026-...Z]: ...``) and lines without any prefix
as pasted from elsewhere.  Prefixes are stripped by ``collectors.trainlog.clean_line``; the rules
themselves live in ``collectors.kernel_patterns`` and are shared with the training-log parser.

Findings: ``xid`` for every NVRM Xid line (code, PCI id, pid, process, caused_by), ``gpu-lost``,
``oom-killer``, ``pcie-error`` (AER, with severity), ``nvlink-error``, ``nfs-stall``, ``io-error``
and ``version`` (driver, from the module's load banner).

Fixtures (tests/fixtures/kernel-log, sources in SOURCES.jsonl there): NVRM Xid lines of drivers
from 2015 to 595.x posted in GitHub issues (akash-network/support, Bumblebee, chia-gigahorse,
NVIDIA/open-gpu-kernel-modules), gpud's test data, ml-engineering's debug notes, and OOM-killer
reports (equinor/ert, QAConv).
"""

from __future__ import annotations

import re

from collectors.findings import Finding
from collectors.node import _text
from collectors.kernel_patterns import KERNEL_RULES
from collectors.registry import Collector
from collectors.trainlog import clean_line

NAME = "kernel-log"
MAX_UNPARSED = 100

# Messages from dmesg/journalctl themselves (not kernel lines) that mean the log was not readable.
_NOT_READABLE = ("no journal files were found", "-- no entries --", "you are currently not seeing messages")
# journalctl's own marker lines: "-- Logs begin at ...", "-- Reboot --", "-- Boot 1a2b... --".
_JOURNAL_MARK = re.compile(r"^-- .* --$|^-- (?:Logs begin|Journal begins|Reboot)")
_XID_LIKE = re.compile(r"(?i)NVRM: Xid\b")
# Unprefixed lines that still look like kernel messages: a subsystem or driver tag
# ("NVRM: ...", "oom-kill:constraint=...", "pcieport 0000:00:01.0: AER: ...", "nvme nvme0: ...")
# or a call-trace frame ("dump_stack+0x74/0x92").
_KERNEL_SHAPE = re.compile(r"^(?:[\w.@/-]+:|[\w-]+ [\w.:-]+: |\S+\+0x[0-9a-fA-F]+/0x[0-9a-fA-F]+|<\w+>$)")


def parse(text: str) -> tuple[list[Finding], list[str]]:
    findings: list[Finding] = []
    unparsed: list[str] = []
    extra = 0
    if not text.strip():
        return [], [_text.note("empty output: the kernel log could not be read (dmesg restricted and no journal access?)")]
    for line_no, raw in _text.lines(text, ("dmesg", "journalctl")):
        line = raw.strip()
        if not line:
            continue
        low_line = line.lower()
        if low_line.startswith(("dmesg:", "journalctl:")) or any(w in low_line for w in _NOT_READABLE):
            unparsed.append(_text.note(f"kernel log not readable: {line}"))
            continue
        if _JOURNAL_MARK.match(line):
            continue
        cl = clean_line(raw)
        t = cl.text
        low = t.lower()
        got: list = []
        for rule in KERNEL_RULES:
            got.extend(rule(t, low))
        for kind, attrs in got:
            findings.append(Finding(kind=kind, attrs=attrs, line=line, line_no=line_no, source=NAME, ts=cl.ts))
        if got and any(k == "xid" for k, _ in got):
            continue
        if _XID_LIKE.search(t):
            # Every Xid line must be accounted for: one we cannot read is reported, not dropped.
            note = f"Xid line in an unknown format: {line}"
        elif got or cl.ts is not None or t != line or _KERNEL_SHAPE.match(t):
            continue  # a kernel line (it had a kernel-log prefix), just not one that matters here
        else:
            note = line
        if len(unparsed) < MAX_UNPARSED:
            unparsed.append(note)
        else:
            extra += 1
    if extra:
        unparsed.append(f"... and {extra} more lines not recognised as kernel-log lines")
    return findings, unparsed


COLLECTOR = Collector(
    name=NAME,
    command="dmesg -T 2>/dev/null || journalctl -k --no-pager -o short-iso 2>/dev/null || dmesg",
    parse=parse,
    binaries=("dmesg",),
    timeout=30.0,
    root=True,
    description="Kernel log: NVIDIA Xid errors, GPUs fallen off the bus, the OOM killer, PCIe AER, "
    "NVLink, NFS stalls, disk I/O errors and the loaded driver version.",
    tags=("gpu-hardware", "host-memory", "checkpoint-storage", "software"),
)
