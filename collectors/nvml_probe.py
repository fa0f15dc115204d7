"""NVML probe run on a node as ``python3 -c "<this file>"``: prints one JSON document.

It must stand alone (standard library plus pynvml, nothing from gpu-triage) because the node has
neither the package nor, often, pynvml.  ``probe(nvml)`` takes the NVML module as a parameter so
that tests pass a small fake; ``main()`` imports pynvml and prints the result.

Output: ``{"status": "ok", "driver": ..., "gpus": [{"index": 0, ...}]}``; ``{"status":
"not-checked", "reason": ...}`` when pynvml is missing; ``{"status": "error", "reason": ...}``
when NVML cannot start.  A value NVML refuses (NotSupported on a GeForce, for example) is left
out of the GPU's entry and its error goes to the entry's ``errors``.  The throttle reasons are
the raw NVML bitmask; the parser on the collecting side names the bits.
"""

import json
import sys


def _text(value):
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else str(value)


def probe(nvml):
    """Read the GPUs through ``nvml`` (the pynvml module, or a stand-in with the same names)."""
    try:
        nvml.nvmlInit()
    except Exception as exc:  # NVMLError: driver not loaded, no permission, library missing
        return {"status": "error", "reason": "nvmlInit failed: " + _text(exc)}
    out = {"status": "ok", "gpus": []}
    try:
        try:
            out["driver"] = _text(nvml.nvmlSystemGetDriverVersion())
        except Exception as exc:
            out["driver_error"] = _text(exc)
        try:
            count = nvml.nvmlDeviceGetCount()
        except Exception as exc:
            return {"status": "error", "reason": "nvmlDeviceGetCount failed: " + _text(exc)}
        for index in range(count):
            gpu = {"index": index}
            errors = {}
            out["gpus"].append(gpu)
            try:
                handle = nvml.nvmlDeviceGetHandleByIndex(index)
            except Exception as exc:
                gpu["error"] = _text(exc)
                continue
            try:
                _read_gpu(nvml, handle, gpu, errors)
            except Exception as exc:  # an answer of an unexpected shape: keep what was read
                errors["probe"] = type(exc).__name__ + ": " + _text(exc)
            if errors:
                gpu["errors"] = errors
    finally:
        try:
            nvml.nvmlShutdown()
        except Exception:
            pass
    return out


def _read_gpu(nvml, handle, gpu, errors):
    """Fill ``gpu`` with what NVML answers for ``handle``; refusals go to ``errors``."""
    corrected = getattr(nvml, "NVML_MEMORY_ERROR_TYPE_CORRECTED", 0)
    uncorrected = getattr(nvml, "NVML_MEMORY_ERROR_TYPE_UNCORRECTED", 1)
    volatile = getattr(nvml, "NVML_VOLATILE_ECC", 0)
    aggregate = getattr(nvml, "NVML_AGGREGATE_ECC", 1)
    temp_gpu = getattr(nvml, "NVML_TEMPERATURE_GPU", 0)
    reasons_fn = getattr(nvml, "nvmlDeviceGetCurrentClocksThrottleReasons", None) or getattr(
        nvml, "nvmlDeviceGetCurrentClocksEventReasons", None)

    def read(key, fn, *args):
        try:
            return fn(handle, *args)
        except Exception as exc:
            errors[key] = _text(exc)
            return None

    for key, name in (("name", "nvmlDeviceGetName"), ("uuid", "nvmlDeviceGetUUID"),
                      ("serial", "nvmlDeviceGetSerial")):
        fn = getattr(nvml, name, None)
        value = read(key, fn) if fn else None
        if value is not None:
            gpu[key] = _text(value)
    pci = read("bus_id", nvml.nvmlDeviceGetPciInfo) if hasattr(nvml, "nvmlDeviceGetPciInfo") else None
    if pci is not None:
        gpu["bus_id"] = _text(getattr(pci, "busId", ""))
    memory = read("memory", nvml.nvmlDeviceGetMemoryInfo) if hasattr(nvml, "nvmlDeviceGetMemoryInfo") else None
    if memory is not None:
        gpu["memory_used_mib"] = int(memory.used) // (1 << 20)
        gpu["memory_total_mib"] = int(memory.total) // (1 << 20)
    temperature = read("temperature", nvml.nvmlDeviceGetTemperature, temp_gpu)
    if temperature is not None:
        gpu["temperature_c"] = int(temperature)
    ecc = {}
    for scope, counter in (("volatile", volatile), ("aggregate", aggregate)):
        for kind, error_type in (("corrected", corrected), ("uncorrected", uncorrected)):
            value = read("ecc_" + scope + "_" + kind, nvml.nvmlDeviceGetTotalEccErrors, error_type, counter)
            if value is not None:
                ecc.setdefault(scope, {})[kind] = int(value)
    if ecc:
        gpu["ecc"] = ecc
    rows = read("remapped_rows", nvml.nvmlDeviceGetRemappedRows) \
        if hasattr(nvml, "nvmlDeviceGetRemappedRows") else None
    if rows is not None:
        corr, unc, pending, failure = rows
        gpu["remapped_rows"] = {"correctable": int(corr), "uncorrectable": int(unc),
                                "pending": bool(pending), "failure": bool(failure)}
    pcie = {}
    for key, name in (("gen", "nvmlDeviceGetCurrPcieLinkGeneration"),
                      ("max_gen", "nvmlDeviceGetMaxPcieLinkGeneration"),
                      ("width", "nvmlDeviceGetCurrPcieLinkWidth"),
                      ("max_width", "nvmlDeviceGetMaxPcieLinkWidth")):
        fn = getattr(nvml, name, None)
        value = read("pcie_" + key, fn) if fn else None
        if value is not None:
            pcie[key] = int(value)
    if pcie:
        gpu["pcie"] = pcie
    if reasons_fn is not None:
        mask = read("throttle_reasons", reasons_fn)
        if mask is not None:
            gpu["throttle_reasons"] = int(mask)
    procs = read("processes", nvml.nvmlDeviceGetComputeRunningProcesses)
    if procs is not None:
        gpu["processes"] = []
        for proc in procs:
            used = getattr(proc, "usedGpuMemory", None)
            entry = {"pid": int(proc.pid)}
            if used is not None:
                entry["memory_mib"] = int(used) // (1 << 20)
            gpu["processes"].append(entry)


def run_local():
    """The probe's JSON, computed in this process (``gpu-triage collect --local`` uses it, so the
    pynvml installed beside gpu-triage is used even when the system python3 lacks it)."""
    try:
        import pynvml
    except ImportError:
        result = {"status": "not-checked", "reason": "pynvml not installed"}
    else:
        result = probe(pynvml)
    return json.dumps(result, sort_keys=True) + "\n"


def main():
    sys.stdout.write(run_local())


if __name__ == "__main__":
    main()
