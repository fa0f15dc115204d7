"""`nvidia-smi --query-gpu=... --format=csv`: one gpu finding per row, plus throttle, PCIe link,
retired pages, remapped rows and the driver version where the columns are there.

The collector asks for a fixed column list without header or units; bundles made by hand or by
other tools often carry a header, with or without units (``memory.used [MiB]``), and other
columns.  A header is recognised and used when present; otherwise the collector's own column
list applies.  Without an ``index`` column the GPUs are numbered in row order (nvidia-smi prints
one row per GPU, in index order).  ``[N/A]`` and ``[Not Supported]`` read as missing, never as
zero; a decimal comma (``55,63 W``) reads as a point.
"""

from __future__ import annotations

import csv
import re

from collectors.findings import Finding
from collectors.node import _text
from collectors.node._nv import integer, is_missing, number, pcie_attrs, problem_reasons, \
    throttle_reasons, yes_no
from collectors.registry import Collector

NAME = "nvidia-smi-query"

FIELDS = (
    "index", "name", "pci.bus_id", "uuid", "serial", "driver_version", "memory.used", "memory.total",
    "utilization.gpu", "temperature.gpu", "power.draw", "ecc.errors.uncorrected.volatile.total",
    "ecc.errors.corrected.volatile.total", "clocks_throttle_reasons.active", "pcie.link.gen.current",
    "pcie.link.gen.max", "pcie.link.width.current", "pcie.link.width.max",
)

# Query field (and its aliases) -> key used below.
_ALIASES = {
    "index": "index", "name": "name", "gpu_name": "name",
    "pci.bus_id": "bus_id", "gpu_bus_id": "bus_id",
    "uuid": "uuid", "gpu_uuid": "uuid", "serial": "serial", "gpu_serial": "serial",
    "driver_version": "driver",
    "memory.used": "memory_used_mib", "memory.total": "memory_total_mib",
    "utilization.gpu": "utilization_pct", "temperature.gpu": "temperature_c",
    "power.draw": "power_w", "power.draw.instant": "power_w",
    "ecc.errors.uncorrected.volatile.total": "ecc_uncorrected",
    "ecc.errors.corrected.volatile.total": "ecc_corrected",
    "ecc.errors.uncorrected.aggregate.total": "ecc_uncorrected_aggregate",
    "ecc.errors.corrected.aggregate.total": "ecc_corrected_aggregate",
    "clocks_throttle_reasons.active": "throttle", "clocks_event_reasons.active": "throttle",
    "pcie.link.gen.current": "gen", "pcie.link.gen.gpucurrent": "gen",
    "pcie.link.gen.max": "max_gen", "pcie.link.gen.gpumax": "max_gen",
    "pcie.link.width.current": "width", "pcie.link.width.max": "max_width",
    "retired_pages.sbe": "sbe", "retired_pages.single_bit_ecc.count": "sbe",
    "retired_pages.dbe": "dbe", "retired_pages.double_bit.count": "dbe",
    "retired_pages.pending": "retire_pending",
    "remapped_rows.correctable": "remap_correctable", "remapped_rows.uncorrectable": "remap_uncorrectable",
    "remapped_rows.pending": "remap_pending", "remapped_rows.failure": "remap_failure",
    "fan.speed": "fan_pct", "memory.free": "memory_free_mib", "utilization.memory": "utilization_memory_pct",
    "power.limit": "power_limit_w", "enforced.power.limit": "power_limit_w", "pstate": "pstate",
    "compute_cap": "compute_cap", "vbios_version": "vbios", "driver_model.current": "driver_model",
    "clocks.sm": "clock_sm_mhz", "clocks.current.sm": "clock_sm_mhz", "clocks.mem": "clock_mem_mhz",
    "clocks.current.memory": "clock_mem_mhz", "temperature.memory": "memory_temperature_c",
    "compute_mode": "compute_mode", "persistence_mode": "persistence_mode",
}
_GPU_NUMBERS = ("memory_used_mib", "memory_total_mib", "utilization_pct", "temperature_c", "power_w",
                "ecc_uncorrected", "ecc_corrected", "fan_pct", "memory_free_mib", "utilization_memory_pct",
                "power_limit_w", "clock_sm_mhz", "clock_mem_mhz", "memory_temperature_c")
_FLOATS = ("power_w", "power_limit_w")
_GPU_TEXT = ("name", "bus_id", "uuid", "serial", "pstate", "compute_cap", "vbios", "driver_model", "compute_mode",
             "persistence_mode")
_HEADER_CELL = re.compile(r"^[a-z_][a-z0-9_.]*(?:\s*\[[^\]]*\])?$", re.I)


def _field(cell: str) -> str:
    return cell.split("[", 1)[0].strip().lower()


def _is_header(cells: list[str]) -> bool:
    return bool(cells) and all(_HEADER_CELL.match(c.strip()) for c in cells) and any(
        _field(c) in _ALIASES for c in cells)


def parse(text: str) -> tuple[list[Finding], list[str]]:
    findings: list[Finding] = []
    unparsed: list[str] = []
    columns: list[str] = [_ALIASES.get(f, f) for f in FIELDS]
    drivers: set[str] = set()
    header_seen = False
    rows_read = 0

    for no, raw in _text.lines(text, ("nvidia-smi",)):
        line = raw.strip()
        if not line:
            continue
        cells = [c.strip() for c in next(csv.reader([line], skipinitialspace=True), [])]
        if _is_header(cells):
            columns = [_ALIASES.get(_field(c), _field(c)) for c in cells]
            header_seen = True
            continue
        if len(cells) != len(columns):
            unparsed.append(raw)
            continue
        row = dict(zip(columns, cells))
        index = integer(row.get("index"))
        if index is None and header_seen and "index" not in columns:
            index = rows_read  # no index column: nvidia-smi prints one row per GPU in index order
        if index is None or (not header_seen and not row.get("bus_id", "").count(":")):
            unparsed.append(raw)
            continue
        rows_read += 1

        def add(kind: str, attrs: dict) -> None:
            findings.append(Finding(kind=kind, attrs=attrs, line=line, line_no=no, source=NAME))

        attrs: dict = {"index": index}
        for key in _GPU_TEXT:
            if key in row and not is_missing(row[key]):
                attrs[key] = row[key]
        for key in _GPU_NUMBERS:
            value = number(row.get(key))
            if value is not None:
                attrs[key] = int(value) if key not in _FLOATS else value
        add("gpu", attrs)

        driver = row.get("driver")
        if driver and not is_missing(driver) and driver not in drivers:
            drivers.add(driver)
            add("version", {"component": "driver", "value": driver})

        mask = integer(row.get("throttle")) if "throttle" in row else None
        reasons = throttle_reasons(mask) if mask is not None else []
        problems = problem_reasons(reasons)
        if problems:
            add("gpu-throttle", {"gpu": index, "reasons": ",".join(problems)})

        idle: bool | None = None
        if mask is not None:
            idle = "idle" in reasons
        elif "utilization_pct" in attrs:
            idle = attrs["utilization_pct"] == 0
        link = pcie_attrs(index, integer(row.get("gen")), integer(row.get("max_gen")),
                          integer(row.get("width")), integer(row.get("max_width")), idle)
        if link:
            add("pcie-link", link)

        pages = {k: integer(row.get(k)) for k in ("sbe", "dbe")}
        pages = {k: v for k, v in pages.items() if v is not None}
        pending = yes_no(row.get("retire_pending")) if "retire_pending" in row else None
        if pending is not None:
            pages["pending"] = pending
        if pages:
            add("retired-pages", {"gpu": index, **pages})

        remap: dict = {}
        for key, attr in (("remap_correctable", "correctable"), ("remap_uncorrectable", "uncorrectable")):
            value = integer(row.get(key))
            if value is not None:
                remap[attr] = value
        for key, attr in (("remap_pending", "pending"), ("remap_failure", "failure")):
            value = yes_no(row.get(key)) if key in row else None
            if value is not None:
                remap[attr] = value
        if remap:
            add("row-remap", {"gpu": index, **remap})

        for scope in ("", "_aggregate"):
            for kind_word, key in (("uncorrectable", "ecc_uncorrected"), ("correctable", "ecc_corrected")):
                count = integer(row.get(key + scope))
                if count:
                    add("ecc-error", {"type": kind_word, "gpu": index, "count": count,
                                      "counter": "aggregate" if scope else "volatile", "text": line})
    return findings, unparsed


COLLECTOR = Collector(
    name=NAME,
    command="nvidia-smi --query-gpu=" + ",".join(FIELDS) + " --format=csv,noheader,nounits",
    parse=parse,
    binaries=("nvidia-smi",),
    timeout=30.0,
    root=False,
    description="nvidia-smi --query-gpu CSV: per-GPU identity, memory, utilisation, temperature, power, "
    "volatile ECC, active throttle reasons, PCIe link generation/width against the maximum, driver",
    tags=("gpu",),
)
