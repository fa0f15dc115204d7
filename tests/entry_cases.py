"""The checks the entry test files share: a real line is diagnosed as its entry, first; a line that
looks alike does not bring the entry; every entry tested has sources and its own Chinese."""


def diagnosed_first(engine, eid: str, line: str, source: str) -> None:
    d = engine.diagnose_text(line)
    assert d.causes, f"no cause for {line!r} ({source})"
    assert d.causes[0].id == eid, [(c.id, c.confidence) for c in d.causes]
    assert d.causes[0].confidence >= 0.5
    assert d.causes[0].evidence and d.causes[0].evidence[0].line.strip()


def not_brought(engine, eid: str, line: str) -> None:
    d = engine.diagnose_text(line)
    assert eid not in [c.id for c in d.causes], [(c.id, c.confidence) for c in d.causes]


def each_has_a_line_a_near_miss_and_sources(engine, match: list, near_miss: list) -> None:
    ids = {m[0] for m in match}
    assert ids == {n[0] for n in near_miss}
    entries = {e.id: e for e in engine.matcher.entries}
    for eid in ids:
        e = entries[eid]
        assert e.references and all(r.startswith("https://") for r in e.references), eid
        assert e.title["zh"] != e.title["en"] and e.cause["zh"] != e.cause["en"], eid
