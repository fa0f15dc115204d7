"""free: the node's RAM and swap.

Command: ``free -m`` (MiB).

Formats handled: procps-ng 3.3.10+ (``total used free shared buff/cache available``), ``free -w``
(separate ``buffers`` and ``cache``), older procps (``buffers cached`` columns and a
``-/+ buffers/cache:`` row, no ``available``: the row's free figure is used), and ``free -h``
with either suffix style (``3.6G``/``143M``/``0B`` from procps-ng 3.3.10, ``31Gi``/``512Mi``
from newer releases), decimal points or commas.  Plain numbers are MiB, as the command asks for.
The columns are located by the header, so added or reordered columns do not matter.

Findings: one ``host-memory`` (total_mib, used_mib, available_mib, available_pct, free_mib,
shared_mib, buff_cache_mib, buffers_mib and cache_mib where free prints them apart, swap_total_mib,
swap_used_mib, swap_free_mib).  ``used_mib`` is memory used by processes: the ``-/+ buffers/cache``
row's figure on old procps, whose Mem row counts the page cache as used (kept as
``used_with_cache_mib``).

Fixtures (tests/fixtures/free, sources in SOURCES.jsonl there): ``free -h`` on CentOS 7 with and
without swap (cloudera-ps/prereq-checks, kellyjonbrazil/jc test data) and ``free -m`` on a 32 GB
Proxmox host (proxmox-lxc-autoscale).
"""

from __future__ import annotations

import re

from collectors.findings import Finding
from collectors.node import _text
from collectors.registry import Collector

NAME = "free"

_POWERS = {"B": -2, "K": -1, "M": 0, "G": 1, "T": 2, "P": 3}
_VALUE = re.compile(r"^(\d+(?:[.,]\d+)?)([BKMGTP]?)(?:i?B?)?$", re.IGNORECASE)


def _mib(value: str) -> float | int | None:
    m = _VALUE.match(value)
    if not m:
        return None
    digits, suffix = m.group(1).replace(",", "."), m.group(2).upper()
    if not suffix:
        return float(digits) if "." in digits else int(digits)
    return round(float(digits) * 1024.0 ** _POWERS[suffix], 1)


def parse(text: str) -> tuple[list[Finding], list[str]]:
    unparsed: list[str] = []
    if not text.strip():
        return [], [_text.note("empty output: free printed nothing")]
    columns: list[str] = []
    mem: dict[str, float | int] = {}
    swap: dict[str, float | int] = {}
    cache_row: dict[str, float | int] = {}
    mem_line: tuple[str, int] | None = None
    for line_no, raw in _text.lines(text, ("free",)):
        line = raw.strip()
        if not line:
            continue
        low = line.lower()
        if low.split()[0] == "total":  # the header (the -t row is "Total:")
            columns = low.split()
            continue
        label, _, rest = line.partition(":")
        label = label.strip().lower()
        if label in ("mem", "swap", "-/+ buffers/cache") and rest.strip():
            values = [_mib(v) for v in rest.split()]
            if any(v is None for v in values):
                unparsed.append(line)
                continue
            if label == "-/+ buffers/cache":
                cache_row = dict(zip(("used", "free"), values))
                continue
            names = columns or ["total", "used", "free", "shared", "buff/cache", "available"]
            row = dict(zip(names, values))
            if label == "mem":
                mem, mem_line = row, (line, line_no)
            else:
                swap = row
            continue
        if label in ("low", "high", "total", "comm"):
            continue  # free -l / -t rows
        unparsed.append(line)
    if not mem or "total" not in mem or mem_line is None:
        if not unparsed:
            unparsed.append("no 'Mem:' row found")
        return [], unparsed
    attrs: dict = {"total_mib": mem["total"]}
    if "used" in cache_row:
        attrs["used_mib"] = cache_row["used"]   # old procps: Mem "used" counts the page cache
    elif "used" in mem:
        attrs["used_mib"] = mem["used"]
    if "available" in mem:
        available = mem["available"]
    elif "free" in cache_row:
        available = cache_row["free"]
    elif "free" in mem:
        available = mem["free"] + mem.get("buffers", 0) + mem.get("cached", 0) + mem.get("cache", 0)
    else:
        available = None
    if available is not None:
        attrs["available_mib"] = available
        if mem["total"]:
            attrs["available_pct"] = round(100.0 * available / mem["total"], 1)
    if "total" in swap:
        attrs["swap_total_mib"] = swap["total"]
    if "used" in swap:
        attrs["swap_used_mib"] = swap["used"]
    if "free" in swap:
        attrs["swap_free_mib"] = swap["free"]
    # the other columns of the Mem row, by their header names (free -w splits buffers and cache,
    # old procps says "cached"); buff_cache_mib is their sum wherever they are apart
    for column, key in (("free", "free_mib"), ("shared", "shared_mib"), ("buffers", "buffers_mib")):
        if column in mem:
            attrs[key] = mem[column]
    cache = mem.get("cache", mem.get("cached"))
    if cache is not None:
        attrs["cache_mib"] = cache
    if "buff/cache" in mem:
        attrs["buff_cache_mib"] = mem["buff/cache"]
    elif cache is not None or "buffers" in mem:
        attrs["buff_cache_mib"] = round((cache or 0) + mem.get("buffers", 0), 1)
    if "used" in cache_row and "used" in mem:
        attrs["used_with_cache_mib"] = mem["used"]  # old procps: Mem's used counts the page cache
    line, line_no = mem_line
    return [Finding(kind="host-memory", attrs=attrs, line=line, line_no=line_no, source=NAME)], unparsed


COLLECTOR = Collector(
    name=NAME,
    command="free -m",
    parse=parse,
    binaries=("free",),
    timeout=10.0,
    root=False,
    description="Host RAM and swap: total, used and available memory in MiB.",
    tags=("host-memory",),
)
