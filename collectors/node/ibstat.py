"""ibstat: the state of every InfiniBand / RoCE port on the node.

Command: ``ibstat`` (infiniband-diags / rdma-core).

Format handled: ``CA 'mlx5_0'`` blocks, each with ``Port N:`` sub-blocks of ``Key: value`` lines
(State, Physical state, Rate, Link layer, ...), as printed by infiniband-diags 1.x through
rdma-core 47+.  Indentation is not relied on (tabs, spaces, or none at all when a paste lost
it), so several CAs, cut-off blocks and the single-port form ``CA: 'mlx5_0'`` all parse.
``ibpanic:`` / ``ibwarn:`` errors (a CA that cannot be read, no IB devices) are reported as
unparsed notes; ports printed before the error are still returned.

Findings: one ``ib-port`` per port: device, port, state, phys_state, rate (Gb/s), link_layer,
base_lid, sm_lid, lmc and port_guid (when printed, not elided as ``...``).

Fixtures (tests/fixtures/ibstat, sources in SOURCES.jsonl there): Azure HPC VM with an ibpanic
(azhpc-diagnostics), H100 RoCE and IB nodes from gpud's test data and PR discussion, an AMD HDR
node (LustrePerfMon), ConnectX-7 RoCE (Mooncake) and bonded BlueField-3 (pplx-garden).
"""

from __future__ import annotations

import re

from collectors.findings import Finding
from collectors.node import _text
from collectors.registry import Collector

NAME = "ibstat"

_CA = re.compile(r"^CA:? '([^']+)'\s*$")
_PORT = re.compile(r"^Port (\d+):\s*$")
_FIELD = re.compile(r"^([A-Za-z][A-Za-z /]*?):\s*(.*)$")
_RATE = re.compile(r"^(\d+(?:\.\d+)?)")
_ERROR = re.compile(r"^(?:(?:ibpanic|ibwarn|iberror)\b|no (?:ib|infiniband|rdma) devices)", re.IGNORECASE)

_CA_FIELDS = {"ca type", "number of ports", "firmware version", "hardware version", "node guid",
              "system image guid"}
_PORT_FIELDS = {"state", "physical state", "rate", "base lid", "lmc", "sm lid", "capability mask",
                "port guid", "link layer"}


def _rate(value: str) -> int | float | None:
    m = _RATE.match(value.strip())
    if not m:
        return None
    num = float(m.group(1))
    return int(num) if num.is_integer() else num


def parse(text: str) -> tuple[list[Finding], list[str]]:
    findings: list[Finding] = []
    unparsed: list[str] = []
    if not text.strip():
        return [], [_text.note("empty output: ibstat printed nothing (no RDMA devices, or ibstat not installed)")]
    device: str | None = None
    port: Finding | None = None

    def close() -> None:
        nonlocal port
        if port is None:
            return
        if "state" in port.attrs or "phys_state" in port.attrs:
            findings.append(port)
        else:
            unparsed.append(f"{port.attrs['device']} port {port.attrs['port']}: no state printed (output cut?)")
        port = None

    for line_no, raw in _text.lines(text, ("ibstat",)):
        line = raw.strip()
        if not line:
            continue
        m = _CA.match(line)
        if m:
            close()
            device = m.group(1)
            continue
        if _ERROR.match(line):
            unparsed.append(_text.note(line))  # ibstat says what it could not read: not a parse failure
            continue
        m = _PORT.match(line)
        if m and device is not None:
            close()
            port = Finding(kind="ib-port", attrs={"device": device, "port": int(m.group(1))},
                           line=line, line_no=line_no, source=NAME)
            continue
        m = _FIELD.match(line)
        if m and device is not None:
            key, value = m.group(1).strip().lower(), m.group(2).strip()
            if port is not None and key in _PORT_FIELDS:
                if key == "state":
                    port.attrs["state"] = value
                    # The State line is the evidence: it is what reads "Down" when a port is down.
                    port.line, port.line_no = line, line_no
                elif key == "physical state":
                    port.attrs["phys_state"] = value
                elif key == "rate":
                    rate = _rate(value)
                    if rate is not None:
                        port.attrs["rate"] = rate
                elif key == "link layer":
                    port.attrs["link_layer"] = value
                elif key in ("base lid", "sm lid", "lmc") and value.isdigit():
                    port.attrs[key.replace(" ", "_")] = int(value)
                elif key == "port guid" and value.lower().startswith("0x"):
                    port.attrs["port_guid"] = value
                continue
            if key in _CA_FIELDS or key in _PORT_FIELDS:
                continue
        unparsed.append(line)
    close()
    return findings, unparsed


COLLECTOR = Collector(
    name=NAME,
    command="ibstat",
    parse=parse,
    binaries=("ibstat",),
    timeout=15.0,
    root=False,
    description="InfiniBand/RoCE ports: state, physical state, rate and link layer of every HCA port.",
    tags=("communication",),
)
