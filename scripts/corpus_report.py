#!/usr/bin/env python3
"""Print top-1 / top-3 category accuracy over the labelled corpus of real logs, per category.

    python scripts/corpus_report.py
"""

import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))

from bot.engine import Engine  # noqa: E402
from corpus_eval import evaluate, table  # noqa: E402

with tempfile.TemporaryDirectory() as tmp:
    print(table(evaluate(Engine(data_dir=tmp))))
