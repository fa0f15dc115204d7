"""`nvidia-smi topo -m`: for every GPU, the nearest NIC and the kind of path to it.

The matrix is read by position: the header names the devices (``GPU0 .. GPUn``, ``NIC0 ..`` or,
on older drivers, the HCA names such as ``mlx4_0``), then come the affinity columns (``CPU
Affinity``, ``NUMA Affinity``, ``GPU NUMA ID``; older drivers print only the first).  Tabs,
runs of spaces and empty cells all separate the same way, so cells are whitespace-separated
tokens.  A row cut by a narrow terminal continues on the next line.  The ``NIC Legend``
(``NIC0: mlx5_0``) maps column names to HCA names.

Rows pasted without their header line are read by position: each row's ``X`` is its own column,
so a NIC row (``NIC0 ...``) says where the NIC columns start, and the affinity columns follow in
the order every driver prints them.

Findings (facts, not verdicts; knowledge rules decide that ``NODE``/``SYS`` between a GPU and its
NIC is a problem): one ``gpu-topology`` for the matrix (gpus, nics, nvlink width such as ``NV12``
and its link count, the farthest GPU-to-GPU path, NIC names, whether the header was there); one
``gpu-affinity`` per GPU row (CPU and NUMA affinity, GPU NUMA ID, its NVLink width and peers);
one ``gpu-nic-affinity`` per GPU with at least one NIC (the nearest NIC and the path to it).
"""

from __future__ import annotations

import re

from collectors.findings import Finding
from collectors.node import _text
from collectors.registry import Collector

NAME = "nvidia-smi-topo"

# Nearest first.  NV# (NVLink) and the rarer C2C/NVB/SOC sort by their place here.
_RANK = {"X": -1, "NV": 0, "C2C": 0, "PIX": 1, "PXB": 2, "NVB": 2, "PHB": 3, "NODE": 4, "SOC": 5, "SYS": 5}
_CELL = re.compile(r"^(X|NV\d+|PIX|PXB|PHB|NODE|SYS|SOC|NVB|C2C|N/A)$")
_AFFINITY_LABELS = ("CPU Affinity", "NUMA Affinity", "GPU NUMA ID")
_LEGEND = re.compile(r"^\s*(?P<col>NIC\d+)\s*:\s*(?P<name>\S+)\s*$")
_LEGEND_LINE = re.compile(r"^\s*(X|SYS|NODE|PHB|PXB|PIX|NV#|NVB|SOC|C2C)\s*=")
_GPU = re.compile(r"^GPU(\d+)$")


def _rank(link: str) -> int:
    if link.startswith("NV") and link[2:].isdigit():
        return _RANK["NV"]
    return _RANK.get(link, 9)


def _header_devices(tokens: list[str]) -> tuple[list[str], list[str]]:
    """Split header tokens into device columns and affinity column labels."""
    devices: list[str] = []
    rest = " ".join(tokens)
    for i, token in enumerate(tokens):
        tail = " ".join(tokens[i:])
        if any(tail.startswith(label) for label in _AFFINITY_LABELS):
            rest = tail
            break
        devices.append(token)
    else:
        rest = ""
    labels = [label for label in _AFFINITY_LABELS if label in rest]
    labels.sort(key=rest.index)
    return devices, labels


_ROW_NAME = re.compile(r"^(?:GPU\d+|NIC\d+|mlx\d+_\d+|[a-z]+\d*_\d+)$")
_NV = re.compile(r"^NV(\d+)$")


def _headerless_devices(rows: dict[str, dict]) -> list[str]:
    """Column names for rows pasted without their header: each row's ``X`` sits in its own column,
    so a NIC row tells how many GPU columns come before the NICs; GPU rows alone say at least
    how many GPUs there are."""
    width = max(len(_link_cells(r["cells"])) for r in rows.values())
    gpus = 0
    for name, row in rows.items():
        cells = _link_cells(row["cells"])
        if "X" not in cells:
            continue
        at = cells.index("X")
        nic = re.match(r"^NIC(\d+)$", name)
        if nic:
            return [f"GPU{i}" for i in range(at - int(nic.group(1)))] + \
                [f"NIC{i}" for i in range(width - at + int(nic.group(1)))]
        if _GPU.match(name):
            # NV# only ever joins two GPUs: the last NVLink cell is a GPU column too
            nv = [i for i, c in enumerate(cells) if _NV.match(c)]
            gpus = max(gpus, at + 1, int(_GPU.match(name).group(1)) + 1, (nv[-1] + 1) if nv else 0)
    gpus = min(gpus, width) if gpus else width
    return [f"GPU{i}" for i in range(gpus)] + [f"NIC{i}" for i in range(width - gpus)]


def _link_cells(cells: list[str]) -> list[str]:
    out = []
    for c in cells:
        if not _CELL.match(c) or c == "N/A":
            break
        out.append(c)
    return out


def parse(text: str) -> tuple[list[Finding], list[str]]:
    findings: list[Finding] = []
    unparsed: list[str] = []
    devices: list[str] = []
    labels: list[str] = []
    rows: dict[str, dict] = {}
    legend: dict[str, str] = {}
    last_row: dict | None = None
    in_legend = False
    header = True

    for no, raw in _text.lines(text, ("nvidia-smi",)):
        line = raw.rstrip()
        stripped = line.strip()
        if not stripped:
            continue
        if stripped.startswith(("Legend", "NIC Legend")):
            in_legend = True
            continue
        legend_entry = _LEGEND.match(line)
        if legend_entry and in_legend:
            legend[legend_entry.group("col")] = legend_entry.group("name")
            continue
        if in_legend and _LEGEND_LINE.match(line):
            continue
        tokens = stripped.split()
        if not devices and not rows:
            if tokens and _GPU.match(tokens[0]) and (len(tokens) == 1 or not _CELL.match(tokens[1])):
                devices, labels = _header_devices(tokens)
                continue
        name = tokens[0]
        if (name in devices or (not devices and _ROW_NAME.match(name))) and len(tokens) > 1 \
                and _CELL.match(tokens[1]):
            last_row = {"name": name, "cells": tokens[1:], "line": stripped, "line_no": no}
            rows[name] = last_row
            continue
        if last_row is not None and len(_link_cells(last_row["cells"])) < len(devices) and _CELL.match(name):
            last_row["cells"].extend(tokens)  # a row wrapped by the terminal
            last_row["line"] += " " + stripped
            continue
        if devices and not rows and all(not _CELL.match(t) for t in tokens):
            more, more_labels = _header_devices(tokens)  # a wrapped header
            devices.extend(more)
            labels.extend(more_labels)
            continue
        unparsed.append(raw)

    if rows and not devices:
        # rows pasted without their header line: columns by position, affinity columns in the
        # order every driver prints them
        header = False
        devices = _headerless_devices(rows)
        labels = list(_AFFINITY_LABELS)
    nics = [d for d in devices if not _GPU.match(d)]
    gpus = [d for d in devices if _GPU.match(d)]
    first = next(iter(rows.values()), None)
    peer_links: list[str] = []
    for name, row in rows.items():
        gpu = _GPU.match(name)
        if not gpu:
            continue
        cells = row["cells"]
        links = {dev: cells[i] for i, dev in enumerate(devices) if i < len(cells) and _CELL.match(cells[i])}
        extra = cells[len(devices):]
        row_attrs: dict = {"gpu": int(gpu.group(1))}
        for label, value in zip(labels, extra):
            if label == "CPU Affinity" and value != "N/A":
                row_attrs["cpu_affinity"] = value
            elif label == "NUMA Affinity" and value.isdigit():
                row_attrs["numa"] = int(value)
            elif label == "GPU NUMA ID" and value.isdigit():
                row_attrs["gpu_numa_id"] = int(value)
        peers = [links[d] for d in gpus if d != name and d in links and links[d] != "X"]
        peer_links += peers
        nv = [int(_NV.match(p).group(1)) for p in peers if _NV.match(p)]
        if nv:
            row_attrs.update(nvlink=f"NV{min(nv)}", nvlink_links=min(nv), nvlink_peers=len(nv))
        if peers:
            row_attrs["peer_link"] = max(peers, key=_rank)
        findings.append(Finding(kind="gpu-affinity", attrs=row_attrs, line=row["line"], line_no=row["line_no"],
                                source=NAME))
        nic_links = [(dev, links[dev]) for dev in nics if dev in links and links[dev] != "X"]
        if not nic_links:
            continue
        best = min(_rank(link) for _, link in nic_links)
        nearest = [dev for dev, link in nic_links if _rank(link) == best]
        link = next(link for dev, link in nic_links if dev == nearest[0])
        attrs: dict = {"gpu": int(gpu.group(1)), "nic": legend.get(nearest[0], nearest[0]), "link": link,
                       "nics": ",".join(legend.get(n, n) for n in nearest)}
        for key in ("cpu_affinity", "numa"):
            if key in row_attrs:
                attrs[key] = row_attrs[key]
        findings.append(Finding(kind="gpu-nic-affinity", attrs=attrs, line=row["line"], line_no=row["line_no"],
                                source=NAME))
    if first is not None:
        summary: dict = {"gpus": len(gpus), "nics": len(nics), "header": header}
        nv = [int(_NV.match(p).group(1)) for p in peer_links if _NV.match(p)]
        if nv:
            summary.update(nvlink=f"NV{min(nv)}", nvlink_links=min(nv))
        if peer_links:
            summary["peer_link"] = max(peer_links, key=_rank)
        if nics:
            summary["nic_names"] = ",".join(legend.get(n, n) for n in nics)
        findings.insert(0, Finding(kind="gpu-topology", attrs=summary, line=first["line"],
                                   line_no=first["line_no"], source=NAME))
    return findings, unparsed


COLLECTOR = Collector(
    name=NAME,
    command="nvidia-smi topo -m",
    parse=parse,
    binaries=("nvidia-smi",),
    timeout=30.0,
    root=False,
    description="nvidia-smi topo -m: for each GPU the nearest NIC (HCA name from the NIC legend) and the "
    "PCIe/NVLink path to it (PIX/PXB/PHB/NODE/SYS), with CPU and NUMA affinity",
    tags=("gpu", "network"),
)
