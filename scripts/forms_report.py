#!/usr/bin/env python3
"""How the diagnosis holds when a log arrives in another form than the one it was printed in.

Every line of every development-set log is dressed as it would reach us by another path (a Docker
json-file log, a CRI log as kubectl reads it, kubectl/compose/Ray/journald prefixes, a page's HTML
source, an e-mail quote, ANSI colours, an editor's line numbers) and the log is diagnosed again.
Printed: per form, how many logs keep the right category, and which logs the form loses (right
undressed, wrong dressed).

    python scripts/forms_report.py [FORM ...]
"""

import html
import json
import re
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))

from bot.engine import Engine  # noqa: E402
from corpus_eval import CORPUS, load_cases  # noqa: E402

FORMS = {
    "ansi": lambda l: re.sub(r"\b(ERROR|WARNING|WARN|Error|error)\b", "\x1b[31m\\1\x1b[0m", l),
    "quote": lambda l: "> " + l,
    "html": html.escape,
    "iso-time": lambda l: "2024-05-02T03:14:07.741Z " + l,
    "kubectl-prefix": lambda l: "[pod/trainer-worker-3/pytorch] " + l,
    "compose": lambda l: "trainer-1  | " + l,
    "ray": lambda l: "(RayTrainWorker pid=1234, ip=10.0.0.1) " + l,
    "cri": lambda l: "2024-05-02T03:14:07.741223011Z stderr F " + l,
    "docker-json": lambda l: json.dumps({"log": l + "\n", "stream": "stderr", "time": "2024-05-02T03:14:07.741223011Z"},
                                        ensure_ascii=False),
    "journald": lambda l: "Dec 03 18:00:00 gpu-node-07 python[12345]: " + l,
    "tab": lambda l: "\t" + l,
}


def dress(text: str, form: str) -> str:
    lines = text.split("\n")
    if form == "line-numbers":
        return "\n".join(f"{i + 1:4d} | {line}" for i, line in enumerate(lines))
    return "\n".join(FORMS[form](line) if line else line for line in lines)


def main() -> int:
    forms = sys.argv[1:] or [*FORMS, "line-numbers"]
    with tempfile.TemporaryDirectory() as tmp:
        engine = Engine(data_dir=tmp)

        def category(text: str) -> str | None:
            d = engine.diagnose_text(text)
            return d.causes[0].category if d.causes else None

        cases = [(c, c.path.read_text(encoding="utf-8", errors="replace")) for c in load_cases(CORPUS)]
        plain = {c.file: category(t) == c.category for c, t in cases}
        print(f"{'form':16} {'right':>7} of {len(cases)}  (undressed: {sum(plain.values())})  lost")
        for form in forms:
            right, lost = 0, []
            for case, text in cases:
                ok = category(dress(text, form)) == case.category
                right += ok
                if plain[case.file] and not ok:
                    lost.append(Path(case.file).stem)
            print(f"{form:16} {right:7}      {len(lost):3}  {', '.join(lost[:3])}{' ...' if len(lost) > 3 else ''}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
