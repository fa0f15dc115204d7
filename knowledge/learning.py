"""Ranking that learns from the team's feedback, and similar past incidents.

A **signature** is what makes two incidents "the same failure": the first error line, reduced to the
error itself (:func:`error_text`: a progress bar, a carriage-return overwrite, a rank/host/time prefix
glued to its front removed), normalised with :func:`knowledge.match.normalise` (numbers, hex and PCI addresses, PIDs, ranks and the digits
of host names gone, lower-cased, punctuation out), then ``|`` and the sorted kinds of the findings
(``gpu-lost,xid``). Two signatures are **similar** when their kinds agree and the lines score at
least :data:`SIMILAR` with rapidfuzz's ``token_sort_ratio`` (word order and a changed word or two
do not matter; a different error does).

**Feedback moves a cause**: for each cause the matcher scored, every "Confirmed" on a similar past
incident adds :data:`W_CONFIRMED` (up to :data:`MAX_CONFIRMED`), every "Not it" subtracts
:data:`W_REJECTED` (up to :data:`MAX_REJECTED`). Only causes that matched the new evidence move: the
team's confirmations never conjure a cause the log does not support. The amount is an explain line
("+0.15: confirmed 3x by the team for this signature").
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Iterable, Sequence

from rapidfuzz import fuzz, process

from collectors.said import Said
from knowledge.match import normalise

SIMILAR = 85.0
W_CONFIRMED = 0.1
MAX_CONFIRMED = 0.3
W_REJECTED = 0.1
MAX_REJECTED = 0.3
# kinds that describe the machine rather than the failure: they vary between pastes of the same error
_NOISE_KINDS = {"version", "gpu", "gpu-process", "net-link", "ib-port", "host-memory", "disk-usage", "shm-usage",
                "memlock", "dataloader-workers", "gpu-nic-affinity", "pcie-link", "nic-counter", "disk-io",
                "python-exception", "node-mismatch"}


def signature(first_line: str | None, kinds: Iterable[str]) -> str:
    line = normalise(error_text(first_line or ""))
    wanted = sorted({k for k in kinds if k and k not in _NOISE_KINDS})
    return f"{line}|{','.join(wanted)}" if line or wanted else ""


def error_text(line: str) -> str:
    """The error itself: what a progress bar drawn on the same line (tqdm), a carriage-return
    overwrite, or a rank/host/time prefix leaves of it (:func:`collectors.trainlog.clean_line`)."""
    from collectors.trainlog import clean_line

    return clean_line(line).text


def signature_of_doc(doc: dict[str, Any]) -> str:
    """The signature of a stored reply document (``bot.render.as_dict``)."""
    fe = doc.get("first_error") or {}
    line = fe.get("line")
    if not line:
        top = (doc.get("causes") or [{}])[0]
        line = next((e.get("line") for e in top.get("evidence") or []), "")
    return signature(line, (f.get("kind") for f in doc.get("findings") or []))


def _split(sig: str) -> tuple[str, frozenset[str]]:
    line, _, kinds = sig.rpartition("|")
    return line, frozenset(k for k in kinds.split(",") if k)


def similarity(a: str, b: str) -> float:
    """0-100: how alike two signatures are (0 when their finding kinds differ)."""
    la, ka = _split(a)
    lb, kb = _split(b)
    if ka != kb:
        return 0.0
    if not la and not lb:
        return 100.0 if ka else 0.0
    return float(fuzz.token_sort_ratio(la, lb))


def similar_signatures(sig: str, candidates: Sequence[str], cutoff: float = SIMILAR) -> dict[str, float]:
    """Those of ``candidates`` similar to ``sig``, with their score."""
    if not sig:
        return {}
    line, kinds = _split(sig)
    same_kinds = sorted({c for c in candidates if _split(c)[1] == kinds})
    if not same_kinds:
        return {}
    if not line:
        return {c: 100.0 for c in same_kinds if not _split(c)[0]}
    hits = process.extract(line, [_split(c)[0] for c in same_kinds], scorer=fuzz.token_sort_ratio,
                           score_cutoff=cutoff, limit=None)
    return {same_kinds[i]: float(score) for _, score, i in hits}


@dataclass
class Adjustment:
    cause_id: str
    confirmed: int
    rejected: int
    delta: float
    explain: Said


def adjustments(sig: str, verdicts: Sequence[dict[str, Any]]) -> dict[str, Adjustment]:
    """How much the team's feedback on similar incidents moves each cause."""
    close = similar_signatures(sig, [v["signature"] for v in verdicts])
    counts: dict[str, list[int]] = {}
    for v in verdicts:
        if v["signature"] in close:
            c = counts.setdefault(v["cause_id"], [0, 0])
            c[0 if v["verdict"] == "confirmed" else 1] += 1
    out = {}
    for cause, (yes, no) in counts.items():
        up = min(yes * W_CONFIRMED, MAX_CONFIRMED)
        down = min(no * W_REJECTED, MAX_REJECTED)
        delta = round(up - down, 3)
        parts, parts_zh = [], []
        if yes:
            parts.append(f"confirmed {yes}x")
            parts_zh.append(f"确认 {yes} 次")
        if no:
            parts.append(f"marked 'Not it' {no}x")
            parts_zh.append(f"标为“不是它” {no} 次")
        text = Said(f"{delta:+.2f}: {' and '.join(parts)} by the team for this signature",
                    f"{delta:+.2f}：团队对这一特征{'、'.join(parts_zh)}")
        out[cause] = Adjustment(cause, yes, no, delta, text)
    return out


def apply(causes: list, adjust: dict[str, Adjustment]) -> list:
    """Move each matched cause by its adjustment, add the explain line, re-rank; best first."""
    for cause in causes:
        adj = adjust.get(cause.id)
        if adj is None or not adj.delta:
            continue
        cause.confidence = round(min(max(cause.confidence + adj.delta, 0.0), 0.99), 3)
        cause.explain.append(adj.explain)
        cause.learned = adj.delta
    causes.sort(key=lambda c: (-c.confidence, c.entry.origin != "curated"))
    return causes


def similar_incidents(sig: str, verdicts: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """Confirmed past incidents with a similar signature, grouped by the confirmed cause, most seen first:
    ``{"cause_id", "count", "last", "node", "incidents"}``."""
    close = similar_signatures(sig, [v["signature"] for v in verdicts if v["verdict"] == "confirmed"])
    groups: dict[str, dict[str, Any]] = {}
    for v in verdicts:
        if v["verdict"] != "confirmed" or v["signature"] not in close:
            continue
        g = groups.setdefault(v["cause_id"], {"cause_id": v["cause_id"], "incidents": {}, "last": "", "node": ""})
        g["incidents"][v["incident_id"]] = v["created"]
        if v["created"] >= g["last"]:
            g["last"], g["node"] = v["created"], v["node"] or g["node"]
    out = [{"cause_id": g["cause_id"], "count": len(g["incidents"]), "last": g["last"], "node": g["node"],
            "incidents": sorted(g["incidents"], key=g["incidents"].get, reverse=True)} for g in groups.values()]
    out.sort(key=lambda g: (-g["count"], g["last"]), reverse=False)
    return out
