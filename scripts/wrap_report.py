#!/usr/bin/env python3
"""How the diagnosis holds when a log is pasted out of a terminal that cut it at its width.

Every corpus log whose excerpt carries its evidence (hard: false) and whose uncut text gets the
right category is cut at 80, 100, 120 and 160 columns (every longer line split at the exact column,
as a terminal shows it) and diagnosed again, without and with collectors/unwrap.py.

    python scripts/wrap_report.py
"""

import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))

from bot.engine import Engine  # noqa: E402
from collectors import trainlog  # noqa: E402
from corpus_eval import CORPUS, HELDOUT, load_cases, terminal_cut  # noqa: E402


def main() -> int:
    with tempfile.TemporaryDirectory() as tmp:
        engine = Engine(data_dir=tmp)

        def category(text: str) -> str | None:
            d = engine.diagnose_text(text)
            return d.causes[0].category if d.causes else None

        cases = []
        for case in load_cases(CORPUS) + load_cases(HELDOUT):
            text = case.path.read_text(encoding="utf-8", errors="replace")
            if not case.hard and category(text) == case.category:
                cases.append((case, text))
        print(f"{'width':>5} {'logs':>5} {'without unwrap':>15} {'with unwrap':>12}")
        for width in (80, 100, 120, 160):
            limit = trainlog.UNWRAP_LIMIT
            counts = []
            for unwrap_limit in (-1, limit):
                trainlog.UNWRAP_LIMIT = unwrap_limit
                counts.append(sum(category(terminal_cut(text, width)) == c.category for c, text in cases))
            trainlog.UNWRAP_LIMIT = limit
            print(f"{width:5} {len(cases):5} {counts[0]:15} {counts[1]:12}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
