"""`nvidia-smi topo -m`: for every GPU, the nearest NIC and the kind of path to it.

The matrix is read by position: the header names the devices (``GPU0 .. GPUn``, ``NIC0 ..`` or,
on older drivers, the HCA names such as ``mlx4_0``), then come the affinity columns (``CPU
Affinity``, ``NUMA Affinity``, ``GPU NUMA ID``; older drivers print only the first).  Tabs,
runs of spaces and empty cells all separate the same way, so cells are whitespace-separated
tokens.  A row cut by a narrow terminal continues on the next line.  The ``NIC Legend``
(``NIC0: mlx5_0``) maps column names to HCA names.

Every GPU with at least one NIC yields a finding (a fact, not a verdict): knowledge rules decide
that ``NODE``/``SYS`` between a GPU and its NIC is a problem.
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


def parse(text: str) -> tuple[list[Finding], list[str]]:
    findings: list[Finding] = []
    unparsed: list[str] = []
    devices: list[str] = []
    labels: list[str] = []
    rows: dict[str, dict] = {}
    legend: dict[str, str] = {}
    last_row: dict | None = None
    in_legend = False

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
        if not devices:
            if tokens and _GPU.match(tokens[0]) and (len(tokens) == 1 or not _CELL.match(tokens[1])):
                devices, labels = _header_devices(tokens)
                continue
            unparsed.append(raw)
            continue
        name = tokens[0]
        if name in devices and len(tokens) > 1 and _CELL.match(tokens[1]):
            last_row = {"name": name, "cells": tokens[1:], "line": stripped, "line_no": no}
            rows[name] = last_row
            continue
        if last_row is not None and len(last_row["cells"]) < len(devices) and _CELL.match(name):
            last_row["cells"].extend(tokens)  # a row wrapped by the terminal
            last_row["line"] += " " + stripped
            continue
        if not rows and all(not _CELL.match(t) for t in tokens):
            more, more_labels = _header_devices(tokens)  # a wrapped header
            devices.extend(more)
            labels.extend(more_labels)
            continue
        unparsed.append(raw)

    nics = [d for d in devices if not _GPU.match(d)]
    if devices and not nics:
        unparsed.append("nvidia-smi topo -m shows no NICs: GPU-NIC affinity not applicable")
    for name, row in rows.items():
        gpu = _GPU.match(name)
        if not gpu or not nics:
            continue
        cells = row["cells"]
        links = {dev: cells[i] for i, dev in enumerate(devices) if i < len(cells) and _CELL.match(cells[i])}
        nic_links = [(dev, links[dev]) for dev in nics if dev in links and links[dev] != "X"]
        if not nic_links:
            unparsed.append(row["line"])
            continue
        best = min(_rank(link) for _, link in nic_links)
        nearest = [dev for dev, link in nic_links if _rank(link) == best]
        link = next(link for dev, link in nic_links if dev == nearest[0])
        attrs: dict = {"gpu": int(gpu.group(1)), "nic": legend.get(nearest[0], nearest[0]), "link": link,
                       "nics": ",".join(legend.get(n, n) for n in nearest)}
        extra = [c for c in cells[len(devices):]]
        for label, value in zip(labels, extra):
            if label == "CPU Affinity" and value != "N/A":
                attrs["cpu_affinity"] = value
            elif label == "NUMA Affinity" and value.isdigit():
                attrs["numa"] = int(value)
        findings.append(Finding(kind="gpu-nic-affinity", attrs=attrs, line=row["line"], line_no=row["line_no"],
                                source=NAME))
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
