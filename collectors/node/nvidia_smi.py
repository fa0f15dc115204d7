"""`nvidia-smi` default table: driver and CUDA versions, one gpu finding per GPU, processes.

Reads the boxed table of current drivers (``|   0  NVIDIA H100 80GB HBM3   On  | 00000000:19:00.0 Off | 0 |``)
and of older ones (narrower cells, names cut with ``...``), and the failure messages nvidia-smi
prints instead of a table when a GPU is gone or the driver is not loaded.
"""

from __future__ import annotations

import re

from collectors.findings import Finding
from collectors.node import _text
from collectors.node._nv import integer
from collectors.registry import Collector

NAME = "nvidia-smi"

_HEADER = re.compile(r"NVIDIA-SMI\s+(?P<smi>\S+)?.*?Driver Version:\s*(?P<driver>[\w.]+)"
                     r"(?:.*?CUDA Version:\s*(?P<cuda>[\w.]+))?", re.I)
_BUS_ID = re.compile(r"(?P<bus>[0-9A-Fa-f]{4,8}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}\.[0-7])")
_GPU_CELL = re.compile(r"^\s*(?P<index>\d+)\s+(?P<name>\S.*?)\s+(?P<persist>On|Off|TCC|WDDM|N/A)\s*$")
_TEMP_CELL = re.compile(r"^\s*(?P<fan>\S+)\s+(?P<temp>\d+|N/A|ERR!)C?\s+(?P<perf>P\d+|\S+)")
_MEM_CELL = re.compile(r"^\s*(?P<used>\d+|N/A)\s*MiB\s*/\s*(?P<total>\d+|N/A)\s*MiB\s*$")
_UTIL_CELL = re.compile(r"^\s*(?P<util>\d+|N/A|ERR!)\s*%")
_POWER = re.compile(r"(?P<draw>\d+|N/A|ERR!)\s*W\s*/\s*(?P<cap>\d+|N/A|ERR!)\s*W")
# |    0   N/A  N/A   123456      C   python                     10240MiB |  (GI/CI columns since R450)
_PROCESS = re.compile(r"^\|\s*(?P<gpu>\d+)\s+(?:(?:N/A|\d+)\s+(?:N/A|\d+)\s+)?(?P<pid>\d+)\s+"
                      r"(?P<type>C\+G|M\+C|C|G|M)\s+(?P<name>\S.*?)\s+(?P<mem>\d+|N/A)\s*(?:MiB)?\s*\|?\s*$")
_HANDLE = re.compile(r"Unable to determine the device handle for GPU\s*(?P<bus>[0-9A-Fa-f:.]+)\s*:\s*(?P<why>.*)", re.I)
_NO_DEVICES = re.compile(r"No devices were found", re.I)
_FAILED = re.compile(r"NVIDIA-SMI has failed because (?P<why>.*)", re.I)
_LOST = re.compile(r"GPU is lost|fallen off the bus", re.I)
_TIMESTAMP = re.compile(r"^\w{3} \w{3}\s+\d+ \d\d:\d\d:\d\d \d{4}\s*$")
_STRUCTURAL = re.compile(r"^[\s+|=\-]*$")


def _cells(line: str) -> list[str]:
    return [c for c in line.strip().strip("|").split("|")]


def parse(text: str) -> tuple[list[Finding], list[str]]:
    findings: list[Finding] = []
    unparsed: list[str] = []
    gpus: dict[int, Finding] = {}
    current: Finding | None = None
    in_processes = False
    saw_process_table = False
    process_counts: dict[int, int] = {}

    def add(kind: str, attrs: dict, line: str, no: int) -> Finding:
        finding = Finding(kind=kind, attrs=attrs, line=line.strip(), line_no=no, source=NAME)
        findings.append(finding)
        return finding

    for no, raw in _text.lines(text, ("nvidia-smi",)):
        line = raw.rstrip()
        if not line.strip() or _STRUCTURAL.match(line) or _TIMESTAMP.match(line.strip()):
            continue
        header = _HEADER.search(line)
        if header:
            add("version", {"component": "driver", "value": header.group("driver")}, line, no)
            if header.group("cuda"):
                add("version", {"component": "cuda", "value": header.group("cuda")}, line, no)
            continue
        handle = _HANDLE.search(line)
        if handle:
            bus = handle.group("bus").rstrip(":")
            add("gpu-lost", {"pci": bus, "text": line.strip()}, line, no)
            continue
        if _NO_DEVICES.search(line):
            add("gpu-lost", {"text": line.strip()}, line, no)
            continue
        failed = _FAILED.search(line)
        if failed:
            if _LOST.search(line):
                add("gpu-lost", {"text": line.strip()}, line, no)
            else:
                unparsed.append(_text.note(f"nvidia-smi could not check the GPUs: {line.strip()}"))
            continue
        if "Processes:" in line:
            in_processes = True
            saw_process_table = True
            continue
        if in_processes:
            proc = _PROCESS.match(line.strip())
            if proc:
                gpu = int(proc.group("gpu"))
                process_counts[gpu] = process_counts.get(gpu, 0) + 1
                attrs = {"gpu": gpu, "pid": int(proc.group("pid")), "name": proc.group("name"),
                         "type": proc.group("type")}
                mem = integer(proc.group("mem"))
                if mem is not None:
                    attrs["memory_mib"] = mem
                add("gpu-process", attrs, line, no)
                continue
            if line.strip().startswith("|"):
                continue  # column titles, "No running processes found"
            unparsed.append(line)
            continue
        if line.strip().startswith("|"):
            cells = _cells(line)
            gpu_cell = _GPU_CELL.match(cells[0]) if cells else None
            bus = _BUS_ID.search(cells[1]) if len(cells) > 1 else None
            if gpu_cell and bus:
                index = int(gpu_cell.group("index"))
                attrs = {"index": index, "name": gpu_cell.group("name").strip(), "bus_id": bus.group("bus")}
                if gpu_cell.group("persist") in ("On", "Off"):
                    attrs["persistence_mode"] = gpu_cell.group("persist")
                if len(cells) > 2:
                    ecc = integer(cells[2])
                    if ecc is not None:
                        attrs["ecc_uncorrected"] = ecc
                current = add("gpu", attrs, line, no)
                gpus[index] = current
                if "ERR!" in line or _LOST.search(line):
                    add("gpu-lost", {"pci": bus.group("bus"), "text": line.strip()}, line, no)
                continue
            if current is not None and len(cells) >= 2:
                mem = _MEM_CELL.match(cells[1])
                if mem:
                    temp = _TEMP_CELL.match(cells[0])
                    if temp and integer(temp.group("temp")) is not None:
                        current.attrs["temperature_c"] = integer(temp.group("temp"))
                    if temp and integer(temp.group("fan")) is not None:
                        current.attrs["fan_pct"] = integer(temp.group("fan"))
                    if temp and re.fullmatch(r"P\d+", temp.group("perf")):
                        current.attrs["pstate"] = temp.group("perf")
                    power = _POWER.search(cells[0])
                    if power and integer(power.group("draw")) is not None:
                        current.attrs["power_w"] = integer(power.group("draw"))
                    if power and integer(power.group("cap")) is not None:
                        current.attrs["power_limit_w"] = integer(power.group("cap"))
                    for key in ("used", "total"):
                        value = integer(mem.group(key))
                        if value is not None:
                            current.attrs[f"memory_{key}_mib"] = value
                    util = _UTIL_CELL.match(cells[2]) if len(cells) > 2 else None
                    if util and integer(util.group("util")) is not None:
                        current.attrs["utilization_pct"] = integer(util.group("util"))
                    mode = re.search(r"\b(Default|E\. Process|E\. Thread|Prohibited)\s*$", cells[2]) \
                        if len(cells) > 2 else None
                    if mode:
                        current.attrs["compute_mode"] = mode.group(1)
                    if "ERR!" in line and not any(f.kind == "gpu-lost" and f.attrs.get("pci") ==
                                                  current.attrs["bus_id"] for f in findings):
                        add("gpu-lost", {"pci": current.attrs["bus_id"], "text": line.strip()}, line, no)
                    current = None  # later rows (MIG device tables) are not this GPU's
                    continue
            # Other table rows: column titles, MIG mode, MIG device tables.
            continue
        unparsed.append(line)

    if saw_process_table:
        for index, gpu in gpus.items():
            gpu.attrs["processes"] = process_counts.get(index, 0)
    return findings, unparsed


COLLECTOR = Collector(
    name=NAME,
    command="nvidia-smi",
    parse=parse,
    binaries=("nvidia-smi",),
    timeout=30.0,
    root=False,
    description="nvidia-smi default table: driver/CUDA versions, per-GPU memory, utilisation, "
    "temperature, volatile uncorrected ECC and compute processes; GPUs nvidia-smi cannot reach",
    tags=("gpu",),
)
