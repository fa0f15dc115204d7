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
