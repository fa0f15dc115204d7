"""Cross-node comparison: the node that is not like the others within one job.

Input is the findings of each node (after parsing its bundle files); output is node-mismatch
findings, one per odd node and property.  Majority rules: the nodes holding the most common
value are the reference and every other node is odd.  When the top values tie (2 nodes vs 2)
every side is reported, since nothing says which one is right.  Nodes that did not report a
property take no part ("could not check" is not a vote), and a property seen on fewer than two
nodes is not compared.

Compared: versions (driver, CUDA, NCCL, OFED, ... from version findings), the state of each IB
port, /dev/shm nearly full or much smaller than on the peers, GPU memory used far from the
job's median (more than 3 x MAD and more than 1 GiB away), and the number of GPUs.
"""

from __future__ import annotations

import statistics
from collections import Counter
from typing import Any, Hashable

from collectors.findings import Finding

SOURCE = "compare"
SHM_FULL_PCT = 90.0
SHM_SMALL_RATIO = 0.5  # smaller than half the job's median size
MAD_FACTOR = 3.0
MIN_MEMORY_GAP_MIB = 1024  # ignore spreads smaller than this, whatever the MAD


def _odd(values: dict[str, Hashable]) -> list[tuple[str, Hashable, list[Hashable]]]:
    """(node, its value, the other side's values) for each node off the majority."""
    if len(values) < 2:
        return []
    counts = Counter(values.values())
    if len(counts) < 2:
        return []
    ranked = counts.most_common()
    top = ranked[0][1]
    leaders = [value for value, n in ranked if n == top]
    out = []
    for node in sorted(values):
        value = values[node]
        if len(leaders) == 1:
            if value != leaders[0]:
                out.append((node, value, [leaders[0]]))
        else:
            others = [v for v, _ in ranked if v != value]
            out.append((node, value, others))
    return out


def _mismatch(node: str, what: str, value: Any, others: Any, evidence: Finding | None, **extra: Any) -> Finding:
    if isinstance(others, (list, tuple)):
        others = ", ".join(str(o) for o in others)
    attrs = {"what": what, "value": value, "others": others, **extra}
    return Finding(kind="node-mismatch", attrs=attrs, line=evidence.line if evidence else "",
                   line_no=None, node=node, source=SOURCE)


def _first(findings: list[Finding], kind: str) -> list[Finding]:
    return [f for f in findings if f.kind == kind]


def _versions(per_node: dict[str, list[Finding]]) -> list[Finding]:
    out = []
    components = sorted({f.attrs.get("component") for fs in per_node.values() for f in _first(fs, "version")
                         if f.attrs.get("component")})
    for component in components:
        values: dict[str, str] = {}
        evidence: dict[str, Finding] = {}
        for node, findings in per_node.items():
            seen = Counter(str(f.attrs["value"]) for f in _first(findings, "version")
                           if f.attrs.get("component") == component and f.attrs.get("value") is not None)
            if seen:
                values[node] = seen.most_common(1)[0][0]
                evidence[node] = next(f for f in findings if f.kind == "version"
                                      and f.attrs.get("component") == component
                                      and str(f.attrs.get("value")) == values[node])
        for node, value, others in _odd(values):
            out.append(_mismatch(node, component, value, others, evidence[node]))
    return out


def _ib_ports(per_node: dict[str, list[Finding]]) -> list[Finding]:
    out = []
    states: dict[tuple[str, str], dict[str, str]] = {}
    evidence: dict[tuple[str, str, str], Finding] = {}
    for node, findings in per_node.items():
        for f in _first(findings, "ib-port"):
            if f.attrs.get("device") is None or f.attrs.get("state") is None:
                continue
            key = (str(f.attrs["device"]), str(f.attrs.get("port", 1)))
            states.setdefault(key, {})[node] = str(f.attrs["state"])
            evidence[(node, *key)] = f
    flagged = set()
    for key in sorted(states):
        for node, value, others in _odd(states[key]):
            flagged.add(node)
            out.append(_mismatch(node, "ib-port", value, others, evidence[(node, *key)],
                                 device=key[0], port=key[1]))
    # Nodes built alike but with other HCA names (or captures from other machines) still differ
    # in how many ports are not Active: the only node with a port down is the odd one out.
    inactive: dict[str, int] = {}
    first_down: dict[str, Finding] = {}
    for node, findings in per_node.items():
        ports = [f for f in _first(findings, "ib-port") if f.attrs.get("state") is not None]
        if not ports:
            continue
        # a port a healthy node shows down (collectors.healthy: disabled, a spare Ethernet port) is not counted
        down = [f for f in ports if str(f.attrs["state"]).lower() != "active" and not f.normal]
        inactive[node] = len(down)
        if down:
            first_down[node] = down[0]
    for node, value, others in _odd(inactive):
        if node in flagged or not value or node not in first_down:
            continue
        f = first_down[node]
        out.append(_mismatch(node, "ib-port", f.attrs["state"], "all ports Active" if others[0] == 0 else f"{others[0]} ports not Active",
                             f, device=f.attrs.get("device"), port=f.attrs.get("port")))
    return out


def _shm(per_node: dict[str, list[Finding]]) -> list[Finding]:
    out = []
    used: dict[str, float] = {}
    size: dict[str, float] = {}
    evidence: dict[str, Finding] = {}
    for node, findings in per_node.items():
        shm = _first(findings, "shm-usage")
        if not shm:
            continue
        f = shm[0]
        evidence[node] = f
        if isinstance(f.attrs.get("used_pct"), (int, float)):
            used[node] = float(f.attrs["used_pct"])
        if isinstance(f.attrs.get("size_bytes"), (int, float)):
            size[node] = float(f.attrs["size_bytes"])
    full = {node: pct > SHM_FULL_PCT for node, pct in used.items()}
    for node, flag, _ in _odd(full):
        peers = [used[n] for n in used if full[n] != flag]
        out.append(_mismatch(node, "shm-used-pct", used[node], _num(statistics.median(peers)), evidence[node]))
    if len(size) >= 2:
        median = statistics.median(size.values())
        small = {node: value < SHM_SMALL_RATIO * median for node, value in size.items()}
        for node, flag, _ in _odd(small):
            peers = [size[n] for n in size if small[n] != flag]
            out.append(_mismatch(node, "shm-size-bytes", _num(size[node]), _num(statistics.median(peers)),
                                 evidence[node]))
    return out


def _num(value: float) -> int | float:
    return int(value) if float(value).is_integer() else round(value, 2)


def _gpus(findings: list[Finding]) -> dict[int, Finding]:
    """GPU index -> one gpu finding (the first source that reported it)."""
    out: dict[int, Finding] = {}
    for f in _first(findings, "gpu"):
        index = f.attrs.get("index")
        if isinstance(index, int) and index not in out:
            out[index] = f
    return out


def _gpu_memory(per_node: dict[str, list[Finding]]) -> list[Finding]:
    samples: list[tuple[str, int, float, Finding]] = []
    for node, findings in per_node.items():
        for index, f in sorted(_gpus(findings).items()):
            used = next((g.attrs["memory_used_mib"] for g in _first(findings, "gpu")
                         if g.attrs.get("index") == index and isinstance(g.attrs.get("memory_used_mib"), (int, float))),
                        None)
            if used is not None:
                samples.append((node, index, float(used), f))
    if len({s[0] for s in samples}) < 2:
        return []
    values = [s[2] for s in samples]
    median = statistics.median(values)
    mad = statistics.median(abs(v - median) for v in values)
    out = []
    for node, index, used, f in samples:
        gap = abs(used - median)
        if gap > MAD_FACTOR * mad and gap > MIN_MEMORY_GAP_MIB:
            out.append(_mismatch(node, "gpu-memory-used-mib", _num(used), _num(median), f, gpu=index))
    return out


def _gpu_count(per_node: dict[str, list[Finding]]) -> list[Finding]:
    counts: dict[str, int] = {}
    evidence: dict[str, Finding] = {}
    for node, findings in per_node.items():
        gpus = _gpus(findings)
        if gpus:
            counts[node] = len(gpus)
            evidence[node] = gpus[max(gpus)]
    return [_mismatch(node, "gpu-count", value, others, evidence[node]) for node, value, others in _odd(counts)]


def compare(per_node: dict[str, list[Finding]]) -> list[Finding]:
    """node-mismatch findings for a job's nodes; nothing for a single node."""
    if len(per_node) < 2:
        return []
    return (_versions(per_node) + _ib_ports(per_node) + _shm(per_node) + _gpu_memory(per_node)
            + _gpu_count(per_node))
