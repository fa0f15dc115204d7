"""`nvidia-smi -q` (the -d ECC,ROW_REMAPPER,... subset, or the full report): per-GPU ECC counts,
remapped rows, retired pages, active clock throttle / clocks event reasons, PCIe link, temperature.

The report is an indented tree of ``Key : Value`` lines under ``GPU <bus id>`` headings.  It is
read into paths (``("ecc errors", "volatile", "dram uncorrectable")``) so that the spellings of
different drivers (``Ecc Mode``/``ECC Mode``, ``Clocks Throttle Reasons``/``Clocks Event
Reasons``, ``Retired pages``, the pre-Ampere ``Single Bit``/``Double Bit`` ECC tree) meet in one
place.  GPU indices are the order of the GPU sections (nvidia-smi lists them in PCI order).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from collectors.findings import Finding
from collectors.node import _text
from collectors.node._nv import THERMAL_REASONS, integer, is_missing, number, pcie_attrs, \
    problem_reasons, throttle_label, yes_no
from collectors.registry import Collector

NAME = "nvidia-smi-q"

_GPU_HEADING = re.compile(r"^GPU\s+(?P<bus>[0-9A-Fa-f]{4,8}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}\.[0-7])\s*$")
_KEY_VALUE = re.compile(r"^(?P<key>[^:]*?\S)\s*:\s?(?P<value>.*)$")
_BANNER = re.compile(r"^=+\s*NVSMI LOG\s*=+$")
_HEADING = re.compile(r"^[A-Za-z][\w .()/+-]*$")
_KNOWN = ("driver version", "cuda version", "attached gpus", "product name", "ecc errors", "remapped rows",
          "retired pages", "clocks throttle reasons", "clocks event reasons", "pci", "temperature",
          "fb memory usage", "serial number", "gpu uuid")


@dataclass
class _Entry:
    path: tuple[str, ...]
    value: str | None
    line: str
    line_no: int


@dataclass
class _Gpu:
    index: int
    bus_id: str | None
    line: str
    line_no: int
    entries: list[_Entry] = field(default_factory=list)

    def get(self, *path: str) -> _Entry | None:
        want = tuple(p.lower() for p in path)
        for entry in self.entries:
            if entry.path == want:
                return entry
        return None

    def under(self, *prefix: str) -> list[_Entry]:
        want = tuple(p.lower() for p in prefix)
        return [e for e in self.entries if e.path[: len(want)] == want and len(e.path) > len(want)]

    def first_section(self, *names: str) -> str | None:
        present = {e.path[0] for e in self.entries if e.path}
        for name in names:
            if name in present:
                return name
        return None


def _norm(key: str) -> str:
    return " ".join(key.lower().split())


def _read(text: str) -> tuple[dict[str, _Entry], list[_Gpu], list[str]]:
    """Top-level entries, GPU sections and the lines that fit neither."""
    top: dict[str, _Entry] = {}
    gpus: list[_Gpu] = []
    unparsed: list[str] = []
    stack: list[tuple[int, str]] = []  # (indent, heading) of open sections inside the GPU
    current: _Gpu | None = None
    lines = text.splitlines()
    for no, raw in _text.lines(text, ("nvidia-smi",)):
        line = raw.rstrip().expandtabs(4)
        stripped = line.strip()
        if not stripped or _BANNER.match(stripped):
            continue
        indent = len(line) - len(line.lstrip())
        heading = _GPU_HEADING.match(stripped)
        if heading and indent == 0:
            current = _Gpu(index=len(gpus), bus_id=heading.group("bus"), line=stripped, line_no=no)
            gpus.append(current)
            stack = []
            continue
        kv = _KEY_VALUE.match(stripped)
        if current is None and indent == 0 and kv:
            top[_norm(kv.group("key"))] = _Entry((_norm(kv.group("key")),), kv.group("value").strip(), stripped, no)
            continue
        if current is None:
            # An excerpt without its "GPU <bus id>" line: one GPU whose bus id is unknown.
            current = _Gpu(index=0, bus_id=None, line=stripped, line_no=no)
            gpus.append(current)
            stack = []
        while stack and stack[-1][0] >= indent:
            stack.pop()
        value = kv.group("value").strip() if kv else ""
        if kv and value:
            path = tuple(h for _, h in stack) + (_norm(kv.group("key")),)
            current.entries.append(_Entry(path, value, stripped, no))
            continue
        name = kv.group("key") if kv else stripped
        nxt = next((l.expandtabs(4) for l in lines[no:] if l.strip()), "")
        nxt_indent = len(nxt) - len(nxt.lstrip())
        if nxt_indent > indent and _HEADING.match(name):
            stack.append((indent, _norm(name)))
            current.entries.append(_Entry(tuple(h for _, h in stack), None, stripped, no))
            continue
        if kv:  # "Key :" with nothing after it
            current.entries.append(_Entry(tuple(h for _, h in stack) + (_norm(name),), "", stripped, no))
            continue
        unparsed.append(raw)
    return top, gpus, unparsed


def _ecc_counts(gpu: _Gpu, scope: str) -> tuple[int | None, int | None, _Entry | None, _Entry | None]:
    """(corrected, uncorrected) totals under ECC Errors/<scope>, with the lines that carried them."""
    corrected = uncorrected = None
    c_line = u_line = None
    entries = gpu.under("ecc errors", scope)
    old_style = any(len(e.path) > 2 and e.path[2] in ("single bit", "double bit") for e in entries)
    for entry in entries:
        if entry.value is None:
            continue
        count = integer(entry.value)
        if count is None:
            continue
        key = entry.path[-1]
        if old_style:
            if key != "total" or len(entry.path) < 4:
                continue
            is_unc = entry.path[2] == "double bit"
        else:
            if "uncorrectable" in key:
                is_unc = True
            elif "correctable" in key:
                is_unc = False
            else:
                continue
        if is_unc:
            uncorrected = (uncorrected or 0) + count
            if count and u_line is None:
                u_line = entry
        else:
            corrected = (corrected or 0) + count
            if count and c_line is None:
                c_line = entry
    return corrected, uncorrected, c_line, u_line


def parse(text: str) -> tuple[list[Finding], list[str]]:
    top, gpus, unparsed = _read(text)
    findings: list[Finding] = []
    known = set(top) | {e.path[0] for g in gpus for e in g.entries if e.path}
    if not any(k in known for k in _KNOWN) and not any(g.bus_id for g in gpus):
        # Nothing here looks like nvidia-smi -q: report every line rather than guess.
        return [], [l for l in text.splitlines() if l.strip()]

    def add(kind: str, attrs: dict, entry) -> None:
        findings.append(Finding(kind=kind, attrs=attrs, line=entry.line, line_no=entry.line_no, source=NAME))

    for key, component in (("driver version", "driver"), ("cuda version", "cuda")):
        entry = top.get(key)
        if entry and not is_missing(entry.value):
            add("version", {"component": component, "value": entry.value}, entry)

    for gpu in gpus:
        attrs: dict = {"index": gpu.index}
        bus = gpu.bus_id or (gpu.get("pci", "bus id").value if gpu.get("pci", "bus id") else None)
        if bus:
            attrs["bus_id"] = bus
        for path, key, conv in (
            (("product name",), "name", str), (("gpu uuid",), "uuid", str), (("serial number",), "serial", str),
            (("fb memory usage", "used"), "memory_used_mib", integer),
            (("fb memory usage", "total"), "memory_total_mib", integer),
            (("utilization", "gpu"), "utilization_pct", integer),
            (("temperature", "gpu current temp"), "temperature_c", integer),
            (("power readings", "power draw"), "power_w", number),
            (("gpu power readings", "power draw"), "power_w", number),
        ):
            entry = gpu.get(*path)
            if entry and not is_missing(entry.value):
                value = conv(entry.value)
                if value is not None:
                    attrs[key] = value
        v_corr, v_unc, _, _ = _ecc_counts(gpu, "volatile")
        if v_unc is not None:
            attrs["ecc_uncorrected"] = v_unc
        if v_corr is not None:
            attrs["ecc_corrected"] = v_corr
        procs = [e for e in gpu.under("processes") if e.path[-1] == "process id"]
        if procs or (gpu.get("processes") and (gpu.get("processes").value or "").lower() == "none"):
            attrs["processes"] = len(procs)
        if len(attrs) > 1:
            add("gpu", attrs, gpu)

        for scope in ("volatile", "aggregate"):
            corr, unc, c_line, u_line = _ecc_counts(gpu, scope)
            if unc:
                add("ecc-error", {"type": "uncorrectable", "gpu": gpu.index, "count": unc, "counter": scope,
                                  "text": u_line.line}, u_line)
            if corr:
                add("ecc-error", {"type": "correctable", "gpu": gpu.index, "count": corr, "counter": scope,
                                  "text": c_line.line}, c_line)

        remap_head = gpu.get("remapped rows")
        if remap_head:
            remap: dict = {"gpu": gpu.index}
            for key, attr, conv in (("correctable error", "correctable", integer),
                                    ("uncorrectable error", "uncorrectable", integer),
                                    ("pending", "pending", yes_no),
                                    ("remapping failure occurred", "failure", yes_no)):
                entry = gpu.get("remapped rows", key)
                value = conv(entry.value) if entry and not is_missing(entry.value) else None
                if value is not None:
                    remap[attr] = value
            # "Bank Remap Availability Histogram": how many memory banks have max/high/partial/low/no
            # spare rows left (NVIDIA: banks at Low or None are close to a failed remap)
            for level in ("max", "high", "partial", "low", "none"):
                entry = gpu.get("remapped rows", "bank remap availability histogram", level)
                m = re.match(r"\s*(\d+)", entry.value or "") if entry else None
                if m:
                    remap[f"banks_{level}"] = int(m.group(1))
            if len(remap) > 1:
                line = gpu.get("remapped rows", "pending") or remap_head
                if remap.get("uncorrectable") and gpu.get("remapped rows", "uncorrectable error"):
                    line = gpu.get("remapped rows", "uncorrectable error")
                add("row-remap", remap, line)

        retired = gpu.first_section("retired pages")
        if retired:
            pages: dict = {}
            for entry in gpu.under(retired):
                key = entry.path[-1]
                if entry.value is None or is_missing(entry.value):
                    continue
                if key.startswith("single bit"):
                    pages["sbe"] = integer(entry.value)
                elif key.startswith("double bit"):
                    pages["dbe"] = integer(entry.value)
                elif key.startswith("pending"):
                    pages["pending"] = yes_no(entry.value)
            pages = {k: v for k, v in pages.items() if v is not None}
            if pages:
                line = gpu.get(retired)
                hit = next((e for e in gpu.under(retired) if integer(e.value) or yes_no(e.value)), None)
                add("retired-pages", {"gpu": gpu.index, **pages}, hit or line)

        section = gpu.first_section("clocks event reasons", "clocks throttle reasons")
        if section:
            active = []
            for entry in gpu.under(section):
                name = throttle_label(entry.path[-1])
                if name and (entry.value or "").strip().lower() == "active":
                    active.append((name, entry))
            problems = problem_reasons([name for name, _ in active])
            if problems:
                first = next(e for n, e in active if n in problems)
                add("gpu-throttle", {"gpu": gpu.index, "reasons": ",".join(problems)}, first)
                for name, entry in active:
                    if name in THERMAL_REASONS:
                        add("thermal", {"gpu": gpu.index, "text": entry.line}, entry)
            idle = None if not any(throttle_label(e.path[-1]) == "idle" for e in gpu.under(section)) \
                else any(name == "idle" for name, _ in active)
        else:
            idle = None
        if idle is None and "utilization_pct" in attrs:
            idle = attrs["utilization_pct"] == 0

        def link_value(*path: str) -> int | None:
            entry = gpu.get("pci", "gpu link info", *path)
            return integer(entry.value) if entry else None

        link = pcie_attrs(gpu.index, link_value("pcie generation", "current"), link_value("pcie generation", "max"),
                          link_value("link width", "current"), link_value("link width", "max"), idle)
        if link:
            add("pcie-link", link, gpu.get("pci", "gpu link info", "link width", "current")
                or gpu.get("pci", "gpu link info", "pcie generation", "current"))
    return findings, unparsed


COLLECTOR = Collector(
    name=NAME,
    command="nvidia-smi -q -d ECC,ROW_REMAPPER,PAGE_RETIREMENT,PERFORMANCE,PCI,TEMPERATURE",
    parse=parse,
    binaries=("nvidia-smi",),
    timeout=60.0,
    root=False,
    description="nvidia-smi -q: ECC counts (volatile/aggregate), remapped rows (pending/failure), retired "
    "pages, active clock throttle reasons, PCIe link generation/width, temperature, driver/CUDA",
    tags=("gpu",),
)
