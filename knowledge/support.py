"""Which support tier is worth paying for, why, the cost drivers, and (with a rate card) an estimate.

The entry names a base tier; the evidence can move it (``adjust_tier``):

* GPU evidence sets the tier NVIDIA's resolution bucket calls for (``hardware_tier``): an XID to
  ignore or an application restart (a contained XID 94, a pending remap's XID 63, XID 92) →
  ``self``; a GPU reset → ``remote``; a reboot, a reseat or the ECC/NVLink workflows, a GPU fallen
  off the bus (XID 79, GPU lost) → ``onsite`` first; a failed row remap (XID 64 or
  ``Remapping Failure Occurred: Yes``) → ``vendor``. Repeats on the same GPU or node, repeated
  uncorrectable errors included (``knowledge.escalation``) → ``vendor`` (bot.engine);
* physical link evidence → at least ``onsite`` (cables, optics, switch ports need hands): an
  InfiniBand port down/polling on an InfiniBand link layer, or a rising physical-layer counter
  (symbol errors, link recoveries, link downs). A completion error alone does not: on RoCE it is
  as often a GID index or routing setting that is fixed remotely;
* shared-memory findings → ``self`` (a container flag or a DataLoader setting).

Rates are the team's configuration (a YAML rate card); nothing here ships market prices.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Sequence

import yaml

from collectors.findings import Finding

TIER_ORDER = ("self", "remote", "onsite", "vendor")


class RateCardError(Exception):
    """The rate card cannot be used; the message names the file, key and fix."""


# NVIDIA's resolution bucket for an XID (shared/reference/xid-catalog.csv) -> the least tier it needs.
# Restart-the-application and ignore buckets need nobody; a GPU reset, and NVIDIA's XID 48 workflow
# (drain, reset, check the remap), need an administrator; a reboot or power cycle, a reseat or the
# NVLink workflows need hands at the node first. The vendor (RMA) is for a board that keeps failing:
# a row remap that failed (XID 64), or repeats (knowledge.escalation).
BUCKET_TIER = {
    "RESET_GPU": "remote",
    "RESTART_BM": "onsite",
    "CHECK_MECHANICALS": "onsite",
    "WORKFLOW_XID_48": "remote",
    "WORKFLOW_NVLINK_ERR": "onsite",
    "WORKFLOW_NVLINK5_ERR": "onsite",
}


def _xid_row(code: Any) -> dict[str, Any] | None:
    try:
        from knowledge.xid_catalog import XID
    except ImportError:  # the generated catalog is missing
        return None
    return XID.get(code) if isinstance(code, int) else None


def _above(a: str, b: str) -> bool:
    return TIER_ORDER.index(a) > TIER_ORDER.index(b)


# XIDs whose code alone is an RMA case whatever the bucket says: 64, a row remap that failed
# (NVML: a remapping failure means the GPU has run out of spare rows)
VENDOR_XIDS = {64: "XID 64: a row remap failed, the GPU has no spare rows left and needs replacing"}
# physical-layer counters: a cable, optic or port, not a setting
PHYSICAL_COUNTERS = ("SymbolErrorCounter", "LinkErrorRecoveryCounter", "LinkDownedCounter",
                     "LocalLinkIntegrityErrors", "PortRcvRemotePhysicalErrors", "ExcessiveBufferOverrunErrors")


def hardware_tier(findings: Sequence[Finding]) -> tuple[str, str] | None:
    """The tier the GPU evidence itself calls for, with the reason; None without such evidence."""
    tier: str | None = None
    why = ""
    for f in findings:
        if f.kind == "row-remap" and f.attrs.get("failure"):
            return "vendor", "a row remap failed: the GPU has no spare rows left and needs replacing"
        if f.kind == "xid" and f.attrs.get("code") in VENDOR_XIDS:
            return "vendor", VENDOR_XIDS[f.attrs["code"]]
        if f.kind == "xid":
            row = _xid_row(f.attrs.get("code"))
            if row is None:
                continue
            want = BUCKET_TIER.get(row["bucket"], "self")
            if tier is None or _above(want, tier):
                bucket = row["bucket"].lower().replace("_", " ")
                tier, why = want, f"XID {f.attrs.get('code')}: NVIDIA's resolution bucket is {bucket}"
        elif f.kind == "gpu-lost" and (tier is None or _above("onsite", tier)):
            tier, why = "onsite", "a GPU fell off the bus: a reboot and reseat come before an RMA"
    return (tier, why) if tier else None


def _count(value: Any) -> int:
    try:
        return int(str(value).replace(",", ""))
    except ValueError:
        return 0


def physical_link_fault(findings: Sequence[Finding]) -> bool:
    """A port down/polling on an InfiniBand link layer, or a physical-layer error counter above zero."""
    for f in findings:
        if f.kind == "ib-port" and str(f.attrs.get("state", "")).lower() in ("down", "polling") \
                and str(f.attrs.get("link_layer", "")).lower() != "ethernet":
            return True
        if f.kind == "nic-counter" and f.attrs.get("counter") in PHYSICAL_COUNTERS and _count(f.attrs.get("value")) > 0:
            return True
    return False


def adjust_tier(base: str, category: str, findings: Sequence[Finding]) -> tuple[str, str | None]:
    """Return (tier, reason for the change or None)."""
    if category == "gpu-hardware":
        hw = hardware_tier(findings)
        if hw is None or hw[0] == base:
            return base, None
        return hw
    if category == "communication" and physical_link_fault(findings):
        if _above("onsite", base):
            return "onsite", "a physical link fault (port down on InfiniBand, or rising symbol/link-down counters): " \
                             "a cable, optic or switch port needs hands on site"
        return base, None
    if category == "shared-memory" and base != "self":
        return "self", "shared-memory limits are a container or DataLoader setting the team controls"
    return base, None


@dataclass
class JobShape:
    """What the evidence says about the job: its GPU count and network, each with its basis.

    ``gpus_basis`` says where the count came from (``given``: --gpus; ``nranks``: NCCL's communicator
    size; ``world-size``: WORLD_SIZE / world_size / torchelastic's global world size; ``ranks-seen``:
    the distinct ranks that printed, a lower bound, so ``gpus_exact`` is False). ``network_basis``
    is the transport line it was read from.
    """

    gpus: int | None = None
    gpus_basis: str | None = None
    gpus_exact: bool = False
    network: str | None = None  # infiniband | roce | ethernet
    network_basis: str | None = None


_NRANKS = re.compile(r"\bnranks (\d+)\b")
_WORLD = re.compile(r"\b(?:world[_ ]size|global_world_sizes?)\s*[:=]?\s*\[?(\d+)", re.IGNORECASE)
# NCCL's "NET/IB : Using [0]mlx5_0:1/RoCE [1]mlx5_1:1/IB ..." names each device's link layer
_NET_DEV = re.compile(r"\[\d+\]\w+:\d+/(IB|RoCE)\b")
_ROCE = re.compile(r"\bRoCE(?:v2)?\b|\bNCCL_IB_GID_INDEX\b")
_IB = re.compile(r"\bNET/IB\b|\bInfiniBand\b", re.IGNORECASE)
_SOCKET = re.compile(r"\bNET/Socket\b")


def job_shape(lines: Sequence[Any], findings: Sequence[Finding], gpus: int | None = None) -> JobShape:
    shape = JobShape()
    if gpus:
        shape.gpus, shape.gpus_basis, shape.gpus_exact = gpus, "given", True
    nranks = world = None
    ranks: set[int] = set()
    dev_layers: set[str] = set()
    roce = ib = sock = None
    for line in lines[:20000]:
        text = getattr(line, "text", "")
        rank = getattr(line, "rank", None)
        if rank is not None:
            ranks.add(rank)
        if "nranks" in text:
            m = _NRANKS.search(text)
            if m:
                nranks = max(nranks or 0, int(m.group(1)))
        low = text.lower()
        if "world" in low:
            m = _WORLD.search(text)
            if m and int(m.group(1)) > 0:
                world = max(world or 0, int(m.group(1)))
        # each search only where a literal every match holds is on the line (a warning's path has a "/")
        if "/IB" in text or "/RoCE" in text:
            dev_layers.update(_NET_DEV.findall(text))
        if roce is None and ("RoCE" in text or "NCCL_IB_GID_INDEX" in text) and _ROCE.search(text):
            roce = text
        if ib is None and ("net/ib" in low or "infiniband" in low) and _IB.search(text):
            ib = text
        if sock is None and "NET/Socket" in text and _SOCKET.search(text):
            sock = text
    ranks.update(f.rank for f in findings if f.rank is not None)
    if shape.gpus is None:
        if nranks:
            shape.gpus, shape.gpus_basis, shape.gpus_exact = nranks, "nranks", True
        elif world:
            shape.gpus, shape.gpus_basis, shape.gpus_exact = world, "world-size", True
        elif ranks:
            shape.gpus, shape.gpus_basis = max(len(ranks), max(ranks) + 1), "ranks-seen"
    ib_found = any(f.kind in ("ib-error",) for f in findings)
    if dev_layers == {"RoCE"} or (roce is not None and "IB" not in dev_layers):
        shape.network, shape.network_basis = "roce", "roce-devices" if dev_layers else "roce-config"
    elif "IB" in dev_layers or ib is not None or ib_found:
        shape.network, shape.network_basis = "infiniband", "ib-devices" if dev_layers else "net-ib"
    elif sock is not None:
        shape.network, shape.network_basis = "ethernet", "net-socket"
    return shape


def drivers_text(drivers: Sequence[str], shape: JobShape) -> list[dict[str, Any]]:
    out = []
    for d in drivers:
        item: dict[str, Any] = {"driver": d}
        if d == "gpu-count" and shape.gpus:
            item["value"] = shape.gpus
            item["basis"] = shape.gpus_basis
            item["exact"] = shape.gpus_exact
        if d == "network" and shape.network:
            item["value"] = shape.network
            item["basis"] = shape.network_basis
        out.append(item)
    return out


@dataclass
class RateCard:
    currency: str
    gpu_hour_cost: float
    tiers: dict[str, dict[str, float]]
    regions: dict[str, dict[str, Any]] = field(default_factory=dict)
    example: bool = False

    @classmethod
    def load(cls, path: str | Path) -> "RateCard":
        p = Path(path)
        try:
            data = yaml.safe_load(p.read_text(encoding="utf-8"))
        except OSError as exc:
            raise RateCardError(f"cannot read the rate card {p}: {exc.strerror}; check --rate-card") from exc
        except yaml.YAMLError as exc:
            mark = getattr(exc, "problem_mark", None)
            raise RateCardError(f"{p}:{mark.line + 1 if mark else 1}: not valid YAML") from exc
        if not isinstance(data, dict):
            raise RateCardError(f"{p}: a rate card is a mapping with currency, gpu_hour_cost and tiers")
        for key in ("currency", "gpu_hour_cost", "tiers"):
            if key not in data:
                raise RateCardError(f"{p}: missing key '{key}' (see deploy/rate-card.example.yaml)")
        if not isinstance(data["gpu_hour_cost"], (int, float)) or data["gpu_hour_cost"] < 0:
            raise RateCardError(f"{p}: gpu_hour_cost must be a number >= 0 (cost of one GPU for one hour)")
        tiers = data["tiers"]
        if not isinstance(tiers, dict) or set(tiers) - set(TIER_ORDER):
            raise RateCardError(f"{p}: tiers must be a mapping with keys from {', '.join(TIER_ORDER)}")
        for name, tier in tiers.items():
            if not isinstance(tier, dict) or not all(isinstance(v, (int, float)) for v in tier.values()):
                raise RateCardError(f"{p}: tiers.{name} must map names (hourly, hours, travel ...) to numbers")
        return cls(currency=str(data["currency"]), gpu_hour_cost=float(data["gpu_hour_cost"]), tiers=tiers,
                   regions=data.get("regions") or {}, example=bool(data.get("example", False)))

    def estimate(self, tier: str, gpus: int | None, region: str | None = None,
                 gpus_exact: bool = True) -> dict[str, Any] | None:
        """The tier's fee and the waiting it implies: while the tier resolves the failure (``hours``),
        the job's GPUs sit idle, so the cost is fee + GPUs x gpu_hour_cost x hours. A GPU count that
        is only a lower bound (ranks seen) makes the waiting cost a lower bound too."""
        t = dict(self.tiers.get(tier) or {})
        if region:
            if region not in self.regions:
                raise RateCardError(f"region {region!r} is not in the rate card; known: "
                                    f"{', '.join(sorted(self.regions)) or 'none'}")
            t.update((self.regions[region].get("tiers") or {}).get(tier) or {})
        if not t:
            return None
        hours = float(t.get("hours", 0))
        fee = float(t.get("fixed", 0)) + float(t.get("hourly", 0)) * hours + float(t.get("travel", 0))
        out: dict[str, Any] = {"currency": self.currency, "tier_cost": round(fee, 2),
                               "expected_hours": hours, "example_rates": self.example}
        if gpus:
            idle = gpus * self.gpu_hour_cost
            out["gpus"] = gpus
            out["gpus_at_least"] = not gpus_exact
            out["idle_cost_per_hour"] = round(idle, 2)
            out["idle_cost_while_waiting"] = round(idle * hours, 2)
            out["total_cost"] = round(fee + idle * hours, 2)
        return out
