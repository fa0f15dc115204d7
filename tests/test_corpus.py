"""Accuracy over the corpus of real logs users posted in public issue trackers."""

from corpus_eval import evaluate, load_cases, table


def test_corpus_is_large_and_labelled():
    cases = load_cases()
    assert len(cases) >= 60
    cats = {c.category for c in cases}
    assert len(cats) == 8, f"every category needs real logs; have {sorted(cats)}"
    for case in cases:
        assert case.path.is_file(), f"label without a file: {case.file}"
        assert case.source.startswith("https://"), case.file
    assert len({c.file for c in cases}) == len(cases), "a file is labelled twice"


def test_category_accuracy(engine):
    results = evaluate(engine)
    top1 = sum(r.top1 for r in results) / len(results)
    top3 = sum(r.top3 for r in results) / len(results)
    report = table(results)
    assert top1 >= 0.90, report
    assert top3 >= 0.98, report


def test_heldout_set_is_locked_apart_and_reported(engine, capsys):
    """The held-out set: real logs from threads the development set never used. Nothing is tuned on
    it; this test keeps it apart from the development set and prints its figure for the record."""
    from corpus_eval import CORPUS, HELDOUT, summary

    if not (HELDOUT / "labels").is_dir():
        import pytest

        pytest.skip("no held-out set in this checkout")
    held = load_cases(HELDOUT)
    dev = load_cases(CORPUS)
    assert len(held) >= 150
    assert not {c.source for c in held} & {c.source for c in dev}, "a thread is in both sets"
    assert len({c.source for c in held}) == len(held), "one excerpt per thread"
    assert sum(c.lang == "zh" for c in held) >= 0.15 * len(held)
    for case in held:
        assert case.path.is_file(), case.file
    results = evaluate(engine, held)
    s = summary(results)
    with capsys.disabled():
        print(f"\nheld-out: {s['n']} logs, top-1 {s['top1']:.1%}, top-3 {s['top3']:.1%}, XID {s['xid']:.1%}")
    # a floor well below the target: it catches a collapse, it is not the figure we tune for
    assert s["top1"] >= 0.70, table(results)
