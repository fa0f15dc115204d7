"""The healthy-node rules: facts that look alarming in a collector's output and are normal.

A node collector reports facts, and some facts read like faults to a rule that looks at one
finding at a time: ``State: Down`` on a port an administrator disabled, an Ethernet port left
unplugged on a host whose fabric is InfiniBand, a snap or squashfs image that is always 100 %
full, a GPU whose memory in use is the 0-1 MiB of an idle board.  :func:`mark` sets
``Finding.normal`` (the reason, in words) on those facts, per node, looking at the node's other
findings where the rule needs them.  A normal finding stays in the diagnosis (a reader still
sees every port), but it never supports a cause and is never cited as its evidence
(``knowledge.match``), and preflight does not count it against the node.

:func:`mark_mismatches` does the same for the cross-node comparison (``collectors.compare``):
a node that differs from its peers only by a normal fact (its disabled Ethernet ports, a port
that is Active, an idle GPU) is not the odd node out.

The rules, one function each:

* an Ethernet (RoCE) port whose physical state is ``Disabled``: disabled by an administrator, not
  a link that failed (a failing link polls, flaps or takes errors).  A disabled *InfiniBand* port
  is not excused: the subnet manager also disables ports that take errors, and either way the
  node has one rail fewer than its peers (preflight and the comparison name it);
* an Ethernet-link-layer port that is not Active on a host with at least one Active InfiniBand
  port: the job's fabric is InfiniBand; that port is a spare or management NIC;
* a filesystem that is a read-only image (squashfs, iso9660, udf, erofs, cramfs; snap mounts
  under ``/snap/``; loop devices): full by construction;
* a GPU using at most 1 MiB of memory with no process on it: idle, not short of memory.
"""

from __future__ import annotations

from typing import Callable, Iterable

from collectors.findings import Finding

READ_ONLY_IMAGES = frozenset({"squashfs", "iso9660", "udf", "erofs", "cramfs", "romfs"})
IDLE_GPU_MIB = 1


def _disabled_port(f: Finding, node: list[Finding]) -> str | None:
    if f.kind == "ib-port" and str(f.attrs.get("phys_state", "")).lower() == "disabled" \
            and str(f.attrs.get("link_layer", "")).lower() == "ethernet":
        return "Ethernet port administratively disabled (physical state Disabled), not a failed link"
    return None


def _spare_ethernet_port(f: Finding, node: list[Finding]) -> str | None:
    if f.kind != "ib-port" or str(f.attrs.get("link_layer", "")).lower() != "ethernet" \
            or str(f.attrs.get("state", "")).lower() == "active":
        return None
    if any(p.kind == "ib-port" and str(p.attrs.get("link_layer", "")).lower() == "infiniband"
           and str(p.attrs.get("state", "")).lower() == "active" for p in node):
        return "an Ethernet port beside Active InfiniBand ports: the fabric is InfiniBand, this port is not in use"
    return None


def _read_only_image(f: Finding, node: list[Finding]) -> str | None:
    if f.kind != "disk-usage":
        return None
    fstype = str(f.attrs.get("fstype", "")).lower()
    mount = str(f.attrs.get("mount", ""))
    device = str(f.attrs.get("device", ""))
    if fstype in READ_ONLY_IMAGES or mount.startswith("/snap/") or device.startswith("/dev/loop"):
        return "a read-only image (snap, squashfs, ISO): always 100 % full"
    return None


def _idle_gpu(f: Finding, node: list[Finding]) -> str | None:
    used = f.attrs.get("memory_used_mib")
    if f.kind == "gpu" and isinstance(used, (int, float)) and used <= IDLE_GPU_MIB \
            and not f.attrs.get("processes"):
        return f"GPU idle ({used:g} MiB in use, no process): nothing running, not short of memory"
    return None


def _netdev_state(f: Finding, node: list[Finding]) -> str | None:
    if f.kind == "ib-netdev":
        return ("ibdev2netdev's Up/Down is the network interface's (IPoIB, Ethernet), not the InfiniBand "
                "link's: a name map, not a fault (ibstat gives the link)")
    return None


RULES: tuple[Callable[[Finding, list[Finding]], str | None], ...] = (
    _disabled_port, _spare_ethernet_port, _read_only_image, _idle_gpu, _netdev_state,
)


def mark(findings: list[Finding]) -> list[Finding]:
    """Set ``normal`` on the healthy facts among one node's findings; returns the same list."""
    for f in findings:
        if f.normal:
            continue
        for rule in RULES:
            why = rule(f, findings)
            if why:
                f.normal = why
                break
    return findings


def mark_mismatches(mismatches: Iterable[Finding], per_node: dict[str, list[Finding]]) -> None:
    """A node-mismatch whose odd value is a normal fact (or an Active port) is normal too."""
    for m in mismatches:
        if m.kind != "node-mismatch" or m.normal:
            continue
        what = m.attrs.get("what")
        node = per_node.get(m.node or "", [])
        if what == "ib-port":
            if str(m.attrs.get("value", "")).lower() == "active":
                m.normal = "this node's port is Active; the peers differ, not this node"
                continue
            port = next((f for f in node if f.kind == "ib-port" and f.attrs.get("device") == m.attrs.get("device")
                         and str(f.attrs.get("port", 1)) == str(m.attrs.get("port", 1))), None)
            if port is not None and port.normal:
                m.normal = port.normal
        elif what == "gpu-memory-used-mib":
            gpu = next((f for f in node if f.kind == "gpu" and f.attrs.get("index") == m.attrs.get("gpu")
                        and f.normal), None)
            if gpu is not None:
                m.normal = gpu.normal
