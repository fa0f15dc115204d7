"""Score the engine against the labelled corpus of real logs (tests/corpus/).

Used by tests/test_corpus.py (asserts the accuracy targets) and scripts/corpus_report.py
(prints the table per category).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

CORPUS = Path(__file__).resolve().parent / "corpus"


@dataclass
class Case:
    file: str
    category: str
    failure: str
    source: str
    hard: bool

    @property
    def path(self) -> Path:
        return CORPUS / self.file


def load_cases() -> list[Case]:
    cases = []
    for labels in sorted((CORPUS / "labels").glob("*.jsonl")):
        for n, line in enumerate(labels.read_text(encoding="utf-8").splitlines(), 1):
            if not line.strip():
                continue
            row = json.loads(line)
            cases.append(Case(row["file"], row["category"], row.get("failure", ""), row["source"],
                              bool(row.get("hard"))))
    return cases


@dataclass
class Result:
    case: Case
    predicted: list[str]  # categories of the ranked causes, best first

    @property
    def top1(self) -> bool:
        return bool(self.predicted) and self.predicted[0] == self.case.category

    @property
    def top3(self) -> bool:
        return self.case.category in self.predicted[:3]


def evaluate(engine, cases: list[Case] | None = None) -> list[Result]:
    results = []
    for case in cases or load_cases():
        diagnosis = engine.diagnose_paths([str(case.path)])
        cats: list[str] = []
        for cause in diagnosis.causes:
            if cause.category not in cats:
                cats.append(cause.category)
        results.append(Result(case, cats))
    return results


def table(results: list[Result]) -> str:
    cats = sorted({r.case.category for r in results})
    rows = [f"{'category':20} {'n':>4} {'top-1':>7} {'top-3':>7}"]
    for cat in cats + ["ALL"]:
        rs = [r for r in results if cat == "ALL" or r.case.category == cat]
        top1 = sum(r.top1 for r in rs) / len(rs)
        top3 = sum(r.top3 for r in rs) / len(rs)
        rows.append(f"{cat:20} {len(rs):4} {top1:7.1%} {top3:7.1%}")
    misses = [r for r in results if not r.top1]
    if misses:
        rows.append("\nmisses (top-1):")
        for r in misses:
            rows.append(f"  {r.case.file}: want {r.case.category}, got {r.predicted[:3] or 'no confident cause'}")
    return "\n".join(rows)
