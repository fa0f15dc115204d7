"""ibstatus: the other common tool for the state of every InfiniBand / RoCE port.

Command: ``ibstat >/dev/null 2>&1 || ibstatus``: ibstatus runs where ibstat cannot read every CA
(an ``ibpanic`` on one device, ibstat not installed), so the node's ports are still read; where
ibstat works this prints nothing and the ports come from the ``ibstat`` collector.

Format handled: the ``ibstatus`` script of infiniband-diags / rdma-core, one block per port::

    Infiniband device 'mlx5_0' port 1 status:
            default gid:     fe80:0000:0000:0000:0015:5dff:fd34:11eb
            base lid:        0x33bf
            sm lid:          0x1
            state:           4: ACTIVE
            phys state:      5: LinkUp
            rate:            200 Gb/sec (4X HDR)
            link_layer:      InfiniBand

with or without indentation (a paste that lost it), cut blocks, and a rate line cut short.  The
numeric codes are the InfiniBand port states (1 DOWN, 2 INIT, 3 ARMED, 4 ACTIVE) and physical
states (2 Polling, 3 Disabled, 5 LinkUp, ...); states are reported with ibstat's spelling
(``Active``, ``Down``, ``Initializing``, ``Armed``) so that both tools give the same finding.

Findings: one ``ib-port`` per port: device, port, state, phys_state, rate (Gb/s), width (``4X``),
speed (``HDR``), link_layer, base_lid, sm_lid and gid.

Fixtures (tests/fixtures/ibstatus, sources in SOURCES.jsonl there): an Azure VM's accelerated-
networking port, pasted without indentation and cut (azhpc-diagnostics), and an A100 node with
eight HDR InfiniBand ports and one Ethernet port (gpud's test data).
"""

from __future__ import annotations

import re

from collectors.findings import Finding
from collectors.node import _text
from collectors.registry import Collector

NAME = "ibstatus"

_HEAD = re.compile(r"^Infiniband device '([^']+)' port (\d+) status:?\s*$", re.IGNORECASE)
_FIELD = re.compile(r"^(default gid|base lid|sm lid|state|phys state|rate|link_layer)\s*:\s*(.*)$", re.IGNORECASE)
_CODED = re.compile(r"^(\d+):\s*(\S+)")
_RATE = re.compile(r"^(\d+(?:\.\d+)?)\s*Gb/sec(?:\s*\((\d+X)\s*([A-Z]+)?\)?)?", re.IGNORECASE)
# ibstatus prints the port state in capitals; ibstat spells the same states this way.
_STATES = {"DOWN": "Down", "INIT": "Initializing", "ARMED": "Armed", "ACTIVE": "Active",
           "ACTIVE_DEFER": "ActiveDefer", "NOP": "Nop"}


def _lid(value: str) -> int | None:
    try:
        return int(value, 0)
    except ValueError:
        return None


def parse(text: str) -> tuple[list[Finding], list[str]]:
    findings: list[Finding] = []
    unparsed: list[str] = []
    port: Finding | None = None

    def close() -> None:
        nonlocal port
        if port is not None:
            if "state" in port.attrs or "phys_state" in port.attrs:
                findings.append(port)
            else:
                unparsed.append(_text.note(f"{port.attrs['device']} port {port.attrs['port']}: no state printed "
                                           "(output cut?)"))
        port = None

    for line_no, raw in _text.lines(text, ("ibstatus",)):
        line = raw.strip()
        head = _HEAD.match(line)
        if head:
            close()
            port = Finding(kind="ib-port", attrs={"device": head.group(1), "port": int(head.group(2))},
                           line=line, line_no=line_no, source=NAME)
            continue
        field = _FIELD.match(line)
        if field and port is not None:
            key, value = field.group(1).lower(), field.group(2).strip()
            coded = _CODED.match(value)
            if key == "state":
                name = coded.group(2) if coded else value
                port.attrs["state"] = _STATES.get(name.upper(), name)
                port.line, port.line_no = line, line_no  # the state line is what reads "DOWN"
            elif key == "phys state":
                port.attrs["phys_state"] = coded.group(2) if coded else value
            elif key == "rate":
                rate = _RATE.match(value)
                if rate:
                    num = float(rate.group(1))
                    port.attrs["rate"] = int(num) if num.is_integer() else num
                    if rate.group(2):
                        port.attrs["width"] = rate.group(2).upper()
                    if rate.group(3):
                        port.attrs["speed"] = rate.group(3).upper()
                elif value:
                    unparsed.append(raw)
            elif key == "link_layer":
                port.attrs["link_layer"] = value
            elif key in ("base lid", "sm lid"):
                lid = _lid(value)
                if lid is not None:
                    port.attrs[key.replace(" ", "_")] = lid
            elif key == "default gid" and value.lower() != "unknown":
                port.attrs["gid"] = value
            continue
        unparsed.append(raw)
    close()
    if not findings and not unparsed and text.strip():
        unparsed.append(_text.note("ibstatus printed no port"))
    return findings, unparsed


COLLECTOR = Collector(
    name=NAME,
    command="ibstat >/dev/null 2>&1 || ibstatus",
    parse=parse,
    binaries=("ibstatus",),
    timeout=15.0,
    root=False,
    description="InfiniBand/RoCE ports read by ibstatus where ibstat cannot read every device: state, "
    "physical state, rate, width, speed and link layer.",
    tags=("communication",),
)
