"""Repeat-aware escalation: the same GPU or node failing again and again goes to the vendor.

The history is ``node_events`` in the runbook database: every hardware finding (XID, GPU lost,
uncorrectable ECC, row remapping pending or failed) of a stored incident, per node and per GPU
(its PCI id, with the board serial where a GPU collector named it), and one ``job-failed`` event
per incident for each node that showed a hardware error in it. A burst (the same finding on the same GPU within
:attr:`Thresholds.burst`, e.g. an XID the driver prints ten times in a minute) counts as one event.

The thresholds live here, in one place (:data:`DEFAULT`); :meth:`Thresholds.from_mapping` reads the
same keys from configuration. Each is "more than ``count`` events within ``window``", the current
diagnosis included: the default escalates on the sixth XID of one code on one GPU within 24 hours,
the sixth hardware error of any kind on one GPU within 24 hours, and the third failed job of one
node within 7 days.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from typing import Any, Callable, Iterable, Sequence

HARDWARE_KINDS = ("xid", "gpu-lost", "ecc-error", "row-remap")


@dataclass(frozen=True)
class Threshold:
    more_than: int
    window: timedelta


@dataclass(frozen=True)
class Thresholds:
    same_xid_per_gpu: Threshold = Threshold(5, timedelta(hours=24))
    hardware_per_gpu: Threshold = Threshold(5, timedelta(hours=24))
    node_failed_jobs: Threshold = Threshold(2, timedelta(days=7))
    burst: timedelta = timedelta(minutes=5)

    @classmethod
    def from_mapping(cls, data: dict[str, Any] | None) -> "Thresholds":
        """``{same_xid_per_gpu: {more_than: 5, hours: 24}, node_failed_jobs: {more_than: 2, days: 7},
        burst_minutes: 5}``; keys left out keep their default."""
        data = data or {}
        kw: dict[str, Any] = {}
        for name in ("same_xid_per_gpu", "hardware_per_gpu", "node_failed_jobs"):
            if name in data:
                spec = data[name] or {}
                base: Threshold = getattr(cls, name)
                window = timedelta(days=float(spec.get("days", 0)), hours=float(spec.get("hours", 0))) \
                    or base.window
                kw[name] = Threshold(int(spec.get("more_than", base.more_than)), window)
        if "burst_minutes" in data:
            kw["burst"] = timedelta(minutes=float(data["burst_minutes"]))
        return cls(**kw)


DEFAULT = Thresholds()


def _utc(ts: str | None, default: str) -> str:
    """ISO-8601 in UTC with an offset, so times compare as strings; naive times are taken as UTC."""
    for value in (ts, default):
        if not value:
            continue
        try:
            dt = datetime.fromisoformat(str(value).replace("Z", "+00:00"))
        except ValueError:
            continue
        if dt.tzinfo is None:
            dt = dt.replace(tzinfo=timezone.utc)
        return dt.astimezone(timezone.utc).isoformat(timespec="seconds")
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


def _pci(value: Any) -> str:
    """0000:3b:00, 00000000:3B:00.0 -> 0000:3b:00."""
    m = re.search(r"(?:([0-9a-f]{4,8}):)?([0-9a-f]{2}):([0-9a-f]{2})", str(value or ""), re.I)
    if not m:
        return ""
    domain = (m.group(1) or "0000")[-4:]
    return f"{domain}:{m.group(2)}:{m.group(3)}".lower()


def _counts(f: dict[str, Any]) -> bool:
    a = f.get("attrs") or {}
    if f.get("kind") == "ecc-error":
        return a.get("type") != "correctable"
    if f.get("kind") == "row-remap":
        return any(str(a.get(k, "")).lower() in ("yes", "true", "1") for k in ("pending", "failure")) \
            or (isinstance(a.get("uncorrectable"), int) and a["uncorrectable"] > 0)
    return f.get("kind") in HARDWARE_KINDS


def failing_nodes(doc: dict[str, Any]) -> list[str]:
    nodes = []
    fe = doc.get("first_error") or {}
    if fe.get("node"):
        nodes.append(str(fe["node"]))
    for f in doc.get("findings") or []:
        if f.get("kind") in HARDWARE_KINDS and f.get("node") and _counts(f) and f["node"] not in nodes:
            nodes.append(str(f["node"]))
    return nodes


def events_from_doc(doc: dict[str, Any], created: str) -> list[dict[str, Any]]:
    """The history rows of one diagnosis: its hardware findings (with a node) and its failed node(s)."""
    findings = doc.get("findings") or []
    gpus: dict[tuple[str, str], dict[str, Any]] = {}  # (node, pci or index) -> gpu facts (serial)
    for f in findings:
        if f.get("kind") == "gpu" and f.get("node"):
            a = f.get("attrs") or {}
            for key in (_pci(a.get("bus_id")), str(a.get("index", ""))):
                if key:
                    gpus[(f["node"], key)] = a
    events = []
    for f in findings:
        if f.get("kind") not in HARDWARE_KINDS or not f.get("node") or not _counts(f):
            continue
        a = f.get("attrs") or {}
        pci = _pci(a.get("pci"))
        facts = gpus.get((f["node"], pci)) or gpus.get((f["node"], str(a.get("gpu", "")))) or {}
        gpu = pci or _pci(facts.get("bus_id")) or (f"gpu{a['gpu']}" if a.get("gpu") is not None else "")
        code = a.get("code") if f["kind"] == "xid" else a.get("type") or ""
        events.append({"node": str(f["node"]), "gpu": gpu, "serial": str(facts.get("serial") or ""),
                       "kind": f["kind"], "code": str(code if code is not None else ""),
                       "at": _utc(f.get("ts"), created), "line": (f.get("line") or "")[:500]})
    # a job counts against a node when the node showed a hardware error in it (a code bug on
    # rank 0's node is not the node's fault)
    for node in sorted({e["node"] for e in events}):
        events.append({"node": node, "gpu": "", "serial": "", "kind": "job-failed", "code": "",
                       "at": _utc(None, created), "line": ""})
    return events


def _bursts(times: Iterable[str], burst: timedelta) -> list[datetime]:
    """Sorted event times with those within ``burst`` of a burst's first event folded into it."""
    starts: list[datetime] = []
    for t in sorted(datetime.fromisoformat(x) for x in times):
        if not starts or t - starts[-1] > burst:
            starts.append(t)
    return starts


@dataclass
class Escalation:
    tier: str = "vendor"
    reasons: list[dict[str, Any]] = field(default_factory=list)

    @property
    def nodes(self) -> list[str]:
        return sorted({r["node"] for r in self.reasons})

    def to_json(self) -> dict[str, Any]:
        return {"tier": self.tier, "nodes": self.nodes, "reasons": self.reasons}


HistoryFn = Callable[[str, str], Sequence[dict[str, Any]]]  # (node, since ISO) -> node_events rows


def evaluate(doc: dict[str, Any], history: HistoryFn, *, now: str | None = None,
             thresholds: Thresholds = DEFAULT) -> Escalation | None:
    """Escalate when this diagnosis, added to the node's history, crosses a threshold."""
    now = _utc(None, now or "")
    current = events_from_doc(doc, now)
    if not current:
        return None
    th = thresholds
    longest = max(th.same_xid_per_gpu.window, th.hardware_per_gpu.window, th.node_failed_jobs.window)
    reasons: list[dict[str, Any]] = []
    for node in sorted({e["node"] for e in current}):
        mine = [e for e in current if e["node"] == node]
        since = (min(datetime.fromisoformat(e["at"]) for e in mine) - longest).isoformat(timespec="seconds")
        past = [dict(r) for r in history(node, since)]
        seen = {(r["kind"], r["line"], r["at"]) for r in past if r["kind"] != "job-failed"}
        new = [{**e, "job": str(doc.get("job") or "")} for e in mine
               if e["kind"] == "job-failed" or (e["kind"], e["line"], e["at"]) not in seen]
        rows = past + new

        def count(select, threshold: Threshold, end: datetime) -> int:
            start = end - threshold.window
            times = [r["at"] for r in rows if select(r) and start <= datetime.fromisoformat(r["at"]) <= end]
            return len(_bursts(times, th.burst))

        def latest(events: list[dict[str, Any]]) -> datetime:
            return max(datetime.fromisoformat(e["at"]) for e in events)

        hw = [e for e in new if e["kind"] in HARDWARE_KINDS and e["gpu"]]
        for gpu, code in sorted({(e["gpu"], e["code"]) for e in hw if e["kind"] == "xid"}):
            end = latest([e for e in hw if e["kind"] == "xid" and e["gpu"] == gpu and e["code"] == code])
            n = count(lambda r: r["kind"] == "xid" and r["gpu"] == gpu and r["code"] == code,
                      th.same_xid_per_gpu, end)
            if n > th.same_xid_per_gpu.more_than:
                reasons.append({"rule": "same_xid_per_gpu", "node": node, "gpu": gpu, "serial": _serial(rows, gpu),
                                "code": code, "count": n, "hours": _hours(th.same_xid_per_gpu.window),
                                "burst_minutes": _minutes(th.burst)})
        for gpu in sorted({e["gpu"] for e in hw}):
            if any(r["rule"] == "same_xid_per_gpu" and r["gpu"] == gpu and r["node"] == node for r in reasons):
                continue
            # one line can yield two findings (an XID 79 is also "GPU lost"): bursts fold them into one
            end = latest([e for e in hw if e["gpu"] == gpu])
            n = count(lambda r: r["kind"] in HARDWARE_KINDS and r["gpu"] == gpu, th.hardware_per_gpu, end)
            if n > th.hardware_per_gpu.more_than:
                reasons.append({"rule": "hardware_per_gpu", "node": node, "gpu": gpu, "serial": _serial(rows, gpu),
                                "count": n, "hours": _hours(th.hardware_per_gpu.window),
                                "burst_minutes": _minutes(th.burst)})
        failed = [e for e in new if e["kind"] == "job-failed"]
        if failed:
            start = latest(failed) - th.node_failed_jobs.window
            jobs = {(r.get("job") or r.get("incident_id") or "current")
                    for r in rows if r["kind"] == "job-failed" and datetime.fromisoformat(r["at"]) >= start}
            if len(jobs) > th.node_failed_jobs.more_than:
                reasons.append({"rule": "node_failed_jobs", "node": node, "count": len(jobs),
                                "days": _hours(th.node_failed_jobs.window / 24)})
    return Escalation(reasons=reasons) if reasons else None


def _serial(rows: Sequence[dict[str, Any]], gpu: str) -> str:
    return next((r["serial"] for r in rows if r.get("gpu") == gpu and r.get("serial")), "")


def _minutes(window: timedelta) -> int:
    return int(window.total_seconds() // 60)


def _hours(window: timedelta) -> float:
    hours = window.total_seconds() / 3600
    return int(hours) if hours == int(hours) else round(hours, 1)
