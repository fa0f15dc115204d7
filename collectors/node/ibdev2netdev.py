"""ibdev2netdev: which network interface each RDMA device port is (MLNX_OFED / DOCA-OFED).

Command: ``ibdev2netdev`` (a script shipped with Mellanox/NVIDIA OFED; read-only).

Format handled: one line per port, ``mlx5_0 port 1 ==> ib0 (Up)``, columns aligned or not (``| column
-t``), with a trailing ``# comment`` a person may have added; prompts and elisions of a paste are
skipped (``_text.lines``).

Findings: one ``ib-netdev`` per port (device, port, netdev, state Up/Down). What it is for: the names
``NCCL_IB_HCA`` and ``NCCL_SOCKET_IFNAME`` take, side by side. What it is not: the state is the
network interface's (IPoIB or the Ethernet netdev), not the InfiniBand link's — on a pure-IB fabric
whose IPoIB interfaces are not configured every IB port reads ``(Down)`` while its link is Active
(ibstat says that), so these findings are facts, never evidence of a fault (collectors.healthy).

Fixtures: ``tests/fixtures/ibdev2netdev/`` (a real H100 node, 8 IB + 4 Ethernet ports).
"""

from __future__ import annotations

import re

from collectors.findings import Finding
from collectors.node import _text
from collectors.registry import Collector

NAME = "ibdev2netdev"
_ROW = re.compile(r"^(\S+)\s+port\s+(\d+)\s+==>\s+(\S+)\s+\((\w+)\)\s*(?:#.*)?$")


def parse(text: str) -> tuple[list[Finding], list[str]]:
    findings: list[Finding] = []
    unparsed: list[str] = []
    if not text.strip():
        return [], [_text.note("empty output: ibdev2netdev printed nothing (no RDMA device, or no OFED)")]
    for line_no, raw in _text.lines(text, (NAME,)):
        line = raw.strip()
        m = _ROW.match(line)
        if m:
            findings.append(Finding(kind="ib-netdev", attrs={"device": m.group(1), "port": int(m.group(2)),
                                                             "netdev": m.group(3), "state": m.group(4)},
                                    line=line, line_no=line_no, source=NAME))
            continue
        unparsed.append(line)
    return findings, unparsed


COLLECTOR = Collector(
    name=NAME,
    command="ibdev2netdev",
    parse=parse,
    binaries=("ibdev2netdev",),
    timeout=10.0,
    root=False,
    description="RDMA device ports and their network interfaces (ibdev2netdev): the names NCCL_IB_HCA and "
    "NCCL_SOCKET_IFNAME take.",
    tags=("communication",),
)
