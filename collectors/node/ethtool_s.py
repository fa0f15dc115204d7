"""ethtool-S: NIC driver statistics of every network interface except loopback.

Command: a loop over /sys/class/net that prints ``== <iface>`` and then ``ethtool -S <iface>``.

Formats handled: ``NIC statistics:`` followed by ``name: value`` lines, including per-queue
counters prefixed ``[N]: `` (bnx2x, ...) and ``rxqN: `` / ``txqN: `` (be2net, ...); headers
``== iface`` from the loop, or a pasted ``ethtool -S iface`` command line; output with no header
at all is taken as one interface named ``unknown``.  Interfaces whose driver has no statistics
("no stats available", "Operation not supported") are reported as unparsed notes.

Findings: one ``nic-counter`` (device, counter, value, queue when per-queue) for every non-zero
counter whose name says error, drop, discard, CRC, symbol, FCS, jabber, overrun/overflow, missed
or link-down; traffic counters (bytes, packets, ...) are skipped.  Nothing is judged here: the
knowledge rules decide which counters matter.

Fixtures (tests/fixtures/ethtool-S, sources in SOURCES.jsonl there): a Broadcom bnx2x with
``[N]: `` queues (isc-projects/ethq) and an Emulex be2net with non-zero error counters and
``rxqN: `` queues (strizhechenko/netutils-linux).
"""

from __future__ import annotations

import re

from collectors.findings import Finding
from collectors.node import _text
from collectors.registry import Collector

NAME = "ethtool-S"

_HEADER = re.compile(r"^==\s*(\S+)\s*(?:==)?$")
_PASTED_CMD = re.compile(r"(?:^|\s)ethtool\s+(?:-S|--statistics)\s+(\S+)\s*$")
# "[3]: rx_discards: 0", "rxq0: rx_drops_no_skbs: 0", "rx_crc_errors: 0"
_COUNTER = re.compile(r"^(?:\[(\d+)\]:\s*|([rt]xq?\d+|q\d+|queue\d+|ch\d+):\s+)?([\w.\-\[\]/]+):\s*(-?\d+)$")
_NO_STATS = ("no stats available", "operation not supported", "cannot get stats", "no such device",
             "cannot get driver information", "command not found")
_ERRORISH = re.compile(r"err|drop|discard|crc|symbol|fcs|jabber|overrun|overflow|miss|link_down|"
                       r"out_of_buffer|underrun|timeout|collision|illegal|bad_|_bad|corrupt|fail", re.IGNORECASE)


def parse(text: str) -> tuple[list[Finding], list[str]]:
    findings: list[Finding] = []
    unparsed: list[str] = []
    if not text.strip():
        return [], [_text.note("empty output: no interfaces other than lo, or ethtool printed nothing")]
    iface = "unknown"
    for line_no, raw in _text.lines(text, ("ethtool",), commands=True):
        line = raw.strip()
        if not line:
            continue
        m = _HEADER.match(line) or _PASTED_CMD.search(line)
        if m:
            iface = m.group(1)
            continue
        if line.lower().startswith(("nic statistics", "statistics:")):
            continue
        low = line.lower()
        if any(w in low for w in _NO_STATS):
            unparsed.append(_text.note(f"{iface}: {line}"))
            continue
        m = _COUNTER.match(line)
        if not m:
            unparsed.append(line)
            continue
        queue = m.group(1) if m.group(1) is not None else m.group(2)
        name, value = m.group(3), int(m.group(4))
        if value == 0 or not _ERRORISH.search(name):
            continue
        attrs: dict = {"device": iface, "counter": name, "value": value}
        if queue is not None:
            attrs["queue"] = queue
        findings.append(Finding(kind="nic-counter", attrs=attrs, line=line, line_no=line_no, source=NAME))
    return findings, unparsed


COLLECTOR = Collector(
    name=NAME,
    command='for i in $(ls /sys/class/net); do [ "$i" = lo ] && continue; echo "== $i"; ethtool -S "$i" 2>&1; done',
    parse=parse,
    binaries=("ethtool",),
    timeout=20.0,
    root=False,
    description="NIC driver counters (ethtool -S) of every interface: non-zero error, drop, discard and "
    "CRC counters.",
    tags=("communication",),
)
