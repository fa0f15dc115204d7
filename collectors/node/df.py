"""df: how full every real filesystem is, and the size of /dev/shm.

Command: ``df -hP; echo; df -iP`` (sizes, then inodes; POSIX format, one line per mount).

Formats handled: GNU coreutils ``df -h`` / ``-hP`` / ``-P`` (1024-blocks) / ``-k`` (1K-blocks) /
``-m`` (1M-blocks) / ``-T`` (a Type column, e.g. ``df -kPT``) / ``-i`` / ``-ih``, rows pasted without
their header (plain numbers are then df's default 1K blocks),
busybox ``df -h`` (``Available`` column, one-decimal sizes), sizes with a decimal comma
(``3,8G``) or point, ``-`` for an unknown percentage, device names long enough that non-POSIX df
wrapped the numbers onto the next line, and several tables one after another.  Which table a
row belongs to is told by the header line before it (``Size``/``1K-blocks``/``Inodes``).

Findings: ``shm-usage`` for /dev/shm (size_bytes, used_bytes, avail_bytes, used_pct, device,
fstype, docker_default when it is Docker's 64 MB default) and ``disk-usage`` for every other real
mount (mount, device, fstype with -T, used_pct, size_bytes, used_bytes, avail_bytes; for rows of
the inode table ``inodes: true`` with inodes_total/used/free).  Skipped: tmpfs/devtmpfs and other
pseudo filesystems other than /dev/shm, /proc, /sys, /dev, /run, and bind mounts repeating another
row's figures (Docker's /etc/hosts and friends, overlay layers).  Snap and other read-only images
are reported; ``collectors.healthy`` marks them normal.  Nothing is flagged here; the knowledge
rules decide what counts as full (e.g. ``{kind: disk-usage, min_used_pct: 95}``).

Fixtures (tests/fixtures/df, sources in SOURCES.jsonl there): full root filesystems on a large
Ubuntu server, a DGX-1 with Lustre (JADE) and a Nextcloud VM with a decimal-comma locale and
snap mounts; df -kPT on an Ubuntu desktop (systeminformation); snap loop mounts at 100 % under a
'#df -h' prompt (toolkits/nux); busybox df in a default Docker container (64M /dev/shm, moby/moby); inode
exhaustion shown by ``df -ih`` (NixOS); a healthy GitHub Actions runner.
"""

from __future__ import annotations

import re

from collectors.findings import Finding
from collectors.node import _text
from collectors.registry import Collector

NAME = "df"

DOCKER_SHM_BYTES = 64 * 1024 * 1024
_UNITS = {"": 0, "K": 1, "M": 2, "G": 3, "T": 4, "P": 5, "E": 6}
_SIZE = re.compile(r"^(\d+(?:[.,]\d+)?)([KMGTPE]?)(?:i?B)?$", re.IGNORECASE)
_ROW = re.compile(r"^(\S+)\s+(\S+)\s+(\S+)\s+(\S+)\s+(\d+%|-)\s+(.+)$")
# df -T: the filesystem type after the device ("/dev/sda2 ext4 ...")
_ROW_T = re.compile(r"^(\S+)\s+([A-Za-z][\w.+-]*)\s+(\S+)\s+(\S+)\s+(\S+)\s+(\d+%|-)\s+(.+)$")
_WRAPPED = re.compile(r"^(\S+)\s+(\S+)\s+(\S+)\s+(\d+%|-)\s+(.+)$")  # numbers of a wrapped row
_WRAPPED_T = re.compile(r"^([A-Za-z][\w.+-]*)\s+(\S+)\s+(\S+)\s+(\S+)\s+(\d+%|-)\s+(.+)$")
# The header: "Filesystem ... Mounted on", and the same words as some translated locales print them
# (a header in another language is still taken when its first or last words are listed here).
_HEADER = re.compile(r"(?i)^(?:filesystem|dateisystem|sys\. de fichiers|sistema de archivos|s\.ficheros|"
                     r"sist\. arq\.|файловая система|文件系统|ファイルシス)|"
                     r"\b(?:mounted on|eingehängt auf|monté sur|montado en|montado em|смонтировано в|挂载点)\s*$")
_TYPE_WORDS = {"type", "typ", "tipo", "тип", "类型", "タイプ"}
_HUMAN_WORDS = ("size", "größe", "taille", "tamaño", "tam.", "размер", "容量", "サイズ", "大小")
_BLOCKS = re.compile(r"(\d+)([kmgt]?)-(?:blocks|blöcke|blocs|bloques|blocos|блоков|块|ブロック)")
_PSEUDO_DEVICES = {"tmpfs", "devtmpfs", "udev", "efivarfs", "devfs", "proc", "sysfs", "cgroup", "cgroup2",
                   "none_tmpfs", "shm"}
_PSEUDO_MOUNTS = ("/proc", "/sys", "/dev", "/run")
_PSEUDO_TYPES = {"tmpfs", "devtmpfs", "proc", "sysfs", "cgroup", "cgroup2", "devpts", "efivarfs", "securityfs",
                 "pstore", "bpf", "tracefs", "debugfs", "autofs", "mqueue", "hugetlbfs", "fusectl", "configfs",
                 "binfmt_misc", "nsfs", "ramfs", "rpc_pipefs"}


def _size(value: str, unit_bytes: int | None) -> int | None:
    """'3,8G' -> bytes; plain numbers are in ``unit_bytes`` (None: bytes, as df -h prints them)."""
    m = _SIZE.match(value.strip())
    if not m:
        return None
    num = float(m.group(1).replace(",", "."))
    suffix = m.group(2).upper()
    if suffix:
        return int(round(num * 1024 ** _UNITS[suffix]))
    return int(round(num * (unit_bytes or 1)))


def _skip(device: str, mount: str, fstype: str | None) -> bool:
    if mount == "/dev/shm":
        return False
    if device in _PSEUDO_DEVICES or (fstype or "").lower() in _PSEUDO_TYPES:
        return True
    return any(mount == p.rstrip("/") or mount.startswith(p.rstrip("/") + "/") for p in _PSEUDO_MOUNTS)


_PLAIN = re.compile(r"^\d+$")


def _more(attrs: dict, used: str, avail: str, unit: int | None, device: str, fstype: str | None) -> None:
    """/dev/shm's other columns (the disk rows carry theirs by name)."""
    for key, value in (("used_bytes", used), ("avail_bytes", avail)):
        got = _size(value, unit)
        if got is not None:
            attrs[key] = got
    attrs["device"] = device
    if fstype:
        attrs["fstype"] = fstype


def parse(text: str) -> tuple[list[Finding], list[str]]:
    findings: list[Finding] = []
    unparsed: list[str] = []
    if not text.strip():
        return [], [_text.note("empty output: df printed nothing")]
    inodes = False
    unit_bytes: int | None = None   # None: human sizes; else the block size of a -P/-k table
    typed: bool | None = None       # a Type column (df -T); None: no header seen, told by each row
    header_seen = False
    pending: tuple[str, int] | None = None  # a device name alone on its line (wrapped row)
    # Rows kept per table, so that bind mounts repeating a row can be dropped.
    seen: dict[tuple, Finding] = {}
    lines = text.splitlines()
    for line_no, raw in _text.lines(text, ("df",)):
        line = raw.strip()
        if not line:
            continue
        if _HEADER.search(line):
            header_seen = True
            low = line.lower()
            inodes = "inode" in low
            typed = bool(_TYPE_WORDS & set(low.split()))
            m = _BLOCKS.search(low)
            if inodes or any(w in low for w in _HUMAN_WORDS):
                unit_bytes = None
            elif m:
                unit_bytes = int(m.group(1)) * 1024 ** (" kmgt".index(m.group(2) or " "))
            else:
                unit_bytes = 1024  # df's default unit (POSIXLY_CORRECT's 512 always says 512-blocks)
            pending = None
            continue
        device = fstype = None
        m = _ROW_T.match(line) if typed is not False else None
        if m and (typed or not _SIZE.match(m.group(2))):
            device, fstype, size, used, avail, pct, mount = m.groups()
        elif (m := _ROW.match(line)) and not typed:
            device, size, used, avail, pct, mount = m.groups()
        elif pending is not None:
            w = (_WRAPPED_T if typed else _WRAPPED).match(line)
            if w:
                device = pending[0]
                if typed:
                    fstype, size, used, avail, pct, mount = w.groups()
                else:
                    size, used, avail, pct, mount = w.groups()
                line = f"{device} {line}"
        if device is None:
            if len(line.split()) == 1 and line_no < len(lines) \
                    and (_WRAPPED_T if typed else _WRAPPED).match(lines[line_no].strip()):
                pending = (line, line_no)
                continue
            unparsed.append(line)
            pending = None
            continue
        pending = None
        mount = mount.strip()
        if _skip(device, mount, fstype) or pct == "-":
            continue
        used_pct = int(pct.rstrip("%"))
        unit = unit_bytes
        if not header_seen and all(_PLAIN.match(v) for v in (size, used, avail)):
            unit = 1024  # rows without their header, in plain numbers: df's default 1K blocks
        if mount == "/dev/shm":
            if inodes:
                continue
            size_bytes = _size(size, unit)
            attrs: dict = {"used_pct": used_pct}
            if size_bytes is not None:
                attrs["size_bytes"] = size_bytes
                # df -h rounds: "64M" and "64.0M" are both Docker's 64 MiB default.
                attrs["docker_default"] = abs(size_bytes - DOCKER_SHM_BYTES) < 512 * 1024
            _more(attrs, used, avail, unit, device, fstype)
            findings.append(Finding(kind="shm-usage", attrs=attrs, line=line, line_no=line_no, source=NAME))
            continue
        attrs = {"mount": mount, "device": device, "used_pct": used_pct, "inodes": inodes}
        if fstype:
            attrs["fstype"] = fstype
        if not inodes:
            for key, value in (("size_bytes", size), ("avail_bytes", avail), ("used_bytes", used)):
                got = _size(value, unit)
                if got is not None:
                    attrs[key] = got
        else:
            # inode counts: df -ih abbreviates them with the same 1024 powers as sizes
            for key, value in (("inodes_total", size), ("inodes_used", used), ("inodes_free", avail)):
                got = _size(value, None)
                if got is not None:
                    attrs[key] = got
        key = (inodes, device, size, used, avail)
        finding = Finding(kind="disk-usage", attrs=attrs, line=line, line_no=line_no, source=NAME)
        earlier = seen.get(key)
        if earlier is not None:
            # The same filesystem mounted again (bind mount, overlay layer): keep the shortest path.
            if len(mount) < len(earlier.attrs["mount"]):
                findings[findings.index(earlier)] = finding
                seen[key] = finding
            continue
        seen[key] = finding
        findings.append(finding)
    return findings, unparsed


COLLECTOR = Collector(
    name=NAME,
    command="df -hP; echo; df -iP",
    parse=parse,
    binaries=("df",),
    timeout=30.0,
    root=False,
    description="Filesystem usage (space and inodes) of every real mount, and the size and use of /dev/shm.",
    tags=("checkpoint-storage", "shared-memory"),
)
