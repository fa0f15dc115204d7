"""Small helpers shared by the NVIDIA collectors (nvidia-smi table, --query-gpu, -q, NVML).

One place for: reading a number out of a field that may carry a unit or say N/A, the names of
clock throttle ("clocks event") reasons and their NVML bits, and the rule that decides when a
PCIe link counts as degraded.  Not a collector itself (no ``COLLECTOR``).
"""

from __future__ import annotations

import re

# Field values nvidia-smi and NVML print when a value does not exist on this GPU.
_MISSING = {"", "n/a", "[n/a]", "[not supported]", "not supported", "[unknown error]", "unknown error",
            "[gpu is lost]", "[insufficient permissions]", "err!", "-", "none"}

_NUMBER = re.compile(r"^[+-]?(?:\d+(?:[.,]\d+)?|\.\d+)")
_HEX = re.compile(r"^0x[0-9a-fA-F]+$")


def is_missing(value: str | None) -> bool:
    return value is None or value.strip().lower() in _MISSING


def number(value: str | None) -> int | float | None:
    """``'81559 MiB'`` -> 81559, ``'55.63 W'`` -> 55.63, ``'16x'`` -> 16, ``'[N/A]'`` -> None."""
    if value is None:
        return None
    text = value.strip()
    if is_missing(text):
        return None
    if _HEX.match(text):
        return int(text, 16)
    match = _NUMBER.match(text)
    if not match:
        return None
    digits = match.group(0).replace(",", ".")
    if "." in digits:
        return float(digits)
    return int(digits)


def integer(value: str | None) -> int | None:
    got = number(value)
    if got is None:
        return None
    return int(got)


def yes_no(value: str | None) -> bool | None:
    if value is None:
        return None
    text = value.strip().lower()
    if text in ("yes", "true", "1", "active", "enabled"):
        return True
    if text in ("no", "false", "0", "not active", "disabled", "none"):
        return False
    return None


# NVML clocks throttle / clocks event reason bits (nvml.h), with the names used in findings.
THROTTLE_BITS: tuple[tuple[int, str], ...] = (
    (0x001, "idle"),
    (0x002, "applications_clocks"),
    (0x004, "sw_power_cap"),
    (0x008, "hw_slowdown"),
    (0x010, "sync_boost"),
    (0x020, "sw_thermal_slowdown"),
    (0x040, "hw_thermal_slowdown"),
    (0x080, "hw_power_brake_slowdown"),
    (0x100, "display_clock"),
)

THERMAL_REASONS = frozenset({"sw_thermal_slowdown", "hw_thermal_slowdown"})

# `nvidia-smi -q` labels under "Clocks Throttle Reasons" / "Clocks Event Reasons".
_THROTTLE_LABELS = {
    "idle": "idle",
    "gpu idle": "idle",
    "applications clocks setting": "applications_clocks",
    "user defined clocks": "applications_clocks",
    "sw power cap": "sw_power_cap",
    "hw slowdown": "hw_slowdown",
    "sync boost": "sync_boost",
    "sw thermal slowdown": "sw_thermal_slowdown",
    "hw thermal slowdown": "hw_thermal_slowdown",
    "hw power brake slowdown": "hw_power_brake_slowdown",
    "display clock setting": "display_clock",
}


def throttle_label(label: str) -> str | None:
    return _THROTTLE_LABELS.get(" ".join(label.lower().split()))


def throttle_reasons(mask: int) -> list[str]:
    """Names of the reasons set in an NVML bitmask (unknown bits as ``bit_0x...``)."""
    names = [name for bit, name in THROTTLE_BITS if mask & bit]
    known = 0
    for bit, _ in THROTTLE_BITS:
        known |= bit
    rest = mask & ~known
    if rest:
        names.append(f"bit_{rest:#x}")
    return names


def problem_reasons(reasons: list[str]) -> list[str]:
    """Active reasons worth reporting: everything except the GPU simply being idle."""
    return [r for r in reasons if r != "idle"]


def pcie_attrs(gpu: int, gen: int | None, max_gen: int | None, width: int | None,
               max_width: int | None, idle: bool | None) -> dict | None:
    """Attributes of a pcie-link finding, or None when nothing was read.

    A narrower link than the maximum is degraded whatever the load.  A lower generation is
    normal on an idle GPU (the link trains down to save power), so it only counts as degraded
    when the GPU is known not to be idle.
    """
    if gen is None and width is None:
        return None
    attrs: dict = {"gpu": gpu}
    for key, value in (("gen", gen), ("max_gen", max_gen), ("width", width), ("max_width", max_width)):
        if value is not None:
            attrs[key] = value
    degraded = False
    if width is not None and max_width is not None and width < max_width:
        degraded = True
    if gen is not None and max_gen is not None and gen < max_gen and idle is False:
        degraded = True
    attrs["degraded"] = degraded
    return attrs
