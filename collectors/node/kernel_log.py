"""kernel-log: the node's kernel ring buffer.

Command: ``dmesg -T``; where dmesg is restricted to root (``kernel.dmesg_restrict=1``) it falls
back to ``journalctl -k -o short-iso``, then to plain ``dmesg``.

Formats handled: ``dmesg -T`` ctime stamps (``[Sun Jul 28 09:15:27 2024]``), monotonic stamps
(``[24128.828315]``), ``dmesg --time-format iso``, journalctl short/short-iso lines
(``... host kernel: ...``), bare ``kernel:`` prefixes, remote-syslog lines with a host and level
prefix (Talos: ``192.168.11.119: kern: warning: [2026-...Z]: ...``) and lines without any prefix
as pasted from elsewhere.  Prefixes are stripped by ``collectors.trainlog.clean_line``; the rules
themselves live in ``collectors.kernel_patterns`` and are shared with the training-log parser.

Findings: ``xid`` for every NVRM Xid line (code, PCI id, pid, process, caused_by, and the GPU's
UUID from the driver's "GPU at PCI:...: GPU-..." line), ``gpu-lost`` (the PCI id of a three-line
"fallen off the bus" message taken from its first line), ``oom-killer`` (pid, process, anon/file/
shmem rss and total-vm in kB, uid, scope global or cgroup, the memory cgroups from the
``oom-kill:constraint=`` line), ``pcie-error`` (AER, with severity), ``nvlink-error``, ``nfs-stall``, ``io-error``
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
    _complete(findings, text.splitlines())
    return findings, unparsed


# "NVRM: GPU at PCI:0000:06:00: GPU-0b6b7808-c002-f593-ac86-cd8e57757b94": the PCI id -> GPU UUID map
_GPU_AT = re.compile(r"NVRM: GPU at (?:PCI:)?([0-9A-Fa-f]{4,8}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2})\S*:?\s+(GPU-[0-9a-fA-F-]{36})")
_UUID = re.compile(r"\b(GPU-[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12})\b")
# the first line of the three-line message: "NVRM: The NVIDIA GPU 0000:3b:00.0 / (PCI ID: 10de:1db6) installed
# in this system has / fallen off the bus and is not responding to commands."
_PCI_IN = re.compile(r"NVRM: .*?\b([0-9A-Fa-f]{4,8}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2})(?:\.[0-7])?\b")
# "oom-kill:constraint=CONSTRAINT_MEMCG,...,oom_memcg=/slurm/uid_1000/job_12,task_memcg=...,task=python,pid=1,uid=1000"
_OOM_CONTEXT = re.compile(r"oom-kill:constraint=(\w+)(?P<rest>.*)")
_OOM_FIELD = re.compile(r"(oom_memcg|task_memcg|task|pid|uid)=([^,\s]+)")
_OOM_KB = re.compile(r"\b(total-vm|file-rss|shmem-rss):\s*(\d+)kB")
_OOM_UID = re.compile(r"\bUID:\s*(\d+)")


def _complete(findings: list[Finding], lines: list[str]) -> None:
    """Facts a finding's own line does not carry but the lines around it do: the GPU UUID of an Xid's
    PCI id, the PCI id of a multi-line "fallen off the bus" message, and the OOM killer's memory
    cgroup, uid and kind (global or cgroup)."""
    from collectors.kernel_patterns import norm_pci

    uuids: dict[str, str] = {}
    contexts: dict[int, dict] = {}
    for line in lines:
        at = _GPU_AT.search(line)
        if at:
            uuids[norm_pci(at.group(1))] = at.group(2)
        ctx = _OOM_CONTEXT.search(line)
        if ctx:
            fields = dict(_OOM_FIELD.findall(ctx.group("rest")))
            if fields.get("pid", "").isdigit():
                contexts[int(fields["pid"])] = {"constraint": ctx.group(1), "global": "global_oom" in line, **fields}
    for f in findings:
        if f.kind in ("xid", "gpu-lost"):
            if f.kind == "gpu-lost" and not f.attrs.get("pci") and f.line_no:
                for back in range(f.line_no - 2, max(f.line_no - 4, -1), -1):  # up to 2 lines above
                    m = _PCI_IN.search(lines[back]) if 0 <= back < len(lines) else None
                    if m:
                        f.attrs["pci"] = norm_pci(m.group(1))
                        break
            own = _UUID.search(f.line)
            uuid = own.group(1) if own else uuids.get(f.attrs.get("pci") or "")
            if uuid:
                f.attrs["uuid"] = uuid
        elif f.kind == "oom-killer":
            for key, value in _OOM_KB.findall(f.line):
                f.attrs[key.replace("-", "_") + "_kb"] = int(value)
            uid = _OOM_UID.search(f.line)
            if uid:
                f.attrs["uid"] = int(uid.group(1))
            ctx = contexts.get(f.attrs.get("pid"))
            cgroup = "memory cgroup out of memory" in f.line.lower()
            if ctx:
                cgroup = cgroup or ctx["constraint"] == "CONSTRAINT_MEMCG"
                for key in ("oom_memcg", "task_memcg"):
                    if key in ctx:
                        f.attrs[key] = ctx[key]
                if "uid" not in f.attrs and ctx.get("uid", "").isdigit():
                    f.attrs["uid"] = int(ctx["uid"])
                f.attrs["constraint"] = ctx["constraint"]
            f.attrs["scope"] = "cgroup" if cgroup else "global"


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
