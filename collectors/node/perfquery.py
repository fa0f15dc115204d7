"""perfquery: InfiniBand port error counters of the local HCA port.

Command: ``perfquery -x`` (extended 64-bit counters), falling back to plain ``perfquery``.

Formats handled: the header ``# Port extended counters: Lid N port N (CapMask: ...)`` or
``# Port counters: Lid N port N ...`` followed by ``Name:........value`` lines, from
infiniband-diags 1.6+ and rdma-core; the short counter names of older infiniband-diags
(``SymbolErrors``, ``LinkRecovers``, ``RcvErrors``, ``XmtDiscards``, ...) are mapped to the
current ones.  Several headers (several ports) are kept apart.  ``ibwarn``/``iberror`` lines
(no UMAD access, RoCE-only node) are reported as unparsed notes.

Findings: one ``nic-counter`` (device ``lid N port N``, counter, value) for each non-zero error
counter: SymbolErrorCounter, LinkErrorRecoveryCounter, LinkDownedCounter, PortRcvErrors,
PortRcvRemotePhysicalErrors, PortXmitDiscards, LocalLinkIntegrityErrors,
ExcessiveBufferOverrunErrors, VL15Dropped; and one ``ib-port-counters`` per port with its traffic
counters (xmit/rcv data, packets, unicast/multicast packets, xmit_wait), zero or not.

Fixture (tests/fixtures/perfquery, source in SOURCES.jsonl there): ``perfquery -x 10 1`` on an
idle RHEL 7.5 port, all counters 0 (linux-rdma/infiniband-diags#16).
"""

from __future__ import annotations

import re

from collectors.findings import Finding
from collectors.node import _text
from collectors.registry import Collector

NAME = "perfquery"

ERROR_COUNTERS = ("SymbolErrorCounter", "LinkErrorRecoveryCounter", "LinkDownedCounter", "PortRcvErrors",
                  "PortRcvRemotePhysicalErrors", "PortXmitDiscards", "LocalLinkIntegrityErrors",
                  "ExcessiveBufferOverrunErrors", "VL15Dropped")
# Names printed by infiniband-diags before 1.5.
_OLD_NAMES = {"SymbolErrors": "SymbolErrorCounter", "LinkRecovers": "LinkErrorRecoveryCounter",
              "LinkDowned": "LinkDownedCounter", "RcvErrors": "PortRcvErrors",
              "RcvRemotePhysErrors": "PortRcvRemotePhysicalErrors", "XmtDiscards": "PortXmitDiscards",
              "LinkIntegrityErrors": "LocalLinkIntegrityErrors", "ExcBufOverrunErrors": "ExcessiveBufferOverrunErrors"}

# Traffic counters -> (attr, scale); the data counters are reported as printed, in the counter's own unit.
_DATA_COUNTERS = {"PortXmitData": ("xmit_data", 1), "PortRcvData": ("rcv_data", 1),
                  "PortXmitPkts": ("xmit_pkts", 1), "PortRcvPkts": ("rcv_pkts", 1),
                  "PortUnicastXmitPkts": ("unicast_xmit_pkts", 1), "PortUnicastRcvPkts": ("unicast_rcv_pkts", 1),
                  "PortMulticastXmitPkts": ("multicast_xmit_pkts", 1),
                  "PortMulticastRcvPkts": ("multicast_rcv_pkts", 1), "PortXmitWait": ("xmit_wait", 1)}
_HEADER = re.compile(r"^#\s*Port (?:extended )?counters:\s*Lid (\d+) port (\d+)", re.IGNORECASE)
_COUNTER = re.compile(r"^(\w+):\.*\s*(0x[0-9a-fA-F]+|\d+)\s*$")
_ERROR = re.compile(r"^(?:ibwarn|iberror|ibpanic|perfquery:)", re.IGNORECASE)


def parse(text: str) -> tuple[list[Finding], list[str]]:
    findings: list[Finding] = []
    unparsed: list[str] = []
    if not text.strip():
        return [], [_text.note("empty output: perfquery printed nothing")]
    device = "local port"
    port: Finding | None = None  # the data counters of the current header's port

    def close() -> None:
        if port is not None and len(port.attrs) > 1:
            findings.append(port)

    for line_no, raw in _text.lines(text, ("perfquery",)):
        line = raw.strip()
        if not line:
            continue
        m = _HEADER.match(line)
        if m:
            close()
            device = f"lid {m.group(1)} port {m.group(2)}"
            port = Finding(kind="ib-port-counters", attrs={"device": device}, line=line, line_no=line_no,
                           source=NAME)
            continue
        if _ERROR.match(line):
            unparsed.append(_text.note(line))
            continue
        m = _COUNTER.match(line)
        if m:
            name = _OLD_NAMES.get(m.group(1), m.group(1))
            raw_value = m.group(2)
            value = int(raw_value, 16) if raw_value.startswith(("0x", "0X")) else int(raw_value)
            if name in _DATA_COUNTERS:
                if port is None:
                    port = Finding(kind="ib-port-counters", attrs={"device": device}, line=line, line_no=line_no,
                                   source=NAME)
                key, scale = _DATA_COUNTERS[name]
                port.attrs[key] = value * scale
            if name in ERROR_COUNTERS:
                if value:
                    findings.append(Finding(kind="nic-counter", attrs={"device": device, "counter": name,
                                                                       "value": value},
                                            line=line, line_no=line_no, source=NAME))
            continue
        if line.startswith("#"):
            continue  # a pasted command line or another comment
        unparsed.append(line)
    close()
    return findings, unparsed


COLLECTOR = Collector(
    name=NAME,
    command="perfquery -x 2>/dev/null || perfquery",
    parse=parse,
    binaries=("perfquery",),
    timeout=15.0,
    root=True,
    description="InfiniBand port error counters (symbol errors, link downed, receive errors, discards...).",
    tags=("communication",),
)
