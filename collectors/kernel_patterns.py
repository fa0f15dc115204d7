"""Rules for kernel-log lines, shared by the training-log parser and the kernel-log collector.

A kernel line can reach gpu-triage two ways: pasted into a training log (``collectors.trainlog``)
or read from a node by the ``kernel-log`` collector (``collectors.node.kernel_log``).  Both call
the rules here, so one kernel line gives the same findings whichever way it came in.

Each rule takes the cleaned message text ``t`` (timestamps and host prefixes already stripped)
and its lower-case copy ``low`` and returns a list of ``(kind, attrs)`` pairs; most lines give
none, and cheap substring tests guard the regular expressions.
"""

from __future__ import annotations

import re

__all__ = [
    "XID", "DRIVER_LOADED", "NVLINK_XIDS", "norm_pci",
    "r_xid", "r_gpu_lost", "r_oom_killer", "r_pcie", "r_nvlink", "r_nfs", "r_io_error", "r_driver_version",
    "KERNEL_RULES",
]

# "NVRM: Xid (PCI:0000:3b:00): 79, pid=1234, name=python, ..." -- current drivers;
# "NVRM: Xid (PCI:0000:01:00 GPU-I:05): 94, pid=7194, ..."   -- MIG instance tag;
# "NVRM: Xid (0000:02:00): 31, Ch 00000001, ..."               -- old drivers, no "PCI:".
# "NVRM: Xid (PCI:...): 145, ..." / "(PCI:<redacted>)" -- a pasted line with the PCI id hidden is still
# that Xid: the parentheses may hold anything; the PCI id is taken when one is there.
XID = re.compile(r"NVRM: Xid \(([^()]{0,80})\):\s*(\d+)"
                 r"(?:, pid=('?<unknown>'?|\d+))?(?:, name=([^,]+))?")
_XID_PCI = re.compile(r"(?:PCI:)?([0-9A-Fa-f]{4,8}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2})")
_CAUSED_BY = re.compile(r"caused by previous Xid (\d+)", re.IGNORECASE)

# NVLink Xids, following the NVLink rows of NVIDIA's Xid catalog (shared/reference/xid-catalog.csv):
# 74 NVLink error, 136 link training, 137 fabric-address privilege, 144-150 NVLink5 units,
# 155 software-defined NVLink error.
NVLINK_XIDS = frozenset({74, 136, 137, 144, 145, 146, 147, 148, 149, 150, 155})

# "NVRM: loading NVIDIA UNIX x86_64 Kernel Module  535.183.01  Sun May 12 ..."
# "NVRM: loading NVIDIA UNIX Open Kernel Module for x86_64  595.71.05  Release Build ..."
DRIVER_LOADED = re.compile(r"NVRM: loading NVIDIA UNIX\b.*?Kernel Module(?: for \S+)?\s+(\d{3}\.\d+(?:\.\d+)?)")

_PCI_NAMED = re.compile(r"(?:PCI:|GPU ?)([0-9A-Fa-f]{4,8}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2})")
_PCI_ANY = re.compile(r"\b([0-9A-Fa-f]{4,8}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2})\.[0-7]\b")


def norm_pci(pci: str) -> str:
    """``'00000000:3B:00.0'`` / ``'0000:3b:00'`` -> ``'0000:3b:00'`` (domain:bus:device, lower case)."""
    p = pci.strip().lower()
    if "." in p:
        p = p.split(".", 1)[0]
    parts = p.split(":")
    if len(parts) == 3 and len(parts[0]) > 4:
        parts[0] = parts[0][-4:]
    return ":".join(parts)


def r_xid(t: str, low: str) -> list:
    """Every NVRM Xid line: code, PCI id, pid and process when printed, and the Xid the
    driver names as the cause ("caused by previous Xid 149")."""
    if "xid" not in low:
        return []
    m = XID.search(t)
    if not m:
        return []
    pci = _XID_PCI.match(m.group(1).strip())
    a: dict = {"code": int(m.group(2)), "pci": norm_pci(pci.group(1)) if pci else None}
    pid = m.group(3)
    a["pid"] = int(pid) if pid and pid.isdigit() else None
    name = (m.group(4) or "").strip()
    a["process"] = None if not name or "unknown" in name else name
    c = _CAUSED_BY.search(t)
    if c:
        a["caused_by"] = int(c.group(1))
    return [("xid", a)]


_LOST_WORDS = ("fallen off the bus", "gpu has fallen off", "gpu lost", "gpu is lost",
               "unable to determine the device handle", "rminitadapter failed", "rm_init_adapter failed")


def r_gpu_lost(t: str, low: str) -> list:
    """The GPU dropped off the PCIe bus or could not be initialised."""
    if not any(w in low for w in _LOST_WORDS):
        return []
    a: dict = {"text": t}
    m = _PCI_NAMED.search(t) or _PCI_ANY.search(t)
    if m:
        a["pci"] = norm_pci(m.group(1))
    return [("gpu-lost", a)]


# "Out of memory: Killed process 1440763 (perl) total-vm:..., anon-rss:60356340kB, ..."
# "Memory cgroup out of memory: Killed process 123 (python) ..."
# older kernels: "Out of memory: Kill process 123 (java) score 950 or sacrifice child"
_OOM_KILL = re.compile(r"(?i)out of memory(?: \([^)]*\))?: Kill(?:ed)? process (\d+) \(([^)]*)\)"
                       r"(?:.*?anon-rss:\s*(\d+)\s*kB)?")


def r_oom_killer(t: str, low: str) -> list:
    """The kernel OOM killer (global or memory cgroup) chose a victim."""
    if "out of memory" not in low or "kill" not in low:
        return []
    m = _OOM_KILL.search(t)
    if not m:
        return []
    a: dict = {"pid": int(m.group(1)), "process": m.group(2)}
    if m.group(3):
        a["anon_rss_kb"] = int(m.group(3))
    return [("oom-killer", a)]


# "pcieport 0000:00:01.0: AER: Corrected error received: 0000:3b:00.0"
# "AER: Uncorrected (Fatal) error received", "AER: Multiple Corrected error received",
# newer kernels: "AER: Correctable error message received from ..."
# "PCIe Bus Error: severity=Uncorrected (Non-Fatal), type=Transaction Layer, (Requester ID)"
_AER = re.compile(r"(?i)\bAER: (?:Multiple )?(Corrected|Correctable|Uncorrected|Uncorrectable)\b")
_PCIE_BUS = re.compile(r"(?i)PCIe Bus Error: severity=([A-Za-z]+)")


def r_pcie(t: str, low: str) -> list:
    """A PCIe Advanced Error Reporting event with its severity."""
    if "aer" not in low and "pcie bus error" not in low:
        return []
    m = _PCIE_BUS.search(t) or _AER.search(t)
    if not m:
        return []
    sev = "uncorrected" if m.group(1).lower().startswith("uncorrect") else "corrected"
    return [("pcie-error", {"text": t, "severity": sev})]


_NVLINK_BAD = ("error", "fatal", "fail", "inactive", "down")
_SXID = re.compile(r"\bSXid \(")


def r_nvlink(t: str, low: str) -> list:
    """NVLink trouble: an NVLink Xid (74, 144-150, ...), an NVSwitch SXid, or a line naming
    NVLink together with an error word."""
    if "xid" in low:
        m = XID.search(t)
        if (m and int(m.group(2)) in NVLINK_XIDS) or _SXID.search(t):
            return [("nvlink-error", {"text": t})]
    if "nvlink" in low and any(w in low for w in _NVLINK_BAD) and "nvls" not in low and "nvlink sharp" not in low:
        # NVLink SHARP (NVLS) is NCCL's multicast feature: a failure to set it up (no fabric manager, no
        # multicast support, a container) is NCCL falling back, not an NVLink link error
        return [("nvlink-error", {"text": t})]
    return []


_NFS = re.compile(r"nfs: server (\S+?),? not responding")


def r_nfs(t: str, low: str) -> list:
    """An NFS server stopped answering ("nfs: server X not responding, still trying")."""
    if "not responding" not in low:
        return []
    m = _NFS.search(t)
    return [("nfs-stall", {"server": m.group(1), "text": t})] if m else []


_IO_WORDS = ("input/output error", "errno 5]", "stale file handle", "read-only file system",
             "buffer i/o error", " i/o error", "remounting filesystem read-only", "critical medium error")
# "EXT4-fs error (device sda1): ...", "EXT4-fs (dm-0): I/O error while writing superblock";
# not "Opts: errors=remount-ro".  "XFS (sdb1): metadata I/O error", "... Corruption detected",
# "xfs_do_force_shutdown(0x2) called", "Filesystem has been shut down".
_FS_ERROR = re.compile(r"EXT[234]-fs (?:error|\([^)]*\):.*\b(?:error|aborted|abort)\b)|"
                       r"XFS \([^)]*\):.*(?:\berror\b|corrupt|shut ?down)", re.IGNORECASE)


# EIO from a network transport (a verbs call, a libfabric/EFA completion, UCX) is the fabric's, not storage's
_NET_TRANSPORT = ("net/ofi", "net/ib", "net/socket", "net/plugin", "ucx ", "ibv_", "fi_", "efa", "rdma", "mlx5")


def r_io_error(t: str, low: str) -> list:
    """Block-device and filesystem errors, and the EIO / stale-handle / read-only errors
    applications see when storage fails (not an EIO a network transport reports)."""
    if any(w in low for w in _IO_WORDS) and any(n in low for n in _NET_TRANSPORT):
        return []
    if any(w in low for w in _IO_WORDS) or (("ext" in low or "xfs" in low) and _FS_ERROR.search(t)):
        return [("io-error", {"text": t})]
    return []


def r_driver_version(t: str, low: str) -> list:
    """The NVIDIA driver version from the module's load banner."""
    if "nvrm: loading" not in low:
        return []
    m = DRIVER_LOADED.search(t)
    return [("version", {"component": "driver", "value": m.group(1)})] if m else []


KERNEL_RULES = (r_xid, r_gpu_lost, r_oom_killer, r_pcie, r_nvlink, r_nfs, r_io_error, r_driver_version)
