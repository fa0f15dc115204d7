#!/usr/bin/env python3
"""Print category accuracy on the development set (tests/corpus) and the locked held-out set
(tests/heldout) side by side, per category and per framework, beside a keyword grep.

    python scripts/corpus_report.py              # both sets, summary and misses
    python scripts/corpus_report.py --frameworks # add the per-framework tables
"""

import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))

from bot.engine import Engine  # noqa: E402
from corpus_eval import CORPUS, HELDOUT, evaluate, grep_top1, load_cases, summary, table  # noqa: E402


def main() -> int:
    frameworks = "--frameworks" in sys.argv
    with tempfile.TemporaryDirectory() as tmp:
        engine = Engine(data_dir=tmp)
        sets = [("development (tests/corpus)", load_cases(CORPUS))]
        if (HELDOUT / "labels").is_dir():
            sets.append(("held-out (tests/heldout)", load_cases(HELDOUT)))
        rows = []
        for name, cases in sets:
            results = evaluate(engine, cases)
            s = summary(results)
            zh = [r for r in results if r.case.lang == "zh"]
            rows.append((name, s, grep_top1(cases), len(zh)))
            print(f"== {name}")
            print(table(results))
            groups = sorted({r.case.group for r in results})
            if len(groups) > 1:
                print()
                for g in groups:
                    gs = summary([r for r in results if r.case.group == g])
                    print(f"  labels/{g}.jsonl: {gs['n']} logs, top-1 {gs['top1']:.1%}, top-3 {gs['top3']:.1%}")
            # labels that rest on the thread rather than on the excerpt (hard: true) beside the rest
            parts = [(label, [r for r in results if r.case.hard is hard])
                     for label, hard in (("evidence in the excerpt", False), ("label rests on the thread", True))]
            if all(rs for _, rs in parts):
                print()
                for label, rs in parts:
                    hs = summary(rs)
                    print(f"  {label:26} {hs['n']:4} logs, top-1 {hs['top1']:.1%}, top-3 {hs['top3']:.1%}")
            if frameworks:
                print()
                print(table(results, by="framework", misses=False))
            print()
    print(f"{'set':28} {'n':>4} {'top-1':>7} {'top-3':>7} {'XID':>7} {'grep':>7} {'zh':>4}")
    for name, s, grep, zh in rows:
        xid = f"{s['xid']:.1%}" if s["xid_n"] else "-"
        print(f"{name:28} {s['n']:4} {s['top1']:7.1%} {s['top3']:7.1%} {xid:>7} {grep:7.1%} {zh:4}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
