"""ip-link: every network interface's state, MTU and link type.

Command: ``ip -o link show`` (one line per interface), falling back to ``ip link show``.

Formats handled: iproute2's one-line form (``2: eth0: <...> mtu 1500 ... state UP ...\\
link/ether ...``), the two-line form (header, then an indented ``link/...`` line), header lines
without the leading index (as quoted in issues), and ``ip addr`` output (its ``inet``/``inet6``/
``valid_lft``/``altname`` lines are skipped).  ``name@parent`` (VLANs, veth pairs) is reported
under the interface's own name.

Findings: one ``net-link`` per interface header: interface, state (UP/DOWN/UNKNOWN/
LOWERLAYERDOWN/DORMANT...), mtu, kind (ether/infiniband/loopback/... from ``link/<kind>``),
admin_up (the UP flag) and carrier (LOWER_UP present; false on NO-CARRIER; absent when the
interface is administratively down).

Fixtures (tests/fixtures/ip-link, sources in SOURCES.jsonl there): eth0 with NO-CARRIER and a
VLAN in LOWERLAYERDOWN (ClusterLabs/resource-agents), loopback down and up inside a new network
namespace (Uberspace/pam_isolate).
"""

from __future__ import annotations

import re

from collectors.findings import Finding
from collectors.node import _text
from collectors.registry import Collector

NAME = "ip-link"

# "2: eth0: <BROADCAST,MULTICAST,UP,LOWER_UP> mtu 1500 qdisc mq state UP mode DEFAULT ..."
_HEADER = re.compile(r"^(?:(\d+):\s+)?([^\s:@]+)(?:@([^\s:]+))?:\s+<([^>]*)>(.*)$")
_MTU = re.compile(r"\bmtu (\d+)")
_STATE = re.compile(r"\bstate (\S+)")
_KIND = re.compile(r"\blink/(\S+)")
# Second lines of `ip link` / `ip addr` entries, and iproute2's own error messages.
_DETAIL = re.compile(r"^(?:link/|inet6? |valid_lft|altname |alias |vf \d|prop |RX:|TX:|\d+\s+\d+\s+\d+)")


def parse(text: str) -> tuple[list[Finding], list[str]]:
    findings: list[Finding] = []
    unparsed: list[str] = []
    if not text.strip():
        return [], [_text.note("empty output: ip printed no interfaces")]
    last: Finding | None = None
    for line_no, raw in _text.lines(text, ("ip",)):
        line = raw.strip()
        if not line:
            continue
        m = _HEADER.match(line)
        if m:
            flags = [f for f in m.group(4).split(",") if f]
            rest = m.group(5)
            attrs: dict = {"interface": m.group(2)}
            st = _STATE.search(rest)
            admin_up = "UP" in flags
            if st:
                attrs["state"] = st.group(1)
            else:  # very old iproute2 prints no "state"; derive it from the flags
                attrs["state"] = "UP" if admin_up and "LOWER_UP" in flags else "DOWN"
            mtu = _MTU.search(rest)
            if mtu:
                attrs["mtu"] = int(mtu.group(1))
            kind = _KIND.search(rest)  # present in the one-line (-o) form
            if kind:
                attrs["kind"] = kind.group(1)
            attrs["admin_up"] = admin_up
            if admin_up:
                attrs["carrier"] = "LOWER_UP" in flags and "NO-CARRIER" not in flags
            last = Finding(kind="net-link", attrs=attrs, line=line, line_no=line_no, source=NAME)
            findings.append(last)
            continue
        if _DETAIL.match(line):
            kind = _KIND.match(line)
            if kind and last is not None and "kind" not in last.attrs:
                last.attrs["kind"] = kind.group(1)
            continue
        unparsed.append(line)
    return findings, unparsed


COLLECTOR = Collector(
    name=NAME,
    command="ip -o link show 2>/dev/null || ip link show",
    parse=parse,
    binaries=("ip",),
    timeout=10.0,
    root=False,
    description="Network interfaces: state (UP/DOWN), carrier, MTU and link type (Ethernet, InfiniBand).",
    tags=("communication",),
)
