"""Catalog look-ups for XID codes (the table itself is generated: see scripts/gen_xid_catalog.py)."""

from __future__ import annotations

from typing import Any, Iterable


def describe(codes: Iterable[int], lang: str = "en") -> list[dict[str, Any]]:
    """One row per distinct code, in the order first seen: name, action, whether it is hardware."""
    from knowledge.xid_catalog import XID

    out, seen = [], set()
    for code in codes:
        if code in seen or not isinstance(code, int):
            continue
        seen.add(code)
        row = XID.get(code)
        if row is None:
            out.append({"code": code, "name": "not in the catalog" if lang == "en" else "不在目录中",
                        "action": "", "hardware": None, "bucket": None})
            continue
        zh = lang == "zh"
        out.append({"code": code, "name": row.get("name_zh") if zh and row.get("name_zh") else row["name"],
                    "action": row.get("action_zh") if zh and row.get("action_zh") else row["action"],
                    "hardware": row.get("hardware"), "bucket": row.get("bucket")})
    return out
