"""Small helpers the catalog test files share: what the engine answers for a paste, and which
catalog rows a line matches."""

from __future__ import annotations


def first_cause(engine, text: str):
    """The top cause the engine gives ``text``, or None."""
    d = engine.diagnose_text(text)
    return d.causes[0] if d.causes else None


def ranked(engine, text: str) -> list[tuple[str, str, float]]:
    """(id, category, confidence) of every cause the engine gives ``text``, best first."""
    return [(c.id, c.category, c.confidence) for c in engine.diagnose_text(text).causes]


def row_ids(catalog, line: str) -> set[str]:
    """The ids of the catalog rows that match ``line``."""
    return {row.id for row, _ in catalog.match_line(line)}
