"""NVML, read through pynvml on the node: what nvidia-smi shows, as numbers, per GPU.

The command runs ``collectors/nvml_probe.py`` with ``python3 -c`` (the node needs python3 and,
for a real answer, pynvml; nothing from gpu-triage).  Its JSON becomes gpu, row-remap,
ecc-error, pcie-link, gpu-throttle and gpu-process findings.  ``"not-checked"`` (no pynvml) and
``"error"`` (NVML would not start) give no findings and a note saying NVML was not checked:
that node has not been found healthy.
"""

from __future__ import annotations

import json
import shlex
from pathlib import Path

from collectors import nvml_probe
from collectors.findings import Finding
from collectors.node import _text
from collectors.node._nv import pcie_attrs, problem_reasons, throttle_reasons
from collectors.registry import Collector

NAME = "nvml"
PROBE = Path(__file__).resolve().parent.parent / "nvml_probe.py"


def command() -> str:
    """``python3 -c '<probe source>'``: the probe travels inside the command, nothing is copied."""
    return "python3 -c " + shlex.quote(PROBE.read_text(encoding="utf-8"))


def _load(text: str) -> dict | None:
    text = text.strip()
    if not text:
        return None
    try:
        data = json.loads(text)
    except ValueError:
        # Tolerate noise around the document (a warning printed before it): take the last JSON line.
        for candidate in reversed(text.splitlines()):
            candidate = candidate.strip()
            if candidate.startswith("{"):
                try:
                    data = json.loads(candidate)
                    break
                except ValueError:
                    continue
        else:
            return None
    return data if isinstance(data, dict) else None


def _dict(value) -> dict:
    return value if isinstance(value, dict) else {}


def _int(value) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def parse(text: str) -> tuple[list[Finding], list[str]]:
    data = _load(text)
    if data is None:
        lines = [l for l in text.splitlines() if l.strip()]
        return [], lines or [_text.note("NVML not checked: the probe printed nothing")]
    status = data.get("status")
    if status != "ok":
        reason = data.get("reason") or f"status {status!r}"
        return [], [_text.note(f"NVML not checked: {reason}")]

    findings: list[Finding] = []
    notes: list[str] = []

    def add(kind: str, attrs: dict, gpu: dict) -> None:
        line = json.dumps(gpu, sort_keys=True, separators=(",", ":"))
        findings.append(Finding(kind=kind, attrs=attrs, line=line, line_no=1, source=NAME))

    if isinstance(data.get("driver"), str) and data["driver"]:
        add("version", {"component": "driver", "value": data["driver"]}, {"driver": data["driver"]})
    gpus = data.get("gpus")
    if not isinstance(gpus, list):
        return findings, [f"NVML answer without a GPU list: {text.strip()[:200]}"]
    for gpu in gpus:
        if not isinstance(gpu, dict) or _int(gpu.get("index")) is None:
            notes.append(f"NVML entry not understood: {gpu!r}")
            continue
        index = gpu["index"]
        if gpu.get("error"):
            error = str(gpu["error"])
            if "lost" in error.lower() or "fallen off" in error.lower():
                add("gpu-lost", {"pci": gpu.get("bus_id", ""), "text": f"NVML GPU {index}: {error}"}, gpu)
            else:
                notes.append(f"NVML could not open GPU {index}: {error}")
            continue
        attrs: dict = {"index": index}
        for key in ("name", "uuid", "serial", "bus_id"):
            if isinstance(gpu.get(key), str) and gpu[key]:
                attrs[key] = gpu[key]
        for key in ("memory_used_mib", "memory_total_mib", "temperature_c"):
            if _int(gpu.get(key)) is not None:
                attrs[key] = gpu[key]
        ecc = _dict(gpu.get("ecc"))
        volatile = _dict(ecc.get("volatile"))
        if _int(volatile.get("uncorrected")) is not None:
            attrs["ecc_uncorrected"] = volatile["uncorrected"]
        if _int(volatile.get("corrected")) is not None:
            attrs["ecc_corrected"] = volatile["corrected"]
        processes = gpu.get("processes")
        if isinstance(processes, list):
            attrs["processes"] = len(processes)
        add("gpu", attrs, gpu)

        for scope in ("volatile", "aggregate"):
            counts = _dict(ecc.get(scope))
            for key, word in (("uncorrected", "uncorrectable"), ("corrected", "correctable")):
                if _int(counts.get(key)):
                    add("ecc-error", {"type": word, "gpu": index, "count": counts[key], "counter": scope,
                                      "text": f"NVML GPU {index} {scope} {key} ECC errors: {counts[key]}"}, gpu)

        rows = _dict(gpu.get("remapped_rows"))
        remap = {k: rows[k] for k in ("correctable", "uncorrectable") if _int(rows.get(k)) is not None}
        remap.update({k: rows[k] for k in ("pending", "failure") if isinstance(rows.get(k), bool)})
        if remap:
            add("row-remap", {"gpu": index, **remap}, gpu)

        mask = _int(gpu.get("throttle_reasons"))
        reasons = throttle_reasons(mask) if mask is not None else []
        problems = problem_reasons(reasons)
        if problems:
            add("gpu-throttle", {"gpu": index, "reasons": ",".join(problems)}, gpu)

        pcie = _dict(gpu.get("pcie"))
        idle = ("idle" in reasons) if mask is not None else None
        link = pcie_attrs(index, _int(pcie.get("gen")), _int(pcie.get("max_gen")), _int(pcie.get("width")),
                          _int(pcie.get("max_width")), idle)
        if link:
            add("pcie-link", link, gpu)

        for proc in processes if isinstance(processes, list) else []:
            if isinstance(proc, dict) and _int(proc.get("pid")) is not None:
                pattrs = {"gpu": index, "pid": proc["pid"]}
                if _int(proc.get("memory_mib")) is not None:
                    pattrs["memory_mib"] = proc["memory_mib"]
                add("gpu-process", pattrs, gpu)
        for key, error in _dict(gpu.get("errors")).items():
            notes.append(f"NVML GPU {index}: {key} not read ({error})")
    return findings, notes


COLLECTOR = Collector(
    name=NAME,
    command=command(),
    parse=parse,
    binaries=("python3",),
    local=nvml_probe.run_local,
    timeout=30.0,
    root=False,
    description="NVML through pynvml (probe sent inline): ECC counts, remapped rows, PCIe link against its "
    "maximum, throttle reasons, per-process GPU memory, temperature, serial and UUID per GPU",
    tags=("gpu",),
)
