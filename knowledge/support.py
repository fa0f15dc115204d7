"""Which support tier is worth paying for, why, the cost drivers, and (with a rate card) an estimate.

The entry names a base tier; the evidence can move it (``adjust_tier``):

* a hardware XID, a GPU lost from the bus, uncorrectable ECC or failed row remapping → ``vendor``
  (warranty/RMA: nobody else can replace the part);
* an InfiniBand port down/polling or IB completion errors → at least ``onsite`` (cables, optics,
  switch ports need hands in the data hall);
* shared-memory findings → ``self`` (a container flag or a DataLoader setting).

Rates are the team's configuration (a YAML rate card); nothing here ships market prices.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Sequence

import yaml

from collectors.findings import Finding

TIER_ORDER = ("self", "remote", "onsite", "vendor")


class RateCardError(Exception):
    """The rate card cannot be used; the message names the file, key and fix."""


def _hardware_xid(code: Any) -> bool:
    try:
        from knowledge.xid_catalog import XID
    except ImportError:  # the generated catalog is missing: be conservative
        return False
    row = XID.get(code) if isinstance(code, int) else None
    return bool(row and row.get("hardware"))


def adjust_tier(base: str, category: str, findings: Sequence[Finding]) -> tuple[str, str | None]:
    """Return (tier, reason for the change or None)."""
    kinds = {f.kind for f in findings}
    hw_xids = sorted({f.attrs.get("code") for f in findings if f.kind == "xid" and _hardware_xid(f.attrs.get("code"))})
    if category == "gpu-hardware" and (hw_xids or "gpu-lost" in kinds or any(
            f.kind == "ecc-error" and f.attrs.get("type") == "uncorrectable" for f in findings) or any(
            f.kind == "row-remap" and f.attrs.get("failure") for f in findings)):
        if base != "vendor":
            what = f"hardware XID {', '.join(map(str, hw_xids))}" if hw_xids else "a hardware fault"
            return "vendor", f"{what} in the evidence: a part may need replacing under warranty"
        return base, None
    if category == "communication" and ("ib-error" in kinds or any(
            f.kind == "ib-port" and str(f.attrs.get("state", "")).lower() in ("down", "polling", "disabled")
            for f in findings)):
        if TIER_ORDER.index(base) < TIER_ORDER.index("onsite"):
            return "onsite", "InfiniBand port or completion errors: a cable, optic or switch port needs hands on site"
    if category == "shared-memory" and base != "self":
        return "self", "shared-memory limits are a container or DataLoader setting the team controls"
    return base, None


@dataclass
class JobShape:
    """What the log says about the job: GPU count and network type."""

    gpus: int | None = None
    network: str | None = None  # infiniband | roce | ethernet


def job_shape(lines: Sequence[Any], findings: Sequence[Finding], gpus: int | None = None) -> JobShape:
    ranks = [line.rank for line in lines if getattr(line, "rank", None) is not None]
    ranks += [f.rank for f in findings if f.rank is not None]
    world = None
    for line in lines:
        text = getattr(line, "text", "")
        low = text.lower()
        if "world_size" in low or "world size" in low:
            import re

            m = re.search(r"world[_ ]size\s*[:=]?\s*(\d+)", low)
            if m:
                world = max(world or 0, int(m.group(1)))
    shape = JobShape(gpus=gpus or world or ((max(ranks) + 1) if ranks else None))
    blob = " ".join(getattr(l, "text", "") for l in lines[:5000]).lower()
    if "roce" in blob or "gid index" in blob:
        shape.network = "roce"
    elif "net/ib" in blob or "mlx5" in blob or "infiniband" in blob or any(f.kind == "ib-error" for f in findings):
        shape.network = "infiniband"
    elif "net/socket" in blob:
        shape.network = "ethernet"
    return shape


def drivers_text(drivers: Sequence[str], shape: JobShape) -> list[dict[str, Any]]:
    out = []
    for d in drivers:
        item: dict[str, Any] = {"driver": d}
        if d == "gpu-count" and shape.gpus:
            item["value"] = shape.gpus
        if d == "network" and shape.network:
            item["value"] = shape.network
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

    def estimate(self, tier: str, gpus: int | None, region: str | None = None) -> dict[str, Any] | None:
        t = dict(self.tiers.get(tier) or {})
        if region:
            if region not in self.regions:
                raise RateCardError(f"region {region!r} is not in the rate card; known: "
                                    f"{', '.join(sorted(self.regions)) or 'none'}")
            t.update((self.regions[region].get("tiers") or {}).get(tier) or {})
        if not t:
            return None
        hours = float(t.get("hours", 0))
        cost = float(t.get("fixed", 0)) + float(t.get("hourly", 0)) * hours + float(t.get("travel", 0))
        out: dict[str, Any] = {"currency": self.currency, "tier_cost": round(cost, 2),
                               "expected_hours": hours, "example_rates": self.example}
        if gpus:
            idle = gpus * self.gpu_hour_cost
            out["idle_cost_per_hour"] = round(idle, 2)
            out["idle_cost_while_waiting"] = round(idle * hours, 2)
            if idle > 0:
                out["tier_cost_in_idle_hours"] = round(cost / idle, 2)
        return out
